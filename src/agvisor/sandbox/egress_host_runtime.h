// What agvisord's egress enforcers (server/egress_host.h) need from the host where sandboxes
// run: the egress networks to serve, the host firewall's openings for each enforcer, the check
// of the sandbox firewall's hooks, and the removal of networks whose sandbox is gone. The daemon
// serves the enforcers (egress/proxy.h) through this and knows nothing of the runtime behind it.
//
// One implementation today, the Docker runtime's (docker_runtime/egress_host.h: Docker's
// networks, iptables on this machine); daemon.cc makes it for a local Docker host. Called from
// the enforcers' thread and the API's threads.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor {

// An egress network agvisor made for one sandbox (egress_network.h): where its enforcer listens
// (the gateway, on the bridge) and whom it serves (the subnet), with the policy it was made with.
struct EgressNetworkInfo {
  std::string id;
  std::string name;
  std::string bridge;  // the host's interface, kEgressBridgePrefix...
  std::string gateway;
  std::string subnet;
  std::string container;  // the sandbox it is for
  std::string rules;      // egress::EncodeEgressRules text of its label
  std::string secrets;    // EncodeSecretBindings text of its secrets label ("" = none)
};

// The sandbox firewall's hooks as one check found them.
struct SandboxFirewallCheck {
  bool in_place = false;  // every hook there, or the host declared external isolation
  bool external = false;  // `scripts/sandbox-firewall external`
  std::string missing;    // the missing hooks, for the log ("" when none)
  // Set when the host's firewall state file could not be written (the check still counts).
  std::string record_error;
};

class EgressHostRuntime {
 public:
  virtual ~EgressHostRuntime() = default;
  // The egress networks there are now: only agvisor's own (internal, on an egress bridge, with a
  // gateway and both labels); anything else is never served. Errors: the runtime's.
  virtual Result<std::vector<EgressNetworkInfo>> Networks() = 0;
  // Whether network `id` may still exist: false only when the runtime says it does not.
  virtual bool NetworkMayExist(const std::string& id) = 0;
  // Removes the egress networks whose sandbox has been gone for a grace period (a create may be
  // between its network and its container). Returns (network, sandbox) of each one removed.
  virtual std::vector<std::pair<std::string, std::string>> RemoveOrphanNetworks() = 0;
  // Opens (`open`) or closes the host firewall for the enforcer of `network`: its gateway's
  // ports, from its bridge only. Errors: kUnavailable (the firewall refused: how to install it).
  virtual Result<void> Firewall(const EgressNetworkInfo& network, bool open) = 0;
  // Closes the openings of enforcers whose daemon is gone (killed, crashed); returns how many.
  virtual int ClearStaleOpenings() = 0;
  // Checks the sandbox firewall's hooks and records the result in the host's state file
  // (egress_network.h), which creates read.
  virtual SandboxFirewallCheck CheckSandboxFirewall() = 0;
};

}  // namespace agvisor
