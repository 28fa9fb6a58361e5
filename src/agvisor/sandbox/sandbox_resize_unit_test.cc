// Live resize on the fake runtime (fake_runtime.h, which keeps limits in memory and enforces
// nothing): what Sandbox::Update checks before the runtime is asked, what it hands the runtime,
// what Info shows afterwards, and how a sandbox that is not running is reported. Enforcement on
// runsc is tests/integration/sandbox_resize_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/testing/fake_runtime.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;

constexpr const char* kHost = "";

class SandboxResizeUnitTest : public ::testing::Test {
 protected:
  std::unique_ptr<Sandbox> Make() {
    SandboxSpec spec;
    spec.limits.cpus = 1;
    spec.limits.memory = "512m";
    spec.limits.pids = 100;
    auto sb = Sandbox::Create(rt_, spec);
    EXPECT_TRUE(sb.ok()) << sb.error().ToString();
    return sb.ok() ? std::move(*sb) : nullptr;
  }
  std::shared_ptr<FakeRuntime> rt_ = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
};

TEST_F(SandboxResizeUnitTest, BadUpdatesAreRefusedBeforeTheRuntimeIsAsked) {
  auto sb = Make();
  ASSERT_TRUE(sb);
  auto refused = [&](const LimitsUpdate& u, std::string_view field) {
    auto r = sb->Update(u);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << field;
    EXPECT_THAT(r.error().message(), HasSubstr(field));
  };
  refused({}, "at least one of cpus, memory and pids");
  refused({.cpus = 0}, "limits.cpus");
  refused({.cpus = -1}, "limits.cpus");
  refused({.memory = "lots"}, "limits.memory");
  refused({.memory = "0"}, "limits.memory");
  refused({.memory = "5m"}, "below the least");
  refused({.pids = 0}, "limits.pids");
  EXPECT_EQ(rt_->CallCount("Resize"), 0);
}

TEST_F(SandboxResizeUnitTest, OnlyTheGivenLimitsChangeAndInfoShowsThem) {
  auto sb = Make();
  ASSERT_TRUE(sb);
  auto before = sb->Info();
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(before->limits.has_value());
  EXPECT_EQ(before->limits->memory_bytes, 512LL << 20);
  auto live = sb->Update({.memory = "1g"});
  ASSERT_TRUE(live.ok()) << live.error().ToString();
  EXPECT_EQ(live->memory_bytes, 1LL << 30);
  EXPECT_EQ(live->cpus, 1);
  EXPECT_EQ(live->pids, 100);
  live = sb->Update({.cpus = 0.5, .pids = 64});
  ASSERT_TRUE(live.ok()) << live.error().ToString();
  auto after = sb->Info();
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(after->limits.has_value());
  EXPECT_EQ(after->limits->cpus, 0.5);
  EXPECT_EQ(after->limits->memory_bytes, 1LL << 30);
  EXPECT_EQ(after->limits->pids, 64);
  // Another handle (another client) sees the same: the runtime holds them, not the handle.
  auto other = Sandbox::Open(rt_, sb->container_name());
  ASSERT_TRUE(other.ok());
  auto seen = (*other)->Info();
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->limits->pids, 64);
  // The runtime holds the host's cap, scaled by the platform the sandbox was made on (the
  // fake's default, ptrace); every door above reads the caller's 64 back.
  auto created = rt_->CreatedSpec(sb->container_name());
  ASSERT_TRUE(created.has_value());
  EXPECT_EQ(created->platform, "ptrace");
  EXPECT_EQ(created->pids, HostPidsCap("ptrace", 100));
  auto held = rt_->ReadLimits(sb->container_name());
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->pids, HostPidsCap("ptrace", 64));
  EXPECT_GT(held->pids, 64);
}

// A stopped sandbox: kSandboxDied with why, as any call into it.
TEST_F(SandboxResizeUnitTest, ASandboxThatEndedIsReportedAsDied) {
  auto sb = Make();
  ASSERT_TRUE(sb);
  rt_->SetState(sb->container_name(), "exited", 137, /*oom_killed=*/true);
  auto r = sb->Update({.memory = "1g"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied);
  EXPECT_THAT(r.error().message(), HasSubstr("out of memory"));
  auto info = sb->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->limits.has_value());
}

// The out-of-memory message names the memory the sandbox had when it died: the resized one.
TEST_F(SandboxResizeUnitTest, TheOutOfMemoryMessageNamesTheResizedMemory) {
  auto sb = Make();
  ASSERT_TRUE(sb);
  ASSERT_TRUE(sb->Update({.memory = "256m"}).ok());
  rt_->SetState(sb->container_name(), "exited", 137, /*oom_killed=*/true);
  auto r = sb->Exec({"true"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied);
  EXPECT_THAT(r.error().message(), HasSubstr("limits.memory=256m"));
}

}  // namespace
}  // namespace agvisor
