// One message of a WebSocket, as both ends of agvisord's streams see it: the daemon's handlers
// (server/server.h) and its client (client/agvisord_api.cc). Beast-free; the blocking calls that
// move these messages over a Beast stream are in ws_sync.h, for .cc files.
#pragma once

#include <string>

namespace agvisor::http {

struct WsMessage {
  bool binary = false;
  std::string data;
};

}  // namespace agvisor::http
