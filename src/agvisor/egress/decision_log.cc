#include "agvisor/egress/decision_log.h"

#include <ctime>

namespace agvisor::egress {

std::string FormatDecisionTime(std::chrono::system_clock::time_point t) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[64];  // room for any int the format could print (-Wformat-truncation)
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return stamp;
}

std::string FormatDecision(const Decision& d) {
  std::string out = FormatDecisionTime(d.time) + " sandbox=" + d.sandbox + " " + d.via + " " +
                    d.name + ":" + std::to_string(d.port) +
                    (d.learned   ? " learned ("
                     : d.allowed ? " allowed ("
                                 : " denied (") +
                    d.reason + ")";
  if (!d.address.empty()) out += (d.allowed ? " -> " : " address ") + d.address;
  return out;
}

DecisionLog::DecisionLog(std::size_t capacity, std::size_t max_sandboxes)
    : capacity_(capacity == 0 ? 1 : capacity),
      max_sandboxes_(max_sandboxes == 0 ? 1 : max_sandboxes) {}

void DecisionLog::Record(Decision decision) {
  std::lock_guard lock(mu_);
  auto it = rings_.find(decision.sandbox);
  if (it == rings_.end()) {
    if (rings_.size() >= max_sandboxes_) {
      auto oldest = rings_.begin();
      for (auto r = rings_.begin(); r != rings_.end(); ++r) {
        if (r->second.last_write < oldest->second.last_write) oldest = r;
      }
      rings_.erase(oldest);
    }
    it = rings_.emplace(decision.sandbox, Ring{}).first;
  }
  Ring& ring = it->second;
  if (decision.learned) {
    ring.counters.learned++;
    totals_.learned++;
    LearnedDestination where{.name = decision.name, .port = decision.port};
    if (decision.via != "dns" && decision.method.empty() && !ring.learned.contains(where)) {
      if (ring.learned.size() < kMaxLearnedDestinations) {
        ring.learned.insert(std::move(where));
      } else {
        ring.learned_dropped++;
      }
    }
  } else {
    (decision.allowed ? ring.counters.allowed : ring.counters.denied)++;
    (decision.allowed ? totals_.allowed : totals_.denied)++;
  }
  ring.last_write = ++writes_;
  if (ring.entries.size() == capacity_) ring.entries.pop_front();
  ring.entries.push_back(std::move(decision));
}

std::vector<Decision> DecisionLog::Recent(const std::string& sandbox) const {
  std::lock_guard lock(mu_);
  auto it = rings_.find(sandbox);
  if (it == rings_.end()) return {};
  return {it->second.entries.begin(), it->second.entries.end()};
}

DecisionCounters DecisionLog::Counters(const std::string& sandbox) const {
  std::lock_guard lock(mu_);
  auto it = rings_.find(sandbox);
  return it == rings_.end() ? DecisionCounters{} : it->second.counters;
}

LearnedDestinations DecisionLog::Learned(const std::string& sandbox) const {
  std::lock_guard lock(mu_);
  auto it = rings_.find(sandbox);
  if (it == rings_.end()) return {};
  return {.kept = {it->second.learned.begin(), it->second.learned.end()},
          .dropped = it->second.learned_dropped};
}

DecisionCounters DecisionLog::Totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

void DecisionLog::Forget(const std::string& sandbox) {
  std::lock_guard lock(mu_);
  rings_.erase(sandbox);
}

}  // namespace agvisor::egress
