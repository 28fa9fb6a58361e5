// agvisor_bench: agvisor against the seed (the Python package that shells out to the docker CLI)
// and against the transport ceiling (a raw Engine API exec stream), side by side in one run.
// Prints a table with ratios. Not a test: absolute times on shared machines move run to run.
//
//   agvisor_bench [--seed DIR] [--image IMG] [--runs N] [--suite NAME]... [suite options]
//
// Suites: basic (default: create, exec, output, transfers, stop; exec and output through each door:
// the C++ client in process and through agvisord, and the Python package), create (cold creates,
// bridge and none, interleaved rounds; then `docker stop`), pool (warm-pool acquire vs cold
// create), concurrency (20 concurrent creates per start-gate bound, 200 concurrent execs), memory
// (idle sandbox host memory), idle (idle and paused sandbox host CPU per gVisor platform), desktop
// (gui create to ready), lifecycle (pause, resume, resume-on-call, live resize, snapshot, fork of
// 4), all; and egress
// (bench/egress_suite.h: starts agvisord, so only when named, under `flock
// /tmp/agvisor-egress.lock`; not in all), kube (bench/kube_suite.h: the Kubernetes runtime against
// the API test double vs Docker, and the double's own cost; only when named), tails
// (bench/tails_suite.h: exec loops through agvisord on saturated cores; only when named), e2b
// (bench/e2b_suite.h: the official e2b SDK against agvisor's own exec; only when named).
// --platform puts every sandbox of the run (and the seed's basic-suite sandbox) on that gVisor
// platform.
//
// DIR is the seed's import root (the directory holding its `agvisor` package); default
// $AGVISOR_SEED_PATH; without either, the seed column is skipped. See bench/README.md.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agvisor/base/subprocess.h"
#include "agvisor/client/agvisord.h"
#include "agvisor/client/desktop.h"
#include "agvisor/client/place.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/docker_runtime/runtime_check.h"
#include "agvisor/sandbox/pool.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/snapshot.h"
#include "agvisor/sandbox/start_gate.h"
#include "agvisor/sandbox/testing/kept_runtime.h"
#include "bench_agvisord.h"
#include "bench_common.h"
#include "density_suite.h"
#include "e2b_suite.h"
#include "egress_suite.h"
#include "kube_suite.h"
#include "tails_suite.h"

namespace agvisor {
namespace {

using Clock = std::chrono::steady_clock;
// --platform: the gVisor platform of every sandbox of the run ("" = the host's default).
std::string g_platform;
constexpr std::size_t kOutputBytes = 50'000'000;
constexpr std::size_t kTransferBytes = 100'000'000;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using Timings = std::map<std::string, double>;

// Output and transfers: the median of this many rounds (both sides; seed_bench.py's ROUNDS): one
// run swings with the machine's I/O.
constexpr int kTransferRounds = 5;

// The transport ceiling once: `cat` of the 50 MB file through a raw Engine API exec stream of
// `container`, no agent (the best Docker's exec path does). Seconds.
double TimeCeiling(docker::Client& docker, const std::string& container) {
  auto t0 = Clock::now();
  docker::ExecConfig ec;
  ec.cmd = {"cat", "/tmp/f50"};
  auto raw = Must(docker.RunExec(container, ec), "raw exec");
  if (raw.out.size() != kOutputBytes) Die("raw exec output has the wrong size");
  return Since(t0);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Stores one operation's rounds as t[key] (the median seconds) and t[key + "_vs_ceiling"]: the
// median over rounds of its throughput over that round's ceiling throughput (`ceiling[i]`
// seconds for the 50 MB output), since the machine's I/O drifts from round to round.
void PutRounds(Timings& t, const std::string& key, const std::vector<double>& secs,
               const std::vector<double>& ceiling, double bytes) {
  t[key] = Median(secs);
  std::vector<double> ratio;
  for (std::size_t i = 0; i < secs.size() && i < ceiling.size(); ++i) {
    ratio.push_back((bytes / secs[i]) / (kOutputBytes / ceiling[i]));
  }
  t[key + "_vs_ceiling"] = Median(ratio);
}

Timings RunOurs(const std::string& image, int runs) {
  Timings t;
  SandboxSpec spec;
  spec.image = image;
  spec.limits.cpus = 1;
  spec.limits.memory = "512m";
  spec.limits.disk = "none";
  spec.labels["bench.run"] = "1";
  spec.platform = g_platform;
  // Not timed: the first create on a host (or after an agent change) makes the derived agent
  // image once (sandbox/docker_runtime/agent_image.h); every later create reuses it.
  Must(Must(CreateSandbox(spec), "warm-up create")->Stop(), "warm-up stop");
  auto t0 = Clock::now();
  auto sb = Must(CreateSandbox(spec), "create");
  t["create"] = Since(t0);

  std::vector<double> ex;
  for (int i = 0; i < runs; ++i) {
    t0 = Clock::now();
    auto r = Must(sb->Exec({"true"}), "exec true");
    ex.push_back(Since(t0));
    if (r.exit_code != 0) Die("exec true failed");
  }
  std::sort(ex.begin(), ex.end());
  t["exec_median"] = ex[ex.size() / 2];
  t["exec_p95"] = ex[std::max<std::size_t>(1, ex.size() * 95 / 100) - 1];

  // The floor under any exec: starting `true` inside this sandbox, timed inside it
  // (bench/spawn_floor.cc: vfork + execve + waitpid, as the agent does, without the channel).
  Must(sb->WriteFile("/tmp/spawn_floor", ReadAll(AGVISOR_SPAWN_FLOOR), 0755), "copy spawn_floor");
  auto floor = Must(sb->Exec({"/tmp/spawn_floor", std::to_string(runs)}), "spawn floor");
  if (floor.exit_code != 0) Die("spawn floor: " + floor.err);
  t["spawn_floor"] = std::stod(floor.out);

  Must(sb->ExecShell("head -c 50000000 /dev/zero | tr '\\0' a > /tmp/f50"), "make file");
  // Rounds of the ceiling and then each operation: every operation is compared with the ceiling
  // of its own round, since the machine's I/O drifts from round to round.
  auto docker = Must(ConnectDockerHost(""), "docker");
  const std::string data(kTransferBytes, 'u');
  std::map<std::string, std::vector<double>> secs;
  auto timed = [&](const char* key, const std::function<void()>& f) {
    auto t1 = Clock::now();
    f();
    secs[key].push_back(Since(t1));
  };
  for (int i = 0; i < kTransferRounds; ++i) {
    secs["ceiling"].push_back(TimeCeiling(*docker, sb->container_name()));
    timed("output_collected", [&] {
      auto collected = Must(sb->Exec({"cat", "/tmp/f50"}), "cat collected");
      if (collected.out.size() != kOutputBytes) Die("collected output has the wrong size");
    });
    timed("output_streamed", [&] {
      std::size_t seen = 0;
      ExecOptions so;
      so.on_stdout = [&](std::string_view b) { seen += b.size(); };
      Must(sb->Exec({"cat", "/tmp/f50"}, so), "cat streamed");
      if (seen != kOutputBytes) Die("streamed output has the wrong size");
    });
    timed("upload", [&] { Must(sb->WriteFile("/tmp/up", data), "upload"); });
    timed("download", [&] {
      auto back = Must(sb->ReadFile("/tmp/up"), "download");
      if (back.size() != kTransferBytes) Die("download has the wrong size");
    });
  }
  t["ceiling"] = Median(secs["ceiling"]);
  for (const auto& [key, v] : secs) {
    if (key == "ceiling") continue;
    PutRounds(t, key, v, secs["ceiling"],
              key == "upload" || key == "download" ? kTransferBytes : kOutputBytes);
  }

  t0 = Clock::now();
  Must(sb->Stop(), "stop");
  t["stop"] = Since(t0);
  return t;
}

// Between spaced execs: an agent thinking between calls (issue 21); systrap's idle wake-up shows.
constexpr auto kExecSpacing = std::chrono::milliseconds(200);

// Exec `sh -c true` (ExecShell, what the seed's exec("true") runs) `runs` times back to back and
// `runs` times kExecSpacing apart, in a sandbox of its own with `warm_shells` ready shells. Keys
// exec_sh_{b2b,spaced}_{median,p95}_w<N> and, per pace, how many ran in a ready shell
// (ExecResult::prestarted) as exec_sh_{b2b,spaced}_prestarted_w<N>.
void RunExecPacing(const std::string& image, int runs, int warm_shells, Timings& t) {
  SandboxSpec spec;
  spec.image = image;
  spec.limits.cpus = 1;
  spec.limits.memory = "512m";
  spec.limits.disk = "none";
  spec.labels["bench.run"] = "1";
  spec.warm_shells = warm_shells;
  spec.platform = g_platform;
  auto sb = Must(CreateSandbox(spec), "create");
  const std::string w = "_w" + std::to_string(warm_shells);
  for (const char* pace : {"b2b", "spaced"}) {
    std::vector<double> ex;
    int prestarted = 0;
    for (int i = 0; i < runs; ++i) {
      // Spaced: the pause comes first, so every timed call follows an idle gap (and a ready
      // shell had time to be replaced).
      if (std::string_view(pace) == "spaced") std::this_thread::sleep_for(kExecSpacing);
      auto t0 = Clock::now();
      auto r = Must(sb->ExecShell("true"), "exec sh -c true");
      ex.push_back(Since(t0));
      if (r.exit_code != 0) Die("exec sh -c true failed");
      prestarted += r.prestarted ? 1 : 0;
    }
    std::sort(ex.begin(), ex.end());
    const std::string key = std::string("exec_sh_") + pace;
    t[key + "_median" + w] = ex[ex.size() / 2];
    t[key + "_p95" + w] = ex[std::max<std::size_t>(1, ex.size() * 95 / 100) - 1];
    t[key + "_prestarted" + w] = prestarted;
  }
  Must(sb->Stop(), "stop");
}

// A `docker` first on PATH that drops --annotation (needs Engine API 1.43; the seed passes it
// on every run) and runs the real docker CLI.
std::string MakeDockerWrapper(const std::string& dir) {
  auto which = Must(RunCommand({"sh", "-c", "command -v docker"}), "find docker");
  std::string real = which.out.substr(0, which.out.find('\n'));
  if (real.empty()) Die("no docker CLI on PATH (the seed needs it)");
  std::ofstream w(dir + "/docker");
  w << "#!/bin/sh\n"
       "# Generated by agvisor_bench: the seed's --annotation needs Engine API 1.43.\n"
       "for a do\n"
       "  shift\n"
       "  case \"$a\" in --annotation=*) continue ;; esac\n"
       "  set -- \"$@\" \"$a\"\n"
       "done\n"
       "exec "
    << real << " \"$@\"\n";
  w.close();
  ::chmod((dir + "/docker").c_str(), 0755);
  return dir;
}

// ---------------------------------------------------------------------------------------------
// Suites beyond the basic one: pool, concurrency, memory.

SandboxSpec BenchSpec(const std::string& image) {
  SandboxSpec spec;
  spec.image = image;
  spec.limits.cpus = 1;
  spec.limits.memory = "512m";
  spec.limits.disk = "none";
  spec.labels["bench.run"] = "1";
  spec.platform = g_platform;
  return spec;
}

struct Spread {
  double p50 = 0, p95 = 0;
  std::size_t n = 0;
};

Spread SpreadOf(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.p50 = v[v.size() / 2];
  s.p95 = v[static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(v.size()))) - 1];
  return s;
}

std::string Ms(double sec) {
  char b[32];
  std::snprintf(b, sizeof b, sec < 0.1 ? "%.1f ms" : "%.0f ms", sec * 1000);
  return b;
}

std::string Ratio(double seed, double ours) {
  if (seed <= 0 || ours <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1fx", seed / ours);
  return b;
}

// Runs `work(i)` for i in [0, n) on n threads released at the same moment. Returns each call's
// seconds and the wall time from release to the last one done.
std::pair<std::vector<double>, double> AtOnce(int n, const std::function<void(int)>& work) {
  std::vector<double> times(static_cast<std::size_t>(n));
  std::barrier start(n + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      auto t0 = Clock::now();
      work(i);
      times[static_cast<std::size_t>(i)] = Since(t0);
    });
  }
  start.arrive_and_wait();
  auto t0 = Clock::now();
  for (auto& t : threads) t.join();
  return {times, Since(t0)};
}

