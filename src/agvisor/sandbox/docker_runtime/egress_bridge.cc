#include "agvisor/sandbox/docker_runtime/egress_bridge.h"

#include <random>

#include "agvisor/docker/client.h"

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
  for (int pass = 0; pass < 3; ++pass) {
    auto have = docker.InspectNetwork(name);
    if (have.ok()) {
      auto it = have->labels.find(std::string(kLabelEgress));
      if (it == have->labels.end()) {
        return Error::Conflict("a network named " + name +
                               " exists that agvisor did not make; rename or remove it");
      }
      if (it->second == encoded) return Describe(*have);
      // Other rules (a named sandbox made again with a new policy): replaced while unused.
      auto rm = docker.RemoveNetwork(name);
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
    auto made = docker.CreateNetwork(config);
    if (!made.ok() && made.error().code() != ErrorCode::kConflict) return made.error();
    // Made, or made by another client meanwhile: read it back either way.
  }
  return Error::Conflict("the egress network " + name +
                         " is being changed by other clients at the same time; try again");
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
