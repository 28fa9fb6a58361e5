#include "agvisor/sandbox/docker_runtime/cgroup_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agvisor/sandbox/docker_runtime/sentry_pids.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Files(const std::vector<CgroupWrite>& plan) {
  std::vector<std::string> out;
  for (const auto& w : plan) out.push_back(w.file + "=" + w.value);
  return out;
}

CgroupPaths V1(bool memsw) {
  return {
      .version = CgroupVersion::kV1, .memory = "/m", .cpu = "/c", .pids = "/p", .has_memsw = memsw};
}

// memory may never exceed memory+swap: lowering writes memory first, raising memsw first, and
// both end equal (no swap).
TEST(PlanCgroupResize, V1MemoryOrderFollowsTheDirection) {
  CgroupNow now{.memory_limit = 512LL << 20, .cpu_period_us = 100000};
  auto lower = PlanCgroupResize(V1(true), now, {.memory_bytes = 256LL << 20});
  EXPECT_THAT(Files(lower), ::testing::ElementsAre("memory.limit_in_bytes=268435456",
                                                   "memory.memsw.limit_in_bytes=268435456"));
  EXPECT_EQ(lower[0].dir, "/m");
  auto raise = PlanCgroupResize(V1(true), now, {.memory_bytes = 1LL << 30});
  EXPECT_THAT(Files(raise), ::testing::ElementsAre("memory.memsw.limit_in_bytes=1073741824",
                                                   "memory.limit_in_bytes=1073741824"));
  // Without swap accounting there is no memsw file to keep equal.
  EXPECT_THAT(Files(PlanCgroupResize(V1(false), now, {.memory_bytes = 1LL << 30})),
              ::testing::ElementsAre("memory.limit_in_bytes=1073741824"));
}

TEST(PlanCgroupResize, V1CpuIsAQuotaOverTheContainersPeriod) {
  CgroupNow now{.memory_limit = 1, .cpu_period_us = 50000};
  EXPECT_THAT(Files(PlanCgroupResize(V1(true), now, {.cpus = 0.5})),
              ::testing::ElementsAre("cpu.cfs_quota_us=25000"));
  // No period known: Docker's 100 ms is set first. A tiny share is raised to the kernel's 1 ms.
  now.cpu_period_us = 0;
  EXPECT_THAT(Files(PlanCgroupResize(V1(true), now, {.cpus = 0.001})),
              ::testing::ElementsAre("cpu.cfs_period_us=100000", "cpu.cfs_quota_us=1000"));
}

TEST(PlanCgroupResize, PidsAndEverythingAtOnce) {
  CgroupNow now{.memory_limit = 2LL << 30, .cpu_period_us = 100000};
  auto plan = PlanCgroupResize(V1(true), now, {.cpus = 1.5, .memory_bytes = 1LL << 30, .pids = 64});
  EXPECT_THAT(Files(plan), ::testing::ElementsAre("memory.limit_in_bytes=1073741824",
                                                  "memory.memsw.limit_in_bytes=1073741824",
                                                  "cpu.cfs_quota_us=150000", "pids.max=64"));
  EXPECT_EQ(plan.back().dir, "/p");
  EXPECT_TRUE(PlanCgroupResize(V1(true), now, {}).empty());
}

TEST(PlanCgroupResize, V2) {
  CgroupPaths v2{.version = CgroupVersion::kV2, .memory = "/u", .cpu = "/u", .pids = "/u"};
  CgroupNow now{.memory_limit = 2LL << 30, .cpu_period_us = 100000};
  EXPECT_THAT(
      Files(PlanCgroupResize(v2, now, {.cpus = 2, .memory_bytes = 3LL << 30, .pids = 9})),
      ::testing::ElementsAre("memory.max=3221225472", "cpu.max=200000 100000", "pids.max=9"));
}

