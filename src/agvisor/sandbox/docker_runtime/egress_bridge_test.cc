// Which Docker networks a sandbox may join (NetworkJoinRefusal): Docker's default bridge and the
// networks of `agvisor network create`, whose traffic crosses a bridge the sandbox firewall
// matches; an egress network only by the create that made it.
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

const std::map<std::string, std::string> kUserNetwork = {{"agvisor", "1"},
                                                         {std::string(kLabelUserNetwork), "1"}};

TEST(NetworkJoinTest, TheDefaultBridgeAndAgvisorsUserNetworksAreJoined) {
  EXPECT_EQ(NetworkJoinRefusal(Net("bridge", "", kUserNetwork), ""), std::nullopt);  // br-<id>
  EXPECT_EQ(NetworkJoinRefusal(Net("bridge", "br-mine", kUserNetwork), ""), std::nullopt);
  auto docker0 = Net("bridge", "docker0");
  docker0.name = "bridge";
  EXPECT_EQ(NetworkJoinRefusal(docker0, ""), std::nullopt);
}

// Issue 32, point 5: a bridge the firewall covers but that other containers use (a compose
// project's `myapp_default`, with its database) is not joined: within a bridge nothing is dropped.
TEST(NetworkJoinTest, BridgesNotMadeForSandboxesAreRefusedWithTheFix) {
  auto compose = Net("bridge", "", {{"com.docker.compose.network", "default"}});
  compose.name = "myapp_default";
  for (const auto& n : {compose, Net("bridge", "br-mine"), Net("bridge", "docker0"),
                        Net("bridge", "", {{std::string(kLabelUserNetwork), "0"}})}) {
    auto why = NetworkJoinRefusal(n, "");
    ASSERT_TRUE(why.has_value()) << n.name << " " << n.bridge_name;
    EXPECT_NE(why->find("not made by `agvisor network create`"), std::string::npos) << *why;
    EXPECT_NE(why->find("agvisor network create NAME"), std::string::npos) << *why;
  }
}

TEST(NetworkJoinTest, WhatEscapesTheFirewallIsRefusedWithTheReason) {
  for (const char* driver : {"macvlan", "ipvlan", "overlay", "host", "null", ""}) {
    auto why = NetworkJoinRefusal(Net(driver, "", kUserNetwork), "");
    ASSERT_TRUE(why.has_value()) << driver;
    EXPECT_NE(why->find("its driver is"), std::string::npos) << *why;
  }
  for (const char* name : {"eth0", "mybridge", "agve0123456789", "docker1", "br"}) {
    auto why = NetworkJoinRefusal(Net("bridge", name, kUserNetwork), "");
    ASSERT_TRUE(why.has_value()) << name;
    EXPECT_NE(why->find("its bridge interface is named " + std::string(name)), std::string::npos)
        << *why;
  }
}

TEST(NetworkJoinTest, AnEgressNetworkIsJoinedOnlyByTheCreateThatMadeIt) {
  const auto egress = Net("bridge", "agve0123456789",
                          {{std::string(kLabelEgress), "allow=a.example;cidr=;ports=;deny="},
                           {std::string(kLabelEgressSandbox), "agvisor-a"}});
  EXPECT_TRUE(NetworkJoinRefusal(egress, egress.id).has_value());  // not internal
  auto internal = egress;
  internal.internal = true;
  EXPECT_EQ(NetworkJoinRefusal(internal, internal.id), std::nullopt);
  auto wide = internal;
  wide.driver = "macvlan";
  EXPECT_TRUE(NetworkJoinRefusal(wide, wide.id).has_value());
  // Named by a create that made none, or another one: another sandbox's, or the leftover of an
  // earlier sandbox of the same name (agvisor-a), served with that one's policy.
  for (std::string_view made : {"", "agvisor-a", "agvisor-b", "fedcba9876543210fedcba98"}) {
    auto why = NetworkJoinRefusal(internal, made);
    ASSERT_TRUE(why.has_value()) << made;
    EXPECT_NE(why->find("egress network of sandbox agvisor-a"), std::string::npos) << *why;
    EXPECT_NE(why->find("only the create that makes an egress network joins it"), std::string::npos)
        << *why;
  }
  // Labelled by hand to look like one: refused whatever else it is.
  EXPECT_TRUE(NetworkJoinRefusal(Net("bridge", "", {{std::string(kLabelEgress), "x"}}), ""));
}

}  // namespace
}  // namespace agvisor
