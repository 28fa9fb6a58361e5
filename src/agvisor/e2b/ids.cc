#include "agvisor/e2b/ids.h"

#include "agvisor/base/strings.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor::e2b {

bool IsSandboxId(std::string_view id) {
  if (id.empty() || id.size() > 63 || id.front() == '-' || id.back() == '-') return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

Result<std::string> ContainerForId(std::string_view id) {
  if (!IsSandboxId(id)) {
    return Error::InvalidArgument("sandbox id '" + EscapeForTerminal(id.substr(0, 100)) +
                                  "' is not a valid id: 1-63 lower-case letters, digits and '-' "
                                  "(not first or last), as Sandbox.create returned it");
  }
  return std::string(kNamePrefix) + std::string(id);
}

std::optional<std::string> IdForContainer(std::string_view container_name) {
  if (!container_name.starts_with(kNamePrefix)) return std::nullopt;
  std::string_view id = container_name.substr(kNamePrefix.size());
  if (!IsSandboxId(id)) return std::nullopt;
  return std::string(id);
}

}  // namespace agvisor::e2b
