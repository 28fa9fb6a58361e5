// Which Docker networks a sandbox may join (NetworkJoinRefusal): the ones whose traffic crosses
// a bridge the sandbox firewall matches, never another sandbox's egress network.
#include "agvisor/sandbox/docker_runtime/egress_bridge.h"

#include <gtest/gtest.h>

#include "agvisor/docker/types.h"

namespace agvisor {
namespace {

docker::NetworkInfo Net(std::string driver, std::string bridge_name = "",
                        std::map<std::string, std::string> labels = {}) {
  return {.id = "0123456789ab0123456789ab",
          .name = "n",
          .driver = std::move(driver),
          .bridge_name = std::move(bridge_name),
          .labels = std::move(labels)};
}

TEST(NetworkJoinTest, BridgesTheFirewallMatchesAreJoined) {
  EXPECT_EQ(NetworkJoinRefusal(Net("bridge"), "agvisor-a"), std::nullopt);  // br-<id>
  EXPECT_EQ(NetworkJoinRefusal(Net("bridge", "docker0"), "agvisor-a"), std::nullopt);
  EXPECT_EQ(NetworkJoinRefusal(Net("bridge", "br-mine"), "agvisor-a"), std::nullopt);
  EXPECT_EQ(NetworkJoinRefusal(Net("bridge", "", {{"agvisor", "1"}, {"agvisor.network", "1"}}),
                               "agvisor-a"),
            std::nullopt);
}

TEST(NetworkJoinTest, WhatEscapesTheFirewallIsRefusedWithTheReason) {
  for (const char* driver : {"macvlan", "ipvlan", "overlay", "host", "null", ""}) {
    auto why = NetworkJoinRefusal(Net(driver), "agvisor-a");
    ASSERT_TRUE(why.has_value()) << driver;
    EXPECT_NE(why->find("its driver is"), std::string::npos) << *why;
  }
  for (const char* name : {"eth0", "mybridge", "agve0123456789", "docker1", "br"}) {
    auto why = NetworkJoinRefusal(Net("bridge", name), "agvisor-a");
    ASSERT_TRUE(why.has_value()) << name;
    EXPECT_NE(why->find("its bridge interface is named " + std::string(name)), std::string::npos)
        << *why;
  }
}

TEST(NetworkJoinTest, AnEgressNetworkIsItsOwnSandboxsOnly) {
  const auto egress = Net("bridge", "agve0123456789",
                          {{std::string(kLabelEgress), "allow=a.example;cidr=;ports=;deny="},
                           {std::string(kLabelEgressSandbox), "agvisor-a"}});
  EXPECT_TRUE(NetworkJoinRefusal(egress, "agvisor-a").has_value());  // not internal
  auto internal = egress;
  internal.internal = true;
  EXPECT_EQ(NetworkJoinRefusal(internal, "agvisor-a"), std::nullopt);
  auto wide = internal;
  wide.driver = "macvlan";
  EXPECT_TRUE(NetworkJoinRefusal(wide, "agvisor-a").has_value());
  auto why = NetworkJoinRefusal(egress, "agvisor-b");
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("egress network of sandbox agvisor-a"), std::string::npos) << *why;
  // Labelled by hand to look like one: refused whatever else it is.
  EXPECT_TRUE(
      NetworkJoinRefusal(Net("bridge", "", {{std::string(kLabelEgress), "x"}}), "agvisor-b"));
}

}  // namespace
}  // namespace agvisor
