// The egress policy of one sandbox: which names, address blocks and ports it may reach.
//
// Used by the proxy (every new connection is decided here, then its resolved addresses) and the
// DNS answerer (which names get an answer). Pure and immutable once built: the proxy swaps a whole
// policy for a new one, so a change applies to the next connection (docs/egress.md).
// Deny by default: a policy allows only what its rules name.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/egress/address.h"
#include "agvisor/egress/host.h"

namespace agvisor::egress {

// A domain rule: "pypi.org" (that name only) or "*.pythonhosted.org" (any name below it, never
// pythonhosted.org itself: write both to allow both).
struct DomainPattern {
  std::string suffix;  // normalised; for a wildcard, without the "*."
  bool wildcard = false;
  bool Matches(std::string_view normalised_name) const;
  std::string ToString() const { return wildcard ? "*." + suffix : suffix; }
  bool operator<(const DomainPattern& o) const { return ToString() < o.ToString(); }
  bool operator==(const DomainPattern& o) const = default;
};
// Parses a rule as written by a user. Refused (kInvalidArgument, saying what to write): a bare
// "*", a '*' anywhere but a leading "*." label ("a*.b", "*b.c", "a.*.c"), a wildcard over a
// single label ("*.com": that is a whole top-level domain), an IP address (use a CIDR rule), and
// anything NormalizeHostName refuses.
Result<DomainPattern> ParseDomainPattern(std::string_view text);

struct Verdict {
  bool allowed = false;
  std::string reason;  // "allowed by *.pythonhosted.org", "no rule allows evil.example", ...
  // Learn mode let it through: enforcing, the policy would have refused it for `reason`.
  bool learned = false;
};

// How a policy is applied. "enforce" (the default, also written ""): what no rule allows is
// refused. "learn" (docs/egress.md, "Learn mode"): what the rules would refuse for want of an
// allow rule (a name, a port, an IP literal) is let through and logged as learned, so a policy
// can be drawn from what a trusted run reached (SuggestRules, learn.h); deny rules, and every
// check of the resolved address (EgressPolicy::CheckResolved: loopback, link-local and metadata,
// private ranges, the host itself), still refuse.
inline constexpr std::string_view kEgressModeEnforce = "enforce";
inline constexpr std::string_view kEgressModeLearn = "learn";

// A policy as the user wrote it: what create requests, labels and `agvisor egress` carry.
struct EgressRules {
  std::vector<std::string> allow_domains;
  std::vector<std::string> allow_cidrs;
  std::vector<std::uint16_t> ports;  // empty: EgressPolicy::kDefaultPorts
  std::vector<std::string> deny_domains;
  std::string mode;  // "" or kEgressModeEnforce, or kEgressModeLearn; checked by Create
  bool operator==(const EgressRules&) const = default;
};

// At most this many rules in all: a policy travels in a Docker label.
inline constexpr std::size_t kMaxEgressRules = 512;
// The widest CIDR rule: a shorter prefix holds every private network of its family at once.
// An IPv6 rule over IPv4-mapped addresses (::ffff:0:0/96) counts as the IPv4 block it reaches.
inline constexpr int kMinCidrPrefixV4 = 8;
inline constexpr int kMinCidrPrefixV6 = 16;

// One line that round-trips through DecodeEgressRules, for a label:
// "allow=pypi.org,*.pythonhosted.org;cidr=203.0.113.0/24;ports=443;deny=", and ";mode=learn"
// after it in learn mode only (labels written before learn mode read as they did).
// (No rule can contain ',', ';' or '=': EgressPolicy::Create refuses such rules.)
std::string EncodeEgressRules(const EgressRules& rules);
// kInvalidArgument for anything EncodeEgressRules does not write.
Result<EgressRules> DecodeEgressRules(std::string_view text);

class EgressPolicy {
 public:
  // The ports a policy allows when none is given: HTTP and HTTPS.
  static constexpr std::uint16_t kDefaultPorts[] = {80, 443};

