// `agvisor_bench --suite tails` (bench/README.md, "Tails under load"): exec latency through
// agvisord when the host's cores are saturated, the way an orchestrator with many agents drives
// it: `loops` client threads, each exec'ing `true` back to back into one of `sandboxes` sandboxes
// (loop i on sandbox i % sandboxes), for `seconds`, on each gVisor platform. Prints the 1-minute
// load at start and end, execs/s, errors, p50/p95/p99/max, the shared stalls (moments when the
// slow execs of half the loops or more, on 3 sandboxes or more, end together: what held them is
// shared, not one sandbox's), and the slowest execs with when they started, for reading beside
// agvisord's log (which the suite keeps: its path is printed).
// Starts the build's agvisord (--no-egress) unless `local`; only when named (not in "all").
#pragma once

#include <string>
#include <vector>

#include "agvisor/sandbox/spec.h"

namespace agvisor {

// `spec`: the sandboxes' (the bench's own); `platforms`: the gVisor platforms to run on, one
// after the other, each replacing spec.platform. `local`: through the library in this process
// instead of agvisord (`--tails-door local`: what is left of the tail without the daemon).
// Exits the process with a message when a sandbox cannot be made.
void TailsSuite(const SandboxSpec& spec, const std::vector<std::string>& platforms, int sandboxes,
                int loops, int seconds, bool local = false);

}  // namespace agvisor
