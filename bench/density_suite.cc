// The density suite (density_suite.h). Every sandbox of a run carries the label
// bench.density=<run id>: the leak check after removal lists containers and volumes by it.
#include "density_suite.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "agvisor/base/subprocess.h"
#include "agvisor/client/agvisord.h"
#include "agvisor/client/place.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "bench_agvisord.h"
#include "bench_common.h"

namespace agvisor {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Quantiles {
  double p50 = 0, p95 = 0, max = 0;
};

Quantiles QuantilesOf(std::vector<double> v) {
  Quantiles q;
  if (v.empty()) return q;
  std::sort(v.begin(), v.end());
  q.p50 = v[v.size() / 2];
  q.p95 = v[static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(v.size()))) - 1];
  q.max = v.back();
  return q;
}

// Runs f(worker, 0) .. f(worker, n-1) on `parallel` threads, each taking the next index.
void ForEachBounded(int n, int parallel, const std::function<void(int, int)>& f) {
  std::atomic<int> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < std::max(1, std::min(parallel, n)); ++w) {
    workers.emplace_back([&, w] {
      for (int i = next++; i < n; i = next++) f(w, i);
    });
  }
  for (auto& t : workers) t.join();
}

// Busy ticks of the whole host so far (every CPU's time but idle and iowait, /proc/stat).
std::int64_t HostBusyTicks() {
  std::istringstream in(ReadAll("/proc/stat"));
  std::string cpu;
  in >> cpu;
  std::int64_t busy = 0;
  for (int i = 0; i < 8; ++i) {
    std::int64_t v = 0;
    in >> v;
    if (i != 3 && i != 4) busy += v;  // idle, iowait
  }
  return busy;
}

// The kind of a sandbox's host process, for the memory split.
std::string KindOf(const std::string& argv0) {
  if (argv0.find("containerd-shim") != std::string::npos) return "containerd-shim";
  if (argv0.find("runsc-sandbox") != std::string::npos) return "runsc-sandbox (sentry)";
  if (argv0.find("runsc-gofer") != std::string::npos) return "runsc-gofer";
  if (argv0.find("runsc") != std::string::npos) return "runsc (other)";
  // The platform's stub processes (systrap's, ptrace's tracees) have no command line.
  if (argv0.empty()) return "stub processes (the platform's)";
  return "other (" + argv0 + ")";
}

struct Failures {
  std::mutex mu;
  int count = 0;
  void Add(const std::string& what) {
    std::lock_guard lock(mu);
    if (++count <= 5) std::fprintf(stderr, "density: %s\n", what.c_str());
  }
};

std::string Ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, s < 0.1 ? "%.1f ms" : "%.0f ms", s * 1000);
  return b;
}

}  // namespace

