#include "agvisor/sandbox/docker_runtime/egress_bridge.h"

#include <random>

#include "agvisor/docker/client.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor {
namespace {

std::string RandomBridgeName() {
  std::random_device rd;
  std::uniform_int_distribution<int> hex(0, 15);
  std::string name(kEgressBridgePrefix);
  for (int i = 0; i < 10; ++i) name += "0123456789abcdef"[hex(rd)];
  return name;
}

Result<EgressNetwork> Describe(const docker::NetworkInfo& n) {
  if (n.bridge_name.rfind(kEgressBridgePrefix, 0) != 0 || !n.internal || n.gateway.empty()) {
    return Error::Conflict("network " + n.name +
                           " exists but is not an agvisor egress network (internal, bridge " +
                           std::string(kEgressBridgePrefix) + "..., a gateway); remove it");
  }
  return EgressNetwork{.name = n.name, .id = n.id, .bridge = n.bridge_name, .gateway = n.gateway};
}

}  // namespace

Result<EgressNetwork> EnsureEgressNetwork(docker::Client& docker, std::string_view container_name,
                                          const egress::EgressRules& rules,
                                          const std::map<std::string, std::string>& labels) {
  const std::string name = EgressNetworkName(container_name);
  const std::string encoded = egress::EncodeEgressRules(rules);
  std::string made;  // the id of the network this call made
  for (int pass = 0; pass < 3; ++pass) {
    auto have = docker.InspectNetwork(name);
    if (have.ok()) {
      if (!made.empty() && have->id == made) return Describe(*have);
      if (!have->labels.contains(std::string(kLabelEgress))) {
        return Error::Conflict("a network named " + name +
                               " exists that agvisor did not make; rename or remove it");
      }
      // Left by an earlier sandbox of this name: replaced, never reused (see the header).
      auto rm = docker.RemoveNetwork(have->id);
      if (!rm.ok() && rm.error().code() == ErrorCode::kConflict) {
        return Error::Conflict("the egress network " + name +
                               " of an earlier sandbox of this name is still in use by a "
                               "container; remove that container first");
      }
      if (!rm.ok() && rm.error().code() != ErrorCode::kNotFound) {
        return rm.error().WithContext("replace the egress network of " +
                                      std::string(container_name));
      }
      continue;
    }
    if (have.error().code() != ErrorCode::kNotFound) return have.error();
    docker::NetworkConfig config{
        .name = name, .internal = true, .bridge_name = RandomBridgeName(), .labels = labels};
    config.labels["agvisor"] = "1";
    config.labels[std::string(kLabelEgress)] = encoded;
    config.labels[std::string(kLabelEgressSandbox)] = std::string(container_name);
    auto id = docker.CreateNetwork(config);
    if (id.ok()) {
      made = *id;
    } else if (id.error().code() != ErrorCode::kConflict) {
      return id.error();
    }
    // Made, or made by another client meanwhile: read it back either way.
  }
  return Error::Conflict("the egress network " + name +
                         " is being changed by other clients at the same time; try again");
}

std::optional<std::string> NetworkJoinRefusal(const docker::NetworkInfo& n,
                                              std::string_view made_egress_network) {
  if (auto owner = n.labels.find(std::string(kLabelEgressSandbox));
      owner != n.labels.end() || n.labels.contains(std::string(kLabelEgress))) {
    if (!made_egress_network.empty() && n.id == made_egress_network) {
      if (n.driver == "bridge" && n.internal && n.bridge_name.starts_with(kEgressBridgePrefix)) {
        return std::nullopt;  // the one this create made, as EnsureEgressNetwork made it
      }
      return "it is labelled as an agvisor egress network but is not one (internal, bridge " +
             std::string(kEgressBridgePrefix) + "...); remove it";
    }
    return "it is the egress network of " +
           (owner == n.labels.end() ? std::string("another sandbox") : "sandbox " + owner->second) +
           ", served with the policy that sandbox was made with (or changed to); only the create "
           "that makes an egress network joins it. Give this sandbox a policy of its own "
           "(--allow-domain ...) instead";
  }
  if (n.driver != "bridge") {
    return "its driver is " + (n.driver.empty() ? std::string("unknown") : n.driver) +
           ": the sandbox firewall covers bridge networks only, so a sandbox there would reach "
           "this host and its private neighbourhood";
  }
  // Docker names a user bridge's interface br-<first 12 hex digits of the id> unless told
  // otherwise; the default network's is docker0.
  const std::string& iface = n.bridge_name;
  if (!iface.empty() && iface != "docker0" && !iface.starts_with("br-")) {
    return "its bridge interface is named " + iface +
           " (com.docker.network.bridge.name), which the sandbox firewall's rules (docker0, br-*) "
           "do not match";
  }
  auto user = n.labels.find(std::string(kLabelUserNetwork));
  if (n.name != "bridge" && (user == n.labels.end() || user->second != "1")) {
    return "it was not made by `agvisor network create` (no label " +
           std::string(kLabelUserNetwork) +
           "=1): the sandbox firewall lets traffic within a bridge through, so a sandbox there "
           "would reach every container on it (a compose project's database, say); make one "
           "for sandboxes with `agvisor network create NAME`";
  }
  return std::nullopt;
}

Result<void> CheckJoinableNetwork(docker::Client& docker, std::string_view network,
                                  std::string_view made_egress_network) {
  auto n = docker.InspectNetwork(network);
  if (!n.ok() && n.error().code() == ErrorCode::kNotFound) {
    return Error::NotFound("network '" + std::string(network) +
                           "' does not exist; make one with `agvisor network create " +
                           std::string(network) + "`, or use network bridge or none");
  }
  if (!n.ok()) return n.error();
  if (auto why = NetworkJoinRefusal(*n, made_egress_network)) {
    return Error::InvalidArgument("network '" + std::string(network) + "' is refused: " + *why +
                                  ". Use bridge, none, or a network made with `agvisor network "
                                  "create NAME`");
  }
  return Ok();
}

Result<std::string> CreateUserNetwork(docker::Client& docker, std::string_view name) {
  AGVISOR_RETURN_IF_ERROR(ValidateNetwork(name));
  if (name == "bridge" || name == "none" || name.ends_with("-egress")) {
    return Error::InvalidArgument("network name '" + std::string(name) +
                                  "' is reserved (Docker's own, or agvisor's egress networks)");
  }
  docker::NetworkConfig config{.name = std::string(name), .internal = false, .bridge_name = ""};
  config.labels["agvisor"] = "1";
  config.labels[std::string(kLabelUserNetwork)] = "1";
  auto id = docker.CreateNetwork(config);
  if (!id.ok() && id.error().code() == ErrorCode::kConflict) {
    return Error::Conflict("a network named " + std::string(name) + " exists already");
  }
  return id;
}

Result<void> RemoveEgressNetwork(docker::Client& docker, std::string_view container_name) {
  auto r = docker.RemoveNetwork(EgressNetworkName(container_name));
  if (r.ok() || r.error().code() == ErrorCode::kNotFound ||
      r.error().code() == ErrorCode::kConflict) {
    return Ok();
  }
  return r.error();
}

}  // namespace agvisor
