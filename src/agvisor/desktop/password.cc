#include "agvisor/desktop/password.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>

#include "agvisor/base/tar.h"
#include "agvisor/desktop/vnc.h"

namespace agvisor::desktop {

std::string NewPassword() {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string out;
  unsigned char buf[64];
  while (out.size() < vnc::kMaxPasswordLength) {
    ssize_t n = ::getrandom(buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // getrandom cannot fail on Linux >= 3.17 once the pool is initialised; nothing sane to do.
      std::abort();
    }
    for (ssize_t i = 0; i < n && out.size() < vnc::kMaxPasswordLength; ++i) {
      // Rejection sampling: 62 * 4 = 248, so bytes >= 248 are dropped to keep it uniform.
      if (buf[i] < 248) out.push_back(kAlphabet[buf[i] % kAlphabet.size()]);
    }
  }
  return out;
}

Result<std::string> PasswordArchive(std::string_view password) {
  if (password.empty() || password.size() > vnc::kMaxPasswordLength) {
    return Error::InvalidArgument("desktop password: 1 to 8 characters");
  }
  const std::string dir(kDesktopDir.substr(1));  // archive paths are relative to /
  TarWriter w;
  AGVISOR_RETURN_IF_ERROR(w.AddDirectory("run", 0755));
  AGVISOR_RETURN_IF_ERROR(w.AddDirectory("run/agvisor", 0700));
  AGVISOR_RETURN_IF_ERROR(w.AddDirectory(dir, 0700));
  AGVISOR_RETURN_IF_ERROR(w.AddFile(dir + "/" + std::string(kPasswordFile), password, 0600));
  AGVISOR_RETURN_IF_ERROR(
      w.AddFile(dir + "/" + std::string(kVncPasswordFile), vnc::VncPasswordFile(password), 0600));
  return w.Finish();
}

}  // namespace agvisor::desktop
