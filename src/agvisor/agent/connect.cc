#include "agvisor/agent/connect.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "agvisor/agent/activity_socket.h"
#include "agvisor/agent/log.h"

namespace agvisor::agent {
namespace {

constexpr std::size_t kBufferSize = 64 * 1024;

// One direction of the relay.
struct Pipe {
  int from;
  int to;
  const char* name;
  char buf[kBufferSize];
  std::size_t start = 0, end = 0;
  bool eof = false;   // `from` ended; `to` is shut down once the buffer is written
  bool done = false;  // nothing more will pass

  bool empty() const { return start == end; }
};

void SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Reads into an empty buffer. False on a fatal error (logged).
bool Fill(Pipe& p) {
  ssize_t n = ::read(p.from, p.buf, kBufferSize);
  if (n > 0) {
    p.start = 0;
    p.end = static_cast<std::size_t>(n);
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n < 0 && errno != ECONNRESET) {
    LogLine(std::string("connect: read ") + p.name + ": " + std::strerror(errno));
  }
  p.eof = true;
  return n == 0 || errno == ECONNRESET;
}

// Writes what the buffer holds. False on a fatal error (EPIPE included).
bool Drain(Pipe& p) {
  while (!p.empty()) {
    ssize_t n = ::send(p.to, p.buf + p.start, p.end - p.start, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = ::write(p.to, p.buf + p.start, p.end - p.start);
    if (n > 0) {
      p.start += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    if (errno != EPIPE) {
      LogLine(std::string("connect: write ") + p.name + ": " + std::strerror(errno));
    }
    return false;
  }
  return true;
}

}  // namespace

int RunConnect(const ConnectOptions& options) {
  auto sock = ConnectActivitySocket(options.socket_path);
  if (options.wait) {
    // Init makes its socket a moment after it starts: retry every 5 ms until the deadline.
    const auto deadline = std::chrono::steady_clock::now() + *options.wait;
    while (!sock.ok() && std::chrono::steady_clock::now() < deadline) {
      ::usleep(5000);
      sock = ConnectActivitySocket(options.socket_path);
    }
  }
  if (!sock.ok()) {
    LogLine("connect: " + sock.error().message());
    return 1;
  }
  // SIGPIPE stays default: writes use MSG_NOSIGNAL where they can; a write to a closed stdout
  // pipe killing the relay is the right outcome anyway.
  const int s = sock->get();
  SetNonBlocking(STDIN_FILENO);
  SetNonBlocking(STDOUT_FILENO);
  SetNonBlocking(s);
  static Pipe up{STDIN_FILENO, s, "stdin -> socket"};
  static Pipe down{s, STDOUT_FILENO, "socket -> stdout"};
  for (;;) {
    pollfd fds[4];
    int n = 0;
    int i_up_in = -1, i_up_out = -1, i_down_in = -1, i_down_out = -1;
    if (!up.eof && up.empty()) fds[i_up_in = n++] = {up.from, POLLIN, 0};
    if (!up.empty()) fds[i_up_out = n++] = {up.to, POLLOUT, 0};
    if (!down.eof && down.empty()) fds[i_down_in = n++] = {down.from, POLLIN, 0};
    if (!down.empty()) fds[i_down_out = n++] = {down.to, POLLOUT, 0};
    if (n == 0) break;
    if (::poll(fds, static_cast<nfds_t>(n), -1) < 0) {
      if (errno == EINTR) continue;
      LogLine(std::string("connect: poll: ") + std::strerror(errno));
      return 1;
    }
    auto ready = [&](int i) { return i >= 0 && fds[i].revents != 0; };
    if (ready(i_up_in) && !Fill(up)) return 1;
    if ((ready(i_up_out) || !up.empty()) && !Drain(up)) return 0;
    if (up.eof && up.empty() && !up.done) {
      ::shutdown(s, SHUT_WR);  // the host is done sending: init ends the session
      up.done = true;
    }
    if (ready(i_down_in) && !Fill(down)) return 1;
    if ((ready(i_down_out) || !down.empty()) && !Drain(down)) return 0;
    if (down.eof && down.empty()) break;  // init closed the session
  }
  return 0;
}

}  // namespace agvisor::agent