void StopAll(std::vector<std::unique_ptr<Sandbox>>& boxes) {
  AtOnce(static_cast<int>(boxes.size()), [&](int i) {
    if (boxes[static_cast<std::size_t>(i)]) (void)boxes[static_cast<std::size_t>(i)]->Stop();
  });
  boxes.clear();
}

// Python script `script` of bench/ with `args` and PYTHONPATH `pythonpath` (the seed's, with the
// docker wrapper first on PATH; or this build's package), its stdout as `name seconds` pairs (a
// `container NAME` line goes to `on_container`, which runs while the script waits on stdin).
std::optional<Timings> RunPythonScript(
    const std::string& script, const std::string& pythonpath, const std::vector<std::string>& args,
    const std::function<void(const std::string&)>& on_container = nullptr) {
  char tmpl[] = "/tmp/agvisor-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) Die("mkdtemp");
  const std::string dir = MakeDockerWrapper(tmpl);
  const char* path = std::getenv("PATH");
  std::vector<std::string> argv = {"python3", AGVISOR_BENCH_DIR "/" + script};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = Must(Subprocess::Spawn({.argv = argv,
                                   .env = {"PATH=" + dir + ":" + (path ? path : "/usr/bin:/bin"),
                                           "PYTHONPATH=" + pythonpath},
                                   .pipe_stdin = true,
                                   .pipe_stdout = true}),
                "run " + script);
  Timings t;
  std::string pending;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p.stdout_fd().get(), buf, sizeof buf)) > 0) {
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::istringstream line(pending.substr(0, nl));
      pending.erase(0, nl + 1);
      std::string k, v;
      line >> k >> v;
      if (k == "container") {
        if (on_container) on_container(v);
        if (::write(p.stdin_fd().get(), "\n", 1) != 1) Die("write to the seed");
      } else if (!k.empty()) {
        t[k] = std::atof(v.c_str());
      }
    }
  }
  auto st = Must(p.Wait(), "wait for " + script);
  std::filesystem::remove_all(dir);
  if (!st.success()) {
    std::fprintf(stderr, "agvisor_bench: %s %s failed (%s)\n", script.c_str(),
                 args.empty() ? "" : args[0].c_str(), st.ToString().c_str());
    return std::nullopt;
  }
  return t;
}

// The seed's bench/seed_concurrency.py with `args` (RunPythonScript).
std::optional<Timings> RunSeedScript(
    const std::string& seed, const std::vector<std::string>& args,
    const std::function<void(const std::string&)>& on_container = nullptr) {
  return RunPythonScript("seed_concurrency.py", seed, args, on_container);
}

// The seed's side of the basic suite: bench/seed_bench.py.
std::optional<Timings> RunSeed(const std::string& seed, const std::string& image, int runs) {
  return RunPythonScript("seed_bench.py", seed,
                         {image, std::to_string(runs), PlatformRuntimeOf("runsc", g_platform)});
}

// The values of `t` whose keys start with `prefix` ("create_", "exec_").
std::vector<double> Series(const Timings& t, const std::string& prefix) {
  std::vector<double> v;
  for (const auto& [k, x] : t) {
    if (k.rfind(prefix, 0) == 0) v.push_back(x);
  }
  return v;
}

// ---- create: cold creates, bridge and none, in alternating rounds ----

// `rounds` rounds of 5 creates per (side, network), interleaved so that a change of the machine's
// load reaches both sides alike. Create to ready: the seed's `create_sandbox` returns after
// `docker run -d`; agvisor's after the agent's handshake.
void CreateSuite(const std::string& seed, const std::string& image, int rounds) {
  const std::vector<std::string> networks = {"bridge", "none"};
  std::map<std::string, std::vector<double>> seed_t, ours_t, seed_stop, ours_stop;
  for (int r = 0; r < rounds; ++r) {
    for (const auto& net : networks) {
      std::fprintf(stderr, "create: round %d/%d, network %s ...\n", r + 1, rounds, net.c_str());
      if (!seed.empty()) {
        if (auto s = RunSeedScript(seed, {"serial", image, "5", net})) {
          auto v = Series(*s, "create_");
          seed_t[net].insert(seed_t[net].end(), v.begin(), v.end());
          v = Series(*s, "stop_");
          seed_stop[net].insert(seed_stop[net].end(), v.begin(), v.end());
        }
      }
      for (int i = 0; i < 5; ++i) {
        SandboxSpec spec = BenchSpec(image);
        spec.network = net;
        auto t0 = Clock::now();
        auto sb = Must(CreateSandbox(spec), "cold create");
        ours_t[net].push_back(Since(t0));
        t0 = Clock::now();
        Must(sb->Stop(), "stop");
        ours_stop[net].push_back(Since(t0));
      }
    }
  }
  auto table = [&](const std::string& title, std::map<std::string, std::vector<double>>& seed_v,
                   std::map<std::string, std::vector<double>>& ours_v) {
    std::printf("\n### %s\n\n", title.c_str());
    std::printf(
        "| network | seed median | seed p95 | agvisor median | agvisor p95 | ratio (median) |\n"
        "|---|---|---|---|---|---|\n");
    for (const auto& net : networks) {
      Spread s = SpreadOf(seed_v[net]), o = SpreadOf(ours_v[net]);
      std::printf("| %s | %s | %s | %s | %s | %s |\n", net.c_str(), Ms(s.p50).c_str(),
                  Ms(s.p95).c_str(), Ms(o.p50).c_str(), Ms(o.p95).c_str(),
                  Ratio(s.p50, o.p50).c_str());
    }
  };
  table("Create to ready, cold (image " + image + ", 1 cpu, 512m; " + std::to_string(rounds) +
            " rounds of 5 per side)",
        seed_t, ours_t);
  // Each sandbox is stopped right after its create (the basic suite's stop is one sample).
  table("Stop right after create (the same sandboxes)", seed_stop, ours_stop);

  // `docker stop` of a sandbox (Sandbox::Stop removes by force instead): SIGTERM to the agent as
  // PID 1, which ends its processes and exits 0 itself, well before Docker's SIGKILL after 10 s.
  // agent_runsc_test checks that it exits 0; this is how long it takes.
  std::fprintf(stderr, "create: docker stop (SIGTERM to the agent) of %d sandboxes ...\n",
               5 * rounds);
  auto docker = Must(ConnectDockerHost(""), "docker");
  std::vector<double> sigterm;
  for (int i = 0; i < 5 * rounds; ++i) {
    auto sb = Must(CreateSandbox(BenchSpec(image)), "cold create");
    auto t0 = Clock::now();
    Must(docker->StopContainer(sb->container_name(), 10), "docker stop");
    sigterm.push_back(Since(t0));
    Must(sb->Stop(), "remove");
  }
  Spread st = SpreadOf(sigterm);
  std::printf(
      "\n### `docker stop` right after create (SIGTERM to the agent as PID 1; bridge)\n\n"
      "| side | n | median | p95 |\n|---|---|---|---|\n| agvisor | %zu | %s | %s |\n",
      st.n, Ms(st.p50).c_str(), Ms(st.p95).c_str());
}