  // Builds a policy from user input; the first bad rule is the error (kInvalidArgument, naming
  // it). A CIDR rule wider than kMinCidrPrefixV4 / kMinCidrPrefixV6 is refused (0.0.0.0/1 and
  // 128.0.0.0/1 would allow everything between them). `ports` empty means kDefaultPorts. A
  // name in `deny_domains` is refused even when an allow rule matches it (deny rules take the
  // same pattern syntax).
  // `rules.mode` other than "", "enforce" or "learn" is refused (kInvalidArgument, naming the
  // accepted values).
  static Result<EgressPolicy> Create(const EgressRules& rules);
  static Result<EgressPolicy> Create(std::span<const std::string> allow_domains,
                                     std::span<const std::string> allow_cidrs,
                                     std::span<const std::uint16_t> ports,
                                     std::span<const std::string> deny_domains = {});

  // May a connection to `target` start? Checks the port, then an IP literal against the CIDR
  // rules, or a name against the deny and allow rules. This does not look at what a name
  // resolves to: that is CheckResolved. In learn mode a refusal for want of an allow rule comes
  // back allowed with `learned` set (its reason the refusal's); a deny rule still refuses.
  Verdict Decide(const Target& target) const;
  // May the name (normalised) be answered by the in-sandbox DNS? The domain rules only (learn
  // mode as in Decide).
  Verdict DecideName(std::string_view normalised_name) const;
  // After resolution: may the enforcer dial `address`? Never the host itself or a metadata
  // service, whatever the CIDR rules say: NeverDialledReason and the host's own addresses
  // (`host_addresses`, IPv4-mapped forms too) are refused first. Then a CIDR rule that contains
  // it allows it (that is how a private service, e.g. 10.1.2.3, is opened on purpose); other
  // restricted addresses (RestrictedAddressReason) are refused. `test_only_dialable`: blocks
  // exempt from the first step, for tests and benchmarks whose servers listen on loopback
  // (ProxyOptions::test_only_dialable); they still need a CIDR rule. agvisord never passes it.
  Verdict CheckResolved(const IpAddress& address, std::span<const IpAddress> host_addresses,
                        std::span<const Cidr> test_only_dialable = {}) const;

  const std::set<DomainPattern>& allow_domains() const { return allow_; }
  const std::set<DomainPattern>& deny_domains() const { return deny_; }
  const std::vector<Cidr>& cidrs() const { return cidrs_; }
  const std::set<std::uint16_t>& ports() const { return ports_; }
  bool learn() const { return learn_; }
  // One line for logs and `agvisor egress`: "allow pypi.org *.pythonhosted.org; cidr
  // 203.0.113.0/24; ports 80 443".
  std::string Describe() const;
  // The rules in canonical form (sorted, normalised, no duplicates, ports written out; mode ""
  // when enforcing, "learn" when learning).
  EgressRules Rules() const;

 private:
  // What enforcing decides (learn mode left out).
  Verdict Enforced(const Target& target) const;
  Verdict EnforcedName(std::string_view name) const;
  // Learn mode's reading of an enforced verdict on `name` ("" for an IP literal).
  Verdict Learned(Verdict enforced, std::string_view name) const;

  std::set<DomainPattern> allow_;
  std::set<DomainPattern> deny_;
  std::vector<Cidr> cidrs_;
  std::set<std::uint16_t> ports_;
  bool learn_ = false;
};

// The one line a refused request is answered with (issue 35, "denials an agent can act on"):
// the destination, that agvisor's egress policy for `sandbox` refused it and why, and how an
// operator allows it (`agvisor egress NAME --allow-domain X`, `--allow-port P`, `--allow-cidr
// IP/32`, `--remove-domain X` for a deny rule), or that no rule can when the refusal is of the
// address a name resolved to (loopback, metadata, the host: `resolved` true). `sandbox` is the
// container name ("agvisor-" is dropped for the command); `reason` is the Verdict's. Printable
// ASCII only (anything else becomes '?'), so it can also be an HTTP header's value. Pure.
std::string RefusalAdvice(std::string_view sandbox, const Target& target, std::string_view reason,
                          bool resolved = false);

}  // namespace agvisor::egress
