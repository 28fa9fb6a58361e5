// The egress suite (egress_suite.h). What runs where:
//   - a network namespace with a veth pair (203.0.113.1 on the host, 203.0.113.2 inside) where
//     tests/integration/data/fake_internet.py answers DNS and serves GET /bytes/N over HTTP;
//   - the build's agvisord, resolving allowed names against that DNS server;
//   - two runsc sandboxes of the same image and limits: one with the policy "allowed.test" (its
//     traffic goes through the enforcer), one on the plain bridge (Docker's NAT straight to
//     203.0.113.2);
//   - the same Python script inside each (bench/egress_client.py) times what happens there, so
//     the figures hold no exec or channel time.
#include "egress_suite.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "agvisor/base/subprocess.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/testing/kept_runtime.h"
#include "bench_agvisord.h"
#include "egress_interception.h"

namespace agvisor {
namespace {

constexpr const char* kInternet = "203.0.113.2";
constexpr const char* kHostSide = "203.0.113.1";
constexpr std::size_t kDownloadBytes = 100'000'000;
constexpr int kHeld = 50;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "agvisor_bench: egress: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Need(Result<T> r, const std::string& what) {
  if (!r.ok()) Fail(what + ": " + r.error().ToString());
  return std::move(*r);
}
void Need(Result<void> r, const std::string& what) {
  if (!r.ok()) Fail(what + ": " + r.error().ToString());
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void Run(const std::vector<std::string>& argv) {
  auto r = Need(RunCommand(argv), argv[0]);
  if (!r.status.success()) {
    std::string line;
    for (const auto& a : argv) line += a + " ";
    Fail(line + "failed: " + r.err);
  }
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v[static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1];
}

// VmRSS of a process, in KiB (0 when it cannot be read).
long RssKb(pid_t pid) {
  std::istringstream in(Slurp("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) return std::atol(line.c_str() + 6);
  }
  return 0;
}

// Everything the suite makes, taken down again in reverse order, also when it fails half way.
class Rig {
 public:
  Rig() {
    const std::string tag = std::to_string(::getpid() % 100000);
    char tmpl[] = "/tmp/agvisor-egress-bench-XXXXXX";
    if (!::mkdtemp(tmpl)) Fail("mkdtemp");
    dir_ = tmpl;
    ns_ = "agvb-inet-" + tag;
    host_if_ = "agvb-h" + tag;
  }
  ~Rig() {
    for (const auto& name : sandboxes_) (void)RemoveSandbox(name, "", true);
    if (daemon_) StopBenchAgvisord(*daemon_);
    if (internet_) (void)internet_->Kill(SIGKILL);
    if (made_link_) (void)RunCommand({"ip", "link", "del", host_if_});
    if (made_ns_) (void)RunCommand({"ip", "netns", "del", ns_});
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void StartInternet() {
    const std::string ns_if = "agvb-n" + host_if_.substr(6);
    Run({"ip", "netns", "add", ns_});
    made_ns_ = true;
    Run({"ip", "link", "add", host_if_, "type", "veth", "peer", "name", ns_if});
    made_link_ = true;
    Run({"ip", "link", "set", ns_if, "netns", ns_});
    Run({"ip", "addr", "add", std::string(kHostSide) + "/24", "dev", host_if_});
    Run({"ip", "link", "set", host_if_, "up"});
    Run({"ip", "netns", "exec", ns_, "ip", "addr", "add", std::string(kInternet) + "/24", "dev",
         ns_if});
    Run({"ip", "netns", "exec", ns_, "ip", "link", "set", ns_if, "up"});
    Run({"ip", "netns", "exec", ns_, "ip", "link", "set", "lo", "up"});
    internet_.emplace(
        Need(Subprocess::Spawn(
                 {.argv = {"sh", "-c",
                           "exec ip netns exec \"$0\" python3 \"$1\" \"$2\" \"$3\" >\"$4\" 2>&1",
                           ns_, AGVISOR_SOURCE_DIR "/tests/integration/data/fake_internet.py",
                           kInternet, dir_ + "/questions.log", dir_ + "/internet.out"}}),
             "start the fake internet"));
    if (!WaitUntil([&] { return Slurp(dir_ + "/internet.out").starts_with("ready"); },
                   std::chrono::seconds(20))) {
      Fail("the fake internet did not start: " + Slurp(dir_ + "/internet.out"));
    }
  }

  void StartDaemon() {
    daemon_.emplace(Need(StartBenchAgvisord(dir_, {"--egress-resolver", kInternet,
                                                   "--egress-state-dir", dir_ + "/state"}),
                         "start agvisord"));
  }

  std::unique_ptr<Sandbox> Create(SandboxSpec spec) {
    auto sb = Need(CreateSandbox(spec), "create a sandbox (is agvisord's firewall set up?)");
    sandboxes_.push_back(sb->container_name());
    Need(sb->WriteFile("/tmp/egress_client.py", Slurp(AGVISOR_BENCH_DIR "/egress_client.py")),
         "copy egress_client.py");
    return sb;
  }

  pid_t daemon_pid() const { return daemon_->pid(); }
  std::string log() const { return Slurp(dir_ + "/agvisord.log"); }

 private:
  std::string dir_, ns_, host_if_;
  bool made_ns_ = false, made_link_ = false;
  std::optional<Subprocess> internet_, daemon_;
  std::vector<std::string> sandboxes_;
};

// Runs the client script in a sandbox; its stdout, or the process ends with what went wrong.
std::string Client(Sandbox& sb, const std::string& args) {
  auto r = Need(sb.ExecShell("python3 /tmp/egress_client.py " + args), "egress_client.py");
  if (r.exit_code != 0) Fail("egress_client.py " + args + ": " + r.out + r.err);
  return r.out;
}

std::vector<double> Numbers(const std::string& text) {
  std::istringstream in(text);
  std::vector<double> v;
  double x;
  while (in >> x) v.push_back(x);
  return v;
}

}  // namespace

void EgressSuite(const std::string& image, int rounds, int connects) {
  if (::geteuid() != 0) Fail("needs root (it makes a network namespace)");
  Rig rig;
  std::fprintf(stderr, "egress: fake internet, agvisord, two sandboxes ...\n");
  rig.StartInternet();
  rig.StartDaemon();
  SandboxSpec spec;
  spec.image = image;
  spec.limits.cpus = 1;
  spec.limits.memory = "512m";
  spec.limits.disk = "none";
  spec.labels["bench.run"] = "1";
  SandboxSpec enforced_spec = spec;
  enforced_spec.egress = egress::EgressRules{.allow_domains = {"allowed.test"}};
  auto enforced = rig.Create(enforced_spec);
  auto direct = rig.Create(spec);
  // The enforced sandbox asks for the name (its resolver answers the enforcer's address); the
  // direct one for the address itself.
  const std::string via_enforcer = "allowed.test";
  const std::string straight = kInternet;

  // Warm-up (not counted): first connections, Python's imports, page cache.
  (void)Client(*enforced, "download " + via_enforcer + " 10000000");
  (void)Client(*direct, "download " + straight + " 10000000");

  std::fprintf(stderr, "egress: %d rounds of a 100 MB download each way ...\n", rounds);
  std::vector<double> t_enf, t_dir, ratio;
  const std::string bytes = std::to_string(kDownloadBytes);
  for (int i = 0; i < rounds; ++i) {
    // Alternate which goes first, so a drift of the machine does not favour one side.
    double e = 0, d = 0;
    if (i % 2 == 0) {
      d = Numbers(Client(*direct, "download " + straight + " " + bytes)).at(0);
      e = Numbers(Client(*enforced, "download " + via_enforcer + " " + bytes)).at(0);
    } else {
      e = Numbers(Client(*enforced, "download " + via_enforcer + " " + bytes)).at(0);
      d = Numbers(Client(*direct, "download " + straight + " " + bytes)).at(0);
    }
    t_enf.push_back(e);
    t_dir.push_back(d);
    ratio.push_back(d / e);  // throughput through the enforcer over direct throughput
  }

  std::fprintf(stderr, "egress: %d connection setups each way ...\n", connects);
  std::vector<double> s_enf, s_dir;
  const int batch = std::min(connects, 50);
  for (int done = 0; done < connects; done += batch) {
    const std::string n = std::to_string(std::min(batch, connects - done));
    for (double x : Numbers(Client(*enforced, "connect " + via_enforcer + " " + n)))
      s_enf.push_back(x);
    for (double x : Numbers(Client(*direct, "connect " + straight + " " + n))) s_dir.push_back(x);
  }

  std::fprintf(stderr, "egress: agvisord's RSS with %d open connections ...\n", kHeld);
  const long rss_idle = RssKb(rig.daemon_pid());
  std::optional<Result<ExecResult>> held;
  std::thread holder([&] {
    held.emplace(
        enforced->ExecShell("python3 /tmp/egress_client.py hold " + std::to_string(kHeld)));
  });
  const bool opened = WaitUntil(
      [&] {
        auto r = enforced->ExecShell("test -e /tmp/opened");
        return r.ok() && r->exit_code == 0;
      },
      std::chrono::seconds(60));
  const long rss_held = RssKb(rig.daemon_pid());
  (void)enforced->WriteFile("/tmp/done", "");
  holder.join();
  if (!opened || !held->ok() || (*held)->exit_code != 0) {
    Fail("holding " + std::to_string(kHeld) + " connections failed: " +
         (held->ok() ? (*held)->out + (*held)->err : held->error().ToString()));
  }

  const double mb = kDownloadBytes / 1e6;
  std::printf("\n### Egress enforcer on runsc (image %s, 1 cpu, 512m; %d rounds, %d connects)\n\n",
              image.c_str(), rounds, connects);
  std::printf("| measure | through the enforcer | plain bridge | enforcer vs bridge |\n");
  std::printf("|---|---|---|---|\n");
  std::printf(
      "| 100 MB download, median | %.2f s (%.0f MB/s) | %.2f s (%.0f MB/s) | %.2f of direct"
      " (target >= 0.8) |\n",
      Median(t_enf), mb / Median(t_enf), Median(t_dir), mb / Median(t_dir), Median(ratio));
  const double e50 = Percentile(s_enf, 0.5), d50 = Percentile(s_dir, 0.5);
  const double e95 = Percentile(s_enf, 0.95), d95 = Percentile(s_dir, 0.95);
  std::printf(
      "| connection setup p50 (connect to first byte of a small answer) | %.2f ms | "
      "%.2f ms | +%.2f ms (target <= 2 ms) |\n",
      e50, d50, e50 - d50);
  std::printf("| connection setup p95 | %.2f ms | %.2f ms | +%.2f ms |\n", e95, d95, e95 - d95);
  std::printf("\n| agvisord (the enforcers) | RSS |\n|---|---|\n");
  std::printf("| serving 2 sandboxes, idle | %.1f MiB |\n", rss_idle / 1024.0);
  std::printf("| with %d connections open through the enforcer | %.1f MiB (+%.1f MiB) |\n", kHeld,
              rss_held / 1024.0, (rss_held - rss_idle) / 1024.0);
  // Brokered secrets: the enforcer's own cost of interception, on loopback in this process
  // (sandboxes with secrets need the doors' part: docs/egress.md, "Secrets").
  InterceptionRows(connects);
}

}  // namespace agvisor
