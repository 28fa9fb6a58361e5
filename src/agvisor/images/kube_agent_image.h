// The agent image of the Kubernetes runtime (docs/kubernetes.md, "Running on a real cluster"):
// each sandbox pod's init container copies the agent from it into the pod. It holds two static
// files and nothing else: the agent at /agvisor-agent and busybox at /bin/busybox (the init
// container's `cp`). Streamed into the Engine API's image import (no docker CLI), from which the
// user pushes it where the nodes pull from.
//
// Used by `agvisor image build kube-agent` and by the tests' Kubernetes test double
// (tests/kube/double_process.h), which pass this build's embedded agent.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor {
namespace docker {
class Client;
}
namespace images {

struct KubeAgentImageOptions {
  std::string name;                      // "repo:tag" (required)
  std::string busybox = "/bin/busybox";  // a statically linked busybox (Debian: busybox-static)
  std::function<void(std::string_view line)> progress;
};

// Imports the image and returns its id; the image the name held before is removed (unless a
// container uses it). Errors: kInvalidArgument (no name, a name without a
// tag, an empty agent, a busybox that is not a static ELF executable: names busybox-static),
// kNotFound (no busybox there), and the import's errors.
Result<std::string> BuildKubeAgentImage(docker::Client& client, std::string_view agent,
                                        const KubeAgentImageOptions& options);

}  // namespace images
}  // namespace agvisor