// ---- pool: acquire from a warm pool vs a cold create ----

void PoolSuite(const std::string& seed, const std::string& image, int acquires, int colds) {
  std::optional<Timings> s;
  if (!seed.empty()) {
    std::fprintf(stderr, "pool: the seed's cold creates ...\n");
    s = RunSeedScript(seed, {"serial", image, std::to_string(colds)});
  }
  std::fprintf(stderr, "pool: agvisor's cold creates ...\n");
  std::vector<double> cold;
  for (int i = 0; i < colds; ++i) {
    auto t0 = Clock::now();
    auto sb = Must(CreateSandbox(BenchSpec(image)), "cold create");
    cold.push_back(Since(t0));
    Must(sb->Stop(), "stop");
  }
  std::fprintf(stderr, "pool: %d acquires from a pool of 2 ...\n", acquires);
  PoolOptions po;
  po.spec = BenchSpec(image);
  po.size = 2;
  auto pool = Must(CreatePool(po), "pool");
  std::vector<double> acquire, first_exec;
  for (int i = 0; i < acquires; ++i) {
    // Measured against a ready pool: the latency a caller sees when the pool keeps up.
    Must(pool->WaitReady(std::chrono::seconds(120)), "pool ready");
    auto t0 = Clock::now();
    auto sb = Must(pool->Acquire({.lifetime = 600}), "acquire");
    acquire.push_back(Since(t0));
    auto r = Must(sb->Exec({"true"}), "exec after acquire");
    first_exec.push_back(Since(t0));
    if (r.exit_code != 0) Die("exec true failed");
    Must(sb->Stop(), "stop");
  }
  auto ps = pool->Stats();
  pool.reset();

  Spread c = SpreadOf(cold), a = SpreadOf(acquire), f = SpreadOf(first_exec);
  Spread sc = s ? SpreadOf(Series(*s, "create_")) : Spread{};
  std::printf("\n### Pool: a sandbox ready to use (image %s, 1 cpu, 512m; pool of 2)\n\n",
              image.c_str());
  std::printf(
      "| operation | n | median | p95 | vs seed create (median) |\n|---|---|---|---|---|\n");
  if (s) {
    std::printf("| seed `create_sandbox` (cold) | %zu | %s | %s | 1.0x |\n", sc.n,
                Ms(sc.p50).c_str(), Ms(sc.p95).c_str());
  }
  std::printf("| agvisor `Sandbox::Create` (cold) | %zu | %s | %s | %s |\n", c.n, Ms(c.p50).c_str(),
              Ms(c.p95).c_str(), Ratio(sc.p50, c.p50).c_str());
  std::printf("| agvisor `Pool::Acquire` | %zu | %s | %s | %s |\n", a.n, Ms(a.p50).c_str(),
              Ms(a.p95).c_str(), Ratio(sc.p50, a.p50).c_str());
  std::printf("| agvisor `Pool::Acquire` + first `exec true` | %zu | %s | %s | %s |\n", f.n,
              Ms(f.p50).c_str(), Ms(f.p95).c_str(), Ratio(sc.p50, f.p50).c_str());
  std::printf("\npool stats: %llu acquired, %llu cold, %llu started, %llu start failures\n",
              static_cast<unsigned long long>(ps.acquired),
              static_cast<unsigned long long>(ps.cold), static_cast<unsigned long long>(ps.started),
              static_cast<unsigned long long>(ps.start_failures));
}

// ---- concurrency: N creates at once per gate bound, M execs at once over S sandboxes ----

void ConcurrencySuite(const std::string& seed, const std::string& image, int creates,
                      const std::vector<int>& gates, int sandboxes, int execs) {
  struct Row {
    std::string label;
    Spread spread;
    double wall = 0;
    int failed = 0;
  };
  std::vector<Row> rows;
  if (!seed.empty()) {
    std::fprintf(stderr, "concurrency: the seed's %d creates at once ...\n", creates);
    if (auto s = RunSeedScript(seed, {"creates", image, std::to_string(creates)})) {
      rows.push_back({"seed (a thread per create)", SpreadOf(Series(*s, "create_")), (*s)["wall"]});
    }
  }
  StartGate& gate = KeptRuntime("")->start_gate();
  const StartGateLimits saved = gate.limits();
  for (int k : gates) {
    std::fprintf(stderr, "concurrency: agvisor's %d creates at once, start gate %d ...\n", creates,
                 k);
    gate.SetLimits({.max_concurrent = k, .max_queued = 1000, .max_wait = std::chrono::minutes(10)});
    std::vector<std::unique_ptr<Sandbox>> boxes(static_cast<std::size_t>(creates));
    std::atomic<int> failed{0};
    auto [times, wall] = AtOnce(creates, [&](int i) {
      auto sb = CreateSandbox(BenchSpec(image));
      if (!sb.ok()) {
        std::fprintf(stderr, "  create failed: %s\n", sb.error().ToString().c_str());
        ++failed;
        return;
      }
      boxes[static_cast<std::size_t>(i)] = std::move(*sb);
    });
    StopAll(boxes);
    rows.push_back({"agvisor, start gate " +
                        (k == 0 ? std::string("unbounded") : std::to_string(k)) +
                        (k == saved.max_concurrent ? " (default)" : ""),
                    SpreadOf(times), wall, failed.load()});
    std::this_thread::sleep_for(std::chrono::seconds(2));  // let Docker finish the removals
  }
  gate.SetLimits(saved);

  std::printf("\n### %d concurrent creates (image %s, 1 cpu, 512m; start to ready)\n\n", creates,
              image.c_str());
  std::printf("| who | p50 | p95 | all ready after | failed |\n|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    std::printf("| %s | %s | %s | %s | %d |\n", r.label.c_str(), Ms(r.spread.p50).c_str(),
                Ms(r.spread.p95).c_str(), Ms(r.wall).c_str(), r.failed);
  }

  // Execs.
  std::vector<Row> erows;
  if (!seed.empty()) {
    std::fprintf(stderr, "concurrency: the seed's %d execs at once over %d sandboxes ...\n", execs,
                 sandboxes);
    if (auto s = RunSeedScript(
            seed, {"execs", image, std::to_string(sandboxes), std::to_string(execs)})) {
      erows.push_back({"seed", SpreadOf(Series(*s, "exec_")), (*s)["wall"]});
    }
  }
  std::fprintf(stderr, "concurrency: agvisor's %d execs at once over %d sandboxes ...\n", execs,
               sandboxes);
  std::vector<std::unique_ptr<Sandbox>> boxes(static_cast<std::size_t>(sandboxes));
  AtOnce(sandboxes, [&](int i) {
    boxes[static_cast<std::size_t>(i)] = Must(CreateSandbox(BenchSpec(image)), "create");
  });
  std::atomic<int> failed{0};
  auto [times, wall] = AtOnce(execs, [&](int i) {
    auto r = boxes[static_cast<std::size_t>(i % sandboxes)]->Exec({"true"});
    if (!r.ok() || r->exit_code != 0) ++failed;
  });
  StopAll(boxes);
  erows.push_back({"agvisor", SpreadOf(times), wall, failed.load()});
  std::printf("\n### %d concurrent execs of `true` over %d sandboxes\n\n", execs, sandboxes);
  std::printf(
      "| who | p50 | p95 | all done after | execs/s | failed |\n|---|---|---|---|---|---|\n");
  for (const auto& r : erows) {
    std::printf("| %s | %s | %s | %s | %.0f | %d |\n", r.label.c_str(), Ms(r.spread.p50).c_str(),
                Ms(r.spread.p95).c_str(), Ms(r.wall).c_str(), execs / r.wall, r.failed);
  }
}

// ---- memory: the host processes of one idle sandbox ----

struct Footprint {
  std::int64_t rss_kb = 0, pss_kb = 0;
  std::int64_t sentry_pss_kb = 0;  // runsc-sandbox: the gVisor kernel and the sandbox's memory
  int processes = 0;
};

