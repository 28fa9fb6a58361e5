// Transport: the byte stream a Channel runs over, and FdTransport, the one over file descriptors.
//
// The channel (channel.h) knows nothing of Docker: sandbox/ adapts a hijacked attach or
// `docker exec -i agvisor-agent connect` stream to this interface; tests run the channel over
// pipes to a real agent process (FdTransport) or over an in-memory pair.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor::channel {

// A bidirectional byte stream. Read is called from one thread (the channel's reader) while
// Write is called from others (the channel serialises its writes); Close may come from any
// thread at any time.
class Transport {
 public:
  virtual ~Transport() = default;
  // Up to buf.size() bytes; 0 = the peer closed its side (or Close was called).
  // Errors: kUnavailable (the stream broke).
  virtual Result<std::size_t> Read(std::span<char> buf) = 0;
  // All of `data`, or kUnavailable.
  virtual Result<void> Write(std::string_view data) = 0;
  // All of the parts, in order, as one write where the transport can (writev); the default
  // writes them one by one. Used for a frame header followed by a large payload, so payloads are
  // never copied into a frame buffer.
  virtual Result<void> WriteParts(std::span<const std::string_view> parts);
  // Closes both directions: a Read blocked in another thread returns 0 and later Writes fail.
  // Idempotent.
  virtual void Close() = 0;
};

// A Transport over a readable and a writable fd (two pipes, or one socket passed twice as
// dup'ed fds). Close wakes a blocked Read through an eventfd, so it is safe from any thread.
class FdTransport : public Transport {
 public:
  // Errors: kResourceExhausted (no eventfd).
  static Result<std::unique_ptr<FdTransport>> Create(UniqueFd read_fd, UniqueFd write_fd);
  ~FdTransport() override;

  Result<std::size_t> Read(std::span<char> buf) override;
  Result<void> Write(std::string_view data) override;
  Result<void> WriteParts(std::span<const std::string_view> parts) override;
  void Close() override;

 private:
  FdTransport(UniqueFd read_fd, UniqueFd write_fd, UniqueFd wake_fd);
  UniqueFd read_fd_;
  UniqueFd write_fd_;
  UniqueFd wake_fd_;
  std::atomic<bool> closed_{false};
};

}  // namespace agvisor::channel
