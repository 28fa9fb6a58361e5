// Sniffers: what the first bytes of a connection say about where it wants to go.
//
// Used by the egress proxy (proxy.h), which reads a connection's first bytes, keeps them, asks
// these pure parsers for a verdict, and replays the same bytes upstream once it has dialled.
// Records and requests may be split anywhere: the parsers answer kNeedMore until they can decide
// and resume where they stopped when more bytes arrive (ClientHelloSniffer, HttpRequestStream),
// so a client sending one byte at a time costs work linear in its bytes, not quadratic. Each has
// a hard cap on the bytes it will look at, so a client cannot make the proxy buffer without
// bound. On a plain-HTTP connection HttpRequestStream follows the whole request stream (heads
// and the bodies between them), so every request's head is seen, pipelined ones too.
// Docs: docs/egress.md. Nothing here terminates TLS.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

// SniffClientHello, resumable: Feed is called with the connection's bytes so far, each call's
// bytes extending the last call's; records already read are not read again.
class ClientHelloSniffer {
 public:
  const ClientHelloSniff& Feed(std::span<const std::uint8_t> bytes);

 private:
  ClientHelloSniff result_;
  std::size_t pos_ = 0;     // where the next record starts
  std::size_t wanted_ = 0;  // handshake bytes needed in total, once its header is known
  std::vector<std::uint8_t> handshake_;
};

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
  std::string path;            // the target's path without its query ("" for CONNECT), for the log
  std::size_t head_bytes = 0;  // bytes of the head, blank line included
  std::string reason;          // why kRefused
  // Framing of the body that follows the head (none for CONNECT).
  std::uint64_t content_length = 0;
  bool chunked = false;
  bool upgrade = false;  // an Upgrade header: the server may switch protocols (101)
};

// Parses the request line and the headers up to the blank line (empty lines before the request
// line are skipped, as RFC 9112 2.2 allows). Refused: a method that is not a token, a target or
// version that is malformed (HTTP/1.0 and HTTP/1.1 only), an origin-form request with no Host or
// more than one Host header (two Hosts can make the proxy and the server disagree on the name),
// an absolute URI whose scheme is not http (https through a proxy goes through CONNECT), a Host
// header that disagrees with an absolute URI's host, and a head over kMaxHttpHeadBytes. So that
// the proxy and the server cannot disagree on where the next request starts (request
// smuggling), ambiguous framing is refused too (RFC 9112 2.2, 5.2, 6.1, 6.3): a line end that is
// not CRLF (bare LF, bare CR), obs-fold continuation lines, whitespace before a header's colon,
// control characters in a header value, Transfer-Encoding together with Content-Length, two
// Content-Length or two Transfer-Encoding headers (equal or not), a Content-Length that is not
// digits, a Transfer-Encoding other than `chunked`, and Transfer-Encoding on HTTP/1.0.
HttpRequestSniff SniffHttpRequest(std::string_view bytes);

// The client-to-server stream of one plain-HTTP connection, followed as it arrives: request
// heads, and the bodies between them (Content-Length, or chunked: chunk sizes, data, trailers).
// The caller keeps the bytes no step has covered yet and passes them as `in`; each step covers a
// prefix of them, which the caller forwards (a head once it has judged it) and drops. After
// kNeedMore the next call's `in` starts with the same bytes plus more; the scan resumes where it
// stopped. What comes after a CONNECT head or a request the server answers with 101 is not HTTP:
// the caller stops calling (the stream does not know the server's answers).
class HttpRequestStream {
 public:
  struct Step {
    enum class Kind : std::uint8_t {
      kNeedMore,  // no complete unit in `in` yet
      kHead,      // the first `bytes` of `in` are a request head: see `request`
      kBody,      // the first `bytes` of `in` are body of the last request (chunk framing too)
      kRefused,   // malformed or ambiguous: see `reason` (answer 400 and close)
    };
    Kind kind = Kind::kNeedMore;
    std::size_t bytes = 0;
    HttpRequestSniff request;  // kHead
    std::string reason;        // kRefused
  };
  Step Next(std::string_view in);
  // True between messages: the last request's body (if any) has been covered completely.
  bool at_request_start() const { return state_ == State::kHead; }

 private:
  enum class State : std::uint8_t {
    kHead,
    kFixedBody,
    kChunkSize,
    kChunkData,
    kChunkEnd,
    kTrailer
  };
  Step Refuse(std::string reason);
  Step Covered(Step::Kind kind, std::size_t bytes);
  // Finds the end of the line starting at `in[0]`, resuming the scan; 0 while it has not come.
  // Sets `bad` for a bare CR or LF.
  std::size_t LineEnd(std::string_view in, std::size_t cap, std::string* bad);

  State state_ = State::kHead;
  std::uint64_t remaining_ = 0;  // body or chunk bytes still to come
  std::size_t scanned_ = 0;      // bytes of `in` already scanned by the pending step
  std::size_t lead_ = 0;         // empty lines (CRLF) before a request line
  std::size_t method_scanned_ = 0;
  bool method_done_ = false;
  std::size_t trailer_bytes_ = 0;
  bool refused_ = false;
};

}  // namespace agvisor::egress
