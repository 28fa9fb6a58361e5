// The instance a sandbox runs in, as a pure function of its spec and of what Create decided on
// the host (runtime, disk cap, prepared image, egress network): every create path (CLI, Python,
// agvisord, pools, desktops) comes through BuildInstanceSpec, so what a sandbox is made of is set
// in one place; the runtime adds its invariants (runtime.h) and turns it into its own request.
// instance_spec_test.cc pins the result, down to Docker's request body, for each kind of sandbox.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/egress/policy.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor {

// Labels agvisor puts on every sandbox (docs/architecture.md, "A sandbox's life").
inline constexpr std::string_view kLabelManaged = "agvisor";
inline constexpr std::string_view kLabelName = "agvisor.name";
inline constexpr std::string_view kLabelIdleTtl = "agvisor.idle_ttl";
// "stop" (SandboxSpec::idle_action); absent = destroy.
inline constexpr std::string_view kLabelIdleAction = "agvisor.idle_action";
inline constexpr std::string_view kLabelMemory = "agvisor.memory";
// limits.cpus as given at create ("0.5", "2"): shown by listings (SandboxInfo::cpus).
inline constexpr std::string_view kLabelCpus = "agvisor.cpus";
inline constexpr std::string_view kLabelPool = "agvisor.pool";
// The lifetime in seconds given at create (the agent's --lifetime): for the host to end a paused
// sandbox past it, since its frozen agent cannot (LifetimeOver).
inline constexpr std::string_view kLabelLifetime = "agvisor.lifetime";
// The image as the caller named it (the instance runs the prepared image with the agent).
inline constexpr std::string_view kLabelImage = "agvisor.image";
// The gVisor platform it runs on (SandboxSpec::platform, resolved): on the instance, and on a
// named sandbox's volume, so that the sandbox is made on it again when resumed without one.
inline constexpr std::string_view kLabelPlatform = "agvisor.platform";
// A named sandbox's data directory, on its volume.
inline constexpr std::string_view kWorkspace = "/workspace";

// What Sandbox::Create decided on the host before making the instance.
struct InstanceDecisions {
  std::string name;  // "agvisor-x": also the named sandbox's volume
  // Runtime::RequireGvisor's answer: the platform's runtime, or its "-none" twin for network none.
  std::string runtime;
  // The gVisor platform: spec.platform, else a named sandbox's recorded one, else the default.
  std::string platform = std::string(kPlatformSystrap);
  std::string image;         // Runtime::PrepareImage's answer
  std::string source_image;  // the image as the caller named it (label agvisor.image)
  // The root-disk cap to enforce ("5g"), set only when the host can (ProbeDiskCap).
  std::optional<std::string> disk_cap;
  // Labels of agvisor's own that a spec may not carry (agvisor.pool).
  std::map<std::string, std::string> system_labels;
};

// A sandbox's pids (Limits::pids) are the processes inside it, as the caller means them. The
// host's pids cgroup of its container (Docker's PidsLimit, a live resize's pids.max), which is
// what gVisor runs under, counts gVisor's host tasks instead: the sentry's threads, the gofer,
// and the platform's stub processes and threads, a base plus a share per process inside that
// depends on the platform (docs/lifecycle.md, "pids"). So the host's cap is scaled from the
// caller's number at create and resize, and scaled back wherever it is read (Sandbox::Info,
// Update, Stats): every door reports the caller's number. The share is what a process that
// mostly waits costs (an agent's shells, servers, a test runner's workers); ptrace charges more
// for processes that ran on many of the sentry's threads, and threads that wait cost nearly
// nothing. A platform other than ptrace ("" for a sandbox from before agvisor recorded it) is
// systrap's. gVisor's own pids cgroup inside, which counts exactly, cannot be set from the host
// with runsc 20240729 (`runsc write-control` answers "control file not writable" for pids.max).
//
// The host cap for `pids` tasks inside a sandbox on `platform`, at most the kernel's
// PID_MAX_LIMIT (what pids.max takes; ValidateLimits keeps pids below where that binds).
std::int64_t HostPidsCap(std::string_view platform, std::int64_t pids);
// The inverse: the tasks inside a sandbox on `platform` whose host cap is `host_cap`, exact for
// a cap HostPidsCap made; 0 (no cap) for 0; at least 1 for a cap at or below the base (one made
// another way, e.g. by agvisor before it scaled).
std::int64_t SandboxPidsOf(std::string_view platform, std::int64_t host_cap);
// `sample`'s pids figures in the sandbox's terms: its cap as SandboxPidsOf, and the processes
// running now estimated from the host's tasks above the platform's base over its share per
// process (at least 1 while any runs: the agent; on ptrace a high-water mark, see above).
void SandboxPidsInStats(std::string_view platform, SandboxStats& sample);

// The instance for `spec` (already validated by ValidateSpec). Errors: kInvalidArgument
// (limits.memory / limits.shm that do not parse; ValidateSpec has refused them before).
Result<InstanceSpec> BuildInstanceSpec(const SandboxSpec& spec, const InstanceDecisions& decisions);

// Whether an instance with `labels`, made at `created_unix` (the host's clock), is past its
// lifetime at `now_unix`: for a paused sandbox, whose agent is frozen and enforces nothing. The
// agent counts from its start, a moment after creation; the host gives it one more second. A
// pool member's lifetime is set again when it is handed out (Sandbox::SetDeadlines), which no
// label records: false for those (their agent ends them when they thaw), as for sandboxes
// without a lifetime or a creation time.
// Gives the instance its brokered secrets (after ApplyEgressNetwork): each secret's
// placeholder in its env var, the sandbox CA for the agent to install (kSandboxCaEnv) and the
// trust variables pointing at what it installs: SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT,
// GIT_SSL_CAINFO, CURL_CA_BUNDLE at the combined bundle, NODE_EXTRA_CA_CERTS at the CA alone.
// Never a value: the broker keeps those.
void ApplyBrokeredSecrets(InstanceSpec& instance, const BrokeredSecrets& brokered);

bool LifetimeOver(const Labels& labels, std::int64_t created_unix, std::int64_t now_unix);
// The first second (host clock) at which LifetimeOver holds; nullopt when it never does.
std::optional<std::int64_t> LifetimeEnd(const Labels& labels, std::int64_t created_unix);

// Puts the instance on its egress network `net` (Runtime::EnsureEgressNetwork's answer): the
// network, the enforcer as resolver, the proxy variables, and the rules as a label.
void ApplyEgressNetwork(InstanceSpec& instance, const SandboxNetwork& net,
                        const egress::EgressRules& rules);

}  // namespace agvisor
