#include "agvisor/egress/learn.h"

#include <algorithm>
#include <set>

namespace agvisor::egress {

Result<EgressRules> SuggestRules(const EgressRules& current, const LearnedDestinations& seen) {
  EgressRules enforcing = current;
  enforcing.mode.clear();
  const EgressPolicy policy = AGVISOR_TRY(EgressPolicy::Create(enforcing));
  EgressRules out = policy.Rules();
  std::set<std::uint16_t> ports = policy.ports();
  bool ports_added = false;
  for (const LearnedDestination& d : seen.kept) {
    auto target = TargetFromHost(d.name, d.port);
    if (!target.ok() || d.port == 0) continue;  // the log holds what the proxy decided on
    if (!policy.ports().contains(d.port)) ports_added = ports.insert(d.port).second || ports_added;
    if (target->literal) {
      const bool v4 = target->literal->is_v4();
      const Cidr exact{.base = *target->literal, .prefix = v4 ? 32 : 128};
      const bool covered = std::any_of(policy.cidrs().begin(), policy.cidrs().end(),
                                       [&](const Cidr& c) { return c.Contains(exact.base); });
      if (!covered) out.allow_cidrs.push_back(FormatCidr(exact));
      continue;
    }
    const bool denied = std::any_of(policy.deny_domains().begin(), policy.deny_domains().end(),
                                    [&](const DomainPattern& p) { return p.Matches(d.name); });
    if (!denied && !policy.DecideName(d.name).allowed) out.allow_domains.push_back(d.name);
  }
  // The default ports stay unwritten (a canonical policy writes them out: read them back).
  const std::set<std::uint16_t> defaults(std::begin(EgressPolicy::kDefaultPorts),
                                         std::end(EgressPolicy::kDefaultPorts));
  out.ports.clear();
  if (ports_added || policy.ports() != defaults) out.ports.assign(ports.begin(), ports.end());
  const std::vector<std::uint16_t> ports_as_given = out.ports;
  EgressRules canonical = AGVISOR_TRY(EgressPolicy::Create(out)).Rules();  // sorted, no repeats
  canonical.ports = ports_as_given;
  return canonical;
}

std::string FormatEgressFlags(const EgressRules& rules) {
  std::string out;
  auto add = [&out](std::string_view flag, const std::string& value) {
    if (!out.empty()) out += ' ';
    out += std::string(flag) + ' ';
    // Rules hold letters, digits, '-', '.', ':', '/' and a leading '*' only (EgressPolicy::Create
    // checks them): the '*' is the one character a shell would expand.
    out += value.find('*') == std::string::npos ? value : "'" + value + "'";
  };
  for (const std::string& d : rules.allow_domains) add("--allow-domain", d);
  for (const std::string& c : rules.allow_cidrs) add("--allow-cidr", c);
  for (std::uint16_t p : rules.ports) add("--allow-port", std::to_string(p));
  for (const std::string& d : rules.deny_domains) add("--deny-domain", d);
  if (rules.mode == kEgressModeLearn) add("--egress", rules.mode);
  return out;
}

}  // namespace agvisor::egress
