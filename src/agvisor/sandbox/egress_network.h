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

// Whether sandboxes with egress policies can be made on Docker host `host` ("" = $DOCKER_HOST
// or the local socket): the local one and ssh:// hosts (agvisord runs on that host; its enforcer
// is checked over ssh). kUnsupported for tcp:// (nothing here can check the enforcer there: reach
// the host over ssh://) and for Kubernetes (kube:); kInvalidArgument for a malformed host.
Result<void> CheckEgressHost(std::string_view host);

// Waits until something accepts on gateway:kEgressProxyPort (an address of this machine).
// kUnavailable, saying how to start agvisord, when nothing does within `wait`.
Result<void> WaitForEnforcer(std::string_view gateway, std::chrono::milliseconds wait);
// The same for a sandbox on Docker host `host`: on the local host as above; on an ssh:// host the
// gateway is dialled from that host through ssh (`ssh -W`, options from $AGVISOR_SSH_ARGS), once
// per 100 ms until it answers. kUnavailable saying to start agvisord on that host when nothing
// answers within `wait`, or with ssh's own message when ssh cannot reach the host.
Result<void> WaitForEnforcer(std::string_view host, std::string_view gateway,
                             std::chrono::milliseconds wait);

}  // namespace agvisor
