// E2B's sandbox metrics (GET /sandboxes/{id}/metrics, the SDK's getMetrics with its start/end
// range): a bounded ring of samples per sandbox, taken only while someone asks. A getMetrics
// call takes a sample at once and marks the sandbox asked; for kMetricsWatchSeconds after the
// last call agvisord samples it every kMetricsPeriodSeconds (E2B's own sampling period), so a
// client that polls gets a history at E2B's resolution, and a sandbox nobody asks about costs
// nothing. Samples older than the ring (kMaxMetricSamples: an hour) are gone. A paused sandbox is
// not sampled (Docker's stats of a frozen container wait for a reading that does not come).
//
// Used by e2b/rest.cc (which takes the samples, through client::Place::Stats). Pure and not
// thread-safe (the caller's lock); unit-tested in e2b_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::e2b {

inline constexpr std::int64_t kMetricsPeriodSeconds = 5;
inline constexpr std::int64_t kMetricsWatchSeconds = 600;
inline constexpr std::size_t kMaxMetricSamples = 720;    // per sandbox: an hour at the period
inline constexpr std::size_t kMaxMetricSandboxes = 256;  // rings kept; the least asked go first
inline constexpr std::size_t kMaxWatchedSandboxes = 32;  // sampled at once

struct MetricSample {
  std::int64_t at = 0;  // unix seconds
  double cpu_used_pct = 0;
  int cpu_count = 0;
  std::int64_t mem_used = 0;
  std::int64_t mem_total = 0;
};

class MetricsBook {
 public:
  // Keeps `s` for `id` (a sample in the same second as the newest replaces it); the oldest go
  // past kMaxMetricSamples.
  void Add(const std::string& id, const MetricSample& s);
  // The samples of `id` taken from `start` to `end` (unix seconds, both included; unset: from
  // the first, to the last), oldest first.
  std::vector<MetricSample> Range(const std::string& id, std::optional<std::int64_t> start,
                                  std::optional<std::int64_t> end) const;
  // A getMetrics call for `id` at `now`: sampled until now + kMetricsWatchSeconds. Past
  // kMaxMetricSandboxes rings, the one asked about longest ago is dropped.
  void Asked(const std::string& id, std::int64_t now);
  // The sandboxes to sample at `now`: asked about within kMetricsWatchSeconds, last sampled at
  // least kMetricsPeriodSeconds ago; at most kMaxWatchedSandboxes, the most recently asked first.
  std::vector<std::string> Due(std::int64_t now) const;
  // Drops `id`'s samples (the sandbox is gone).
  void Forget(const std::string& id);
  std::size_t size() const { return rings_.size(); }

 private:
  struct Ring {
    std::deque<MetricSample> samples;
    std::int64_t asked_at = 0;
  };
  std::map<std::string, Ring> rings_;
};

// getMetrics's query: `start` and `end` in unix seconds (the SDK's Date, rounded). Errors:
// kInvalidArgument naming the parameter, or an end before the start.
struct MetricsRange {
  std::optional<std::int64_t> start, end;
};
Result<MetricsRange> ParseMetricsRange(const std::map<std::string, std::string>& query);

}  // namespace agvisor::e2b
