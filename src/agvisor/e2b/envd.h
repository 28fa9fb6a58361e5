// envd, the in-sandbox daemon E2B's SDK talks to for processes and files (docs/e2b.md, "envd"),
// served by agvisord on the sandbox's agvisor handle: Connect's Process and Filesystem services
// (POST /process.Process/<Method>, POST /filesystem.Filesystem/<Method>, JSON codec) and the HTTP
// routes (GET/POST /files, GET /health).
//
// e2b/mount.cc routes every envd request here after it authenticated it (the sandbox named by
// E2b-Sandbox-Id exists and X-Access-Token is its token, or a signed file URL checked against
// it), so nothing here checks credentials again or looks at another sandbox than `call.sandbox`.
#pragma once

#include <map>
#include <string>

#include "agvisor/api/router.h"
#include "agvisor/client/handle_cache.h"
#include "agvisor/server/server.h"

namespace agvisor::e2b {

struct EnvdCall {
  client::HandleCache& sandboxes;  // the daemon's place and shared handles
  std::string sandbox;             // agvisor's container name ("agvisor-<id>")
  std::string id;                  // the E2B sandbox id
  std::string user;                // Authorization: Basic user (default "user"), or the URL's
  std::string access_token;        // this sandbox's envd token (for signed URLs)
  bool signed_url = false;         // authenticated by a file URL's signature, not the header
  // The create request's envVars: every process's environment starts from them.
  std::map<std::string, std::string> envs;
};

// Serves one envd request (the route's path as registered by mount.cc, relative to the envd
// root) that mount.cc authenticated. Streams (Process.Start/Connect, Filesystem.WatchDir, file
// bodies) go through `stream`.
server::HttpResponse ServeEnvd(const EnvdCall& call, const server::HttpRequest& req,
                               const api::RouteMatch& match, server::HttpStream& stream);

}  // namespace agvisor::e2b
