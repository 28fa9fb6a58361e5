// `agvisor image build` on a Docker host: the images sandboxes run (images/builder.h: base,
// desktop; images/kube_agent_image.h: kube-agent), streamed into the host's Docker. Reached
// through the factory's BuildHostImage (runtimes.h), which picks the Docker host (a Kubernetes
// host's images are built on this machine's Docker, then pushed).
#pragma once

#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/host_verbs.h"

namespace agvisor {

// Builds `options.kind` into the Docker at `docker_host` ("" = the local one) under
// `options.name` (which must be set: the factory puts the kind's default there) and returns the
// image id; with `options.if_missing`, "" when that name is there already. Errors:
// ConnectDockerHost's, kInvalidArgument (an unknown kind), images::BuildImage's
// (kPermissionDenied: not root, kNotFound: debootstrap missing) and BuildKubeAgentImage's.
Result<std::string> BuildDockerImage(std::string_view docker_host,
                                     const ImageBuildOptions& options);

}  // namespace agvisor
