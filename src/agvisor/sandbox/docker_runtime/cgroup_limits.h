// A running container's limits in the host's cgroup files: read them, and change them in place
// (DockerRuntime::Resize, docs/lifecycle.md "Live resize").
//
// Why cgroup files and not Docker: the Engine API's POST /containers/{id}/update asks the
// runtime to update, and runsc 20240729 has no `update` subcommand (Docker answers "exit status
// 128"); gVisor's sandbox runs in the container's cgroup, whose memory, CPU and pids knobs the
// host's kernel enforces on the whole sandbox. So the files must be on this machine: the caller
// checks that the Docker host is local, and FindContainerCgroup finds the container's own
// directories (named by its full id, which a container elsewhere cannot match).
//
// cgroup v1 (Docker's cgroupfs driver: /sys/fs/cgroup/{memory,cpu,pids}/docker/<id>) and v2 (one
// directory) are both read and written; the plan of writes is pure (PlanCgroupResize) and
// unit-tested, the file work is in ApplyCgroupResize.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor {

enum class CgroupVersion { kV1, kV2 };

// The directories of one container's cgroup (v2: the same one three times).
struct CgroupPaths {
  CgroupVersion version = CgroupVersion::kV1;
  std::string memory, cpu, pids;
  bool has_memsw = false;  // v1 with swap accounting: memory.memsw.limit_in_bytes exists
};

// What the files say now, as far as a resize needs it.
struct CgroupNow {
  std::int64_t memory_limit = 0;   // bytes; 0 = none ("max", or v1's page-counter maximum)
  std::int64_t cpu_period_us = 0;  // 0 = unknown (then 100000 is written first, as Docker does)
};

// One write: `value` into file `file` of directory `dir`.
struct CgroupWrite {
  std::string dir;
  std::string file;
  std::string value;
};

// Pure: the writes that take a container from `now` to `spec`, in an order the kernel accepts.
// v1: memory.limit_in_bytes may never exceed memory.memsw.limit_in_bytes, so raising writes memsw
// first and lowering writes memory first (both equal after: no swap); CPU as cfs_quota_us over
// the container's cfs_period_us (at least 1000 µs, the kernel's floor); pids.max. v2: memory.max
// (memory.swap.max stays 0, as Docker made it), cpu.max "QUOTA PERIOD", pids.max.
std::vector<CgroupWrite> PlanCgroupResize(const CgroupPaths& paths, const CgroupNow& now,
                                          const ResizeSpec& spec);

// Pure: LiveLimits (source "cgroup") from the files' contents, keyed by file name
// ("memory.limit_in_bytes", "cpu.cfs_quota_us", "cpu.cfs_period_us", "pids.max"; v2:
// "memory.max", "cpu.max", "pids.max"). A missing or unparsable file reads as no limit.
LiveLimits ParseCgroupLimits(CgroupVersion version,
                             const std::map<std::string, std::string>& files);

// The cgroup directories of container `container_id` (its full 64-hex id) on this machine,
// found from /proc/<pid>/cgroup of its process `pid` (Docker's State.Pid) or else under
// Docker's cgroupfs parent (/docker/<id>) and systemd scope (docker-<id>.scope). Each must name
// the id. Errors: kInvalidArgument (not a full id), kNotFound (no such directories here: the
// container runs on another machine or in another cgroup namespace).
Result<CgroupPaths> FindContainerCgroup(std::string_view container_id, std::int64_t pid);

// The limits the files hold now.
Result<LiveLimits> ReadCgroupLimits(const CgroupPaths& paths);

// Writes PlanCgroupResize's files in order; when one fails, the ones written before it get their
// old contents back. Returns ReadCgroupLimits afterwards. Errors: kConflict (memory: the kernel
// could not reclaim the container's memory down to the new cap, EBUSY for 2 s of retries, since
// gVisor returns freed memory to the host shortly after the free; the message says how much
// it uses; pids at or below pids.current, which would end the sandbox at its next process),
// kInvalidArgument (the kernel refused a value, EINVAL), kPermissionDenied (not root), kNotFound
// (the container ended meanwhile), kInternal.
Result<LiveLimits> ApplyCgroupResize(const CgroupPaths& paths, const ResizeSpec& spec);

}  // namespace agvisor
