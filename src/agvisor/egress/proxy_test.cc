// Component tests of the egress proxy on loopback: real clients (plain sockets, OpenSSL) talk to
// the proxy, which resolves through a fake DNS server and dials real servers in the test.
// Loopback is never dialled by the enforcer; the test's proxies exempt 127.0.0.1/32 (the test's
// servers: ProxyOptions::test_only_dialable) and its policy names it with a CIDR rule, so every
// other loopback address stays refused, whatever the policy says.
#include "agvisor/egress/proxy.h"

#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>

#include "agvisor/egress/testing/loopback.h"

namespace agvisor::egress {
namespace {

using namespace agvisor::egress::testing;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

IpAddress Ip(std::string_view text) { return *ParseIpAddress(text); }

// Answers one HTTP request: "host=<Host header> line=<request line>".
void HttpHandler(int fd) {
  std::string head = ReadHead(fd);
  std::string line = head.substr(0, head.find("\r\n"));
  std::string host;
  std::size_t h = head.find("\r\nHost: ");
  if (h != std::string::npos) host = head.substr(h + 8, head.find("\r\n", h + 8) - h - 8);
  std::string body = "host=" + host + " line=" + line;
  SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\nConnection: close\r\n\r\n" + body);
}

// Echoes every byte until the client's end of stream, then ends its own.
void EchoHandler(int fd) {
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
    if (!SendAll(fd, std::string_view(buf, static_cast<std::size_t>(n)))) return;
  }
  shutdown(fd, SHUT_WR);
}

// Reads one response: its head, then Content-Length bytes of body ("" at the end of stream).
std::string ReadResponse(int fd) {
  std::string head = ReadHead(fd);
  std::size_t at = head.find("Content-Length: ");
  if (!head.ends_with("\r\n\r\n") || at == std::string::npos) return head;
  std::size_t n = std::stoul(head.substr(at + 16));
  std::string body(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, body.data() + got, n - got, 0);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  return head + body.substr(0, got);
}

// A keep-alive HTTP server: answers every request of a connection with "host=<Host>
// line=<request line>" (Content-Length bodies are read) until the client's end, and keeps the
// request lines it saw. A request with "Upgrade: echo" is answered 101, then every byte after it
// is echoed; "Upgrade: ignored" is answered like any request.
class KeepAliveServer {
 public:
  KeepAliveServer()
      : server_([this](int fd) {
          while (true) {
            std::string head = ReadHead(fd);
            if (!head.ends_with("\r\n\r\n")) return;
            std::string line = head.substr(0, head.find("\r\n"));
            {
              std::lock_guard lock(mu_);
              lines_.push_back(line);
            }
            std::string host;
            if (std::size_t h = head.find("\r\nHost: "); h != std::string::npos) {
              host = head.substr(h + 8, head.find("\r\n", h + 8) - h - 8);
            }
            if (std::size_t at = head.find("\r\nContent-Length: "); at != std::string::npos) {
              std::string body(std::stoul(head.substr(at + 18)), '\0');
              if (!body.empty() && recv(fd, body.data(), body.size(), MSG_WAITALL) <= 0) return;
            }
            if (head.find("\r\nUpgrade: echo\r\n") != std::string::npos) {
              SendAll(fd, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n\r\n");
              EchoHandler(fd);
              return;
            }
            std::string body = "host=" + host + " line=" + line;
            SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\n\r\n" + body);
          }
        }) {}
  std::uint16_t port() const { return server_.port(); }
  std::vector<std::string> lines() const {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
  TcpServer server_;
};

class EgressProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    identity_ = TlsIdentity::SelfSigned({"allowed.test", "*.allowed.test", "late.test"});
    server_ctx_ = std::make_unique<SslCtxPtr>(ServerContext(identity_));
    client_ctx_ = std::make_unique<SslCtxPtr>(ClientContext(identity_));
    http_ = std::make_unique<TcpServer>(HttpHandler);
    keep_ = std::make_unique<KeepAliveServer>();
    echo_ = std::make_unique<TcpServer>(EchoHandler);
    tls_ = std::make_unique<TcpServer>([this](int fd) {
      SslPtr ssl(SSL_new(server_ctx_->get()), SSL_free);
      SSL_set_fd(ssl.get(), fd);
      if (SSL_accept(ssl.get()) != 1) return;
      const char* sni = SSL_get_servername(ssl.get(), TLSEXT_NAMETYPE_host_name);
      std::string greeting = std::string("tls hello, sni=") + (sni ? sni : "(none)");
      SSL_write(ssl.get(), greeting.data(), static_cast<int>(greeting.size()));
      SSL_shutdown(ssl.get());
    });
    dns_ = std::make_unique<FakeDns>(std::map<std::string, std::vector<IpAddress>>{
        {"allowed.test", {Ip("127.0.0.1")}},
        {"www.allowed.test", {Ip("127.0.0.1")}},
        {"late.test", {Ip("127.0.0.1")}},
        {"rebind.allowed.test", {Ip("127.0.0.3")}},
        {"metadata.allowed.test", {Ip("169.254.169.254")}},
        {"mapped.allowed.test", {Ip("::ffff:127.0.0.2")}},
        {"own.allowed.test", {Ip("198.51.100.7")}},
        {"evil.test", {Ip("127.0.0.1")}},
        {"private.test", {Ip("10.1.2.3")}},
    });
    log_ = std::make_shared<DecisionLog>();
    ProxyOptions o;
    o.sandbox = "sb-test";
    o.resolver_address = Ip("127.0.0.1");
    o.resolver_port = dns_->port();
    o.tls_port = tls_->port();
    o.host_addresses = {Ip("198.51.100.7")};
    o.test_only_dialable = {*ParseCidr("127.0.0.1/32")};
    // Generous: a refusal measured against these proves it waited for none of them.
    o.resolve_timeout = milliseconds(3000);
    o.sniff_timeout = milliseconds(300);
    o.serve_dns = true;
    o.on_decision = [](const Decision& d) {
      std::fprintf(stderr, "%s\n", FormatDecision(d).c_str());
    };
    auto proxy = EgressProxy::Start(o, MakePolicy({"allowed.test", "*.allowed.test"}), log_);
    ASSERT_TRUE(proxy.ok()) << proxy.error().ToString();
    proxy_ = std::move(proxy).value();
  }

