// The Docker side of a sandbox's egress network (sandbox/egress_network.h, docs/egress.md): an
// internal bridge of its own named agve<hex> on the host, whose gateway is the enforcer. Used by
// DockerRuntime::EnsureEgressNetwork / RemoveEgressNetwork.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/egress/policy.h"
#include "agvisor/sandbox/egress_network.h"

namespace agvisor {
namespace docker {
class Client;
}

struct EgressNetwork {
  std::string name;  // Docker's network name: <container name>-egress
  std::string id;
  std::string bridge;   // agve<hex>
  std::string gateway;  // the enforcer's address, e.g. 172.19.0.1
};

// The network for `container_name`, made when missing (or when it carries other rules and no
// container uses it), with the sandbox's own `labels` too. Errors: Docker's.
Result<EgressNetwork> EnsureEgressNetwork(docker::Client& docker, std::string_view container_name,
                                          const egress::EgressRules& rules,
                                          const std::map<std::string, std::string>& labels);

// Removes the network of `container_name`, if any. A network still in use is left (kConflict is
// not an error here: its container's removal comes first).
Result<void> RemoveEgressNetwork(docker::Client& docker, std::string_view container_name);

}  // namespace agvisor
