#include "agvisor/base/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "agvisor/base/unique_fd.h"

namespace agvisor {

Result<std::string> ReadPrivateFile(const std::string& path, std::string_view what,
                                    std::size_t max_bytes) {
  const std::string name = std::string(what) + " " + path;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) return Error::FromErrno("open " + name, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error::FromErrno("stat " + name, errno);
  if (!S_ISREG(st.st_mode)) return Error::InvalidArgument(name + " is not a regular file");
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return Error::PermissionDenied(name + " is owned by uid " + std::to_string(st.st_uid) +
                                   ", not by the user this process runs as (uid " +
                                   std::to_string(me) + "), who alone may hold it: run `chown " +
                                   std::to_string(me) + " " + path + "`");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Error::PermissionDenied(name + " is open to group or others (mode " + mode +
                                   "): run `chmod 600 " + path + "`");
  }
  std::string data;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::FromErrno("read " + name, errno);
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
    if (data.size() > max_bytes) {
      return Error::InvalidArgument(name + " is larger than " + std::to_string(max_bytes) +
                                    " bytes: not a key or token file");
    }
  }
  return data;
}

}  // namespace agvisor
