#include "agvisor/http/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace agvisor::http::internal {
namespace {

// OpenSSL's queued errors as one line (and the queue emptied).
std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("no detail from OpenSSL") : out;
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// Reads one PEM object from `bio` and hands it to `ctx` with `use` (which takes a reference of its
// own). kInvalidArgument "TLS: the client <what>: <OpenSSL's errors>" when either step fails.
template <typename T>
Result<void> UsePemObject(SSL_CTX* ctx, BIO* bio, T* (*read)(BIO*, T**, pem_password_cb*, void*),
                          int (*use)(SSL_CTX*, T*), void (*free_object)(T*),
                          std::string_view what) {
  const std::unique_ptr<T, void (*)(T*)> object(read(bio, nullptr, nullptr, nullptr), free_object);
  if (!object || use(ctx, object.get()) != 1) {
    return Error::InvalidArgument("TLS: the client " + std::string(what) + ": " + OpenSslErrors());
  }
  return Ok();
}

// Waits for what OpenSSL asked for. While another thread may run the session (a write beside a
// read), records it consumes would not wake poll: the wait is cut into 100 ms steps.
int WaitFor(int fd, int ssl_error, Deadline deadline) {
  const short events = ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
  Deadline step = std::min(deadline, Clock::now() + std::chrono::milliseconds(100));
  int w = WaitFd(fd, events, step);
  if (w == ETIMEDOUT && Clock::now() < deadline) return 0;
  return w;
}

}  // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::Create(const TlsConfig& config) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return Error::Internal("TLS: SSL_CTX_new: " + OpenSslErrors());
  auto owned = std::shared_ptr<TlsContext>(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // HTTP frames its messages itself: a peer closing without close_notify is an end of stream
  // (Go's TLS servers often do), and a truncated response is caught by the HTTP parser.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (!config.ca_pem.empty()) {
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    auto bio = MemBio(config.ca_pem);
    int added = 0;
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      if (X509_STORE_add_cert(store, cert) == 1) ++added;
      X509_free(cert);
    }
    ERR_clear_error();  // the end of the PEM data reads as an error
    if (added == 0) {
      return Error::InvalidArgument("TLS: the certificate authority data holds no PEM certificate");
    }
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return Error::Internal("TLS: the system's trust store: " + OpenSslErrors());
  }
  if (!config.cert_pem.empty() || !config.key_pem.empty()) {
    if (config.cert_pem.empty() || config.key_pem.empty()) {
      return Error::InvalidArgument(
          "TLS: a client certificate needs its key, and a key its certificate");
    }
    auto cbio = MemBio(config.cert_pem);
    AGVISOR_RETURN_IF_ERROR(UsePemObject(ctx, cbio.get(), PEM_read_bio_X509,
                                         SSL_CTX_use_certificate, X509_free,
                                         "certificate is not a PEM certificate"));
    // The rest of the PEM data: intermediate certificates sent with it.
    while (X509* extra = PEM_read_bio_X509(cbio.get(), nullptr, nullptr, nullptr)) {
      if (SSL_CTX_add_extra_chain_cert(ctx, extra) != 1) X509_free(extra);
    }
    ERR_clear_error();
    auto kbio = MemBio(config.key_pem);
    AGVISOR_RETURN_IF_ERROR(UsePemObject(ctx, kbio.get(), PEM_read_bio_PrivateKey,
                                         SSL_CTX_use_PrivateKey, EVP_PKEY_free,
                                         "key is not an unencrypted PEM key"));
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return Error::InvalidArgument(
          "TLS: the client key does not belong to the client certificate");
    }
  }
  return owned;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

Result<std::unique_ptr<TlsConn>> TlsConn::Handshake(const TlsContext& ctx, int fd,
                                                    const std::string& server_name,
                                                    Deadline deadline) {
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) return Error::Internal("TLS: SSL_new: " + OpenSslErrors());
  auto conn = std::unique_ptr<TlsConn>(new TlsConn(ssl, fd));
  if (SSL_set_fd(ssl, fd) != 1) return Error::Internal("TLS: SSL_set_fd: " + OpenSslErrors());
  if (IsIpAddress(server_name)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name.c_str());
  } else {
    // SSL_set_tlsext_host_name, without its macro's C cast.
    SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(server_name.c_str()));
    SSL_set1_host(ssl, server_name.c_str());
  }
  for (;;) {
    ERR_clear_error();
    int r = SSL_connect(ssl);
    if (r == 1) return conn;
    int err = SSL_get_error(ssl, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      if (int w = WaitFor(fd, err, deadline)) {
        if (w == ETIMEDOUT)
          return Error::Timeout("TLS handshake with " + server_name + ": no answer in time");
        return Error::FromErrno("TLS handshake with " + server_name, w);
      }
      continue;
    }
    long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      return Error::PermissionDenied(
          "TLS handshake with " + server_name + ": the server's certificate did not verify (" +
          X509_verify_cert_error_string(verify) +
          "): check the certificate authority of the cluster in the kubeconfig");
    }
    if (err == SSL_ERROR_SYSCALL && errno != 0) {
      return Error::Unavailable("TLS handshake with " + server_name + ": " + std::strerror(errno));
    }
    return Error::Unavailable("TLS handshake with " + server_name + ": " + OpenSslErrors());
  }
}

TlsConn::~TlsConn() { SSL_free(ssl_); }

ssize_t TlsConn::Recv(char* buf, std::size_t size, Deadline deadline) {
  const int want = static_cast<int>(std::min<std::size_t>(size, INT_MAX));
  for (;;) {
    int r = 0, err = 0, sys = 0;
    {
      std::lock_guard lock(mu_);
      ERR_clear_error();
      r = SSL_read(ssl_, buf, want);
      if (r <= 0) {
        err = SSL_get_error(ssl_, r);
        sys = errno;
      }
    }
    if (r > 0) return r;
    if (err == SSL_ERROR_ZERO_RETURN) return 0;
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      if (int w = WaitFor(fd_, err, deadline)) return -w;
      continue;
    }
    if (err == SSL_ERROR_SYSCALL) return sys != 0 ? -sys : 0;
    ERR_clear_error();
    return -EPROTO;
  }
}

int TlsConn::SendAll(const iovec* iov, int iovcnt, Deadline deadline, std::size_t* sent) {
  for (int i = 0; i < iovcnt; ++i) {
    const char* p = static_cast<const char*>(iov[i].iov_base);
    std::size_t left = iov[i].iov_len;
    while (left > 0) {
      int r = 0, err = 0, sys = 0;
      {
        std::lock_guard lock(mu_);
        ERR_clear_error();
        r = SSL_write(ssl_, p, static_cast<int>(std::min<std::size_t>(left, INT_MAX)));
        if (r <= 0) {
          err = SSL_get_error(ssl_, r);
          sys = errno;
        }
      }
      if (r > 0) {
        p += r;
        left -= static_cast<std::size_t>(r);
        *sent += static_cast<std::size_t>(r);
        continue;
      }
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        if (int w = WaitFor(fd_, err, deadline)) return w;
        continue;
      }
      if (err == SSL_ERROR_SYSCALL && sys != 0) return sys;
      ERR_clear_error();
      return EPIPE;
    }
  }
  return 0;
}

void TlsConn::Shutdown() {
  std::lock_guard lock(mu_);
  (void)SSL_shutdown(ssl_);
  ERR_clear_error();
}

}  // namespace agvisor::http::internal
