// E2B's network options onto agvisor's (docs/e2b.md, "Network"): E2B's egress is open by
// default; `denyOut` takes addresses and CIDRs, `allowOut` domains, addresses and CIDRs, and an
// allowed destination wins over a denied one; domains are matched on ports 80 (Host) and 443
// (SNI) only. agvisor's egress policy (docs/egress.md) is an allow list: domains and CIDRs on
// ports 80 and 443, everything else denied. So a choice is mapped when agvisor can enforce it
// exactly, and refused (kInvalidArgument for what E2B itself would call wrong, kUnsupported for
// what agvisor cannot do, each saying why) otherwise:
//   nothing, or allowInternetAccess true             -> bridge, open (as E2B)
//   allowInternetAccess false, or denyOut 0.0.0.0/0  -> network none (nothing leaves)
//   denyOut 0.0.0.0/0 + allowOut of domains          -> bridge + egress allow list, 80/443
//   allowOut 0.0.0.0/0 (allow wins), or allowOut
//     without a deny of 0.0.0.0/0                    -> bridge, open (as E2B: allow is moot)
//   an address or CIDR in allowOut under a deny-all  -> refused: E2B opens every port to it,
//                                                       agvisor's policy only 80 and 443
//   denyOut without 0.0.0.0/0 (deny some, allow the
//     rest)                                          -> refused: agvisor's policy is an allow list
//   rules (request transforms), egressProxy,
//     maskRequestHost, allowPublicTraffic false,
//     httpsPorts                                     -> refused (501): later issues
//
// Used by the REST API's create (rest.cc). Pure; unit-tested in e2b_test.cc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/egress/policy.h"

namespace agvisor::e2b {

// The create request's network fields, as parsed from its JSON.
struct E2bNetwork {
  std::optional<bool> allow_internet_access;
  std::vector<std::string> allow_out;
  std::vector<std::string> deny_out;
  // Fields agvisor refuses when present (their JSON names, for the message).
  std::vector<std::string> unsupported;
};

// What the sandbox gets: SandboxSpec::network and SandboxSpec::egress.
struct NetworkChoice {
  std::string network = "bridge";
  std::optional<egress::EgressRules> egress;
};

// Errors: kInvalidArgument (an entry that is neither a domain, an address nor a CIDR; a domain
// in denyOut), kUnsupported (what agvisor cannot enforce exactly; the message says why).
Result<NetworkChoice> MapNetwork(const E2bNetwork& network);

}  // namespace agvisor::e2b
