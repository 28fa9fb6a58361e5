// One message of a WebSocket, as both ends of agvisord's streams see it: the daemon's handlers
// (server/server.h) and its client (client/agvisord_api.cc); and an accepted WebSocket, as the
// daemon's handlers and the desktop gateway (gateway/gateway.h) use it. Beast-free; the blocking
// calls that move these messages over a Beast stream are in ws_sync.h, for .cc files.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::http {

struct WsMessage {
  bool binary = false;
  std::string data;
};

// An accepted WebSocket (agvisord's, the gateway's standalone listener's). Send and Receive may
// be called from two threads at once (one sender at a time; one receiver at a time); Close from
// any thread.
class WebSocket {
 public:
  virtual ~WebSocket() = default;
  // Sends one message; blocks until it is written. Errors: kUnavailable (the connection is
  // closed or broke).
  virtual Result<void> Send(std::string_view data, bool binary) = 0;
  // The next message; nullopt once the peer closed. Errors: kUnavailable (broken), kTimeout.
  virtual Result<std::optional<WsMessage>> Receive() = 0;
  // Sends a close frame (RFC 6455 code, e.g. 1000 normal, 1001 going away, 1008 policy, 1011
  // error; `reason` at most 123 bytes) and ends the connection. Idempotent.
  virtual void Close(int code, std::string_view reason) = 0;
  // Sends the close frame if it goes out without waiting and ends the connection at once, with
  // no wait for the peer's close frame: for peers refused before they proved anything (a peer
  // that never answers would otherwise hold the connection for Close's whole wait).
  virtual void CloseAtOnce(int code, std::string_view reason) = 0;
  // The route's own check accepted the peer (the desktop gateway's token, for a route without
  // the server's bearer token): the server stops counting the connection as unauthenticated,
  // the kind it closes to make room (ServerOptions::max_unauthenticated). No-op elsewhere.
  virtual void MarkAuthenticated() {}
};

}  // namespace agvisor::http
