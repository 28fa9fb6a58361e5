// Sandbox's paths of an existing sandbox (Open, List, Info, Exec's relay and death diagnosis,
// Stop, Delete, Remove) on the fake runtime (fake_runtime.h): the real agent, no Docker.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/testing/fake_runtime.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;

constexpr const char* kHost = "fake://lifecycle";

class SandboxLifecycleUnitTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeRuntime> rt_ = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
};

TEST_F(SandboxLifecycleUnitTest, OpenRefusesAContainerAgvisorDidNotMake) {
  ASSERT_TRUE(rt_->AddInstance("someone-else", {}).ok());
  auto sb = Sandbox::Open(rt_, "someone-else");
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(sb.error().message(),
              HasSubstr("no sandbox named someone-else (`agvisor ls` lists them)"));
  auto missing = Sandbox::Open(rt_, "agvisor-nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
}

TEST_F(SandboxLifecycleUnitTest, OpenReadsTheLabelsAndTheFirstExecOpensOneRelay) {
  ASSERT_TRUE(rt_->AddInstance("agvisor-p", {.labels = {{"agvisor", "1"},
                                                        {"agvisor.name", "p"},
                                                        {"agvisor.idle_ttl", "600"},
                                                        {"agvisor.memory", "512m"}}})
                  .ok());
  auto sb = Sandbox::Open(rt_, "agvisor-p");
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  EXPECT_EQ((*sb)->name(), "p");
  EXPECT_EQ((*sb)->idle_ttl(), 600);
  EXPECT_EQ(rt_->CallCount("OpenExecStream"), 0);  // lazily
  for (int n = 0; n < 2; ++n) {
    auto r = (*sb)->Exec({"sh", "-c", "echo hi"});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r->out, "hi\n");
  }
  EXPECT_EQ(rt_->CallCount("OpenExecStream"), 1);
  // A process's timeout is checked by the core before anything starts (every door passes
  // here): below 0 is refused (it was taken as none), and idle_ttl (from the label) bounds it.
  auto negative = (*sb)->StartBackground({"sleep", "100"}, {.timeout = -1});
  ASSERT_FALSE(negative.ok()) << "started pid " << *negative;
  EXPECT_EQ(negative.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(negative.error().message(), HasSubstr("must be > 0 seconds (or 0 for none), got -1"));
  auto empty = (*sb)->StartBackground({}, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.error().message(), HasSubstr("the command is empty: name a program"));
  auto past_idle = (*sb)->StartProcess({"sleep", "100"}, {.timeout = 700});
  ASSERT_FALSE(past_idle.ok());
  EXPECT_THAT(past_idle.error().message(), HasSubstr("must stay below idle_ttl=600s"));
  auto info = (*sb)->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->running);
  EXPECT_EQ(info->state, "running");
  EXPECT_EQ(info->end_reason, EndReason::kNone);
}

// Collected output past max_output_bytes is read and counted, not kept: the first bytes of each
// stream stay, the rest is dropped and flagged. (The callbacks once held a reference to a lambda
// that had gone out of scope; kept sizes came out as a few bytes.)
TEST_F(SandboxLifecycleUnitTest, CollectedOutputPastTheCapIsCountedNotKept) {
  ASSERT_TRUE(rt_->AddInstance("agvisor-cap", {.labels = {{"agvisor", "1"}}}).ok());
  auto sb = Sandbox::Open(rt_, "agvisor-cap");
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  ExecOptions o;
  o.max_output_bytes = 100000;
  for (int n = 0; n < 3; ++n) {
    auto r = (*sb)->Exec({"sh", "-c", "seq 1 200000; seq 1 30000 >&2"}, o);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r->exit_code, 0);
    EXPECT_EQ(r->out.size(), 100000u);
    EXPECT_EQ(r->out.substr(0, 8), "1\n2\n3\n4\n");
    EXPECT_EQ(r->stdout_dropped, 1288895u - 100000u);  // seq 1 200000 | wc -c = 1288895
    EXPECT_EQ(r->err.size(), 100000u);
    EXPECT_EQ(r->stderr_dropped, 168894u - 100000u);  // seq 1 30000 | wc -c = 168894
    EXPECT_TRUE(r->truncated);
  }
  // Past 1 MiB the collector reserves room for bulk output at once (up to the cap): the same
  // bytes, the same cap.
  std::string lines;
  for (int i = 1; i <= 600000; ++i) lines += std::to_string(i) + "\n";
  o.max_output_bytes = 3000000;
  auto capped = (*sb)->Exec({"seq", "1", "600000"}, o);
  ASSERT_TRUE(capped.ok()) << capped.error().ToString();
  EXPECT_TRUE(capped->out == lines.substr(0, 3000000)) << "the kept bytes differ";
  EXPECT_EQ(capped->stdout_dropped, lines.size() - 3000000);
  EXPECT_TRUE(capped->truncated);
  o.max_output_bytes = 0;  // keep everything
  auto all = (*sb)->Exec({"sh", "-c", "seq 1 200000"}, o);
  ASSERT_TRUE(all.ok()) << all.error().ToString();
  EXPECT_EQ(all->out.size(), 1288895u);
  EXPECT_EQ(all->stdout_dropped, 0u);
  EXPECT_FALSE(all->truncated);
  auto whole = (*sb)->Exec({"seq", "1", "600000"}, o);
  ASSERT_TRUE(whole.ok()) << whole.error().ToString();
  EXPECT_TRUE(whole->out == lines) << "the output came back different";
  EXPECT_FALSE(whole->truncated);
}

