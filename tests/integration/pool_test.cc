// Warm pools and the per-host start gate against the real dockerd + runsc (label
// `integration`): acquire hands out a working sandbox with the caller's deadlines enforced by
// its agent, refill in the background, stale and killed members replaced (never handed out),
// Close removes what was not handed out, the memory bound, and the gate's backpressure.
#include "agvisor/sandbox/pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/start_gate.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;
using testing::TestSpec;
using testing::WaitFor;
using namespace std::chrono_literals;

class PoolTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { testing::CleanupRun(); }

  static PoolOptions Options(int size) {
    PoolOptions o;
    o.spec = TestSpec();
    o.size = size;
    o.fill_parallelism = std::min(size, 2);
    return o;
  }
  static std::unique_ptr<Pool> MustPool(PoolOptions o) {
    auto p = CreatePool(std::move(o));
    EXPECT_TRUE(p.ok()) << p.error().ToString();
    return p.ok() ? std::move(*p) : nullptr;
  }
  // The containers of pool `id` on the host, by name.
  static std::set<std::string> Members(const std::string& id) {
    std::set<std::string> out;
    auto list = ListSandboxes();
    EXPECT_TRUE(list.ok());
    if (!list.ok()) return out;
    for (const auto& s : *list) {
      if (s.pool == id && s.running) out.insert(s.container_name);
    }
    return out;
  }
  static bool Exists(const std::string& container) {
    auto docker = ConnectDockerHost("");
    return (*docker)->InspectContainer(container).ok();
  }
};

TEST_F(PoolTest, AcquireHandsOutWorkingSandboxesWithTheCallersDeadlinesAndRefills) {
  auto pool = MustPool(Options(2));
  ASSERT_TRUE(pool);
  // Nothing is ready yet: without waiting, Acquire falls back to a cold create.
  auto cold = pool->Acquire({.lifetime = 120});
  ASSERT_TRUE(cold.ok()) << cold.error().ToString();
  EXPECT_EQ(pool->Stats().cold, 1u);
  EXPECT_TRUE((*cold)->Stop().ok());

  ASSERT_TRUE(pool->WaitReady(90s).ok()) << pool->WaitReady(0ms).error().ToString();
  EXPECT_EQ(Members(pool->id()).size(), 2u);

  // Served by ready members, not by cold creates (how fast: `bench/run --suite pool`).
  auto idle = pool->Acquire({.idle_ttl = 2});
  ASSERT_TRUE(idle.ok()) << idle.error().ToString();
  auto busy = pool->Acquire({.lifetime = 3});
  ASSERT_TRUE(busy.ok()) << busy.error().ToString();
  auto s = pool->Stats();
  EXPECT_EQ(s.acquired, 2u);
  EXPECT_EQ(s.cold, 1u) << "an acquire from a ready pool fell back to a cold create";
  EXPECT_NE((*idle)->container_name(), (*busy)->container_name());

  // Each works, and its agent enforces the caller's limits from now on.
  auto r = (*idle)->ExecShell("echo hi", {.timeout = 1});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "hi\n");
  EXPECT_EQ((*idle)->idle_ttl(), 2);
  auto info = (*idle)->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->running);
  // An exec longer than idle_ttl is refused (the handle knows the new idle_ttl).
  auto refused = (*idle)->Exec({"sleep", "5"}, {.timeout = 5});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kInvalidArgument);
  // The lifetime ends the sandbox even under a running command.
  auto t0 = std::chrono::steady_clock::now();
  auto killed = (*busy)->Exec({"sleep", "60"}, {.timeout = 90});
  ASSERT_FALSE(killed.ok());
  EXPECT_EQ(killed.error().code(), ErrorCode::kSandboxDied) << killed.error().ToString();
  // The 3 s lifetime cut `sleep 60`: 5.38 s at most on a loaded 2-core host (load average 17-19),
  // bound 3.7x.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  // Idle for 2 s: gone (Docker's AutoRemove after the agent exits).
  const std::string idle_name = (*idle)->container_name();
  EXPECT_TRUE(WaitFor([&] { return !Exists(idle_name); }, 20s)) << idle_name << " still exists";

  // Meanwhile the pool refilled itself to 2.
  ASSERT_TRUE(pool->WaitReady(90s).ok());
  s = pool->Stats();
  EXPECT_EQ(s.ready, 2);
  EXPECT_GE(s.started, 4u);
}

