// The activity socket: a unix stream socket served by `init`, to which `exec` (and later the
// channel relay) stays connected while it works. A connected client is activity (activity.h).
//
// Used by init.cc (Listen) and exec.cc (Connect). No bytes are exchanged yet; the channel protocol
// will run over these same connections.
#pragma once

#include <sys/types.h>

#include <string>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor::agent {

// Creates the socket's directory (and missing parents) with mode 0700, removes a stale socket
// left at `path` by an earlier run, binds and listens. Returns a non-blocking, CLOEXEC listener.
// Errors: kInvalidArgument (path too long for sockaddr_un), those of mkdir/socket/bind/listen.
Result<UniqueFd> ListenActivitySocket(const std::string& path);

// ListenActivitySocket with other modes: the directories it creates get `dir_mode`, the socket
// `socket_mode` (the sudo broker's: 0755 and 0666).
Result<UniqueFd> ListenUnixSocket(const std::string& path, mode_t dir_mode, mode_t socket_mode);

// Connects to init's socket (blocking connect, then the fd is CLOEXEC). Errors: kNotFound (no
// socket), kUnavailable (nobody listening), kInvalidArgument (path too long), connect's others.
Result<UniqueFd> ConnectActivitySocket(const std::string& path);

// The directory of `path` ("/run/agvisor" for "/run/agvisor/agent.sock", "." for "agent.sock").
std::string SocketDirectory(const std::string& path);

}  // namespace agvisor::agent
