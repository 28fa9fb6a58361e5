// `agvisor-agent exec`: runs one command for the host, with a timeout that kills its whole tree.
//
// Used by agent_main.cc; the host runs it through `docker exec` until the channel protocol exists.
// It holds a connection to init's activity socket while the command runs (the sandbox is not idle
// meanwhile; no socket is fine), makes itself a child subreaper so that descendants which
// double-fork or setsid stay in its tree, and runs the command (execvp, stdio inherited) in its
// own process group.
//   - The command exits: exec exits at once with its status (code, or 128+signal). Background
//     processes it started keep running: when exec exits they are re-parented to PID 1 (init),
//     which reaps them. A server started with `&` survives the exec that started it.
//   - --timeout passes: SIGTERM to the whole tree, --grace later SIGKILL to every descendant still
//     alive, repeated until exec has no descendant left; exit 124.
//   - SIGTERM/SIGINT/SIGHUP/SIGQUIT to exec are forwarded to the command's process group.
#pragma once

#include "agvisor/agent/cli.h"

namespace agvisor::agent {

// Runs the command; returns the exit code (the command's, or kExecExit*).
int RunExec(const ExecOptions& options);

}  // namespace agvisor::agent
