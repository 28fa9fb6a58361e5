// Socket plumbing for the HTTP client: connecting with a deadline, deadline-bounded reads and
// writes on non-blocking sockets, and the RawStream left after a hijack.
//
// Private to http/ (client.cc and the ssh tunnel); no third-party includes. Every function
// reports failure as an errno value so that client.cc can turn it into an error that names the
// endpoint (see ConnectError there).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <memory>
#include <string>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/http/client.h"

namespace agvisor::http::internal {

using Clock = std::chrono::steady_clock;
// An absolute deadline; Deadline::max() waits forever.
using Deadline = Clock::time_point;

// now + d, saturating (d <= 0 or huge means "no deadline").
Deadline DeadlineAfter(std::chrono::milliseconds d);

// Connects a non-blocking, CLOEXEC stream socket to a unix socket path / a TCP host:port.
// Errors carry the errno (Error::sys_errno): ENOENT, ECONNREFUSED, EACCES, ETIMEDOUT (deadline),
// EAI-style resolver failures come back as EHOSTUNREACH with the resolver's text.
Result<UniqueFd> ConnectUnix(const std::string& path, Deadline deadline);
Result<UniqueFd> ConnectTcp(const std::string& host, std::uint16_t port, Deadline deadline);

// Waits until `fd` is ready for `events` (POLLIN/POLLOUT). 0 when ready, ETIMEDOUT when the
// deadline passed, else an errno.
int WaitFd(int fd, short events, Deadline deadline);

// Reads what is available (waiting for at least one byte until the deadline) into `iov`.
// Returns the byte count (0 = the peer closed its side) or -errno (-ETIMEDOUT on deadline).
ssize_t RecvSome(int fd, const iovec* iov, int iovcnt, Deadline deadline);

// Sends all of `iov` (MSG_NOSIGNAL: a closed peer is EPIPE, never SIGPIPE). Returns 0 or an
// errno; `*sent` grows by every byte the kernel accepted, so the caller knows whether anything
// of a request left this process.
int SendAll(int fd, const iovec* iov, int iovcnt, Deadline deadline, std::size_t* sent);

// False when an idle keep-alive connection is readable (the peer closed it, or sent bytes
// nobody asked for): it must not be reused.
bool IdleConnectionUsable(int fd);

class TlsConn;  // tls.h

// Wraps a connected socket as a RawStream, through the TLS session `tls` when it is set (after an
// upgrade on an https connection), else plain. `initial` is delivered by Read before anything
// read from the socket (bytes the HTTP parser had already buffered after the response headers).
std::unique_ptr<RawStream> MakeSocketRawStream(UniqueFd fd, std::unique_ptr<TlsConn> tls,
                                               std::string initial);

}  // namespace agvisor::http::internal
