// What agvisor_bench's suites share: failing fast (a bench is not a library: the first error ends
// the run with its message), reading /proc, and finding the host processes of a container (the
// containerd shim and everything under it: runsc-gofer, runsc-sandbox, systrap's stubs).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor {

// Prints "agvisor_bench: WHAT" and exits 1.
[[noreturn]] void Die(const std::string& what);

template <typename T>
T Must(Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what + ": " + r.error().ToString());
  return std::move(*r);
}
inline void Must(Result<void> r, const std::string& what) {
  if (!r.ok()) Die(what + ": " + r.error().ToString());
}

// The whole file ("" when it cannot be read: a process that exited meanwhile).
std::string ReadAll(const std::string& path);

// The 1-minute load average now, as /proc/loadavg prints it.
std::string LoadAverage();

// The value in kB of the line "NAME: VALUE kB" of /proc/PID/status or smaps_rollup text; 0 if none.
std::int64_t FieldKb(const std::string& text, const std::string& name);

// utime + stime of a process so far (clock ticks; its threads included), 0 once it is gone.
std::int64_t CpuTicks(int pid);

// A container's host processes: pid and argv[0], its containerd shim first.
using HostProcesses = std::vector<std::pair<int, std::string>>;

// The host processes of each container of `container_ids` (full ids), from one pass over /proc.
// A container without a shim (gone, or not on this host) maps to an empty list.
std::map<std::string, HostProcesses> ContainerTrees(const std::vector<std::string>& container_ids);

}  // namespace agvisor
