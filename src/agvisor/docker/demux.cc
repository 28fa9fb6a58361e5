#include "agvisor/docker/demux.h"

#include <algorithm>

namespace agvisor::docker {

std::string_view StreamKindName(StreamKind kind) {
  switch (kind) {
    case StreamKind::kStdin:
      return "stdin";
    case StreamKind::kStdout:
      return "stdout";
    case StreamKind::kStderr:
      return "stderr";
  }
  return "unknown";
}

Result<void> Demuxer::Feed(std::string_view chunk, const Emit& emit) {
  if (failed_) return Error::Internal(error_);
  while (!chunk.empty()) {
    if (remaining_ > 0) {
      const std::size_t n = std::min<std::size_t>(remaining_, chunk.size());
      emit(stream_, chunk.substr(0, n));
      remaining_ -= static_cast<std::uint32_t>(n);
      chunk.remove_prefix(n);
      continue;
    }
    const std::size_t n = std::min(header_.size() - header_fill_, chunk.size());
    std::copy_n(chunk.data(), n, header_.data() + header_fill_);
    header_fill_ += n;
    chunk.remove_prefix(n);
    if (header_fill_ < header_.size()) break;
    header_fill_ = 0;
    if (header_[0] > 2 || header_[1] != 0 || header_[2] != 0 || header_[3] != 0) {
      failed_ = true;
      error_ = "docker stream: malformed frame header (stream type " + std::to_string(header_[0]) +
               ", padding " + std::to_string(header_[1]) + "," + std::to_string(header_[2]) + "," +
               std::to_string(header_[3]) + "); was the stream a TTY one?";
      return Error::Internal(error_);
    }
    stream_ = static_cast<StreamKind>(header_[0]);
    remaining_ = (std::uint32_t{header_[4]} << 24) | (std::uint32_t{header_[5]} << 16) |
                 (std::uint32_t{header_[6]} << 8) | std::uint32_t{header_[7]};
  }
  return Ok();
}

Result<void> Demuxer::Finish() const {
  if (failed_) return Error::Internal(error_);
  if (header_fill_ != 0) {
    return Error::Internal("docker stream: ended inside a frame header (" +
                           std::to_string(header_fill_) + " of 8 bytes)");
  }
  if (remaining_ != 0) {
    return Error::Internal("docker stream: ended inside a frame (" + std::to_string(remaining_) +
                           " payload bytes missing)");
  }
  return Ok();
}

std::string EncodeFrame(StreamKind stream, std::string_view payload) {
  const auto size = static_cast<std::uint32_t>(payload.size());
  std::string out(8, '\0');
  out[0] = static_cast<char>(stream);
  out[4] = static_cast<char>((size >> 24) & 0xff);
  out[5] = static_cast<char>((size >> 16) & 0xff);
  out[6] = static_cast<char>((size >> 8) & 0xff);
  out[7] = static_cast<char>(size & 0xff);
  out.append(payload);
  return out;
}

}  // namespace agvisor::docker
