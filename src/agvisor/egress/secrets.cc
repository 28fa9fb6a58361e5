#include "agvisor/egress/secrets.h"

#include <algorithm>
#include <set>

#include "agvisor/base/strings.h"
#include "agvisor/egress/host.h"

namespace agvisor::egress {
namespace {

bool IsNameChar(char c, bool first) {
  const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
  return alpha || (!first && c >= '0' && c <= '9');
}

// RFC 9110 5.6.2: tchar.
bool IsTokenChar(char c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Headers that say how a request is framed or where it goes: a value put into one of them would
// change what the upstream reads as the request, not authenticate it.
constexpr std::string_view kReservedHeaders[] = {
    "host", "content-length", "transfer-encoding", "connection",       "upgrade",
    "te",   "trailer",        "keep-alive",        "proxy-connection", "expect"};

}  // namespace

Result<std::string> MakePlaceholder() {
  std::string hex = AGVISOR_TRY(RandomHex(16));
  return std::string(kPlaceholderPrefix) + hex;
}

Result<void> ValidateSecret(BrokeredSecret& s) {
  const bool name_ok =
      !s.name.empty() && s.name.size() <= 64 && IsNameChar(s.name[0], true) &&
      std::all_of(s.name.begin(), s.name.end(), [](char c) { return IsNameChar(c, false); });
  if (!name_ok) {
    return Error::InvalidArgument("secret name \"" + EscapeForTerminal(s.name.substr(0, 80)) +
                                  "\": use 1-64 letters, digits and '_', not starting with a "
                                  "digit (it is the sandbox's environment variable)");
  }
  const std::string what = "secret " + s.name;
  if (s.value.empty() || s.value.size() > kMaxSecretValueBytes) {
    return Error::InvalidArgument(what + ": the value must be 1.." +
                                  std::to_string(kMaxSecretValueBytes) + " bytes, got " +
                                  std::to_string(s.value.size()));
  }
  for (unsigned char c : s.value) {
    if (c < 0x20 || c == 0x7f) {
      return Error::InvalidArgument(
          what +
          ": the value holds a control character (a line break at the end of the file?); "
          "it goes into an HTTP header, so strip it");
    }
  }
  const std::string_view hex =
      std::string_view(s.placeholder)
          .substr(std::min(s.placeholder.size(), kPlaceholderPrefix.size()));
  if (!s.placeholder.starts_with(kPlaceholderPrefix) || hex.size() != 32 ||
      !std::all_of(hex.begin(), hex.end(),
                   [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) {
    return Error::InvalidArgument(what + ": the placeholder must be \"" +
                                  std::string(kPlaceholderPrefix) +
                                  "\" and 32 lower-case hex digits (MakePlaceholder)");
  }
  if (s.hosts.empty() || s.hosts.size() > kMaxSecretHosts) {
    return Error::InvalidArgument(what + ": bind it to 1.." + std::to_string(kMaxSecretHosts) +
                                  " hosts, got " + std::to_string(s.hosts.size()));
  }
  for (std::string& h : s.hosts) {
    const std::string shown = EscapeForTerminal(h.substr(0, 80));
    if (h.find('*') != std::string::npos) {
      return Error::InvalidArgument(what + ": host \"" + shown +
                                    "\": a secret is bound to exact names, not wildcards "
                                    "(name each host)");
    }
    auto t = TargetFromHost(h, 443);
    if (!t.ok()) return Error::InvalidArgument(what + ": " + t.error().message());
    if (t->literal) {
      return Error::InvalidArgument(what + ": host \"" + shown +
                                    "\" is an IP address; bind the secret to a DNS name");
    }
    h = t->host;
  }
  std::sort(s.hosts.begin(), s.hosts.end());
  s.hosts.erase(std::unique(s.hosts.begin(), s.hosts.end()), s.hosts.end());
  if (!s.header.empty()) {
    if (s.header.size() > 64 || !std::all_of(s.header.begin(), s.header.end(), IsTokenChar)) {
      return Error::InvalidArgument(what + ": header \"" +
                                    EscapeForTerminal(s.header.substr(0, 80)) +
                                    "\" is not an HTTP header name (letters, digits and "
                                    "!#$%&'*+-.^_`|~, at most 64)");
    }
    const std::string lower = Lower(s.header);
    for (std::string_view r : kReservedHeaders) {
      if (lower == r) {
        return Error::InvalidArgument(what + ": header " + s.header +
                                      " frames or routes the request and cannot carry a secret; "
                                      "name the header the service reads the credential from");
      }
    }
  }
  return Ok();
}

Result<void> ValidateSecrets(std::span<BrokeredSecret> secrets) {
  std::set<std::string> names;
  std::set<std::string> placeholders;
  for (BrokeredSecret& s : secrets) {
    AGVISOR_RETURN_IF_ERROR(ValidateSecret(s));
    if (!names.insert(s.name).second) {
      return Error::InvalidArgument("secret " + s.name + " is given twice (names are unique)");
    }
    if (!placeholders.insert(s.placeholder).second) {
      return Error::InvalidArgument("secret " + s.name +
                                    ": its placeholder is another secret's (make a new one)");
    }
  }
  return Ok();
}

bool IsBoundHost(std::span<const BrokeredSecret> secrets, std::string_view host) {
  for (const BrokeredSecret& s : secrets) {
    if (std::find(s.hosts.begin(), s.hosts.end(), host) != s.hosts.end()) return true;
  }
  return false;
}

}  // namespace agvisor::egress
