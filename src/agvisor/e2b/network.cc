#include "agvisor/e2b/network.h"

#include <algorithm>

#include "agvisor/base/strings.h"
#include "agvisor/egress/address.h"

namespace agvisor::e2b {

namespace {

constexpr std::string_view kAllTraffic = "0.0.0.0/0";  // E2B's ALL_TRAFFIC

bool IsAddressOrCidr(std::string_view entry) { return egress::ParseCidr(entry).ok(); }

std::string Shown(std::string_view entry) {
  return "'" + EscapeForTerminal(entry.substr(0, 200)) + "'";
}

}  // namespace

Result<NetworkChoice> MapNetwork(const E2bNetwork& n) {
  if (!n.unsupported.empty()) {
    std::string fields;
    for (const auto& f : n.unsupported) fields += (fields.empty() ? "" : ", ") + f;
    return Error::Unsupported(
        "network " + fields +
        ": not available on agvisor (request transforms are not mapped onto agvisor's brokered "
        "secrets: `agvisor create --secret`, docs/egress.md; agvisor's ports are reached "
        "through agvisord, see docs/e2b.md)");
  }
  for (const auto& d : n.deny_out) {
    if (!IsAddressOrCidr(d)) {
      return Error::InvalidArgument("network.denyOut " + Shown(d) +
                                    ": denyOut takes IP addresses and CIDRs only (E2B's rule)");
    }
  }
  const bool deny_all =
      std::find(n.deny_out.begin(), n.deny_out.end(), kAllTraffic) != n.deny_out.end();
  const bool allow_all =
      std::find(n.allow_out.begin(), n.allow_out.end(), kAllTraffic) != n.allow_out.end();
  NetworkChoice out;
  if (n.allow_internet_access == false) {
    // E2B: the same as denyOut ALL_TRAFFIC; an allowOut beside it still wins there.
    if (n.allow_out.empty()) {
      out.network = "none";
      return out;
    }
  } else if (!deny_all) {
    if (!n.deny_out.empty() && !allow_all) {
      return Error::Unsupported(
          "network.denyOut without " + std::string(kAllTraffic) +
          ": agvisor's egress policy is an allow list, it cannot deny some destinations and "
          "open the rest; deny " +
          std::string(kAllTraffic) + " and list what is allowed in allowOut");
    }
    return out;  // open, as E2B's default (an allow list is moot without a deny)
  }
  if (allow_all) return out;
  if (n.allow_out.empty()) {
    out.network = "none";
    return out;
  }
  egress::EgressRules rules;
  for (const auto& a : n.allow_out) {
    if (IsAddressOrCidr(a)) {
      return Error::Unsupported(
          "network.allowOut " + Shown(a) +
          ": E2B opens every port of an allowed address, agvisor's egress policy ports 80 and "
          "443 only; allow domains here, or use agvisor's own egress API (docs/egress.md)");
    }
    rules.allow_domains.push_back(a);
  }
  out.egress = std::move(rules);
  return out;
}

}  // namespace agvisor::e2b
