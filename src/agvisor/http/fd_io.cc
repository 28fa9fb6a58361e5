#include "agvisor/http/fd_io.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "agvisor/base/pending_bytes.h"
#include "agvisor/http/tls.h"

namespace agvisor::http::internal {
namespace {

int SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno;
  return 0;
}

// Milliseconds left until `deadline`, rounded up, for poll(2); -1 = no deadline.
int PollTimeout(Deadline deadline) {
  if (deadline == Deadline::max()) return -1;
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<long long>(ms, 1 << 30));
}

Error ErrnoError(std::string what, int err) { return Error::FromErrno(std::move(what), err); }

// The RawStream over a socket, plain or TLS (`tls_` set). Read and Write may run on two threads at
// once (the fd is non-blocking and each call polls on its own). Close() may race with both: it
// shuts the socket down (which wakes a blocked poll with POLLHUP), then waits for the calls in
// flight to leave before releasing the TLS session and closing the fd, so that no thread ever
// touches an fd number the process has reused.
class SocketRawStream final : public RawStream {
 public:
  SocketRawStream(UniqueFd fd, std::unique_ptr<TlsConn> tls, std::string initial)
      : fd_(std::move(fd)),
        tls_(std::move(tls)),
        what_(tls_ ? "TLS stream" : "hijacked stream"),
        pending_(std::move(initial)) {}
  ~SocketRawStream() override { Close(); }

  Result<std::size_t> ReadUntil(std::span<char> buf, Deadline deadline) override {
    if (buf.empty()) return std::size_t{0};
    {
      std::lock_guard lock(mu_);
      if (closed_) return std::size_t{0};
      if (!pending_.empty()) return pending_.Take(buf);
      ++active_;
    }
    iovec iov{buf.data(), buf.size()};
    ssize_t n = tls_ ? tls_->Recv(buf.data(), buf.size(), deadline)
                     : RecvSome(fd_.get(), &iov, 1, deadline);
    Leave();
    if (n >= 0) return static_cast<std::size_t>(n);
    // The peer went away, or Close() cut a read short: the same as EOF to a reader.
    if (-n == ECONNRESET || closed_.load()) return std::size_t{0};
    if (-n == ETIMEDOUT && deadline != Deadline::max() && Clock::now() >= deadline) {
      return Error::Timeout(std::string("read from ") + what_ + ": nothing arrived in time");
    }
    if (tls_ && -n == EPROTO) return Error::Unavailable("read from TLS stream: TLS error");
    return ErrnoError(std::string("read from ") + what_, static_cast<int>(-n));
  }

  Result<void> Write(std::string_view data) override {
    if (!Enter()) return Error::Unavailable(std::string("write to ") + what_ + ": stream closed");
    iovec iov{const_cast<char*>(data.data()), data.size()};
    std::size_t sent = 0;
    int err = tls_ ? tls_->SendAll(&iov, 1, Deadline::max(), &sent)
                   : SendAll(fd_.get(), &iov, 1, Deadline::max(), &sent);
    Leave();
    if (err != 0) return ErrnoError(std::string("write to ") + what_, err);
    return Ok();
  }

  Result<void> CloseWrite() override {
    const std::string what = std::string("half-close ") + what_;
    if (!Enter()) return Error::Unavailable(what + ": stream closed");
    int err = 0;
    if (tls_) {
      tls_->Shutdown();  // close_notify; the socket stays open for reading
    } else if (::shutdown(fd_.get(), SHUT_WR) != 0) {
      err = errno;
    }
    Leave();
    if (err != 0 && err != ENOTCONN) return ErrnoError(what + " (shutdown SHUT_WR)", err);
    return Ok();
  }

  void Close() override {
    std::unique_lock lock(mu_);
    if (closed_) return;
    closed_ = true;
    ::shutdown(fd_.get(), SHUT_RDWR);
    idle_.wait(lock, [&] { return active_ == 0; });
    tls_.reset();  // before the socket closes: the session refers to the fd number
    fd_.reset();
  }

 private:
  bool Enter() {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    ++active_;
    return true;
  }
  void Leave() {
    std::lock_guard lock(mu_);
    if (--active_ == 0) idle_.notify_all();
  }

  UniqueFd fd_;
  std::unique_ptr<TlsConn> tls_;  // null for a plain socket
  const char* what_;              // names the stream in errors
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;  // Read/Write/CloseWrite calls using fd_ right now
  std::atomic<bool> closed_{false};
  PendingBytes pending_;  // bytes read past the response headers, not yet handed out
};

}  // namespace

