// `agvisor_bench --suite egress` (bench/README.md, "Egress on runsc"): the egress enforcer's cost
// on real runsc sandboxes, against a plain bridge sandbox, side by side in one run. Starts the
// build's agvisord (which serves every egress network on the host: run under
// `flock /tmp/agvisor-egress.lock`) and a fake internet in a network namespace of its own.
#pragma once

#include <string>

namespace agvisor {

// Prints the suite's table. `rounds` downloads per side; `connects` connection setups per side.
// Exits the process with a message when the host cannot run it (not root, no runsc, ...).
void EgressSuite(const std::string& image, int rounds, int connects);

}  // namespace agvisor
