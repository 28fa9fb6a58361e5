// The E2B door (docs/e2b.md): E2B's REST API and envd on agvisord, so the official `e2b` SDK
// runs unchanged against it with three variables:
//   E2B_API_URL=http://HOST:PORT/e2b   E2B_SANDBOX_URL=http://HOST:PORT   E2B_API_KEY=e2b_<token>
// The REST API sits under /e2b (kApiPrefix); envd's routes sit at the root of the same listener
// (/process.Process/*, /filesystem.Filesystem/*, /files, /health), because the SDK builds file
// URLs as new URL("/files", E2B_SANDBOX_URL), which drops any path of that URL.
//
// A front end like the CLI or MCP: it reaches sandboxes only through client::Place and its
// shared handles (client/handle_cache.h), never the Sandbox class or Docker.
//
// Used by server/daemon.cc (`agvisord --e2b`).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/client/handle_cache.h"
#include "agvisor/server/server.h"

namespace agvisor::e2b {

inline constexpr std::string_view kApiPrefix = "/e2b";
// The envd version sandboxes report (the create response's envdVersion): the SDK gates features
// on it (0.5.2 closing stdin, 0.5.7 octet-stream uploads, 0.6.2 file metadata, 0.6.3 and 0.6.4
// watch options); this one passes every gate of the pinned SDK (e2b 2.51.0).
inline constexpr std::string_view kEnvdVersion = "0.6.4";

struct E2bOptions {
  // agvisord's bearer token: the API key is "e2b_" + it, envd tokens are derived from it.
  std::string secret;
  // The `domain` sandboxes report, with which the SDK's getHost(port) makes "PORT-ID.DOMAIN"
  // (docs/e2b.md, "Ports"). "" = the Host header the client reached agvisord with.
  std::string domain;
  // The image of E2B's `base` template (agvisor image build e2b-base).
  std::string base_image = "agvisor/e2b-base";
  // Where E2B's record of each sandbox (template, metadata, envs, timeout, lifecycle) is kept
  // across restarts, a file per sandbox, mode 0600 in a 0700 directory; "" = in memory only.
  std::string state_dir;
};

// Registers every E2B route on `server` (auth=false for agvisord's bearer token: E2B's own
// credentials are checked here, and Server::AddCredential counts them for the connection
// bookkeeping) and starts the timeout sweep. Errors: those of Server::AddHttpRoute /
// AddStreamRoute (kConflict when mounted twice), kInvalidArgument (an empty secret), the state
// directory's (errno codes).
Result<void> Mount(server::Server& server, std::shared_ptr<client::HandleCache> sandboxes,
                   E2bOptions options);

}  // namespace agvisor::e2b
