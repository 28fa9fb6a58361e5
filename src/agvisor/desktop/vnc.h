// The VNC (RFB) pieces agvisor needs on the host side, pure and unit-tested (vnc_test.cc):
//   - VNC authentication: DES of the server's challenge keyed by the password (RFC 6143 7.2.2);
//   - a minimal RFB client over any byte stream: the handshake (rfb.h's state machine, which the
//     gateway drives too), then one full framebuffer capture (Raw encoding, 32-bit true colour)
//     or key events;
//   - PNG encoding of an RGB image (zlib).
//
// Used by sandbox/desktop.cc (Screenshot and TypeText through Sandbox::OpenPort(5900)), rfb.cc
// (VncAuthResponse) and the integration tests. DES and the Xvnc password file are in des.h
// (shared with the agent).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/desktop/des.h"

namespace agvisor::vnc {

// The 16-byte answer to a VNC authentication challenge: the challenge DES-encrypted (two
// blocks, ECB) with the first 8 bytes of `password` (zero padded) as the bit-reversed key.
std::array<std::uint8_t, 16> VncAuthResponse(std::string_view password,
                                             std::span<const std::uint8_t, 16> challenge);

// A byte stream the RFB client reads and writes (a Sandbox::OpenPort stream, a socket, a test
// double). `read` returns 0 at end of stream.
struct ByteStream {
  std::function<Result<std::size_t>(std::span<char>)> read;
  std::function<Result<void>(std::string_view)> write;
};

// What the server said in its handshake.
struct ServerInit {
  std::string version;              // "RFB 003.008", as the server sent it
  std::vector<std::uint8_t> types;  // security types offered (2 = VNC authentication)
  std::uint16_t width = 0, height = 0;
  std::string name;  // the desktop's name
};

// Runs the client side of the RFB handshake (RfbClientHandshake: versions 3.3, 3.7, 3.8; VNC
// authentication with `password`, or None where that is all the server offers), then ClientInit
// (shared) and ServerInit. Errors: kUnsupported (not RFB 3.x, or no security type it can answer:
// the message lists what was offered), kPermissionDenied (the server refused the password: its
// reason), kUnavailable (the stream ended or failed, or the server refused the connection),
// kInternal (bytes out of order).
Result<ServerInit> Handshake(const ByteStream& stream, std::string_view password);

// An image as 8-bit RGB, row by row (width * height * 3 bytes).
struct RgbImage {
  std::uint32_t width = 0, height = 0;
  std::string rgb;
};

// After Handshake: asks for the whole screen in Raw encoding at 32 bits per pixel and returns
// it. Skips bells, clipboard text and colour maps. Errors: kUnavailable (stream), kInternal (the
// server sent something this client did not ask for).
Result<RgbImage> CaptureFramebuffer(const ByteStream& stream, const ServerInit& init);

// The X keysyms that type `text` (UTF-8), one per character: ASCII and Latin-1 characters are
// their code points, others X's Unicode keysyms (0x01000000 + code point); "\n" and "\r" are
// Return, "\t" Tab. Errors: kInvalidArgument for invalid UTF-8 and other control characters.
Result<std::vector<std::uint32_t>> KeysymsForText(std::string_view text);

// One RFB KeyEvent message (8 bytes): `keysym` pressed (down) or released.
std::string KeyEventMessage(std::uint32_t keysym, bool down);

// After Handshake: presses and releases each keysym in turn, then waits until the server has
// taken them (a one-pixel update asked for after the keys is answered). TigerVNC's Xvnc maps a
// keysym missing from its keyboard onto a free keycode and keeps it there, so any character
// types without the remap-and-restore race of xdotool's typing. Errors as CaptureFramebuffer.
Result<void> TypeKeysyms(const ByteStream& stream, const ServerInit& init,
                         std::span<const std::uint32_t> keysyms);

// A PNG file (8-bit RGB, zlib level 6) of `image`. Errors: kInvalidArgument (size mismatch or an
// empty image).
Result<std::string> EncodePng(const RgbImage& image);

// Decodes what EncodePng writes (8-bit RGB, non-interlaced; filter types 0-4), for tests and
// the CLI's checks. Errors: kInvalidArgument naming what is not as expected.
Result<RgbImage> DecodePng(std::string_view png);

}  // namespace agvisor::vnc
