// Bytes that arrived ahead of their reader, handed out in order by later reads.
//
// Used by the RawStreams of http/ (bytes the HTTP parser read past the response headers) and by
// kube/'s exec stream (stdout decoded from one WebSocket message, larger than the reader's buffer).
// Not thread-safe: the owner holds its own lock where reads can race.
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <string>

namespace agvisor {

class PendingBytes {
 public:
  PendingBytes() = default;
  explicit PendingBytes(std::string bytes) : bytes_(std::move(bytes)) {}

  // Replaces what is left with `bytes`.
  void Assign(std::string bytes) {
    bytes_ = std::move(bytes);
    pos_ = 0;
  }

  bool empty() const { return pos_ >= bytes_.size(); }

  // Moves up to buf.size() bytes into `buf` and returns how many; 0 when empty. The storage is
  // released once everything has been handed out (a large first read does not stay resident).
  std::size_t Take(std::span<char> buf) {
    if (empty()) return 0;
    const std::size_t n = std::min(buf.size(), bytes_.size() - pos_);
    std::memcpy(buf.data(), bytes_.data() + pos_, n);
    pos_ += n;
    if (pos_ >= bytes_.size()) {
      std::string().swap(bytes_);
      pos_ = 0;
    }
    return n;
  }

 private:
  std::string bytes_;
  std::size_t pos_ = 0;
};

}  // namespace agvisor
