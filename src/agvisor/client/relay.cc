#include "agvisor/client/relay.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace agvisor::client {

void RelayPortConnection(std::shared_ptr<ByteStream> port, int fd) {
  // Two directions: this thread sandbox -> fd, another fd -> sandbox.
  std::thread up([port, fd] {
    char buf[64 * 1024];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      if (!port->Write(std::string_view(buf, static_cast<std::size_t>(n))).ok()) break;
    }
    (void)port->CloseWrite();
  });
  char buf[64 * 1024];
  for (;;) {
    auto n = port->Read(buf);
    if (!n.ok() || *n == 0) break;
    std::string_view bytes(buf, *n);
    while (!bytes.empty()) {
      ssize_t w = ::write(fd, bytes.data(), bytes.size());
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;  // EPIPE: the reader went away
      bytes.remove_prefix(static_cast<std::size_t>(w));
    }
    if (!bytes.empty()) break;
  }
  ::shutdown(fd, SHUT_WR);
  up.join();
  port->Close();
  ::close(fd);
}

}  // namespace agvisor::client
