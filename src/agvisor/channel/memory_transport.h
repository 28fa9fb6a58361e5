// An in-memory Transport pair for tests: what one end writes, the other reads. Reads return at
// most `max_read` bytes, so a test can force every frame to arrive split at every byte.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "agvisor/channel/transport.h"

namespace agvisor::channel {

class MemoryTransport : public Transport {
 public:
  // Two connected ends.
  static std::pair<std::unique_ptr<MemoryTransport>, std::unique_ptr<MemoryTransport>> Pair(
      std::size_t max_read = 1 << 20) {
    auto a = std::make_shared<Pipe>();
    auto b = std::make_shared<Pipe>();
    return {std::unique_ptr<MemoryTransport>(new MemoryTransport(a, b, max_read)),
            std::unique_ptr<MemoryTransport>(new MemoryTransport(b, a, max_read))};
  }
  ~MemoryTransport() override { Close(); }

  Result<std::size_t> Read(std::span<char> buf) override {
    std::unique_lock lock(in_->mu);
    in_->cv.wait(lock, [&] { return !in_->bytes.empty() || in_->closed; });
    if (in_->bytes.empty()) return std::size_t{0};
    std::size_t n = std::min({buf.size(), in_->bytes.size(), max_read_});
    std::copy_n(in_->bytes.begin(), n, buf.begin());
    in_->bytes.erase(in_->bytes.begin(), in_->bytes.begin() + static_cast<std::ptrdiff_t>(n));
    return n;
  }
  Result<void> Write(std::string_view data) override {
    std::lock_guard lock(out_->mu);
    if (out_->closed) return Error::Unavailable("memory transport: closed");
    out_->bytes.insert(out_->bytes.end(), data.begin(), data.end());
    out_->cv.notify_all();
    return Ok();
  }
  void Close() override {
    for (auto* p : {in_.get(), out_.get()}) {
      std::lock_guard lock(p->mu);
      p->closed = true;
      p->cv.notify_all();
    }
  }

 private:
  struct Pipe {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<char> bytes;
    bool closed = false;
  };
  MemoryTransport(std::shared_ptr<Pipe> in, std::shared_ptr<Pipe> out, std::size_t max_read)
      : in_(std::move(in)), out_(std::move(out)), max_read_(max_read) {}
  std::shared_ptr<Pipe> in_, out_;
  std::size_t max_read_;
};

}  // namespace agvisor::channel