// The container's containerd shim and everything under it (runsc-gofer, runsc-sandbox, ...).
HostProcesses ContainerTree(const std::string& container_id) {
  HostProcesses tree = ContainerTrees({container_id})[container_id];
  if (tree.empty()) Die("no containerd shim for container " + container_id);
  return tree;
}

// RSS from status, PSS from smaps_rollup, over the container's process tree.
Footprint MeasureContainer(const std::string& container_id) {
  Footprint f;
  for (const auto& [pid, argv0] : ContainerTree(container_id)) {
    const std::string base = "/proc/" + std::to_string(pid);
    std::int64_t pss = FieldKb(ReadAll(base + "/smaps_rollup"), "Pss");
    f.rss_kb += FieldKb(ReadAll(base + "/status"), "VmRSS");
    f.pss_kb += pss;
    if (argv0.find("runsc-sandbox") != std::string::npos) f.sentry_pss_kb += pss;
    ++f.processes;
  }
  return f;
}

void MemorySuite(const std::string& seed, const std::string& image, int settle_s) {
  auto docker = Must(ConnectDockerHost(""), "docker");
  std::optional<Footprint> theirs;
  if (!seed.empty()) {
    std::fprintf(stderr, "memory: the seed's idle sandbox ...\n");
    RunSeedScript(seed, {"idle", image}, [&](const std::string& name) {
      std::this_thread::sleep_for(std::chrono::seconds(settle_s));
      auto info = Must(docker->InspectContainer(name), "inspect the seed's sandbox");
      theirs = MeasureContainer(info.id);
    });
  }
  std::fprintf(stderr, "memory: agvisor's idle sandbox ...\n");
  auto sb = Must(CreateSandbox(BenchSpec(image)), "create");
  std::this_thread::sleep_for(std::chrono::seconds(settle_s));
  Footprint ours = MeasureContainer(Must(sb->Info(), "info").container_id);
  Must(sb->Stop(), "stop");

  std::printf("\n### Idle sandbox host memory (image %s, 1 cpu, 512m; %d s after ready)\n\n",
              image.c_str(), settle_s);
  std::printf(
      "| who | processes | RSS | PSS | of which runsc-sandbox (PSS) |\n|---|---|---|---|---|\n");
  auto row = [](const char* who, const Footprint& f) {
    std::printf("| %s | %d | %.1f MiB | %.1f MiB | %.1f MiB |\n", who, f.processes,
                f.rss_kb / 1024.0, f.pss_kb / 1024.0, f.sentry_pss_kb / 1024.0);
  };
  if (theirs) row("seed", *theirs);
  row("agvisor", ours);
}

// ---- idle: the host CPU an idle (and a paused) sandbox costs, per gVisor platform ----

// CPU time (utime + stime, clock ticks) so far of each runsc process of a container: every
// process under its shim whose argv[0] names runsc (runsc-sandbox: the sentry, runsc-gofer, ...).
// A process's threads are in its own times.
std::map<int, std::int64_t> RunscTicks(const std::string& container_id) {
  std::map<int, std::int64_t> ticks;
  for (const auto& [pid, argv0] : ContainerTree(container_id)) {
    if (argv0.find("runsc") != std::string::npos) ticks[pid] = CpuTicks(pid);
  }
  return ticks;
}

std::int64_t TicksBetween(const std::map<int, std::int64_t>& before,
                          const std::map<int, std::int64_t>& after) {
  std::int64_t sum = 0;
  for (const auto& [pid, t] : after) {
    auto it = before.find(pid);
    sum += t - (it == before.end() ? 0 : it->second);  // a process started meanwhile: all of it
  }
  return sum;
}

// One sandbox per platform (--platform: that one; else systrap and ptrace), all measured over
// the same `seconds`: first idle (created, `settle` seconds left alone, no exec), then paused.
void IdleSuite(const std::string& image, int seconds, int settle) {
  std::vector<std::string> platforms = {std::string(kPlatformSystrap),
                                        std::string(kPlatformPtrace)};
  if (!g_platform.empty()) platforms = {g_platform};
  struct Box {
    std::string platform;
    std::unique_ptr<Sandbox> sb;
    std::string id;
    std::int64_t idle = -1, paused = -1;
  };
  std::vector<Box> boxes;
  for (const auto& p : platforms) {
    std::fprintf(stderr, "idle: a sandbox on %s ...\n", p.c_str());
    SandboxSpec spec = BenchSpec(image);
    spec.platform = p;
    auto sb = CreateSandbox(spec);
    if (!sb.ok()) {
      std::fprintf(stderr, "  skipped: %s\n", sb.error().ToString().c_str());
      continue;
    }
    const std::string id = Must((*sb)->Info(), "info").container_id;
    boxes.push_back({p, std::move(*sb), id});
  }
  if (boxes.empty()) Die("idle: no sandbox started on any platform");
  std::this_thread::sleep_for(std::chrono::seconds(settle));
  auto window = [&](auto store) {
    std::vector<std::map<int, std::int64_t>> before;
    for (auto& b : boxes) before.push_back(RunscTicks(b.id));
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    for (std::size_t i = 0; i < boxes.size(); ++i) {
      store(boxes[i], TicksBetween(before[i], RunscTicks(boxes[i].id)));
    }
  };
  std::fprintf(stderr, "idle: %d s idle ...\n", seconds);
  window([](Box& b, std::int64_t t) { b.idle = t; });
  for (auto& b : boxes) Must(b.sb->Pause(), "pause");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::fprintf(stderr, "idle: %d s paused ...\n", seconds);
  window([](Box& b, std::int64_t t) { b.paused = t; });
  for (auto& b : boxes) {
    Must(b.sb->Resume(), "resume");
    Must(b.sb->Stop(), "stop");
  }

  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double window_ticks = hz * seconds;
  std::string load = ReadAll("/proc/loadavg");
  load = load.substr(0, load.find(' ', load.find(' ', load.find(' ') + 1) + 1));
  std::printf(
      "\n### Idle sandbox host CPU (image %s, 1 cpu, 512m; runsc processes' utime+stime over %d s, "
      "%.0f ticks/s; load average %s)\n\n",
      image.c_str(), seconds, hz, load.c_str());
  std::printf(
      "| platform | idle: ticks | idle: %% of a CPU | idle sandboxes per core | paused: ticks | "
      "paused: %% of a CPU |\n|---|---|---|---|---|---|\n");
  for (const auto& b : boxes) {
    char per_core[48];
    if (b.idle > 0) {
      std::snprintf(per_core, sizeof per_core, "%.0f", window_ticks / static_cast<double>(b.idle));
    } else {
      std::snprintf(per_core, sizeof per_core, "> %.0f (0 ticks)", window_ticks);
    }
    std::printf("| %s | %lld | %.2f%% | %s | %lld | %.2f%% |\n", b.platform.c_str(),
                static_cast<long long>(b.idle), 100.0 * static_cast<double>(b.idle) / window_ticks,
                per_core, static_cast<long long>(b.paused),
                100.0 * static_cast<double>(b.paused) / window_ticks);
  }
}

// The doors side by side: the C++ client (client/place.h) in process and through this build's
// agvisord on a unix socket (started here, --no-egress), one sandbox each, same spec. Exec round
// trips alternate between the two, `runs` each; then kTransferRounds rounds of, per door, the
// ceiling on its sandbox and a collected `cat` of 50 MB through it. Keys door_{local,agvisord}_...
void RunDoors(const std::string& image, int runs, Timings& t) {
  char tmpl[] = "/tmp/agvisor-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) Die("mkdtemp");
  const std::string dir = tmpl;
  Subprocess daemon = Must(StartBenchAgvisord(dir, {"--no-egress"}), "start agvisord");
  auto remote = Must(client::Agvisord("unix:" + dir + "/agvisord.sock", dir + "/token"),
                     "connect to agvisord");
  auto local = client::InProcess("");
  const SandboxSpec spec = BenchSpec(image);
  struct Door {
    const char* key;
    client::Place* place;
    std::unique_ptr<client::SandboxHandle> sb;
    std::vector<double> exec, collected, ceiling;
  };
  std::array<Door, 2> doors = {Door{"local", local.get()}, Door{"agvisord", remote.get()}};
  for (auto& d : doors) {
    d.sb = Must(d.place->Create(spec), std::string("create through ") + d.key).handle;
    auto made =
        Must(d.sb->Exec({"sh", "-c", "head -c 50000000 /dev/zero | tr '\\0' a > /tmp/f50"}, {}),
             "make file");
    if (made.exit_code != 0) Die("make file: " + made.err);
  }
  for (int i = 0; i < runs; ++i) {
    for (auto& d : doors) {
      auto t0 = Clock::now();
      auto r = Must(d.sb->Exec({"true"}, {}), std::string("exec true through ") + d.key);
      d.exec.push_back(Since(t0));
      if (r.exit_code != 0) Die("exec true failed");
    }
  }
  auto docker = Must(ConnectDockerHost(""), "docker");
  for (int i = 0; i < kTransferRounds; ++i) {
    for (auto& d : doors) {
      d.ceiling.push_back(TimeCeiling(*docker, d.sb->container_name()));
      auto t0 = Clock::now();
      auto r = Must(d.sb->Exec({"cat", "/tmp/f50"}, {}), std::string("cat through ") + d.key);
      d.collected.push_back(Since(t0));
      if (r.out.size() != kOutputBytes) Die("collected output has the wrong size");
    }
  }
  for (auto& d : doors) {
    const std::string key = std::string("door_") + d.key;
    Spread e = SpreadOf(d.exec);
    t[key + "_exec_median"] = e.p50;
    t[key + "_exec_p95"] = e.p95;
    PutRounds(t, key + "_output_collected", d.collected, d.ceiling, kOutputBytes);
    (void)d.place->Remove(d.sb->container_name(), /*erase_data=*/true);
  }
  StopBenchAgvisord(daemon);
  std::filesystem::remove_all(dir);
}

