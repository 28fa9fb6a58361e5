// Brokered secrets through the egress proxy, on loopback: a client that trusts the sandbox CA
// (as a sandbox's bundle does) talks TLS to the proxy, which terminates it for bound hosts only,
// verifies a real TLS server of the test (trusted through ProxyOptions::upstream_ca_pem), and
// puts the secret's value in. The server records every request head and body it gets.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>

#include "agvisor/egress/ca.h"
#include "agvisor/egress/proxy.h"
#include "agvisor/egress/testing/loopback.h"

namespace agvisor::egress {
namespace {

using namespace agvisor::egress::testing;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr std::string_view kTokenP = "agvsec_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
constexpr std::string_view kKeyP = "agvsec_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

std::string CertPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return out;
}

// Reads one head (up to the blank line) over TLS, byte by byte; "" at the end.
std::string TlsReadHead(SSL* ssl) {
  std::string out;
  char c;
  while (out.size() < (1u << 20) && !out.ends_with("\r\n\r\n") && SSL_read(ssl, &c, 1) == 1) {
    out += c;
  }
  return out;
}

std::string TlsReadExactly(SSL* ssl, std::size_t n) {
  std::string out(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    int r = SSL_read(ssl, out.data() + got, static_cast<int>(n - got));
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  return out;
}

// One response: head and Content-Length body ("" at the end of the stream).
std::string TlsReadResponse(SSL* ssl) {
  std::string head = TlsReadHead(ssl);
  std::size_t at = head.find("Content-Length: ");
  if (!head.ends_with("\r\n\r\n") || at == std::string::npos) return head;
  return head + TlsReadExactly(ssl, std::stoul(head.substr(at + 16)));
}

bool TlsWrite(SSL* ssl, std::string_view data) {
  return SSL_write(ssl, data.data(), static_cast<int>(data.size())) ==
         static_cast<int>(data.size());
}

// A keep-alive HTTPS server: records every request (head + Content-Length body) and answers
// "seen <n>" until the client's end.
class RecordingTlsServer {
 public:
  explicit RecordingTlsServer(const TlsIdentity& id)
      : ctx_(ServerContext(id)), server_([this](int fd) {
          SslPtr ssl(SSL_new(ctx_.get()), SSL_free);
          SSL_set_fd(ssl.get(), fd);
          if (SSL_accept(ssl.get()) != 1) return;
          while (true) {
            std::string head = TlsReadHead(ssl.get());
            if (!head.ends_with("\r\n\r\n")) return;
            if (std::size_t at = head.find("\r\nContent-Length: "); at != std::string::npos) {
              head += TlsReadExactly(ssl.get(), std::stoul(head.substr(at + 18)));
            }
            std::size_t n;
            {
              std::lock_guard lock(mu_);
              requests_.push_back(head);
              n = requests_.size();
            }
            std::string body = "seen " + std::to_string(n);
            TlsWrite(ssl.get(), "HTTP/1.1 200 OK\r\nContent-Length: " +
                                    std::to_string(body.size()) + "\r\n\r\n" + body);
          }
        }) {}
  std::uint16_t port() const { return server_.port(); }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  SslCtxPtr ctx_;
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
  TcpServer server_;
};

class BrokeredSecretsTest : public ::testing::Test {
 protected:
  // The test's OpenSSL peers write with write(2) (no MSG_NOSIGNAL): a server writing its session
  // tickets after the proxy already closed a finished connection must get EPIPE, not a signal
  // that ends the binary (the proxy itself writes with MSG_NOSIGNAL). Declared first, so the
  // old disposition comes back last, after the servers' threads have ended.
  struct SigpipeIgnored {
    SigpipeIgnored() : old(std::signal(SIGPIPE, SIG_IGN)) {}
    ~SigpipeIgnored() { std::signal(SIGPIPE, old); }
    void (*old)(int);
  } sigpipe_ignored_;
  // The fake internet: one HTTPS server and its names; its certificate names api and other,
  // not wrong.allowed.test.
  TlsIdentity upstream_id_ = TlsIdentity::SelfSigned({"api.allowed.test", "other.allowed.test"});
  std::unique_ptr<RecordingTlsServer> server_;
  std::unique_ptr<FakeDns> dns_;
  // The enforcer, with the sandbox's CA and secrets registered.
  std::shared_ptr<SandboxCa> ca_;
  std::shared_ptr<DecisionLog> log_ = std::make_shared<DecisionLog>();
  std::unique_ptr<EgressProxy> proxy_;
  // The sandbox's client: trusts its CA bundle.
  std::unique_ptr<SslCtxPtr> client_ctx_;

  void SetUp() override {
    server_ = std::make_unique<RecordingTlsServer>(upstream_id_);
    dns_ = std::make_unique<FakeDns>(std::map<std::string, std::vector<IpAddress>>{
        {"api.allowed.test", {*ParseIpAddress("127.0.0.1")}},
        {"other.allowed.test", {*ParseIpAddress("127.0.0.1")}},
        {"wrong.allowed.test", {*ParseIpAddress("127.0.0.1")}},
    });
    std::vector<BrokeredSecret> secrets = {
        {.name = "TOKEN",
         .value = "real-token",
         .placeholder = std::string(kTokenP),
         .hosts = {"api.allowed.test", "wrong.allowed.test"}},
        {.name = "KEY",
         .value = "real-key",
         .placeholder = std::string(kKeyP),
         .hosts = {"api.allowed.test"},
         .header = "X-Api-Key"},
    };
    ASSERT_TRUE(ValidateSecrets(secrets).ok());
    auto ca = SandboxCa::Create("sb-secrets",
                                std::vector<std::string>{"api.allowed.test", "wrong.allowed.test"});
    ASSERT_TRUE(ca.ok());
    ca_ = *ca;
    ProxyOptions o;
    o.sandbox = "sb-secrets";
    o.resolver_address = *ParseIpAddress("127.0.0.1");
    o.resolver_port = dns_->port();
    o.tls_port = server_->port();
    o.test_only_dialable = {*ParseCidr("127.0.0.1/32")};
    o.upstream_ca_pem = CertPem(upstream_id_.cert.get());
    o.on_decision = [](const Decision& d) {
      std::fprintf(stderr, "%s\n", FormatDecision(d).c_str());
    };
    auto policy = EgressPolicy::Create(std::vector<std::string>{"*.allowed.test"},
                                       std::vector<std::string>{"127.0.0.1/32"},
                                       std::vector<std::uint16_t>{server_->port()});
    ASSERT_TRUE(policy.ok());
    auto proxy = EgressProxy::Start(o, *policy, log_);
    ASSERT_TRUE(proxy.ok()) << proxy.error().ToString();
    proxy_ = std::move(proxy).value();
    proxy_->SetSecrets(secrets, ca_);
    // The sandbox's bundle: its CA for bound hosts; the upstream's own for pass-through.
    client_ctx_ = std::make_unique<SslCtxPtr>(ClientContext(upstream_id_));
    BIO* bio = BIO_new_mem_buf(ca_->cert_pem().data(), static_cast<int>(ca_->cert_pem().size()));
    X509* ca_cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(client_ctx_->get()), ca_cert);
    X509_free(ca_cert);
  }

  // A TLS connection through the proxy (transparent, by SNI), verified as `name`.
  struct Conn {
    UniqueFd fd;
    SslPtr ssl{nullptr, SSL_free};
  };
  Conn Open(const std::string& name, bool via_connect = false) {
    Conn c;
    c.fd = ConnectLoopback(proxy_->port());
    timeval tv{10, 0};  // a test that goes wrong fails instead of hanging
    setsockopt(c.fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (via_connect) {
      const std::string authority = name + ":" + std::to_string(server_->port());
      SendAll(c.fd.get(), "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n");
      if (ReadHead(c.fd.get()) != "HTTP/1.1 200 Connection established\r\n\r\n") return c;
    }
    c.ssl = TlsConnect(client_ctx_->get(), c.fd.get(), name);
    return c;
  }

  // The certificate the client was shown was issued by the sandbox CA.
  bool IssuedBySandboxCa(SSL* ssl) {
    X509* peer = SSL_get1_peer_certificate(ssl);
    if (peer == nullptr) return false;
    char issuer[256];
    X509_NAME_oneline(X509_get_issuer_name(peer), issuer, sizeof issuer);
    X509_free(peer);
    return std::string(issuer).find("agvisor sandbox CA sb-secrets") != std::string::npos;
  }

  std::vector<Decision> RequestDecisions() {
    std::vector<Decision> out;
    for (const Decision& d : log_->Recent("sb-secrets")) {
      if (!d.method.empty() || d.status != 0) out.push_back(d);
    }
    return out;
  }

  std::string Auth(std::string_view p) {
    return "Authorization: Bearer " + std::string(p) + "\r\n";
  }
};

TEST_F(BrokeredSecretsTest, TheUpstreamGetsTheValueOnEveryRequestOfAKeptConnection) {
  for (bool via_connect : {false, true}) {
    Conn c = Open("api.allowed.test", via_connect);
    ASSERT_TRUE(c.ssl) << "handshake with the sandbox CA failed (via_connect=" << via_connect
                       << ")";
    EXPECT_TRUE(IssuedBySandboxCa(c.ssl.get()));
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(TlsWrite(c.ssl.get(), "GET /v1/models?key=" + std::string(kTokenP) +
                                            " HTTP/1.1\r\nHost: api.allowed.test\r\n" +
                                            Auth(kTokenP) + "X-Api-Key: " + std::string(kKeyP) +
                                            "\r\n\r\n"));
      EXPECT_NE(TlsReadResponse(c.ssl.get()).find("200 OK"), std::string::npos);
    }
  }
  const auto seen = server_->requests();
  ASSERT_EQ(seen.size(), 6u);
  for (const std::string& r : seen) {
    EXPECT_NE(r.find("Authorization: Bearer real-token\r\n"), std::string::npos) << r;
    EXPECT_NE(r.find("X-Api-Key: real-key\r\n"), std::string::npos) << r;
    // Never in the query.
    EXPECT_NE(r.find("GET /v1/models?key=" + std::string(kTokenP) + " "), std::string::npos);
  }
  const auto decisions = RequestDecisions();
  ASSERT_EQ(decisions.size(), 6u);
  EXPECT_EQ(decisions[0].method, "GET");
  EXPECT_EQ(decisions[0].path, "/v1/models");
  EXPECT_EQ(decisions[0].secret, "TOKEN,KEY");
  EXPECT_TRUE(decisions[0].allowed);
  // Logged once answered: the upstream's status, the answer's bytes ("seen N" and its head).
  EXPECT_EQ(decisions[0].status, 200);
  EXPECT_EQ(decisions[0].bytes_down, 44u);
  EXPECT_GT(decisions[0].bytes_up, 100u);
  for (const Decision& d : log_->Recent("sb-secrets")) {
    EXPECT_EQ(FormatDecision(d).find("real-"), std::string::npos) << FormatDecision(d);
  }
}

TEST_F(BrokeredSecretsTest, APlaceholderToAnotherAllowedHostArrivesUnchanged) {
  Conn c = Open("other.allowed.test");
  ASSERT_TRUE(c.ssl);
  // Pass-through: the client verified the upstream's own certificate.
  EXPECT_FALSE(IssuedBySandboxCa(c.ssl.get()));
  ASSERT_TRUE(TlsWrite(c.ssl.get(),
                       "GET / HTTP/1.1\r\nHost: other.allowed.test\r\n" + Auth(kTokenP) + "\r\n"));
  EXPECT_NE(TlsReadResponse(c.ssl.get()).find("200 OK"), std::string::npos);
  ASSERT_EQ(server_->requests().size(), 1u);
  EXPECT_NE(server_->requests()[0].find(Auth(kTokenP)), std::string::npos);
}

TEST_F(BrokeredSecretsTest, ABoundHostWhoseCertificateFailsGetsNothing) {
  for (bool via_connect : {false, true}) {
    Conn c = Open("wrong.allowed.test", via_connect);
    EXPECT_FALSE(c.ssl);
  }
  EXPECT_TRUE(server_->requests().empty());
  const Decision d = log_->Recent("sb-secrets").back();
  EXPECT_FALSE(d.allowed);
  EXPECT_NE(d.reason.find("certificate"), std::string::npos) << d.reason;
}

// Hostile: a pipelined second request names another host on the bound connection.
TEST_F(BrokeredSecretsTest, APipelinedRequestForAnotherHostGets421AndNoSubstitution) {
  Conn c = Open("api.allowed.test");
  ASSERT_TRUE(c.ssl);
  ASSERT_TRUE(TlsWrite(c.ssl.get(), "GET /1 HTTP/1.1\r\nHost: api.allowed.test\r\n" +
                                        Auth(kTokenP) + "\r\nGET /2 HTTP/1.1\r\nHost: " +
                                        "other.allowed.test\r\n" + Auth(kTokenP) + "\r\n"));
  EXPECT_NE(TlsReadResponse(c.ssl.get()).find("200 OK"), std::string::npos);
  const std::string second = TlsReadResponse(c.ssl.get());
  EXPECT_NE(second.find("421 Misdirected Request"), std::string::npos) << second;
  const auto seen = server_->requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("GET /1 "), std::string::npos);
  // The refusal is logged at once, the first request once its answer has come: either order.
  auto decisions = RequestDecisions();
  ASSERT_EQ(decisions.size(), 2u);
  if (decisions[0].status == 421) std::swap(decisions[0], decisions[1]);
  EXPECT_EQ(decisions[0].status, 200);
  EXPECT_EQ(decisions[0].secret, "TOKEN");
  EXPECT_EQ(decisions[1].status, 421);
  EXPECT_EQ(decisions[1].secret, "");
  EXPECT_FALSE(decisions[1].allowed);
}

