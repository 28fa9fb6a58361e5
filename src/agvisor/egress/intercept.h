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
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

// Follows the answers on an intercepted connection (upstream to sandbox) to see where each one
// ends, for the log's per-request fields (status, bytes down). Passive: the bytes are relayed
// whatever it finds; after something it cannot parse it stops (broken()) and reports nothing
// more. Beast's HTTP/1 parser (answers.cc); a head over 64 KiB counts as unparseable.
class AnswerTracker {
 public:
  struct Answer {
    int status = 0;
    std::uint64_t bytes = 0;  // head and body as received
  };
  AnswerTracker();
  ~AnswerTracker();
  AnswerTracker(const AnswerTracker&) = delete;
  AnswerTracker& operator=(const AnswerTracker&) = delete;

  // One more request was sent upstream (answers come in the order of their requests); `head`:
  // it was a HEAD request, whose answer has no body whatever its headers say.
  void Expect(bool head) { heads_.push_back(head); }
  // The next bytes from the upstream; the final answers they complete, in order (interim 1xx
  // answers complete none).
  std::vector<Answer> Feed(std::string_view bytes);
  // The upstream's stream ended: an answer whose body runs to the end completes here.
  std::vector<Answer> End();
  bool broken() const { return broken_; }

 private:
  class Parser;
  std::vector<Answer> Run(std::string_view bytes, bool eof);
  std::unique_ptr<Parser> parser_;
  std::deque<bool> heads_;
  std::string held_;  // bytes the parser has not taken yet (a head not complete)
  std::uint64_t bytes_ = 0;
  bool broken_ = false;
};

}  // namespace agvisor::egress
