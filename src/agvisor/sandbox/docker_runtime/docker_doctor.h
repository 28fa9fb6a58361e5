// `agvisor doctor` on a Docker host: what it offers the Docker runtime, checked with real
// sandboxes. Reached through the factory's DiagnoseHost (runtimes.h), which picks this or the
// Kubernetes host's checks (kube_runtime/kube_doctor.h) by address.
#pragma once

#include <string_view>
#include <vector>

#include "agvisor/sandbox/host_verbs.h"

namespace agvisor {

// The checks of Docker host `host` ("" = the local one), in order: "docker" (reachable, its API
// version), "runtime" (which runtimes are gVisor: each binary is asked), "runsc network mode",
// "network none runtime", "image" (the default one), "sandbox" (a real one, timed),
// "platforms", "network bridge", "sandbox firewall", "network none", "disk cap", "cgroups".
// Stops at the first check that later ones need. Never fails: a failure is a kFail check.
std::vector<HostCheck> DiagnoseDockerHost(std::string_view host);

}  // namespace agvisor
