#include "agvisor/sandbox/instance_spec.h"

#include <algorithm>
#include <cstdio>

#include "agvisor/sandbox/agent_paths.h"
#include "agvisor/sandbox/egress_network.h"

namespace agvisor {
namespace {

// What gVisor runs on the host for a sandbox, in host tasks (pids.current of its container's
// cgroup): `base` for the sandbox itself (the sentry's threads, the gofer) and `per_task` for
// each process inside (the agent and its ready shells among them). Measured with runsc 20240729
// (docs/lifecycle.md, "pids"): an idle sandbox 27 (systrap) / 38 (ptrace); each sleeping process
// ~2.2 (systrap: its stub threads) / ~9 (ptrace: a stub process with a traced thread for each
// sentry thread that has run it, pkg/sentry/platform/ptrace/subprocess.go); a sleeping thread
// ~0 on either. ptrace keeps the stubs of ended processes for reuse, so its count is a
// high-water mark, and a process that ran on many sentry threads (short processes started in
// parallel, a build's) costs up to ~45: the scale fits processes that mostly wait, not those.
struct PidsShape {
  std::int64_t base;
  std::int64_t per_task;
};
constexpr PidsShape kSystrapPids{.base = 48, .per_task = 3};
constexpr PidsShape kPtracePids{.base = 48, .per_task = 10};
// The most pids.max takes (the kernel's PID_MAX_LIMIT).
constexpr std::int64_t kPidMaxLimit = std::int64_t{4} << 20;

PidsShape PidsShapeOf(std::string_view platform) {
  return platform == kPlatformPtrace ? kPtracePids : kSystrapPids;
}

}  // namespace

std::int64_t HostPidsCap(std::string_view platform, std::int64_t pids) {
  const PidsShape s = PidsShapeOf(platform);
  if (pids <= 0) return 0;
  if (pids >= (kPidMaxLimit - s.base) / s.per_task) return kPidMaxLimit;
  return s.base + s.per_task * pids;
}

std::int64_t SandboxPidsOf(std::string_view platform, std::int64_t host_cap) {
  const PidsShape s = PidsShapeOf(platform);
  if (host_cap <= 0) return 0;
  return std::max<std::int64_t>(1, (host_cap - s.base) / s.per_task);
}

void SandboxPidsInStats(std::string_view platform, SandboxStats& sample) {
  const PidsShape s = PidsShapeOf(platform);
  sample.pids_limit = static_cast<std::uint64_t>(
      SandboxPidsOf(platform, static_cast<std::int64_t>(sample.pids_limit)));
  const auto base = static_cast<std::uint64_t>(s.base);
  // A running sandbox has its agent at least.
  if (sample.pids > 0) {
    sample.pids = std::max<std::uint64_t>(
        1, sample.pids > base ? (sample.pids - base) / static_cast<std::uint64_t>(s.per_task) : 0);
  }
}

Result<InstanceSpec> BuildInstanceSpec(const SandboxSpec& spec, const InstanceDecisions& d) {
  InstanceSpec i;
  i.name = d.name;
  i.image = d.image;
  i.source_image = d.source_image;
  i.argv = {std::string(kAgentPath), "init", "--channel-stdio"};
  if (spec.lifetime) i.argv.insert(i.argv.end(), {"--lifetime", std::to_string(*spec.lifetime)});
  if (spec.idle_ttl && spec.idle_action == "pause") {
    // The host freezes it (idle_pause.h); the agent only keeps the idle clock.
    i.argv.push_back("--track-idle");
  } else if (spec.idle_ttl) {
    i.argv.insert(i.argv.end(), {"--idle-ttl", std::to_string(*spec.idle_ttl)});
  }
  if (spec.gui) i.argv.push_back("--desktop");
  // gVisor ignores setuid bits: sudo works through the agent's broker (agent/sudo_broker.h).
  if (spec.allow_setuid) i.argv.push_back("--sudo-broker");
  if (spec.warm_shells > 0) {
    i.argv.insert(i.argv.end(), {"--warm-shells", std::to_string(spec.warm_shells)});
  }
  i.labels = spec.labels;
  i.labels.insert_or_assign(std::string(kLabelManaged), std::string("1"));
  if (spec.name) i.labels[std::string(kLabelName)] = *spec.name;
  if (spec.idle_ttl) i.labels[std::string(kLabelIdleTtl)] = std::to_string(*spec.idle_ttl);
  if (spec.idle_action != "destroy") i.labels[std::string(kLabelIdleAction)] = spec.idle_action;
  if (spec.lifetime) i.labels[std::string(kLabelLifetime)] = std::to_string(*spec.lifetime);
  i.labels[std::string(kLabelMemory)] = spec.limits.memory;
  {
    char cpus[32];
    std::snprintf(cpus, sizeof cpus, "%g", spec.limits.cpus);
    i.labels[std::string(kLabelCpus)] = cpus;
  }
  for (const auto& [k, v] : d.system_labels) i.labels[k] = v;
  i.labels[std::string(kLabelImage)] = d.source_image;
  i.labels[std::string(kLabelPlatform)] = d.platform;
  i.runtime = d.runtime;
  i.requested_runtime = spec.runtime;
  i.platform = d.platform;
  i.network = spec.network;
  i.cpus = spec.limits.cpus;
  i.memory_bytes = AGVISOR_TRY(ParseMemorySize("limits.memory", spec.limits.memory));
  i.pids = HostPidsCap(d.platform, spec.limits.pids);
  if (spec.limits.shm) {
    i.shm_bytes = AGVISOR_TRY(ParseMemorySize("limits.shm", *spec.limits.shm));
  } else if (spec.gui) {
    i.shm_bytes = 1LL << 30;
  }
  i.disk_cap = d.disk_cap;
  i.allow_setuid = spec.allow_setuid;
  // The agent ends the sandbox at lifetime/idle expiry even with no client: the runtime then
  // removes it (a named sandbox's data stays in its volume), except with idle_action stop,
  // whose container stays (exited) until its name is created again or it is removed.
  i.remove_on_exit =
      (spec.lifetime.has_value() || spec.idle_ttl.has_value()) && spec.idle_action != "stop";
  if (spec.name) {
    i.working_dir = std::string(kWorkspace);
    i.workspace = d.name;
  }
  return i;
}

void ApplyEgressNetwork(InstanceSpec& i, const SandboxNetwork& net,
                        const egress::EgressRules& rules) {
  i.network = net.name;
  i.egress_network_id = net.id;
  i.dns = {net.gateway};
  i.env = EgressProxyEnv(net.gateway);
  i.labels[std::string(kLabelEgress)] = egress::EncodeEgressRules(rules);
}

void ApplyBrokeredSecrets(InstanceSpec& i, const BrokeredSecrets& b) {
  for (const auto& [name, placeholder] : b.env) i.env.push_back(name + "=" + placeholder);
  if (b.ca_pem.empty()) return;
  i.env.push_back(std::string(kSandboxCaEnv) + "=" + b.ca_pem);
  for (const char* var :
       {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"}) {
    i.env.push_back(std::string(var) + "=" + std::string(kSandboxCaBundlePath));
  }
  i.env.push_back("NODE_EXTRA_CA_CERTS=" + std::string(kSandboxCaPath));
}

std::optional<std::int64_t> LifetimeEnd(const Labels& labels, std::int64_t created_unix) {
  auto it = labels.find(std::string(kLabelLifetime));
  if (it == labels.end() || it->second.empty() || created_unix <= 0 ||
      labels.count(std::string(kLabelPool))) {
    return std::nullopt;
  }
  std::int64_t lifetime = 0;
  for (char c : it->second) {
    if (c < '0' || c > '9' || lifetime > (std::int64_t{1} << 40)) return std::nullopt;  // not ours
    lifetime = lifetime * 10 + (c - '0');
  }
  return created_unix + lifetime + 1;
}

bool LifetimeOver(const Labels& labels, std::int64_t created_unix, std::int64_t now_unix) {
  const auto end = LifetimeEnd(labels, created_unix);
  return end && now_unix >= *end;
}

}  // namespace agvisor
