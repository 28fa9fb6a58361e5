// The RFB (VNC) handshakes the desktop gateway does on each side of a viewer's connection.
//
// Used by the gateway (gateway.cc). Pure: byte-in, byte-out state machines, no I/O, so the tests
// feed them byte by byte at every split point (RFC 6143).
//
// Towards the sandbox the gateway is the VNC client: it answers VNC authentication with the
// password from the token (vnc::VncAuthResponse, sandbox/vnc.h). Towards the browser it is the VNC
// server and offers security type None: the browser is already authenticated by its token and never
// sees the password. After both handshakes the gateway relays bytes unchanged, starting with the
// browser's ClientInit.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::gateway {

// What a state machine asks for after a Feed.
struct RfbStep {
  std::string send;   // bytes to write to the peer now
  bool done = false;  // the handshake is over; leftover() holds bytes that came after it
};

// The gateway as VNC client of the sandbox's server (versions 3.3, 3.7, 3.8).
class RfbClientHandshake {
 public:
  explicit RfbClientHandshake(std::string password) : password_(std::move(password)) {}
  // Feeds bytes the server sent. Errors: kPermissionDenied (the server refused the password,
  // with its reason), kUnsupported (no security type we can answer; another protocol),
  // kInvalidArgument (malformed bytes). After an error or `done`, Feed must not be called.
  Result<RfbStep> Feed(std::string_view bytes);
  // Bytes after the end of the handshake (normally none: the server waits for ClientInit).
  const std::string& leftover() const { return buf_; }
  // The security type used: 1 None, 2 VNC authentication (valid once done).
  int security_type() const { return security_type_; }

 private:
  enum class State { kVersion, kTypes, kType33, kChallenge, kResult, kReason, kDone };
  State state_ = State::kVersion;
  int minor_ = 8;
  int security_type_ = 0;
  std::string password_;
  std::string buf_;
};

// The gateway as VNC server for a browser: offers security type None (versions 3.3, 3.7, 3.8).
class RfbServerHandshake {
 public:
  // The ProtocolVersion to send first: "RFB 003.008\n".
  static std::string_view Greeting() { return "RFB 003.008\n"; }
  // Feeds bytes the viewer sent. Errors: kInvalidArgument (not an RFB viewer, a security type
  // other than None).
  Result<RfbStep> Feed(std::string_view bytes);
  // The viewer's bytes after its security choice: the start of ClientInit (relay them on).
  const std::string& leftover() const { return buf_; }

 private:
  enum class State { kVersion, kChoice, kDone };
  State state_ = State::kVersion;
  int minor_ = 8;
  std::string buf_;
};

}  // namespace agvisor::gateway
