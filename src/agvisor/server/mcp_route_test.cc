// /mcp's header checks against a real server on loopback (no Docker: nothing here reaches a
// tool): a browser page of another origin is refused (403: DNS rebinding), an unknown
// MCP-Protocol-Version gets 400, loopback origins and clients without Origin are served.
#include "agvisor/server/mcp_route.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <map>
#include <string>
#include <thread>

#include "agvisor/base/unique_fd.h"

namespace agvisor::server {
namespace {

constexpr char kToken[] = "t0ken";
constexpr char kInitialize[] =
    R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",)"
    R"("capabilities":{},"clientInfo":{"name":"t","version":"1"}}})";

class McpRouteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions so;
    so.tcp_listen = "127.0.0.1:0";
    so.token = kToken;
    so.shutdown_grace = std::chrono::seconds(2);
    auto s = Server::Bind(so);
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    server_ = std::move(*s);
    server_->SetHandlers(
        [](const HttpRequest&, const api::RouteMatch&) {
          return HttpResponse{404, "application/json", "{}", {}};
        },
        [](const HttpRequest&, const api::RouteMatch&, WebSocket&) {});
    ASSERT_TRUE(MountMcp(*server_, {}).ok());
    thread_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    server_->Shutdown();
    thread_.join();
  }

  // One request on a new connection; the whole answer (status line, headers, body).
  std::string Send(const std::string& method, const std::map<std::string, std::string>& headers,
                   const std::string& body = "") {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_->tcp_port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    std::string req =
        method + " /mcp HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(server_->tcp_port()) +
        "\r\nAuthorization: Bearer " + kToken + "\r\nContent-Type: application/json\r\n" +
        "Accept: application/json, text/event-stream\r\nConnection: close\r\n" +
        "Content-Length: " + std::to_string(body.size()) + "\r\n";
    for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
    req += "\r\n" + body;
    EXPECT_EQ(::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(req.size()));
    std::string got;
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    return got;
  }
  static int Status(const std::string& answer) {
    return answer.size() > 12 ? std::stoi(answer.substr(9, 3)) : 0;
  }

  std::unique_ptr<Server> server_;
  std::thread thread_;
};

TEST_F(McpRouteTest, APageOfAnotherOriginIsRefused) {
  // A page of evil.example whose name resolves to 127.0.0.1 (DNS rebinding) sends this Origin.
  for (const char* origin : {"http://evil.example", "http://evil.example:8080", "null",
                             "https://127.0.0.1.evil.example", "http://localhost.evil.example"}) {
    const std::string got = Send("POST", {{"Origin", origin}}, kInitialize);
    EXPECT_EQ(Status(got), 403) << origin << ": " << got;
    EXPECT_NE(got.find("another origin"), std::string::npos) << got;
    EXPECT_EQ(got.find("Mcp-Session-Id"), std::string::npos) << got;
  }
  EXPECT_EQ(Status(Send("DELETE", {{"Origin", "http://evil.example"}, {"Mcp-Session-Id", "x"}})),
            403);
  // GET too (it answers 405 to everyone else): every method passes the checks.
  EXPECT_EQ(Status(Send("GET", {{"Origin", "http://evil.example"}})), 403);
  EXPECT_EQ(Status(Send("GET", {{"MCP-Protocol-Version", "1999-01-01"}})), 400);
  EXPECT_EQ(Status(Send("GET", {})), 405);
}

TEST_F(McpRouteTest, AnUnknownProtocolVersionHeaderIsRefused) {
  const std::string got = Send("POST", {{"MCP-Protocol-Version", "1999-01-01"}}, kInitialize);
  EXPECT_EQ(Status(got), 400) << got;
  EXPECT_NE(got.find("MCP-Protocol-Version"), std::string::npos) << got;
  EXPECT_NE(got.find(std::string(mcp::kProtocolVersions[0])), std::string::npos) << got;
}

TEST_F(McpRouteTest, LoopbackOriginsKnownVersionsAndNoOriginAreServed) {
  for (const std::map<std::string, std::string>& headers :
       std::initializer_list<std::map<std::string, std::string>>{
           {},
           {{"Origin", "http://127.0.0.1:8080"}, {"MCP-Protocol-Version", "2025-06-18"}},
           {{"Origin", "http://localhost"}},
           {{"Origin", "https://[::1]:3000"}}}) {
    const std::string got = Send("POST", headers, kInitialize);
    EXPECT_EQ(Status(got), 200) << got;
    EXPECT_NE(got.find("Mcp-Session-Id"), std::string::npos) << got;
  }
}

// A notification is accepted with 202 and no body, so no Content-Type claims one (issue 33).
TEST_F(McpRouteTest, ANotificationIsAcceptedWithoutABodyOrItsType) {
  const std::string init = Send("POST", {}, kInitialize);
  ASSERT_EQ(Status(init), 200) << init;
  const auto at = init.find("Mcp-Session-Id: ");
  ASSERT_NE(at, std::string::npos) << init;
  const auto start = at + std::string("Mcp-Session-Id: ").size();
  const std::string id = init.substr(start, init.find("\r\n", start) - start);
  const std::string got = Send("POST", {{"Mcp-Session-Id", id}},
                               R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  EXPECT_EQ(Status(got), 202) << got;
  const std::string head = got.substr(0, got.find("\r\n\r\n"));
  EXPECT_EQ(head.find("Content-Type"), std::string::npos) << got;
  EXPECT_NE(head.find("Content-Length: 0"), std::string::npos) << got;
}

TEST(McpOriginAllowedTest, LoopbackOnly) {
  EXPECT_TRUE(McpOriginAllowed(""));
  EXPECT_TRUE(McpOriginAllowed("http://127.0.0.1"));
  EXPECT_TRUE(McpOriginAllowed("HTTP://LOCALHOST:80"));
  EXPECT_TRUE(McpOriginAllowed("http://127.1.2.3:65535"));
  EXPECT_TRUE(McpOriginAllowed("http://[::1]"));
  EXPECT_FALSE(McpOriginAllowed("http://[::1"));
  EXPECT_FALSE(McpOriginAllowed("http://localhost:"));
  EXPECT_FALSE(McpOriginAllowed("http://localhost:80/path"));
  EXPECT_FALSE(McpOriginAllowed("http://user@localhost"));
  EXPECT_FALSE(McpOriginAllowed("http://128.0.0.1"));
  EXPECT_FALSE(McpOriginAllowed("ws://localhost"));
  EXPECT_FALSE(McpOriginAllowed("file://"));
}

}  // namespace
}  // namespace agvisor::server
