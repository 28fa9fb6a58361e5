#include "agvisor/egress/host.h"

namespace agvisor::egress {
namespace {

Error BadName(std::string_view name, std::string_view why) {
  return Error::InvalidArgument("host name '" + std::string(name.substr(0, 80)) +
                                (name.size() > 80 ? "...'" : "'") + ": " + std::string(why));
}

}  // namespace

Result<std::string> NormalizeHostName(std::string_view name) {
  std::string out(name);
  if (!out.empty() && out.back() == '.') out.pop_back();
  if (out.empty()) return BadName(name, "empty");
  if (out.size() > 253) return BadName(name, "longer than 253 characters");
  std::size_t label_start = 0;
  bool last_all_digits = true;
  for (std::size_t i = 0; i <= out.size(); ++i) {
    if (i == out.size() || out[i] == '.') {
      std::size_t len = i - label_start;
      if (len == 0) return BadName(name, "empty label (two dots in a row, or a leading dot)");
      if (len > 63) return BadName(name, "a label is longer than 63 characters");
      if (out[label_start] == '-' || out[i - 1] == '-') {
        return BadName(name, "a label starts or ends with '-'");
      }
      if (i < out.size()) last_all_digits = true;
      label_start = i + 1;
      continue;
    }
    char c = out[i];
    if (c >= 'A' && c <= 'Z') {
      out[i] = static_cast<char>(c - 'A' + 'a');
    } else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return BadName(name,
                     "only letters, digits, '-' and '.' are allowed (international names as "
                     "punycode, xn--...)");
    }
    if (c < '0' || c > '9') last_all_digits = false;
  }
  if (last_all_digits) {
    return BadName(name, "the last label is all digits (a numeric IP form; write a dotted quad)");
  }
  return out;
}

Result<Target> TargetFromHost(std::string_view host, std::uint16_t port) {
  Target target;
  target.port = port;
  if (auto literal = ParseIpAddress(host); literal.ok()) {
    target.literal = *literal;
    target.host = FormatIpAddress(*literal);
    return target;
  }
  target.host = AGVISOR_TRY(NormalizeHostName(host));
  return target;
}

Result<Target> ParseAuthority(std::string_view authority, std::uint16_t default_port) {
  auto bad = [&](std::string_view why) { return InvalidValue("authority", authority, why); };
  std::string_view host;
  std::string_view rest;
  if (!authority.empty() && authority[0] == '[') {
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("'[' without ']'");
    host = authority.substr(1, close - 1);
    rest = authority.substr(close + 1);
    auto literal = ParseIpAddress(host);
    if (!literal.ok() || literal->is_v4()) return bad("brackets must hold an IPv6 address");
  } else {
    std::size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
  }
  std::uint32_t port = default_port;
  if (!rest.empty()) {
    if (rest[0] != ':' || rest.size() < 2 || rest.size() > 6) return bad("malformed port");
    port = 0;
    for (char c : rest.substr(1)) {
      if (c < '0' || c > '9') return bad("the port is not a number");
      port = port * 10 + static_cast<std::uint32_t>(c - '0');
    }
    if (port == 0 || port > 65535) return bad("the port must be 1..65535");
  } else if (default_port == 0) {
    return bad("a port is required (host:port)");
  }
  if (host.empty()) return bad("no host");
  auto target = TargetFromHost(host, static_cast<std::uint16_t>(port));
  if (!target.ok()) return bad(target.error().message());
  return target;
}

}  // namespace agvisor::egress
