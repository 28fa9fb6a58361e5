#include "agvisor/sandbox/agent_blob.h"

extern "C" const char agvisor_agent_blob_begin[];
extern "C" const char agvisor_agent_blob_end[];

namespace agvisor {

std::string_view EmbeddedAgentBinary() {
  return {agvisor_agent_blob_begin,
          static_cast<std::size_t>(agvisor_agent_blob_end - agvisor_agent_blob_begin)};
}

}  // namespace agvisor
