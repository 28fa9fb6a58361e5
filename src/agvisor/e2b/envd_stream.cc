#include "agvisor/e2b/envd_stream.h"

#include <algorithm>
#include <thread>

namespace agvisor::e2b::envd {

bool EventQueue::Push(std::string message) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return cancelled_ || bytes_ < max_bytes_; });
  if (cancelled_) return false;
  bytes_ += message.size();
  messages_.push_back(std::move(message));
  cv_.notify_all();
  return true;
}

void EventQueue::Finish(std::optional<connect::RpcError> error) {
  std::lock_guard lock(mu_);
  finished_ = true;
  end_error_ = std::move(error);
  cv_.notify_all();
}

void EventQueue::Cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  cv_.notify_all();
}

EventQueue::Got EventQueue::Pop(std::string& out, std::chrono::steady_clock::time_point until) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_until(lock, until, [&] { return !messages_.empty() || finished_; })) {
    return Got::kTimeout;
  }
  if (messages_.empty()) return Got::kEnd;
  out = std::move(messages_.front());
  messages_.pop_front();
  bytes_ -= out.size();
  cv_.notify_all();
  return Got::kMessage;
}

void PumpStream(const StreamWriter& write, const StreamOptions& options,
                std::string_view keepalive_json, const std::function<void(EventQueue&)>& produce,
                const std::function<void(bool deadline)>& cancel) {
  using Clock = std::chrono::steady_clock;
  EventQueue queue(4u << 20);
  std::thread producer([&] { produce(queue); });
  const auto deadline = options.deadline ? std::optional(Clock::now() + *options.deadline)
                                         : std::optional<Clock::time_point>{};
  auto next_keepalive = Clock::now() + options.keepalive;
  bool client_gone = false;
  std::optional<connect::RpcError> ended_here;
  while (true) {
    auto until = deadline ? std::min(next_keepalive, *deadline) : next_keepalive;
    std::string message;
    auto got = queue.Pop(message, until);
    if (got == EventQueue::Got::kEnd) break;
    if (got == EventQueue::Got::kTimeout) {
      if (deadline && Clock::now() >= *deadline) {
        ended_here = connect::RpcError{connect::Code::kDeadlineExceeded,
                                       "the stream's deadline (Connect-Timeout-Ms) passed"};
        break;
      }
      message = std::string(keepalive_json);
    }
    if (!write(connect::Envelope(message)).ok()) {
      client_gone = true;
      break;
    }
    next_keepalive = Clock::now() + options.keepalive;
  }
  if (client_gone || ended_here) {
    queue.Cancel();
    cancel(ended_here.has_value());
  }
  producer.join();
  if (client_gone) return;
  (void)write(connect::EndStream(ended_here ? ended_here : queue.end_error()));
}

}  // namespace agvisor::e2b::envd
