// The agent's sudo broker (sudo.h says why and the wire format): runs, as root, the commands the
// `sudo` shim asks for. Started by init with --sudo-broker (SandboxSpec::allow_setuid).
//
// One thread accepts; each connection gets a thread of its own, up to kSudoMaxRequests at once
// (more are closed at once). A client has kSudoRequestTimeout to send its request; one that sends
// garbage, lengths beyond the bounds, no fds or nothing at all is told why on its stderr when it
// passed one, else simply closed: it never blocks the agent's event loop or another request.
//
// The command is started with clone(2) and no exit signal, so that init's waitpid(-1) (which
// reaps every other child) leaves it to its request's thread (waitpid with __WCLONE).
#pragma once

#include <chrono>
#include <string>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor::agent {

inline constexpr std::size_t kSudoMaxRequests = 64;
inline constexpr std::chrono::seconds kSudoRequestTimeout{10};

// Listens on `path` (its directory made 0755, the socket 0666) and serves it from threads of
// its own until the process ends. Errors: those of ListenUnixSocket (nothing is served then).
Result<void> StartSudoBroker(const std::string& path);

// Serves one connection to its end (what each request's thread runs; tests call it directly).
void ServeSudoConnection(UniqueFd connection);

// Makes `kSudoShimPath` a symlink to `agent_path`, unless something else is there already (an
// image's own file is left alone). Errors: those of mkdir / symlink / rename; kConflict when the
// path holds something else.
Result<void> InstallSudoShim(const std::string& agent_path);

}  // namespace agvisor::agent
