#include "agvisor/egress/address.h"

#include <arpa/inet.h>

#include <cstring>

namespace agvisor::egress {

Error InvalidValue(std::string_view what, std::string_view value, std::string_view why,
                   std::size_t shown) {
  return Error::InvalidArgument(std::string(what) + " '" + std::string(value.substr(0, shown)) +
                                "': " + std::string(why));
}
namespace {

// Dotted quad, four decimal parts 0..255, no leading zeros, nothing else. inet_aton would accept
// "127.1" and hex/octal parts; those must not count as literals (see ParseIpAddress).
std::optional<IpAddress> ParseStrictV4(std::string_view text) {
  IpAddress out;
  int part = 0;
  std::size_t i = 0;
  while (part < 4) {
    std::size_t start = i;
    unsigned value = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - start < 3) {
      value = value * 10 + static_cast<unsigned>(text[i] - '0');
      ++i;
    }
    std::size_t digits = i - start;
    if (digits == 0 || value > 255 || (digits > 1 && text[start] == '0')) return std::nullopt;
    out.bytes[part++] = static_cast<std::uint8_t>(value);
    if (part < 4) {
      if (i >= text.size() || text[i] != '.') return std::nullopt;
      ++i;
    }
  }
  if (i != text.size()) return std::nullopt;
  return out;
}

IpAddress EmbeddedV4(const IpAddress& v6, std::size_t offset) {
  return IpAddress::V4(v6.bytes[offset], v6.bytes[offset + 1], v6.bytes[offset + 2],
                       v6.bytes[offset + 3]);
}

bool StartsWith(const IpAddress& a, std::initializer_list<std::uint8_t> prefix) {
  std::size_t i = 0;
  for (std::uint8_t b : prefix) {
    if (a.bytes[i++] != b) return false;
  }
  return true;
}

std::optional<std::string> V4Reason(const IpAddress& a) {
  const auto& b = a.bytes;
  if (b[0] == 0) return b[1] == 0 && b[2] == 0 && b[3] == 0 ? "unspecified" : "this network (0/8)";
  if (b[0] == 127) return "loopback";
  if (b[0] == 10 || (b[0] == 172 && (b[1] & 0xf0) == 16) || (b[0] == 192 && b[1] == 168)) {
    return "private (RFC 1918)";
  }
  if (b[0] == 100 && (b[1] & 0xc0) == 64) return "carrier-grade NAT (RFC 6598)";
  if (b[0] == 169 && b[1] == 254) return "link-local (cloud metadata)";
  if (b[0] == 192 && b[1] == 0 && b[2] == 0) return "IETF protocol assignments (192.0.0.0/24)";
  if (b[0] == 198 && (b[1] & 0xfe) == 18) return "benchmarking (198.18.0.0/15)";
  // Azure's platform endpoint (wireserver): a public address that answers only inside Azure,
  // with host configuration; scripts/sandbox-firewall blocks it too.
  if (b[0] == 168 && b[1] == 63 && b[2] == 129 && b[3] == 16) return "Azure platform endpoint";
  if ((b[0] & 0xf0) == 224) return "multicast";
  if (b[0] == 255 && b[1] == 255 && b[2] == 255 && b[3] == 255) return "broadcast";
  if ((b[0] & 0xf0) == 240) return "reserved (240.0.0.0/4)";
  return std::nullopt;
}

// The part of the IPv4 classes that reaches this host or a machine's metadata service.
std::optional<std::string> V4NeverReason(const IpAddress& a) {
  const auto& b = a.bytes;
  if (b[0] == 0 || b[0] == 127 || (b[0] == 169 && b[1] == 254) || (b[0] & 0xf0) == 224 ||
      (b[0] == 168 && b[1] == 63 && b[2] == 129 && b[3] == 16) ||
      (b[0] == 255 && b[1] == 255 && b[2] == 255 && b[3] == 255)) {
    return V4Reason(a);
  }
  // Metadata services inside blocks that a CIDR rule may otherwise open (docs/security.md,
  // "Cloud metadata addresses"): Alibaba's in CGNAT, Oracle's older one in 192.0.0.0/24.
  if (a == IpAddress::V4(100, 100, 100, 200)) return "cloud metadata (Alibaba Cloud)";
  if (a == IpAddress::V4(192, 0, 0, 192)) return "cloud metadata (Oracle Cloud)";
  return std::nullopt;
}

std::optional<std::string> Prefixed(const char* form, std::optional<std::string> inner) {
  if (!inner) return std::nullopt;
  return std::string(form) + ": " + *inner;
}

// An IPv6 address that some stack routes as the IPv4 address it embeds: the form's name and that
// address. "::" and "::1" are not IPv4-compatible addresses (unspecified and loopback).
struct EmbeddedIpv4 {
  const char* form;
  IpAddress v4;
};
std::optional<EmbeddedIpv4> EmbeddedIpv4Of(const IpAddress& address) {
  const auto& b = address.bytes;
  bool zero_first_10 = true;
  for (int i = 0; i < 10; ++i) zero_first_10 = zero_first_10 && b[i] == 0;
  if (zero_first_10 && b[10] == 0xff && b[11] == 0xff) {
    return EmbeddedIpv4{"IPv4-mapped", EmbeddedV4(address, 12)};
  }
  if (zero_first_10 && b[10] == 0 && b[11] == 0) {
    if (b[12] == 0 && b[13] == 0 && b[14] == 0 && b[15] <= 1) return std::nullopt;
    // IPv4-compatible (deprecated, RFC 4291 2.5.5.1): some stacks still route it as IPv4.
    return EmbeddedIpv4{"IPv4-compatible", EmbeddedV4(address, 12)};
  }
  if (StartsWith(address, {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0})) {
    return EmbeddedIpv4{"NAT64", EmbeddedV4(address, 12)};
  }
  if (b[0] == 0x20 && b[1] == 0x02) return EmbeddedIpv4{"6to4", EmbeddedV4(address, 2)};
  return std::nullopt;
}

bool IsUnspecifiedOrLoopbackV6(const IpAddress& a, std::uint8_t last) {
  for (int i = 0; i < 15; ++i) {
    if (a.bytes[i] != 0) return false;
  }
  return a.bytes[15] == last;
}

// An IPv6 address's class; with `never_dialled`, only the classes no CIDR rule opens
// (NeverDialledReason), else every restricted one (RestrictedAddressReason).
std::optional<std::string> V6Reason(const IpAddress& address, bool never_dialled) {
  if (IsUnspecifiedOrLoopbackV6(address, 0)) return "unspecified";
  if (IsUnspecifiedOrLoopbackV6(address, 1)) return "loopback";
  if (auto e = EmbeddedIpv4Of(address)) {
    return Prefixed(e->form, never_dialled ? V4NeverReason(e->v4) : V4Reason(e->v4));
  }
  const auto& b = address.bytes;
  if (b[0] == 0xff) return "multicast";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "link-local";
  if (never_dialled) {
    // AWS's IPv6 metadata endpoint (Nitro), inside ULA fc00::/7, which a CIDR rule may open.
    if (address == *ParseIpAddress("fd00:ec2::254")) return "cloud metadata (AWS)";
    return std::nullopt;
  }
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "site-local (deprecated)";
  if ((b[0] & 0xfe) == 0xfc) return "unique local (fc00::/7)";
  // Local-use NAT64 (RFC 8215): the operator picks where in it the IPv4 address sits, so it may
  // translate to any private one. Teredo (RFC 4380): its IPv4 addresses are in the address too.
  if (StartsWith(address, {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01})) return "local-use NAT64";
  if (StartsWith(address, {0x20, 0x01, 0x00, 0x00})) return "Teredo (2001::/32)";
  return std::nullopt;
}

}  // namespace

