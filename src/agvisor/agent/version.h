// Version of the in-sandbox agent and of the host<->agent protocol it speaks.
//
// Used by `agvisor-agent version` and the channel handshake (WELCOME carries kAgentVersion; the
// protocol version is proto::kProtocolVersion, docs/protocol.md).
#pragma once

#include <string_view>

#include "agvisor/proto/messages.h"

namespace agvisor::agent {

inline constexpr std::string_view kAgentVersion = "0.1.0";
inline constexpr int kProtocolVersion = proto::kProtocolVersion;

}  // namespace agvisor::agent
