// Sandbox's ports (sandbox.h): a TCP connection to a port inside, over the agent channel.
#include "agvisor/sandbox/sandbox.h"

namespace agvisor {

Result<std::unique_ptr<PortStream>> Sandbox::OpenPort(std::uint16_t port) {
  if (port == 0) return Error::InvalidArgument("open port: port must be 1..65535");
  auto ch = AGVISOR_TRY(Channel());
  auto p = ch->OpenPort(port);
  if (!p.ok()) {
    // kUnavailable from the agent (nothing listens) leaves the channel intact: not a death.
    if (!ch->broken()) return p.error();
    return Diagnose(p.error());
  }
  return std::move(*p);
}

}  // namespace agvisor
