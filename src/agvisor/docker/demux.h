// Decoder of Docker's multiplexed stdout/stderr stream (non-TTY attach, exec and logs).
//
// Used by docker/client.cc (ExecStream, ContainerLogs). Pure and incremental: feed it whatever
// chunks the socket returns; it emits payload bytes as soon as they arrive, without buffering
// whole frames (a frame can be up to 4 GiB). Unit-tested at every split point (demux_test.cc).
//
// Wire format (https://docs.docker.com/engine/api/v1.41/#operation/ContainerAttach): frames of
//   [stream type: 1 byte (0 stdin, 1 stdout, 2 stderr)] [3 zero bytes] [payload size: uint32 BE]
// followed by `size` payload bytes. A TTY stream has no framing (raw bytes).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::docker {

enum class StreamKind : std::uint8_t { kStdin = 0, kStdout = 1, kStderr = 2 };

std::string_view StreamKindName(StreamKind kind);  // "stdin", "stdout", "stderr"

class Demuxer {
 public:
  // Receives one piece of payload (never empty). A frame may arrive as several pieces.
  using Emit = std::function<void(StreamKind stream, std::string_view bytes)>;

  // Consumes all of `chunk`, calling `emit` for each payload piece in order.
  // Errors: kInternal on a malformed header (stream type > 2 or non-zero padding); the decoder
  // then stays failed and every later Feed returns the same error.
  Result<void> Feed(std::string_view chunk, const Emit& emit);

  // At the end of the stream: kInternal if it ended inside a frame (truncated), else OK.
  Result<void> Finish() const;

  // True between frames (nothing partial held).
  bool at_frame_boundary() const { return header_fill_ == 0 && remaining_ == 0; }

 private:
  std::array<unsigned char, 8> header_{};
  std::size_t header_fill_ = 0;  // bytes of the current header seen
  std::uint32_t remaining_ = 0;  // payload bytes of the current frame still to come
  StreamKind stream_ = StreamKind::kStdout;
  bool failed_ = false;
  std::string error_;
};

// Builds one frame (for tests and fakes).
std::string EncodeFrame(StreamKind stream, std::string_view payload);

}  // namespace agvisor::docker
