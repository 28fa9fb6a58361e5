#include "agvisor/agent/activity.h"

#include <gtest/gtest.h>

namespace agvisor::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A fake clock: time points built from an arbitrary epoch.
const Clock::time_point kT0 = Clock::time_point(seconds(1000));
Clock::time_point At(milliseconds d) { return kT0 + d; }

TEST(ActivityTrackerTest, NoLimitsNeverStopsAndNeverWakes) {
  ActivityTracker t({}, kT0);
  auto d = t.Decide(At(seconds(1000000)));
  EXPECT_EQ(d.stop, StopReason::kNone);
  EXPECT_FALSE(d.next_check);
}

TEST(ActivityTrackerTest, LifetimeStopsWhateverTheActivity) {
  ActivityTracker t({.lifetime = seconds(30)}, kT0);
  t.HoldStarted(At(seconds(1)));
  auto d = t.Decide(At(seconds(29)));
  EXPECT_EQ(d.stop, StopReason::kNone);
  EXPECT_EQ(d.next_check, At(seconds(30)));
  EXPECT_EQ(t.Decide(At(seconds(30))).stop, StopReason::kLifetime);
  EXPECT_EQ(t.Decide(At(seconds(31))).stop, StopReason::kLifetime);
}

TEST(ActivityTrackerTest, IdleCountsFromStartWhenNobodyConnects) {
  ActivityTracker t({.idle_ttl = seconds(10)}, kT0);
  auto d = t.Decide(At(milliseconds(9999)));
  EXPECT_EQ(d.stop, StopReason::kNone);
  EXPECT_EQ(d.next_check, At(seconds(10)));
  EXPECT_EQ(t.Decide(At(seconds(10))).stop, StopReason::kIdle);
}

TEST(ActivityTrackerTest, SetPolicyRestartsBothClocksAtThatMoment) {
  // A pool member: a safety lifetime of 60 s, handed out at 50 s with lifetime 30 / idle 10.
  ActivityTracker t({.lifetime = seconds(60)}, kT0);
  t.SetPolicy({.lifetime = seconds(30), .idle_ttl = seconds(10)}, At(seconds(50)));
  EXPECT_EQ(t.policy().lifetime, seconds(30));
  auto d = t.Decide(At(seconds(59)));
  EXPECT_EQ(d.stop, StopReason::kNone);  // idle counts from 50 s, not from start
  EXPECT_EQ(d.next_check, At(seconds(60)));
  EXPECT_EQ(t.Decide(At(seconds(60))).stop, StopReason::kIdle);
  t.HoldStarted(At(seconds(55)));
  EXPECT_EQ(t.Decide(At(seconds(79))).stop, StopReason::kNone);  // old lifetime (60 s) is gone
  EXPECT_EQ(t.Decide(At(seconds(80))).stop, StopReason::kLifetime);
  // Clearing both: never stops, holds in flight still counted.
  t.SetPolicy({}, At(seconds(81)));
  EXPECT_EQ(t.holders(), 1);
  d = t.Decide(At(seconds(100000)));
  EXPECT_EQ(d.stop, StopReason::kNone);
  EXPECT_FALSE(d.next_check);
}

TEST(ActivityTrackerTest, HoldIsActivityForItsWholeDuration) {
  ActivityTracker t({.idle_ttl = seconds(10)}, kT0);
  t.HoldStarted(At(seconds(5)));
  // Connected far past the ttl: still not idle, and no timer needed.
  auto d = t.Decide(At(seconds(100)));
  EXPECT_EQ(d.stop, StopReason::kNone);
  EXPECT_FALSE(d.next_check);
  EXPECT_EQ(t.IdleFor(At(seconds(100))), milliseconds(0));
  t.HoldEnded(At(seconds(100)));
  // Idle time starts at the disconnect.
  d = t.Decide(At(seconds(109)));
  EXPECT_EQ(d.stop, StopReason::kNone);
  EXPECT_EQ(d.next_check, At(seconds(110)));
  EXPECT_EQ(t.IdleFor(At(seconds(109))), seconds(9));
  EXPECT_EQ(t.Decide(At(seconds(110))).stop, StopReason::kIdle);
}

