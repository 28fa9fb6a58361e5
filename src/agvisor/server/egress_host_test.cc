// EgressHost's pure helpers: which firewall openings are stale, and the resolver from resolv.conf.
#include "agvisor/server/egress_host.h"

#include <gtest/gtest.h>

namespace agvisor::server {
namespace {

// `iptables -S AGVISOR-ALLOW` as agvisords write it: pid 100 is running, 200 is gone.
constexpr std::string_view kListing =
    "-N AGVISOR-ALLOW\n"
    "-A AGVISOR-ALLOW -d 172.20.0.1/32 -i agve01 -p tcp -m multiport --dports 80,443,3128 -m "
    "comment --comment \"agvisor egress agvisor-a pid 100\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 172.21.0.1/32 -i agve02 -p tcp -m multiport --dports 80,443,3128 -m "
    "comment --comment \"agvisor egress agvisor-b pid 200\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 172.21.0.1/32 -i agve02 -p udp -m udp --dport 53 -m comment --comment "
    "\"agvisor egress agvisor-b pid 200\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 172.22.0.1/32 -i agve03 -p udp -m udp --dport 53 -m comment --comment "
    "\"agvisor egress agvisor-c\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 10.9.0.1/32 -p tcp --dport 8080 -m comment --comment \"an admin's own "
    "rule\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 10.9.0.2/32 -p tcp --dport 8081 -j ACCEPT\n"
    "-A AGVISOR-ALLOW -m comment --comment \"agvisor egress x pid notanumber\" -j ACCEPT\n";

TEST(StaleOpeningsTest, OnlyOpeningsOfAgvisordsThatAreGoneAreDeleted) {
  auto stale = StaleOpenings(kListing, [](int pid) { return pid == 100; });
  ASSERT_EQ(stale.size(), 3u);
  const std::vector<std::string> first = {
      "-D", "AGVISOR-ALLOW", "-d",        "172.21.0.1/32",
      "-i", "agve02",        "-p",        "tcp",
      "-m", "multiport",     "--dports",  "80,443,3128",
      "-m", "comment",       "--comment", "agvisor egress agvisor-b pid 200",
      "-j", "ACCEPT"};
  EXPECT_EQ(stale[0], first);
  EXPECT_EQ(stale[1][7], "udp");
  EXPECT_EQ(stale[1][15], "agvisor egress agvisor-b pid 200");
  // The form written before pids were kept counts as gone.
  EXPECT_EQ(stale[2][15], "agvisor egress agvisor-c");
}

TEST(StaleOpeningsTest, NothingIsStaleWhileItsAgvisordRuns) {
  EXPECT_EQ(StaleOpenings(kListing, [](int) { return true; }).size(), 1u);  // agvisor-c only
  EXPECT_TRUE(StaleOpenings("", [](int) { return false; }).empty());
  EXPECT_TRUE(StaleOpenings("-N AGVISOR-ALLOW\n", [](int) { return false; }).empty());
}

TEST(FirstNameserverTest, TakesTheFirstAddressLine) {
  auto ns = FirstNameserver("# comment\nsearch x\nnameserver bogus\nnameserver 10.0.0.2\n");
  ASSERT_TRUE(ns.ok());
  EXPECT_EQ(egress::FormatIpAddress(*ns), "10.0.0.2");
  EXPECT_EQ(FirstNameserver("search x\n").error().code(), ErrorCode::kNotFound);
}

TEST(EgressCapsTest, TunnelsFitTheOpenFilesLimitWithRoomForTheApi) {
  for (std::uint64_t limit : {256u, 1024u, 20000u, 1048576u}) {
    const EgressCaps c = ComputeEgressCaps(limit);
    EXPECT_LE(c.reserved_fds + c.max_tunnels * kFdsPerTunnel, limit) << limit;
    EXPECT_GE(c.reserved_fds, std::min<std::uint64_t>(512, limit / 2)) << limit;
    EXPECT_GE(c.max_tunnels_per_sandbox, 1u) << limit;
    EXPECT_LE(c.max_tunnels_per_sandbox * 4, std::max<std::size_t>(c.max_tunnels, 4)) << limit;
  }
  // systemd's default soft limit, when the hard one is no higher.
  const EgressCaps service = ComputeEgressCaps(1024);
  EXPECT_EQ(service.reserved_fds, 512u);
  EXPECT_EQ(service.max_tunnels, 85u);
  EXPECT_EQ(service.max_tunnels_per_sandbox, 21u);
  EXPECT_EQ(ComputeEgressCaps(1048576).max_tunnels_per_sandbox, 1024u);
}

}  // namespace
}  // namespace agvisor::server
