// Mounts the MCP server (mcp/session.h, docs/mcp.md) on agvisord as /mcp, the streamable HTTP
// transport: POST a JSON-RPC message, get the answer as application/json, or as a
// text/event-stream (progress notifications, then the answer) when the request carries a
// progressToken. The bearer token is checked as on every agvisord route. `initialize` opens a
// session (the Mcp-Session-Id header of its answer, required on later requests: 400 without,
// 404 for one this daemon does not know); DELETE /mcp ends it and removes its sandboxes; GET
// answers 405 (no server-initiated stream). Tools run in the daemon on an in-process place, so
// the desktop tools work here too.
//
// Used by daemon.cc and the MCP interoperability test (web/test/mcp.test.mjs).
#pragma once

#include <cstddef>
#include <string>

#include "agvisor/base/error.h"
#include "agvisor/mcp/session.h"
#include "agvisor/server/server.h"

namespace agvisor::server {

inline constexpr std::string_view kMcpRoutePath = "/mcp";

struct McpRouteOptions {
  std::string docker_host;  // "" = $DOCKER_HOST or the local socket
  mcp::SessionOptions session;
  // Sessions kept at once; a new one past it forgets the least recently used (its sandboxes
  // end at their lifetime).
  std::size_t max_sessions = 64;
};

// Adds POST, GET and DELETE /mcp. Errors: those of Server::AddStreamRoute / AddHttpRoute
// (kConflict when mounted twice).
Result<void> MountMcp(Server& server, McpRouteOptions options);

}  // namespace agvisor::server
