#include "agvisor/agent/activity.h"

#include <algorithm>

namespace agvisor::agent {

std::string_view StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kNone:
      return "none";
    case StopReason::kLifetime:
      return "lifetime";
    case StopReason::kIdle:
      return "idle";
    case StopReason::kSignal:
      return "signal";
  }
  return "unknown";
}

void ActivityTracker::HoldStarted(Clock::time_point /*now*/) { ++holds_; }

void ActivityTracker::HoldEnded(Clock::time_point now) {
  if (holds_ > 0 && --holds_ == 0) idle_since_ = now;
}

void ActivityTracker::SetPolicy(ExpiryPolicy policy, Clock::time_point now) {
  policy_ = policy;
  start_ = now;
  idle_since_ = now;
}

void ActivityTracker::Woke(Clock::time_point planned, Clock::time_point now) {
  if (now <= planned + kFreezeSlack) return;
  idle_since_ = thaw_restarts_idle_ ? now : std::min(idle_since_ + (now - planned), now);
}

std::chrono::milliseconds ActivityTracker::IdleFor(Clock::time_point now) const {
  if (holds_ > 0 || now < idle_since_) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - idle_since_);
}

ExpiryDecision ActivityTracker::Decide(Clock::time_point now) const {
  ExpiryDecision d;
  if (policy_.lifetime) {
    Clock::time_point end = start_ + *policy_.lifetime;
    if (now >= end) return {StopReason::kLifetime, std::nullopt};
    d.next_check = end;
  }
  if (policy_.idle_ttl && holds_ == 0) {
    Clock::time_point end = idle_since_ + *policy_.idle_ttl;
    if (now >= end) return {StopReason::kIdle, std::nullopt};
    d.next_check = d.next_check ? std::min(*d.next_check, end) : end;
  }
  return d;
}

}  // namespace agvisor::agent
