// Brokered secrets (docs/egress.md, "Secrets"): a credential the sandbox never holds. The sandbox
// sees a placeholder ("agvsec_" + 32 random hex digits); when a request to a host the secret is
// bound to carries the placeholder where the binding says, the enforcer (proxy.h, through
// intercept.h) puts the real value in before the request leaves the host.
//
// Used by agvisord's doors (which carry secrets to EgressHost::SetSecrets), the egress proxy and
// the request rewriter. Every door's input meets ValidateSecret/ValidateSecrets here, once. Pure,
// except MakePlaceholder (the kernel's random source).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::egress {

// The prefix of every placeholder (so that logs, tests and people can tell one at a glance).
inline constexpr std::string_view kPlaceholderPrefix = "agvsec_";
// Bounds on what a secret may hold.
inline constexpr std::size_t kMaxSecretValueBytes = 8 * 1024;
inline constexpr std::size_t kMaxSecretHosts = 32;

struct BrokeredSecret {
  // What the sandbox knows it by (its environment variable): [A-Za-z_][A-Za-z0-9_]{0,63}. The
  // only part of a secret that is ever logged or shown.
  std::string name;
  // The credential. Lives in agvisord's memory only (never a label, an env var, a log line or a
  // state file). 1..kMaxSecretValueBytes bytes, no control characters (it goes into a header).
  std::string value;
  // What the sandbox holds instead of the value (MakePlaceholder).
  std::string placeholder;
  // The exact DNS names (normalised by ValidateSecret: lower case, no trailing dot) whose HTTPS
  // requests may get the value. No wildcards, no IP addresses: a request for any other name,
  // even one the policy allows, carries the placeholder unchanged.
  std::vector<std::string> hosts;
  // Where the value may go. "" (the default): `Authorization: Bearer <placeholder>` or
  // `Authorization: token <placeholder>`, and the user or the password inside
  // `Authorization: Basic` (decoded, substituted, encoded again: what git, pip and curl send for
  // credentials in a URL). Otherwise a header name (e.g. "x-api-key", "Authorization"): every
  // occurrence of the placeholder in that header's value is replaced. Never the request line
  // (path, query), another header, or a body.
  std::string header;
};

// "agvsec_" + 32 random lower-case hex digits (128 bits from getrandom). Errors: getrandom's.
Result<std::string> MakePlaceholder();

// Checks one secret and normalises its hosts in place. kInvalidArgument naming the secret (by
// name, never its value) and the rule broken: a bad name, an empty or oversized value or one with
// control characters, a placeholder not of MakePlaceholder's shape, no hosts or more than
// kMaxSecretHosts, a host that is not an exact DNS name (a wildcard, an IP literal, a port), a
// header that is not an HTTP field name, or one of the headers that frame or route a request
// (Host, Content-Length, Transfer-Encoding, Connection, ...).
Result<void> ValidateSecret(BrokeredSecret& secret);

// ValidateSecret for each, and across them: names and placeholders are unique.
Result<void> ValidateSecrets(std::span<BrokeredSecret> secrets);

// True when some secret is bound to `host` (a normalised name).
bool IsBoundHost(std::span<const BrokeredSecret> secrets, std::string_view host);

}  // namespace agvisor::egress
