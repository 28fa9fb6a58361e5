// ActivityTracker: when does a sandbox stop on its own? The pure decision logic of `init`.
//
// Used by init.cc (fed by the activity socket and a monotonic clock) and unit-tested with a fake
// clock. Definitions (docs/agent.md):
//   - lifetime: the sandbox stops once `lifetime` has passed since start, whatever is running.
//   - activity: a client connected to the activity socket. The sandbox is active for as long as
//     at least one client is connected; idle time runs from the last moment the number of
//     connected clients dropped to zero (or from start, if none ever connected).
//   - idle-ttl: the sandbox stops once it has been idle for `idle_ttl`.
// Lifetime wins when both are due at the same instant.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace agvisor::agent {

using Clock = std::chrono::steady_clock;

struct ExpiryPolicy {
  std::optional<std::chrono::milliseconds> lifetime;
  std::optional<std::chrono::milliseconds> idle_ttl;
};

enum class StopReason { kNone, kLifetime, kIdle, kSignal };

// "none", "lifetime", "idle", "signal": the contents of the exit-reason file.
std::string_view StopReasonName(StopReason reason);

struct ExpiryDecision {
  StopReason stop = StopReason::kNone;
  // When to ask again (the next instant a limit can be reached); unset: only an event can change
  // the answer. Set only when stop == kNone.
  std::optional<Clock::time_point> next_check;
};

class ActivityTracker {
 public:
  ActivityTracker(ExpiryPolicy policy, Clock::time_point start)
      : policy_(policy), start_(start), idle_since_(start) {}

  void ClientConnected(Clock::time_point now);
  void ClientDisconnected(Clock::time_point now);
  int connected_clients() const { return clients_; }

  // Pure: what to do at `now`.
  ExpiryDecision Decide(Clock::time_point now) const;

  // How long the sandbox has been idle at `now` (zero while a client is connected).
  std::chrono::milliseconds IdleFor(Clock::time_point now) const;

 private:
  ExpiryPolicy policy_;
  Clock::time_point start_;
  Clock::time_point idle_since_;
  int clients_ = 0;
};

}  // namespace agvisor::agent
