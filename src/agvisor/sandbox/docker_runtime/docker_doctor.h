// `agvisor doctor` on a Docker host: what it offers the Docker runtime, checked with real
// sandboxes. Reached through the factory's DiagnoseHost (runtimes.h), which picks this or the
// Kubernetes host's checks (kube_runtime/kube_doctor.h) by address.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "agvisor/sandbox/host_verbs.h"

namespace agvisor {

// The checks of Docker host `host` ("" = the local one), in order: "docker" (reachable, its API
// version), "runtime" (which runtimes are gVisor: each binary is asked), "runsc network mode",
// "network none runtime", "image" (the default one), "sandbox" (a real one, timed),
// "platforms", "network bridge", "sandbox firewall", "network none", "disk cap", "cgroups",
// "host limits" and "egress networks" (DensityChecks; a host that is not this machine: info).
// Stops at the first check that later ones need. Never fails: a failure is a kFail check.
std::vector<HostCheck> DiagnoseDockerHost(std::string_view host);

// What stops the count of idle sandboxes on a Docker host on this machine (issue 36), as read
// from it: the kernel's pid space (each host task, thread or process, takes a pid), the default
// bridge's ports, dockerd's open files, Docker's address pools (each egress sandbox takes a
// network of its own: egress_bridge.h). Fields < 0 are unknown and not checked.
struct DensityFacts {
  std::int64_t pid_max = -1;       // /proc/sys/kernel/pid_max
  std::int64_t tasks_now = -1;     // host tasks now (/proc/loadavg's 4th field)
  std::int64_t sandboxes_now = 0;  // agvisor sandboxes running now
  std::int64_t bridge_ports = -1;  // ports of docker0 now (/sys/class/net/docker0/brif)
  // dockerd's soft open-files limit (the first dockerd process found: this host's, unless another
  // runs beside it)
  std::int64_t dockerd_nofile = -1;
  std::int64_t dockerd_fds = -1;    // dockerd's open files now
  std::int64_t pool_networks = -1;  // networks Docker's address pools hold (AddressPoolNetworks)
  std::int64_t networks_now = -1;   // bridge networks there are (docker0 included)
};

// What one idle sandbox takes, measured at 300 sandboxes on the ptrace platform (bench/README,
// "Host side at 300": 54-60 host tasks each, dockerd ~8 files each), rounded up.
inline constexpr std::int64_t kTasksPerIdleSandbox = 64;
inline constexpr std::int64_t kDockerdFilesPerSandbox = 10;
// A Linux bridge takes at most 1024 ports (BR_MAX_PORTS): docker0's sandboxes, one veth each.
inline constexpr std::int64_t kBridgePortLimit = 1024;
// How many idle sandboxes a host should hold before doctor warns (issue 36's goal).
inline constexpr std::int64_t kDensityTarget = 300;

// "host limits" (how many more idle sandboxes fit, and the first limit that stops them: warn
// below `target` in all) and "egress networks" (how many more egress sandboxes Docker's address
// pools have room for: warn below `target`). Pure; unit-tested.
std::vector<HostCheck> DensityChecks(const DensityFacts& facts,
                                     std::int64_t target = kDensityTarget);

// How many networks the "default-address-pools" of daemon.json text hold (Docker's own
// defaults when the file or the key is absent: 15 /16s of 172.17-31 and 16 /20s of
// 192.168/16, 31 in all, docker0's included); nullopt when the text cannot be read as such.
std::optional<std::int64_t> AddressPoolNetworks(std::string_view daemon_json);

}  // namespace agvisor
