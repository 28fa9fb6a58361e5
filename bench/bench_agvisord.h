// The agvisord a bench suite talks to (the egress suite, the basic suite's rows through
// agvisord): started on a unix socket in a directory of the suite's, its token file and log
// beside it.
#pragma once

#include <string>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/base/subprocess.h"

namespace agvisor {

// Starts agvisord with `--socket DIR/agvisord.sock --token-file DIR/token` and `args`, its stderr
// appended to DIR/agvisord.log; returns once that log says it listens. The binary is
// $AGVISOR_BENCH_AGVISORD when set (another build, e.g. one from before a change, for a
// before/after comparison in the same minutes), else this build's. Errors: the spawn's;
// kUnavailable (with the log) when it exited or did not listen within 20 s.
Result<Subprocess> StartBenchAgvisord(const std::string& dir, const std::vector<std::string>& args);

// SIGTERM, then SIGKILL when it has not exited after 30 s.
void StopBenchAgvisord(Subprocess& daemon);

}  // namespace agvisor