  EgressPolicy MakePolicy(std::vector<std::string> domains) {
    std::vector<std::uint16_t> ports = {http_->port(), tls_->port(), echo_->port(), keep_->port()};
    auto p = EgressPolicy::Create(domains, std::vector<std::string>{"127.0.0.1/32"}, ports);
    EXPECT_TRUE(p.ok());
    return std::move(p).value();
  }

  // One HTTP request through the proxy; returns the whole response.
  std::string HttpVia(const std::string& request) {
    UniqueFd c = ConnectLoopback(proxy_->port());
    EXPECT_TRUE(c.valid());
    SendAll(c.get(), request);
    return ReadAll(c.get());
  }

  std::string Get(const std::string& host) {
    return HttpVia("GET /x HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
  }

  std::string HostPort(const std::string& host, std::uint16_t port) {
    return host + ":" + std::to_string(port);
  }

  // The last decision, or the last close record: a connection's close record is logged when
  // both its sides end, which can come after a later connection's decision.
  Decision LastDecision(bool close_record = false) {
    auto recent = log_->Recent("sb-test");
    for (auto it = recent.rbegin(); it != recent.rend(); ++it) {
      if ((it->closes != 0) == close_record) return *it;
    }
    ADD_FAILURE() << "no " << (close_record ? "close record" : "decision") << " logged";
    return Decision{};
  }

  // Waits until the proxy has logged `n` decisions (the log is written on the proxy's thread).
  void WaitForDecisions(std::size_t n) {
    auto until = steady_clock::now() + std::chrono::seconds(10);
    while (log_->Recent("sb-test").size() < n && steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

  bool DnsWasAsked(std::string_view name) {
    for (const std::string& q : dns_->questions()) {
      if (q == name) return true;
    }
    return false;
  }

  TlsIdentity identity_;
  std::unique_ptr<SslCtxPtr> server_ctx_;
  std::unique_ptr<SslCtxPtr> client_ctx_;
  std::unique_ptr<TcpServer> http_;
  std::unique_ptr<KeepAliveServer> keep_;
  std::unique_ptr<TcpServer> echo_;
  std::unique_ptr<TcpServer> tls_;
  std::unique_ptr<FakeDns> dns_;
  std::shared_ptr<DecisionLog> log_;
  std::unique_ptr<EgressProxy> proxy_;
};

TEST_F(EgressProxyTest, HttpByHostHeaderReachesTheResolvedAddress) {
  std::string response = Get(HostPort("Allowed.Test", http_->port()));
  EXPECT_NE(response.find("200 OK"), std::string::npos) << response;
  EXPECT_NE(response.find("host=Allowed.Test:"), std::string::npos) << response;
  WaitForDecisions(1);
  Decision d = LastDecision();
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.via, "http");
  EXPECT_EQ(d.name, "allowed.test");
  EXPECT_EQ(d.address, "127.0.0.1");
  EXPECT_EQ(d.reason, "allowed by allowed.test");
  EXPECT_TRUE(DnsWasAsked("allowed.test"));
}

TEST_F(EgressProxyTest, AbsoluteFormProxyRequest) {
  std::string target = HostPort("www.allowed.test", http_->port());
  std::string response = HttpVia("GET http://" + target + "/simple/ HTTP/1.1\r\nHost: " + target +
                                 "\r\nConnection: close\r\n\r\n");
  EXPECT_NE(response.find("200 OK"), std::string::npos) << response;
  EXPECT_NE(response.find("line=GET http://" + target + "/simple/"), std::string::npos);
}

TEST_F(EgressProxyTest, TlsBySniWithoutTerminatingIt) {
  UniqueFd c = ConnectLoopback(proxy_->port());
  SslPtr ssl = TlsConnect(client_ctx_->get(), c.get(), "www.allowed.test");
  ASSERT_TRUE(ssl) << "handshake through the proxy failed";
  // The server's own certificate was verified by the client: the proxy did not terminate TLS.
  EXPECT_EQ(TlsReadAll(ssl.get()), "tls hello, sni=www.allowed.test");
  Decision d = LastDecision();
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.via, "tls");
  EXPECT_EQ(d.name, "www.allowed.test");
  EXPECT_EQ(d.port, tls_->port());
}

TEST_F(EgressProxyTest, ConnectTunnelCarriesTls) {
  UniqueFd c = ConnectLoopback(proxy_->port());
  SendAll(c.get(), "CONNECT " + HostPort("allowed.test", tls_->port()) +
                       " HTTP/1.1\r\nHost: " + HostPort("allowed.test", tls_->port()) + "\r\n\r\n");
  std::string head = ReadHead(c.get());
  ASSERT_EQ(head, "HTTP/1.1 200 Connection established\r\n\r\n");
  SslPtr ssl = TlsConnect(client_ctx_->get(), c.get(), "allowed.test");
  ASSERT_TRUE(ssl);
  EXPECT_EQ(TlsReadAll(ssl.get()), "tls hello, sni=allowed.test");
  EXPECT_EQ(LastDecision().via, "connect");
}

TEST_F(EgressProxyTest, SpliceMovesBulkBytesBothWaysAndPassesHalfClose) {
  UniqueFd c = ConnectLoopback(proxy_->port());
  SendAll(c.get(), "CONNECT " + HostPort("allowed.test", echo_->port()) + " HTTP/1.1\r\n\r\n");
  ASSERT_EQ(ReadHead(c.get()), "HTTP/1.1 200 Connection established\r\n\r\n");
  std::string payload(8 << 20, '\0');
  for (std::size_t i = 0; i < payload.size(); ++i)
    payload[i] = static_cast<char>(i * 31 + i / 4096);
  std::thread writer([&] {
    SendAll(c.get(), payload);
    shutdown(c.get(), SHUT_WR);  // the echo server ends only after seeing this end
  });
  std::string echoed = ReadAll(c.get());
  writer.join();
  EXPECT_EQ(echoed.size(), payload.size());
  EXPECT_TRUE(echoed == payload);
  // Traffic counts what was spliced each way (the CONNECT head is the proxy's, not counted). A
  // pump adds after its write completes, so the last add may follow the client's last read.
  const auto deadline = steady_clock::now() + milliseconds(5000);
  while (proxy_->traffic().bytes_down < payload.size() && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(proxy_->traffic().bytes_up, payload.size());
  EXPECT_EQ(proxy_->traffic().bytes_down, payload.size());
  // Once both sides have ended, the tunnel's close record has its own bytes and time, and
  // names the decision that let it through; the counters count that decision only.
  c.reset();
  WaitForDecisions(2);
  const Decision closed = LastDecision(/*close_record=*/true);
  EXPECT_EQ(closed.via, "connect");
  EXPECT_EQ(closed.closes, log_->Recent("sb-test").front().seq);
  EXPECT_EQ(closed.bytes_up, payload.size());
  EXPECT_EQ(closed.bytes_down, payload.size());
  EXPECT_GT(closed.duration.count(), 0);
  EXPECT_EQ(log_->Counters("sb-test"), (DecisionCounters{1, 0}));
}

TEST_F(EgressProxyTest, AClientResetMidStreamEndsOnlyItsConnection) {
  // A server that sends until its peer is gone, so the proxy is writing when the client resets.
  TcpServer flood([](int fd) {
    const std::string chunk(1 << 20, 'x');
    while (SendAll(fd, chunk)) {
    }
  });
  proxy_->SetPolicy(EgressPolicy::Create(std::vector<std::string>{"allowed.test"},
                                         std::vector<std::string>{"127.0.0.1/32"},
                                         std::vector<std::uint16_t>{flood.port(), http_->port()})
                        .value());
  for (int i = 0; i < 5; ++i) {
    UniqueFd c = ConnectLoopback(proxy_->port());
    SendAll(c.get(), "CONNECT " + HostPort("allowed.test", flood.port()) + " HTTP/1.1\r\n\r\n");
    ASSERT_EQ(ReadHead(c.get()), "HTTP/1.1 200 Connection established\r\n\r\n");
    char buf[65536];
    std::size_t got = 0;
    while (got < (4u << 20)) {
      ssize_t n = recv(c.get(), buf, sizeof buf, 0);
      ASSERT_GT(n, 0);
      got += static_cast<std::size_t>(n);
    }
    linger reset{.l_onoff = 1, .l_linger = 0};  // close with RST, unread bytes and all
    setsockopt(c.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  }
  // Every connection is released, and the proxy (and this process) goes on serving.
  auto until = steady_clock::now() + std::chrono::seconds(10);
  while (proxy_->open_connections() != 0 && steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(proxy_->open_connections(), 0u);
  EXPECT_NE(Get(HostPort("allowed.test", http_->port())).find("200 OK"), std::string::npos);
  EXPECT_GE(proxy_->traffic().bytes_down, 5u * (4u << 20));
}

TEST_F(EgressProxyTest, DisallowedNamesAreRefusedAtOnceAndNeverResolved) {
  auto start = steady_clock::now();
  std::string response = Get(HostPort("evil.test", http_->port()));
  auto took = steady_clock::now() - start;
  EXPECT_NE(response.find("403 Forbidden"), std::string::npos) << response;
  EXPECT_NE(response.find("no rule allows evil.test"), std::string::npos) << response;
  // An agent reads, in the header and the body, that the policy refused it and what allows it.
  const std::string advice =
      "agvisor egress policy of sandbox sb-test refused evil.test:" +
      std::to_string(http_->port()) +
      " (no rule allows evil.test); an operator allows it with `agvisor egress sb-test "
      "--allow-domain evil.test`";
  EXPECT_NE(response.find("\r\nX-Agvisor-Egress: " + advice + "\r\n"), std::string::npos)
      << response;
  EXPECT_TRUE(response.ends_with("\r\n\r\n" + advice + "\n")) << response;
  // The apex of a wildcard is not under it.
  EXPECT_NE(Get(HostPort("test", http_->port())).find("403"), std::string::npos);
  // TLS: the connection is closed without a handshake.
  UniqueFd c = ConnectLoopback(proxy_->port());
  EXPECT_FALSE(TlsConnect(client_ctx_->get(), c.get(), "evil.test"));
  UniqueFd t = ConnectLoopback(proxy_->port());
  SendAll(t.get(), "CONNECT " + HostPort("x.evil.test", tls_->port()) + " HTTP/1.1\r\n\r\n");
  const std::string connect_refused = ReadAll(t.get());
  EXPECT_NE(connect_refused.find("403"), std::string::npos);
  EXPECT_NE(connect_refused.find("X-Agvisor-Egress: agvisor egress policy of sandbox sb-test "
                                 "refused x.evil.test:"),
            std::string::npos)
      << connect_refused;
  // Bound (the 1 s): a refusal is a policy lookup (~1 ms here), made before any lookup;
  // waiting for the resolver would take 3 s or more (3x the bound). The bound is loose because
  // this machine may be busy with other builds.
  EXPECT_LT(took, milliseconds(1000));
  EXPECT_FALSE(DnsWasAsked("evil.test"));
  EXPECT_FALSE(DnsWasAsked("x.evil.test"));
  EXPECT_EQ(http_->accepted(), 0);
  EXPECT_EQ(tls_->accepted(), 0);
  WaitForDecisions(4);
  EXPECT_EQ(log_->Counters("sb-test").denied, 4u);
  EXPECT_EQ(proxy_->traffic().bytes_up, 0u);
  EXPECT_EQ(proxy_->traffic().bytes_down, 0u);
}

TEST_F(EgressProxyTest, AllowedNamesResolvingToRestrictedAddressesAreRefused) {
  struct Case {
    const char* name;
    const char* reason;
  };
  const Case cases[] = {
      {"rebind.allowed.test",
       "resolves to a refused address: 127.0.0.3 is loopback (no rule opens it)"},
      {"metadata.allowed.test",
       "resolves to a refused address: 169.254.169.254 is link-local (cloud metadata) (no rule "
       "opens it)"},
      {"mapped.allowed.test",
       "resolves to a refused address: ::ffff:127.0.0.2 is IPv4-mapped: loopback (no rule opens "
       "it)"},
      {"own.allowed.test",
       "resolves to a refused address: 198.51.100.7 is the host's own address (no rule opens it)"},
      {"missing.allowed.test", "DNS: missing.allowed.test does not exist (NXDOMAIN)"},
  };
  std::size_t n = 0;
  for (const Case& c : cases) {
    std::string response = Get(HostPort(c.name, http_->port()));
    EXPECT_NE(response.find(c.reason), std::string::npos) << c.name << ": " << response;
    WaitForDecisions(++n);
    Decision d = LastDecision();
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.reason, c.reason);
  }
  // TLS to a rebinding name: closed, nothing dialled.
  UniqueFd t = ConnectLoopback(proxy_->port());
  EXPECT_FALSE(TlsConnect(client_ctx_->get(), t.get(), "rebind.allowed.test"));
  EXPECT_EQ(http_->accepted(), 0);
  EXPECT_EQ(tls_->accepted(), 0);
}

std::size_t TimesAsked(const std::vector<std::string>& questions, std::string_view name) {
  return static_cast<std::size_t>(std::count(questions.begin(), questions.end(), name));
}

TEST_F(EgressProxyTest, LookupsAreKeptForTheirTtlAndCheckedOnEveryUse) {
  const std::string url = HostPort("allowed.test", http_->port());
  for (int i = 0; i < 3; ++i) EXPECT_NE(Get(url).find("200 OK"), std::string::npos);
  EXPECT_EQ(TimesAsked(dns_->questions(), "allowed.test"), 1u);  // the answer's TTL is 60 s
  // A kept answer is still checked each time it is used: a rebinding name stays refused.
  const std::string rebind = HostPort("rebind.allowed.test", http_->port());
  for (int i = 0; i < 3; ++i) EXPECT_NE(Get(rebind).find("403"), std::string::npos);
  EXPECT_EQ(TimesAsked(dns_->questions(), "rebind.allowed.test"), 1u);
  // An answer with TTL 0 is not kept: every connection asks.
  dns_->set_ttl(0);
  const std::string www = HostPort("www.allowed.test", http_->port());
  for (int i = 0; i < 3; ++i) EXPECT_NE(Get(www).find("200 OK"), std::string::npos);
  EXPECT_EQ(TimesAsked(dns_->questions(), "www.allowed.test"), 3u);
}

TEST_F(EgressProxyTest, IpLiteralsPassOnlyThroughACidrRule) {
  std::string refused = Get(HostPort("127.0.0.2", http_->port()));
  EXPECT_NE(refused.find("IP address 127.0.0.2 is in no CIDR rule"), std::string::npos) << refused;
  std::string allowed = Get(HostPort("127.0.0.1", http_->port()));
  EXPECT_NE(allowed.find("200 OK"), std::string::npos) << allowed;
  EXPECT_TRUE(dns_->questions().empty());  // literals are never looked up
  // SNI must not carry a literal (RFC 6066); one that does is judged like any literal.
  UniqueFd t = ConnectLoopback(proxy_->port());
  EXPECT_FALSE(TlsConnect(client_ctx_->get(), t.get(), "127.0.0.2"));
}

TEST_F(EgressProxyTest, PolicyChangeAppliesToTheNextConnection) {
  EXPECT_NE(Get(HostPort("late.test", http_->port())).find("403"), std::string::npos);
  proxy_->SetPolicy(MakePolicy({"allowed.test", "late.test"}));
  EXPECT_NE(Get(HostPort("late.test", http_->port())).find("200 OK"), std::string::npos);
  EXPECT_NE(Get(HostPort("www.allowed.test", http_->port())).find("403"), std::string::npos);
  EXPECT_EQ(proxy_->policy().allow_domains().size(), 2u);
}

TEST_F(EgressProxyTest, SilentConnectionsAndGarbageAreClosed) {
  UniqueFd silent = ConnectLoopback(proxy_->port());
  auto start = steady_clock::now();
  EXPECT_EQ(ReadAll(silent.get()), "");
  // Closed by the 300 ms sniff deadline; the bound proves it is that deadline, not the helper's
  // 10 s read timeout (3x headroom below it, for a busy machine).
  EXPECT_LT(steady_clock::now() - start, milliseconds(3000));
  WaitForDecisions(1);
  EXPECT_EQ(LastDecision().reason, "no destination within 300 ms");
  UniqueFd garbage = ConnectLoopback(proxy_->port());
  SendAll(garbage.get(), std::string("\x00\x01\x02\x03 junk\r\n\r\n", 13));
  EXPECT_NE(ReadAll(garbage.get()).find("400 Bad Request"), std::string::npos);
  UniqueFd no_sni = ConnectLoopback(proxy_->port());
  EXPECT_FALSE(TlsConnect(client_ctx_->get(), no_sni.get(), ""));
  WaitForDecisions(3);
  EXPECT_EQ(LastDecision().reason, "TLS ClientHello without a server name (SNI)");
}

TEST_F(EgressProxyTest, ResolverDownIsADenialNotAHang) {
  dns_->set_silent(true);
  proxy_.reset();
  ProxyOptions o;
  o.sandbox = "sb-test";
  o.resolver_address = Ip("127.0.0.1");
  o.resolver_port = dns_->port();
  o.resolve_timeout = milliseconds(100);
  o.test_only_dialable = {*ParseCidr("127.0.0.1/32")};
  auto proxy = EgressProxy::Start(o, MakePolicy({"allowed.test"}), log_);
  ASSERT_TRUE(proxy.ok());
  proxy_ = std::move(proxy).value();
  std::string response = Get(HostPort("allowed.test", http_->port()));
  EXPECT_NE(response.find("502 Bad Gateway"), std::string::npos) << response;
  EXPECT_NE(response.find("DNS: no answer for allowed.test"), std::string::npos) << response;
}

TEST_F(EgressProxyTest, FiftyParallelConnections) {
  std::vector<std::string> responses(50);
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < responses.size(); ++i) {
    clients.emplace_back([&, i] {
      responses[i] = Get(HostPort(i % 2 ? "allowed.test" : "www.allowed.test", http_->port()));
    });
  }
  for (std::thread& t : clients) t.join();
  for (const std::string& r : responses) EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
  EXPECT_EQ(http_->accepted(), 50);
  WaitForDecisions(50);
  EXPECT_EQ(log_->Counters("sb-test").allowed, 50u);
}

TEST_F(EgressProxyTest, OpenConnectionsAreCountedAndReleased) {
  std::vector<UniqueFd> open;
  for (int i = 0; i < 20; ++i) {
    open.push_back(ConnectLoopback(proxy_->port()));
    SendAll(open.back().get(),
            "CONNECT " + HostPort("allowed.test", echo_->port()) + " HTTP/1.1\r\n\r\n");
    ASSERT_EQ(ReadHead(open.back().get()), "HTTP/1.1 200 Connection established\r\n\r\n");
  }
  EXPECT_EQ(proxy_->open_connections(), 20u);
  open.clear();
  auto until = steady_clock::now() + std::chrono::seconds(10);
  while (proxy_->open_connections() != 0 && steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(proxy_->open_connections(), 0u);
}

// One DNS question to the proxy's in-sandbox resolver; returns the raw answer ("" on timeout).
std::vector<std::uint8_t> AskDns(std::uint16_t port, std::uint16_t id, const std::string& name,
                                 DnsType type, int wait_seconds = 5) {
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  timeval tv{wait_seconds, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(port);
  std::vector<std::uint8_t> q = BuildDnsQuery(id, name, type);
  sendto(fd.get(), q.data(), q.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  std::vector<std::uint8_t> buf(4096);
  ssize_t n = recv(fd.get(), buf.data(), buf.size(), 0);
  buf.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return buf;
}

TEST_F(EgressProxyTest, InSandboxResolverAnswersAllowedNamesOnlyAndForwardsNothing) {
  ASSERT_NE(proxy_->dns_port(), 0);
  auto allowed = ParseDnsResponse(AskDns(proxy_->dns_port(), 1, "WWW.allowed.test", DnsType::kA), 1,
                                  "WWW.allowed.test", DnsType::kA);
  ASSERT_TRUE(allowed.ok()) << allowed.error().ToString();
  EXPECT_EQ(*allowed, std::vector<IpAddress>{Ip("127.0.0.1")});  // the proxy's own address
  auto v6 = ParseDnsResponse(AskDns(proxy_->dns_port(), 2, "allowed.test", DnsType::kAaaa), 2,
                             "allowed.test", DnsType::kAaaa);
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE(v6->empty());
  for (std::string name : {"evil.test", "c2VjcmV0.evil.test", "test", "late.test"}) {
    auto refused =
        ParseDnsResponse(AskDns(proxy_->dns_port(), 3, name, DnsType::kA), 3, name, DnsType::kA);
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_EQ(refused.error().code(), ErrorCode::kNotFound) << name;
  }
  proxy_->SetPolicy(MakePolicy({"late.test"}));
  EXPECT_TRUE(ParseDnsResponse(AskDns(proxy_->dns_port(), 4, "late.test", DnsType::kA), 4,
                               "late.test", DnsType::kA)
                  .ok());
  // Nothing asked of the sandbox's resolver reached the upstream one, allowed or not.
  EXPECT_TRUE(dns_->questions().empty());
  WaitForDecisions(7);
  Decision d = LastDecision();
  EXPECT_EQ(d.via, "dns");
  EXPECT_EQ(d.name, "late.test");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(log_->Counters("sb-test").denied, 4u);
}

// Learn mode: a name, a port or an address literal no rule allows is reached and logged as
// learned; loopback, metadata, private ranges and the host's own address stay refused after
// resolution (the enforcing checks, unchanged), and so does a deny rule. Switching to enforce
// closes the learned connections and refuses them again.
TEST_F(EgressProxyTest, LearnModeReachesWhatNoRuleAllowsButNeverTheHostMetadataOrPrivate) {
  TcpServer other_port(HttpHandler);
  EgressRules rules = MakePolicy({"allowed.test"}).Rules();
  rules.deny_domains = {"denied.allowed.test"};
  rules.mode = "learn";
  proxy_->SetPolicy(EgressPolicy::Create(rules).value());
  // Learned: a name, a port, through CONNECT too.
  std::string response = Get(HostPort("evil.test", http_->port()));
  EXPECT_NE(response.find("200 OK"), std::string::npos) << response;
  EXPECT_NE(Get(HostPort("allowed.test", other_port.port())).find("200 OK"), std::string::npos);
  WaitForDecisions(2);
  Decision d = LastDecision();
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.learned);
  EXPECT_EQ(d.reason, "port " + std::to_string(other_port.port()) + " is not allowed");
  EXPECT_EQ(d.address, "127.0.0.1");
  // Never: what resolves to loopback, metadata, a private range, the host; an address literal
  // of loopback; a deny rule. Nothing of these is dialled.
  const std::pair<std::string, std::string> refused[] = {
      {"rebind.allowed.test", "127.0.0.3 is loopback (no rule opens it)"},
      {"metadata.allowed.test",
       "169.254.169.254 is link-local (cloud metadata) (no rule opens it)"},
      {"mapped.allowed.test", "::ffff:127.0.0.2 is IPv4-mapped: loopback (no rule opens it)"},
      {"own.allowed.test", "198.51.100.7 is the host's own address (no rule opens it)"},
      {"private.test", "10.1.2.3 is private"},
      {"127.0.0.2", "127.0.0.2 is loopback (no rule opens it)"},
      {"denied.allowed.test", "denied by denied.allowed.test"},
  };
  const int accepted = http_->accepted();
  for (const auto& [name, reason] : refused) {
    response = Get(HostPort(name, http_->port()));
    EXPECT_NE(response.find("403 Forbidden"), std::string::npos) << name << ": " << response;
    EXPECT_NE(response.find(reason), std::string::npos) << name << ": " << response;
    EXPECT_FALSE(LastDecision().allowed) << name;
    EXPECT_FALSE(LastDecision().learned) << name;
  }
  EXPECT_EQ(http_->accepted(), accepted);
  // The in-sandbox resolver answers a name no rule allows (learned), not a denied one.
  EXPECT_TRUE(ParseDnsResponse(AskDns(proxy_->dns_port(), 1, "learned.test", DnsType::kA), 1,
                               "learned.test", DnsType::kA)
                  .ok());
  EXPECT_TRUE(LastDecision().learned);
  EXPECT_FALSE(ParseDnsResponse(AskDns(proxy_->dns_port(), 2, "denied.allowed.test", DnsType::kA),
                                2, "denied.allowed.test", DnsType::kA)
                   .ok());
  // What was reached, and only that, is kept for the suggestion.
  EXPECT_EQ(log_->Learned("sb-test").kept,
            (std::vector<LearnedDestination>{{"allowed.test", other_port.port()},
                                             {"evil.test", http_->port()}}));
  EXPECT_EQ(log_->Counters("sb-test").learned, 3u);
  // Enforcing again: an open learned tunnel is closed, a new connection refused.
  UniqueFd tunnel = ConnectLoopback(proxy_->port());
  SendAll(tunnel.get(), "CONNECT " + HostPort("evil.test", echo_->port()) + " HTTP/1.1\r\n\r\n");
  ASSERT_EQ(ReadHead(tunnel.get()), "HTTP/1.1 200 Connection established\r\n\r\n");
  rules.mode = "enforce";
  proxy_->SetPolicy(EgressPolicy::Create(rules).value());
  EXPECT_EQ(ReadAll(tunnel.get()), "");  // closed by the change
  EXPECT_NE(Get(HostPort("evil.test", http_->port())).find("403"), std::string::npos);
}

// A CIDR rule over loopback, link-local or the host's own address opens none of them: the
// enforcer dials from the host, so such a rule would hand the sandbox the host's own services
// and the metadata service (issue 32, point 3). A private block stays openable on purpose.
TEST_F(EgressProxyTest, BroadCidrRulesNeverOpenTheHostOrMetadata) {
  proxy_->SetPolicy(
      EgressPolicy::Create(std::vector<std::string>{"*.allowed.test"},
                           std::vector<std::string>{"127.0.0.0/8", "169.254.0.0/16",
                                                    "198.51.100.0/24", "::ffff:127.0.0.0/104"},
                           std::vector<std::uint16_t>{http_->port()})
          .value());
  const std::pair<std::string, std::string> cases[] = {
      {HostPort("rebind.allowed.test", http_->port()), "127.0.0.3 is loopback (no rule opens it)"},
      {HostPort("127.0.0.2", http_->port()), "127.0.0.2 is loopback (no rule opens it)"},
      {HostPort("metadata.allowed.test", http_->port()),
       "169.254.169.254 is link-local (cloud metadata) (no rule opens it)"},
      {HostPort("own.allowed.test", http_->port()),
       "198.51.100.7 is the host's own address (no rule opens it)"},
      {HostPort("mapped.allowed.test", http_->port()),
       "::ffff:127.0.0.2 is IPv4-mapped: loopback (no rule opens it)"},
  };
  for (const auto& [target, reason] : cases) {
    std::string response = Get(target);
    EXPECT_NE(response.find("403 Forbidden"), std::string::npos) << target << ": " << response;
    EXPECT_NE(response.find(reason), std::string::npos) << target << ": " << response;
  }
  EXPECT_EQ(http_->accepted(), 0);
}

// An address of this machine that the proxy was not told about (a bridge gateway made after
// agvisord started, an address added later) is still the host's own: the proxy asks the kernel
// before it dials. Any IPv4 address of an interface other than loopback will do (docker0's
// gateway on a Docker host).
TEST_F(EgressProxyTest, AnAddressOfThisHostOutsideHostAddressesIsRefused) {
  std::optional<IpAddress> own;
  ifaddrs* list = nullptr;
  ASSERT_EQ(getifaddrs(&list), 0);
  for (ifaddrs* i = list; i != nullptr && !own; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    const auto* b = reinterpret_cast<const std::uint8_t*>(&in->sin_addr);
    if (b[0] != 127) own = IpAddress::V4(b[0], b[1], b[2], b[3]);
  }
  freeifaddrs(list);
  ASSERT_TRUE(own)
      << "no IPv4 address on this machine but loopback (dockerd makes docker0: is it running?)";
  const std::string text = FormatIpAddress(*own);
  proxy_->SetPolicy(EgressPolicy::Create(std::vector<std::string>{"allowed.test"},
                                         std::vector<std::string>{text},
                                         std::vector<std::uint16_t>{http_->port()})
                        .value());
  const std::string response = Get(HostPort(text, http_->port()));
  EXPECT_NE(response.find("403 Forbidden"), std::string::npos) << response;
  EXPECT_NE(response.find(text + " is the host's own address (no rule opens it)"),
            std::string::npos)
      << response;
  // The exempt test server on 127.0.0.1 is still reached (the kernel check honours the exemption).
  proxy_->SetPolicy(MakePolicy({"allowed.test"}));
  EXPECT_NE(Get(HostPort("allowed.test", http_->port())).find("200 OK"), std::string::npos);
}

// A proxy told which network its clients are on serves nobody else: connections from elsewhere
// are closed unanswered and DNS questions get no answer (none can be reflected elsewhere).
TEST_F(EgressProxyTest, OnlyTheClientNetworkIsServed) {
  auto start = [&](const char* clients) {
    ProxyOptions o;
    o.sandbox = "sb-clients";
    o.resolver_address = Ip("127.0.0.1");
    o.resolver_port = dns_->port();
    o.serve_dns = true;
    o.clients = *ParseCidr(clients);
    o.test_only_dialable = {*ParseCidr("127.0.0.1/32")};
    auto p = EgressProxy::Start(o, MakePolicy({"allowed.test"}), log_);
    EXPECT_TRUE(p.ok()) << p.error().ToString();
    return std::move(p).value();
  };
  auto elsewhere = start("10.0.0.0/8");
  UniqueFd c = ConnectLoopback(elsewhere->port());
  ASSERT_TRUE(c.valid());
  const std::string request =
      "GET /x HTTP/1.1\r\nHost: " + HostPort("allowed.test", http_->port()) +
      "\r\nConnection: close\r\n\r\n";
  SendAll(c.get(), request);
  EXPECT_EQ(ReadAll(c.get()), "");
  EXPECT_TRUE(AskDns(elsewhere->dns_port(), 9, "allowed.test", DnsType::kA, 1).empty());
  EXPECT_TRUE(log_->Recent("sb-clients").empty());  // not even a decision
  // The same proxy for loopback clients answers both.
  auto here = start("127.0.0.0/8");
  UniqueFd d = ConnectLoopback(here->port());
  SendAll(d.get(), request);
  EXPECT_NE(ReadAll(d.get()).find("200 OK"), std::string::npos);
  EXPECT_FALSE(AskDns(here->dns_port(), 10, "allowed.test", DnsType::kA, 5).empty());
}

// ---- Every request of a plain-HTTP connection is checked (issue 32, point 0) ----

std::string Request(const std::string& target, const std::string& host,
                    const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra + "\r\n";
}

// A kept-alive connection to an allowed name (transparent, origin form): a later request for
// another name, allowed or not, would reach the first name's server (behind a CDN: another
// site). It is answered 403 and never reaches the server.
TEST_F(EgressProxyTest, ALaterRequestForAnotherHostIsRefused) {
  const std::string allowed = HostPort("allowed.test", keep_->port());
  for (const std::string other : {"www.allowed.test", "evil.test"}) {
    UniqueFd c = ConnectLoopback(proxy_->port());
    SendAll(c.get(), Request("/1", allowed));
    EXPECT_NE(ReadResponse(c.get()).find("host=" + allowed), std::string::npos);
    SendAll(c.get(), Request("/2", HostPort(other, keep_->port())));
    const std::string refused = ReadAll(c.get());
    EXPECT_NE(refused.find("HTTP/1.1 403 Forbidden"), std::string::npos) << refused;
    EXPECT_NE(refused.find("on a connection opened for " + allowed), std::string::npos) << refused;
  }
  EXPECT_EQ(keep_->lines(), (std::vector<std::string>{"GET /1 HTTP/1.1", "GET /1 HTTP/1.1"}));
  WaitForDecisions(4);
  EXPECT_EQ(log_->Counters("sb-test").denied, 2u);
  EXPECT_EQ(LastDecision().name, "evil.test");
}

// The same through the proxy port with absolute URIs (a proxy client reusing its connection).
TEST_F(EgressProxyTest, ALaterAbsoluteUriToAnotherHostIsRefused) {
  const std::string allowed = HostPort("allowed.test", keep_->port());
  const std::string evil = HostPort("evil.test", keep_->port());
  UniqueFd c = ConnectLoopback(proxy_->port());
  SendAll(c.get(), Request("http://" + allowed + "/1", allowed));
  EXPECT_NE(ReadResponse(c.get()).find("200 OK"), std::string::npos);
  SendAll(c.get(), Request("http://" + allowed + "/2", allowed));
  EXPECT_NE(ReadResponse(c.get()).find("line=GET http://" + allowed + "/2"), std::string::npos);
  SendAll(c.get(), Request("http://" + evil + "/3", evil));
  EXPECT_NE(ReadAll(c.get()).find("403 Forbidden"), std::string::npos);
  EXPECT_EQ(keep_->lines().size(), 2u);
}

// A pipelined pair in one segment: the first is answered, then the second's refusal follows.
TEST_F(EgressProxyTest, APipelinedRequestForAnotherHostIsRefusedAfterTheFirstsAnswer) {
  const std::string allowed = HostPort("allowed.test", keep_->port());
  UniqueFd c = ConnectLoopback(proxy_->port());
  SendAll(c.get(), Request("/1", allowed) + Request("/2", HostPort("evil.test", keep_->port())));
  const std::string got = ReadAll(c.get());
  const std::size_t ok = got.find("HTTP/1.1 200 OK");
  const std::size_t refused = got.find("HTTP/1.1 403 Forbidden");
  ASSERT_NE(ok, std::string::npos) << got;
  ASSERT_NE(refused, std::string::npos) << got;
  EXPECT_LT(ok, refused);
  EXPECT_EQ(keep_->lines(), std::vector<std::string>{"GET /1 HTTP/1.1"});
}

// Bodies are followed, not read as requests: a body that looks like a request for another name
// reaches the server as a body; a request after it is still checked.
TEST_F(EgressProxyTest, BodiesAreFollowedAndTheRequestAfterThemIsChecked) {
  const std::string allowed = HostPort("allowed.test", keep_->port());
  const std::string inner = Request("/smuggled", HostPort("evil.test", keep_->port()));
  UniqueFd c = ConnectLoopback(proxy_->port());
  SendAll(c.get(), "POST /1 HTTP/1.1\r\nHost: " + allowed + "\r\nContent-Length: " +
                       std::to_string(inner.size()) + "\r\n\r\n" + inner + Request("/2", allowed));
  EXPECT_NE(ReadResponse(c.get()).find("line=POST /1"), std::string::npos);
  EXPECT_NE(ReadResponse(c.get()).find("line=GET /2"), std::string::npos);
  SendAll(c.get(), Request("/3", HostPort("evil.test", keep_->port())));
  EXPECT_NE(ReadAll(c.get()).find("403"), std::string::npos);
  EXPECT_EQ(keep_->lines(), (std::vector<std::string>{"POST /1 HTTP/1.1", "GET /2 HTTP/1.1"}));
}

// Framing a server could read differently from the proxy is refused with 400 and the
// connection closed, as a first request and as a later one; the server never sees it.
TEST_F(EgressProxyTest, AmbiguousFramingIsRefusedWith400) {
  const std::string allowed = HostPort("allowed.test", keep_->port());
  const std::string h = "POST /x HTTP/1.1\r\nHost: " + allowed + "\r\n";
  const std::string cases[] = {
      h + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc",
      h + "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
      h + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
      h + "X-Folded: a\r\n b\r\nContent-Length: 3\r\n\r\nabc",
      "POST /x HTTP/1.1\nHost: " + allowed + "\nContent-Length: 3\n\nabc",
  };
  for (const std::string& bad : cases) {
    const std::string first = HttpVia(bad);
    EXPECT_NE(first.find("400 Bad Request"), std::string::npos) << bad << " -> " << first;
    UniqueFd c = ConnectLoopback(proxy_->port());
    SendAll(c.get(), Request("/ok", allowed));
    EXPECT_NE(ReadResponse(c.get()).find("200 OK"), std::string::npos);
    SendAll(c.get(), bad);
    const std::string later = ReadAll(c.get());
    EXPECT_NE(later.find("400 Bad Request"), std::string::npos) << bad << " -> " << later;
  }
  for (const std::string& line : keep_->lines()) EXPECT_EQ(line, "GET /ok HTTP/1.1");
}

// After a 101 the bytes are opaque (a WebSocket's frames are not HTTP); an Upgrade the server
// ignores ends the connection after its answer, so a request after it cannot slip through
// unchecked.
TEST_F(EgressProxyTest, OnlyA101MakesTheRestOpaque) {
  const std::string allowed = HostPort("allowed.test", keep_->port());
  const std::string evil = Request("/2", HostPort("evil.test", keep_->port()));
  UniqueFd up = ConnectLoopback(proxy_->port());
  SendAll(up.get(), Request("/ws", allowed, "Upgrade: echo\r\nConnection: Upgrade\r\n"));
  EXPECT_EQ(ReadHead(up.get()), "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n\r\n");
  SendAll(up.get(), evil);
  std::string echoed(evil.size(), '\0');
  ASSERT_EQ(recv(up.get(), echoed.data(), echoed.size(), MSG_WAITALL),
            static_cast<ssize_t>(evil.size()));
  EXPECT_EQ(echoed, evil);

  UniqueFd ignored = ConnectLoopback(proxy_->port());
  SendAll(ignored.get(), Request("/1", allowed, "Upgrade: ignored\r\nConnection: Upgrade\r\n"));
  EXPECT_NE(ReadResponse(ignored.get()).find("200 OK"), std::string::npos);
  SendAll(ignored.get(), evil);
  EXPECT_EQ(ReadAll(ignored.get()), "");
  EXPECT_EQ(keep_->lines(), (std::vector<std::string>{"GET /ws HTTP/1.1", "GET /1 HTTP/1.1"}));
}

// ---- Open connections follow the policy (issue 32, point 8) and are bounded (point 2) ----

// Whether the peer closes `fd` within `wait` (unread bytes are drained).
bool ClosedWithin(int fd, milliseconds wait) {
  const auto until = steady_clock::now() + wait;
  char buf[4096];
  while (steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
  }
  return false;
}

UniqueFd Tunnel(std::uint16_t proxy_port, const std::string& target) {
  UniqueFd c = ConnectLoopback(proxy_port);
  SendAll(c.get(), "CONNECT " + target + " HTTP/1.1\r\n\r\n");
  EXPECT_EQ(ReadHead(c.get()), "HTTP/1.1 200 Connection established\r\n\r\n") << target;
  return c;
}

bool Echoes(int fd) {
  if (!SendAll(fd, "ping")) return false;
  char buf[4];
  return recv(fd, buf, 4, MSG_WAITALL) == 4 && std::string_view(buf, 4) == "ping";
}

TEST_F(EgressProxyTest, NarrowingThePolicyClosesTunnelsItNoLongerAllows) {
  UniqueFd kept = Tunnel(proxy_->port(), HostPort("allowed.test", echo_->port()));
  UniqueFd dropped = Tunnel(proxy_->port(), HostPort("www.allowed.test", echo_->port()));
  UniqueFd http = ConnectLoopback(proxy_->port());
  SendAll(http.get(), Request("/1", HostPort("www.allowed.test", keep_->port())));
  EXPECT_NE(ReadResponse(http.get()).find("200 OK"), std::string::npos);
  ASSERT_TRUE(Echoes(dropped.get()));
  proxy_->SetPolicy(MakePolicy({"allowed.test"}));
  EXPECT_TRUE(ClosedWithin(dropped.get(), milliseconds(3000)));
  EXPECT_TRUE(ClosedWithin(http.get(), milliseconds(3000)));
  EXPECT_TRUE(Echoes(kept.get()));
  WaitForDecisions(5);
  std::size_t closed = 0;
  for (const Decision& d : log_->Recent("sb-test")) {
    if (d.reason.starts_with("open connection closed, the policy changed: no rule allows "
                             "www.allowed.test")) {
      ++closed;
      EXPECT_FALSE(d.allowed);
    }
  }
  EXPECT_EQ(closed, 2u);
}

TEST_F(EgressProxyTest, IdleTunnelsAreClosedBusyOnesKept) {
  ProxyOptions o;
  o.sandbox = "sb-test";
  o.resolver_address = Ip("127.0.0.1");
  o.resolver_port = dns_->port();
  o.test_only_dialable = {*ParseCidr("127.0.0.1/32")};
  o.idle_timeout = milliseconds(400);
  auto p = EgressProxy::Start(o, MakePolicy({"allowed.test"}), log_);
  ASSERT_TRUE(p.ok());
  UniqueFd idle = Tunnel((*p)->port(), HostPort("allowed.test", echo_->port()));
  UniqueFd busy = Tunnel((*p)->port(), HostPort("allowed.test", echo_->port()));
  const auto start = steady_clock::now();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(Echoes(busy.get())) << i;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(ClosedWithin(idle.get(), milliseconds(3000)));
  EXPECT_GE(steady_clock::now() - start, milliseconds(400));
  EXPECT_TRUE(Echoes(busy.get()));
  // The idle one's close record says why the enforcer closed it.
  WaitForDecisions(3);
  const Decision closed = LastDecision(/*close_record=*/true);
  EXPECT_NE(closed.closes, 0u);
  EXPECT_EQ(closed.reason, "idle for 400 ms");
}

// agvisord's cap over every sandbox: proxies sharing a budget refuse past it, and a closed
// connection gives its share back.
TEST_F(EgressProxyTest, ASharedBudgetCapsConnectionsAcrossProxies) {
  auto budget = std::make_shared<ConnectionBudget>(3);
  auto start = [&] {
    ProxyOptions o;
    o.sandbox = "sb-test";
    o.resolver_address = Ip("127.0.0.1");
    o.resolver_port = dns_->port();
    o.test_only_dialable = {*ParseCidr("127.0.0.1/32")};
    o.shared_budget = budget;
    auto p = EgressProxy::Start(o, MakePolicy({"allowed.test"}), log_);
    EXPECT_TRUE(p.ok());
    return std::move(p).value();
  };
  auto a = start();
  auto b = start();
  const std::string echo = HostPort("allowed.test", echo_->port());
  std::vector<UniqueFd> open;
  open.push_back(Tunnel(a->port(), echo));
  open.push_back(Tunnel(a->port(), echo));
  open.push_back(Tunnel(b->port(), echo));
  UniqueFd over = ConnectLoopback(b->port());
  EXPECT_TRUE(ClosedWithin(over.get(), milliseconds(3000)));
  EXPECT_EQ(LastDecision().reason, "too many open connections on this host (3)");
  open.pop_back();
  auto until = steady_clock::now() + std::chrono::seconds(5);
  while (budget->taken() > 2 && steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  UniqueFd again = Tunnel(b->port(), echo);
  EXPECT_TRUE(Echoes(again.get()));
}

TEST(EgressProxyStartTest, RefusesBadOptions) {
  ProxyOptions o;
  auto unset = EgressProxy::Start(o, *EgressPolicy::Create({}, {}, {}), nullptr);
  ASSERT_FALSE(unset.ok());
  EXPECT_NE(unset.error().message().find("resolver_address is not set"), std::string::npos);
  o.resolver_address = Ip("127.0.0.1");
  o.resolver_port = 0;
  auto p = EgressProxy::Start(o, *EgressPolicy::Create({}, {}, {}), nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code(), ErrorCode::kInvalidArgument);
  ProxyOptions busy;
  busy.resolver_address = Ip("127.0.0.1");
  busy.listen_port = 1;  // privileged or taken either way in a test: expect a clean error
  busy.listen_address = Ip("192.0.2.1");  // not an address of this machine
  auto q = EgressProxy::Start(busy, *EgressPolicy::Create({}, {}, {}), nullptr);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message().find("listen on 192.0.2.1:1"), std::string::npos);
}

}  // namespace
}  // namespace agvisor::egress
