// Exit codes of agvisor-agent: how the host tells, from a container's (or an exec's) exit code,
// why it ended. Shared by the agent and the host (sandbox/), hence in proto/. Documented in
// docs/agent.md.
#pragma once

#include <string_view>

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

// `init --idle-pause` (SandboxSpec::idle_action "pause"): at idle_ttl init does not stop; it
// writes a line on stderr (the container's log), kAgentLogPrefix + kIdlePauseTag +
// kIdlePauseIdle, and one with kIdlePauseActive when activity comes back. The host reads the last
// of them from the log's tail to decide whether to freeze the sandbox (Sandbox::List). Whatever
// runs inside can forge them: they only ever pause or spare that sandbox itself.
inline constexpr std::string_view kAgentLogPrefix = "agvisor-agent: ";  // every log line's
inline constexpr std::string_view kIdlePauseTag = "idle-pause: ";       // after kAgentLogPrefix
inline constexpr std::string_view kIdlePauseIdle = "idle";
inline constexpr std::string_view kIdlePauseActive = "active";

// `read-file`: 0 the whole file went to stdout; kReadFileExitErrorBase + N (N a proto::WireError
// value, 1..10) the file could not be read, the reason on stderr.
inline constexpr int kReadFileExitErrorBase = 64;

}  // namespace agvisor::agent
