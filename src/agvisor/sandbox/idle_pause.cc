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
// Sandboxes asked at once in one pass (each a relay exec and a thread).
constexpr std::size_t kMaxQueriesPerPass = 16;

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

// Asks one sandbox and freezes it when due; returns whether it froze it.
bool CheckOne(Runtime& runtime, const std::string& id, milliseconds ttl) {
  // A session of its own (the listing process may hold none to this sandbox): one relay exec.
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
  auto st = (*ch)->QueryIdle(kQueryTimeout);
  ch->reset();  // the session ends before the freeze: a frozen relay would linger
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

}  // namespace

std::vector<std::string> PauseIdleSandboxes(Runtime& runtime,
                                            const std::vector<InstanceSummary>& instances) {
  std::set<std::string, std::less<>> seen;
  std::vector<std::pair<std::string, milliseconds>> due;
  for (const auto& s : instances) {
    if (s.helper || s.status != "running") continue;
    auto ttl_s = IdlePauseTtl(s.labels);
    if (!ttl_s) continue;
    seen.insert(s.id);
    // At most kMaxQueriesPerPass per pass: the others stay due for the next.
    if (due.size() < kMaxQueriesPerPass && ClaimIfDue(runtime, s.id, Clock::now())) {
      due.emplace_back(s.id, milliseconds(*ttl_s * 1000));
    }
  }
  // Paused and ended sandboxes are dropped from the schedule too.
  ForgetAllBut(runtime, seen);
  // In parallel: an agent that does not answer costs the pass its timeout once, not once each.
  std::vector<char> froze(due.size(), 0);
  std::vector<std::thread> threads;
  threads.reserve(due.size());
  for (std::size_t i = 0; i < due.size(); ++i) {
    threads.emplace_back([&, i] { froze[i] = CheckOne(runtime, due[i].first, due[i].second); });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> paused;
  for (std::size_t i = 0; i < due.size(); ++i) {
    if (froze[i]) paused.push_back(due[i].first);
  }
  return paused;
}

}  // namespace agvisor
