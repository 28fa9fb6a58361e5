// TLS for the HTTP client (https:// endpoints: the Kubernetes API server, kube/): an OpenSSL
// context built from PEM data (the cluster's CA, an optional client certificate and key), a TLS
// session over one of fd_io.h's non-blocking sockets with deadline-bounded reads and writes, and
// the RawStream left after an upgrade (a WebSocket) over it.
//
// Private to http/ (client.cc). The peer is always verified: against the given CA bundle, or the
// system's trust store when none is given, and its name (DNS name or IP address) against the
// certificate. There is no switch to skip verification.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <memory>
#include <mutex>
#include <string>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/http/client.h"
#include "agvisor/http/fd_io.h"

struct ssl_ctx_st;
struct ssl_st;

namespace agvisor::http::internal {

class TlsContext {
 public:
  // Errors: kInvalidArgument (PEM data that does not parse, a key that does not match the
  // certificate: the message names which).
  static Result<std::shared_ptr<TlsContext>> Create(const TlsConfig& config);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* get() const { return ctx_; }

 private:
  explicit TlsContext(ssl_ctx_st* ctx) : ctx_(ctx) {}
  ssl_ctx_st* ctx_;
};

// One TLS session over a connected non-blocking socket it does not own. OpenSSL's session object
// is not safe for two threads at once: every call takes a lock, and waits for the socket without
// it, so a reader blocked for data never holds up a writer.
class TlsConn {
 public:
  // Runs the handshake to `server_name` (a DNS name or an IP address, checked against the
  // certificate). Errors: kPermissionDenied (the certificate did not verify: says why),
  // kUnavailable (the connection broke), kTimeout.
  static Result<std::unique_ptr<TlsConn>> Handshake(const TlsContext& ctx, int fd,
                                                    const std::string& server_name,
                                                    Deadline deadline);
  ~TlsConn();
  TlsConn(const TlsConn&) = delete;
  TlsConn& operator=(const TlsConn&) = delete;

  // As RecvSome (fd_io.h): the byte count, 0 at the end of the stream, or -errno (-ETIMEDOUT,
  // -EPROTO for a TLS failure).
  ssize_t Recv(char* buf, std::size_t size, Deadline deadline);
  // As SendAll (fd_io.h).
  int SendAll(const iovec* iov, int iovcnt, Deadline deadline, std::size_t* sent);
  // Sends close_notify (the peer reads the end of the stream); reading goes on.
  void Shutdown();

 private:
  TlsConn(ssl_st* ssl, int fd) : ssl_(ssl), fd_(fd) {}
  std::mutex mu_;
  ssl_st* ssl_;
  int fd_;
};

}  // namespace agvisor::http::internal
