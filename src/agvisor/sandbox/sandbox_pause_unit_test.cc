// Pause and resume on the fake runtime (fake_runtime.h): its pause is a real SIGSTOP of the real
// agent, whose monotonic clock runs on meanwhile, as under runsc. Auto-resume on a call (paused
// here, or by another client), the refusal when a handle asks not to resume, and both clocks
// across a pause: idle time does not count it, lifetime does and the host ends the sandbox.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/testing/fake_runtime.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;

constexpr const char* kHost = "";

class SandboxPauseUnitTest : public ::testing::Test {
 protected:
  std::unique_ptr<Sandbox> Make(std::optional<std::int64_t> lifetime,
                                std::optional<std::int64_t> idle_ttl) {
    SandboxSpec spec;
    spec.lifetime = lifetime;
    spec.idle_ttl = idle_ttl;
    auto sb = Sandbox::Create(rt_, spec);
    EXPECT_TRUE(sb.ok()) << sb.error().ToString();
    return sb.ok() ? std::move(*sb) : nullptr;
  }
  std::string State(const std::string& container) {
    auto list = Sandbox::List(rt_);
    if (!list.ok()) return list.error().ToString();
    for (const auto& i : *list) {
      if (i.container_name == container) return i.state;
    }
    return "absent";
  }

  std::shared_ptr<FakeRuntime> rt_ = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
};

TEST_F(SandboxPauseUnitTest, PauseShowsInInfoAndListAndACallResumesItFirst) {
  auto sb = Make(std::nullopt, std::nullopt);
  ASSERT_TRUE(sb);
  ASSERT_TRUE(sb->Exec({"true"}).ok());
  ASSERT_TRUE(sb->Pause().ok());
  ASSERT_TRUE(sb->Pause().ok());  // idempotent
  auto info = sb->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, "paused");
  EXPECT_TRUE(info->running);  // alive: its processes are kept
  EXPECT_EQ(State(sb->container_name()), "paused");
  auto r = sb->Exec({"sh", "-c", "echo awake"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "awake\n");
  EXPECT_EQ(rt_->CallCount("Unpause"), 1);
  EXPECT_EQ(State(sb->container_name()), "running");
  ASSERT_TRUE(sb->Resume().ok());  // a running one is left as it is
  EXPECT_EQ(rt_->CallCount("Unpause"), 1);
}

TEST_F(SandboxPauseUnitTest, EveryKindOfCallOnAnotherHandleOfThisProcessResumesIt) {
  auto sb = Make(std::nullopt, std::nullopt);
  ASSERT_TRUE(sb);
  ASSERT_TRUE(sb->WriteFile("/tmp/agvisor-pause-unit", "x").ok());
  auto other = Sandbox::Open(rt_, sb->container_name());
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Exec({"true"}).ok());  // its channel is open before the pause
  ASSERT_TRUE(sb->Pause().ok());
  auto st = (*other)->Stat("/tmp/agvisor-pause-unit");  // a file call, on the open channel
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  EXPECT_EQ(st->size, 1u);
  ASSERT_TRUE(sb->Pause().ok());
  auto procs = (*other)->ListProcesses();
  ASSERT_TRUE(procs.ok()) << procs.error().ToString();
  ASSERT_TRUE(sb->Pause().ok());
  auto port = (*other)->OpenPort(1);  // nothing listens: the agent's answer, so it was awake
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.error().code(), ErrorCode::kConflict);
  EXPECT_EQ(rt_->CallCount("Unpause"), 3);
  (void)std::remove("/tmp/agvisor-pause-unit");
}

