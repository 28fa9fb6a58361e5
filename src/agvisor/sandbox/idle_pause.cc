#include "agvisor/sandbox/idle_pause.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "agvisor/channel/channel.h"
#include "agvisor/sandbox/agent_paths.h"
#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/runtime_local.h"

namespace agvisor {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long an agent may take to answer before its session is dropped (a sweep must not hang).
constexpr milliseconds kQueryTimeout{5000};
// After a failed ask (a broken channel, a runtime error): try again this much later.
constexpr milliseconds kRetryAfterFailure{30000};
// An agent that cannot answer (older than protocol 5) will not learn to: ask it rarely.
constexpr milliseconds kRetryUnsupported{600000};
// Sandboxes asked at once in one pass, each a thread: over a relay of their own (an exec each),
// and over a channel a handle of this process holds (a message each).
constexpr std::size_t kMaxRelayQueriesPerPass = 16;
constexpr std::size_t kMaxHeldQueriesPerPass = 64;

// When each sandbox (container id) is next due a check: RuntimeLocal::idle_due of its runtime.
// Claims the check of `id` if it is due at `now` (a concurrent lister then skips it).
bool ClaimIfDue(Runtime& runtime, const std::string& id, Clock::time_point now) {
  RuntimeLocal& s = runtime.local();
  std::lock_guard lock(s.mu);
  auto it = s.idle_due.find(id);
  if (it != s.idle_due.end() && it->second > now) return false;
  s.idle_due[id] = now + kQueryTimeout * 2;
  return true;
}

void DueAgainAfter(Runtime& runtime, const std::string& id, milliseconds after) {
  RuntimeLocal& s = runtime.local();
  std::lock_guard lock(s.mu);
  s.idle_due[id] = Clock::now() + after;
}

void ForgetAllBut(Runtime& runtime, const std::set<std::string, std::less<>>& keep) {
  RuntimeLocal& s = runtime.local();
  std::lock_guard lock(s.mu);
  std::erase_if(s.idle_due, [&](const auto& kv) { return keep.count(kv.first) == 0; });
  // A paused sandbox keeps its channel (the next call thaws it); a gone one's goes.
  std::erase_if(s.idle_channels, [&](const auto& kv) { return kv.second.expired(); });
}

// The channel a handle of this process holds to `id`, if any and not broken.
std::shared_ptr<channel::Channel> HeldChannel(Runtime& runtime, const std::string& id) {
  RuntimeLocal& s = runtime.local();
  std::lock_guard lock(s.mu);
  auto it = s.idle_channels.find(id);
  if (it == s.idle_channels.end()) return nullptr;
  auto ch = it->second.lock();
  return ch && !ch->broken() ? ch : nullptr;
}

}  // namespace

std::optional<std::int64_t> IdlePauseTtl(const Labels& labels) {
  auto action = labels.find(std::string(kLabelIdleAction));
  if (action == labels.end() || action->second != "pause") return std::nullopt;
  auto ttl = labels.find(std::string(kLabelIdleTtl));
  if (ttl == labels.end() || ttl->second.empty() || ttl->second.size() > 12 ||
      ttl->second.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;  // not a label this build wrote
  }
  std::int64_t v = std::stoll(ttl->second);
  if (v <= 0) return std::nullopt;
  return v;
}

milliseconds IdleRecheckAfter(milliseconds idle_ttl, std::uint32_t holds, milliseconds idle_for) {
  milliseconds left = holds > 0 ? idle_ttl : idle_ttl - std::min(idle_for, idle_ttl);
  return std::max(left, kIdleRecheckFloor);
}

namespace {

// Asks one sandbox, over `held` when this process holds a channel to it, and freezes it when due;
// returns whether it froze it.
bool CheckOne(Runtime& runtime, const std::string& id, milliseconds ttl,
              std::shared_ptr<channel::Channel> held) {
  Result<proto::IdleState> st = Error::Unavailable("not asked");
  if (held) {
    st = held->QueryIdle(kQueryTimeout);
  } else {
    // A session of its own: one relay exec.
    auto stream =
        runtime.OpenExecStream(id, {std::string(kAgentPath), "connect"}, [](std::string_view) {});
    if (!stream.ok()) {
      DueAgainAfter(runtime, id, kRetryAfterFailure);
      return false;
    }
    auto ch = channel::Channel::Open(std::move(*stream));
    if (!ch.ok()) {
      DueAgainAfter(runtime, id, kRetryAfterFailure);
      return false;
    }
    st = (*ch)->QueryIdle(kQueryTimeout);
    ch->reset();  // the session ends before the freeze: a frozen relay would linger
  }
  if (!st.ok()) {
    DueAgainAfter(
        runtime, id,
        st.error().code() == ErrorCode::kUnsupported ? kRetryUnsupported : kRetryAfterFailure);
    return false;
  }
  const milliseconds idle_for(
      static_cast<std::int64_t>(std::min<std::uint64_t>(st->idle_ms, std::uint64_t{1} << 50)));
  if (st->holds == 0 && idle_for >= ttl) {
    // kConflict: paused or ended meanwhile; either way nothing more to do now. A resumed one is
    // due again at once (it is forgotten while not running).
    DueAgainAfter(runtime, id, kIdleRecheckFloor);
    return runtime.Pause(id).ok();
  }
  DueAgainAfter(runtime, id, IdleRecheckAfter(ttl, st->holds, idle_for));
  return false;
}

struct Due {
  std::string id;
  milliseconds ttl;
  std::shared_ptr<channel::Channel> held;  // null: ask over a relay
};

}  // namespace

void ShareIdleChannel(Runtime& runtime, const std::string& id,
                      const std::shared_ptr<channel::Channel>& ch) {
  RuntimeLocal& s = runtime.local();
  std::lock_guard lock(s.mu);
  s.idle_channels[id] = ch;
}

std::vector<std::string> PauseIdleSandboxes(Runtime& runtime,
                                            const std::vector<InstanceSummary>& instances) {
  std::set<std::string, std::less<>> seen;
  std::vector<Due> due;
  std::size_t relays = 0;
  for (const auto& s : instances) {
    if (s.helper || s.status != "running") continue;
    auto ttl_s = IdlePauseTtl(s.labels);
    if (!ttl_s) continue;
    seen.insert(s.id);
    // At most the bounds per pass: the others stay due for the next.
    auto held = HeldChannel(runtime, s.id);
    if (held ? due.size() - relays >= kMaxHeldQueriesPerPass : relays >= kMaxRelayQueriesPerPass) {
      continue;
    }
    if (!ClaimIfDue(runtime, s.id, Clock::now())) continue;
    if (!held) ++relays;
    due.push_back({s.id, milliseconds(*ttl_s * 1000), std::move(held)});
  }
  // Paused and ended sandboxes are dropped from the schedule too.
  ForgetAllBut(runtime, seen);
  // In parallel: an agent that does not answer costs the pass its timeout once, not once each.
  std::vector<char> froze(due.size(), 0);
  std::vector<std::thread> threads;
  threads.reserve(due.size());
  for (std::size_t i = 0; i < due.size(); ++i) {
    threads.emplace_back(
        [&, i] { froze[i] = CheckOne(runtime, due[i].id, due[i].ttl, due[i].held); });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> paused;
  for (std::size_t i = 0; i < due.size(); ++i) {
    if (froze[i]) paused.push_back(due[i].id);
  }
  return paused;
}

}  // namespace agvisor
