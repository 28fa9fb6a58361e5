// Base64 through OpenSSL's EVP_EncodeBlock/EVP_DecodeBlock (the egress layer may not use the
// copies in desktop/ and api/, which sit above it).
#include "agvisor/egress/intercept.h"

#include <openssl/evp.h>

#include <algorithm>
#include <vector>

#include "agvisor/base/strings.h"
#include "agvisor/egress/host.h"

namespace agvisor::egress {
namespace {

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto low = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
           return low(x) == low(y);
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(std::max(n, 0)));
  return out;
}

// Strict standard base64, padded; false for anything else (the header then goes unchanged).
bool Unbase64(std::string_view text, std::string* out) {
  if (text.empty() || text.size() % 4 != 0) return false;
  const std::size_t pad = text.ends_with("==") ? 2 : text.ends_with('=') ? 1 : 0;
  for (std::size_t i = 0; i < text.size() - pad; ++i) {
    const char c = text[i];
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '+' || c == '/';
    if (!ok) return false;
  }
  out->assign(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out->data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0 || static_cast<std::size_t>(n) < pad) return false;
  out->resize(static_cast<std::size_t>(n) - pad);
  return true;
}

// Replaces every occurrence of `from` in `s`; true when there was one.
bool ReplaceAll(std::string& s, std::string_view from, std::string_view to) {
  bool any = false;
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
    any = true;
  }
  return any;
}

// The default placement: "Bearer P" / "token P", or P as the user or the password of "Basic".
// Returns the new value, or "" when the placeholder is not there.
std::string SubstituteAuthorization(std::string_view value, const BrokeredSecret& s) {
  const std::size_t sp = value.find(' ');
  if (sp == std::string_view::npos) return "";
  const std::string_view scheme = value.substr(0, sp);
  const std::string_view credentials = Trim(value.substr(sp + 1));
  if (EqualsNoCase(scheme, "bearer") || EqualsNoCase(scheme, "token")) {
    if (credentials != s.placeholder) return "";
    return std::string(scheme) + " " + s.value;
  }
  if (!EqualsNoCase(scheme, "basic")) return "";
  std::string decoded;
  if (!Unbase64(credentials, &decoded)) return "";
  const std::size_t colon = decoded.find(':');
  if (colon == std::string::npos) return "";
  std::string user = decoded.substr(0, colon);
  std::string password = decoded.substr(colon + 1);
  bool any = false;
  // The user part of Basic may not hold a colon (RFC 7617 2): a value with one goes only into
  // the password.
  if (user == s.placeholder && s.value.find(':') == std::string::npos) {
    user = s.value;
    any = true;
  }
  if (password == s.placeholder) {
    password = s.value;
    any = true;
  }
  if (!any) return "";
  return std::string(scheme) + " " + Base64(user + ":" + password);
}

void AppendName(std::string& list, const std::string& name) {
  for (std::string_view n : Split(list, ',')) {
    if (n == name) return;
  }
  list += (list.empty() ? "" : ",") + name;
}

}  // namespace

RequestRewrite RewriteRequestHead(std::string_view head, std::string_view host, std::uint16_t port,
                                  std::span<const BrokeredSecret> secrets) {
  RequestRewrite out;
  // Lines: the request line, the header lines, and the empty line before the end.
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < head.size();) {
    const std::size_t end = head.find("\r\n", at);
    if (end == std::string_view::npos) break;
    lines.emplace_back(head.substr(at, end - at));
    at = end + 2;
  }
  // Empty lines before the request line (RFC 9112 2.2) are dropped.
  while (!lines.empty() && lines.front().empty()) lines.erase(lines.begin());
  while (!lines.empty() && lines.back().empty()) lines.pop_back();  // the blank line
  if (lines.empty()) {
    out.reason = "an empty request";
    return out;
  }
  const std::string& request_line = lines.front();
  const std::size_t sp1 = request_line.find(' ');
  const std::size_t sp2 = request_line.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) {
    out.reason = "a malformed request line";
    return out;
  }
  out.method = request_line.substr(0, sp1);
  const std::string target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  out.path = target.substr(0, target.find('?'));
  if (out.method == "CONNECT") {
    out.reason = "CONNECT inside an intercepted connection";
    return out;
  }
  const std::string bound = std::string(host) + ":" + std::to_string(port);
  bool host_seen = false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    const std::string_view name = std::string_view(lines[i]).substr(0, colon);
    if (EqualsNoCase(name, "upgrade")) {
      out.reason = "Upgrade on an intercepted connection (not carried: open it without a secret)";
      return out;
    }
    if (!EqualsNoCase(name, "host")) continue;
    host_seen = true;
    auto t = ParseAuthority(Trim(std::string_view(lines[i]).substr(colon + 1)), port);
    if (!t.ok() || t->host != host || t->port != port) {
      out.kind = RequestRewrite::Kind::kMisdirected;
      out.reason =
          "a request for " +
          (t.ok() ? t->host + ":" + std::to_string(t->port) : std::string("a malformed Host")) +
          " on a connection opened for " + bound + " (no secret is sent to it)";
      return out;
    }
  }
  if (!host_seen) {
    out.kind = RequestRewrite::Kind::kMisdirected;
    out.reason = "a request without Host on a connection opened for " + bound;
    return out;
  }
  for (const BrokeredSecret& s : secrets) {
    if (std::find(s.hosts.begin(), s.hosts.end(), host) == s.hosts.end()) continue;
    for (std::size_t i = 1; i < lines.size(); ++i) {
      std::string& line = lines[i];
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string_view name = std::string_view(line).substr(0, colon);
      if (s.header.empty()) {
        if (!EqualsNoCase(name, "authorization")) continue;
        std::string value =
            SubstituteAuthorization(Trim(std::string_view(line).substr(colon + 1)), s);
        if (value.empty()) continue;
        line = std::string(name) + ": " + value;
        AppendName(out.secret, s.name);
      } else if (EqualsNoCase(name, s.header)) {
        std::string value(std::string_view(line).substr(colon + 1));
        if (!ReplaceAll(value, s.placeholder, s.value)) continue;
        line = std::string(name) + ":" + value;
        AppendName(out.secret, s.name);
      }
    }
  }
  out.kind = RequestRewrite::Kind::kForward;
  for (const std::string& line : lines) {
    out.head += line;
    out.head += "\r\n";
  }
  out.head += "\r\n";
  return out;
}

}  // namespace agvisor::egress
