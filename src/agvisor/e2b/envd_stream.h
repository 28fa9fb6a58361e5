// A server stream of envd (Process.Start/Connect, Filesystem.WatchDir) pumped from a producer
// thread to the connection thread: the producer (a command's Wait, a directory watch's Next)
// pushes encoded messages into a bounded queue; the connection thread writes each as an envelope,
// adds a keep-alive message when nothing came for the interval the client asked, ends the stream
// at the client's deadline (deadline_exceeded), and cancels the producer when the client goes.
// The HTTP stream is only written from the connection thread (server.h HttpStream's rule).
//
// Used by envd_process.cc and envd_fs.cc; unit-tested with a fake writer and producer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/e2b/connect.h"

namespace agvisor::e2b::envd {

// The bytes of a stream's answer as they are made. Errors: the client went away.
using StreamWriter = std::function<Result<void>(std::string_view bytes)>;

struct StreamOptions {
  std::optional<std::chrono::milliseconds> deadline;  // Connect-Timeout-Ms
  std::chrono::milliseconds keepalive{std::chrono::seconds(50)};
};

// Messages from the producer to the connection thread. Bounded by bytes: Push blocks while the
// queue holds more than max_bytes (the client reads slower than the sandbox writes: the
// producer, and through it the agent's flow control, waits).
class EventQueue {
 public:
  explicit EventQueue(std::size_t max_bytes) : max_bytes_(max_bytes) {}
  // False once the consumer cancelled (the message is dropped).
  bool Push(std::string message);
  // The producer's end: the stream ends with `error` (nullopt: success).
  void Finish(std::optional<connect::RpcError> error);
  // The consumer's end: Push returns false from now on.
  void Cancel();
  enum class Got { kMessage, kTimeout, kEnd };
  Got Pop(std::string& out, std::chrono::steady_clock::time_point until);
  const std::optional<connect::RpcError>& end_error() const { return end_error_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> messages_;
  std::size_t bytes_ = 0;
  std::size_t max_bytes_;
  bool finished_ = false;
  bool cancelled_ = false;
  std::optional<connect::RpcError> end_error_;
};

// Runs `produce(queue)` on a thread of its own and writes what it pushes as envelopes, then the
// end-stream envelope. `keepalive_json` is the method's keep-alive message. `cancel` is called
// (from this thread) when the client went away (false) or its deadline passed (true): it must
// make `produce` return soon (close the command or watch). Returns when the producer returned.
void PumpStream(const StreamWriter& write, const StreamOptions& options,
                std::string_view keepalive_json, const std::function<void(EventQueue&)>& produce,
                const std::function<void(bool deadline)>& cancel);

}  // namespace agvisor::e2b::envd
