#include "agvisor/agent/log.h"

#include <unistd.h>

#include <cerrno>
#include <string>

namespace agvisor::agent {

void LogLine(std::string_view message) {
  std::string line = "agvisor-agent: ";
  line.append(message);
  line.push_back('\n');
  std::string_view left = line;
  while (!left.empty()) {
    ssize_t n = ::write(STDERR_FILENO, left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report a failing stderr
    left.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace agvisor::agent