TEST_F(SandboxLifecycleUnitTest, ADeathByTheMemoryLimitIsReportedAsSuch) {
  ASSERT_TRUE(
      rt_->AddInstance("agvisor-m", {.labels = {{"agvisor", "1"}, {"agvisor.memory", "512m"}}})
          .ok());
  auto sb = Sandbox::Open(rt_, "agvisor-m");
  ASSERT_TRUE(sb.ok());
  ASSERT_TRUE((*sb)->Exec({"true"}).ok());
  rt_->SetEndedByMemoryLimit("agvisor-m", true);
  rt_->KillAgent("agvisor-m", SIGKILL);
  auto r = (*sb)->Exec({"true"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied);
  EXPECT_THAT(r.error().message(),
              HasSubstr("sandbox agvisor-m is not running: it ran out of memory "
                        "(limits.memory=512m)"));
  auto info = (*sb)->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->end_reason, EndReason::kOutOfMemory);
  EXPECT_EQ(info->exit_code, 137);
}

// A dead sandbox is worded once (SandboxDiedError) for Sandbox's Diagnose and the agvisord
// handle, which knows only the daemon's view: a name, an end reason, the create-time memory.
TEST(SandboxDiedErrorTest, OneWordingForEveryDoor) {
  SandboxInfo oom{
      .container_name = "agvisor-m", .name = "m", .end_reason = EndReason::kOutOfMemory};
  Error e = SandboxDiedError(oom, "512m");
  EXPECT_EQ(e.code(), ErrorCode::kSandboxDied);
  EXPECT_EQ(e.message(),
            "sandbox agvisor-m is not running: it ran out of memory (limits.memory=512m); under "
            "gVisor that ends the whole sandbox; create it again with the same name to get a "
            "fresh container on the same /workspace");
  SandboxInfo gone{.container_name = "agvisor-x", .end_reason = EndReason::kGone};
  EXPECT_EQ(SandboxDiedError(gone, "").message(),
            "sandbox agvisor-x is not running: its container no longer exists (it expired, was "
            "stopped, or hit a limit)");
  SandboxInfo killed{
      .container_name = "agvisor-k", .end_reason = EndReason::kKilled, .exit_code = 137};
  EXPECT_THAT(SandboxDiedError(killed, "").message(), HasSubstr("killed (exit code 137;"));
  oom.name.reset();
  EXPECT_THAT(SandboxDiedError(oom, "").message(),
              HasSubstr("ran out of memory; under gVisor that ends the whole sandbox"));
}

TEST_F(SandboxLifecycleUnitTest, EndReasonsFromTheAgentsExitCodes) {
  ASSERT_TRUE(rt_->AddInstance("agvisor-e", {.labels = {{"agvisor", "1"}}}).ok());
  auto sb = Sandbox::Open(rt_, "agvisor-e");
  ASSERT_TRUE(sb.ok());
  const std::pair<int, EndReason> cases[] = {{137, EndReason::kKilled}, {1, EndReason::kKilled}};
  for (const auto& [code, reason] : cases) {
    rt_->SetState("agvisor-e", "exited", code, false);
    auto info = (*sb)->Info();
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->end_reason, reason) << code;
  }
  rt_->SetState("agvisor-e", "exited", 137, /*oom_killed=*/true);
  EXPECT_EQ((*sb)->Info()->end_reason, EndReason::kOutOfMemory);
  rt_->SetState("agvisor-e", "created", 0, false);
  EXPECT_EQ((*sb)->Info()->end_reason, EndReason::kNone);
  ASSERT_TRUE((*sb)->Stop().ok());
  auto gone = (*sb)->Info();
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->state, "gone");
  EXPECT_EQ(gone->end_reason, EndReason::kGone);
}

