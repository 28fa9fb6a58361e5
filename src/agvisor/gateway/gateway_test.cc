// The gateway's refusals through the standalone listener with a real WebSocket client, before any
// sandbox is involved: bad tokens, rdp tokens, origins, a viewer that sends no token, non-upgrade
// requests. (Sessions with a real desktop: tests/integration/gateway_desktop_test.cc.)
#include "agvisor/gateway/gateway.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <memory>
#include <thread>
#include <vector>

#include "agvisor/base/unique_fd.h"
#include "agvisor/gateway/listener.h"
#include "agvisor/gateway/testing/viewer_client.h"

namespace agvisor::gateway {
namespace {

using desktop::kTokenRejected;
using desktop::MintToken;
using desktop::MintVncToken;
using desktop::ParseTokenKey;
using desktop::TokenKey;
using desktop::TokenPayload;
using desktop::VncTarget;
using ::testing::HasSubstr;
using testing::ViewerClient;

TokenKey Key() { return *ParseTokenKey(std::string(64, '7')); }

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GatewayOptions o;
    o.key = Key();
    o.allowed_origins = {"http://good.example:8080"};
    o.handshake_timeout = std::chrono::seconds(2);
    gateway_ = std::make_unique<Gateway>(o);
    auto l = Listener::Start(*gateway_);
    ASSERT_TRUE(l.ok()) << l.error().ToString();
    listener_ = std::move(*l);
  }
  std::string VncToken(std::string container = "agvisor-gw-test-none") {
    VncTarget t{.container = std::move(container), .password = "pw"};
    return *MintVncToken(Key(), t, std::chrono::seconds(60));
  }
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<Listener> listener_;
};

TEST_F(GatewayTest, TamperedTokenIsClosedWithTheGenericReason) {
  std::string token = VncToken();
  token[token.size() / 2] = token[token.size() / 2] == 'A' ? 'B' : 'A';
  for (bool in_query : {false, true}) {
    ViewerClient c;
    ASSERT_EQ(c.Connect(listener_->port(), {.query_token = in_query ? token : ""}), "");
    if (!in_query) {
      ASSERT_TRUE(c.SendText(token));
    }
    EXPECT_TRUE(c.WaitClosed());
    EXPECT_EQ(c.close_code(), kCloseTokenRejected);
    EXPECT_EQ(c.close_reason(), kTokenRejected);
  }
}

TEST_F(GatewayTest, ForeignKeyAndExpiredTokensGetTheSameReason) {
  TokenKey other = *ParseTokenKey(std::string(64, '8'));
  VncTarget t{.container = "agvisor-x", .password = "pw"};
  const auto past = std::chrono::system_clock::now() - std::chrono::hours(1);
  for (const std::string& token :
       {*MintVncToken(other, t, std::chrono::seconds(60)),
        *MintVncToken(Key(), t, std::chrono::seconds(60), past), std::string("garbage")}) {
    ViewerClient c;
    ASSERT_EQ(c.Connect(listener_->port(), {}), "");
    ASSERT_TRUE(c.SendText(token));
    EXPECT_TRUE(c.WaitClosed());
    EXPECT_EQ(c.close_code(), kCloseTokenRejected);
    EXPECT_EQ(c.close_reason(), kTokenRejected);
  }
}

TEST_F(GatewayTest, RdpTokensVerifyButAreNotServed) {
  TokenPayload p;
  p.type = "rdp";
  p.settings_json = R"({"hostname":"127.0.0.1","port":"3389"})";
  p.expiration_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          (std::chrono::system_clock::now() + std::chrono::minutes(1)).time_since_epoch())
          .count();
  ViewerClient c;
  ASSERT_EQ(c.Connect(listener_->port(), {}), "");
  ASSERT_TRUE(c.SendText(*MintToken(Key(), p)));
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(c.close_code(), kCloseUnsupportedType);
  EXPECT_THAT(c.close_reason(), HasSubstr("rdp"));
}

TEST_F(GatewayTest, OriginsOutsideTheAllowlistAreRefused) {
  ViewerClient c;
  ASSERT_EQ(c.Connect(listener_->port(), {.origin = "http://evil.example"}), "");
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(c.close_code(), kCloseOriginRefused);
  EXPECT_THAT(c.close_reason(), HasSubstr("http://evil.example"));
  // The allowed origin gets as far as the token check.
  ViewerClient ok;
  ASSERT_EQ(ok.Connect(listener_->port(), {.origin = "http://good.example:8080"}), "");
  ASSERT_TRUE(ok.SendText("bad"));
  EXPECT_TRUE(ok.WaitClosed());
  EXPECT_EQ(ok.close_code(), kCloseTokenRejected);
  EXPECT_TRUE(gateway_->OriginAllowed(""));
  EXPECT_FALSE(gateway_->OriginAllowed("http://good.example"));
}

TEST_F(GatewayTest, AViewerThatSendsNoTokenIsClosedAtTheDeadline) {
  ViewerClient c;
  ASSERT_EQ(c.Connect(listener_->port(), {}), "");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(c.close_code(), kCloseViewerProtocol);
  // Closed at the 2 s handshake deadline: 2.02 s at most on a loaded 2-core host (load average
  // 17-19), 5x.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ViewerClient binary;
  ASSERT_EQ(binary.Connect(listener_->port(), {}), "");
  ASSERT_TRUE(binary.SendBinary("RFB 003.008\n"));
  EXPECT_TRUE(binary.WaitClosed());
  EXPECT_EQ(binary.close_code(), kCloseViewerProtocol);
  EXPECT_THAT(binary.close_reason(), HasSubstr("token first"));
}

