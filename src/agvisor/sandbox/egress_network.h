// The network of a sandbox with an egress policy (docs/egress.md): an internal Docker bridge of
// its own, named agve<hex> on the host, whose only reachable address is its gateway, where the
// enforcer (agvisord's egress host) listens. Docker routes nothing out of an internal bridge and
// scripts/sandbox-firewall rejects everything from agve+ bridges to the host except what the
// enforcer allowed for its own address: with no enforcer there is no way out (fail closed).
//
// The policy travels in the network's labels (and the container's, for `agvisor ls`), so an
// enforcer that starts later, or again, serves every such network on its host.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/egress/policy.h"

namespace agvisor {
// On the network and the container: the rules (egress::EncodeEgressRules).
inline constexpr std::string_view kLabelEgress = "agvisor.egress";
// On the network: the container it was made for.
inline constexpr std::string_view kLabelEgressSandbox = "agvisor.egress.sandbox";
// The bindings of a sandbox's brokered secrets, without their values (EncodeSecretBindings,
// spec.h): the enforcer finds the values its broker keeps by them.
inline constexpr std::string_view kLabelEgressSecrets = "agvisor.egress.secrets";
// The enforcer's ports on the gateway: an explicit proxy (HTTP_PROXY/HTTPS_PROXY point here;
// CONNECT and absolute-form), and 80/443 for clients that ignore proxy variables and connect to
// the address the in-sandbox resolver (udp 53) answered.
inline constexpr std::uint16_t kEgressProxyPort = 3128;
inline constexpr std::uint16_t kEgressHttpPort = 80;
inline constexpr std::uint16_t kEgressTlsPort = 443;
inline constexpr std::uint16_t kEgressDnsPort = 53;
// Host bridge names of egress networks: this prefix and 10 hex digits (15 characters at most).
inline constexpr std::string_view kEgressBridgePrefix = "agve";

// Docker's name for the egress network of `container_name` (docker_runtime/egress_bridge.h).
std::string EgressNetworkName(std::string_view container_name);

// HTTP_PROXY and friends for a sandbox behind the enforcer at `gateway`.
std::vector<std::string> EgressProxyEnv(std::string_view gateway);

// Waits until something accepts on gateway:kEgressProxyPort (an address of this machine).
// kUnavailable, saying how to start agvisord, when nothing does within `wait`.
Result<void> WaitForEnforcer(std::string_view gateway, std::chrono::milliseconds wait);
// The same for a sandbox on Docker host `host`: on the local host as above; on an ssh:// host the
// gateway is dialled from that host through ssh (`ssh -W`, options from $AGVISOR_SSH_ARGS), once
// per 100 ms until it answers. kUnavailable saying to start agvisord on that host when nothing
// answers within `wait`, or with ssh's own message when ssh cannot reach the host.
Result<void> WaitForEnforcer(std::string_view host, std::string_view gateway,
                             std::chrono::milliseconds wait);

// ---- The sandbox firewall's state on a Docker host (docs/security.md, "The sandbox firewall")
// ---- Its rules do not survive a reboot or an iptables flush, and without them a bridge sandbox
// reaches the host's services and an egress sandbox every port of its gateway. So the host keeps
// one small file saying whether they are in place, for this boot: scripts/sandbox-firewall writes
// it (block, unblock, status, external) and so does agvisord, which checks the rules itself at
// start and every few seconds (server/egress_host.h). Creates read it (no probe per create) and
// are refused while it says the host is unprotected.
//
//   boot 114c4900-2f25-49bd-ab4a-43678c47e69c     (/proc/sys/kernel/random/boot_id)
//   state protected | unprotected | external
//   detail what is missing (one line, optional)
//
// "external" is the opt-out of a host whose sandboxes are isolated by other means: written by
// `scripts/sandbox-firewall external`, never overwritten by agvisord.
inline constexpr std::string_view kFirewallStateFile = "/run/agvisor/sandbox-firewall.state";
// The file's path: $AGVISOR_FIREWALL_STATE when set (for tests: another file, so that a test can
// say "unprotected" without touching the host's rules or other runs), else kFirewallStateFile.
std::string FirewallStatePath();

enum class FirewallState { kUnknown, kProtected, kUnprotected, kExternal };
struct FirewallStatus {
  FirewallState state = FirewallState::kUnknown;
  std::string detail;
};
// This machine's boot id ("" when it cannot be read).
std::string CurrentBootId();
// The file's text as of boot `boot_id`: kUnknown when it is empty, malformed or of another boot.
FirewallStatus ParseFirewallState(std::string_view text, std::string_view boot_id);
std::string FormatFirewallState(const FirewallStatus& status, std::string_view boot_id);
// Writes the file for this boot (atomically: a temporary file renamed over it), making its
// directory. Errors: kUnavailable with the path.
Result<void> WriteFirewallState(const FirewallStatus& status);
// What the file of Docker host `host` says now: read here for the local host; on an ssh:// host
// over ssh (`cat`: DockerRuntime::Firewall keeps that answer a minute); kUnknown for tcp:// and
// other addresses (no file to read) and when ssh fails.
FirewallStatus HostFirewallStatus(std::string_view host);
// kUnavailable when `status` says the host is unprotected, naming the fix
// (`scripts/sandbox-firewall block` as root on that host) and the opt-out
// (`scripts/sandbox-firewall external`). Used by every create of a sandbox with a network
// (DockerRuntime), before anything is made.
Result<void> RequireFirewall(std::string_view host, const FirewallStatus& status);

}  // namespace agvisor