// Hostile: Transfer-Encoding with Content-Length hides a second request in the first's body.
TEST_F(BrokeredSecretsTest, TransferEncodingWithContentLengthEndsTheConnection) {
  Conn c = Open("api.allowed.test");
  ASSERT_TRUE(c.ssl);
  const std::string hidden =
      "GET /hidden HTTP/1.1\r\nHost: other.allowed.test\r\n" + Auth(kTokenP) + "\r\n";
  ASSERT_TRUE(
      TlsWrite(c.ssl.get(), "POST /a HTTP/1.1\r\nHost: api.allowed.test\r\n" + Auth(kTokenP) +
                                "Content-Length: " + std::to_string(5 + hidden.size()) +
                                "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hidden));
  const std::string answer = TlsReadResponse(c.ssl.get());
  EXPECT_NE(answer.find("400 Bad Request"), std::string::npos) << answer;
  EXPECT_EQ(TlsReadResponse(c.ssl.get()), "");  // and the connection ends
  EXPECT_TRUE(server_->requests().empty());
}

// Hostile: the other framings a server could read differently end the connection too, and no
// request hidden after them reaches the server.
TEST_F(BrokeredSecretsTest, AmbiguousFramingEndsTheConnection) {
  const std::string hidden =
      "GET /hidden HTTP/1.1\r\nHost: other.allowed.test\r\n" + Auth(kTokenP) + "\r\n";
  const std::string start = "POST /a HTTP/1.1\r\nHost: api.allowed.test\r\n" + Auth(kTokenP);
  for (const std::string& request : {
           start + "X-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n" + hidden,  // obs-fold
           start + "Content-Length: 0\nX: y\r\n\r\n" + hidden,                 // bare LF
           start + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + hidden,        // chunk size
           start + "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab" + hidden,
       }) {
    Conn c = Open("api.allowed.test");
    ASSERT_TRUE(c.ssl);
    ASSERT_TRUE(TlsWrite(c.ssl.get(), request));
    std::string answers;
    for (std::string r; !(r = TlsReadResponse(c.ssl.get())).empty();) answers += r;
    EXPECT_NE(answers.find("400 Bad Request"), std::string::npos) << request << answers;
  }
  for (const std::string& seen : server_->requests()) {
    EXPECT_EQ(seen.find("/hidden"), std::string::npos) << seen;
  }
}

// ALPN: the sandbox is offered http/1.1 only, whatever it asks for.
TEST_F(BrokeredSecretsTest, AlpnAgreesOnHttp11Only) {
  for (const std::string& offer : {std::string("\x02h2\x08http/1.1"), std::string("\x02h2")}) {
    SSL_CTX_set_alpn_protos(client_ctx_->get(),
                            reinterpret_cast<const unsigned char*>(offer.data()),
                            static_cast<unsigned>(offer.size()));
    Conn c = Open("api.allowed.test");
    ASSERT_TRUE(c.ssl);
    const unsigned char* chosen = nullptr;
    unsigned len = 0;
    SSL_get0_alpn_selected(c.ssl.get(), &chosen, &len);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(chosen), len),
              offer.size() > 3 ? "http/1.1" : "");
  }
}

