// Where agvisord's socket and token live by default: shared by the daemon (server/daemon.cc),
// which makes them, and its clients (client/agvisord.cc), which must find the same token file
// without linking the daemon. Reads the environment and the effective uid only.
#pragma once

#include <string>

#include "agvisor/base/error.h"

namespace agvisor::api {

// root's defaults, also what a client assumes for the agvisord of a remote (ssh://) host, where
// agvisord runs as root to enforce egress policies.
inline constexpr const char* kRootSocketPath = "/run/agvisord.sock";
inline constexpr const char* kRootTokenPath = "/var/lib/agvisor/agvisord.token";

// Where a unix socket goes by default: /run/agvisord.sock for root, else
// $XDG_RUNTIME_DIR/agvisord.sock. Errors: kNotFound (not root and no XDG_RUNTIME_DIR).
Result<std::string> DefaultSocketPath();
// Where the token lives by default: /var/lib/agvisor/agvisord.token for root, else
// $XDG_CONFIG_HOME/agvisor/agvisord.token (~/.config/... when unset).
std::string DefaultTokenPath();

}  // namespace agvisor::api
