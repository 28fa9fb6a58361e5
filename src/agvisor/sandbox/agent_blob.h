// The agvisor-agent static binary, embedded into this library at build time (agent_blob.S), so
// the host needs no file lookup to put the agent into a sandbox, locally or over ssh.
#pragma once

#include <string_view>

namespace agvisor {

// The bytes of the agent executable for this build.
std::string_view EmbeddedAgentBinary();

}  // namespace agvisor
