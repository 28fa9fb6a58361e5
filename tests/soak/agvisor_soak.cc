// agvisor_soak: create/exec/destroy cycles against the real dockerd + runsc, with clients killed
// at random moments, then a count of everything that leaked (docs/reliability.md, "soak").
//
// Each cycle is one of three clients, chosen at random:
//   library  Sandbox::Create, Exec, Stop/Delete in this process; a "killed" one is abandoned
//            (its handle dropped, nothing stopped) after the create or after the exec;
//   run      `agvisor run ... -- sh -c 'echo TOKEN'` as a child process, SIGKILLed at a random
//            moment when chosen (mid-create, mid-start, mid-exec or mid-removal);
//   steps    `agvisor create`, `agvisor exec`, `agvisor rm` as three child processes; the create
//            or the exec is SIGKILLed at a random moment when chosen.
// Some cycles are named (a /workspace volume; the cycle erases it), some have network none. Every
// sandbox gets a short lifetime, so whatever a killed client leaves running ends by itself.
// Every container and volume carries the label soak.run=<run id>: only this run is counted, other
// people's sandboxes on the host are not.
//
// At the end: wait for the lifetimes to pass, then count what is left of this run (containers,
// volumes, runsc/containerd-shim processes of its containers, runtime processes Docker no longer
// knows), host MemAvailable, dockerd's and this process's resident memory before and after. Exits
// 1 on any leak or failed cycle, 2 on bad arguments. Everything of the run is removed at the end.
// SIGINT or SIGTERM stops it early: no new cycle starts, and what ran is counted as above.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agvisor/base/subprocess.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/testing/kept_runtime.h"

namespace agvisor::soak {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Options {
  int cycles = 30;
  int parallel = 2;
  double kill_fraction = 0.3;
  std::uint64_t seed = 0;
  int lifetime = 30;  // seconds, every sandbox
  std::string cli = AGVISOR_CLI_BINARY;
  double max_dockerd_growth_mib = 256;
  double max_mem_drop_mib = 2048;
  double max_self_growth_mib = 64;
};

// Set by SIGINT/SIGTERM: no new cycles start; the ones running finish, then the count runs.
std::atomic<bool> g_stop{false};
extern "C" void OnStopSignal(int) { g_stop = true; }

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- host measurements
// ---------------------------------------------------------------------------

// A "Key:  N kB" field of a /proc status-like file, in KiB; -1 when missing.
long ProcField(const std::string& file, const std::string& key) {
  std::ifstream f(file);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  }
  return -1;
}

std::string ReadWhole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct RuntimeProcess {
  int pid = 0;
  std::string kind;          // "containerd-shim", "runsc-sandbox", "runsc-gofer", "runsc"...
  std::string container_id;  // the 64-hex id in its command line, or ""
};

// containerd-shim and runsc processes on the host, with the container each one serves.
std::vector<RuntimeProcess> RuntimeProcesses() {
  static const std::regex kId("[0-9a-f]{64}");
  std::vector<RuntimeProcess> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::string cmd = ReadWhole(std::string("/proc/") + e->d_name + "/cmdline");
    if (cmd.empty()) continue;
    std::string argv0 = cmd.substr(0, cmd.find('\0'));
    argv0 = argv0.substr(argv0.rfind('/') + 1);
    std::string kind;
    if (argv0.rfind("containerd-shim", 0) == 0) {
      kind = "containerd-shim";
    } else if (argv0.rfind("runsc", 0) == 0) {
      kind = argv0;
    } else {
      continue;
    }
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    std::smatch m;
    RuntimeProcess p{std::atoi(e->d_name), kind, ""};
    if (std::regex_search(cmd, m, kId)) p.container_id = m.str();
    out.push_back(std::move(p));
  }
  closedir(d);
  return out;
}

