// A browser's way in, against real loopback clients (no Docker): WebSockets authenticated by
// their first message (a browser cannot set an Authorization header on one), bounded in time and
// size and refused with a close code and a reason; the Authorization header still works; pages of
// another origin cannot open them; and the console's page with its Content-Security-Policy.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "agvisor/api/codec.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/server/console_route.h"
#include "agvisor/server/daemon.h"
#include "agvisor/server/server.h"

namespace agvisor::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bws = beast::websocket;
using Clock = std::chrono::steady_clock;

// A server on 127.0.0.1:0 with the console mounted. Its WebSocket routes say "welcome", then
// echo one message.
class RunningServer {
 public:
  RunningServer() {
    ServerOptions so;
    so.tcp_listen = "127.0.0.1:0";
    so.token = "t0ken";
    so.ws_auth_timeout = std::chrono::seconds(1);
    so.shutdown_grace = std::chrono::seconds(2);
    auto s = Server::Bind(so);
    EXPECT_TRUE(s.ok()) << s.error().ToString();
    server_ = std::move(*s);
    server_->SetHandlers(
        [](const HttpRequest&, const api::RouteMatch&) {
          return HttpResponse{200, "application/json", "{\"ok\":true}", {}};
        },
        [](const HttpRequest&, const api::RouteMatch&, WebSocket& ws) {
          (void)ws.Send("welcome", false);
          auto m = ws.Receive();
          if (m.ok() && m->has_value()) (void)ws.Send("echo:" + (*m)->data, false);
        });
    EXPECT_TRUE(MountConsole(*server_).ok());
    thread_ = std::thread([this] { server_->Run(); });
  }
  ~RunningServer() {
    server_->Shutdown();
    thread_.join();
  }
  std::uint16_t port() const { return server_->tcp_port(); }
  std::string host() const { return "127.0.0.1:" + std::to_string(port()); }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

// A WebSocket client as a browser or a native client would be.
class Client {
 public:
  // The HTTP status of the upgrade's answer (101 when it was accepted).
  int Connect(const RunningServer& srv, const std::map<std::string, std::string>& headers,
              const std::string& target = "/v1/sandboxes/x/exec/ws") {
    net::ip::tcp::socket sock(ioc_);
    beast::error_code ec;
    sock.connect({net::ip::make_address("127.0.0.1"), srv.port()}, ec);
    if (ec) return 0;
    ws_.emplace(std::move(sock));
    ws_->set_option(bws::stream_base::decorator([headers](bws::request_type& r) {
      for (const auto& [k, v] : headers) r.set(k, v);
    }));
    bws::response_type res;
    ws_->handshake(res, srv.host(), target, ec);
    return res.result_int();
  }
  void Send(const std::string& s, bool binary = false) {
    ws_->binary(binary);
    ws_->write(net::buffer(s));
  }
  // The next message; nullopt once the server closed (code() and reason() say how).
  std::optional<std::string> Read() {
    beast::flat_buffer buf;
    beast::error_code ec;
    ws_->read(buf, ec);
    if (ec) return std::nullopt;
    return beast::buffers_to_string(buf.data());
  }
  int code() const { return ws_->reason().code; }
  std::string reason() const { return std::string(ws_->reason().reason.c_str()); }

