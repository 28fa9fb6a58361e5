// RuntimeFor: the one place that picks a host's runtime from its address.
#include "agvisor/sandbox/runtime.h"

#include <map>
#include <mutex>

#include "agvisor/http/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/kube_runtime/kube_runtime.h"

namespace agvisor {
namespace {

std::mutex g_override_mu;
std::map<std::string, std::shared_ptr<Runtime>, std::less<>>& Overrides() {
  static auto* m = new std::map<std::string, std::shared_ptr<Runtime>, std::less<>>();
  return *m;
}

}  // namespace

bool IsKubernetesHost(std::string_view host) { return host.rfind("kube:", 0) == 0; }

Result<void> CheckHostAddress(std::string_view host) {
  if (IsKubernetesHost(host)) return CheckKubeAddress(host);
  AGVISOR_RETURN_IF_ERROR(http::ParseEndpoint(host));
  return Ok();
}

Result<std::shared_ptr<Runtime>> RuntimeFor(std::string_view host) {
  {
    std::lock_guard lock(g_override_mu);
    if (auto it = Overrides().find(host); it != Overrides().end()) return it->second;
  }
  if (IsKubernetesHost(host)) return KubernetesRuntimeFor(host);
  auto client = AGVISOR_TRY(HostClient(host));
  return std::shared_ptr<Runtime>(std::make_shared<DockerRuntime>(std::string(host), client));
}

ScopedRuntimeOverride::ScopedRuntimeOverride(std::string host, std::shared_ptr<Runtime> runtime)
    : host_(std::move(host)) {
  std::lock_guard lock(g_override_mu);
  Overrides()[host_] = std::move(runtime);
}

ScopedRuntimeOverride::~ScopedRuntimeOverride() {
  std::lock_guard lock(g_override_mu);
  Overrides().erase(host_);
}

}  // namespace agvisor
