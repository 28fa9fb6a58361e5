#include "agvisor/desktop/password.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "agvisor/desktop/des.h"

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

bool IsPassword(std::string_view s) {
  return s.size() == vnc::kMaxPasswordLength && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
         });
}

}  // namespace agvisor::desktop
