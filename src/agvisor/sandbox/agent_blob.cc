#include "agvisor/sandbox/agent_blob.h"

#include <cstdio>

extern "C" const char agvisor_agent_blob_begin[];
extern "C" const char agvisor_agent_blob_end[];

namespace agvisor {

std::string_view EmbeddedAgentBinary() {
  return {agvisor_agent_blob_begin,
          static_cast<std::size_t>(agvisor_agent_blob_end - agvisor_agent_blob_begin)};
}

std::uint64_t AgentHashOf(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

const std::string& EmbeddedAgentHash() {
  static const std::string h = [] {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx",
                  static_cast<unsigned long long>(AgentHashOf(EmbeddedAgentBinary())));
    return std::string(buf);
  }();
  return h;
}

}  // namespace agvisor
