// /etc/hosts of a sandbox without a Docker network.
//
// Docker bind-mounts an /etc/hosts naming localhost into every container it gives a network,
// `none` included. A sandbox with network none on a host that registers the runtime's "-none"
// twin (runsc --network=none: gVisor's own loopback) is created with NetworkDisabled instead
// (no libnetwork prestart hook, a faster start: sandbox/sandbox.cc), and then /etc/hosts is the
// empty file of the container's init layer: `localhost` would not resolve. init fills it.
#pragma once

#include <string>

#include "agvisor/base/error.h"

namespace agvisor::agent {

// The lines written: the loopback names Docker writes for network none.
inline constexpr char kLocalhostLines[] =
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n";

// Writes kLocalhostLines to `path` when the file exists and is empty; a missing or non-empty
// file is left alone. Returns whether it wrote.
Result<bool> FillEmptyHostsFile(const std::string& path);

}  // namespace agvisor::agent