// agvisor's Python door: bench/py_bench.py with this build's package, in process (the seed's
// API: exec("true"), exec("cat FILE") collected and with on_output), each output round against
// a ceiling taken on its sandbox just before. Keys py_...; none without the Python package.
void RunPython(const std::string& image, int runs, Timings& t) {
#ifdef AGVISOR_PYTHON_PACKAGE
  auto docker = Must(ConnectDockerHost(""), "docker");
  std::vector<double> ceiling;
  // AGVISOR_BENCH_PYTHON_PACKAGE: another build's staged package (e.g. one from before a change)
  // for a before/after comparison in the same minutes; default: this build's.
  const char* other = std::getenv("AGVISOR_BENCH_PYTHON_PACKAGE");
  auto py = RunPythonScript(
      "py_bench.py", other != nullptr && *other != '\0' ? other : AGVISOR_PYTHON_PACKAGE,
      {image, std::to_string(runs), std::to_string(kTransferRounds), g_platform},
      [&](const std::string& container) { ceiling.push_back(TimeCeiling(*docker, container)); });
  if (!py) Die("py_bench.py failed (its error is above)");
  t["py_exec_median"] = (*py)["py_exec_median"];
  t["py_exec_p95"] = (*py)["py_exec_p95"];
  for (const std::string key : {"py_output_collected", "py_output_streamed"}) {
    PutRounds(t, key, Series(*py, key + "_"), ceiling, kOutputBytes);
  }
#else
  (void)image, (void)runs, (void)t;
  std::fprintf(stderr, "built without the Python package (AGVISOR_PYTHON=OFF): no Python rows\n");
#endif
}

void BasicSuite(const std::string& seed, const std::string& image, int runs) {
  const std::string load_start = LoadAverage();
  std::optional<Timings> s;
  if (!seed.empty()) {
    std::fprintf(stderr, "running the seed (%s) ...\n", seed.c_str());
    s = RunSeed(seed, image, runs);
  }
  std::fprintf(stderr, "running agvisor ...\n");
  Timings o = RunOurs(image, runs);
  std::fprintf(stderr, "running agvisor's exec pacing (ready shells on, then off) ...\n");
  RunExecPacing(image, runs, kDefaultWarmShells, o);
  RunExecPacing(image, runs, 0, o);
  std::fprintf(stderr, "running the doors: in process and through agvisord ...\n");
  RunDoors(image, runs, o);
  std::fprintf(stderr, "running agvisor's Python package ...\n");
  RunPython(image, runs, o);

  struct Row {
    std::string key;
    std::string label;
    double mb = 0;         // bytes moved (MB), 0 = a latency
    std::string seed_key;  // the seed's measurement to compare with ("" = key)
  };
  std::vector<Row> rows = {
      {"create", "create to ready"},
      {"exec_median", "exec `true` round trip, median"},
      {"exec_p95", "exec `true` round trip, p95"},
      {"spawn_floor", "starting `true` inside the sandbox (the floor under exec)"},
  };
  // Exec `sh -c true` back to back and 200 ms apart, with and without ready shells; the seed's
  // exec("true") is the same shell command.
  for (const char* pace : {"b2b", "spaced"}) {
    const bool spaced = std::string_view(pace) == "spaced";
    for (int w : {kDefaultWarmShells, 0}) {
      for (const char* stat : {"median", "p95"}) {
        const std::string suffix = "_w" + std::to_string(w);
        const std::string key = std::string("exec_sh_") + pace + "_" + stat + suffix;
        const int used =
            static_cast<int>(o[std::string("exec_sh_") + pace + "_prestarted" + suffix]);
        std::string label =
            std::string("exec `sh -c true` ") +
            (spaced ? "200 ms apart (agent-like)" : "back to back") + ", " + stat + ", " +
            (w > 0 ? "ready shells (warm_shells " + std::to_string(w) + "; " +
                         std::to_string(used) + "/" + std::to_string(runs) + " prestarted)"
                   : "no ready shells (warm_shells 0; " + std::to_string(used) + "/" +
                         std::to_string(runs) + " prestarted)");
        rows.push_back({key, label, 0, std::string(spaced ? "exec_spaced_" : "exec_") + stat});
      }
    }
  }
  for (Row r : std::initializer_list<Row>{
           {"output_collected", "50 MB output (cat), collected", 50},
           {"output_streamed", "50 MB output (cat), streamed", 50},
           {"upload", "100 MB upload", 100},
           {"download", "100 MB download", 100},
           {"stop", "stop"},
           // The doors (RunDoors: paired, alternating) and the Python package (RunPython).
           {"door_local_exec_median", "exec `true` round trip, C++ client in process, median", 0,
            "exec_median"},
           {"door_agvisord_exec_median",
            "exec `true` round trip, C++ client through agvisord (unix socket), median", 0,
            "exec_median"},
           {"door_local_exec_p95", "exec `true` round trip, C++ client in process, p95", 0,
            "exec_p95"},
           {"door_agvisord_exec_p95", "exec `true` round trip, C++ client through agvisord, p95", 0,
            "exec_p95"},
           {"door_local_output_collected", "50 MB output (cat), collected, C++ client in process",
            50, "output_collected"},
           {"door_agvisord_output_collected",
            "50 MB output (cat), collected, C++ client through agvisord", 50, "output_collected"},
           {"py_exec_median", "exec `true` round trip, Python `sb.exec` (sh -c), median", 0,
            "exec_median"},
           {"py_exec_p95", "exec `true` round trip, Python `sb.exec` (sh -c), p95", 0, "exec_p95"},
           {"py_output_collected", "50 MB output (cat), collected, Python `sb.exec`", 50,
            "output_collected"},
           {"py_output_streamed", "50 MB output (cat), streamed, Python `sb.exec(on_output=)`", 50,
            "output_streamed"},
       }) {
    if (o.count(r.key)) rows.push_back(r);
  }
  const double ceiling = o["ceiling"];
  std::printf(
      "\nimage %s, 1 cpu, 512m, platform %s; exec runs %d; transport ceiling (raw Engine API exec "
      "of "
      "`cat` 50 MB, median of %d rounds): %.0f ms = %.0f MB/s\n\n",
      image.c_str(),
      g_platform.empty() ? "the default (ptrace where the host has it)" : g_platform.c_str(), runs,
      kTransferRounds, ceiling * 1000, 50 / ceiling);
  std::printf("| operation | seed | agvisor | vs seed | vs ceiling |\n|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    auto fmt = [&](double sec) {
      char b[64];
      if (r.mb > 0) {
        std::snprintf(b, sizeof b, "%.0f ms (%.0f MB/s)", sec * 1000, r.mb / sec);
      } else {
        std::snprintf(b, sizeof b, "%.1f ms", sec * 1000);
      }
      return std::string(b);
    };
    std::string seed_cell = "-", ratio = "-", vs_ceiling = "-";
    const std::string& sk = r.seed_key.empty() ? r.key : r.seed_key;
    if (s && s->count(sk)) {
      seed_cell = fmt((*s)[sk]);
      char b[32];
      std::snprintf(b, sizeof b, "%.2fx", (*s)[sk] / o[r.key]);
      ratio = b;
    } else if (s && r.key == "spawn_floor") {
      // No exec round trip can beat the process start it contains: the best ratio possible.
      char b[48];
      std::snprintf(b, sizeof b, "at most %.1fx", (*s)["exec_median"] / o[r.key]);
      ratio = b;
    }
    if (r.mb > 0) {
      // The median over rounds of throughput / that round's ceiling throughput.
      char b[32];
      std::snprintf(b, sizeof b, "%.2f", o[r.key + "_vs_ceiling"]);
      vs_ceiling = b;
    }
    std::printf("| %s | %s | %s | %s | %s |\n", r.label.c_str(), seed_cell.c_str(),
                fmt(o[r.key]).c_str(), ratio.c_str(), vs_ceiling.c_str());
  }
  // The "ready shells" rows mean something only if the agent used them: say how often it did.
  const std::string w = "_w" + std::to_string(kDefaultWarmShells);
  const int b2b = static_cast<int>(o["exec_sh_b2b_prestarted" + w]);
  const int spaced = static_cast<int>(o["exec_sh_spaced_prestarted" + w]);
  std::printf(
      "\nready shells (ExecResult::prestarted): with warm_shells %d, %d/%d back-to-back and "
      "%d/%d spaced execs ran in a ready shell%s; with warm_shells 0, %d/%d and %d/%d.\n",
      kDefaultWarmShells, b2b, runs, spaced, runs,
      spaced == 0 ? " (NONE: the \"ready shells\" rows measured cold starts)" : "",
      static_cast<int>(o["exec_sh_b2b_prestarted_w0"]), runs,
      static_cast<int>(o["exec_sh_spaced_prestarted_w0"]), runs);
  std::printf(
      "\nexec `true` p50 through agvisord / in process (C++ client, alternating calls): %.2f "
      "(%s / %s)\n",
      o["door_agvisord_exec_median"] / o["door_local_exec_median"],
      Ms(o["door_agvisord_exec_median"]).c_str(), Ms(o["door_local_exec_median"]).c_str());
  std::printf("1-minute load average: %s at the start, %s at the end\n", load_start.c_str(),
              LoadAverage().c_str());
}

}  // namespace
// Desktop boot: gui create to ready (VNC answering, panel and desktop drawn), network none,
// 2 cpus, 2g; then one screenshot. The first create (the derived agent image) is not counted.
// Removes the images the snapshots of sandbox `name` made, and the images with the agent derived
// from them (they inherit the label), children first.
void RemoveSnapshotsOf(const std::string& name) {
  auto docker = Must(ConnectDockerHost(""), "docker");
  for (int round = 0; round < 3; ++round) {
    auto images = docker->ListImages({"agvisor.snapshot.of=" + name});
    if (!images.ok() || images->empty()) return;
    for (const auto& i : *images) (void)docker->RemoveImage(i.id, /*force=*/true);
  }
}