TEST_F(GatewayTest, ManyRefusedViewersAtOnce) {
  std::vector<std::thread> threads;
  std::atomic<int> rejected{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      ViewerClient c;
      if (!c.Connect(listener_->port(), {}).empty()) return;
      c.SendText("nope");
      c.WaitClosed();
      if (c.close_code() == kCloseTokenRejected) ++rejected;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(rejected, 8);
  // Sessions end just after their close frame is out.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (gateway_->active_sessions() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(gateway_->active_sessions(), 0);
}

TEST_F(GatewayTest, ViewersWithoutATokenYetAreCapped) {
  // 16 (the default cap) viewers hold their connections without sending a token...
  const int cap = GatewayOptions{}.max_unauthenticated;
  std::vector<std::unique_ptr<ViewerClient>> silent;
  for (int i = 0; i < cap; ++i) {
    silent.push_back(std::make_unique<ViewerClient>());
    ASSERT_EQ(silent.back()->Connect(listener_->port(), {}), "");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (gateway_->active_sessions() < cap && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(gateway_->active_sessions(), cap);
  // ...so the next one is closed at once (not at the 2 s handshake deadline), saying why.
  ViewerClient over;
  ASSERT_EQ(over.Connect(listener_->port(), {}), "");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(over.WaitClosed());
  EXPECT_EQ(over.close_code(), kCloseTryAgainLater);
  EXPECT_THAT(over.close_reason(), HasSubstr("try again"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  // A refused token frees its place: the next viewer gets as far as the token check.
  ASSERT_TRUE(silent[0]->SendText("bad"));
  EXPECT_TRUE(silent[0]->WaitClosed());
  EXPECT_EQ(silent[0]->close_code(), kCloseTokenRejected);
  const auto freed = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (gateway_->unauthenticated_sessions() >= cap && std::chrono::steady_clock::now() < freed) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ViewerClient next;
  ASSERT_EQ(next.Connect(listener_->port(), {}), "");
  ASSERT_TRUE(next.SendText("bad"));
  EXPECT_TRUE(next.WaitClosed());
  EXPECT_EQ(next.close_code(), kCloseTokenRejected);
}

// Before any WebSocket: a client that connects and sends no request is closed at the handshake
// deadline (2 s here), not held for good.
TEST_F(GatewayTest, AConnectionWithoutARequestIsClosedAtTheDeadline) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(listener_->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::send(fd.get(), "GET / HTTP/1.1\r\n", 16, MSG_NOSIGNAL), 16);  // and no more
  const auto start = std::chrono::steady_clock::now();
  pollfd p{fd.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 8000), 1) << "still open 8 s after a 2 s deadline";
  char c;
  EXPECT_LE(::recv(fd.get(), &c, 1, 0), 0);  // closed, nothing sent
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
}

// Connections past the listener's bound (64 by default) are closed as they are accepted, before a
// thread starts for them: silent ones would otherwise each hold a thread until the 2 s deadline.
TEST_F(GatewayTest, ConnectionsPastTheListenersBoundAreClosedAtOnce) {
  auto connect = [&] {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(listener_->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  };
  std::vector<UniqueFd> held;
  for (int i = 0; i < 64; ++i) held.push_back(connect());
  UniqueFd over = connect();
  const auto start = std::chrono::steady_clock::now();
  pollfd p{over.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000))
      << "held until the handshake deadline, as if within the bound";
  // The bounded ones are still held (until their deadline).
  pollfd q{held.back().get(), POLLIN, 0};
  EXPECT_EQ(::poll(&q, 1, 0), 0);
}

// agvisord's gateway opens sandboxes through the daemon's place only: a token naming another
// host (signed with the key, e.g. by another daemon that shares it) is refused without reaching
// that host, and nothing is opened.
TEST(GatewaySharedHandlesTest, TokenNamingAnotherHostIsRefused) {
  const std::string host = "unix:///nonexistent/agvisor-gw-test.sock";
  GatewayOptions o;
  o.key = Key();
  o.sandboxes = std::make_shared<client::HandleCache>(client::InProcess(host));
  o.docker_host = host;
  Gateway g(o);
  auto l = Listener::Start(g);
  ASSERT_TRUE(l.ok()) << l.error().ToString();
  VncTarget t{.container = "agvisor-x", .docker_host = "tcp://127.0.0.1:9", .password = "pw"};
  ViewerClient c;
  ASSERT_EQ(c.Connect((*l)->port(), {}), "");
  ASSERT_TRUE(c.SendText(*MintVncToken(Key(), t, std::chrono::seconds(60))));
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(c.close_code(), kCloseSandboxUnavailable);
  EXPECT_THAT(c.close_reason(), HasSubstr("tcp://127.0.0.1:9"));
  EXPECT_THAT(c.close_reason(), HasSubstr("(only '" + host + "')"));
  EXPECT_EQ(o.sandboxes->size(), 0u);
}

TEST(ListenerTest, RefusesNonLoopbackAddressesUnlessAllowed) {
  Gateway g(GatewayOptions{.key = Key()});
  auto l = Listener::Start(g, "0.0.0.0", 0);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(Listener::Start(g, "localhost", 0).ok());
}

}  // namespace
}  // namespace agvisor::gateway
