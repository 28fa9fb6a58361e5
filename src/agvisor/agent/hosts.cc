#include "agvisor/agent/hosts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agvisor/base/unique_fd.h"

namespace agvisor::agent {

Result<bool> FillEmptyHostsFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return false;
    return Error::Internal("open " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != 0) return false;
  const std::size_t n = sizeof(kLocalhostLines) - 1;
  if (::write(fd.get(), kLocalhostLines, n) != static_cast<ssize_t>(n)) {
    return Error::Internal("write " + path + ": " + std::strerror(errno));
  }
  return true;
}

}  // namespace agvisor::agent
