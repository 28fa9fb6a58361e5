#include "agvisor/egress/policy.h"

namespace agvisor::egress {

bool DomainPattern::Matches(std::string_view name) const {
  if (!wildcard) return name == suffix;
  // A strict subdomain: at least one label, then ".", then the suffix.
  return name.size() > suffix.size() + 1 && name.ends_with(suffix) &&
         name[name.size() - suffix.size() - 1] == '.';
}

Result<DomainPattern> ParseDomainPattern(std::string_view text) {
  auto bad = [&](std::string_view why) { return InvalidValue("domain rule", text, why); };
  DomainPattern pattern;
  std::string_view rest = text;
  if (rest.starts_with("*.")) {
    pattern.wildcard = true;
    rest.remove_prefix(2);
  }
  if (rest.find('*') != std::string_view::npos || rest.empty()) {
    return bad("'*' may only be a whole first label, as in *.example.com");
  }
  if (ParseIpAddress(rest).ok()) return bad("an IP address is not a domain; use a CIDR rule");
  auto name = NormalizeHostName(rest);
  if (!name.ok()) return bad(name.error().message());
  if (pattern.wildcard && name->find('.') == std::string::npos) {
    return bad("a wildcard over a whole top-level domain is not allowed");
  }
  pattern.suffix = *name;
  return pattern;
}

Result<EgressPolicy> EgressPolicy::Create(const EgressRules& rules) {
  if (!rules.mode.empty() && rules.mode != kEgressModeEnforce && rules.mode != kEgressModeLearn) {
    return InvalidValue("egress mode", rules.mode,
                        "expected enforce (refuse what no rule allows; the default) or learn "
                        "(let it through and log it, to draw a policy from a trusted run: "
                        "docs/egress.md, \"Learn mode\")");
  }
  EgressPolicy policy =
      AGVISOR_TRY(Create(rules.allow_domains, rules.allow_cidrs, rules.ports, rules.deny_domains));
  policy.learn_ = rules.mode == kEgressModeLearn;
  return policy;
}

Result<EgressPolicy> EgressPolicy::Create(std::span<const std::string> allow_domains,
                                          std::span<const std::string> allow_cidrs,
                                          std::span<const std::uint16_t> ports,
                                          std::span<const std::string> deny_domains) {
  if (allow_domains.size() + allow_cidrs.size() + ports.size() + deny_domains.size() >
      kMaxEgressRules) {
    return Error::InvalidArgument("egress policy: more than " + std::to_string(kMaxEgressRules) +
                                  " rules; allow a parent domain with *.name instead");
  }
  EgressPolicy policy;
  for (const std::string& d : allow_domains)
    policy.allow_.insert(AGVISOR_TRY(ParseDomainPattern(d)));
  for (const std::string& d : deny_domains) policy.deny_.insert(AGVISOR_TRY(ParseDomainPattern(d)));
  for (const std::string& c : allow_cidrs) {
    Cidr cidr = AGVISOR_TRY(ParseCidr(c));
    // A block wider than /8 (IPv4) or /16 (IPv6) holds every private network at once, as two
    // /1 rules hold everything; an IPv6 block over IPv4-mapped addresses (::ffff:0:0/96) is
    // measured as the IPv4 block it reaches.
    const Cidr mapped{.base = ParseIpAddress("::ffff:0.0.0.0").value(), .prefix = 96};
    const bool reaches_v4 = !cidr.base.is_v4() && (cidr.prefix <= 96 ? cidr.Contains(mapped.base)
                                                                     : mapped.Contains(cidr.base));
    const int v4_prefix = cidr.base.is_v4() ? cidr.prefix
                          : reaches_v4      ? cidr.prefix - 96
                                            : kMinCidrPrefixV4;
    if (v4_prefix < kMinCidrPrefixV4 || (!cidr.base.is_v4() && cidr.prefix < kMinCidrPrefixV6)) {
      return Error::InvalidArgument(
          "CIDR rule " + c + " is wider than /" + std::to_string(kMinCidrPrefixV4) +
          " (IPv4) or /" + std::to_string(kMinCidrPrefixV6) +
          " (IPv6): a sandbox on the default bridge network already reaches the open internet "
          "(drop the egress policy for that), while a policy names what it may reach: pass the "
          "names (--allow-domain) or the narrower blocks themselves (e.g. 203.0.113.0/24, "
          "10.1.0.0/16)");
    }
    bool known = false;
    for (const Cidr& have : policy.cidrs_) known = known || have == cidr;
    if (!known) policy.cidrs_.push_back(cidr);
  }
  for (std::uint16_t p : ports) {
    if (p == 0) return Error::InvalidArgument("port rule 0: ports are 1..65535");
    policy.ports_.insert(p);
  }
  if (policy.ports_.empty())
    policy.ports_.insert(std::begin(kDefaultPorts), std::end(kDefaultPorts));
  return policy;
}

EgressRules EgressPolicy::Rules() const {
  EgressRules r;
  for (const DomainPattern& d : allow_) r.allow_domains.push_back(d.ToString());
  for (const Cidr& c : cidrs_) r.allow_cidrs.push_back(FormatCidr(c));
  r.ports.assign(ports_.begin(), ports_.end());
  for (const DomainPattern& d : deny_) r.deny_domains.push_back(d.ToString());
  if (learn_) r.mode = std::string(kEgressModeLearn);
  return r;
}

namespace {

std::string JoinRules(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::vector<std::string> SplitRules(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const std::size_t comma = s.find(',');
    out.emplace_back(s.substr(0, comma));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace

std::string EncodeEgressRules(const EgressRules& rules) {
  std::vector<std::string> ports;
  for (std::uint16_t p : rules.ports) ports.push_back(std::to_string(p));
  std::string out = "allow=" + JoinRules(rules.allow_domains) +
                    ";cidr=" + JoinRules(rules.allow_cidrs) + ";ports=" + JoinRules(ports) +
                    ";deny=" + JoinRules(rules.deny_domains);
  if (rules.mode == kEgressModeLearn) out += ";mode=" + rules.mode;
  return out;
}

Result<EgressRules> DecodeEgressRules(std::string_view text) {
  auto bad = [&](std::string_view why) { return InvalidValue("egress rules", text, why, 200); };
  EgressRules r;
  std::string_view rest = text;
  for (std::string_view key : {"allow", "cidr", "ports", "deny"}) {
    const std::string prefix = std::string(key) + "=";
    if (!rest.starts_with(prefix)) return bad("expected '" + prefix + "'");
    rest.remove_prefix(prefix.size());
    const std::size_t semi = rest.find(';');
    const std::string_view value = rest.substr(0, semi);
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    if (key != "deny" && semi == std::string_view::npos) return bad("missing fields");
    std::vector<std::string> items = SplitRules(value);
    if (key == "allow") r.allow_domains = std::move(items);
    if (key == "cidr") r.allow_cidrs = std::move(items);
    if (key == "deny") r.deny_domains = std::move(items);
    if (key == "ports") {
      for (const std::string& p : items) {
        if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
            std::stoul(p) == 0 || std::stoul(p) > 65535) {
          return bad("port '" + p + "' is not 1..65535");
        }
        r.ports.push_back(static_cast<std::uint16_t>(std::stoul(p)));
      }
    }
  }
  // The deny list ends at the first ';': what follows can only be the mode.
  if (!rest.empty()) {
    if (!rest.starts_with("mode=")) return bad("unexpected text after deny=");
    r.mode = std::string(rest.substr(5));
    if (r.mode != kEgressModeLearn && r.mode != kEgressModeEnforce) {
      return bad("mode '" + r.mode + "' is not enforce or learn");
    }
  }
  if (r.allow_domains.size() + r.allow_cidrs.size() + r.ports.size() + r.deny_domains.size() >
      kMaxEgressRules) {
    return bad("more than " + std::to_string(kMaxEgressRules) + " rules");
  }
  return r;
}

Verdict EgressPolicy::DecideName(std::string_view name) const {
  return Learned(EnforcedName(name), name);
}

Verdict EgressPolicy::Decide(const Target& target) const {
  return Learned(Enforced(target), target.literal ? std::string_view() : target.host);
}

Verdict EgressPolicy::Learned(Verdict enforced, std::string_view name) const {
  if (enforced.allowed || !learn_) return enforced;
  // A deny rule is the operator's word, in learn mode too (a port refusal is decided before the
  // name is looked at, so the deny rules are asked here).
  for (const DomainPattern& d : deny_) {
    if (!name.empty() && d.Matches(name)) return {false, "denied by " + d.ToString()};
  }
  return {true, std::move(enforced.reason), true};
}

Verdict EgressPolicy::EnforcedName(std::string_view name) const {
  for (const DomainPattern& d : deny_) {
    if (d.Matches(name)) return {false, "denied by " + d.ToString()};
  }
  for (const DomainPattern& a : allow_) {
    if (a.Matches(name)) return {true, "allowed by " + a.ToString()};
  }
  return {false, "no rule allows " + std::string(name)};
}

Verdict EgressPolicy::Enforced(const Target& target) const {
  if (!ports_.contains(target.port)) {
    return {false, "port " + std::to_string(target.port) + " is not allowed"};
  }
  if (target.literal) {
    for (const Cidr& c : cidrs_) {
      if (c.Contains(*target.literal)) return {true, "allowed by " + FormatCidr(c)};
    }
    return {false, "IP address " + target.host + " is in no CIDR rule"};
  }
  return EnforcedName(target.host);
}

Verdict EgressPolicy::CheckResolved(const IpAddress& address,
                                    std::span<const IpAddress> host_addresses,
                                    std::span<const Cidr> test_only_dialable) const {
  bool exempt = false;  // a test's own servers on loopback (ProxyOptions::test_only_dialable)
  for (const Cidr& c : test_only_dialable) exempt = exempt || c.Contains(address);
  // The host itself and metadata services first: no CIDR rule opens them (a policy must never
  // make a sandbox reach more of the host than none would).
  if (auto why = NeverDialledReason(address); why && !exempt) {
    return {false, FormatIpAddress(address) + " is " + *why + " (no rule opens it)"};
  }
  // An IPv4-mapped answer (::ffff:a.b.c.d) reaches the same host as a.b.c.d.
  IpAddress plain = address;
  bool mapped = !address.is_v4();
  for (int i = 0; i < 12 && mapped; ++i) mapped = address.bytes[i] == (i < 10 ? 0 : 0xff);
  if (mapped) {
    plain =
        IpAddress::V4(address.bytes[12], address.bytes[13], address.bytes[14], address.bytes[15]);
  }
  for (const IpAddress& own : host_addresses) {
    if (!exempt && (own == address || own == plain))
      return {false, FormatIpAddress(address) + " is the host's own address (no rule opens it)"};
  }
  for (const Cidr& c : cidrs_) {
    if (c.Contains(address)) return {true, "allowed by " + FormatCidr(c)};
  }
  if (auto why = RestrictedAddressReason(address)) {
    return {false, FormatIpAddress(address) + " is " + *why};
  }
  return {true, "public address"};
}

std::string EgressPolicy::Describe() const {
  std::string out = "allow";
  for (const DomainPattern& a : allow_) out += " " + a.ToString();
  if (!deny_.empty()) {
    out += "; deny";
    for (const DomainPattern& d : deny_) out += " " + d.ToString();
  }
  if (!cidrs_.empty()) {
    out += "; cidr";
    for (const Cidr& c : cidrs_) out += " " + FormatCidr(c);
  }
  out += "; ports";
  for (std::uint16_t p : ports_) out += " " + std::to_string(p);
  if (learn_) out += "; learn mode (what no rule allows is let through and logged)";
  return out;
}

std::string RefusalAdvice(std::string_view sandbox, const Target& target, std::string_view reason,
                          bool resolved) {
  std::string name(sandbox);
  if (name.starts_with("agvisor-")) name.erase(0, 8);
  const std::string where = target.literal && target.literal->family == IpAddress::Family::kV6
                                ? "[" + target.host + "]:" + std::to_string(target.port)
                                : target.host + ":" + std::to_string(target.port);
  const std::string cmd = "`agvisor egress " + name;
  std::string fix;
  if (resolved) {
    fix =
        "no egress rule opens that address (loopback, link-local, metadata and the host's own "
        "addresses stay closed); use a name that resolves to a public address";
  } else if (reason.starts_with("port ")) {
    fix =
        "an operator allows it with " + cmd + " --allow-port " + std::to_string(target.port) + "`";
  } else if (target.literal) {
    fix = "an operator allows it with " + cmd + " --allow-cidr " + target.host +
          (target.literal->family == IpAddress::Family::kV6 ? "/128`" : "/32`");
  } else if (reason.starts_with("denied by ")) {
    fix = "an operator allows it with " + cmd + " --remove-domain " +
          std::string(reason.substr(10)) + " --allow-domain " + target.host + "`";
  } else {
    fix = "an operator allows it with " + cmd + " --allow-domain " + target.host + "`";
  }
  std::string line = "agvisor egress policy of sandbox " + name + " refused " + where + " (" +
                     std::string(reason) + "); " + fix;
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  }
  return line;
}

}  // namespace agvisor::egress
