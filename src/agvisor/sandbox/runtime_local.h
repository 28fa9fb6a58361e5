// RuntimeLocal: what the sandbox layer of this process keeps about one Runtime's instances, owned
// by that Runtime object (Runtime::local) instead of process-wide statics keyed by host or
// container id. Handles made through one Runtime share it: a sandbox paused through one handle is
// resumed by the next call on any other handle of the same Runtime. Internal to sandbox/ (Sandbox,
// Pool, the sweep, idle pause); each part locks `mu` for its own fields.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "agvisor/sandbox/start_gate.h"

namespace agvisor {

namespace channel {
class Channel;
}

struct RuntimeLocal {
  explicit RuntimeLocal(const std::string& host);

  // Starts on this runtime's host (Sandbox::Create, pools' refills).
  StartGate start_gate;

  std::mutex mu;
  // Whether SweepNeverStartedOnce ran (sweep.h).
  bool swept = false;
  // The sandboxes paused through this runtime (container id -> until when, in the host's unix
  // seconds, a resume may go straight to the runtime's unpause: the end of its lifetime as known
  // at the pause, INT64_MAX for none, 0 when not known, then the resume inspects first): any
  // handle resumes one first. `paused_count` is read without the lock, so nothing is paid while
  // none is paused.
  std::map<std::string, std::int64_t, std::less<>> paused;
  std::atomic<int> paused_count{0};
  // The memory each sandbox was last resized to here (container id -> "256m"), for the
  // out-of-memory message: the container's label keeps the create-time value. Bounded.
  std::map<std::string, std::string, std::less<>> resized_memory;
  // The memory limits reserved by the pools made on this runtime (pool.h): together within the
  // host's memory.
  std::int64_t pool_reserved_bytes = 0;
  // idle_action pause (idle_pause.h): when each sandbox (container id) is next due a check.
  std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> idle_due;
  // ... and the channels this process's handles hold to such sandboxes (container id), which
  // the check asks over instead of opening a relay of its own. Held weakly (a closed handle's
  // is gone).
  std::map<std::string, std::weak_ptr<channel::Channel>, std::less<>> idle_channels;
};

}  // namespace agvisor
