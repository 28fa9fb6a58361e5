#include "tails_suite.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "agvisor/client/agvisord.h"
#include "agvisor/client/place.h"
#include "bench_agvisord.h"

namespace agvisor {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "tails suite: %s\n", what.c_str());
  std::exit(1);
}

std::string Load() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one;
}

struct Sample {
  double start_s;  // since the run began
  double ms;
  int loop;
};

// Shared stalls: moments when slow execs of loops on several sandboxes end together, i.e. what
// held them is something they share (the daemon, dockerd, the host's cores), not one sandbox. A
// stall here: execs of at least `min_loops` loops on at least 3 sandboxes, each slower than
// `slow_ms`, ending within 300 ms of the first of them.
struct Stall {
  double end_s;
  int loops;
  double max_ms;
};
std::vector<Stall> SharedStalls(std::vector<Sample> samples, int sandboxes, int min_loops,
                                double slow_ms) {
  std::erase_if(samples, [&](const Sample& s) { return s.ms < slow_ms; });
  auto end = [](const Sample& s) { return s.start_s + s.ms / 1000; };
  std::sort(samples.begin(), samples.end(),
            [&](const Sample& a, const Sample& b) { return end(a) < end(b); });
  std::vector<Stall> out;
  for (std::size_t i = 0; i < samples.size();) {
    std::set<int> loops, boxes;
    double max_ms = 0;
    std::size_t j = i;
    for (; j < samples.size() && end(samples[j]) < end(samples[i]) + 0.3; ++j) {
      loops.insert(samples[j].loop);
      boxes.insert(samples[j].loop % sandboxes);
      max_ms = std::max(max_ms, samples[j].ms);
    }
    if (static_cast<int>(loops.size()) >= min_loops && boxes.size() >= 3) {
      out.push_back({end(samples[i]), static_cast<int>(loops.size()), max_ms});
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

double At(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto i = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

void RunPlatform(client::Place& place, SandboxSpec spec, const std::string& platform, int sandboxes,
                 int loops, int seconds) {
  spec.platform = platform;
  std::vector<std::unique_ptr<client::SandboxHandle>> sbs;
  for (int i = 0; i < sandboxes; ++i) {
    auto c = place.Create(spec);
    if (!c.ok()) Fail("create on " + platform + ": " + c.error().ToString());
    sbs.push_back(std::move(c->handle));
  }
  // One warm-up exec each: the first call of a handle opens its channel.
  for (auto& sb : sbs) (void)sb->Exec({"true"}, {});
  const std::string load_start = Load();
  std::mutex mu;
  std::vector<Sample> samples;
  std::atomic<int> errors{0};
  std::string first_error;
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::seconds(seconds);
  std::vector<std::thread> threads;
  for (int l = 0; l < loops; ++l) {
    threads.emplace_back([&, l] {
      client::SandboxHandle& sb = *sbs[static_cast<std::size_t>(l % sandboxes)];
      std::vector<Sample> mine;
      while (Clock::now() < end) {
        const auto s = Clock::now();
        auto r = sb.Exec({"true"}, {});
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - s).count();
        if (!r.ok() || r->exit_code != 0) {
          if (errors++ == 0) {
            std::lock_guard lock(mu);
            first_error = r.ok() ? "exit " + std::to_string(r->exit_code) : r.error().ToString();
          }
          continue;
        }
        mine.push_back({std::chrono::duration<double>(s - t0).count(), ms, l});
      }
      std::lock_guard lock(mu);
      samples.insert(samples.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> ms;
  for (const auto& s : samples) ms.push_back(s.ms);
  std::sort(ms.begin(), ms.end());
  const double p50 = At(ms, 0.50);
  const double p99 = At(ms, 0.99);
  std::printf(
      "%-8s  %5zu execs  %6.1f/s  errors %d  p50 %6.1f  p95 %6.1f  p99 %7.1f  max %7.1f ms  "
      "p99/p50 %5.1f  load %s -> %s\n",
      platform.empty() ? "default" : platform.c_str(), ms.size(),
      static_cast<double>(ms.size()) / wall, errors.load(), p50, At(ms, 0.95), p99,
      ms.empty() ? 0 : ms.back(), p50 > 0 ? p99 / p50 : 0, load_start.c_str(), Load().c_str());
  if (!first_error.empty()) std::printf("          first error: %s\n", first_error.c_str());
  // Slower than 4x p50 (the suite's target is p99 within 10x), half the loops or more at once.
  const auto stalls = SharedStalls(samples, sandboxes, (loops + 1) / 2, 4 * p50);
  std::printf(
      "          shared stalls (>= %d loops on >= 3 sandboxes, each > %.0f ms, ending "
      "within 0.3 s): %zu",
      (loops + 1) / 2, 4 * p50, stalls.size());
  for (std::size_t i = 0; i < std::min<std::size_t>(5, stalls.size()); ++i) {
    std::printf("%s +%.2f s (%d loops, max %.0f ms)", i == 0 ? ": at" : ",", stalls[i].end_s,
                stalls[i].loops, stalls[i].max_ms);
  }
  std::printf("\n");
  std::sort(samples.begin(), samples.end(),
            [](const Sample& a, const Sample& b) { return a.ms > b.ms; });
  std::printf("          slowest:");
  for (std::size_t i = 0; i < std::min<std::size_t>(5, samples.size()); ++i) {
    std::printf(" %.0f ms at +%.2f s (loop %d);", samples[i].ms, samples[i].start_s,
                samples[i].loop);
  }
  std::printf("\n");
  std::fflush(stdout);
  for (auto& sb : sbs) (void)place.Remove(sb->container_name(), /*erase_data=*/true);
}

}  // namespace

void TailsSuite(const SandboxSpec& spec, const std::vector<std::string>& platforms, int sandboxes,
                int loops, int seconds, bool local) {
  if (local) {
    std::printf(
        "\n== tails: %d exec loops of `true` over %d sandboxes in process, %d s per platform\n",
        loops, sandboxes, seconds);
    auto place = client::InProcess("");
    for (const auto& p : platforms) RunPlatform(*place, spec, p, sandboxes, loops, seconds);
    return;
  }
  char tmpl[] = "/tmp/agvisor-bench-tails-XXXXXX";
  if (!::mkdtemp(tmpl)) Fail("mkdtemp");
  const std::string dir = tmpl;
  auto daemon = StartBenchAgvisord(dir, {"--no-egress"});
  if (!daemon.ok()) Fail("start agvisord: " + daemon.error().ToString());
  auto place = client::Agvisord("unix:" + dir + "/agvisord.sock", dir + "/token");
  if (!place.ok()) Fail("connect to agvisord: " + place.error().ToString());
  std::printf(
      "\n== tails: %d exec loops of `true` over %d sandboxes through agvisord, %d s per platform "
      "(agvisord's log: %s/agvisord.log)\n",
      loops, sandboxes, seconds, dir.c_str());
  for (const auto& p : platforms) RunPlatform(**place, spec, p, sandboxes, loops, seconds);
  StopBenchAgvisord(*daemon);
}

}  // namespace agvisor
