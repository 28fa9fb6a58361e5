// What the enforcer does to one request on a connection it intercepts for brokered secrets
// (docs/egress.md, "Secrets"): check that the request is for the bound host the connection was
// opened to, and put each secret's value where its binding says, in place of its placeholder.
//
// Used by the egress proxy (proxy.cc), which follows the decrypted request stream with
// HttpRequestStream (sniff.h): that parser has already refused every head whose framing is
// ambiguous (obs-fold, bare CR/LF, Transfer-Encoding with Content-Length, two Hosts, a head
// over kMaxHttpHeadBytes) and found where each head ends, so a head given here is one request's,
// whole, with CRLF line ends. Bodies never come here: they are relayed as they are. Pure.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "agvisor/egress/secrets.h"

namespace agvisor::egress {

struct RequestRewrite {
  enum class Kind : std::uint8_t {
    kForward,      // send `head` upstream
    kMisdirected,  // for another host or port than the bound one: answer 421, substitute nothing
    kRefused,      // not a request this connection carries (CONNECT, Upgrade): answer 400
  };
  Kind kind = Kind::kRefused;
  std::string head;    // kForward: the head to send (the input, with values in place)
  std::string secret;  // the names of the secrets put in, comma-separated ("" = none)
  std::string method;
  std::string path;    // the request target without its query string
  std::string reason;  // kMisdirected, kRefused: why (names what was wrong, never a value)
};

// `head`: one request head (request line, header lines, blank line). `host` and `port`: the
// bound host the connection was opened to (normalised) and its port. Only secrets bound to `host`
// are considered. A placeholder is replaced only where its secret's binding says
// (BrokeredSecret::header); anywhere else (the request line, other headers) it stays as it is.
RequestRewrite RewriteRequestHead(std::string_view head, std::string_view host, std::uint16_t port,
                                  std::span<const BrokeredSecret> secrets);

}  // namespace agvisor::egress
