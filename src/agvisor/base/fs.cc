#include "agvisor/base/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "agvisor/base/unique_fd.h"

namespace agvisor {

Result<std::vector<std::string>> ReadDirNames(
    int fd, const std::function<Error(std::string_view call, int err)>& fail) {
  int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return fail("dup", errno);
  DIR* dir = fdopendir(dup_fd);
  if (dir == nullptr) {
    int err = errno;
    close(dup_fd);
    return fail("fdopendir", err);
  }
  std::vector<std::string> names;
  while (true) {
    errno = 0;
    dirent* d = readdir(dir);
    if (d == nullptr) break;
    std::string_view n = d->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  int err = errno;
  closedir(dir);
  if (err != 0) return fail("readdir", err);
  return names;
}

std::optional<std::string> ReadSmallFile(const std::string& path, std::size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max_bytes) break;
  }
  return out;
}

}  // namespace agvisor
