// StartGate: a bound on how many sandboxes start at once on one Docker host, with a bounded FIFO
// queue in front of it (backpressure instead of overload).
//
// Used by Sandbox::Create around container create + agent upload + start + handshake (one gate
// per Runtime object, Runtime::start_gate), so every creating thread that shares the runtime
// (CLI, daemon requests, warm pool refills) shares it. Why: Docker serialises much of create/start
// internally and runsc's boot is CPU-bound, so past a few parallel starts every start gets slower
// and the p95 explodes without the total getting shorter (bench/README.md has the figures). Callers
// beyond `max_concurrent` wait in arrival order; beyond `max_queued` waiting, or after `max_wait`
// in the queue, they get kResourceExhausted saying the host is busy and what to do.
//
// Limits come from the environment when a runtime's gate is first used (docs/pools.md):
//   AGVISOR_MAX_STARTS   starts in progress at once per host (default kDefaultMaxStarts; 0 = no
//                        bound)
//   AGVISOR_START_QUEUE  callers allowed to wait beyond those (default kDefaultMaxQueued)
//   AGVISOR_START_WAIT   seconds a caller waits in the queue at most (default 120)
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor {

// Measured with bench/run --suite concurrency (20 parallel creates; bench/README.md).
inline constexpr int kDefaultMaxStarts = 4;
inline constexpr int kDefaultMaxQueued = 256;

struct StartGateLimits {
  int max_concurrent = kDefaultMaxStarts;      // starts in progress at once; 0 = unbounded
  int max_queued = kDefaultMaxQueued;          // callers waiting beyond those; 0 = nobody waits
  std::chrono::milliseconds max_wait{120000};  // longest wait in the queue
};

// The limits of AGVISOR_MAX_STARTS / AGVISOR_START_QUEUE / AGVISOR_START_WAIT over the defaults.
// Errors: kInvalidArgument naming the variable, its value and the accepted form.
Result<StartGateLimits> StartGateLimitsFromEnv();

struct StartGateStats {
  int running = 0;  // tickets held now
  int queued = 0;   // callers waiting now
  std::uint64_t admitted = 0;
  std::uint64_t refused = 0;  // queue full or waited too long
  std::chrono::milliseconds longest_wait{0};
};

class StartGate {
 public:
  // Held while one start is in progress; destroying it lets the next caller in. Move-only.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept;
    Ticket& operator=(Ticket&& o) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();
    // Lets the next caller in now (idempotent).
    void Release();
    // How long this caller waited for its slot.
    std::chrono::milliseconds waited() const { return waited_; }

   private:
    friend class StartGate;
    Ticket(StartGate* gate, std::chrono::milliseconds waited) : gate_(gate), waited_(waited) {}
    StartGate* gate_ = nullptr;
    std::chrono::milliseconds waited_{0};
  };

  // `host` only names the host in messages ("" = this host).
  StartGate(std::string host, StartGateLimits limits);

  // Waits for a slot in arrival order. Errors: kResourceExhausted when max_queued callers wait
  // already, or when no slot came within max_wait (the message names the host, the figures and
  // the way out).
  Result<Ticket> Enter();

  // New limits for later callers (tickets held stay valid; a larger bound admits waiters now).
  void SetLimits(StartGateLimits limits);
  StartGateLimits limits() const;
  StartGateStats stats() const;

 private:
  void Leave();
  bool HasRoom() const;
  Error Busy(std::string why) const;

  const std::string host_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  StartGateLimits limits_;
  int running_ = 0;
  std::deque<std::uint64_t> queue_;  // waiters' numbers, in arrival order
  std::uint64_t next_number_ = 0;
  StartGateStats stats_;
};

}  // namespace agvisor