// Hostile: headers are bounded; the connection ends before the upstream sees any of it.
TEST_F(BrokeredSecretsTest, HugeHeadersAreRefused) {
  Conn c = Open("api.allowed.test");
  ASSERT_TRUE(c.ssl);
  const std::string big(100 * 1024, 'x');
  TlsWrite(c.ssl.get(), "GET / HTTP/1.1\r\nHost: api.allowed.test\r\n" + Auth(kTokenP) +
                            "X-Big: " + big + "\r\n\r\n");
  EXPECT_NE(TlsReadResponse(c.ssl.get()).find("400 Bad Request"), std::string::npos);
  EXPECT_TRUE(server_->requests().empty());
}

TEST_F(BrokeredSecretsTest, BodiesPassUnchanged) {
  Conn c = Open("api.allowed.test");
  ASSERT_TRUE(c.ssl);
  const std::string body = "token=" + std::string(kTokenP);
  ASSERT_TRUE(TlsWrite(c.ssl.get(),
                       "POST /b HTTP/1.1\r\nHost: api.allowed.test\r\n" + Auth(kTokenP) +
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  EXPECT_NE(TlsReadResponse(c.ssl.get()).find("200 OK"), std::string::npos);
  ASSERT_EQ(server_->requests().size(), 1u);
  EXPECT_TRUE(server_->requests()[0].ends_with("\r\n\r\n" + body));
  EXPECT_NE(server_->requests()[0].find("Bearer real-token"), std::string::npos);
}

TEST(BrokeredSecretsOptionsTest, UpstreamCasMustBeCertificates) {
  ProxyOptions o;
  o.resolver_address = IpAddress::V4(127, 0, 0, 1);
  o.upstream_ca_pem = "not a certificate";
  auto proxy = EgressProxy::Start(
      o,
      *EgressPolicy::Create(std::vector<std::string>{"a.test"}, std::vector<std::string>{},
                            std::vector<std::uint16_t>{443}),
      nullptr);
  ASSERT_FALSE(proxy.ok());
  EXPECT_EQ(proxy.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(proxy.error().message().find("upstream_ca_pem"), std::string::npos);
}

}  // namespace
}  // namespace agvisor::egress
