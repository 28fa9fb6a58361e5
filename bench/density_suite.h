// `agvisor_bench --suite density --count N` (bench/README.md, "Density"): how many idle agent
// sandboxes this host carries. Starts the build's agvisord (`--no-egress`), creates N sandboxes
// through it with bounded parallelism (bridge network, the image, ready shells on: the defaults),
// lets them idle, then reports host CPU and PSS per idle sandbox, exec p50/p95 on random ones,
// `agvisor ls` and agvisord's list time, agvisord's own CPU, create throughput; removes them and
// checks that nothing of the run is left. Prints the 1-minute load at its start and end.
//
// Also the N=20 behaviour test (tests/integration: density_test): the suite's exit status says
// whether every create succeeded, every sandbox answered, every list saw all of them and nothing
// was left after removal. No timing is asserted.
#pragma once

#include <string>

namespace agvisor {

struct DensityOptions {
  std::string image;     // "" = the default image
  std::string platform;  // "" = the default platform
  int count = 20;        // sandboxes
  int parallel = 8;      // creates (and removals) in flight at once
  int settle = 10;       // seconds left alone after the last create, before the idle window
  int idle_seconds = 20;
  int exec_samples = 50;  // `true` execs, each on a sandbox drawn at random
  int list_samples = 5;   // agvisord lists and `agvisor ls` runs each
};

// Runs the suite and prints its table. Returns 0 when everything answered and nothing leaked,
// else 1 (after removing what it can).
int DensitySuite(const DensityOptions& options);

}  // namespace agvisor