int DensitySuite(const DensityOptions& o) {
  const std::string load_start = LoadAverage();
  const std::string run =
      std::to_string(::getpid()) + "-" +
      std::to_string(std::chrono::system_clock::now().time_since_epoch() / std::chrono::seconds(1));
  const std::string label = "bench.density=" + run;
  char tmpl[] = "/tmp/agvisor-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) Die("mkdtemp");
  const std::string dir = tmpl;
  Subprocess daemon = Must(StartBenchAgvisord(dir, {"--no-egress"}), "start agvisord");
  const std::string address = "unix:" + dir + "/agvisord.sock", token = dir + "/token";
  auto docker = Must(ConnectDockerHost(""), "docker");
  Failures failures;

  SandboxSpec spec;
  spec.image = o.image;
  spec.platform = o.platform;
  spec.limits.disk = "none";
  spec.labels["bench.density"] = run;

  // Creates: one client per worker, used by that worker's thread only (a place holds its
  // connection to agvisord, which serves at most --max-connections, 64 by default, at once).
  std::fprintf(stderr, "density: creating %d sandboxes, %d at a time ...\n", o.count, o.parallel);
  const int workers = std::max(1, std::min(o.parallel, o.count));
  std::vector<std::unique_ptr<client::Place>> places;
  for (int w = 0; w < workers; ++w) {
    places.push_back(Must(client::Agvisord(address, token), "connect to agvisord"));
  }
  struct Box {
    client::Place* place = nullptr;  // the creating worker's
    int worker = 0;
    std::unique_ptr<client::SandboxHandle> sb;
    std::string name, id, platform;
  };
  std::vector<Box> boxes(static_cast<std::size_t>(o.count));
  std::vector<double> create_s(boxes.size(), -1);
  const auto t_create = Clock::now();
  ForEachBounded(o.count, workers, [&](int w, int i) {
    Box& b = boxes[static_cast<std::size_t>(i)];
    b.worker = w;
    b.place = places[static_cast<std::size_t>(w)].get();
    const auto t0 = Clock::now();
    auto made = b.place->Create(spec);
    if (!made.ok()) return failures.Add("create: " + made.error().ToString());
    create_s[static_cast<std::size_t>(i)] = Since(t0);
    b.sb = std::move(made->handle);
    b.name = b.sb->container_name();
    if (i % 25 == 24) std::fprintf(stderr, "  %d created\n", i + 1);
  });
  const double create_wall = Since(t_create);
  std::vector<double> created_times;
  for (double s : create_s) {
    if (s >= 0) created_times.push_back(s);
  }
  const int created = static_cast<int>(created_times.size());

  // Container ids and platforms, from one Docker list of the run's label.
  auto listed = Must(docker->ListContainers(true, {label}), "list the run's containers");
  std::map<std::string, std::string> id_of;
  for (const auto& c : listed) {
    if (!c.names.empty()) id_of[c.names[0]] = c.id;
  }
  std::vector<std::string> ids;
  for (auto& b : boxes) {
    if (!b.sb) continue;
    b.id = id_of[b.name];
    ids.push_back(b.id);
    if (auto info = b.sb->Info(); info.ok()) b.platform = info->platform;
  }

  // Idle: the run's runsc processes, agvisord and the whole host over the same window.
  std::fprintf(stderr, "density: %d s settle, then %d s idle ...\n", o.settle, o.idle_seconds);
  std::this_thread::sleep_for(std::chrono::seconds(o.settle));
  auto runsc_ticks = [&] {
    std::int64_t sum = 0;
    for (const auto& [id, tree] : ContainerTrees(ids)) {
      for (const auto& [pid, argv0] : tree) {
        if (argv0.find("runsc") != std::string::npos) sum += CpuTicks(pid);
      }
    }
    return sum;
  };
  const std::int64_t runsc0 = runsc_ticks(), daemon0 = CpuTicks(daemon.pid()),
                     host0 = HostBusyTicks();
  std::this_thread::sleep_for(std::chrono::seconds(o.idle_seconds));
  const std::int64_t runsc_idle = runsc_ticks() - runsc0,
                     daemon_idle = CpuTicks(daemon.pid()) - daemon0,
                     host_idle = HostBusyTicks() - host0;
  const double window = static_cast<double>(::sysconf(_SC_CLK_TCK)) * o.idle_seconds;
  const std::string load_idle = LoadAverage();

  // Memory: PSS of every host process of the run's sandboxes, by kind.
  std::map<std::string, std::int64_t> pss_kb;
  std::int64_t pss_total_kb = 0;
  int measured = 0;
  for (const auto& [id, tree] : ContainerTrees(ids)) {
    if (tree.empty()) continue;
    ++measured;
    for (const auto& [pid, argv0] : tree) {
      const std::int64_t kb =
          FieldKb(ReadAll("/proc/" + std::to_string(pid) + "/smaps_rollup"), "Pss");
      pss_kb[KindOf(argv0)] += kb;
      pss_total_kb += kb;
    }
  }

  // What the container's memory cgroup is charged for, anonymous and shmem (cgroup v1, Docker's
  // cgroupfs layout). The sandbox's own memory lives in the sentry's memfd, whose pages count in a
  // process's PSS only while mapped there, so PSS alone misses part of it.
  std::int64_t cgroup_kb = 0;
  int cgroups = 0;
  for (const auto& id : ids) {
    const std::string stat = ReadAll("/sys/fs/cgroup/memory/docker/" + id + "/memory.stat");
    if (stat.empty()) continue;
    ++cgroups;
    for (const char* key : {"\ntotal_rss ", "\ntotal_shmem "}) {
      const auto at = stat.find(key);
      if (at != std::string::npos)
        cgroup_kb += std::atoll(stat.c_str() + at + std::strlen(key)) / 1024;
    }
  }

  // Everything answers: one `true` in each, then `exec_samples` on sandboxes drawn at random.
  std::fprintf(stderr, "density: an exec in each, then %d on random ones ...\n", o.exec_samples);
  std::vector<std::size_t> live;
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    if (boxes[i].sb) live.push_back(i);
  }
  std::atomic<int> answered{0};
  // Each worker's boxes on that worker's thread (its place is used by one thread at a time).
  auto for_each_by_worker = [&](const std::function<void(Box&)>& f) {
    ForEachBounded(workers, workers, [&](int, int w) {
      for (std::size_t i : live) {
        if (boxes[i].worker == w) f(boxes[i]);
      }
    });
  };
  for_each_by_worker([&](Box& b) {
    auto r = b.sb->Exec({"true"}, {});
    if (!r.ok() || r->exit_code != 0) {
      return failures.Add(b.name + " did not answer: " +
                          (r.ok() ? "exit " + std::to_string(r->exit_code) : r.error().ToString()));
    }
    ++answered;
  });
  std::vector<double> exec_s;
  std::mt19937 pick(static_cast<unsigned>(::getpid()));
  const std::int64_t daemon_busy0 = CpuTicks(daemon.pid());
  const auto t_execs = Clock::now();
  for (int i = 0; i < o.exec_samples && !live.empty(); ++i) {
    Box& b = boxes[live[pick() % live.size()]];
    const auto t0 = Clock::now();
    auto r = b.sb->Exec({"true"}, {});
    exec_s.push_back(Since(t0));
    if (!r.ok() || r->exit_code != 0) failures.Add(b.name + ": a random exec failed");
  }

  // Lists: agvisord's (GET /sandboxes through the C++ client) and the CLI's, in process and
  // through agvisord. Each must see every sandbox of the run.
  auto sees_all = [&](const std::string& text) {
    for (std::size_t i : live) {
      if (text.find(boxes[i].name) == std::string::npos) return false;
    }
    return true;
  };
  std::vector<double> list_daemon, list_cli, list_cli_server;
  auto lister = Must(client::Agvisord(address, token), "connect");
  for (int i = 0; i < o.list_samples; ++i) {
    auto t0 = Clock::now();
    auto all = lister->List();
    list_daemon.push_back(Since(t0));
    std::string names;
    if (all.ok()) {
      for (const auto& s : *all) names += s.container_name + "\n";
    }
    if (!all.ok() || !sees_all(names)) failures.Add("agvisord's list missed the run's sandboxes");
    for (bool through_daemon : {false, true}) {
      std::vector<std::string> argv = {AGVISOR_CLI_BINARY};
      if (through_daemon) argv.insert(argv.end(), {"--server", address, "--token-file", token});
      argv.push_back("ls");
      t0 = Clock::now();
      auto ls = RunCommand(argv);
      (through_daemon ? list_cli_server : list_cli).push_back(Since(t0));
      if (!ls.ok() || !ls->status.success() || !sees_all(ls->out)) {
        failures.Add(std::string("agvisor ls") + (through_daemon ? " --server" : "") +
                     " missed the run's sandboxes" + (ls.ok() ? ": " + ls->err : ""));
      }
    }
  }
  const double busy_s = Since(t_execs);
  const std::int64_t daemon_busy = CpuTicks(daemon.pid()) - daemon_busy0;

  std::map<std::string, int> platforms;
  for (const auto& b : boxes) {
    if (b.sb) ++platforms[b.platform.empty() ? "?" : b.platform];
  }
  std::string platform_text;
  for (const auto& [p, n] : platforms) {
    platform_text += (platform_text.empty() ? "" : ", ") + p + " x" + std::to_string(n);
  }
  // Removal, then nothing of the run may be left.
  std::fprintf(stderr, "density: removing ...\n");
  const auto t_remove = Clock::now();
  for_each_by_worker([&](Box& b) {
    b.sb.reset();
    if (auto r = b.place->Remove(b.name, /*erase_data=*/true); !r.ok()) {
      failures.Add("remove " + b.name + ": " + r.error().ToString());
    }
  });
  const double remove_wall = Since(t_remove);
  auto left = docker->ListContainers(true, {label});
  auto left_volumes = docker->ListVolumes({label});
  const std::size_t leaked =
      (left.ok() ? left->size() : 0) + (left_volumes.ok() ? left_volumes->size() : 0);
  if (!left.ok() || !left_volumes.ok()) failures.Add("the leak check could not list");
  if (leaked > 0) failures.Add(std::to_string(leaked) + " containers/volumes of the run left");
  for (const auto& c : left.ok() ? *left : std::vector<docker::ContainerSummary>{}) {
    (void)docker->RemoveContainer(c.id, /*force=*/true, /*remove_volumes=*/true);
  }
  for (const auto& v : left_volumes.ok() ? *left_volumes : std::vector<docker::VolumeInfo>{}) {
    (void)docker->RemoveVolume(v.name, /*force=*/true);
  }
  StopBenchAgvisord(daemon);
  std::filesystem::remove_all(dir);

  const double n = std::max(1, measured);
  const Quantiles create_q = QuantilesOf(created_times), exec_q = QuantilesOf(exec_s),
                  ld = QuantilesOf(list_daemon), lc = QuantilesOf(list_cli),
                  lcs = QuantilesOf(list_cli_server);
  std::printf(
      "\n### Density: %d idle sandboxes (image %s, bridge, ready shells on; platform %s; "
      "1-minute load %s at start, %s after the idle window, %s at the end)\n\n",
      o.count, o.image.empty() ? "default" : o.image.c_str(), platform_text.c_str(),
      load_start.c_str(), load_idle.c_str(), LoadAverage().c_str());
  std::printf("| figure | value |\n|---|---|\n");
  std::printf("| created / asked | %d / %d |\n", created, o.count);
  std::printf("| create throughput (%d at a time) | %.2f sandboxes/s (%.0f s for all) |\n",
              o.parallel, created / std::max(create_wall, 1e-9), create_wall);
  std::printf("| create to ready, p50 / p95 / max | %s / %s / %s |\n", Ms(create_q.p50).c_str(),
              Ms(create_q.p95).c_str(), Ms(create_q.max).c_str());
  std::printf("| idle host CPU per sandbox: runsc processes (%d s) | %.3f%% of a CPU |\n",
              o.idle_seconds, 100.0 * static_cast<double>(runsc_idle) / window / n);
  std::printf("| idle host CPU per sandbox: whole host busy / N (other work included) | %.3f%% |\n",
              100.0 * static_cast<double>(host_idle) / window / n);
  std::printf("| agvisord CPU, idle window | %.2f%% of a core |\n",
              100.0 * static_cast<double>(daemon_idle) / window);
  std::printf("| agvisord CPU, during the execs and lists (%.0f s) | %.2f%% of a core |\n", busy_s,
              100.0 * static_cast<double>(daemon_busy) /
                  (static_cast<double>(::sysconf(_SC_CLK_TCK)) * std::max(busy_s, 1e-9)));
  std::printf("| PSS per sandbox, all its host processes | %.1f MiB |\n",
              static_cast<double>(pss_total_kb) / 1024.0 / n);
  if (cgroups > 0) {
    std::printf("| memory cgroup per sandbox: anonymous + shmem (%d cgroups) | %.1f MiB |\n",
                cgroups, static_cast<double>(cgroup_kb) / 1024.0 / cgroups);
  }
  for (const auto& [kind, kb] : pss_kb) {
    std::printf("| PSS per sandbox: %s | %.1f MiB |\n", kind.c_str(),
                static_cast<double>(kb) / 1024.0 / n);
  }
  std::printf("| answered an exec / alive | %d / %zu |\n", answered.load(), live.size());
  std::printf("| exec `true` on a random one (%zu), p50 / p95 / max | %s / %s / %s |\n",
              exec_s.size(), Ms(exec_q.p50).c_str(), Ms(exec_q.p95).c_str(),
              Ms(exec_q.max).c_str());
  std::printf("| agvisord list (C++ client), p50 / max of %d | %s / %s |\n", o.list_samples,
              Ms(ld.p50).c_str(), Ms(ld.max).c_str());
  std::printf("| `agvisor ls` (in process), p50 / max | %s / %s |\n", Ms(lc.p50).c_str(),
              Ms(lc.max).c_str());
  std::printf("| `agvisor --server ... ls`, p50 / max | %s / %s |\n", Ms(lcs.p50).c_str(),
              Ms(lcs.max).c_str());
  std::printf("| removal of all (%d at a time) | %.0f s |\n", o.parallel, remove_wall);
  std::printf("| left after removal (containers + volumes of the run) | %zu |\n", leaked);
  std::printf("| failures | %d |\n", failures.count);
  std::fflush(stdout);
  return failures.count == 0 && created == o.count ? 0 : 1;
}

}  // namespace agvisor
