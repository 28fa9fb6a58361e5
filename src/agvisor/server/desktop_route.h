// Mounts the desktop gateway (src/agvisor/gateway) on agvisord's server as the WebSocket route
// GET /v1/desktop/ws (docs/desktop-gateway.md). Auth is the desktop token, not the bearer token:
// a browser cannot send an Authorization header on a WebSocket.
//
// Used by daemon.cc (--desktop-key-file) and the gateway's integration test.
#pragma once

#include "agvisor/base/error.h"
#include "agvisor/gateway/gateway.h"
#include "agvisor/server/server.h"

namespace agvisor::server {

inline constexpr std::string_view kDesktopRoutePath = "/v1/desktop/ws";

// Adds the route; the gateway lives as long as the server's handlers. Errors: those of
// Server::AddWebSocketRoute (kConflict when mounted twice).
Result<void> MountDesktopGateway(Server& server, gateway::GatewayOptions options);

}  // namespace agvisor::server