IpAddress IpAddress::V4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  IpAddress out;
  out.bytes[0] = a;
  out.bytes[1] = b;
  out.bytes[2] = c;
  out.bytes[3] = d;
  return out;
}

Result<IpAddress> ParseIpAddress(std::string_view text) {
  if (auto v4 = ParseStrictV4(text)) return *v4;
  // inet_pton wants a NUL-terminated string; 45 characters is the longest IPv6 text.
  if (text.size() <= 45 && text.find(':') != std::string_view::npos) {
    char buf[46];
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    IpAddress out;
    out.family = IpAddress::Family::kV6;
    if (inet_pton(AF_INET6, buf, out.bytes.data()) == 1) return out;
  }
  return Error::InvalidArgument("not an IP address: '" + std::string(text) +
                                "' (write IPv4 as four decimal parts, e.g. 192.0.2.1, or IPv6 "
                                "text without brackets, e.g. 2001:db8::1)");
}

std::string FormatIpAddress(const IpAddress& address) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(address.is_v4() ? AF_INET : AF_INET6, address.bytes.data(), buf, sizeof buf);
  return buf;
}

bool Cidr::Contains(const IpAddress& address) const {
  if (address.family != base.family) return false;
  int full = prefix / 8;
  if (std::memcmp(address.bytes.data(), base.bytes.data(), static_cast<std::size_t>(full)) != 0) {
    return false;
  }
  int rest = prefix % 8;
  if (rest == 0) return true;
  auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (address.bytes[full] & mask) == (base.bytes[full] & mask);
}

Result<Cidr> ParseCidr(std::string_view text) {
  std::size_t slash = text.find('/');
  auto parsed = ParseIpAddress(text.substr(0, slash));
  if (!parsed.ok()) {
    return Error::InvalidArgument("CIDR '" + std::string(text) +
                                  "': the address part is not an IP address (write e.g. "
                                  "203.0.113.0/24 or 2001:db8::/32)");
  }
  IpAddress base = *parsed;
  int max = base.is_v4() ? 32 : 128;
  int prefix = max;
  if (slash != std::string_view::npos) {
    std::string_view digits = text.substr(slash + 1);
    if (digits.empty() || digits.size() > 3 || (digits.size() > 1 && digits[0] == '0')) {
      prefix = -1;
    } else {
      prefix = 0;
      for (char c : digits) {
        if (c < '0' || c > '9') {
          prefix = -1;
          break;
        }
        prefix = prefix * 10 + (c - '0');
      }
    }
    if (prefix < 0 || prefix > max) {
      return Error::InvalidArgument("CIDR '" + std::string(text) + "': the prefix length must be " +
                                    "0.." + std::to_string(max));
    }
  }
  Cidr cidr{base, prefix};
  IpAddress masked = base;
  for (int bit = prefix; bit < max; ++bit) {
    masked.bytes[bit / 8] &= static_cast<std::uint8_t>(~(0x80 >> (bit % 8)));
  }
  if (!(masked == base)) {
    return Error::InvalidArgument("CIDR '" + std::string(text) +
                                  "': host bits are set below the prefix; write " +
                                  FormatCidr(Cidr{masked, prefix}));
  }
  return cidr;
}

std::string FormatCidr(const Cidr& cidr) {
  return FormatIpAddress(cidr.base) + "/" + std::to_string(cidr.prefix);
}

std::optional<std::string> RestrictedAddressReason(const IpAddress& address) {
  return address.is_v4() ? V4Reason(address) : V6Reason(address, /*never_dialled=*/false);
}

std::optional<std::string> NeverDialledReason(const IpAddress& address) {
  return address.is_v4() ? V4NeverReason(address) : V6Reason(address, /*never_dialled=*/true);
}

}  // namespace agvisor::egress
