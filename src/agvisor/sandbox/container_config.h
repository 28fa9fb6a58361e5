// The Docker container a sandbox runs in, as a pure function of its spec and of what Create
// decided on the host (runtime, disk cap, derived image, egress network): every create path (CLI,
// Python, agvisord, pools, desktops) comes through BuildContainerConfig, so the security posture
// (capabilities, no-new-privileges, no log) is set in one place. Used by Sandbox::Create;
// container_config_test.cc pins every field for each kind of sandbox.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "agvisor/base/error.h"
#include "agvisor/docker/types.h"
#include "agvisor/egress/policy.h"
#include "agvisor/sandbox/egress_network.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor {

// Labels agvisor puts on every sandbox container (docs/architecture.md, "A sandbox's life").
inline constexpr std::string_view kLabelManaged = "agvisor";
inline constexpr std::string_view kLabelName = "agvisor.name";
inline constexpr std::string_view kLabelIdleTtl = "agvisor.idle_ttl";
inline constexpr std::string_view kLabelMemory = "agvisor.memory";
inline constexpr std::string_view kLabelPool = "agvisor.pool";
// The image as the caller named it (the container runs the derived image with the agent).
inline constexpr std::string_view kLabelImage = "agvisor.image";
// A named sandbox's data directory, on its volume.
inline constexpr std::string_view kWorkspace = "/workspace";

// What Sandbox::Create decided on the host before making the container.
struct ContainerDecisions {
  std::string container_name;  // "agvisor-x": also the named sandbox's volume
  // RequireGvisorRuntime's answer: spec.runtime, or its "-none" twin for network none (then the
  // container is made with NetworkDisabled).
  std::string runtime;
  std::string image;         // the derived image with the agent (EnsureAgentImage)
  std::string source_image;  // the image as the caller named it (label agvisor.image)
  // The root-disk cap to enforce ("5g"), set only when the host can (ProbeDiskCap).
  std::optional<std::string> disk_cap;
  // Labels of agvisor's own that a spec may not carry (agvisor.pool).
  std::map<std::string, std::string> system_labels;
};

// The container for `spec` (already validated by ValidateSpec). Errors: kInvalidArgument
// (limits.memory / limits.shm that do not parse; ValidateSpec has refused them before).
Result<docker::ContainerConfig> BuildContainerConfig(const SandboxSpec& spec,
                                                     const ContainerDecisions& decisions);

// Puts the container on its egress network `net` (EnsureEgressNetwork's answer): the network,
// the gateway as resolver, the proxy variables, and the rules as a label.
void ApplyEgressNetwork(docker::ContainerConfig& config, const EgressNetwork& net,
                        const egress::EgressRules& rules);

}  // namespace agvisor
