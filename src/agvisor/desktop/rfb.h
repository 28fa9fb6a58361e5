// The RFB (VNC) handshakes, as byte-in, byte-out state machines (RFC 6143): no I/O, so the tests
// feed them byte by byte at every split point.
//
// RfbClientHandshake is the one client handshake of the project: vnc::Handshake (vnc.h) drives it
// over a blocking stream for the sandbox's desktop verbs (screenshots, typing), and the desktop
// gateway (gateway/gateway.cc) drives it towards the sandbox's VNC server, answering VNC
// authentication with the password from the viewer's token. Towards the browser the gateway is the
// VNC server (RfbServerHandshake) and offers security type None: the browser is already
// authenticated by its token and never sees the password. After both handshakes the gateway relays
// bytes unchanged, starting with the browser's ClientInit.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::vnc {

// What a state machine asks for after a Feed.
struct RfbStep {
  std::string send;   // bytes to write to the peer now
  bool done = false;  // the handshake is over; leftover() holds bytes that came after it
};

// What both sides share: the bytes received and not used yet, and the loop that feeds them to
// the side's states.
class RfbHandshake {
 public:
  virtual ~RfbHandshake() = default;
  // Feeds bytes the peer sent (errors: each side's, below). After an error or `done`, Feed must
  // not be called.
  Result<RfbStep> Feed(std::string_view bytes);
  // Bytes after the end of the handshake (see each side).
  const std::string& leftover() const { return buf_; }

 protected:
  // Takes the handshake one state further with the bytes in buf_, adding what to send to `step`:
  // false when it needs more bytes, or when it is over (then step.done is set).
  virtual Result<bool> Advance(RfbStep& step) = 0;

  std::string buf_;
};

// The client side, up to ClientInit (versions 3.3, 3.7, 3.8; security types VNC authentication,
// preferred, or None).
//
// Feed takes the bytes the server sent. Errors: kPermissionDenied (the server refused the
// password, with its reason), kUnavailable (the server refused the connection, with its reason),
// kUnsupported (no security type we can answer; another protocol), kInvalidArgument (malformed
// bytes). leftover() is normally empty: the server waits for ClientInit.
class RfbClientHandshake final : public RfbHandshake {
 public:
  explicit RfbClientHandshake(std::string password) : password_(std::move(password)) {}
  // The security type used: 1 None, 2 VNC authentication (valid once done).
  int security_type() const { return security_type_; }
  // The server's ProtocolVersion without its newline ("RFB 003.008"), once it came.
  const std::string& server_version() const { return server_version_; }
  // The security types the server offered (3.7, 3.8), or the one it decided on (3.3).
  const std::vector<std::uint8_t>& offered_types() const { return offered_types_; }

 private:
  Result<bool> Advance(RfbStep& step) override;

  enum class State { kVersion, kTypes, kType33, kChallenge, kResult, kReason, kDone };
  State state_ = State::kVersion;
  int minor_ = 8;
  int security_type_ = 0;
  std::string server_version_;
  std::vector<std::uint8_t> offered_types_;
  std::string password_;
};

// The server side, for a viewer the gateway has already authenticated by its token: offers
// security type None (versions 3.3, 3.7, 3.8).
//
// Feed takes the bytes the viewer sent. Errors: kInvalidArgument (not an RFB viewer, a security
// type other than None). leftover() is the viewer's bytes after its security choice: the start
// of ClientInit (relay them on).
class RfbServerHandshake final : public RfbHandshake {
 public:
  // The ProtocolVersion to send first: "RFB 003.008\n".
  static std::string_view Greeting() { return "RFB 003.008\n"; }

 private:
  Result<bool> Advance(RfbStep& step) override;

  enum class State { kVersion, kChoice, kDone };
  State state_ = State::kVersion;
  int minor_ = 8;
};

}  // namespace agvisor::vnc