TEST(ActivityTrackerTest, IdleStartsWhenTheLastOfSeveralHoldsEnds) {
  ActivityTracker t({.idle_ttl = seconds(10)}, kT0);
  t.HoldStarted(At(seconds(1)));
  t.HoldStarted(At(seconds(2)));
  t.HoldEnded(At(seconds(3)));
  EXPECT_EQ(t.holders(), 1);
  EXPECT_EQ(t.Decide(At(seconds(50))).stop, StopReason::kNone);
  t.HoldEnded(At(seconds(50)));
  EXPECT_EQ(t.Decide(At(seconds(59))).stop, StopReason::kNone);
  EXPECT_EQ(t.Decide(At(seconds(60))).stop, StopReason::kIdle);
}

// A keep-awake background process (ChannelProcess::KeepAwake) is one hold from its start to its
// exit, whatever happens meanwhile: sessions come and go, SET_DEADLINES replaces the policy, the
// sandbox is frozen and thawed. Idle time starts at its exit.
TEST(ActivityTrackerTest, AKeepAwakeProcessHoldsAcrossDeadlinesAndAFreezeUntilItExits) {
  ActivityTracker t({.idle_ttl = seconds(10)}, kT0);
  t.HoldStarted(At(seconds(1)));  // the process starts (its EXEC stream is a second hold)
  t.HoldStarted(At(seconds(1)));
  t.HoldEnded(At(seconds(2)));  // the stream detaches; the process runs on
  t.SetPolicy({.idle_ttl = seconds(5)}, At(seconds(3)));
  t.Woke(At(seconds(4)), At(seconds(40)));  // frozen 36 s
  EXPECT_EQ(t.holders(), 1);
  auto d = t.Decide(At(seconds(100)));
  EXPECT_EQ(d.stop, StopReason::kNone);
  EXPECT_FALSE(d.next_check);
  EXPECT_EQ(t.IdleFor(At(seconds(100))), milliseconds(0));
  t.HoldEnded(At(seconds(100)));  // it exits
  EXPECT_EQ(t.IdleFor(At(seconds(102))), seconds(2));
  EXPECT_EQ(t.Decide(At(seconds(104))).stop, StopReason::kNone);
  EXPECT_EQ(t.Decide(At(seconds(105))).stop, StopReason::kIdle);
}

// The RAII hold a keep-awake process keeps: moved into the process, released once.
TEST(ActivityTrackerTest, AnActivityHoldIsReleasedOnceWhetherResetMovedOrDestroyed) {
  ActivityTracker t({.idle_ttl = seconds(10)}, Clock::now());
  {
    ActivityHold a(&t);
    EXPECT_EQ(t.holders(), 1);
    ActivityHold b;
    b = std::move(a);
    EXPECT_FALSE(a.held());
    EXPECT_EQ(t.holders(), 1);
    b.Reset();
    EXPECT_EQ(t.holders(), 0);
    b.Reset();
    ActivityHold c(&t);
    EXPECT_EQ(t.holders(), 1);
  }
  EXPECT_EQ(t.holders(), 0);
}

TEST(ActivityTrackerTest, ExtraDisconnectDoesNotGoNegative) {
  ActivityTracker t({.idle_ttl = seconds(10)}, kT0);
  t.HoldEnded(At(seconds(5)));  // ignored: nobody was connected
  EXPECT_EQ(t.holders(), 0);
  EXPECT_EQ(t.Decide(At(seconds(10))).stop, StopReason::kIdle);  // still from start
}

TEST(ActivityTrackerTest, EarliestLimitWinsAndLifetimeBreaksTies) {
  ActivityTracker t({.lifetime = seconds(20), .idle_ttl = seconds(10)}, kT0);
  EXPECT_EQ(t.Decide(At(seconds(1))).next_check, At(seconds(10)));
  t.HoldStarted(At(seconds(1)));
  EXPECT_EQ(t.Decide(At(seconds(2))).next_check, At(seconds(20)));
  t.HoldEnded(At(seconds(10)));
  // Both due at 20 s: lifetime.
  EXPECT_EQ(t.Decide(At(seconds(20))).stop, StopReason::kLifetime);
}