// Where a resume's time goes (docs/lifecycle.md): a sandbox this process paused before its
// lifetime's end is resumed with the runtime's unpause alone, no inspect first, both on a call
// and by Resume(); one that another client resumed meanwhile is found running by the checks.
TEST_F(SandboxPauseUnitTest, AResumeOfASandboxPausedHereAsksTheRuntimeOnlyToUnpause) {
  auto sb = Make(/*lifetime=*/600, std::nullopt);
  ASSERT_TRUE(sb);
  ASSERT_TRUE(sb->Exec({"true"}).ok());
  ASSERT_TRUE(sb->Pause().ok());
  int inspects = rt_->CallCount("Inspect");
  auto r = sb->Exec({"sh", "-c", "echo awake"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "awake\n");
  EXPECT_EQ(rt_->CallCount("Inspect"), inspects);
  EXPECT_EQ(rt_->CallCount("Unpause"), 1);
  ASSERT_TRUE(sb->Pause().ok());
  inspects = rt_->CallCount("Inspect");
  ASSERT_TRUE(sb->Resume().ok());
  EXPECT_EQ(rt_->CallCount("Inspect"), inspects);
  EXPECT_EQ(State(sb->container_name()), "running");
  ASSERT_TRUE(sb->Pause().ok());
  ASSERT_TRUE(rt_->Unpause(sb->container_name()).ok());  // another client resumed it
  ASSERT_TRUE(sb->Resume().ok());
  auto again = sb->Exec({"sh", "-c", "echo still"});
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_EQ(again->out, "still\n");
}

TEST_F(SandboxPauseUnitTest, PausedByAnotherClientTheNextSessionResumesIt) {
  auto sb = Make(std::nullopt, std::nullopt);
  ASSERT_TRUE(sb);
  // Another process paused it (this one's registry does not know): the relay's exec is refused
  // by the runtime, as Docker refuses an exec in a paused container.
  ASSERT_TRUE(rt_->Pause(sb->container_name()).ok());
  auto fresh = Sandbox::Open(rt_, sb->container_name());
  ASSERT_TRUE(fresh.ok());
  auto r = (*fresh)->Exec({"sh", "-c", "echo awake"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "awake\n");
  EXPECT_EQ(State(sb->container_name()), "running");
}

TEST_F(SandboxPauseUnitTest, AHandleAskedNotToResumeRefusesNamingTheStateAndTheWayOut) {
  auto sb = Make(std::nullopt, std::nullopt);
  ASSERT_TRUE(sb);
  ASSERT_TRUE(sb->Pause().ok());
  sb->set_auto_resume(false);
  auto r = sb->Exec({"true"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(r.error().message(), HasSubstr("is paused"));
  EXPECT_THAT(r.error().message(), HasSubstr("agvisor resume"));
  EXPECT_EQ(State(sb->container_name()), "paused");
  // Paused by another client: a fresh handle that may not resume refuses too.
  auto fresh = Sandbox::Open(rt_, sb->container_name());
  ASSERT_TRUE(fresh.ok());
  (*fresh)->set_auto_resume(false);
  EXPECT_EQ((*fresh)->RefuseIfPaused().error().code(), ErrorCode::kConflict);
  ASSERT_TRUE(sb->Resume().ok());
  EXPECT_TRUE((*fresh)->RefuseIfPaused().ok());
  EXPECT_TRUE(sb->Exec({"true"}).ok());
}

TEST_F(SandboxPauseUnitTest, APauseLongerThanIdleTtlIsNotIdleTime) {
  auto sb = Make(std::nullopt, /*idle_ttl=*/2);
  ASSERT_TRUE(sb);
  ASSERT_TRUE(sb->Exec({"true"}, {.timeout = 1}).ok());
  ASSERT_TRUE(sb->Pause().ok());
  // Frozen for twice idle_ttl: thawed, the agent must not count that as idle time.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ASSERT_TRUE(sb->Resume().ok());
  // Thawed with nothing arriving at once (a call's frame would be activity and hide the bug).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto r = sb->Exec({"sh", "-c", "echo still-here"}, {.timeout = 1});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "still-here\n");
  // The idle clock still runs after the thaw: idle_ttl ends it (bound: 3x the 2 s).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  while (State(sb->container_name()) == "running" && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto info = sb->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->running);
}

// idle_action pause at scale (issue 36): the process that made the sandboxes (agvisord) asks each
// over the channel its handle holds, so one list pass asks all of them with one list call and no
// exec (a relay each was a runsc exec, at most 16 a pass), and freezes every idle one.
TEST_F(SandboxPauseUnitTest, OneListPassAsksEveryIdleSandboxOverItsHeldChannelWithoutAnExec) {
  constexpr int kSandboxes = 40;
  std::vector<std::unique_ptr<Sandbox>> held;
  for (int i = 0; i < kSandboxes; ++i) {
    SandboxSpec spec;
    spec.idle_ttl = 1;
    spec.idle_action = "pause";
    auto sb = Sandbox::Create(rt_, spec);
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    held.push_back(std::move(*sb));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past every idle_ttl
  const int execs_before = rt_->CallCount("OpenExecStream");
  const int lists_before = rt_->CallCount("List");
  auto list = Sandbox::List(rt_);
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  EXPECT_EQ(rt_->CallCount("List") - lists_before, 1);
  EXPECT_EQ(rt_->CallCount("OpenExecStream") - execs_before, 0);
  EXPECT_EQ(rt_->CallCount("Pause"), kSandboxes);
  int paused = 0;
  for (const auto& i : *list) paused += i.state == "paused";
  EXPECT_EQ(paused, kSandboxes);
  // A frozen one thaws on its next call, over the same handle.
  auto r = held.front()->Exec({"true"}, {.timeout = 5});
  EXPECT_TRUE(r.ok()) << r.error().ToString();
}

TEST_F(SandboxPauseUnitTest, LifetimeRunsOnWhilePausedAndTheHostEndsItOnListOrTheNextCall) {
  auto listed = Make(/*lifetime=*/2, std::nullopt);
  auto called = Make(/*lifetime=*/2, std::nullopt);
  ASSERT_TRUE(listed && called);
  ASSERT_TRUE(listed->Pause().ok());
  ASSERT_TRUE(called->Pause().ok());
  // Past lifetime (+1 s the host gives the agent's later start), both still frozen.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  EXPECT_TRUE(rt_->HasInstance(listed->container_name()));
  auto list = Sandbox::List(rt_);
  ASSERT_TRUE(list.ok());
  bool seen = false;
  for (const auto& i : *list) {
    if (i.container_name != listed->container_name()) continue;
    seen = true;
    EXPECT_EQ(i.state, "removed");
    EXPECT_FALSE(i.running);
    EXPECT_EQ(i.end_reason, EndReason::kLifetime);
  }
  EXPECT_TRUE(seen);
  EXPECT_FALSE(rt_->HasInstance(listed->container_name()));
  EXPECT_FALSE(rt_->HasInstance(called->container_name()));  // that list ended it too
  auto r = called->Exec({"true"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied);
}

TEST_F(SandboxPauseUnitTest, ResumeOfASandboxPastItsLifetimeEndsItInsteadOfThawingIt) {
  auto sb = Make(/*lifetime=*/2, std::nullopt);
  ASSERT_TRUE(sb);
  ASSERT_TRUE(sb->Pause().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  auto r = sb->Exec({"true"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied);
  EXPECT_THAT(r.error().message(), HasSubstr("lifetime reached while paused"));
  EXPECT_EQ(rt_->CallCount("Unpause"), 0);  // never thawed
  EXPECT_FALSE(rt_->HasInstance(sb->container_name()));
}

TEST_F(SandboxPauseUnitTest, CreatingANamedSandboxPausedPastItsLifetimeMakesAFreshOne) {
  SandboxSpec spec;
  spec.name = "pause-unit-named";
  spec.lifetime = 2;
  auto first = Sandbox::Create(rt_, spec);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  ASSERT_TRUE((*first)->Pause().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  auto again = Sandbox::Create(rt_, spec);
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_FALSE((*again)->resumed());  // not the frozen one, which its lifetime had ended
  EXPECT_EQ(rt_->CallCount("Unpause"), 0);
  auto r = (*again)->Exec({"true"});
  EXPECT_TRUE(r.ok()) << r.error().ToString();
  ASSERT_TRUE((*again)->Delete().ok());
}

TEST_F(SandboxPauseUnitTest, PauseOfAnEndedSandboxSaysWhy) {
  auto sb = Make(std::nullopt, std::nullopt);
  ASSERT_TRUE(sb);
  ASSERT_TRUE(sb->Stop().ok());
  auto r = sb->Pause();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied);
}

}  // namespace
}  // namespace agvisor