 private:
  net::io_context ioc_;
  std::optional<bws::stream<net::ip::tcp::socket>> ws_;
};

// One GET (or `method`) on a new connection; the whole answer (status line, headers, body).
std::string Get(std::uint16_t port, const std::string& target, const std::string& method = "GET") {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                    "\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[65536];
  for (;;) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) break;
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

TEST(WsFirstMessageAuthTest, TheAuthorizationHeaderStillWorks) {
  RunningServer srv;
  Client c;
  ASSERT_EQ(c.Connect(srv, {{"Authorization", "Bearer t0ken"}}), 101);
  EXPECT_EQ(c.Read(), "welcome");
  c.Send("x");
  EXPECT_EQ(c.Read(), "echo:x");
  Client wrong;
  EXPECT_EQ(wrong.Connect(srv, {{"Authorization", "Bearer nope"}}), 401);
}

TEST(WsFirstMessageAuthTest, TheTokenAsTheFirstMessageOpensTheStream) {
  RunningServer srv;
  Client c;
  ASSERT_EQ(c.Connect(srv, {{"Origin", "http://" + srv.host()}}), 101);
  c.Send(api::WsAuthJson("t0ken"));
  EXPECT_EQ(c.Read(), "welcome");
  c.Send("x");
  EXPECT_EQ(c.Read(), "echo:x");
}

TEST(WsFirstMessageAuthTest, AWrongTokenIsClosedWithAReason) {
  RunningServer srv;
  Client c;
  ASSERT_EQ(c.Connect(srv, {}), 101);
  c.Send(api::WsAuthJson("t0kem"));
  EXPECT_EQ(c.Read(), std::nullopt);  // the handler never ran: no "welcome"
  EXPECT_EQ(c.code(), kCloseWsAuthRejected);
  EXPECT_NE(c.reason().find("token is wrong"), std::string::npos) << c.reason();
}

TEST(WsFirstMessageAuthTest, NoMessageWithinTheBoundIsClosed) {
  RunningServer srv;
  Client c;
  ASSERT_EQ(c.Connect(srv, {}), 101);
  const auto start = Clock::now();
  EXPECT_EQ(c.Read(), std::nullopt);
  const auto waited = Clock::now() - start;
  EXPECT_EQ(c.code(), kCloseWsAuthProtocol);
  EXPECT_NE(c.reason().find("within 1 s"), std::string::npos) << c.reason();
  EXPECT_GE(waited, std::chrono::milliseconds(900));
  EXPECT_LE(waited, std::chrono::seconds(5));
}

TEST(WsFirstMessageAuthTest, AnOversizeFirstMessageIsClosed) {
  RunningServer srv;
  Client c;
  ASSERT_EQ(c.Connect(srv, {}), 101);
  // The right token, but inside a message past the bound: refused without reading it all.
  std::string big = api::WsAuthJson("t0ken");
  big.insert(1, std::string(kWsAuthMessageBytes, ' '));
  c.Send(big);
  EXPECT_EQ(c.Read(), std::nullopt);
  EXPECT_EQ(c.code(), kCloseWsAuthTooBig);
  EXPECT_NE(c.reason().find("over 4096 bytes"), std::string::npos) << c.reason();
}

TEST(WsFirstMessageAuthTest, AMessageOfAnotherShapeIsClosed) {
  RunningServer srv;
  for (const auto& [first, binary] : {std::pair<std::string, bool>{"t0ken", false},
                                      {api::WsAuthJson("t0ken"), true},
                                      {R"({"type":"resize","rows":2,"cols":3})", false}}) {
    Client c;
    ASSERT_EQ(c.Connect(srv, {}), 101);
    c.Send(first, binary);
    EXPECT_EQ(c.Read(), std::nullopt) << first;
    EXPECT_EQ(c.code(), kCloseWsAuthProtocol) << first;
    EXPECT_NE(c.reason().find(R"({"type":"auth","token")"), std::string::npos) << c.reason();
  }
}

TEST(WsFirstMessageAuthTest, APageOfAnotherOriginIsRefused) {
  RunningServer srv;
  Client c;
  EXPECT_EQ(c.Connect(srv, {{"Origin", "http://evil.example"}}), 403);
  Client with_header;
  EXPECT_EQ(with_header.Connect(
                srv, {{"Origin", "http://evil.example"}, {"Authorization", "Bearer t0ken"}}),
            403);
  EXPECT_TRUE(OriginMatchesHost("http://127.0.0.1:8080", "127.0.0.1:8080"));
  EXPECT_TRUE(OriginMatchesHost("https://Console.Example", "console.example"));
  EXPECT_FALSE(OriginMatchesHost("http://127.0.0.1:8081", "127.0.0.1:8080"));
  EXPECT_FALSE(OriginMatchesHost("null", "127.0.0.1:8080"));
  EXPECT_FALSE(OriginMatchesHost("http://x", ""));
}

TEST(ConsoleRouteTest, ThePageAndItsBundleComeWithAStrictPolicyAndNoToken) {
  RunningServer srv;
  const std::string page = Get(srv.port(), "/console");
  ASSERT_EQ(page.rfind("HTTP/1.1 200 ", 0), 0u) << page.substr(0, 200);
  EXPECT_NE(page.find("Content-Type: text/html"), std::string::npos);
  EXPECT_NE(page.find("Content-Security-Policy: default-src 'none'; script-src 'self';"),
            std::string::npos);
  EXPECT_NE(page.find("connect-src 'self' ws://" + srv.host()), std::string::npos);
  EXPECT_NE(page.find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_NE(page.find("X-Content-Type-Options: nosniff"), std::string::npos);
  EXPECT_NE(page.find("/console/console.js"), std::string::npos);
  const std::string js = Get(srv.port(), "/console/console.js");
  ASSERT_EQ(js.rfind("HTTP/1.1 200 ", 0), 0u);
  EXPECT_NE(js.find("Content-Type: text/javascript"), std::string::npos);
  EXPECT_GT(js.size(), 100000u);  // the bundle: the console, xterm.js, noVNC
  EXPECT_EQ(Get(srv.port(), "/console/console.css").rfind("HTTP/1.1 200 ", 0), 0u);
  EXPECT_EQ(Get(srv.port(), "/console/secrets").rfind("HTTP/1.1 404 ", 0), 0u);
  // Issue 33: "/console/" was a JSON 404 and HEAD a 405; the page has an icon of its own (no
  // favicon request that 404s in every browser console).
  const std::string slash = Get(srv.port(), "/console/");
  ASSERT_EQ(slash.rfind("HTTP/1.1 200 ", 0), 0u) << slash.substr(0, 200);
  EXPECT_NE(slash.find("Content-Type: text/html"), std::string::npos);
  EXPECT_NE(page.find("<link rel=\"icon\" href=\"data:image/svg+xml,"), std::string::npos);
  for (const char* target : {"/console", "/console/"}) {
    const std::string head = Get(srv.port(), target, "HEAD");
    ASSERT_EQ(head.rfind("HTTP/1.1 200 ", 0), 0u) << target << ": " << head.substr(0, 200);
    EXPECT_NE(head.find("Content-Security-Policy: default-src 'none'"), std::string::npos);
    EXPECT_EQ(head.find("<!doctype html>"), std::string::npos) << "HEAD has no body";
  }
  // A Host that is not a plain host[:port] is not written into the policy.
  EXPECT_EQ(ConsoleContentSecurityPolicy("x; script-src *").find("script-src *"),
            std::string::npos);
}

// agvisord's API token: made once (64 hex digits, mode 0600), then read back unchanged.
TEST(TokenFileTest, MadeOnceThenReadBack) {
  char dir[] = "/tmp/agvisor-token-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/sub/token";
  bool created = false;
  auto made = LoadOrCreateToken(path, &created);
  ASSERT_TRUE(made.ok()) << made.error().ToString();
  EXPECT_TRUE(created);
  EXPECT_EQ(made->size(), 64u);
  EXPECT_EQ(made->find_first_not_of("0123456789abcdef"), std::string::npos) << *made;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = LoadOrCreateToken(path, &created);
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_FALSE(created);
  EXPECT_EQ(*again, *made);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace agvisor::server
