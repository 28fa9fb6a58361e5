// Pool: warm sandboxes of one kind (image, limits, network, runtime, host, labels), started in
// the background with their agent channel open, handed out in milliseconds (docs/pools.md).
//
// Used by the daemon (one Pool per configured kind), the library's users and bench/. Acquire
// pops a ready member, gives it the caller's lifetime / idle_ttl (SET_DEADLINES, one channel
// round trip) and returns it as an ordinary Sandbox; the pool starts a replacement at once.
// When no member is ready, Acquire waits up to AcquireOptions::wait for one being started and
// then creates a sandbox the normal way (a cold create), so a caller always gets a sandbox; the
// stats count those misses.
//
// Members:
//   - carry the label agvisor.pool=<pool id> (SandboxInfo::pool; Docker labels are fixed, so a
//     handed-out sandbox keeps it);
//   - run with a safety lifetime of max_age + 60 s enforced by their agent and Docker's
//     AutoRemove: members of a process that died end on their own, nothing leaks;
//   - are replaced when older than max_age (each a little earlier, so they do not all expire at
//     once), when their channel closes (the container died or was killed), or when the caller's
//     deadlines cannot be set on them; such a member is never handed out;
//   - are removed by Close() / the destructor unless handed out.
// Size: 1..64 members, and the memory limits of every pool on one Runtime object together may
// not exceed the host's memory (docker info's MemTotal): Create refuses a pool that would,
// saying how many members fit. Starts go through the runtime's StartGate like every create, so
// a refill never floods the host.
//
// Thread-safe: Acquire may be called from many threads at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/spec.h"
#include "agvisor/sandbox/types.h"

namespace agvisor {

class Pool {
 public:
  // Validates the options, checks the host's memory and starts filling in the background on
  // `runtime` (Create does not wait for members: see WaitReady). Errors: kInvalidArgument
  // (options or spec; no runtime, or one of another host than spec.host), kResourceExhausted (the
  // members' memory limits, with those of the other pools on this runtime, do not fit the host),
  // and those of asking the host.
  static Result<std::unique_ptr<Pool>> Create(std::shared_ptr<Runtime> runtime,
                                              PoolOptions options);
  // Close().
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // A ready member with the caller's deadlines, or a cold-created sandbox (see above). Errors:
  // kInvalidArgument (deadlines <= 0), kUnavailable (the pool is closed), kResourceExhausted
  // (empty and cold_create is false), and those of Sandbox::Create for a cold create.
  Result<std::unique_ptr<Sandbox>> Acquire(const AcquireOptions& options = {});

  // Blocks until `size` members are ready. Errors: kTimeout (with the last start error, if
  // any), kUnavailable (closed).
  Result<void> WaitReady(std::chrono::milliseconds timeout);

  // Stops refilling, waits for starts in flight, and removes every member not handed out.
  // Idempotent; Acquire fails with kUnavailable afterwards.
  void Close();

  PoolStats Stats() const;
  // A random id, the value of the members' agvisor.pool label.
  const std::string& id() const { return id_; }
  const PoolOptions& options() const { return options_; }
  // This pool under `name`, with its counters now.
  PoolInfo Info(std::string name) const;

 private:
  struct Member {
    std::unique_ptr<Sandbox> sandbox;
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::duration max_age;  // options_.max_age, less a random share
  };
  Pool(std::shared_ptr<Runtime> runtime, PoolOptions options, std::string id,
       std::int64_t reserved_bytes);
  void FillLoop();
  void MaintainLoop();
  // Members that must go, removed outside the lock.
  void RemoveMembers(std::vector<std::unique_ptr<Sandbox>> members);
  bool NeedsMember() const;  // with mu_ held

  const std::shared_ptr<Runtime> runtime_;
  const PoolOptions options_;
  const std::string id_;
  const std::int64_t reserved_bytes_;  // this pool's share of the host's memory

  mutable std::mutex mu_;
  std::condition_variable cv_;        // fill workers and maintenance wake-ups
  std::condition_variable ready_cv_;  // a member became ready, or the pool closed
  std::deque<Member> ready_;
  std::vector<std::unique_ptr<Sandbox>> doomed_;  // found dead by Acquire, to be removed
  int starting_ = 0;
  bool closed_ = false;
  PoolStats stats_;
  std::chrono::steady_clock::time_point retry_after_{};  // backoff after a failed start
  int failures_in_row_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace agvisor
