// IP addresses, CIDR blocks and the address check of the egress enforcer (docs/egress.md).
//
// Used by the policy (CIDR rules for IP literals), the proxy (the addresses a name resolved to are
// checked before one is dialled) and the DNS codec. Pure: no sockets, no resolver. Addresses are
// held as 16 bytes; an IPv4 address is kept as itself (family kV4), never silently widened, so
// "IPv4-mapped" IPv6 forms (::ffff:a.b.c.d) are seen and checked for what they embed.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::egress {

// kInvalidArgument "<what> '<value, its first `shown` bytes>': <why>": how the egress parsers
// refuse a rule, an authority or a name (a hostile value is clipped, never echoed whole).
Error InvalidValue(std::string_view what, std::string_view value, std::string_view why,
                   std::size_t shown = 80);

struct IpAddress {
  enum class Family : std::uint8_t { kV4, kV6 };
  Family family = Family::kV4;
  // Network byte order; an IPv4 address uses bytes[0..3] and leaves the rest zero.
  std::array<std::uint8_t, 16> bytes{};

  static IpAddress V4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d);
  bool is_v4() const { return family == Family::kV4; }
  std::size_t size() const { return is_v4() ? 4 : 16; }
  bool operator==(const IpAddress&) const = default;
};

// Parses the strict textual forms only: dotted-quad IPv4 with four decimal parts and no leading
// zeros ("127.1", "0x7f.0.0.1", "0127.0.0.1" and "2130706433" are NOT addresses here: resolvers
// of other programs read those as 127.0.0.1, so the host-name check refuses them instead), and
// RFC 4291 IPv6 text (no brackets, no zone id). kInvalidArgument names the text.
Result<IpAddress> ParseIpAddress(std::string_view text);
// "192.0.2.1", "2001:db8::1" (RFC 5952 shortest form).
std::string FormatIpAddress(const IpAddress& address);

struct Cidr {
  IpAddress base;  // host bits zero
  int prefix = 0;  // 0..32 for IPv4, 0..128 for IPv6
  bool Contains(const IpAddress& address) const;
  bool operator==(const Cidr&) const = default;
};
// "203.0.113.0/24", "2001:db8::/32", or a bare address (a /32 or /128). Host bits set below the
// prefix are refused ("203.0.113.7/24": write 203.0.113.0/24), as is a prefix out of range.
// kInvalidArgument names the text and what to write instead.
Result<Cidr> ParseCidr(std::string_view text);
std::string FormatCidr(const Cidr& cidr);

// Why an address must not be dialled by the enforcer unless a CIDR rule names it, or nullopt for
// a public unicast address. Covers: unspecified, "this network" 0.0.0.0/8, loopback, RFC 1918,
// carrier-grade NAT (100.64.0.0/10), link-local (169.254.0.0/16 holds cloud metadata services;
// fe80::/10), IETF protocol assignments 192.0.0.0/24, benchmarking 198.18.0.0/15, reserved
// 240.0.0.0/4 and broadcast, Azure's platform endpoint 168.63.129.16, multicast (v4 and v6), ULA
// fc00::/7, site-local fec0::/10, and the IPv4 address embedded in IPv4-mapped (::ffff:0:0/96),
// IPv4-compatible (::/96), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms, checked as IPv4. The
// text is for logs and errors, e.g. "loopback", "private (RFC 1918)", "IPv4-mapped: link-local
// (cloud metadata)".
std::optional<std::string> RestrictedAddressReason(const IpAddress& address);

// Why the enforcer never dials `address`, whatever a policy's CIDR rules say, or nullopt: the
// classes that reach the host itself or a machine's credentials. Unspecified and 0.0.0.0/8,
// loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, which holds cloud metadata services;
// fe80::/10), multicast, broadcast, and the metadata addresses inside blocks a CIDR rule may
// open: Azure's 168.63.129.16, Alibaba's 100.100.100.200, Oracle's 192.0.0.192, AWS's
// fd00:ec2::254; the same for the IPv4 address an IPv4-mapped, IPv4-compatible, NAT64 or 6to4
// form embeds. Every one of these is also a RestrictedAddressReason. (The host's own interface
// addresses are the other such class: EgressPolicy::CheckResolved is given them.)
std::optional<std::string> NeverDialledReason(const IpAddress& address);

}  // namespace agvisor::egress
