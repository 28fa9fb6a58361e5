// One TLS server of the bench's own (a self-signed certificate naming both hosts) answers
// keep-alive requests: `GET /small` with 2 bytes, `GET /big` with kBigBytes. The proxy reaches it
// as `bound.test` (a secret is bound to it: intercepted) and `pass.test` (no secret: spliced);
// the client trusts the server's certificate and the sandbox CA, as a sandbox's bundle would.
#include "egress_interception.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "agvisor/egress/ca.h"
#include "agvisor/egress/proxy.h"
#include "agvisor/egress/testing/loopback.h"

namespace agvisor {
namespace {

using namespace egress;
using namespace egress::testing;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kBigBytes = 100u << 20;
constexpr std::string_view kPlaceholder = "agvsec_0123456789abcdef0123456789abcdef";

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// User and system CPU of this process so far, every thread.
double ProcessCpuMs() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return t.tv_sec * 1000.0 + t.tv_usec / 1000.0; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

std::string ReadHeadTls(SSL* ssl) {
  std::string out;
  char c;
  while (out.size() < 65536 && !out.ends_with("\r\n\r\n") && SSL_read(ssl, &c, 1) == 1) out += c;
  return out;
}

// Reads one answer (head + Content-Length body); the body's size, or 0 when it broke.
std::size_t ReadAnswer(SSL* ssl) {
  std::string head = ReadHeadTls(ssl);
  std::size_t at = head.find("Content-Length: ");
  if (at == std::string::npos) return 0;
  std::size_t want = std::stoul(head.substr(at + 16)), got = 0;
  std::vector<char> buf(1 << 16);
  while (got < want) {
    int n = SSL_read(ssl, buf.data(), static_cast<int>(std::min(buf.size(), want - got)));
    if (n <= 0) return 0;
    got += static_cast<std::size_t>(n);
  }
  return got;
}

void Serve(SSL_CTX* ctx, int fd) {
  int one = 1;  // the handshake's last flight and the answers go out at once (no Nagle wait)
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  SslPtr ssl(SSL_new(ctx), SSL_free);
  SSL_set_fd(ssl.get(), fd);
  if (SSL_accept(ssl.get()) != 1) return;
  const std::string chunk(1 << 20, 'x');
  while (true) {
    std::string head = ReadHeadTls(ssl.get());
    if (!head.ends_with("\r\n\r\n")) return;
    const bool big = head.starts_with("GET /big ");
    const std::size_t n = big ? kBigBytes : 2;
    std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(n) + "\r\n\r\n";
    if (!big) answer += "ok";
    if (SSL_write(ssl.get(), answer.data(), static_cast<int>(answer.size())) <= 0) return;
    for (std::size_t sent = 0; big && sent < n; sent += chunk.size()) {
      if (SSL_write(ssl.get(), chunk.data(), static_cast<int>(chunk.size())) <= 0) return;
    }
  }
}

struct Session {
  UniqueFd fd;
  SslPtr ssl{nullptr, SSL_free};
};

Session Open(SSL_CTX* ctx, std::uint16_t port, const std::string& name) {
  Session s;
  s.fd = ConnectLoopback(port);
  s.ssl = TlsConnect(ctx, s.fd.get(), name);
  return s;
}

std::string Request(const std::string& name, const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: " + name + "\r\nAuthorization: Bearer " +
         std::string(kPlaceholder) + "\r\n\r\n";
}

bool Ask(SSL* ssl, const std::string& request) {
  return SSL_write(ssl, request.data(), static_cast<int>(request.size())) > 0 &&
         ReadAnswer(ssl) > 0;
}

}  // namespace

void InterceptionRows(int runs) {
  // The bench's OpenSSL peers write with write(2): a peer gone must be EPIPE, not a signal.
  std::signal(SIGPIPE, SIG_IGN);
  TlsIdentity id = TlsIdentity::SelfSigned({"bound.test", "pass.test"});
  SslCtxPtr server_ctx = ServerContext(id);
  // The server picks AES-128-GCM, as large sites do (the enforcer's own legs prefer it too):
  // pass-through and intercepted connections then carry the same suite end to end, and the
  // ratio is the enforcer's cost alone.
  SSL_CTX_set_ciphersuites(server_ctx.get(),
                           "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:"
                           "TLS_AES_256_GCM_SHA384");
  SSL_CTX_set_options(server_ctx.get(), SSL_OP_CIPHER_SERVER_PREFERENCE);
  TcpServer server([&](int fd) { Serve(server_ctx.get(), fd); });
  FakeDns dns({{"bound.test", {IpAddress::V4(127, 0, 0, 1)}},
               {"pass.test", {IpAddress::V4(127, 0, 0, 1)}}});
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, id.cert.get());
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio, &data);
  ProxyOptions o;
  o.sandbox = "bench";
  o.resolver_address = IpAddress::V4(127, 0, 0, 1);
  o.resolver_port = dns.port();
  o.tls_port = server.port();
  o.test_only_dialable = {*ParseCidr("127.0.0.1/32")};
  o.upstream_ca_pem.assign(data, static_cast<std::size_t>(len));
  BIO_free(bio);
  auto policy = EgressPolicy::Create(std::vector<std::string>{"bound.test", "pass.test"},
                                     std::vector<std::string>{"127.0.0.1/32"},
                                     std::vector<std::uint16_t>{server.port()});
  auto proxy = EgressProxy::Start(o, *policy, nullptr);
  auto ca = SandboxCa::Create("bench", std::vector<std::string>{"bound.test"});
  if (!proxy.ok() || !ca.ok()) {
    std::fprintf(stderr, "interception rows: the proxy or the CA could not start\n");
    return;
  }
  std::vector<BrokeredSecret> secrets = {{.name = "TOKEN",
                                          .value = "the-real-token-value",
                                          .placeholder = std::string(kPlaceholder),
                                          .hosts = {"bound.test"}}};
  (*proxy)->SetSecrets(secrets, *ca);
  SslCtxPtr client_ctx = ClientContext(id);
  BIO* ca_bio =
      BIO_new_mem_buf((*ca)->cert_pem().data(), static_cast<int>((*ca)->cert_pem().size()));
  X509* ca_cert = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr);
  BIO_free(ca_bio);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(client_ctx.get()), ca_cert);
  X509_free(ca_cert);
  const std::uint16_t port = (*proxy)->port();

  // Connection setup: TCP + TLS + one small request, a new connection each time.
  std::vector<double> setup_i, setup_p;
  int failures = 0;
  for (int i = 0; i < runs; ++i) {  // interleaved, so drift hits both sides alike
    for (const std::string name : {"bound.test", "pass.test"}) {
      const auto start = Clock::now();
      Session s = Open(client_ctx.get(), port, name);
      const bool ok = s.ssl && Ask(s.ssl.get(), Request(name, "/small"));
      (name == "bound.test" ? setup_i : setup_p).push_back(Ms(Clock::now() - start));
      failures += ok ? 0 : 1;
    }
  }
  // One request on a kept connection.
  std::vector<double> kept_i, kept_p;
  {
    Session bound = Open(client_ctx.get(), port, "bound.test");
    Session pass = Open(client_ctx.get(), port, "pass.test");
    const std::string rb = Request("bound.test", "/small"), rp = Request("pass.test", "/small");
    for (int i = 0; i < runs && bound.ssl && pass.ssl; ++i) {
      auto start = Clock::now();
      failures += Ask(bound.ssl.get(), rb) ? 0 : 1;
      kept_i.push_back(Ms(Clock::now() - start));
      start = Clock::now();
      failures += Ask(pass.ssl.get(), rp) ? 0 : 1;
      kept_p.push_back(Ms(Clock::now() - start));
    }
  }
  // Download throughput, median of 5 per side, and the CPU this process (client, server and
  // enforcer) spent on each: the difference is the enforcer's, whatever the load.
  std::vector<double> mbs_i, mbs_p, cpu_i, cpu_p;
  for (int i = 0; i < 5; ++i) {
    for (const std::string name : {"bound.test", "pass.test"}) {
      Session s = Open(client_ctx.get(), port, name);
      const auto start = Clock::now();
      const double cpu_start = ProcessCpuMs();
      const std::string r = Request(name, "/big");
      const bool ok = s.ssl && SSL_write(s.ssl.get(), r.data(), static_cast<int>(r.size())) > 0 &&
                      ReadAnswer(s.ssl.get()) == kBigBytes;
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      (name == "bound.test" ? mbs_i : mbs_p).push_back(ok ? kBigBytes / 1048576.0 / secs : 0);
      (name == "bound.test" ? cpu_i : cpu_p).push_back(ProcessCpuMs() - cpu_start);
      failures += ok ? 0 : 1;
    }
  }
  std::printf(
      "\nbrokered secrets on loopback: intercepted (TLS terminated, upstream verified, "
      "requests rewritten) vs pass-through (SNI, spliced); %d runs per side%s\n",
      runs, failures ? " (SOME REQUESTS FAILED)" : "");
  std::printf("| measure | intercepted | pass-through | added / ratio |\n|---|---|---|---|\n");
  for (double p : {0.5, 0.95}) {
    const double i = Percentile(setup_i, p), q = Percentile(setup_p, p);
    std::printf("| connection setup + 1 request p%.0f | %.3f ms | %.3f ms | +%.3f ms |\n", p * 100,
                i, q, i - q);
  }
  for (double p : {0.5, 0.95}) {
    const double i = Percentile(kept_i, p), q = Percentile(kept_p, p);
    std::printf("| request on a kept connection p%.0f | %.3f ms | %.3f ms | +%.3f ms%s |\n",
                p * 100, i, q, i - q, p == 0.5 ? " (target <= 2 ms)" : "");
  }
  const double i = Percentile(mbs_i, 0.5), q = Percentile(mbs_p, 0.5);
  std::printf("| 100 MiB download, median of 5 | %.0f MB/s | %.0f MB/s | %.2f (target >= 0.8) |\n",
              i, q, q > 0 ? i / q : 0);
  const double ci = Percentile(cpu_i, 0.5), cp = Percentile(cpu_p, 0.5);
  std::printf("| CPU of the process per 100 MiB, median | %.0f ms | %.0f ms | +%.0f ms |\n", ci, cp,
              ci - cp);
}

}  // namespace agvisor
