// `agvisor-agent connect`: the relay the host runs with `docker exec -i` to open a channel
// session on init's unix socket (docs/protocol.md, "How a client reaches the agent").
//
// Used by agent_main.cc. Copies stdin -> socket and socket -> stdout, byte for byte (it adds no
// framing: the host and init speak the protocol through it), with non-blocking fds, poll(2) and a
// 64 KiB buffer per direction, so neither direction can stall the other. stdin EOF half-closes
// the socket (init then ends the session and closes, which ends the relay); socket EOF or a
// failing stdout ends the relay at once.
#pragma once

#include "agvisor/agent/cli.h"

namespace agvisor::agent {

// Returns the exit code: 0 when the relay ended, 1 when the socket could not be reached.
int RunConnect(const ConnectOptions& options);

}  // namespace agvisor::agent
