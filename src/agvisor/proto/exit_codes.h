// Exit codes of agvisor-agent: how the host tells, from a container's (or an exec's) exit code,
// why it ended. Shared by the agent and the host (sandbox/), hence in proto/. Documented in
// docs/agent.md.
#pragma once

namespace agvisor::agent {

// `init` (PID 1: the container's exit code).
inline constexpr int kInitExitSignal = 0;    // stopped by SIGTERM/SIGINT (e.g. `docker stop`)
inline constexpr int kInitExitSetup = 1;     // could not start (signals, activity socket, ...)
inline constexpr int kExitUsage = 2;         // bad command line (any subcommand but exec)
inline constexpr int kInitExitLifetime = 3;  // --lifetime reached
inline constexpr int kInitExitIdle = 4;      // --idle-ttl reached with no client connected

// `exec` (the command's own code otherwise; the GNU timeout / POSIX shell conventions).
inline constexpr int kExecExitTimeout = 124;     // --timeout reached; the whole tree was killed
inline constexpr int kExecExitAgent = 125;       // exec's own failure (usage, --cwd, fork, ...)
inline constexpr int kExecExitCannotRun = 126;   // the program exists but cannot be executed
inline constexpr int kExecExitNotFound = 127;    // no such program
inline constexpr int kExecExitSignalBase = 128;  // + N: the command was killed by signal N

// `read-file`: 0 the whole file went to stdout; kReadFileExitErrorBase + N (N a proto::WireError
// value, 1..10) the file could not be read, the reason on stderr.
inline constexpr int kReadFileExitErrorBase = 64;

}  // namespace agvisor::agent
