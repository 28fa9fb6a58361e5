// agvisord's command line and lifecycle: parse options, load (or create) the token, bind the
// listeners, find the host's sandboxes by label, serve until SIGTERM/SIGINT, shut down gracefully
// (sandboxes are never stopped: they outlive the daemon).
//
// Used by apps/agvisord/main.cc. `agvisord --help` documents every option; docs/agvisord.md
// the API.
#pragma once

#include <string>

#include "agvisor/base/error.h"

namespace agvisor::server {

// The token in `path` (surrounding whitespace dropped), or a new random one (256 bits, hex)
// written there with mode 0600 when the file does not exist (`*created` set). A token file that
// group or others can read is refused. Errors: kPermissionDenied (mode), kInvalidArgument
// (empty file), kNotFound / errno codes (I/O).
Result<std::string> LoadOrCreateToken(const std::string& path, bool* created);

int DaemonMain(int argc, char** argv);

}  // namespace agvisor::server