// Resident memory of the first process whose name is `comm`, in KiB; -1 when none.
long RssOfProcessNamed(const std::string& comm) {
  DIR* d = opendir("/proc");
  if (!d) return -1;
  long rss = -1;
  while (dirent* e = readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::string dir = std::string("/proc/") + e->d_name;
    std::string c = ReadWhole(dir + "/comm");
    if (c == comm + "\n") {
      rss = ProcField(dir + "/status", "VmRSS");
      break;
    }
  }
  closedir(d);
  return rss;
}

struct HostSample {
  long mem_available_kib = -1;
  long dockerd_rss_kib = -1;
  long containerd_rss_kib = -1;
  long self_rss_kib = -1;
  std::map<std::string, int> runtime_counts;  // kind -> processes, host-wide
  std::set<std::string> orphan_ids;           // runtime processes of containers Docker lacks
};

HostSample Sample(docker::Client& docker) {
  HostSample s;
  s.mem_available_kib = ProcField("/proc/meminfo", "MemAvailable");
  s.dockerd_rss_kib = RssOfProcessNamed("dockerd");
  s.containerd_rss_kib = RssOfProcessNamed("containerd");
  s.self_rss_kib = ProcField("/proc/self/status", "VmRSS");
  std::set<std::string> known;
  auto all = docker.ListContainers(true, {});
  for (const auto& c : all.ok() ? *all : std::vector<docker::ContainerSummary>{})
    known.insert(c.id);
  for (const auto& p : RuntimeProcesses()) {
    ++s.runtime_counts[p.kind];
    // Listed after the processes were read: a container made in between is known, not orphan.
    if (all.ok() && !p.container_id.empty() && !known.count(p.container_id))
      s.orphan_ids.insert(p.container_id);
  }
  return s;
}

std::string Mib(long kib) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", kib / 1024.0);
  return b;
}

// ---- clients ---------------------------------------------------------------------------------

