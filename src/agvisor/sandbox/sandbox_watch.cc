// Sandbox's directory watches (sandbox.h): inotify in the agent, events over the channel.
#include "agvisor/sandbox/sandbox.h"

namespace agvisor {

Result<std::unique_ptr<WatchStream>> Sandbox::Watch(std::string_view path, bool recursive) {
  if (path.empty() || path.front() != '/') {
    return Error::InvalidArgument("watch: sandbox path '" + std::string(path) +
                                  "' must be absolute");
  }
  auto ch = AGVISOR_TRY(Channel());
  auto w = ch->Watch(path, recursive);
  if (!w.ok()) {
    // The agent's answer (no such directory, not one, ...) leaves the channel intact.
    if (!ch->broken()) return w.error();
    return Diagnose(w.error());
  }
  return std::move(*w);
}

}  // namespace agvisor