// Issue 37's table: each snapshot and fork the whole file system (as before layers) and as a
// layer over the image, side by side, with the agent's own read rate inside gVisor and the
// 1-minute load (the machine may be shared: say so with the figures).
void PrintLayerTable(std::map<std::string, std::vector<double>>& rows,
                     const SnapshotResult& unchanged_layered, const SnapshotResult& unchanged_whole,
                     const SnapshotResult& layered, const SnapshotResult& whole) {
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double load[3] = {0, 0, 0};
  (void)::getloadavg(load, 3);
  std::printf(
      "\n### Snapshots and forks: whole file system vs layer (platform %s, 1-minute load "
      "%.2f at the end)\n\n",
      g_platform.empty() ? std::string(kDefaultPlatform).c_str() : g_platform.c_str(), load[0]);
  std::printf("| operation | whole (before) | layer (after) | stream whole / layer |\n");
  std::printf("|---|---|---|---|\n");
  std::printf("| snapshot of an unchanged sandbox | %.0f ms | %.0f ms | %.1f MB / %.3f MB |\n",
              median(rows["unchanged_whole"]), median(rows["unchanged_layered"]),
              unchanged_whole.bytes / 1e6, unchanged_layered.bytes / 1e6);
  std::printf("| snapshot of base + 200 MB | %.0f ms | %.0f ms | %.1f MB / %.1f MB |\n",
              median(rows["snapshot_whole"]), median(rows["snapshot_layered"]), whole.bytes / 1e6,
              layered.bytes / 1e6);
  std::printf("| fork of 4 (snapshot with /workspace + 4 creates) | %.0f ms | %.0f ms | |\n",
              median(rows["fork_whole"]), median(rows["fork_layered"]));
  const double read_ms = median(rows["agent_read"]);
  std::printf(
      "| the agent's tar of the 200 MB inside gVisor, to /dev/null | | %.0f ms (%.0f "
      "MB/s; %.0f%% of the layered snapshot) | |\n",
      read_ms, read_ms > 0 ? 200e3 / read_ms : 0.0,
      median(rows["snapshot_layered"]) > 0 ? 100 * read_ms / median(rows["snapshot_layered"])
                                           : 0.0);
}

// Snapshot and fork (docs/lifecycle.md, "Snapshots and forks"): a named sandbox of `image` with
// 200 MB of changes (4 x 50 MB of random bytes in /opt); `rounds` snapshots of it (the root file
// system without /workspace), then `forks` forks of 4 (a snapshot with /workspace, then 4
// creates). Adds rows to the lifecycle table `ms` (milliseconds) and returns a line on sizes.
std::string SnapshotForkRounds(const std::string& image, int rounds, int forks,
                               std::map<std::string, std::vector<double>>& ms) {
  const std::string tag = std::to_string(::getpid());
  SandboxSpec spec = BenchSpec(image);
  spec.name = "bench-snap-" + tag;
  // An unchanged sandbox first (issue 37: its snapshot is a layer of nothing).
  SandboxSpec unchanged_spec = BenchSpec(image);
  unchanged_spec.name = "bench-snap-u-" + tag;
  auto unchanged = Must(CreateSandbox(unchanged_spec), "create the unchanged source");
  std::map<std::string, std::vector<double>> layers;  // this function's own table
  SnapshotResult unchanged_layered, unchanged_whole;
  for (int i = 0; i < rounds; ++i) {
    std::fprintf(stderr, "lifecycle: snapshot of an unchanged sandbox %d/%d ...\n", i + 1, rounds);
    for (bool layered : {true, false}) {
      SnapshotOptions o;
      o.image = "bench-snapshot-u-" + tag;
      o.layered = layered;
      auto r = Must(unchanged->Snapshot(o), "snapshot of an unchanged sandbox");
      layers[layered ? "unchanged_layered" : "unchanged_whole"].push_back(r.seconds * 1000);
      (layered ? unchanged_layered : unchanged_whole) = r;
    }
  }
  Must(unchanged->Delete(), "delete the unchanged source");
  RemoveSnapshotsOf(*unchanged_spec.name);

  auto src = Must(CreateSandbox(spec), "create the snapshot source");
  auto made = Must(src->ExecShell("mkdir -p /opt/big && for i in 1 2 3 4; do head -c 50000000 "
                                  "/dev/urandom > /opt/big/f$i; done && echo w > /workspace/w",
                                  {.timeout = 300}),
                   "write 200 MB");
  if (made.exit_code != 0) Die("write 200 MB: " + made.err);
  // The agent's read rate inside gVisor: its tar of the 200 MB, to /dev/null in the sandbox.
  for (int i = 0; i < rounds; ++i) {
    auto read = Must(src->ExecShell("s=$(date +%s%N); " + std::string(kAgentPath) +
                                        " read-file --tar /opt/big >/dev/null; "
                                        "echo $(( ($(date +%s%N) - s) / 1000000 ))",
                                    {.timeout = 300}),
                     "the agent's read of 200 MB");
    layers["agent_read"].push_back(std::atof(read.out.c_str()));
  }
  SnapshotResult last, whole;
  for (int i = 0; i < rounds; ++i) {
    std::fprintf(stderr, "lifecycle: snapshot %d/%d ...\n", i + 1, rounds);
    SnapshotOptions o;
    o.image = "bench-snapshot-" + tag;
    last = Must(src->Snapshot(o), "snapshot");
    ms["snapshot"].push_back(last.seconds * 1000);
    layers["snapshot_layered"].push_back(last.seconds * 1000);
    o.layered = false;
    whole = Must(src->Snapshot(o), "whole snapshot");
    layers["snapshot_whole"].push_back(whole.seconds * 1000);
  }
  auto docker = Must(ConnectDockerHost(""), "docker");
  const auto image_size = Must(docker->InspectImage(last.image), "inspect").size;
  for (int i = 0; i < forks; ++i) {
    for (bool layered : {true, false}) {
      std::fprintf(stderr, "lifecycle: fork of 4 (%s), %d/%d ...\n", layered ? "layered" : "whole",
                   i + 1, forks);
      ForkOptions o;
      o.count = 4;
      o.prefix = "bench-fork-" + tag + "-" + std::to_string(i) + (layered ? "l" : "w");
      o.image = o.prefix;
      o.spec = BenchSpec(image);
      o.layered = layered;
      auto f = Must(Fork(*src, o), "fork of 4");
      if (layered) {
        ms["fork"].push_back(f.seconds * 1000);
        ms["fork_snapshot"].push_back(f.snapshot.seconds * 1000);
        ms["fork_creates"].push_back((f.seconds - f.snapshot.seconds) * 1000);
      }
      layers[layered ? "fork_layered" : "fork_whole"].push_back(f.seconds * 1000);
      for (auto& sb : f.sandboxes) Must(sb->Delete(), "delete a fork");
    }
  }
  Must(src->Delete(), "delete the snapshot source");
  RemoveSnapshotsOf(*spec.name);
  PrintLayerTable(layers, unchanged_layered, unchanged_whole, last, whole);
  char line[256];
  std::snprintf(line, sizeof line,
                "snapshot of %s + 200 MB: stream %.1f MB (%llu entries, %.1f MB of file data), "
                "image %.1f MB",
                image.c_str(), last.bytes / 1e6, static_cast<unsigned long long>(last.entries),
                last.file_bytes / 1e6, image_size / 1e6);
  return line;
}

// ---- lifecycle: where a resume's time goes (docs/lifecycle.md, "Where a resume's time goes") ----