TEST_F(PoolTest, StaleMembersAreRecycled) {
  auto o = Options(1);
  o.max_age = 10s;
  auto pool = MustPool(o);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->WaitReady(90s).ok());
  auto first = Members(pool->id());
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(WaitFor([&] { return pool->Stats().recycled >= 1; }, 30s));
  ASSERT_TRUE(pool->WaitReady(90s).ok());
  EXPECT_TRUE(WaitFor([&] { return !Exists(*first.begin()); }, 20s));
  auto second = Members(pool->id());
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(*second.begin(), *first.begin());
}

TEST_F(PoolTest, AKilledMemberIsNeverHandedOut) {
  auto pool = MustPool(Options(2));
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->WaitReady(90s).ok());
  auto members = Members(pool->id());
  ASSERT_EQ(members.size(), 2u);
  const std::string victim = *members.begin();
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE((*docker)->KillContainer(victim).ok());
  // Both acquires come from the pool (no cold create): the survivor, then a replacement.
  for (int i = 0; i < 2; ++i) {
    auto sb = pool->Acquire({.lifetime = 120, .wait = 90s, .cold_create = false});
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    EXPECT_NE((*sb)->container_name(), victim);
    auto r = (*sb)->Exec({"true"});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r->exit_code, 0);
    EXPECT_TRUE((*sb)->Stop().ok());
  }
  auto s = pool->Stats();
  EXPECT_EQ(s.cold, 0u);
  EXPECT_GE(s.discarded, 1u);
}

TEST_F(PoolTest, CloseRemovesWhatWasNotHandedOut) {
  auto pool = MustPool(Options(2));
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->WaitReady(90s).ok());
  auto kept = pool->Acquire({.lifetime = 120});
  ASSERT_TRUE(kept.ok());
  const std::string id = pool->id();
  pool->Close();
  auto after = pool->Acquire();
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.error().code(), ErrorCode::kUnavailable);
  // Only the handed-out sandbox is left, and it still works.
  EXPECT_EQ(Members(id), std::set<std::string>{(*kept)->container_name()});
  EXPECT_TRUE((*kept)->Exec({"true"}).ok());
  pool.reset();
  EXPECT_TRUE((*kept)->Stop().ok());
  EXPECT_TRUE(Members(id).empty());
}

TEST_F(PoolTest, BadOptionsAndTheHostMemoryBoundAreRefusedBeforeAnythingStarts) {
  auto o = Options(64);
  o.fill_parallelism = 2;
  o.spec.limits.memory = "4g";  // 256 GiB of limits: more than this machine has
  auto big = CreatePool(o);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(big.error().message(), HasSubstr("MemTotal"));
  EXPECT_THAT(big.error().message(), HasSubstr("use size <="));

  auto named = Options(1);
  named.spec.name = "x";
  EXPECT_EQ(CreatePool(named).error().code(), ErrorCode::kInvalidArgument);
  auto with_lifetime = Options(1);
  with_lifetime.spec.lifetime = 10;
  auto e = CreatePool(with_lifetime);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.error().message(), HasSubstr("give them to Acquire"));
  auto zero = Options(1);
  zero.size = 0;
  EXPECT_EQ(CreatePool(zero).error().code(), ErrorCode::kInvalidArgument);
}

TEST_F(PoolTest, StartGateQueuesThenRefusesWhenTheQueueIsFull) {
  StartGate& gate = agvisor::testing::TestRuntime("")->start_gate();
  const StartGateLimits saved = gate.limits();
  gate.SetLimits({.max_concurrent = 1, .max_queued = 1, .max_wait = 60s});
  std::atomic<int> ok{0}, busy{0}, other{0};
  std::string busy_message;
  std::mutex mu;
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<Sandbox>> made;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      auto sb = CreateSandbox(TestSpec());
      std::lock_guard lock(mu);
      if (sb.ok()) {
        ++ok;
        made.push_back(std::move(*sb));
      } else if (sb.error().code() == ErrorCode::kResourceExhausted) {
        ++busy;
        busy_message = sb.error().message();
      } else {
        ++other;
        ADD_FAILURE() << sb.error().ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  gate.SetLimits(saved);
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(busy, 1);
  EXPECT_THAT(busy_message, HasSubstr("is busy starting sandboxes"));
  EXPECT_THAT(busy_message, HasSubstr("AGVISOR_START_QUEUE=1"));
  for (auto& sb : made) EXPECT_TRUE(sb->Stop().ok());
}

}  // namespace
}  // namespace agvisor