Deadline DeadlineAfter(std::chrono::milliseconds d) {
  if (d <= std::chrono::milliseconds::zero() || d > std::chrono::hours(24 * 365)) {
    return Deadline::max();
  }
  return Clock::now() + d;
}

Result<UniqueFd> ConnectUnix(const std::string& path, Deadline deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return ErrnoError("connect to " + path, ENAMETOOLONG);
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoError("socket(AF_UNIX)", errno);
  // A unix-socket connect never waits for a handshake, only for room in a full listen backlog;
  // a blocking connect bounded by SO_SNDTIMEO covers that (Linux's unix_stream_connect honours
  // the send timeout and fails with EAGAIN when it expires).
  for (;;) {
    if (deadline != Deadline::max()) {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
      if (left.count() <= 0) return ErrnoError("connect to " + path, ETIMEDOUT);
      timeval tv{};
      tv.tv_sec = static_cast<time_t>(left.count() / 1000000);
      tv.tv_usec = static_cast<suseconds_t>(left.count() % 1000000);
      ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) break;
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN) err = ETIMEDOUT;
    return ErrnoError("connect to " + path, err);
  }
  timeval zero{};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof zero);
  if (int err = SetNonBlocking(fd.get())) return ErrnoError("fcntl(O_NONBLOCK)", err);
  return fd;
}

Result<UniqueFd> ConnectTcp(const std::string& host, std::uint16_t port, Deadline deadline) {
  std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  // getaddrinfo has no deadline; numeric hosts resolve without any lookup.
  int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    Error e(ErrorCode::kUnavailable, "resolve " + host + ": " + ::gai_strerror(gai));
    e.set_errno(EHOSTUNREACH);
    return e;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  int last_err = EHOSTUNREACH;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd) {
      last_err = errno;
      continue;
    }
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
      last_err = errno;
      continue;
    }
    if (rc != 0) {
      if (int err = WaitFd(fd.get(), POLLOUT, deadline)) {
        last_err = err;
        continue;
      }
      int so_error = 0;
      socklen_t len = sizeof so_error;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
      if (so_error != 0) {
        last_err = so_error;
        continue;
      }
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }
  return ErrnoError("connect to " + where, last_err);
}

int WaitFd(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, PollTimeout(deadline));
    if (rc > 0) return 0;  // ready, or an error/hang-up the next call will report
    if (rc == 0) return ETIMEDOUT;
    if (errno != EINTR) return errno;
  }
}

ssize_t RecvSome(int fd, const iovec* iov, int iovcnt, Deadline deadline) {
  for (;;) {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = static_cast<std::size_t>(iovcnt);
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n >= 0) return n;
    int err = errno;
    if (err == EINTR) continue;
    if (err != EAGAIN) return -err;
    if (int werr = WaitFd(fd, POLLIN, deadline)) return -werr;
  }
}

int SendAll(int fd, const iovec* iov, int iovcnt, Deadline deadline, std::size_t* sent) {
  std::vector<iovec> v(iov, iov + iovcnt);
  std::size_t i = 0;
  while (i < v.size()) {
    if (v[i].iov_len == 0) {
      ++i;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = v.data() + i;
    msg.msg_iovlen = std::min<std::size_t>(v.size() - i, IOV_MAX);
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (err != EAGAIN) return err;
      if (int werr = WaitFd(fd, POLLOUT, deadline)) return werr;
      continue;
    }
    *sent += static_cast<std::size_t>(n);
    auto left = static_cast<std::size_t>(n);
    while (left > 0 && i < v.size()) {
      std::size_t take = std::min(left, v[i].iov_len);
      v[i].iov_base = static_cast<char*>(v[i].iov_base) + take;
      v[i].iov_len -= take;
      left -= take;
      if (v[i].iov_len == 0) ++i;
    }
  }
  return 0;
}

bool IdleConnectionUsable(int fd) {
  pollfd p{fd, POLLIN, 0};
  int rc = ::poll(&p, 1, 0);
  return rc == 0;
}

std::unique_ptr<RawStream> MakeSocketRawStream(UniqueFd fd, std::unique_ptr<TlsConn> tls,
                                               std::string initial) {
  return std::make_unique<SocketRawStream>(std::move(fd), std::move(tls), std::move(initial));
}

}  // namespace agvisor::http::internal
