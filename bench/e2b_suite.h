// `agvisor_bench --suite e2b` (bench/README.md, "E2B"): the official `e2b` SDK's commands against
// agvisor's own exec, on one agvisord and one sandbox, side by side in one run. Starts the build's
// agvisord with --e2b on a loopback port and runs bench/e2b_suite.mjs with node (web/'s npm tree:
// `npm ci` in web/ first).
#pragma once

namespace agvisor {

// Prints the suite's table. `runs` samples per row. Exits the process with a message when the
// host cannot run it (no node, no e2b package, agvisord does not start).
void E2bSuite(int runs);

}  // namespace agvisor
