// `agvisor doctor`'s density lines (docker_doctor.h: DensityChecks, AddressPoolNetworks), pure:
// the first host limit that stops the count of idle sandboxes, and the egress networks Docker's
// address pools have room for.
#include "agvisor/sandbox/docker_runtime/docker_doctor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace agvisor {
namespace {

using ::testing::HasSubstr;
using Status = HostCheck::Status;

// This machine as measured with 300 idle ptrace sandboxes (bench/README, "Host side at 300").
DensityFacts AtThreeHundred() {
  return {.pid_max = 32768,
          .tasks_now = 17568,
          .sandboxes_now = 300,
          .bridge_ports = 301,
          .dockerd_nofile = 20000,
          .dockerd_fds = 2434,
          .pool_networks = 31,
          .networks_now = 2};
}

TEST(DensityChecksTest, NamesThePidSpaceAsTheFirstLimitAndHowToLiftIt) {
  auto checks = DensityChecks(AtThreeHundred());
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].name, "host limits");
  // (32768 - 17568) / 64 = 237 more: 537 in all, so no warning at the goal of 300 ...
  EXPECT_EQ(checks[0].status, Status::kOk);
  EXPECT_THAT(checks[0].detail, HasSubstr("room for about 237 more idle sandboxes (300 running) "
                                          "before kernel.pid_max 32768"));
  EXPECT_THAT(checks[0].detail, HasSubstr("docker0 bridge's 1023 ports (301 used"));
  // ... but a goal of 600 is past it, and the fix raises pid_max.
  auto at600 = DensityChecks(AtThreeHundred(), 600);
  EXPECT_EQ(at600[0].status, Status::kWarn);
  EXPECT_THAT(at600[0].fix, HasSubstr("kernel.pid_max=4194304"));
}

TEST(DensityChecksTest, TheBridgeOrDockerdsFilesCanBeTheFirstLimit) {
  DensityFacts f = AtThreeHundred();
  f.pid_max = 4194304;
  f.bridge_ports = 1000;
  auto checks = DensityChecks(f);
  EXPECT_EQ(checks[0].status, Status::kOk);  // 300 + 23 more
  EXPECT_THAT(checks[0].detail, HasSubstr("about 23 more idle sandboxes (300 running) before the "
                                          "docker0 bridge's"));
  f.sandboxes_now = 10;
  f.bridge_ports = 10;
  f.dockerd_nofile = 1024;
  f.dockerd_fds = 100;
  checks = DensityChecks(f);
  EXPECT_EQ(checks[0].status, Status::kWarn);  // 10 + 92: fewer than 300
  EXPECT_THAT(checks[0].detail, HasSubstr("about 92 more idle sandboxes (10 running) before "
                                          "dockerd's open-files limit 1024"));
  EXPECT_THAT(checks[0].fix, HasSubstr("ulimit -n"));
}

TEST(DensityChecksTest, EgressSandboxesNeedANetworkEachFromDockersPools) {
  auto checks = DensityChecks(AtThreeHundred());
  EXPECT_EQ(checks[1].name, "egress networks");
  EXPECT_EQ(checks[1].status, Status::kWarn);
  EXPECT_THAT(checks[1].detail,
              HasSubstr("hold 31 networks, 2 bridge networks exist, room for 29"));
  EXPECT_THAT(checks[1].fix, HasSubstr("default-address-pools"));
  DensityFacts big = AtThreeHundred();
  big.pool_networks =
      *AddressPoolNetworks(R"({"default-address-pools": [{"base": "10.210.0.0/16", "size": 26}]})");
  EXPECT_EQ(DensityChecks(big)[1].status, Status::kOk);
}

TEST(DensityChecksTest, UnknownFactsAreNotChecked) {
  auto checks = DensityChecks(DensityFacts{});
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].status, Status::kInfo);
}

TEST(AddressPoolNetworksTest, DockersDefaultsOrTheConfiguredPools) {
  EXPECT_EQ(AddressPoolNetworks(""), 31);
  EXPECT_EQ(AddressPoolNetworks(R"({"runtimes": {}})"), 31);
  EXPECT_EQ(AddressPoolNetworks(R"({"default-address-pools": [
      {"base": "10.210.0.0/16", "size": 24}, {"base": "172.80.0.0/16", "size": 20},
      {"base": "fd00::/48", "size": 64}]})"),
            256 + 16);
  EXPECT_EQ(AddressPoolNetworks("not json"), std::nullopt);
  EXPECT_EQ(
      AddressPoolNetworks(R"({"default-address-pools": [{"base": "10.0.0.0/16", "size": 8}]})"),
      std::nullopt);
}

}  // namespace
}  // namespace agvisor
