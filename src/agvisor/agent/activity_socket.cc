#include "agvisor/agent/activity_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace agvisor::agent {
namespace {

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Error::InvalidArgument("activity socket path '" + path + "': must be 1-" +
                                  std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// mkdir -p with `mode` for the directories it creates (an existing one keeps its own).
Result<void> MakeDirectories(const std::string& dir, mode_t mode) {
  if (dir.empty() || dir == "/" || dir == ".") return Ok();
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Ok();
    return Error::Conflict("activity socket directory " + dir + ": exists and is not a directory");
  }
  AGVISOR_RETURN_IF_ERROR(MakeDirectories(SocketDirectory(dir), mode));
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    return Error::FromErrno("mkdir " + dir, errno);
  }
  // mkdir's mode is filtered by the umask; make sure the directory has `mode` as documented.
  if (::chmod(dir.c_str(), mode) != 0) return Error::FromErrno("chmod " + dir, errno);
  return Ok();
}

}  // namespace

std::string SocketDirectory(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Result<UniqueFd> ListenActivitySocket(const std::string& path) {
  return ListenUnixSocket(path, 0700, 0600);
}

Result<UniqueFd> ListenUnixSocket(const std::string& path, mode_t dir_mode, mode_t socket_mode) {
  sockaddr_un addr = AGVISOR_TRY(Address(path));
  AGVISOR_RETURN_IF_ERROR(MakeDirectories(SocketDirectory(path), dir_mode));
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Error::Conflict("activity socket " + path + ": exists and is not a socket");
    }
    if (::unlink(path.c_str()) != 0) return Error::FromErrno("unlink stale " + path, errno);
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Error::FromErrno("socket(AF_UNIX, SOCK_STREAM)", errno);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Error::FromErrno("bind " + path, errno);
  }
  if (::chmod(path.c_str(), socket_mode) != 0) return Error::FromErrno("chmod " + path, errno);
  if (::listen(fd.get(), 128) != 0) return Error::FromErrno("listen " + path, errno);
  return fd;
}

Result<UniqueFd> ConnectActivitySocket(const std::string& path) {
  sockaddr_un addr = AGVISOR_TRY(Address(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Error::FromErrno("socket(AF_UNIX, SOCK_STREAM)", errno);
  for (;;) {
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) break;
    if (errno == EINTR) continue;
    return Error::FromErrno("connect " + path, errno);
  }
  return fd;
}

}  // namespace agvisor::agent
