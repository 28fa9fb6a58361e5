#include "agvisor/sandbox/container_config.h"

#include <cmath>

#include "agvisor/sandbox/agent_paths.h"

namespace agvisor {

Result<docker::ContainerConfig> BuildContainerConfig(const SandboxSpec& spec,
                                                     const ContainerDecisions& d) {
  docker::ContainerConfig c;
  c.image = d.image;
  c.entrypoint = {std::string(kAgentPath)};
  c.cmd = {"init", "--channel-stdio"};
  // PID 1's stdio carries the creating client's channel (docs/protocol.md): stdin kept open
  // across attaches, never closed by a detaching client, never written to a log file.
  c.open_stdin = true;
  c.attach_stdin = c.attach_stdout = c.attach_stderr = true;
  c.stdin_once = false;
  if (spec.lifetime) c.cmd.insert(c.cmd.end(), {"--lifetime", std::to_string(*spec.lifetime)});
  if (spec.idle_ttl) c.cmd.insert(c.cmd.end(), {"--idle-ttl", std::to_string(*spec.idle_ttl)});
  if (spec.gui) c.cmd.push_back("--desktop");
  c.labels = spec.labels;
  c.labels[std::string(kLabelManaged)] = "1";
  if (spec.name) c.labels[std::string(kLabelName)] = *spec.name;
  if (spec.idle_ttl) c.labels[std::string(kLabelIdleTtl)] = std::to_string(*spec.idle_ttl);
  c.labels[std::string(kLabelMemory)] = spec.limits.memory;
  for (const auto& [k, v] : d.system_labels) c.labels[k] = v;
  c.labels[std::string(kLabelImage)] = d.source_image;
  auto& h = c.host_config;
  const bool twin = d.runtime != spec.runtime;
  h.runtime = d.runtime;
  // With the twin, the agent puts the localhost lines Docker would have written into the then
  // empty /etc/hosts (agent/hosts.h).
  c.network_disabled = twin;
  h.nano_cpus = static_cast<std::int64_t>(std::llround(spec.limits.cpus * 1e9));
  h.memory = AGVISOR_TRY(ParseMemorySize("limits.memory", spec.limits.memory));
  h.memory_swap = h.memory;  // no swap
  h.pids_limit = spec.limits.pids;
  h.network_mode = spec.network;
  if (spec.limits.shm) {
    h.shm_size = AGVISOR_TRY(ParseMemorySize("limits.shm", *spec.limits.shm));
  } else if (spec.gui) {
    h.shm_size = 1LL << 30;
  }
  // The agent ends the container at lifetime/idle expiry even with no client: Docker then
  // removes it (a named sandbox's data stays in its volume).
  h.auto_remove = spec.lifetime.has_value() || spec.idle_ttl.has_value();
  h.security_opt = {"no-new-privileges"};
  h.cap_drop = {"ALL"};
  h.cap_add.assign(kSandboxCapabilities.begin(), kSandboxCapabilities.end());
  h.log_driver = "none";
  if (d.disk_cap) h.annotations["dev.gvisor.flag.overlay2"] = "root:self,size=" + *d.disk_cap;
  if (spec.name) {
    c.working_dir = std::string(kWorkspace);
    h.mounts.push_back(
        {.type = "volume", .source = d.container_name, .target = std::string(kWorkspace)});
  }
  return c;
}

void ApplyEgressNetwork(docker::ContainerConfig& c, const EgressNetwork& net,
                        const egress::EgressRules& rules) {
  c.host_config.network_mode = net.name;
  c.host_config.dns = {net.gateway};
  c.env = EgressProxyEnv(net.gateway);
  c.labels[std::string(kLabelEgress)] = egress::EncodeEgressRules(rules);
}

}  // namespace agvisor
