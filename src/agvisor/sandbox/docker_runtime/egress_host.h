// The Docker runtime's side of agvisord's egress enforcers (egress_host_runtime.h): the egress
// networks of a Docker host on this machine (docker_runtime/egress_bridge.h makes them), the
// openings of the host firewall for each enforcer (iptables, the chain AGVISOR-ALLOW that
// scripts/sandbox-firewall leaves to the enforcers), the check of that script's hooks, and the
// removal of networks whose sandbox is gone.
//
// Used by server/daemon.cc (the one place that makes it) and egress_host_test.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/egress_host_runtime.h"

namespace agvisor {

// The Docker host `docker_host` ("" = $DOCKER_HOST or the local socket), whose bridges are this
// machine's. `firewall_chain`: the chain scripts/sandbox-firewall hooks egress bridges into ("" =
// $AGVISOR_TEST_FIREWALL_CHAIN when set, for tests: a chain that does not exist shows the refusal
// without touching the host's rules; else AGVISOR-EGRESS). Errors: those of reaching Docker.
Result<std::unique_ptr<EgressHostRuntime>> DockerEgressHost(std::string_view docker_host,
                                                            std::string firewall_chain = "");

// The jumps `scripts/sandbox-firewall block` adds to iptables (IPv4), as "CHAIN IFACE TARGET":
// docker0 and br-+ from DOCKER-USER to AGVISOR-FORWARD and from INPUT to AGVISOR-INPUT, agve+
// from both to `egress_chain`. Keep in step with the script's hooks().
std::vector<std::vector<std::string>> FirewallHooks(const std::string& egress_chain);

// The openings in `listing` (the output of `iptables -S AGVISOR-ALLOW`) whose enforcer is gone:
// rules commented "agvisor egress SANDBOX pid PID" for which `running(PID)` is false, and rules
// of the form before the pid was written ("agvisor egress SANDBOX"). Each comes back as the
// arguments that delete it ("-D", "AGVISOR-ALLOW", ...). Other rules are never returned.
std::vector<std::vector<std::string>> StaleOpenings(std::string_view listing,
                                                    const std::function<bool(int pid)>& running);

// Which egress networks to remove, from ONE list of the host's sandboxes (not an inspect per
// network: a pass costs the same at 300 sandboxes as at 3). `networks`: (network id, its
// sandbox's container name) of every egress network; `present`: the container names there are
// now. A network whose sandbox is absent is due once it has been so for `grace` (a create may be
// between its network and its container); `orphan_since` keeps when each was first seen absent
// (updated: present again or not listed any more, it is forgotten). Returns the indices of
// `networks` that are due.
using OrphanClock = std::chrono::steady_clock;
std::vector<std::size_t> DueOrphanNetworks(
    const std::vector<std::pair<std::string, std::string>>& networks,
    const std::set<std::string, std::less<>>& present,
    std::map<std::string, OrphanClock::time_point>& orphan_since, OrphanClock::time_point now,
    OrphanClock::duration grace);

}  // namespace agvisor
