#include "agvisor/egress/decision_log.h"

#include <cstdio>
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

std::optional<std::chrono::system_clock::time_point> ParseDecisionTime(std::string_view text) {
  // "YYYY-MM-DDTHH:MM:SS.mmmZ": 24 characters, digits where FormatDecisionTime puts them.
  constexpr std::string_view kShape = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (text.size() != kShape.size()) return std::nullopt;
  for (std::size_t i = 0; i < kShape.size(); ++i) {
    const bool digit = text[i] >= '0' && text[i] <= '9';
    if (kShape[i] == 'd' ? !digit : text[i] != kShape[i]) return std::nullopt;
  }
  auto num = [&](std::size_t at, std::size_t len) {
    int v = 0;
    for (std::size_t i = at; i < at + len; ++i) v = v * 10 + (text[i] - '0');
    return v;
  };
  std::tm tm{};
  tm.tm_year = num(0, 4) - 1900;
  tm.tm_mon = num(5, 2) - 1;
  tm.tm_mday = num(8, 2);
  tm.tm_hour = num(11, 2);
  tm.tm_min = num(14, 2);
  tm.tm_sec = num(17, 2);
  if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
      tm.tm_sec > 60) {
    return std::nullopt;
  }
  const std::time_t secs = timegm(&tm);
  return std::chrono::system_clock::from_time_t(secs) + std::chrono::milliseconds(num(20, 3));
}

namespace {

// Cuts `s` to at most `max` bytes, ending in "...", without splitting a UTF-8 sequence.
void Bound(std::string& s, std::size_t max) {
  if (s.size() <= max) return;
  std::size_t cut = max - 3;
  // Back over continuation bytes (10xxxxxx) to the start of the character the cut would split.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  s += "...";
}

}  // namespace

void BoundDecision(Decision& d) {
  Bound(d.path, kMaxRecordPath);
  Bound(d.method, kMaxRecordMethod);
  for (std::string* s : {&d.sandbox, &d.via, &d.name, &d.reason, &d.address, &d.secret}) {
    Bound(*s, kMaxRecordText);
  }
}

std::string FormatDecision(const Decision& d) {
  std::string out = FormatDecisionTime(d.time) + " ";
  if (!d.sandbox.empty()) out += "sandbox=" + d.sandbox + " ";
  out += d.via + " " + d.name + ":" + std::to_string(d.port);
  if (d.closes != 0) {
    out += " closed #" + std::to_string(d.closes);
    if (!d.reason.empty()) out += " (" + d.reason + ")";
  } else {
    out += (d.learned ? " learned (" : d.allowed ? " allowed (" : " denied (") + d.reason + ")";
  }
  if (!d.address.empty()) out += (d.allowed ? " -> " : " address ") + d.address;
  const bool request = !d.method.empty();
  if (request) {
    out += " " + d.method + " " + d.path + " " + (d.status != 0 ? std::to_string(d.status) : "-");
  }
  const bool measured = request || d.closes != 0;
  if (measured || d.bytes_up != 0 || d.bytes_down != 0) {
    out += " up=" + std::to_string(d.bytes_up) + " down=" + std::to_string(d.bytes_down);
  }
  if (measured || d.duration.count() != 0) out += " " + std::to_string(d.duration.count()) + "ms";
  if (!d.secret.empty()) out += " secret=" + d.secret;
  return out;
}

DecisionLog::DecisionLog(std::size_t capacity, std::size_t max_sandboxes)
    : capacity_(capacity == 0 ? 1 : capacity),
      max_sandboxes_(max_sandboxes == 0 ? 1 : max_sandboxes) {}

Decision DecisionLog::Record(Decision decision) {
  BoundDecision(decision);
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
  if (decision.closes != 0) {
    // a close record: no counter counts it
  } else if (decision.learned) {
    ring.counters.learned++;
    totals_.learned++;
    LearnedDestination where{.name = decision.name, .port = decision.port};
    // A connection's decision (a plain-HTTP one carries its first request's fields too); not
    // a DNS answer, nor a request on an intercepted connection.
    if (decision.via != "dns" && decision.via != "https" && !ring.learned.contains(where)) {
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
  decision.seq = ++ring.last_seq;
  if (ring.entries.size() == capacity_) ring.entries.pop_front();
  ring.entries.push_back(decision);
  return decision;
}

std::vector<Decision> DecisionLog::Recent(const std::string& sandbox) const {
  std::lock_guard lock(mu_);
  auto it = rings_.find(sandbox);
  if (it == rings_.end()) return {};
  return {it->second.entries.begin(), it->second.entries.end()};
}

std::vector<Decision> DecisionLog::Since(const std::string& sandbox,
                                         std::uint64_t after_seq) const {
  std::lock_guard lock(mu_);
  auto it = rings_.find(sandbox);
  if (it == rings_.end()) return {};
  std::vector<Decision> out;
  for (const Decision& d : it->second.entries) {
    if (d.seq > after_seq) out.push_back(d);
  }
  return out;
}

std::uint64_t DecisionLog::LastSeq(const std::string& sandbox) const {
  std::lock_guard lock(mu_);
  auto it = rings_.find(sandbox);
  return it == rings_.end() ? 0 : it->second.last_seq;
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
