// The exact count of a sandbox's processes and threads, from gVisor itself, for the stats of a
// sandbox on this machine's Docker (DockerRuntime::Stats: `agvisor top`, agvisord's stats).
//
// Why: the host's pids cgroup counts gVisor's host tasks, from which the processes inside can
// only be estimated (SandboxPidsInStats, instance_spec.h), and on ptrace it is a high-water mark
// (gVisor keeps the stubs of ended processes). gVisor's sentry keeps a pids cgroup of its own per
// container ("/<container id>" in its hierarchy: the container's processes and its execs), which
// counts each task inside; `runsc read-control` reads it from the host through the sentry's
// control socket, which the sandbox cannot reach. (Writing it the same way is refused: "control
// file not writable" for pids.max with runsc 20240729 and upstream's sentry alike, so the cap
// stays the host's: docs/lifecycle.md, "pids".)
//
// Only here: runsc's state (its --root) is root's, on the Docker host's machine. Elsewhere (an
// ssh:// or tcp:// host, a client that is not root) the estimate stands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor {

// How to call the runsc that runs a sandbox: its binary and its state root.
struct RunscCall {
  std::string runsc;  // the sandbox process's own executable (/proc/PID/exe)
  std::string root;   // its --root flag: where this runsc keeps the sandbox's state
};

// Pure: RunscCall from the sandbox process's executable and its /proc/PID/cmdline (arguments
// separated by NUL bytes; "--root=DIR", "-root=DIR" or the flag then DIR). nullopt without one.
std::optional<RunscCall> RunscCallOf(std::string_view exe, std::string_view cmdline);

// Pure: the argv that reads the sentry's pids.current of container `id`.
std::vector<std::string> SentryPidsArgv(const RunscCall& call, std::string_view id);

// The processes and threads inside container `id` (its full id), whose sandbox process is `pid`
// (Docker's State.Pid), as gVisor counts them. Errors: kInvalidArgument (not a full id),
// kNotFound (no such process here, or runsc's state is not readable: another machine or not
// root), kTimeout (runsc did not answer in 5 s), kInternal (runsc's refusal, or no number).
Result<std::int64_t> ReadSentryPids(std::string_view id, std::int64_t pid);

}  // namespace agvisor