TEST_F(SandboxLifecycleUnitTest, StopTwiceIsFineAndKeepsANamedSandboxsVolume) {
  ASSERT_TRUE(
      rt_->AddInstance("agvisor-s", {.labels = {{"agvisor", "1"}, {"agvisor.name", "s"}}}).ok());
  rt_->AddVolume("agvisor-s");
  auto sb = Sandbox::Open(rt_, "agvisor-s");
  ASSERT_TRUE(sb.ok());
  ASSERT_TRUE((*sb)->Stop().ok());
  ASSERT_TRUE((*sb)->Stop().ok());
  EXPECT_FALSE(rt_->HasInstance("agvisor-s"));
  EXPECT_TRUE(rt_->HasVolume("agvisor-s"));
  ASSERT_TRUE((*sb)->Delete().ok());
  EXPECT_FALSE(rt_->HasVolume("agvisor-s"));
}

TEST_F(SandboxLifecycleUnitTest, DeleteOfAnAnonymousSandboxNeverTouchesVolumes) {
  ASSERT_TRUE(rt_->AddInstance("agvisor-a", {.labels = {{"agvisor", "1"}}}).ok());
  auto sb = Sandbox::Open(rt_, "agvisor-a");
  ASSERT_TRUE(sb.ok());
  ASSERT_TRUE((*sb)->Delete().ok());
  EXPECT_FALSE(rt_->HasInstance("agvisor-a"));
  EXPECT_EQ(rt_->CallCount("RemoveVolume"), 0);
}

TEST_F(SandboxLifecycleUnitTest, RemoveTakesWhatThereIsAndSaysWhenThereIsNothing) {
  rt_->AddVolume("agvisor-v");
  rt_->AddNetwork("agvisor-v");
  ASSERT_TRUE(Sandbox::Remove(rt_, "agvisor-v", /*erase_data=*/true).ok());
  EXPECT_EQ(rt_->Snapshot(), std::set<std::string>{});
  auto none = Sandbox::Remove(rt_, "agvisor-v", /*erase_data=*/true);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(none.error().message(), HasSubstr("no sandbox named v (`agvisor ls` lists them)"));
  EXPECT_EQ(rt_->CallCount("RemoveEgressNetwork"), 2);  // asked either way
}

TEST_F(SandboxLifecycleUnitTest, ListSkipsTheRuntimesHelpersAndReadsLabels) {
  ASSERT_TRUE(rt_->AddInstance("agvisor-l", {.labels = {{"agvisor", "1"},
                                                        {"agvisor.name", "l"},
                                                        {"agvisor.pool", "p1"},
                                                        {"agvisor.image", "img:1"}}})
                  .ok());
  ASSERT_TRUE(rt_->AddInstance("filler", {.labels = {{"agvisor", "1"}}, .helper = true}).ok());
  ASSERT_TRUE(rt_->AddInstance("unrelated", {}).ok());
  auto list = Sandbox::List(rt_);
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  const SandboxInfo& i = list->front();
  EXPECT_EQ(i.container_name, "agvisor-l");
  EXPECT_EQ(i.name, "l");
  EXPECT_EQ(i.pool, "p1");
  EXPECT_EQ(i.image, "img:1");
  EXPECT_TRUE(i.running);
  EXPECT_EQ(i.host, kHost);
}

// Issue 33: a named sandbox whose container was stopped keeps its volume and is listed as
// "stopped"; one that still runs is listed once, and volumes of nothing named are not listed.
TEST_F(SandboxLifecycleUnitTest, ListShowsStoppedNamedSandboxesByTheirVolume) {
  const Labels named = {{"agvisor", "1"}, {"agvisor.name", "kept"}, {"agvisor.platform", "ptrace"}};
  rt_->AddVolume("agvisor-kept", named);
  rt_->AddVolume("agvisor-up", {{"agvisor", "1"}, {"agvisor.name", "up"}});
  rt_->AddVolume("agvisor-snapshot-scratch", {{"agvisor", "1"}});
  rt_->AddVolume("someone-elses", {{"agvisor.name", "x"}});
  ASSERT_TRUE(
      rt_->AddInstance("agvisor-up", {.labels = {{"agvisor", "1"}, {"agvisor.name", "up"}}}).ok());
  auto list = Sandbox::List(rt_);
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ(list->at(0).container_name, "agvisor-up");
  EXPECT_TRUE(list->at(0).running);
  const SandboxInfo& kept = list->at(1);
  EXPECT_EQ(kept.container_name, "agvisor-kept");
  EXPECT_EQ(kept.name, "kept");
  EXPECT_EQ(kept.state, "stopped");
  EXPECT_FALSE(kept.running);
  EXPECT_EQ(kept.end_reason, EndReason::kStopped);
  EXPECT_EQ(kept.platform, "ptrace");
}

}  // namespace
}  // namespace agvisor
