// Where agvisord's socket and token live by default (defaults.h).
#include "agvisor/api/defaults.h"

#include <unistd.h>

#include <cstdlib>

namespace agvisor::api {

Result<std::string> DefaultSocketPath() {
  if (::geteuid() == 0) return std::string(kRootSocketPath);
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) {
    return std::string(x) + "/agvisord.sock";
  }
  return Error::NotFound(
      "no default socket path: not root and XDG_RUNTIME_DIR is unset (give "
      "--socket PATH)");
}

std::string DefaultTokenPath() {
  if (::geteuid() == 0) return kRootTokenPath;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) {
    return std::string(x) + "/agvisor/agvisord.token";
  }
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.config/agvisor/agvisord.token";
}

}  // namespace agvisor::api
