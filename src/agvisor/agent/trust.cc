#include "agvisor/agent/trust.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "agvisor/base/fs.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor::agent {
namespace {

constexpr std::size_t kMaxStoreBytes = 16u << 20;

bool Below(const std::string& path, std::string_view dir) {
  return path.size() > dir.size() + 1 && path.starts_with(dir) && path[dir.size()] == '/' &&
         path.find("/..") == std::string::npos && path.find('\0') == std::string::npos;
}

// Replaces `path` with `data` (a temporary file beside it, then rename).
Result<void> WriteReplacing(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return Error::Internal("open " + tmp + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Error::Internal("write " + tmp + ": " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  ::fchmod(fd.get(), 0644);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error::Internal("rename " + tmp + ": " + std::strerror(errno));
  }
  return Ok();
}

}  // namespace

std::string CombinedTrustBundle(std::string_view image_store, std::string_view ca_pem) {
  std::string out(image_store);
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += ca_pem;
  if (!out.empty() && out.back() != '\n') out += '\n';
  return out;
}

Result<void> InstallSandboxCa(std::string_view ca_pem, const std::string& ca_path,
                              const std::string& bundle_path, std::string_view dir,
                              const std::array<std::string_view, 4>& stores) {
  if (!Below(ca_path, dir) || !Below(bundle_path, dir)) {
    return Error::InvalidArgument("sandbox CA: the CA files must be under " + std::string(dir));
  }
  if (ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string_view::npos) {
    return Error::InvalidArgument("sandbox CA: not a PEM certificate");
  }
  std::string store;
  for (std::string_view s : stores) {
    if (auto text = ReadSmallFile(std::string(s), kMaxStoreBytes)) {
      store = std::move(*text);
      break;
    }
  }
  AGVISOR_RETURN_IF_ERROR(WriteReplacing(ca_path, CombinedTrustBundle("", ca_pem)));
  return WriteReplacing(bundle_path, CombinedTrustBundle(store, ca_pem));
}

Result<bool> InstallSandboxCaFromEnv() {
  const char* ca = std::getenv(std::string(kSandboxCaEnvVar).c_str());
  if (ca == nullptr) return false;
  const std::string pem = ca;
  ::unsetenv(std::string(kSandboxCaEnvVar).c_str());
  const char* ca_path = std::getenv("NODE_EXTRA_CA_CERTS");
  const char* bundle_path = std::getenv("SSL_CERT_FILE");
  if (ca_path == nullptr || bundle_path == nullptr) {
    return Error::InvalidArgument(
        "sandbox CA: NODE_EXTRA_CA_CERTS and SSL_CERT_FILE must name where it goes");
  }
  AGVISOR_RETURN_IF_ERROR(InstallSandboxCa(pem, ca_path, bundle_path, "/.agvisor"));
  return true;
}

}  // namespace agvisor::agent
