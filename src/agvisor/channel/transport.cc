#include "agvisor/channel/transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

namespace agvisor::channel {

Result<void> Transport::WriteParts(std::span<const std::string_view> parts) {
  for (std::string_view p : parts) {
    if (!p.empty()) AGVISOR_RETURN_IF_ERROR(Write(p));
  }
  return Ok();
}

namespace {

void SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

Result<std::unique_ptr<FdTransport>> FdTransport::Create(UniqueFd read_fd, UniqueFd write_fd) {
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return Error::FromErrno("channel transport: eventfd", errno);
  // Non-blocking so that every wait is a poll that Close can interrupt.
  SetNonBlocking(read_fd.get());
  SetNonBlocking(write_fd.get());
  return std::unique_ptr<FdTransport>(
      new FdTransport(std::move(read_fd), std::move(write_fd), std::move(wake)));
}

FdTransport::FdTransport(UniqueFd read_fd, UniqueFd write_fd, UniqueFd wake_fd)
    : read_fd_(std::move(read_fd)), write_fd_(std::move(write_fd)), wake_fd_(std::move(wake_fd)) {}

FdTransport::~FdTransport() { Close(); }

void FdTransport::Close() {
  if (closed_.exchange(true)) return;
  std::uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof one);
}

Result<std::size_t> FdTransport::Read(std::span<char> buf) {
  for (;;) {
    if (closed_) return std::size_t{0};
    ssize_t n = ::read(read_fd_.get(), buf.data(), buf.size());
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno != EAGAIN)
      return Error::Unavailable(Error::FromErrno("channel transport: read", errno).message());
    pollfd fds[2] = {{read_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
      return Error::FromErrno("channel transport: poll", errno);
    }
  }
}

Result<void> FdTransport::Write(std::string_view data) {
  std::string_view parts[1] = {data};
  return WriteParts(parts);
}

Result<void> FdTransport::WriteParts(std::span<const std::string_view> parts) {
  std::vector<iovec> iov;
  iov.reserve(parts.size());
  for (std::string_view p : parts) {
    if (!p.empty()) iov.push_back({const_cast<char*>(p.data()), p.size()});
  }
  std::size_t first = 0;
  while (first < iov.size()) {
    if (closed_) return Error::Unavailable("channel transport: closed");
    ssize_t n = ::writev(write_fd_.get(), iov.data() + first,
                         static_cast<int>(std::min<std::size_t>(iov.size() - first, IOV_MAX)));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) {
        Error e = Error::FromErrno("channel transport: write", errno);
        return Error::Unavailable(e.message());
      }
      pollfd fds[2] = {{write_fd_.get(), POLLOUT, 0}, {wake_fd_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
        return Error::FromErrno("channel transport: poll", errno);
      }
      continue;
    }
    auto done = static_cast<std::size_t>(n);
    while (first < iov.size() && done >= iov[first].iov_len) done -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + done;
      iov[first].iov_len -= done;
    }
  }
  return Ok();
}

}  // namespace agvisor::channel
