// Relays a local connection and a port stream into a sandbox both ways: `agvisor port-forward`,
// `agvisor desktop`'s viewers (cli/) and the E2B door's sandbox hosts (e2b/mount.cc).
#pragma once

#include <memory>

#include "agvisor/client/place.h"

namespace agvisor::client {

// Relays the connection `fd` and `port` (a stream into a sandbox's port) both ways until either
// side ends, then closes both. Blocks: run it on a thread of its own.
void RelayPortConnection(std::shared_ptr<ByteStream> port, int fd);

}  // namespace agvisor::client
