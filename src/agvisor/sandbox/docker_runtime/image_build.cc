// Image builds on a Docker host (image_build.h).
#include "agvisor/sandbox/docker_runtime/image_build.h"

#include "agvisor/docker/client.h"
#include "agvisor/images/builder.h"
#include "agvisor/images/kube_agent_image.h"
#include "agvisor/sandbox/agent_blob.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"

namespace agvisor {

Result<std::string> BuildDockerImage(std::string_view docker_host,
                                     const ImageBuildOptions& options) {
  if (options.name.empty()) {
    return Error::InvalidArgument("image build of " + options.kind + ": no image name given");
  }
  auto docker = AGVISOR_TRY(ConnectDockerHost(docker_host));
  if (options.if_missing) {
    auto found = docker->InspectImage(options.name);
    if (found.ok()) return std::string();
    if (found.error().code() != ErrorCode::kNotFound) return found.error();
    if (options.on_build) options.on_build();
  }
  if (options.kind == "kube-agent") {
    return images::BuildKubeAgentImage(
        *docker, EmbeddedAgentBinary(),
        {.name = options.name, .busybox = options.busybox, .progress = options.progress});
  }
  const images::ImageRecipe recipe = AGVISOR_TRY(images::RecipeFor(options.kind));
  return images::BuildImage(*docker, recipe,
                            {.name = options.name,
                             .mirror = options.mirror,
                             .workdir = options.workdir,
                             .progress = options.progress});
}

}  // namespace agvisor
