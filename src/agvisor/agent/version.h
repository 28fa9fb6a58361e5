// Version of the in-sandbox agent and of the host<->agent protocol it speaks.
//
// Used by `agvisor-agent version` and, later, by the channel handshake: the host refuses an agent
// whose protocol it does not know. Protocol 0 means "no channel yet": the agent only tracks
// activity on its unix socket (a connected client is activity) and carries no messages.
#pragma once

#include <string_view>

namespace agvisor::agent {

inline constexpr std::string_view kAgentVersion = "0.1.0";
inline constexpr int kProtocolVersion = 0;

}  // namespace agvisor::agent
