// The pure parts of client.h: endpoint parsing and printing, URL encoding, header lookup.
#include <cctype>
#include <cstdlib>
#include <string>

#include "agvisor/http/client.h"

namespace agvisor::http {
namespace {

constexpr std::string_view kDefaultSocket = "/var/run/docker.sock";
constexpr std::string_view kAcceptedForms =
    "accepted forms: unix:///path/to/socket, tcp://HOST:PORT, https://HOST[:PORT], "
    "ssh://[USER@]HOST[:PORT][/remote/socket/path]";

Error Invalid(std::string_view spec, std::string_view why) {
  return Error::InvalidArgument("docker host \"" + std::string(spec) + "\": " + std::string(why) +
                                " (" + std::string(kAcceptedForms) + ")");
}

// ASCII only, whatever the process's locale says.
bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool IsHostChar(char c) { return IsAlnum(c) || c == '.' || c == '-' || c == '_'; }
bool IsUserChar(char c) { return IsAlnum(c) || c == '.' || c == '-' || c == '_'; }

// A socket path: absolute, printable, no whitespace, ':' or control characters (ssh's -L
// syntax splits on ':'; the rest keeps a path from smuggling anything onto a command line).
bool ValidSocketPath(std::string_view p) {
  if (p.empty() || p[0] != '/' || p.size() > 107) return false;
  for (char c : p) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == ':' || c == '\\') return false;
  }
  return true;
}

// Parses "HOST[:PORT]" (HOST may be "[v6]"). `port_required` for tcp.
Result<std::pair<std::string, std::uint16_t>> ParseHostPort(std::string_view spec,
                                                            std::string_view hp,
                                                            bool port_required) {
  std::string host;
  std::string_view rest;
  if (!hp.empty() && hp[0] == '[') {
    auto close = hp.find(']');
    if (close == std::string_view::npos) return Invalid(spec, "unterminated '[' in host");
    host = std::string(hp.substr(1, close - 1));
    for (char c : host) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
        return Invalid(spec, "bad IPv6 address in host");
      }
    }
    rest = hp.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return Invalid(spec, "junk after ']' in host");
  } else {
    auto colon = hp.find(':');
    host = std::string(hp.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : hp.substr(colon);
    for (char c : host) {
      if (!IsHostChar(c))
        return Invalid(spec, "host may only contain letters, digits, '.', '-', '_'");
    }
  }
  if (host.empty()) return Invalid(spec, "missing host");
  if (host[0] == '-') return Invalid(spec, "host must not start with '-'");
  std::uint16_t port = 0;
  if (!rest.empty()) {
    std::string_view digits = rest.substr(1);
    if (digits.empty() || digits.size() > 5) return Invalid(spec, "bad port");
    unsigned long v = 0;
    for (char c : digits) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return Invalid(spec, "bad port");
      v = v * 10 + static_cast<unsigned long>(c - '0');
    }
    if (v == 0 || v > 65535) return Invalid(spec, "port must be 1-65535");
    port = static_cast<std::uint16_t>(v);
  } else if (port_required) {
    return Invalid(spec, "tcp:// needs a port");
  }
  return std::pair{std::move(host), port};
}

std::string HostForUrl(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

Result<Endpoint> ParseEndpoint(std::string_view spec) {
  if (spec.empty()) {
    const char* env = std::getenv("DOCKER_HOST");
    if (env && *env) {
      auto r = ParseEndpoint(env);
      if (!r.ok()) return r.error().WithContext("$DOCKER_HOST");
      return r;
    }
    return Endpoint{};
  }
  Endpoint ep;
  auto sep = spec.find("://");
  if (sep == std::string_view::npos) return Invalid(spec, "missing scheme");
  std::string_view scheme = spec.substr(0, sep);
  std::string_view rest = spec.substr(sep + 3);
  if (scheme == "unix") {
    if (!ValidSocketPath(rest)) {
      return Invalid(spec, "unix:// needs an absolute socket path without spaces or ':'");
    }
    ep.kind = Endpoint::Kind::kUnix;
    ep.path = std::string(rest);
    return ep;
  }
  if (scheme == "tcp" || scheme == "https") {
    // tcp://HOST:PORT (Docker's daemon socket); https://HOST[:PORT] (an API server, port 443).
    const bool https = scheme == "https";
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    if (rest.find_first_of("/@") != std::string_view::npos) {
      return Invalid(spec,
                     https ? "https:// takes only HOST[:PORT]" : "tcp:// takes only HOST:PORT");
    }
    auto hp = AGVISOR_TRY(ParseHostPort(spec, rest, /*port_required=*/!https));
    ep.kind = https ? Endpoint::Kind::kHttps : Endpoint::Kind::kTcp;
    ep.host = std::move(hp.first);
    ep.port = https && hp.second == 0 ? 443 : hp.second;
    return ep;
  }
  if (scheme == "ssh") {
    ep.kind = Endpoint::Kind::kSsh;
    auto slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (slash != std::string_view::npos) {
      std::string_view path = rest.substr(slash);
      if (path != "/") {
        if (!ValidSocketPath(path)) {
          return Invalid(spec, "the remote socket path must be absolute, without spaces or ':'");
        }
        ep.path = std::string(path);
      }
    }
    auto at = authority.find('@');
    if (at != std::string_view::npos) {
      std::string_view user = authority.substr(0, at);
      if (user.empty()) return Invalid(spec, "empty user before '@'");
      if (user[0] == '-') return Invalid(spec, "user must not start with '-'");
      for (char c : user) {
        if (!IsUserChar(c)) {
          return Invalid(spec, "user may only contain letters, digits, '.', '-', '_'");
        }
      }
      ep.user = std::string(user);
      authority = authority.substr(at + 1);
    }
    auto hp = AGVISOR_TRY(ParseHostPort(spec, authority, /*port_required=*/false));
    ep.host = std::move(hp.first);
    ep.port = hp.second;
    return ep;
  }
  return Invalid(spec, "unknown scheme \"" + std::string(scheme) + "\"");
}

std::string Endpoint::ToString() const {
  switch (kind) {
    case Kind::kUnix:
      return "unix://" + path;
    case Kind::kTcp:
      return "tcp://" + HostForUrl(host) + ":" + std::to_string(port);
    case Kind::kHttps:
      return "https://" + HostForUrl(host) + ":" + std::to_string(port == 0 ? 443 : port);
    case Kind::kSsh: {
      std::string s = "ssh://";
      if (!user.empty()) s += user + "@";
      s += HostForUrl(host);
      if (port != 0) s += ":" + std::to_string(port);
      if (path != kDefaultSocket) s += path;
      return s;
    }
  }
  return "?";
}

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (IsAlnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

std::string_view Response::header(std::string_view name) const {
  for (const auto& h : headers) {
    if (h.name.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < name.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(h.name[i])) ==
             std::tolower(static_cast<unsigned char>(name[i]));
    }
    if (same) return h.value;
  }
  return {};
}

}  // namespace agvisor::http
