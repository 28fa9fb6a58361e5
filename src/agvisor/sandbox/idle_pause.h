// idle_action pause (docs/lifecycle.md, "Idle policy"): the host freezes a sandbox that has been
// idle for its idle_ttl. The agent runs with --track-idle instead of --idle-ttl, so it keeps its
// idle clock (exact across freezes) without stopping at it; whoever lists the sandboxes
// (Sandbox::List: agvisord's sweep every few seconds, or `agvisor ls` without a daemon) asks it
// (IDLE_QUERY, which is not activity) when it is due, and freezes it once it has been idle that
// long. Any later call resumes it as after `agvisor pause`. It asks over the channel a handle of
// this process holds to the sandbox (agvisord holds one to each sandbox it made or served), else
// over a short channel session of its own (one relay exec: a runsc exec, ~0.1 s of host CPU).
//
// The answer is the sandbox's claim: a hostile agent can only get itself frozen early or kept
// awake, as its own processes could. Each query is bounded in time (Channel::QueryIdle: 5 s) and
// the due ones of a pass run in parallel (at most 16 that need a relay and 64 over a held
// channel; the rest wait for the next pass), so agents that do not answer cost a pass about that
// bound once; a sandbox is not asked again before the soonest moment it could reach its idle_ttl,
// so a sweep costs one message per sandbox per idle_ttl at most, and no exec for the sandboxes
// whose channel is held here (at 300 sandboxes with a 60 s idle_ttl, relays alone would be 5
// runsc execs a second, more than 16 per 5 s pass can ask).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/sandbox/runtime.h"

namespace agvisor {

namespace channel {
class Channel;
}

// The idle_ttl (seconds) of an instance labelled for idle_action pause, else nullopt.
std::optional<std::int64_t> IdlePauseTtl(const Labels& labels);

// When to ask a sandbox again after an IDLE_STATE answer (pure; unit-tested): `holds` > 0 means
// busy (it cannot reach idle_ttl sooner than idle_ttl after its last operation ends), else it
// reaches idle_ttl after (idle_ttl - idle_for). Never sooner than kIdleRecheckFloor.
inline constexpr std::chrono::milliseconds kIdleRecheckFloor{1000};
std::chrono::milliseconds IdleRecheckAfter(std::chrono::milliseconds idle_ttl, std::uint32_t holds,
                                           std::chrono::milliseconds idle_for);

// For each running instance of `instances` labelled for idle_action pause and due for a check:
// asks its agent how long it has been idle and freezes it when that reached its idle_ttl.
// Returns the ids it froze. Never fails: an agent that cannot be asked (an older agent, a broken
// channel) is asked again later; the instances not in `instances` are forgotten.
// Lets the checks of sandbox `id` (container id) ask over `ch`, a channel a handle of this
// process holds (Sandbox does when it opens one for an idle_action pause sandbox).
void ShareIdleChannel(Runtime& runtime, const std::string& id,
                      const std::shared_ptr<channel::Channel>& ch);

std::vector<std::string> PauseIdleSandboxes(Runtime& runtime,
                                            const std::vector<InstanceSummary>& instances);

}  // namespace agvisor
