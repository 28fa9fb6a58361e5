#include "agvisor/e2b/ids.h"

#include <algorithm>
#include <cctype>

#include "agvisor/base/strings.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor::e2b {

bool IsSandboxId(std::string_view id) {
  if (id.empty() || id.size() > 63 || id.front() == '-' || id.back() == '-') return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

Result<std::string> ContainerForId(std::string_view id) {
  if (!IsSandboxId(id)) {
    return Error::InvalidArgument("sandbox id '" + EscapeForTerminal(id.substr(0, 100)) +
                                  "' is not a valid id: 1-63 lower-case letters, digits and '-' "
                                  "(not first or last), as Sandbox.create returned it");
  }
  return std::string(kNamePrefix) + std::string(id);
}

std::optional<std::string> IdForContainer(std::string_view container_name) {
  if (!container_name.starts_with(kNamePrefix)) return std::nullopt;
  std::string_view id = container_name.substr(kNamePrefix.size());
  if (!IsSandboxId(id)) return std::nullopt;
  return std::string(id);
}

namespace {

// What a client may put in the create response's domain: a host name or address and a port.
bool PlausibleDomain(std::string_view d) {
  if (d.empty() || d.size() > 253) return false;
  return std::all_of(d.begin(), d.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == ':' || c == '[' || c == ']';
  });
}

// `host` without a trailing ":PORT" (an IPv6 literal in brackets keeps its colons), lower case.
std::string HostName(std::string_view host) {
  std::size_t end = host.size();
  const std::size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos) {
    end = colon;
  }
  std::string out(host.substr(0, end));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<SandboxHost> ParseSandboxHost(std::string_view host, std::string_view domain) {
  const std::string name = HostName(host);
  const std::size_t dot = name.find('.');
  if (dot == std::string::npos || dot + 1 == name.size()) return std::nullopt;
  const std::string_view label = std::string_view(name).substr(0, dot);
  const std::size_t dash = label.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash > 5) return std::nullopt;
  unsigned port = 0;
  for (char c : label.substr(0, dash)) {
    if (c < '0' || c > '9') return std::nullopt;
    port = port * 10 + static_cast<unsigned>(c - '0');
  }
  if (port == 0 || port > 65535) return std::nullopt;
  const std::string_view id = label.substr(dash + 1);
  if (!IsSandboxId(id)) return std::nullopt;
  if (!domain.empty() && std::string_view(name).substr(dot + 1) != HostName(domain)) {
    return std::nullopt;
  }
  return SandboxHost{static_cast<std::uint16_t>(port), std::string(id)};
}

std::string DomainFromHost(std::string_view host) {
  if (!PlausibleDomain(host)) return "";
  std::string_view name = host, port;
  const std::size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos) {
    name = host.substr(0, colon);
    port = host.substr(colon);
  }
  const bool literal =
      name.starts_with('[') || name.find_first_not_of("0123456789.") == std::string_view::npos;
  return literal ? "localhost" + std::string(port) : std::string(host);
}

}  // namespace agvisor::e2b