TEST(ParseCgroupLimits, V1) {
  auto l = ParseCgroupLimits(CgroupVersion::kV1, {{"memory.limit_in_bytes", "268435456\n"},
                                                  {"cpu.cfs_quota_us", "50000\n"},
                                                  {"cpu.cfs_period_us", "100000\n"},
                                                  {"pids.max", "128\n"}});
  EXPECT_EQ(l.memory_bytes, 256LL << 20);
  EXPECT_DOUBLE_EQ(l.cpus, 0.5);
  EXPECT_EQ(l.pids, 128);
  EXPECT_EQ(l.source, "cgroup");
  // Unlimited: v1's page-counter maximum, a quota of -1, "max".
  auto none =
      ParseCgroupLimits(CgroupVersion::kV1, {{"memory.limit_in_bytes", "9223372036854771712\n"},
                                             {"cpu.cfs_quota_us", "-1\n"},
                                             {"cpu.cfs_period_us", "100000\n"},
                                             {"pids.max", "max\n"}});
  EXPECT_EQ(none.memory_bytes, 0);
  EXPECT_EQ(none.cpus, 0);
  EXPECT_EQ(none.pids, 0);
  // Garbage reads as no limit, never as a number.
  auto bad = ParseCgroupLimits(CgroupVersion::kV1, {{"memory.limit_in_bytes", "12ab"}});
  EXPECT_EQ(bad.memory_bytes, 0);
}

TEST(ParseCgroupLimits, V2) {
  auto l = ParseCgroupLimits(
      CgroupVersion::kV2,
      {{"memory.max", "1073741824\n"}, {"cpu.max", "150000 100000\n"}, {"pids.max", "max\n"}});
  EXPECT_EQ(l.memory_bytes, 1LL << 30);
  EXPECT_DOUBLE_EQ(l.cpus, 1.5);
  EXPECT_EQ(l.pids, 0);
  EXPECT_EQ(ParseCgroupLimits(CgroupVersion::kV2, {{"cpu.max", "max 100000\n"}}).cpus, 0);
}

// Only a full container id names a directory: nothing else can reach a path.
TEST(FindContainerCgroup, RefusesAnythingButAFullId) {
  for (std::string_view bad :
       {std::string_view("abc"), std::string_view("../../etc"), std::string_view()}) {
    auto r = FindContainerCgroup(bad, 0);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
  auto r = FindContainerCgroup(std::string(64, 'f'), 0);  // well formed, no such container here
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(r.error().message(), HasSubstr("ffffffffffff"));
}

// The processes inside as gVisor counts them: runsc and its state root are read from the sandbox
// process itself, whichever way the flag was written; only a full id reaches runsc's argv.
TEST(SentryPids, RunscAndItsRootFromTheSandboxProcess) {
  using namespace std::string_literals;
  const auto a = RunscCallOf("/usr/bin/runsc",
                             "runsc-sandbox\0--root=/var/run/docker/runtime-runc/moby\0"
                             "--platform=ptrace\0boot\0--bundle\0/b\0"s);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->runsc, "/usr/bin/runsc");
  EXPECT_EQ(a->root, "/var/run/docker/runtime-runc/moby");
  const auto b = RunscCallOf("/r", "runsc\0-root\0/state\0boot\0"s);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->root, "/state");
  EXPECT_FALSE(RunscCallOf("/r", "runsc\0boot\0--rootless\0"s).has_value());
  EXPECT_FALSE(RunscCallOf("/r", "runsc\0--root=\0boot\0"s).has_value());
  EXPECT_FALSE(RunscCallOf("", "runsc\0--root=/s\0"s).has_value());
  const std::string id(64, 'a');
  EXPECT_EQ(SentryPidsArgv(*b, id),
            (std::vector<std::string>{"/r", "--root=/state", "read-control", id, "pids", "/" + id,
                                      "pids.current"}));
  auto bad = ReadSentryPids("--root=/tmp", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  auto gone = ReadSentryPids(id, 0);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace agvisor