std::string ReadAll(UniqueFd& fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

struct ClientRun {
  bool killed = false;  // SIGKILLed by the soak before it finished
  ExitStatus status;
  std::string out, err;
  std::string error;  // the soak could not run it, or it hung
};

// Runs the CLI with `args`; SIGKILLs it after `kill_after` when it is still running then.
ClientRun RunClient(const Options& opt, std::vector<std::string> args,
                    std::optional<std::chrono::milliseconds> kill_after) {
  ClientRun r;
  SubprocessOptions o;
  o.argv = {opt.cli};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.pipe_stdout = true;
  o.pipe_stderr = true;
  auto p = Subprocess::Spawn(o);
  if (!p.ok()) {
    r.error = p.error().ToString();
    return r;
  }
  // Output is a line or two: it fits the pipes, so it is read after the exit.
  auto limit = kill_after.value_or(std::chrono::milliseconds(180000));
  auto st = p->WaitFor(limit);
  if (!st.ok()) {
    (void)p->Kill(SIGKILL);
    st = p->Wait();
    if (kill_after) {
      r.killed = true;
    } else {
      r.error = "client hung for 180 s";
    }
  }
  if (st.ok()) r.status = *st;
  r.out = ReadAll(p->stdout_fd());
  r.err = ReadAll(p->stderr_fd());
  return r;
}

enum class Kind { kLibrary, kRun, kSteps };
const char* KindName(Kind k) {
  switch (k) {
    case Kind::kLibrary:
      return "library";
    case Kind::kRun:
      return "run";
    case Kind::kSteps:
      return "steps";
  }
  return "?";
}

struct Plan {
  Kind kind = Kind::kLibrary;
  bool named = false;
  bool network_none = false;
  bool kill = false;
  int kill_phase = 0;  // library: 0 after create, 1 after exec; steps: 0 create, 1 exec
  std::chrono::milliseconds kill_after{0};
  std::string name;   // when named
  std::string token;  // what the command must print
};

// The plan of cycle `i` depends only on the seed and i, not on the order threads take cycles.
Plan MakePlan(const Options& opt, const std::string& run_id, int i) {
  std::mt19937_64 rng(opt.seed * 1000003u + static_cast<std::uint64_t>(i));
  auto coin = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto ms = [&](int lo, int hi) {
    return std::chrono::milliseconds(std::uniform_int_distribution<int>(lo, hi)(rng));
  };
  Plan p;
  p.kind = static_cast<Kind>(std::uniform_int_distribution<int>(0, 2)(rng));
  p.named = coin(0.3);
  p.network_none = coin(0.3);
  p.kill = coin(opt.kill_fraction);
  p.kill_phase = coin(0.5) ? 1 : 0;
  // Moments spread over what each client takes here (run ~1.5 s, create ~0.7 s, exec ~0.1 s,
  // longer under load); a client that finishes first is not killed.
  if (p.kind == Kind::kRun) p.kill_after = ms(0, 2000);
  if (p.kind == Kind::kSteps) p.kill_after = p.kill_phase == 0 ? ms(0, 1200) : ms(0, 300);
  if (p.named) p.name = "soak-" + run_id + "-" + std::to_string(i);
  p.token = "soak-" + std::to_string(i) + "-" + std::to_string(rng() % 1000000);
  return p;
}

struct Outcome {
  bool kill_planned = false;
  bool killed = false;
  std::string failure;  // "" = fine (or killed)
  double seconds = 0;
};

class Soak {
 public:
  Soak(Options opt, std::string run_id, std::shared_ptr<docker::Client> docker)
      : opt_(std::move(opt)), run_id_(std::move(run_id)), docker_(std::move(docker)) {}

  std::string LabelFilter() const { return "soak.run=" + run_id_; }

  std::vector<std::string> SpecArgs(const Plan& p) const {
    std::vector<std::string> a = {"--label",    LabelFilter(),
                                  "--lifetime", std::to_string(opt_.lifetime),
                                  "--disk",     "none",
                                  "--memory",   "256m",
                                  "--cpus",     "1"};
    if (p.named) a.insert(a.end(), {"--name", p.name});
    if (p.network_none) a.insert(a.end(), {"--network", "none"});
    return a;
  }

  Outcome RunLibrary(const Plan& p) {
    Outcome o;
    SandboxSpec s;
    s.limits.cpus = 1;
    s.limits.memory = "256m";
    s.limits.disk = "none";
    s.lifetime = opt_.lifetime;
    s.labels["soak.run"] = run_id_;
    if (p.named) s.name = p.name;
    if (p.network_none) s.network = "none";
    auto sb = CreateSandbox(s);
    if (!sb.ok()) {
      o.failure = "create: " + sb.error().ToString();
      return o;
    }
    if (auto info = (*sb)->Info(); info.ok()) NoteContainer(info->container_id);
    if (p.kill && p.kill_phase == 0) {
      o.killed = true;  // abandoned: the handle goes, the sandbox is left to its lifetime
      return o;
    }
    auto r = (*sb)->Exec({"sh", "-c", "echo " + p.token});
    if (!r.ok()) {
      o.failure = "exec: " + r.error().ToString();
    } else if (r->out != p.token + "\n" || r->exit_code != 0) {
      o.failure = "exec printed '" + r->out + "' (exit " + std::to_string(r->exit_code) + ")";
    }
    if (p.kill) {
      o.killed = true;
      return o;
    }
    auto gone = p.named ? (*sb)->Delete() : (*sb)->Stop();
    if (!gone.ok() && o.failure.empty()) o.failure = "destroy: " + gone.error().ToString();
    return o;
  }

  Outcome RunCli(const Plan& p) {
    Outcome o;
    auto args = SpecArgs(p);
    args.insert(args.begin(), "run");
    args.insert(args.end(), {"--", "sh", "-c", "echo " + p.token});
    auto r = RunClient(opt_, args, p.kill ? std::optional(p.kill_after) : std::nullopt);
    if (r.killed) {
      o.killed = true;
      return o;
    }
    if (!r.error.empty()) {
      o.failure = "run: " + r.error;
    } else if (!r.status.success() || r.out != p.token + "\n") {
      o.failure = "run: " + r.status.ToString() + ", printed '" + r.out + "', stderr: " + r.err;
    }
    if (p.named) Erase(p.name, o);  // `run --name` keeps /workspace: the cycle erases it
    return o;
  }

  Outcome RunSteps(const Plan& p) {
    Outcome o;
    auto args = SpecArgs(p);
    args.insert(args.begin(), "create");
    auto kill_at = [&](int phase) {
      return p.kill && p.kill_phase == phase ? std::optional(p.kill_after) : std::nullopt;
    };
    auto c = RunClient(opt_, args, kill_at(0));
    if (c.killed) {
      o.killed = true;
      return o;
    }
    std::string name = c.out.substr(0, c.out.find('\n'));
    if (!c.error.empty() || !c.status.success() || name.empty()) {
      o.failure = "create: " + c.error + c.status.ToString() + ": " + c.err;
      return o;
    }
    auto e = RunClient(opt_, {"exec", name, "--", "sh", "-c", "echo " + p.token}, kill_at(1));
    if (e.killed) {
      o.killed = true;  // the sandbox runs on until its lifetime (a named one keeps its volume)
      return o;
    }
    if (!e.error.empty() || !e.status.success() || e.out != p.token + "\n")
      o.failure = "exec: " + e.error + e.status.ToString() + ", printed '" + e.out + "': " + e.err;
    Erase(name, o);
    return o;
  }

  // `agvisor rm NAME`: the container and, for a named sandbox, its volume.
  void Erase(const std::string& name, Outcome& o) {
    auto rm = RunClient(opt_, {"rm", name}, std::nullopt);
    if ((!rm.error.empty() || !rm.status.success()) && o.failure.empty())
      o.failure = "rm " + name + ": " + rm.error + rm.status.ToString() + ": " + rm.err;
  }

  Outcome RunCycle(int i) {
    Plan p = MakePlan(opt_, run_id_, i);
    auto t0 = Clock::now();
    Outcome o;
    switch (p.kind) {
      case Kind::kLibrary:
        o = RunLibrary(p);
        break;
      case Kind::kRun:
        o = RunCli(p);
        break;
      case Kind::kSteps:
        o = RunSteps(p);
        break;
    }
    o.seconds = Seconds(Clock::now() - t0);
    o.kill_planned = p.kill;
    if (!o.failure.empty()) o.failure = std::string(KindName(p.kind)) + ": " + o.failure;
    if (p.named) {
      std::lock_guard<std::mutex> l(mu_);
      named_.insert(p.name);
    }
    return o;
  }

  void NoteContainer(const std::string& id) {
    std::lock_guard<std::mutex> l(mu_);
    ids_.insert(id);
  }

  // Every container of this run seen so far (a poller adds those the CLI made).
  void PollIds() {
    auto list = docker_->ListContainers(true, {LabelFilter()});
    if (!list.ok()) return;
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& c : *list) ids_.insert(c.id);
  }

  int Run() {
    HostSample before = Sample(*docker_);
    std::printf("soak %s: %d cycles, parallel %d, kill fraction %.2f, seed %llu, lifetime %d s\n",
                run_id_.c_str(), opt_.cycles, opt_.parallel, opt_.kill_fraction,
                static_cast<unsigned long long>(opt_.seed), opt_.lifetime);
    std::fflush(stdout);
    std::atomic<int> next{0};
    std::atomic<bool> done{false};
    std::vector<Outcome> outcomes(static_cast<size_t>(opt_.cycles));
    std::vector<bool> ran(static_cast<size_t>(opt_.cycles), false);
    long self_rss_warm = -1;
    std::mutex progress_mu;
    int finished = 0;
    auto t0 = Clock::now();
    std::thread poller([&] {
      while (!done) {
        PollIds();
        std::this_thread::sleep_for(300ms);
      }
    });
    auto worker = [&] {
      for (int i; !g_stop && (i = next++) < opt_.cycles;) {
        Outcome o = RunCycle(i);
        std::lock_guard<std::mutex> l(progress_mu);
        outcomes[static_cast<size_t>(i)] = std::move(o);
        ran[static_cast<size_t>(i)] = true;
        ++finished;
        // This process's memory once its pools and caches are warm, to compare with the end.
        if (finished == std::max(1, opt_.cycles / 10))
          self_rss_warm = ProcField("/proc/self/status", "VmRSS");
        if (finished % std::max(1, opt_.cycles / 20) == 0 || finished == opt_.cycles) {
          std::printf("  %d/%d cycles, %.0f s\n", finished, opt_.cycles,
                      Seconds(Clock::now() - t0));
          std::fflush(stdout);
        }
      }
    };
    std::vector<std::thread> workers;
    for (int w = 0; w < opt_.parallel; ++w) workers.emplace_back(worker);
    for (auto& w : workers) w.join();
    const double cycles_s = Seconds(Clock::now() - t0);
    const int ran_cycles = finished;
    if (g_stop)
      std::printf("interrupted: %d of %d cycles ran; counting what they left\n", ran_cycles,
                  opt_.cycles);
    const long self_rss_end = ProcField("/proc/self/status", "VmRSS");

    // Whatever killed clients left running ends by its lifetime (and Docker removes it).
    std::printf("cycles done in %.0f s; waiting for lifetimes (%d s) to pass\n", cycles_s,
                opt_.lifetime);
    std::fflush(stdout);
    auto wait_start = Clock::now();
    auto deadline = wait_start + std::chrono::seconds(opt_.lifetime + 60);
    std::vector<docker::ContainerSummary> left;
    while (true) {
      PollIds();
      auto list = docker_->ListContainers(true, {LabelFilter()});
      if (list.ok()) left = *list;
      bool only_created =
          std::all_of(left.begin(), left.end(), [](const auto& c) { return c.state == "created"; });
      if ((list.ok() && only_created) || Clock::now() > deadline) break;
      std::this_thread::sleep_for(1s);
    }
    done = true;
    poller.join();
    const double drained_s = Seconds(Clock::now() - wait_start);

    // Count.
    int failures = 0, killed = 0, ok = 0, planned = 0;
    std::vector<double> times;
    std::vector<std::string> first_failures;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      if (!ran[i]) continue;
      const Outcome& o = outcomes[i];
      planned += o.kill_planned;
      if (o.killed) {
        ++killed;
      } else if (!o.failure.empty()) {
        ++failures;
        if (first_failures.size() < 5) first_failures.push_back(o.failure);
      } else {
        ++ok;
        times.push_back(o.seconds);
      }
    }
    std::sort(times.begin(), times.end());
    auto pct = [&](double q) {
      return times.empty() ? 0.0 : times[static_cast<size_t>(q * (times.size() - 1))];
    };
    std::vector<std::string> leaks;
    int never_started = 0, not_listed = 0;
    auto listed = ListSandboxes("");
    for (const auto& c : left) {
      if (c.state != "created") {
        leaks.push_back("container " + c.names.at(0) + " still " + c.state + " after its lifetime");
        continue;
      }
      // A client killed between create and start: no agent runs there, so no lifetime; list
      // shows it, and the next Sandbox::Create on the host sweeps it after 2 minutes.
      ++never_started;
      bool seen = listed.ok() && std::any_of(listed->begin(), listed->end(),
                                             [&](const auto& i) { return i.container_id == c.id; });
      if (!seen) {
        ++not_listed;
        leaks.push_back("never-started container " + c.names.at(0) + " not shown by list");
      }
      (void)docker_->RemoveContainer(c.id, true, true);
    }
    // Named sandboxes whose client died keep /workspace by design: a user erases them.
    int named_kept = 0;
    for (const auto& name : named_) {
      if (RemoveSandbox(ContainerNameFor(name), "", true).ok()) ++named_kept;
    }
    auto vols = docker_->ListVolumes({LabelFilter()});
    auto conts = docker_->ListContainers(true, {LabelFilter()});
    if (vols.ok()) {
      for (const auto& v : *vols) leaks.push_back("volume " + v.name + " left");
    }
    if (conts.ok()) {
      for (const auto& c : *conts) leaks.push_back("container " + c.names.at(0) + " left");
    }

    // Runtime processes exit shortly after their container goes: give them a moment.
    std::vector<RuntimeProcess> ours;
    HostSample after;
    for (int tries = 0; tries < 30; ++tries) {
      ours.clear();
      for (const auto& p : RuntimeProcesses())
        if (ids_.count(p.container_id)) ours.push_back(p);
      after = Sample(*docker_);
      std::set<std::string> new_orphans;
      for (const auto& id : after.orphan_ids)
        if (!before.orphan_ids.count(id)) new_orphans.insert(id);
      if (ours.empty() && new_orphans.empty()) break;
      std::this_thread::sleep_for(1s);
    }
    for (const auto& p : ours)
      leaks.push_back(p.kind + " pid " + std::to_string(p.pid) + " of container " +
                      p.container_id.substr(0, 12) + " still running");
    std::vector<std::string> foreign_orphans;
    for (const auto& id : after.orphan_ids)
      if (!before.orphan_ids.count(id) && !ids_.count(id)) foreign_orphans.push_back(id);

    const double dockerd_growth = (after.dockerd_rss_kib - before.dockerd_rss_kib) / 1024.0;
    const double mem_drop = (before.mem_available_kib - after.mem_available_kib) / 1024.0;
    const double self_growth = self_rss_warm < 0 ? 0 : (self_rss_end - self_rss_warm) / 1024.0;
    if (dockerd_growth > opt_.max_dockerd_growth_mib)
      leaks.push_back("dockerd grew by " + Mib(after.dockerd_rss_kib - before.dockerd_rss_kib));
    if (mem_drop > opt_.max_mem_drop_mib)
      leaks.push_back("host MemAvailable fell by " +
                      Mib(before.mem_available_kib - after.mem_available_kib));
    if (self_growth > opt_.max_self_growth_mib)
      leaks.push_back("this client grew by " + Mib(self_rss_end - self_rss_warm));

    // ---- summary ----
    std::printf("\nsoak %s summary\n", run_id_.c_str());
    std::printf("  cycles            %d: %d completed and checked, %d clients killed, %d failed\n",
                ran_cycles, ok, killed, failures);
    std::printf(
        "  kills             %d of %d planned landed (the others' clients finished first)\n",
        killed, planned);
    std::printf("  time              %.0f s of cycles (%.2f cycles/s), %.0f s for lifetimes\n",
                cycles_s, ran_cycles / cycles_s, drained_s);
    std::printf("  cycle time        median %.2f s, p95 %.2f s, max %.2f s (completed cycles)\n",
                pct(0.5), pct(0.95), times.empty() ? 0.0 : times.back());
    std::printf("  containers seen   %zu\n", ids_.size());
    std::printf("  never started     %d (killed between create and start; %d not listed)\n",
                never_started, not_listed);
    std::printf("  named kept        %d volumes of killed named clients, erased with rm\n",
                named_kept);
    std::printf("  left after that   %zu containers, %zu volumes\n",
                conts.ok() ? conts->size() : 0u, vols.ok() ? vols->size() : 0u);
    std::printf("  runtime processes %zu of this run's containers still running\n", ours.size());
    for (const auto& [kind, n] : after.runtime_counts) {
      int b = before.runtime_counts.count(kind) ? before.runtime_counts.at(kind) : 0;
      std::printf("    host-wide %-17s %d before, %d after\n", kind.c_str(), b, n);
    }
    std::printf(
        "  orphans           %zu before, %zu after (runtime processes of containers "
        "Docker no longer has; %zu new, not of this run)\n",
        before.orphan_ids.size(), after.orphan_ids.size(), foreign_orphans.size());
    std::printf("  host MemAvailable %s before, %s after (%+.1f MiB)\n",
                Mib(before.mem_available_kib).c_str(), Mib(after.mem_available_kib).c_str(),
                -mem_drop);
    std::printf("  dockerd RSS       %s before, %s after (%+.1f MiB)\n",
                Mib(before.dockerd_rss_kib).c_str(), Mib(after.dockerd_rss_kib).c_str(),
                dockerd_growth);
    std::printf("  containerd RSS    %s before, %s after\n", Mib(before.containerd_rss_kib).c_str(),
                Mib(after.containerd_rss_kib).c_str());
    std::printf("  this client RSS   %s after %d cycles, %s at the end (%+.1f MiB)\n",
                Mib(self_rss_warm).c_str(), std::max(1, opt_.cycles / 10),
                Mib(self_rss_end).c_str(), self_growth);
    for (const auto& f : first_failures) std::printf("  FAILED CYCLE  %s\n", f.c_str());
    for (const auto& l : leaks) std::printf("  LEAK  %s\n", l.c_str());
    bool pass = failures == 0 && leaks.empty();
    std::printf("%s\n",
                pass ? "PASS: nothing leaked, every checked cycle printed its token" : "FAIL");
    Cleanup();
    return pass ? 0 : 1;
  }

  // Removes whatever of this run is still there (after a failure too).
  void Cleanup() {
    if (auto list = docker_->ListContainers(true, {LabelFilter()}); list.ok())
      for (const auto& c : *list) (void)docker_->RemoveContainer(c.id, true, true);
    if (auto vols = docker_->ListVolumes({LabelFilter()}); vols.ok())
      for (const auto& v : *vols) (void)docker_->RemoveVolume(v.name, true);
  }

 private:
  Options opt_;
  std::string run_id_;
  std::shared_ptr<docker::Client> docker_;
  std::mutex mu_;
  std::set<std::string> ids_;
  std::set<std::string> named_;
};

