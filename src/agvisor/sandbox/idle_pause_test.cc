#include "agvisor/sandbox/idle_pause.h"

#include <gtest/gtest.h>

namespace agvisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(IdlePauseTest, OnlyPauseLabelsWithAValidTtlCount) {
  EXPECT_EQ(IdlePauseTtl({{"agvisor.idle_action", "pause"}, {"agvisor.idle_ttl", "30"}}), 30);
  EXPECT_FALSE(IdlePauseTtl({{"agvisor.idle_action", "stop"}, {"agvisor.idle_ttl", "30"}}));
  EXPECT_FALSE(IdlePauseTtl({{"agvisor.idle_ttl", "30"}}));  // destroy: the agent ends it
  EXPECT_FALSE(IdlePauseTtl({{"agvisor.idle_action", "pause"}}));
  for (const char* bad : {"", "0", "-5", "3s", "1e3", "9999999999999"}) {
    EXPECT_FALSE(IdlePauseTtl({{"agvisor.idle_action", "pause"}, {"agvisor.idle_ttl", bad}}))
        << bad;
  }
}

TEST(IdlePauseTest, RecheckWhenTheTtlCouldFirstBeReached) {
  // Idle for 20 s of 60: not before 40 s more.
  EXPECT_EQ(IdleRecheckAfter(seconds(60), 0, seconds(20)), seconds(40));
  // Busy: the ttl counts from the end of the work, so a whole ttl at least.
  EXPECT_EQ(IdleRecheckAfter(seconds(60), 2, milliseconds(0)), seconds(60));
  // Just short of it, or past it (the freeze failed): the floor, never a busy loop.
  EXPECT_EQ(IdleRecheckAfter(seconds(60), 0, milliseconds(59900)), kIdleRecheckFloor);
  EXPECT_EQ(IdleRecheckAfter(seconds(60), 0, seconds(600)), kIdleRecheckFloor);
  EXPECT_EQ(IdleRecheckAfter(seconds(2), 0, milliseconds(0)), seconds(2));
}

}  // namespace
}  // namespace agvisor
