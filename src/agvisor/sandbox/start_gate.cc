#include "agvisor/sandbox/start_gate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

namespace agvisor {
namespace {

std::string HostName(const std::string& host) {
  return host.empty() ? std::string("this host") : host;
}

Result<long long> EnvCount(const char* var, long long max) {
  const char* v = std::getenv(var);
  std::string text = v ? v : "";
  char* end = nullptr;
  long long n = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 0 || n > max) {
    return Error::InvalidArgument(std::string(var) + "='" + text +
                                  "' is invalid: expected a whole number from 0 to " +
                                  std::to_string(max));
  }
  return n;
}

}  // namespace

Result<StartGateLimits> StartGateLimitsFromEnv() {
  StartGateLimits l;
  if (std::getenv("AGVISOR_MAX_STARTS")) {
    l.max_concurrent = static_cast<int>(AGVISOR_TRY(EnvCount("AGVISOR_MAX_STARTS", 10000)));
  }
  if (std::getenv("AGVISOR_START_QUEUE")) {
    l.max_queued = static_cast<int>(AGVISOR_TRY(EnvCount("AGVISOR_START_QUEUE", 1000000)));
  }
  if (const char* w = std::getenv("AGVISOR_START_WAIT")) {
    char* end = nullptr;
    double s = std::strtod(w, &end);
    if (*w == '\0' || *end != '\0' || !(s > 0) || s > 86400) {
      return Error::InvalidArgument(std::string("AGVISOR_START_WAIT='") + w +
                                    "' is invalid: expected seconds, > 0 and at most 86400");
    }
    l.max_wait = std::chrono::milliseconds(std::llround(s * 1000));
  }
  return l;
}

StartGate::Ticket::Ticket(Ticket&& o) noexcept
    : gate_(std::exchange(o.gate_, nullptr)), waited_(o.waited_) {}

StartGate::Ticket& StartGate::Ticket::operator=(Ticket&& o) noexcept {
  if (this != &o) {
    Release();
    gate_ = std::exchange(o.gate_, nullptr);
    waited_ = o.waited_;
  }
  return *this;
}

StartGate::Ticket::~Ticket() { Release(); }

void StartGate::Ticket::Release() {
  if (gate_) std::exchange(gate_, nullptr)->Leave();
}

StartGate::StartGate(std::string host, StartGateLimits limits)
    : host_(std::move(host)), limits_(limits) {}

bool StartGate::HasRoom() const {
  return limits_.max_concurrent == 0 || running_ < limits_.max_concurrent;
}

Error StartGate::Busy(std::string why) const {
  return Error::ResourceExhausted(
      HostName(host_) + " is busy starting sandboxes: " + why + " (" + std::to_string(running_) +
      " starting, " + std::to_string(queue_.size()) +
      " waiting; limits AGVISOR_MAX_STARTS=" + std::to_string(limits_.max_concurrent) +
      ", AGVISOR_START_QUEUE=" + std::to_string(limits_.max_queued) + "). Retry in a few " +
      "seconds, use a warm pool, or raise the limits if the host has the capacity");
}

Result<StartGate::Ticket> StartGate::Enter() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  if (queue_.empty() && HasRoom()) {
    ++running_;
    ++stats_.admitted;
    return Ticket(this, std::chrono::milliseconds(0));
  }
  if (static_cast<std::int64_t>(queue_.size()) >= limits_.max_queued) {
    ++stats_.refused;
    return Busy("the start queue is full");
  }
  const std::uint64_t me = next_number_++;
  queue_.push_back(me);
  const auto deadline = t0 + limits_.max_wait;
  bool admitted = cv_.wait_until(lock, deadline, [&] { return queue_.front() == me && HasRoom(); });
  if (!admitted) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), me));
    ++stats_.refused;
    cv_.notify_all();  // the next in line may be at the front now
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.0f s", limits_.max_wait.count() / 1000.0);
    return Busy(std::string("no start slot within ") + secs + " (AGVISOR_START_WAIT)");
  }
  queue_.pop_front();
  ++running_;
  ++stats_.admitted;
  auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  stats_.longest_wait = std::max(stats_.longest_wait, waited);
  cv_.notify_all();  // the next waiter may fit too
  return Ticket(this, waited);
}

void StartGate::Leave() {
  std::lock_guard lock(mu_);
  --running_;
  cv_.notify_all();
}

void StartGate::SetLimits(StartGateLimits limits) {
  std::lock_guard lock(mu_);
  limits_ = limits;
  cv_.notify_all();
}

StartGateLimits StartGate::limits() const {
  std::lock_guard lock(mu_);
  return limits_;
}

StartGateStats StartGate::stats() const {
  std::lock_guard lock(mu_);
  StartGateStats s = stats_;
  s.running = running_;
  s.queued = static_cast<int>(queue_.size());
  return s;
}

}  // namespace agvisor
