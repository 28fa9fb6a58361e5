// The instance a sandbox runs in, as a pure function of its spec and of what Create decided on
// the host (runtime, disk cap, prepared image, egress network): every create path (CLI, Python,
// agvisord, pools, desktops) comes through BuildInstanceSpec, so what a sandbox is made of is set
// in one place; the runtime adds its invariants (runtime.h) and turns it into its own request.
// instance_spec_test.cc pins the result, down to Docker's request body, for each kind of sandbox.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "agvisor/base/error.h"
#include "agvisor/egress/policy.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor {

// Labels agvisor puts on every sandbox (docs/architecture.md, "A sandbox's life").
inline constexpr std::string_view kLabelManaged = "agvisor";
inline constexpr std::string_view kLabelName = "agvisor.name";
inline constexpr std::string_view kLabelIdleTtl = "agvisor.idle_ttl";
inline constexpr std::string_view kLabelMemory = "agvisor.memory";
inline constexpr std::string_view kLabelPool = "agvisor.pool";
// The image as the caller named it (the instance runs the prepared image with the agent).
inline constexpr std::string_view kLabelImage = "agvisor.image";
// A named sandbox's data directory, on its volume.
inline constexpr std::string_view kWorkspace = "/workspace";

// What Sandbox::Create decided on the host before making the instance.
struct InstanceDecisions {
  std::string name;  // "agvisor-x": also the named sandbox's volume
  // Runtime::RequireGvisor's answer: spec.runtime, or its "-none" twin for network none.
  std::string runtime;
  std::string image;         // Runtime::PrepareImage's answer
  std::string source_image;  // the image as the caller named it (label agvisor.image)
  // The root-disk cap to enforce ("5g"), set only when the host can (ProbeDiskCap).
  std::optional<std::string> disk_cap;
  // Labels of agvisor's own that a spec may not carry (agvisor.pool).
  std::map<std::string, std::string> system_labels;
};

// The instance for `spec` (already validated by ValidateSpec). Errors: kInvalidArgument
// (limits.memory / limits.shm that do not parse; ValidateSpec has refused them before).
Result<InstanceSpec> BuildInstanceSpec(const SandboxSpec& spec, const InstanceDecisions& decisions);

// Puts the instance on its egress network `net` (Runtime::EnsureEgressNetwork's answer): the
// network, the enforcer as resolver, the proxy variables, and the rules as a label.
void ApplyEgressNetwork(InstanceSpec& instance, const SandboxNetwork& net,
                        const egress::EgressRules& rules);

}  // namespace agvisor
