// One sample of a container's resource use: what docker/ decodes from the Engine API's stats
// (docker::ContainerStats) and what every runtime reports for a sandbox (SandboxStats in
// sandbox/runtime.h: `agvisor top`, agvisord's metrics route). One struct, so the Docker runtime
// hands its sample on as it is.
#pragma once

#include <cstdint>
#include <string>

namespace agvisor {

struct ResourceSample {
  std::string read;  // the sample's time (RFC 3339)
  // CPU use over the sample's interval in percent of one core (200 = two cores busy); 0 when
  // the runtime had no earlier reading to compare with.
  double cpu_percent = 0;
  std::uint64_t cpu_total_ns = 0;  // CPU time used since the start
  int online_cpus = 0;
  // Memory in use, without the inactive page cache (what `docker stats` shows).
  std::uint64_t memory_bytes = 0;
  std::uint64_t memory_limit_bytes = 0;
  std::uint64_t pids = 0;
  std::uint64_t pids_limit = 0;  // 0 = none reported
};

}  // namespace agvisor
