// The client side of RFC 6455 WebSocket framing and Kubernetes' remote-command channel protocol
// (v5.channel.k8s.io, v4.channel.k8s.io) carried in it: pure encoders and a strict, bounded
// decoder, no I/O. kube::ExecStream (client.h) runs them over a TLS stream for pods/exec and
// pods/attach; websocket_test.cc feeds the decoder at every split point.
//
// The channel protocol: every binary message starts with one byte naming its stream (0 stdin,
// 1 stdout, 2 stderr, 3 error: a Status object when the process ended, 4 resize), the rest is
// that stream's bytes. v5 adds the close message [255, STREAM] that ends the process's stdin;
// v4 has no way to end stdin short of closing the connection.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::kube {

enum class WsOpcode : std::uint8_t {
  kContinuation = 0,
  kText = 1,
  kBinary = 2,
  kClose = 8,
  kPing = 9,
  kPong = 10,
};

// One whole client frame (FIN set) of `payload`, masked with `mask` as clients must.
std::string EncodeClientFrame(WsOpcode opcode, std::string_view payload,
                              std::array<std::uint8_t, 4> mask);

// A whole message (its fragments joined) or a control frame.
struct WsMessage {
  WsOpcode opcode = WsOpcode::kBinary;  // kText, kBinary, kClose, kPing or kPong
  std::string payload;
};

// Reassembles a server's frames into messages. Strict: masked server frames, reserved bits, an
// unknown opcode, a fragmented or over-long (> 125) control frame, a continuation without a
// start, and a message longer than `max_message_bytes` are errors (kUnavailable: the peer broke
// the protocol; the connection must be dropped).
class WsDecoder {
 public:
  explicit WsDecoder(std::size_t max_message_bytes) : max_message_(max_message_bytes) {}
  // Appends bytes read from the connection.
  void Feed(std::string_view bytes) { buf_.append(bytes); }
  // The next complete message, nullopt when more bytes are needed.
  Result<std::optional<WsMessage>> Next();
  // Bytes fed but not yet consumed (for tests and bounds: never more than one frame's worth).
  std::size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::size_t max_message_;
  std::string buf_;
  std::size_t pos_ = 0;
  bool in_message_ = false;  // a fragmented data message is being reassembled
  WsOpcode message_opcode_ = WsOpcode::kBinary;
  std::string message_;
};

// A fresh Sec-WebSocket-Key (16 random bytes, base64).
std::string NewWebSocketKey();
// The Sec-WebSocket-Accept a server must answer `key` with.
std::string WebSocketAccept(std::string_view key);
std::string EncodeBase64(std::string_view bytes);

// ---- Kubernetes' channel protocol ----
inline constexpr std::string_view kChannelV5 = "v5.channel.k8s.io";
inline constexpr std::string_view kChannelV4 = "v4.channel.k8s.io";

enum class KubeStream : std::uint8_t {
  kStdin = 0,
  kStdout = 1,
  kStderr = 2,
  kError = 3,
  kResize = 4,
  kClose = 255,  // v5 only: [255, STREAM] closes that stream
};

// The payload of one binary message on `stream`.
std::string EncodeChannelMessage(KubeStream stream, std::string_view data);
// v5's end of stdin.
std::string EncodeCloseStdin();

// The stream and the bytes of a received binary message. A message of the stream byte alone is
// accepted on any stream (servers may open each stream so; the caller skips it). Errors:
// kUnavailable (an empty message; bytes on a stream a server does not send on: 0, 4, 255).
struct ChannelMessage {
  KubeStream stream;
  std::string_view data;
};
Result<ChannelMessage> DecodeChannelMessage(std::string_view payload);

}  // namespace agvisor::kube
