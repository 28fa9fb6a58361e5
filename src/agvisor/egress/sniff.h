// Sniffers: what the first bytes of a connection say about where it wants to go.
//
// Used by the egress proxy (proxy.h), which reads a connection's first bytes, keeps them, asks
// these pure functions for a verdict, and replays the same bytes upstream once it has dialled.
// Each sniffer is called again with the whole prefix each time more bytes arrive (records and
// requests may be split anywhere) and answers kNeedMore until it can decide; each has a hard cap
// on the bytes it will look at, so a client cannot make the proxy buffer without bound.
// Docs: docs/egress.md. Nothing here terminates TLS or reads past the first request head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "agvisor/egress/host.h"

namespace agvisor::egress {

enum class SniffStatus : std::uint8_t {
  kNeedMore,  // not enough bytes yet; call again with more
  kDone,      // decided: see the fields
  kRefused,   // not what this sniffer accepts, malformed, or over the cap: see `reason`
};

// ---- TLS ClientHello (RFC 8446 4.1.2, RFC 6066 3) ----

// A ClientHello larger than this is refused (real ones are 200-2000 bytes; with post-quantum key
// shares about 1.8 KB). The cap is on the handshake message; records add 5 bytes each.
inline constexpr std::size_t kMaxClientHelloBytes = 16 * 1024;

struct ClientHelloSniff {
  SniffStatus status = SniffStatus::kNeedMore;
  std::string server_name;  // the host_name entry of server_name, as sent (not normalised)
  bool has_server_name = false;
  std::string reason;  // why kRefused
};

// Reads TLS records of type handshake (22) from `bytes` (the connection's first bytes, possibly a
// part of them), reassembles the first handshake message across records, and extracts the SNI.
// Refused: a first record that is not a handshake record, a first handshake message that is not
// a ClientHello, lengths that do not add up, a handshake over kMaxClientHelloBytes, two
// server_name extensions or two host_name entries. A ClientHello without server_name is kDone
// with has_server_name false (the policy refuses it: there is no name to decide on).
ClientHelloSniff SniffClientHello(std::span<const std::uint8_t> bytes);

// ---- HTTP/1.x request head (RFC 9112) ----

// A request head (request line + headers + blank line) larger than this is refused.
inline constexpr std::size_t kMaxHttpHeadBytes = 16 * 1024;

struct HttpRequestSniff {
  enum class Form : std::uint8_t {
    kOrigin,    // GET /path HTTP/1.1 + Host: the name comes from Host
    kAbsolute,  // GET http://host[:port]/path HTTP/1.1 (a client using us as its HTTP proxy)
    kConnect,   // CONNECT host:port HTTP/1.1 (a client tunnelling through us)
  };
  SniffStatus status = SniffStatus::kNeedMore;
  Form form = Form::kOrigin;
  std::string method;
  Target target;               // where it asks to go; port defaults to 80 unless given
  std::size_t head_bytes = 0;  // bytes of the head, blank line included
  std::string reason;          // why kRefused
};

// Parses the request line and the headers up to the blank line; tolerates LF-only line ends.
// Refused: a method that is not a token, a target or version that is malformed (HTTP/1.0 and
// HTTP/1.1 only), an origin-form request with no Host or more than one Host header (two Hosts
// can make the proxy and the server disagree on the name), an absolute URI whose scheme is not
// http (https through a proxy goes through CONNECT), a Host header that disagrees with an
// absolute URI's host, obs-fold continuation lines, and a head over kMaxHttpHeadBytes.
HttpRequestSniff SniffHttpRequest(std::string_view bytes);

}  // namespace agvisor::egress
