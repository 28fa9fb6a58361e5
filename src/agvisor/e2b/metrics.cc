#include "agvisor/e2b/metrics.h"

#include <algorithm>
#include <charconv>

namespace agvisor::e2b {

void MetricsBook::Add(const std::string& id, const MetricSample& s) {
  auto& ring = rings_[id];
  if (!ring.samples.empty() && ring.samples.back().at == s.at) {
    ring.samples.back() = s;
    return;
  }
  ring.samples.push_back(s);
  while (ring.samples.size() > kMaxMetricSamples) ring.samples.pop_front();
}

std::vector<MetricSample> MetricsBook::Range(const std::string& id,
                                             std::optional<std::int64_t> start,
                                             std::optional<std::int64_t> end) const {
  std::vector<MetricSample> out;
  auto it = rings_.find(id);
  if (it == rings_.end()) return out;
  for (const auto& s : it->second.samples) {
    if ((!start || s.at >= *start) && (!end || s.at <= *end)) out.push_back(s);
  }
  return out;
}

void MetricsBook::Asked(const std::string& id, std::int64_t now) {
  rings_[id].asked_at = now;
  while (rings_.size() > kMaxMetricSandboxes) {
    auto oldest = std::min_element(rings_.begin(), rings_.end(), [](const auto& a, const auto& b) {
      return a.second.asked_at < b.second.asked_at;
    });
    rings_.erase(oldest);
  }
}

std::vector<std::string> MetricsBook::Due(std::int64_t now) const {
  std::vector<std::pair<std::int64_t, std::string>> due;  // asked_at, id
  for (const auto& [id, ring] : rings_) {
    if (now - ring.asked_at > kMetricsWatchSeconds) continue;
    if (!ring.samples.empty() && now - ring.samples.back().at < kMetricsPeriodSeconds) continue;
    due.emplace_back(ring.asked_at, id);
  }
  std::sort(due.begin(), due.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (std::size_t i = 0; i < due.size() && i < kMaxWatchedSandboxes; ++i) {
    out.push_back(due[i].second);
  }
  return out;
}

void MetricsBook::Forget(const std::string& id) { rings_.erase(id); }

Result<MetricsRange> ParseMetricsRange(const std::map<std::string, std::string>& query) {
  MetricsRange r;
  for (auto [name, field] : {std::pair{"start", &r.start}, {"end", &r.end}}) {
    auto it = query.find(name);
    if (it == query.end() || it->second.empty()) continue;
    std::int64_t n = 0;
    const std::string& v = it->second;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size() || n < 0) {
      return Error::InvalidArgument(std::string(name) +
                                    " must be a time in unix seconds (the SDK sends its Date so)");
    }
    *field = n;
  }
  if (r.start && r.end && *r.end < *r.start) {
    return Error::InvalidArgument("end is before start");
  }
  return r;
}

}  // namespace agvisor::e2b