// runsc's state root of the sandbox of container `id` on this machine: the `--root=` of its
// runsc-sandbox process (Docker 20.10 with runsc as a runc-v2 runtime: /run/docker/runtime-runc/
// moby). Empty when no such process is found here.
std::string RunscRootOf(const std::string& id) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string cmdline = ReadAll(entry.path().string() + "/cmdline");
    if (cmdline.rfind("runsc-sandbox", 0) != 0 || cmdline.find(id) == std::string::npos) continue;
    const auto at = cmdline.find("--root=");
    if (at == std::string::npos) continue;
    const auto start = at + 7;
    return cmdline.substr(start, cmdline.find('\0', start) - start);
  }
  return "";
}

// Nanoseconds of CPU the container's cgroup has used (cgroup v1 cpuacct, else v2 cpu.stat).
std::int64_t CgroupCpuNs(const std::string& id) {
  for (const auto& f : {"/sys/fs/cgroup/cpuacct/docker/" + id + "/cpuacct.usage",
                        "/sys/fs/cgroup/cpu,cpuacct/docker/" + id + "/cpuacct.usage"}) {
    const std::string v = ReadAll(f);
    if (!v.empty()) return std::atoll(v.c_str());
  }
  const std::string stat = ReadAll("/sys/fs/cgroup/system.slice/docker-" + id + ".scope/cpu.stat");
  const auto at = stat.find("usage_usec ");
  return at == std::string::npos ? -1 : std::atoll(stat.c_str() + at + 11) * 1000;
}

// Runs `runsc --root=ROOT VERB ID` and returns its wall time in ms (runsc's own pause/resume: the
// Go binary's start, then one control call into the sandbox).
double TimeRunsc(const std::string& root, const char* verb, const std::string& id) {
  auto t0 = Clock::now();
  auto p = Must(Subprocess::Spawn({.argv = {"runsc", "--root=" + root, verb, id}}), "runsc");
  auto st = Must(p.Wait(), "runsc wait");
  if (!st.success()) Die(std::string("runsc ") + verb + ": " + st.ToString());
  return Since(t0) * 1000;
}

// Per round, on one running sandbox `sb` (container `id`): an exec on it running and one on it
// paused by Sandbox::Pause (resume-on-call), Sandbox::Pause and Resume, Docker's own pause/unpause
// through the Engine API (no agvisor around it), one inspect (the check Sandbox::Resume makes
// first, when this process did not pause it), and runsc's own pause/resume run directly on the same
// sandbox (Docker is not told; each pair leaves it running, as Docker believes): the floor under
// any resume through Docker. Then the host CPU of the container's cgroup over `window_s` running
// idle and `window_s` paused. Adds rows to `ms`; returns the CPU line.
std::string ResumeFloorRounds(Sandbox& sb, int rounds, int window_s,
                              std::map<std::string, std::vector<double>>& ms) {
  auto docker = Must(ConnectDockerHost(""), "connect to Docker");
  const std::string id = Must(docker->InspectContainer(sb.container_name()), "inspect").id;
  const std::string root = RunscRootOf(id);
  auto timed = [&](const char* key, const std::function<void()>& f) {
    auto t0 = Clock::now();
    f();
    ms[key].push_back(Since(t0) * 1000);
  };
  for (int i = 0; i < rounds; ++i) {
    // agvisor's path and each layer under it in the same round, so that the load of the minute
    // weighs on all of them alike.
    timed("exec_r", [&] { Must(sb.Exec({"true"}), "exec"); });
    Must(sb.Pause(), "pause");
    timed("exec_paused_r", [&] { Must(sb.Exec({"true"}), "exec on a paused sandbox"); });
    ms["resume_on_call_r"].push_back(ms["exec_paused_r"].back() - ms["exec_r"].back());
    timed("pause_r", [&] { Must(sb.Pause(), "pause"); });
    timed("resume_r", [&] { Must(sb.Resume(), "resume"); });
    timed("inspect", [&] { (void)Must(docker->InspectContainer(id), "inspect"); });
    timed("engine_pause", [&] { Must(docker->PauseContainer(id), "engine pause"); });
    timed("engine_unpause", [&] { Must(docker->UnpauseContainer(id), "engine unpause"); });
    if (root.empty()) continue;
    ms["runsc_pause"].push_back(TimeRunsc(root, "pause", id));
    ms["runsc_resume"].push_back(TimeRunsc(root, "resume", id));
  }
  Must(sb.Exec({"true"}), "exec after the floor rounds");
  auto cpu_over = [&] {
    const std::int64_t a = CgroupCpuNs(id);
    std::this_thread::sleep_for(std::chrono::seconds(window_s));
    const std::int64_t b = CgroupCpuNs(id);
    return a < 0 || b < 0 ? -1.0 : 100.0 * static_cast<double>(b - a) / (window_s * 1e9);
  };
  const double idle = cpu_over();
  Must(sb.Pause(), "pause");
  const double paused = cpu_over();
  Must(sb.Resume(), "resume");
  char line[256];
  std::snprintf(line, sizeof line,
                "host CPU of the sandbox's cgroup over %d s: idle %.2f%% of a CPU, paused %.2f%% "
                "(platform %s)%s",
                window_s, idle, paused,
                g_platform.empty() ? std::string(kDefaultPlatform).c_str() : g_platform.c_str(),
                root.empty() ? "; runsc's root not found here: no runsc rows" : "");
  return line;
}

// The rows of the resume table (key in the lifecycle suite's timings, label), all measured in
// ResumeFloorRounds' rounds.
constexpr std::pair<const char*, const char*> kResumeRows[] = {
    {"exec_r", "exec `true` (running)"},
    {"exec_paused_r", "exec `true` on a sandbox paused by this process (resumes first)"},
    {"resume_on_call_r", "resume-on-call (the two above, per round)"},
    {"resume_r", "Sandbox::Resume (paused by this process)"},
    {"engine_unpause", "Docker unpause alone (Engine API)"},
    {"runsc_resume", "runsc resume alone (the floor: `runsc --root R resume ID`)"},
    {"inspect", "one Docker inspect"},
    {"pause_r", "Sandbox::Pause"},
    {"engine_pause", "Docker pause alone (Engine API)"},
    {"runsc_pause", "runsc pause alone"},
};

// Prints the resume table: median, p95, min, max of each of kResumeRows in `ms`, then `cpu`.
void PrintResumeTable(std::map<std::string, std::vector<double>>& ms, const std::string& cpu,
                      const std::string& load_start) {
  std::printf(
      "\n### Resume: where the time goes (1-minute load %s at the start, %s at the end; "
      "a shared machine)\n\n| operation | median | p95 | min | max |\n|---|---|---|---|---|\n",
      load_start.c_str(), LoadAverage().c_str());
  for (const auto& row : kResumeRows) {
    std::vector<double> v = ms[row.first];
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    const double p95 = v[std::min(v.size() - 1, (v.size() * 95 + 99) / 100 - 1)];
    std::printf("| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms |\n", row.second, v[v.size() / 2],
                p95, v.front(), v.back());
  }
  std::printf("\n%s\n", cpu.c_str());
}

// Lifecycle verbs on one sandbox (docs/lifecycle.md): pause and resume (Sandbox::Pause/Resume,
// Docker's pause/unpause), resume-on-call (an exec on a paused sandbox, minus a plain exec of
// the same round) and a live resize (Sandbox::Update: memory, then cpus; cgroup writes); then
// snapshots and forks of 4 (SnapshotForkRounds), in one table.
void LifecycleSuite(const std::string& image, int rounds, int snapshot_rounds, int fork_rounds) {
  const std::string load_start = LoadAverage();
  SandboxSpec spec;
  spec.image = image;
  spec.limits.cpus = 1;
  spec.limits.memory = "512m";
  spec.limits.disk = "none";
  spec.labels["bench.run"] = "1";
  spec.platform = g_platform;
  auto sb = Must(CreateSandbox(spec), "create");
  Must(sb->Exec({"true"}), "first exec");
  std::map<std::string, std::vector<double>> ms;
  auto timed = [&](const char* key, const std::function<void()>& f) {
    auto t0 = Clock::now();
    f();
    ms[key].push_back(Since(t0) * 1000);
  };
  for (int i = 0; i < rounds; ++i) {
    timed("pause", [&] { Must(sb->Pause(), "pause"); });
    timed("resume", [&] { Must(sb->Resume(), "resume"); });
    timed("exec", [&] { Must(sb->Exec({"true"}), "exec"); });
    Must(sb->Pause(), "pause");
    timed("exec_paused", [&] { Must(sb->Exec({"true"}), "exec on a paused sandbox"); });
    ms["resume_on_call"].push_back(ms["exec_paused"].back() - ms["exec"].back());
    timed("update_memory",
          [&] { Must(sb->Update({.memory = i % 2 == 0 ? "768m" : "512m"}), "update memory"); });
    timed("update_cpus",
          [&] { Must(sb->Update({.cpus = i % 2 == 0 ? 0.5 : 1.0}), "update cpus"); });
  }
  const std::string cpu = ResumeFloorRounds(*sb, rounds, 5, ms);
  Must(sb->Stop(), "stop");
  PrintResumeTable(ms, cpu, load_start);
  const std::string sizes = SnapshotForkRounds(image, snapshot_rounds, fork_rounds, ms);
  auto stats = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::array<double, 3>{v[v.size() / 2], v.front(), v.back()};
  };
  std::printf(
      "\n### Lifecycle (1 cpu, 512m; %d rounds; snapshots %d rounds, forks of 4 %d rounds)\n\n",
      rounds, snapshot_rounds, fork_rounds);
  std::printf("| operation | median | min | max |\n|---|---|---|---|\n");
  for (const auto& [key, label] : std::vector<std::pair<std::string, std::string>>{
           {"pause", "pause"},
           {"resume", "resume"},
           {"exec", "exec `true` (running)"},
           {"exec_paused", "exec `true` on a paused sandbox (resumes first)"},
           {"resume_on_call", "resume-on-call (the two above, per round)"},
           {"update_memory", "update --memory (512m <-> 768m)"},
           {"update_cpus", "update --cpus (1 <-> 0.5)"},
           {"snapshot", "snapshot (base image + 200 MB of changes, without /workspace)"},
           {"fork", "fork --count 4 (snapshot with /workspace, then 4 creates)"},
           {"fork_snapshot", "... of which the snapshot"},
           {"fork_creates", "... of which the 4 creates (each copies /workspace)"}}) {
    if (ms[key].empty()) continue;
    auto [med, lo, hi] = stats(ms[key]);
    std::printf("| %s | %.1f ms | %.1f ms | %.1f ms |\n", label.c_str(), med, lo, hi);
  }
  std::printf("\n%s\n", sizes.c_str());
}

