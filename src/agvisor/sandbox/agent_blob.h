// The agvisor-agent static binary, embedded into this library at build time (agent_blob.S), so
// the host needs no file lookup to put the agent into a sandbox, locally or over ssh.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace agvisor {

// The bytes of the agent executable for this build.
std::string_view EmbeddedAgentBinary();

// FNV-1a 64 of `bytes`: how an agent build is told apart (not a security hash: the images it
// names are made by the host itself).
std::uint64_t AgentHashOf(std::string_view bytes);
// AgentHashOf(EmbeddedAgentBinary()) as 16 lower-case hex digits: names the images that carry
// this build's agent (docker_runtime/agent_image.h, kube_runtime/pod_manifest.h).
const std::string& EmbeddedAgentHash();

}  // namespace agvisor
