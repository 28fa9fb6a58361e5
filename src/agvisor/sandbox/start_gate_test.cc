// StartGate with real threads, no Docker: the bound, FIFO order, the queue bound, the wait
// deadline, and limits from the environment.
#include "agvisor/sandbox/start_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <thread>
#include <vector>

namespace agvisor {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Waits until `gate` has `n` callers queued (they block in Enter).
void WaitQueued(const StartGate& gate, int n) {
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (gate.stats().queued < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(gate.stats().queued, n);
}

TEST(StartGateTest, AdmitsUpToTheBoundThenQueuesInArrivalOrder) {
  StartGate gate("", {.max_concurrent = 2, .max_queued = 10, .max_wait = 10s});
  auto a = gate.Enter();
  auto b = gate.Enter();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(gate.stats().running, 2);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&, i] {
      auto t = gate.Enter();
      ASSERT_TRUE(t.ok()) << t.error().ToString();
      std::lock_guard lock(mu);
      order.push_back(i);
    });
    WaitQueued(gate, i + 1);  // arrival order is i
  }
  // One slot, passed on in arrival order: each waiter holds it until its thread ends (after it
  // recorded itself). Releasing both at once would admit two waiters whose recording could race.
  a->Release();
  for (auto& t : waiters) t.join();
  b->Release();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  auto s = gate.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.admitted, 5u);
  EXPECT_EQ(s.refused, 0u);
}

TEST(StartGateTest, FullQueueIsRefusedAtOnceWithAClearMessage) {
  StartGate gate("ssh://me@box", {.max_concurrent = 1, .max_queued = 1, .max_wait = 10s});
  auto held = gate.Enter();
  ASSERT_TRUE(held.ok());
  std::thread waiter([&] { EXPECT_TRUE(gate.Enter().ok()); });
  WaitQueued(gate, 1);
  auto t0 = std::chrono::steady_clock::now();
  auto refused = gate.Enter();
  // Refused without waiting for max_wait (10 s): under 1 ms on a loaded host.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(refused.error().message(), HasSubstr("ssh://me@box is busy"));
  EXPECT_THAT(refused.error().message(), HasSubstr("queue is full"));
  EXPECT_THAT(refused.error().message(), HasSubstr("AGVISOR_START_QUEUE=1"));
  held->Release();
  waiter.join();
  EXPECT_EQ(gate.stats().refused, 1u);
}

TEST(StartGateTest, WaitDeadlineRefusesAndLetsTheNextInLine) {
  StartGate gate("", {.max_concurrent = 1, .max_queued = 5, .max_wait = 200ms});
  auto held = gate.Enter();
  ASSERT_TRUE(held.ok());
  auto t0 = std::chrono::steady_clock::now();
  auto late = gate.Enter();
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(late.error().message(), HasSubstr("AGVISOR_START_WAIT"));
  EXPECT_GE(took, 200ms);
  // The 200 ms max_wait fired (the gate is never released): 0.23 s at most loaded, 8.7x.
  EXPECT_LT(took, 2s);
  EXPECT_EQ(gate.stats().queued, 0);
  held->Release();
  EXPECT_TRUE(gate.Enter().ok());
}

TEST(StartGateTest, UnboundedAndRaisedLimitsAdmitWaiters) {
  StartGate gate("", {.max_concurrent = 0, .max_queued = 0, .max_wait = 1s});
  std::vector<StartGate::Ticket> many;
  for (int i = 0; i < 50; ++i) {
    auto t = gate.Enter();
    ASSERT_TRUE(t.ok());
    many.push_back(std::move(*t));
  }
  many.clear();
  gate.SetLimits({.max_concurrent = 1, .max_queued = 1, .max_wait = 10s});
  auto held = gate.Enter();
  ASSERT_TRUE(held.ok());
  std::atomic<bool> in{false};
  std::thread waiter([&] {
    auto t = gate.Enter();
    in = t.ok();
  });
  WaitQueued(gate, 1);
  gate.SetLimits({.max_concurrent = 2, .max_queued = 1, .max_wait = 10s});  // room now
  waiter.join();
  EXPECT_TRUE(in);
}

TEST(StartGateTest, LimitsFromTheEnvironment) {
  ::setenv("AGVISOR_MAX_STARTS", "3", 1);
  ::setenv("AGVISOR_START_QUEUE", "7", 1);
  ::setenv("AGVISOR_START_WAIT", "1.5", 1);
  auto l = StartGateLimitsFromEnv();
  ASSERT_TRUE(l.ok()) << l.error().ToString();
  EXPECT_EQ(l->max_concurrent, 3);
  EXPECT_EQ(l->max_queued, 7);
  EXPECT_EQ(l->max_wait, 1500ms);
  ::setenv("AGVISOR_MAX_STARTS", "-1", 1);
  auto bad = StartGateLimitsFromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(bad.error().message(), HasSubstr("AGVISOR_MAX_STARTS='-1'"));
  ::setenv("AGVISOR_MAX_STARTS", "2", 1);
  ::setenv("AGVISOR_START_WAIT", "0", 1);
  EXPECT_FALSE(StartGateLimitsFromEnv().ok());
  for (const char* v : {"AGVISOR_MAX_STARTS", "AGVISOR_START_QUEUE", "AGVISOR_START_WAIT"}) {
    ::unsetenv(v);
  }
  auto d = StartGateLimitsFromEnv();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->max_concurrent, kDefaultMaxStarts);
}

}  // namespace
}  // namespace agvisor
