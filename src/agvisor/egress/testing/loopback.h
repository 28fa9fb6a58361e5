// A fake internet on loopback for the egress proxy's tests and benchmark: a DNS server that
// answers from a table and records every question, a TCP server that runs a handler per
// connection, a self-signed TLS identity, and blocking client helpers. Real sockets and real
// OpenSSL, no mocks; everything binds 127.0.0.1 port 0. Header-only (tests and bench/ include it).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "agvisor/base/unique_fd.h"
#include "agvisor/egress/address.h"
#include "agvisor/egress/dns.h"

namespace agvisor::egress::testing {

inline std::uint16_t LocalPort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

inline UniqueFd BindLoopback(int type) {
  UniqueFd fd(socket(AF_INET, type | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!fd || bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    throw std::runtime_error("bind 127.0.0.1:0 failed");
  }
  return fd;
}

// A UDP DNS server on 127.0.0.1: answers A/AAAA from `records` (any other name: NXDOMAIN) and
// keeps every question's name, lower-cased, in order.
class FakeDns {
 public:
  explicit FakeDns(std::map<std::string, std::vector<IpAddress>> records)
      : records_(std::move(records)), fd_(BindLoopback(SOCK_DGRAM)) {
    port_ = LocalPort(fd_.get());
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDns() {
    stop_ = true;
    thread_.join();
  }
  std::uint16_t port() const { return port_; }
  std::vector<std::string> questions() const {
    std::lock_guard lock(mu_);
    return questions_;
  }
  // Stops answering (questions are still recorded): a resolver that is down.
  void set_silent(bool silent) { silent_ = silent; }
  // The TTL of the answers from now on (default 60 s).
  void set_ttl(std::uint32_t ttl) { ttl_ = ttl; }

 private:
  void Serve() {
    std::vector<std::uint8_t> buf(4096);
    while (!stop_) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      sockaddr_in from{};
      socklen_t len = sizeof from;
      ssize_t n =
          recvfrom(fd_.get(), buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n <= 0) continue;
      std::span<const std::uint8_t> query(buf.data(), static_cast<std::size_t>(n));
      auto q = ParseDnsQuery(query);
      if (!q.ok()) continue;
      std::string name = q->name;
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      {
        std::lock_guard lock(mu_);
        questions_.push_back(name);
      }
      if (silent_) continue;
      auto it = records_.find(name);
      std::vector<std::uint8_t> out =
          it == records_.end() ? BuildDnsResponse(query, *q, DnsRcode::kNxDomain, {}, ttl_)
                               : BuildDnsResponse(query, *q, DnsRcode::kNoError, it->second, ttl_);
      sendto(fd_.get(), out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  }

  std::map<std::string, std::vector<IpAddress>> records_;
  UniqueFd fd_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> silent_{false};
  std::atomic<std::uint32_t> ttl_{60};
  mutable std::mutex mu_;
  std::vector<std::string> questions_;
  std::thread thread_;
};

// A TCP server on 127.0.0.1 running `handler(fd)` on a thread per connection; counts them.
class TcpServer {
 public:
  explicit TcpServer(std::function<void(int fd)> handler)
      : handler_(std::move(handler)), fd_(BindLoopback(SOCK_STREAM)) {
    listen(fd_.get(), 128);
    port_ = LocalPort(fd_.get());
    thread_ = std::thread([this] { Serve(); });
  }
  ~TcpServer() {
    stop_ = true;
    thread_.join();
    for (std::thread& t : connections_) t.join();
  }
  std::uint16_t port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int c = accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++accepted_;
      connections_.emplace_back([this, c] {
        UniqueFd owned(c);
        handler_(c);
      });
    }
  }

  std::function<void(int)> handler_;
  UniqueFd fd_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<std::thread> connections_;
  std::thread thread_;
};

inline bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads until end of stream, an error, or `limit` bytes (receive timeout: 10 s).
inline std::string ReadAll(int fd, std::size_t limit = 64 << 20) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  char buf[65536];
  while (out.size() < limit) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// Reads up to and including the first blank line (byte by byte: nothing after it is consumed).
inline std::string ReadHead(int fd) {
  std::string out;
  char c;
  while (out.size() < 65536 && !out.ends_with("\r\n\r\n") && recv(fd, &c, 1, 0) == 1) out += c;
  return out;
}

inline UniqueFd ConnectLoopback(std::uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return UniqueFd();
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// A self-signed certificate for `names` (first = CN, all as DNS subjectAltNames) and its key.
struct TlsIdentity {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{nullptr, EVP_PKEY_free};
  std::unique_ptr<X509, decltype(&X509_free)> cert{nullptr, X509_free};

  static TlsIdentity SelfSigned(const std::vector<std::string>& names) {
    TlsIdentity id;
    id.key.reset(EVP_EC_gen("P-256"));
    id.cert.reset(X509_new());
    X509* x = id.cert.get();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, id.key.get());
    X509_NAME* subject = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(names[0].c_str()), -1, -1, 0);
    X509_set_issuer_name(x, subject);
    std::string san;
    for (const std::string& n : names) san += (san.empty() ? "DNS:" : ",DNS:") + n;
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name, san.c_str());
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    X509_sign(x, id.key.get(), EVP_sha256());
    return id;
  }
};

using SslCtxPtr = std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)>;
using SslPtr = std::unique_ptr<SSL, decltype(&SSL_free)>;

inline SslCtxPtr ServerContext(const TlsIdentity& id) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  SSL_CTX_use_certificate(ctx.get(), id.cert.get());
  SSL_CTX_use_PrivateKey(ctx.get(), id.key.get());
  return ctx;
}

// A client context that trusts only `id`'s certificate and checks host names.
inline SslCtxPtr ClientContext(const TlsIdentity& id) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), id.cert.get());
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  return ctx;
}

// A TLS handshake on `fd` as a client for `name` (SNI and verified host name). Returns the SSL
// object on success (the caller then reads/writes), nullptr on failure.
inline SslPtr TlsConnect(SSL_CTX* ctx, int fd, const std::string& name) {
  SslPtr ssl(SSL_new(ctx), SSL_free);
  // SSL_set_tlsext_host_name without its C cast (an empty name sets none: OpenSSL refuses it).
  SSL_ctrl(ssl.get(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
           const_cast<char*>(name.c_str()));
  SSL_set1_host(ssl.get(), name.c_str());
  SSL_set_fd(ssl.get(), fd);
  if (SSL_connect(ssl.get()) != 1) {
    ERR_clear_error();
    return SslPtr(nullptr, SSL_free);
  }
  return ssl;
}

inline std::string TlsReadAll(SSL* ssl) {
  std::string out;
  char buf[16384];
  int n;
  while ((n = SSL_read(ssl, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

}  // namespace agvisor::egress::testing