int Main(int argc, char** argv) {
  Options opt;
  opt.seed = std::random_device{}();
  CLI::App app{
      "agvisor_soak: create/exec/destroy cycles against the real dockerd + runsc, with clients\n"
      "killed at random moments (SIGKILL of `agvisor run/create/exec`, abandoned library\n"
      "handles), then a count of leaks: this run's containers and volumes, runsc and\n"
      "containerd-shim processes, host MemAvailable, dockerd RSS. Exits 1 on a leak or a\n"
      "failed cycle. Everything it makes is labelled soak.run=<run id> and removed at the end.\n"
      "The full soak: agvisor_soak --cycles 1000 --parallel 3 (docs/reliability.md)."};
  app.add_option("--cycles", opt.cycles, "create/exec/destroy cycles")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--parallel", opt.parallel, "cycles at once")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--kill-fraction", opt.kill_fraction,
                 "share of cycles whose client is killed (or abandoned), 0 to 1")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--seed", opt.seed, "seed of the random plan (default: random, printed)");
  app.add_option("--lifetime", opt.lifetime,
                 "seconds every sandbox lives at most (killed clients' sandboxes end by it; "
                 "must exceed a cycle's time)")
      ->check(CLI::Range(5, 3600))
      ->capture_default_str();
  app.add_option("--cli", opt.cli, "the agvisor binary the CLI cycles run")
      ->check(CLI::ExistingFile)
      ->capture_default_str();
  app.add_option("--max-dockerd-growth-mib", opt.max_dockerd_growth_mib,
                 "dockerd RSS growth counted as a leak")
      ->capture_default_str();
  app.add_option("--max-mem-drop-mib", opt.max_mem_drop_mib,
                 "host MemAvailable drop counted as a leak (other work on the host moves it too)")
      ->capture_default_str();
  app.add_option("--max-self-growth-mib", opt.max_self_growth_mib,
                 "growth of this process's RSS after the first tenth of the cycles counted as a "
                 "leak (of the library)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto docker = ConnectDockerHost("");
  if (!docker.ok()) {
    std::fprintf(stderr, "agvisor_soak: %s (is dockerd running? scripts/setup-host --no-build)\n",
                 docker.error().ToString().c_str());
    return 1;
  }
  char id[16];
  std::snprintf(id, sizeof id, "s%06x", std::random_device{}() & 0xffffff);
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  Soak soak(opt, id, *docker);
  return soak.Run();
}

}  // namespace
}  // namespace agvisor::soak

int main(int argc, char** argv) { return agvisor::soak::Main(argc, argv); }
