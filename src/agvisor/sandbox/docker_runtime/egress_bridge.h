// The Docker side of a sandbox's networks. Its egress network (sandbox/egress_network.h,
// docs/egress.md): an internal bridge of its own named agve<hex> on the host, whose gateway is the
// enforcer; used by DockerRuntime::EnsureEgressNetwork / RemoveEgressNetwork. And which other
// Docker networks a sandbox may join (`--network NAME`, docs/security.md "Shared networks"), and
// the user networks `agvisor network create` makes; used by DockerRuntime::CreateAndStart and the
// CLI.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/docker/types.h"
#include "agvisor/egress/policy.h"
#include "agvisor/sandbox/egress_network.h"

namespace agvisor {
namespace docker {
class Client;
}  // namespace docker

struct EgressNetwork {
  std::string name;  // Docker's network name: <container name>-egress
  std::string id;
  std::string bridge;   // agve<hex>
  std::string gateway;  // the enforcer's address, e.g. 172.19.0.1
};

// A new network for `container_name`, with the sandbox's own `labels` too. A network of that name
// left by an earlier sandbox of the name (removed without agvisor, or while agvisord was down) is
// never reused, whatever its rules: its enforcer may hold a live change (a wider policy) for it,
// so it is removed and a new one made (a new id, which no live-change state names). Errors:
// kConflict (a network of that name that agvisor did not make, or one a container still uses),
// Docker's.
Result<EgressNetwork> EnsureEgressNetwork(docker::Client& docker, std::string_view container_name,
                                          const egress::EgressRules& rules,
                                          const std::map<std::string, std::string>& labels);

// On the network of `agvisor network create`: a plain bridge with Docker's interface naming.
inline constexpr std::string_view kLabelUserNetwork = "agvisor.network";

// Why a sandbox may not join Docker network `n`, or nullopt when it may. `made_egress_network`
// is the id of the egress network the create asking made for itself (EnsureEgressNetwork), ""
// when it made none. The sandbox firewall (scripts/sandbox-firewall) matches bridges named
// docker0 and br-* only: a network of another driver (macvlan, ipvlan, overlay, host, ...) or a
// bridge whose interface has another name (com.docker.network.bridge.name) escapes every rule.
// And it lets traffic within one bridge through: besides Docker's default `bridge`, only a network
// of `agvisor network create` (kLabelUserNetwork) is joined, never a bridge other containers use
// (a compose project's, with its database). An agvisor egress network is joined only by the
// create that just made it: never by one that names it (its enforcer serves the policy of the
// sandbox it was made for, perhaps a live-changed one, even when that sandbox's name is the same).
std::optional<std::string> NetworkJoinRefusal(const docker::NetworkInfo& n,
                                              std::string_view made_egress_network);
// The same for a network by name or id, inspected through `docker`. kInvalidArgument with the
// reason and what to use instead; kNotFound when there is no such network.
Result<void> CheckJoinableNetwork(docker::Client& docker, std::string_view network,
                                  std::string_view made_egress_network);

// `agvisor network create NAME`: a bridge network a sandbox may join (Docker names its interface
// br-<id>, which the sandbox firewall covers), labelled agvisor=1 and kLabelUserNetwork. Returns
// its id. kConflict when a network of that name exists; kInvalidArgument for a bad name.
Result<std::string> CreateUserNetwork(docker::Client& docker, std::string_view name);

// Removes the network of `container_name`, if any. A network still in use is left (kConflict is
// not an error here: its container's removal comes first).
Result<void> RemoveEgressNetwork(docker::Client& docker, std::string_view container_name);

}  // namespace agvisor
