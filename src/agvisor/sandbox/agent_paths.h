// Where the agent lives inside every sandbox, and the capabilities its processes may hold: facts
// shared by the sandbox's container (instance_spec.h), the image the agent is added to
// (agent_image.h), Sandbox's relays and execs, and the runtimes. Constants only.
#pragma once

#include <array>
#include <string_view>

namespace agvisor {

inline constexpr std::string_view kAgentDir = "/.agvisor";
inline constexpr std::string_view kAgentPath = "/.agvisor/agvisor-agent";
// A sandbox with brokered secrets (docs/egress.md, "Secrets"): the sandbox CA's certificate
// arrives in this env var; the agent writes it at start to the file NODE_EXTRA_CA_CERTS names
// and, after the image's own trust store, to the bundle SSL_CERT_FILE names (both under
// kAgentDir: the paths below), then drops the variable from its own environment.
inline constexpr std::string_view kSandboxCaEnv = "AGVISOR_SANDBOX_CA";
inline constexpr std::string_view kSandboxCaPath = "/.agvisor/sandbox-ca.pem";
inline constexpr std::string_view kSandboxCaBundlePath = "/.agvisor/ca-bundle.pem";
// The only capabilities a sandbox's processes may hold: every container starts from CapDrop ALL
// and gets back these (docs/security.md, "Capabilities", says why each is kept and why Docker's
// other defaults, FSETID, NET_RAW, MKNOD, SYS_CHROOT, AUDIT_WRITE, SETFCAP and SETPCAP, are not).
// Enough for root inside to install packages (dpkg, Python wheels), chown files, switch users
// (su, the agent's `user=` execs, the desktop's user), signal any process of the sandbox and
// serve on a port below 1024.
inline constexpr std::array<std::string_view, 7> kSandboxCapabilities = {
    "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE"};

}  // namespace agvisor
