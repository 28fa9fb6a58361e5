// The in-process place's verbs of the host itself (place.h: Place::HostReport, BuildImage,
// CreateNetwork), on the host address the place was made with. Used by in_process.cc only;
// callers reach them through their Place.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/client/place.h"

namespace agvisor::client {

// Every check of `agvisor doctor` ("" = the local Docker host; a Kubernetes host: its own
// checks, kube_doctor.h). A Docker host: the daemon and its API version, its runtimes and which
// are gVisor, runsc's network mode, the default image, real sandboxes (timed) on each platform
// and network mode, the sandbox firewall, root-disk caps, cgroups. Never fails: a failure is a
// kFail check.
std::vector<HostCheck> CheckHost(std::string_view host);
// Place::BuildImage on `host`.
Result<std::string> BuildHostImage(std::string_view host, const ImageBuildOptions& options);
// Place::VolumeSizes on `host` (kUnsupported on a Kubernetes host: its claims are not walked).
Result<std::map<std::string, std::int64_t>> HostVolumeSizes(std::string_view host);

}  // namespace agvisor::client
