// `agvisor-agent init`: PID 1 of a sandbox.
//
// Used by agent_main.cc. Reaps every zombie (as PID 1 orphans come to it; when not PID 1, e.g. in
// tests, it makes itself a child subreaper so orphans of its descendants still do), serves the
// activity socket, and stops the sandbox itself when --lifetime or --idle-ttl is reached or on
// SIGTERM/SIGINT: logs the reason, writes it to <socket dir>/exit-reason, SIGTERMs every process
// (all of the PID namespace as PID 1, else its descendants), waits up to 1 s, SIGKILLs what is
// left and exits with the code of exit_codes.h.
#pragma once

#include "agvisor/agent/cli.h"

namespace agvisor::agent {

// Runs until the sandbox stops; returns the process exit code (kInitExit*).
int RunInit(const InitOptions& options);

}  // namespace agvisor::agent
