// Host names and request targets as the egress enforcer sees them (docs/egress.md).
//
// Used by the parsers (SNI, HTTP Host, CONNECT), the policy and the DNS answerer: every name is
// normalised here once, so that the policy compares like with like. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/egress/address.h"

namespace agvisor::egress {

// Lower-cases ASCII letters and drops one trailing dot ("PyPI.org." -> "pypi.org"). Refuses
// (kInvalidArgument, naming the text and the rule broken): an empty name, more than 253
// characters, an empty label ("a..b", ".a"), a label over 63 characters or starting/ending with
// '-', any byte other than letters, digits, '-' and '.' (so raw UTF-8 is refused: IDNA names come
// as punycode, "xn--...", which passes as it is), and names whose last label is all digits
// ("2130706433", "127.1": other programs' resolvers read those as IPv4 addresses).
Result<std::string> NormalizeHostName(std::string_view name);

// Where a client asked to go: a normalised name or an IP literal, and a port.
struct Target {
  std::string host;                  // normalised name, or the literal's canonical text
  std::optional<IpAddress> literal;  // set when the client named an IP address
  std::uint16_t port = 0;
  bool operator==(const Target&) const = default;
};

// Parses "host", "host:port", "192.0.2.1:443", "[2001:db8::1]:443" or "[2001:db8::1]" (the
// authority of a CONNECT line, a Host header or an absolute URI). Without a port, default_port is
// used; default_port 0 means a port is required (CONNECT). Port 0 and ports over 65535 are
// refused. kInvalidArgument names the text.
Result<Target> ParseAuthority(std::string_view authority, std::uint16_t default_port);

// A Target for a bare host (an SNI name, a DNS question): an IP literal or a normalised name.
Result<Target> TargetFromHost(std::string_view host, std::uint16_t port);

}  // namespace agvisor::egress
