#include "agvisor/images/kube_agent_image.h"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>

#include "agvisor/base/tar.h"
#include "agvisor/docker/client.h"

namespace agvisor::images {
namespace {

// Whether `bin` is a 64-bit ELF executable that needs no program interpreter (the init container
// has no libc to load it with).
bool IsStaticElf(std::string_view bin) {
  Elf64_Ehdr eh;
  if (bin.size() < sizeof eh) return false;
  std::memcpy(&eh, bin.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) || eh.e_phentsize != sizeof(Elf64_Phdr)) {
    return false;
  }
  for (std::size_t i = 0; i < eh.e_phnum; ++i) {
    const std::size_t at = eh.e_phoff + i * sizeof(Elf64_Phdr);
    if (at > bin.size() || bin.size() - at < sizeof(Elf64_Phdr)) return false;
    Elf64_Phdr ph;
    std::memcpy(&ph, bin.data() + at, sizeof ph);
    if (ph.p_type == PT_INTERP) return false;
  }
  return true;
}

}  // namespace

Result<std::string> BuildKubeAgentImage(docker::Client& client, std::string_view agent,
                                        const KubeAgentImageOptions& options) {
  const auto colon = options.name.rfind(':');
  if (options.name.empty() || colon == std::string::npos ||
      options.name.find('/', colon) != std::string::npos) {
    return Error::InvalidArgument("agent image name '" + options.name +
                                  "': give REPO:TAG (the runtime names agvisor/agent:HASH)");
  }
  if (agent.empty()) return Error::InvalidArgument("the agent binary is empty");
  std::ifstream in(options.busybox, std::ios::binary);
  if (!in) {
    return Error::NotFound("no busybox at " + options.busybox +
                           " (apt-get install busybox-static, or name one with --busybox)");
  }
  const std::string busybox((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!IsStaticElf(busybox)) {
    return Error::InvalidArgument(options.busybox +
                                  " is not a statically linked 64-bit executable: the init "
                                  "container has no libc (apt-get install busybox-static)");
  }
  TarWriter w;
  AGVISOR_RETURN_IF_ERROR(w.AddDirectory("bin", 0755));
  AGVISOR_RETURN_IF_ERROR(w.AddFile("bin/busybox", busybox, 0755));
  AGVISOR_RETURN_IF_ERROR(w.AddFile("agvisor-agent", agent, 0755));
  const std::string tar = w.Finish();
  std::size_t sent = 0;
  http::BodySource source = [&](std::span<char> buf) -> Result<std::size_t> {
    const std::size_t n = std::min(buf.size(), tar.size() - sent);
    std::memcpy(buf.data(), tar.data() + sent, n);
    sent += n;
    return n;
  };
  auto say = [&](std::string_view line) {
    if (options.progress && !line.empty()) options.progress(line);
  };
  say("importing " + options.name + " (the agent, " + std::to_string(agent.size()) +
      " bytes, and busybox from " + options.busybox + ")");
  // The image this one replaces under the name: removed after, not left behind untagged.
  auto before = client.InspectImage(options.name);
  auto id =
      client.ImportImage(options.name.substr(0, colon), options.name.substr(colon + 1), source,
                         [&](std::string_view line) { say("docker: " + std::string(line)); });
  if (!id.ok()) return id.error().WithContext("import image " + options.name);
  if (before.ok() && before->id != *id) (void)client.RemoveImage(before->id);
  return id;
}

}  // namespace agvisor::images
