#include "agvisor/egress/policy.h"

namespace agvisor::egress {

bool DomainPattern::Matches(std::string_view name) const {
  if (!wildcard) return name == suffix;
  // A strict subdomain: at least one label, then ".", then the suffix.
  return name.size() > suffix.size() + 1 && name.ends_with(suffix) &&
         name[name.size() - suffix.size() - 1] == '.';
}

Result<DomainPattern> ParseDomainPattern(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Error::InvalidArgument("domain rule '" + std::string(text.substr(0, 80)) +
                                  "': " + std::string(why));
  };
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

Result<EgressPolicy> EgressPolicy::Create(std::span<const std::string> allow_domains,
                                          std::span<const std::string> allow_cidrs,
                                          std::span<const std::uint16_t> ports,
                                          std::span<const std::string> deny_domains) {
  EgressPolicy policy;
  for (const std::string& d : allow_domains)
    policy.allow_.insert(AGVISOR_TRY(ParseDomainPattern(d)));
  for (const std::string& d : deny_domains) policy.deny_.insert(AGVISOR_TRY(ParseDomainPattern(d)));
  for (const std::string& c : allow_cidrs) {
    Cidr cidr = AGVISOR_TRY(ParseCidr(c));
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

Verdict EgressPolicy::DecideName(std::string_view name) const {
  for (const DomainPattern& d : deny_) {
    if (d.Matches(name)) return {false, "denied by " + d.ToString()};
  }
  for (const DomainPattern& a : allow_) {
    if (a.Matches(name)) return {true, "allowed by " + a.ToString()};
  }
  return {false, "no rule allows " + std::string(name)};
}

Verdict EgressPolicy::Decide(const Target& target) const {
  if (!ports_.contains(target.port)) {
    return {false, "port " + std::to_string(target.port) + " is not allowed"};
  }
  if (target.literal) {
    for (const Cidr& c : cidrs_) {
      if (c.Contains(*target.literal)) return {true, "allowed by " + FormatCidr(c)};
    }
    return {false, "IP address " + target.host + " is in no CIDR rule"};
  }
  return DecideName(target.host);
}

Verdict EgressPolicy::CheckResolved(const IpAddress& address,
                                    std::span<const IpAddress> host_addresses) const {
  for (const Cidr& c : cidrs_) {
    if (c.Contains(address)) return {true, "allowed by " + FormatCidr(c)};
  }
  if (auto why = RestrictedAddressReason(address)) {
    return {false, FormatIpAddress(address) + " is " + *why};
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
    if (own == address || own == plain)
      return {false, FormatIpAddress(address) + " is the host's own address"};
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
  return out;
}

}  // namespace agvisor::egress
