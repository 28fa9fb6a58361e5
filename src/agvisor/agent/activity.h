// ActivityTracker: when does a sandbox stop on its own? The pure decision logic of `init`.
//
// Used by init.cc (fed by the activity socket and a monotonic clock) and unit-tested with a fake
// clock. Definitions (docs/agent.md):
//   - lifetime: the sandbox stops once `lifetime` has passed since start, whatever is running.
//   - activity: "operations in flight". A hold is one of: an exec, a background-process attach,
//     a file operation or a port stream in progress in any channel session, or a legacy client
//     (e.g. `agvisor-agent exec`) connected to the socket without speaking the protocol. An idle
//     connected session is not a hold. The sandbox is active while at least one hold exists; idle
//     time runs from the last moment the number of holds dropped to zero (or from start).
//   - idle-ttl: the sandbox stops once it has been idle for `idle_ttl`.
//   - a freeze (the sandbox paused: `docker pause` stops every process in it while the monotonic
//     clock runs on, as measured under runsc) is not idle time, but it is lifetime: see Woke.
// Lifetime wins when both are due at the same instant.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>
#include <utility>

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

  // One more / one fewer operation in flight (see above). HoldEnded with none held is ignored.
  void HoldStarted(Clock::time_point now);
  void HoldEnded(Clock::time_point now);
  // A hold that turned out not to be activity (a socket connection, held until it speaks, that
  // then sent HELLO: a protocol session is not activity, only its operations are): taken back
  // without restarting the idle clock, so a host asking IDLE_QUERY on a new session does not
  // make the sandbox look busy.
  void HoldWithdrawn() {
    if (holds_ > 0) --holds_;
  }
  int holders() const { return holds_; }

  // Replaces the policy at `now` (SET_DEADLINES): the new lifetime counts from `now` and the
  // idle clock restarts there (holds in flight are kept).
  void SetPolicy(ExpiryPolicy policy, Clock::time_point now);
  const ExpiryPolicy& policy() const { return policy_; }

  // Pure: what to do at `now`.
  ExpiryDecision Decide(Clock::time_point now) const;

  // How long init's loop may sleep while an idle clock runs: a freeze is told from a long sleep
  // by the wake being late, which needs a planned wake. A wake more than kFreezeSlack late is a
  // freeze (or a host so loaded it stalled us: the same to the idle clock).
  static constexpr std::chrono::milliseconds kFreezeTick{1000};
  static constexpr std::chrono::milliseconds kFreezeSlack{1000};
  // The loop planned to wake by `planned` and woke at `now`. When that is a freeze, its length
  // (now - planned) moves the idle clock forward (never past `now`): a sandbox resumed after a
  // pause longer than its idle_ttl is not ended the instant it thaws. Lifetime is not moved: a
  // pause does not extend it (the host ends a paused sandbox past its lifetime,
  // docs/lifecycle.md).
  void Woke(Clock::time_point planned, Clock::time_point now);
  // With idle_action pause (init --track-idle) the freeze is the host's idle action itself, and
  // a thaw means someone wanted the sandbox: the idle clock restarts at the thaw instead, so the
  // host does not freeze it again at once (docs/lifecycle.md, "Idle policy").
  void set_thaw_restarts_idle(bool yes) { thaw_restarts_idle_ = yes; }

  // How long the sandbox has been idle at `now` (zero while a hold exists).
  std::chrono::milliseconds IdleFor(Clock::time_point now) const;

 private:
  ExpiryPolicy policy_;
  Clock::time_point start_;
  Clock::time_point idle_since_;
  int holds_ = 0;
  bool thaw_restarts_idle_ = false;
};

// RAII: one hold on a tracker for as long as it lives (an operation in flight). Move-only.
class ActivityHold {
 public:
  ActivityHold() = default;
  explicit ActivityHold(ActivityTracker* tracker) : tracker_(tracker) {
    if (tracker_) tracker_->HoldStarted(Clock::now());
  }
  ActivityHold(ActivityHold&& o) noexcept : tracker_(std::exchange(o.tracker_, nullptr)) {}
  ActivityHold& operator=(ActivityHold&& o) noexcept {
    if (this != &o) {
      Reset();
      tracker_ = std::exchange(o.tracker_, nullptr);
    }
    return *this;
  }
  ~ActivityHold() { Reset(); }
  void Reset() {
    if (tracker_) std::exchange(tracker_, nullptr)->HoldEnded(Clock::now());
  }
  // As Reset, but the hold was never activity (ActivityTracker::HoldWithdrawn).
  void Withdraw() {
    if (tracker_) std::exchange(tracker_, nullptr)->HoldWithdrawn();
  }
  bool held() const { return tracker_ != nullptr; }

 private:
  ActivityTracker* tracker_ = nullptr;
};

}  // namespace agvisor::agent