void DesktopSuite(int runs) {
  auto spec = BenchSpec("");
  spec.gui = true;
  spec.network = "none";
  spec.limits.cpus = 2;
  spec.limits.memory = "2g";
  std::vector<double> ready, shot;
  for (int i = 0; i <= runs; ++i) {
    std::fprintf(stderr, "desktop: create %d/%d ...\n", i, runs);
    auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<Sandbox> sb = Must(CreateSandbox(spec), "create a desktop");
    auto t1 = std::chrono::steady_clock::now();
    (void)Must(desktop::Screenshot(*client::WrapSandbox(sb)), "screenshot");
    auto t2 = std::chrono::steady_clock::now();
    if (i > 0) {
      ready.push_back(std::chrono::duration<double>(t1 - t0).count());
      shot.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    Must(sb->Stop(), "stop");
  }
  std::sort(ready.begin(), ready.end());
  std::sort(shot.begin(), shot.end());
  std::printf("\n### Desktop boot (agvisor/desktop, network none, 2 cpus, 2g; %d runs)\n\n", runs);
  std::printf("| operation | median | min | max |\n|---|---|---|---|\n");
  std::printf("| create --gui to ready | %.2f s | %.2f s | %.2f s |\n", ready[ready.size() / 2],
              ready.front(), ready.back());
  std::printf("| screenshot (1280x800 PNG) | %.0f ms | %.0f ms | %.0f ms |\n",
              shot[shot.size() / 2], shot.front(), shot.back());
}

}  // namespace agvisor

int main(int argc, char** argv) {
  using namespace agvisor;
  std::string seed = std::getenv("AGVISOR_SEED_PATH") ? std::getenv("AGVISOR_SEED_PATH") : "";
  std::string image = "agvisor/base:latest";
  int runs = 50, creates = 20, sandboxes = 10, execs = 200, acquires = 50, colds = 10, settle = 5;
  int idle_seconds = 20, snapshot_rounds = 3, fork_rounds = 2;
  int tails_loops = 30, tails_seconds = 60;
  bool tails_local = false;
  DensityOptions density;
  std::vector<int> gates = {2, 4, 8, 0};
  std::vector<std::string> suites;
  const char* usage =
      "usage: agvisor_bench [--seed DIR] [--image IMG] [--runs N] [--platform systrap|ptrace] "
      "[--suite "
      "basic|create|pool|concurrency|memory|idle|desktop|lifecycle|all|egress|kube|tails|e2b|"
      "density]... "
      "[--tails-loops N] [--tails-seconds N] [--tails-door agvisord|local] "
      "[--idle-seconds "
      "N] [--creates N] [--gates K,K,...] [--exec-sandboxes "
      "S] "
      "[--execs N] "
      "[--acquires N] [--colds N] [--snapshot-rounds N] [--fork-rounds N] [--count N] [--parallel "
      "P] "
      " (see bench/README.md)";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    auto count = [&]() { return std::max(1, std::atoi(next().c_str())); };
    if (a == "--seed") {
      seed = next();
    } else if (a == "--image") {
      image = next();
    } else if (a == "--platform") {
      g_platform = next();
      if (auto v = ValidatePlatform(g_platform); !v.ok() || g_platform.empty()) {
        Die("--platform " + g_platform + ": expected systrap or ptrace");
      }
    } else if (a == "--idle-seconds") {
      idle_seconds = count();
    } else if (a == "--tails-loops") {
      tails_loops = count();
    } else if (a == "--tails-seconds") {
      tails_seconds = count();
    } else if (a == "--tails-door") {
      const std::string door = next();
      if (door != "agvisord" && door != "local")
        Die("--tails-door " + door + ": agvisord or local");
      tails_local = door == "local";
    } else if (a == "--runs") {
      runs = count();
    } else if (a == "--suite") {
      std::string v = next();
      if (v != "basic" && v != "create" && v != "pool" && v != "concurrency" && v != "memory" &&
          v != "idle" && v != "desktop" && v != "lifecycle" && v != "all" && v != "egress" &&
          v != "kube" && v != "tails" && v != "e2b" && v != "density") {
        Die("--suite " + v +
            ": expected basic, create, pool, concurrency, memory, idle, desktop, lifecycle, all, "
            "egress, kube, tails, e2b or density");
      }
      suites.push_back(v);
    } else if (a == "--creates") {
      creates = count();
    } else if (a == "--gates") {
      gates.clear();
      std::stringstream list(next());
      std::string k;
      while (std::getline(list, k, ',')) gates.push_back(std::max(0, std::atoi(k.c_str())));
    } else if (a == "--exec-sandboxes") {
      sandboxes = count();
    } else if (a == "--execs") {
      execs = count();
    } else if (a == "--acquires") {
      acquires = count();
    } else if (a == "--colds") {
      colds = count();
    } else if (a == "--snapshot-rounds") {
      snapshot_rounds = count();
    } else if (a == "--fork-rounds") {
      fork_rounds = count();
    } else if (a == "--count") {
      density.count = count();
    } else if (a == "--parallel") {
      density.parallel = count();
    } else {
      Die(usage);
    }
  }
  if (suites.empty()) suites = {"basic"};
  auto want = [&](const char* name) {
    return std::find(suites.begin(), suites.end(), name) != suites.end() ||
           std::find(suites.begin(), suites.end(), "all") != suites.end();
  };
  if (seed.empty()) {
    std::fprintf(stderr, "no --seed / AGVISOR_SEED_PATH: the seed column is skipped\n");
  }
  if (want("basic")) BasicSuite(seed, image, runs);
  if (want("create")) CreateSuite(seed, image, std::max(1, colds / 5));
  if (want("pool")) PoolSuite(seed, image, acquires, colds);
  if (want("concurrency")) ConcurrencySuite(seed, image, creates, gates, sandboxes, execs);
  if (want("memory")) MemorySuite(seed, image, settle);
  if (want("idle")) IdleSuite(image, idle_seconds, settle);
  if (want("desktop")) DesktopSuite(5);
  if (want("lifecycle")) LifecycleSuite(image, 10, snapshot_rounds, fork_rounds);
  // Not part of "all": it starts an agvisord that serves every egress network on the host.
  if (std::find(suites.begin(), suites.end(), "egress") != suites.end()) {
    EgressSuite(image, kTransferRounds, std::max(runs, 200));
  }
  // Not part of "all": it needs node and web/'s npm tree (the e2b SDK).
  if (std::find(suites.begin(), suites.end(), "e2b") != suites.end()) E2bSuite(runs);
  // Not part of "all": it starts the Kubernetes API test double (tests/kube/).
  if (std::find(suites.begin(), suites.end(), "kube") != suites.end()) {
    KubeSuite(image, colds, runs, std::min(acquires, 10));
  }
  // Not part of "all": it saturates the host's cores for a minute per platform.
  if (std::find(suites.begin(), suites.end(), "tails") != suites.end()) {
    TailsSuite(BenchSpec(image),
               g_platform.empty() ? std::vector<std::string>{"systrap", "ptrace"}
                                  : std::vector<std::string>{g_platform},
               sandboxes, tails_loops, tails_seconds, tails_local);
  }
  // Not part of "all": it makes --count sandboxes at once (heavy runs take the host's lock).
  if (std::find(suites.begin(), suites.end(), "density") != suites.end()) {
    density.image = image;
    density.platform = g_platform;
    density.idle_seconds = idle_seconds;
    density.settle = std::max(settle, 2);
    density.exec_samples = runs;
    return DensitySuite(density);
  }
  return 0;
}
