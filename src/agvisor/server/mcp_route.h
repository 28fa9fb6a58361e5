// Mounts the MCP server (mcp/session.h, docs/mcp.md) on agvisord as /mcp, the streamable HTTP
// transport: POST a JSON-RPC message, get the answer as application/json, or as a
// text/event-stream (progress notifications, then the answer) when the request carries a
// progressToken. The bearer token is checked as on every agvisord route. `initialize` opens a
// session (the Mcp-Session-Id header of its answer, required on later requests: 400 without,
// 404 for one this daemon does not know); DELETE /mcp ends it and removes its sandboxes; GET
// answers 405 (no server-initiated stream). Tools run in the daemon on an in-process place, so
// the desktop tools work here too: the daemon's one place, whose handles its sessions share
// with the API's routes and the desktop gateway.
//
// Before the token's use, as the transport asks of servers: a request with an Origin header
// (a browser's) whose origin is not loopback (McpOriginAllowed) is refused with 403, which keeps
// a web page that reaches a loopback agvisord through DNS rebinding out; a request whose
// MCP-Protocol-Version header names a version this server does not speak
// (mcp::kProtocolVersions) gets 400. Without the header the version agreed at initialize holds.
//
// Used by daemon.cc and the MCP interoperability test (web/test/mcp.test.mjs).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/client/handle_cache.h"
#include "agvisor/mcp/session.h"
#include "agvisor/server/server.h"

namespace agvisor::server {

inline constexpr std::string_view kMcpRoutePath = "/mcp";

struct McpRouteOptions {
  // The daemon's place and handles (null: an in-process place on $DOCKER_HOST, for tests).
  std::shared_ptr<client::HandleCache> sandboxes;
  mcp::SessionOptions session;
  // Sessions kept at once; a new one past it forgets the least recently used (its sandboxes
  // end at their lifetime).
  std::size_t max_sessions = 64;
};

// Whether a browser page of `origin` (the Origin header) may use /mcp: "" (not a browser: an MCP
// client, curl), or http(s) on a loopback host (localhost, 127.0.0.0/8, [::1]) with any port or
// none. Anything else ("null", another host, a path, a userinfo part) is refused. Compared
// without case.
bool McpOriginAllowed(std::string_view origin);

// Adds POST, GET and DELETE /mcp. Errors: those of Server::AddStreamRoute / AddHttpRoute
// (kConflict when mounted twice).
Result<void> MountMcp(Server& server, McpRouteOptions options);

}  // namespace agvisor::server
