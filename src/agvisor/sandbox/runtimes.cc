#include "agvisor/sandbox/runtimes.h"

#include "agvisor/http/client.h"
#include "agvisor/images/builder.h"
#include "agvisor/sandbox/docker_runtime/docker_doctor.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/docker_runtime/image_build.h"
#include "agvisor/sandbox/kube_runtime/kube_doctor.h"
#include "agvisor/sandbox/kube_runtime/kube_runtime.h"
#include "agvisor/sandbox/kube_runtime/pod_manifest.h"

namespace agvisor {

bool IsKubernetesHost(std::string_view host) { return host.starts_with("kube:"); }

Result<void> CheckHostAddress(std::string_view host) {
  if (IsKubernetesHost(host)) return CheckKubeAddress(host);
  AGVISOR_RETURN_IF_ERROR(http::ParseEndpoint(host));
  return Ok();
}

Result<std::shared_ptr<Runtime>> MakeRuntime(std::string_view host) {
  if (IsKubernetesHost(host)) return MakeKubernetesRuntime(host);
  auto client = AGVISOR_TRY(ConnectDockerHost(host));
  return std::shared_ptr<Runtime>(std::make_shared<DockerRuntime>(std::string(host), client));
}

std::vector<HostCheck> DiagnoseHost(std::string_view host) {
  return IsKubernetesHost(host) ? DiagnoseKubeHost(host) : DiagnoseDockerHost(host);
}

std::string DefaultImageName(std::string_view kind) {
  return kind == "kube-agent" ? AgentImageRefForKube() : images::ImageNameFor(kind);
}

Result<std::string> BuildHostImage(std::string_view host, ImageBuildOptions options) {
  if (options.name.empty()) options.name = DefaultImageName(options.kind);
  return BuildDockerImage(IsKubernetesHost(host) ? "" : host, options);
}

Result<std::shared_ptr<Runtime>> LazyRuntime::Get() {
  std::lock_guard lock(mu_);
  if (!runtime_) runtime_ = AGVISOR_TRY(MakeRuntime(host_));
  return runtime_;
}

}  // namespace agvisor