TEST(ActivityTrackerTest, ReasonNames) {
  EXPECT_EQ(StopReasonName(StopReason::kLifetime), "lifetime");
  EXPECT_EQ(StopReasonName(StopReason::kIdle), "idle");
  EXPECT_EQ(StopReasonName(StopReason::kSignal), "signal");
}

TEST(ActivityTrackerTest, AFreezeIsNotIdleTimeButIsLifetime) {
  ActivityTracker t({.lifetime = seconds(100), .idle_ttl = seconds(10)}, kT0);
  // Idle for 5 s, then frozen for 60 s: the loop planned to wake at 6 s and woke at 66 s.
  t.Woke(At(seconds(6)), At(seconds(66)));
  EXPECT_EQ(t.IdleFor(At(seconds(66))), seconds(6));
  EXPECT_EQ(t.Decide(At(seconds(66))).stop, StopReason::kNone);
  EXPECT_EQ(t.Decide(At(seconds(70))).stop, StopReason::kIdle);
  // Lifetime counted the freeze: it ends at 100 s from start, as planned.
  ActivityTracker u({.lifetime = seconds(30), .idle_ttl = seconds(10)}, kT0);
  u.Woke(At(seconds(1)), At(seconds(40)));
  EXPECT_EQ(u.Decide(At(seconds(40))).stop, StopReason::kLifetime);
}

TEST(ActivityTrackerTest, WithThawRestartsIdleAThawStartsANewIdlePeriod) {
  // idle_action pause: no idle_ttl of its own; idle 30 s, frozen by the host at 30 s, thawed
  // at 90 s: idle from the thaw, not 30 s + (time since the thaw).
  ActivityTracker t({}, kT0);
  t.set_thaw_restarts_idle(true);
  EXPECT_EQ(t.IdleFor(At(seconds(30))), seconds(30));
  t.Woke(At(seconds(31)), At(seconds(90)));
  EXPECT_EQ(t.IdleFor(At(seconds(95))), seconds(5));
  EXPECT_EQ(t.Decide(At(seconds(1000))).stop, StopReason::kNone);  // never stops on idle
  // A wake on time is no thaw.
  t.Woke(At(seconds(96)), At(seconds(96)));
  EXPECT_EQ(t.IdleFor(At(seconds(100))), seconds(10));
}

TEST(ActivityTrackerTest, AWithdrawnHoldDoesNotRestartTheIdleClock) {
  ActivityTracker t({.idle_ttl = seconds(10)}, kT0);
  t.HoldStarted(At(seconds(5)));  // a connection, held until it speaks
  t.HoldWithdrawn();              // it sent HELLO: never activity
  EXPECT_EQ(t.IdleFor(At(seconds(6))), seconds(6));
  EXPECT_EQ(t.Decide(At(seconds(10))).stop, StopReason::kIdle);
}

TEST(ActivityTrackerTest, AWakeOnTimeOrSlightlyLateMovesNothing) {
  ActivityTracker t({.idle_ttl = seconds(10)}, kT0);
  t.Woke(At(seconds(5)), At(seconds(5) + ActivityTracker::kFreezeSlack));
  EXPECT_EQ(t.Decide(At(seconds(10))).stop, StopReason::kIdle);
  // Activity after the thaw already restarted the clock: the freeze never moves it past now.
  ActivityTracker u({.idle_ttl = seconds(10)}, kT0);
  u.HoldStarted(At(seconds(50)));
  u.HoldEnded(At(seconds(50)));
  u.Woke(At(seconds(2)), At(seconds(50)));
  EXPECT_EQ(u.IdleFor(At(seconds(50))), milliseconds(0));
  EXPECT_EQ(u.Decide(At(seconds(60))).stop, StopReason::kIdle);
}

}  // namespace
}  // namespace agvisor::agent
