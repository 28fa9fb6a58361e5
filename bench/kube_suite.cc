// `agvisor_bench --suite kube`: the Kubernetes runtime against the loopback API test double, and
// the Docker runtime on the same dockerd, interleaved in one run (kube_suite.h).
#include "kube_suite.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "agvisor/docker/client.h"
#include "agvisor/kube/client.h"
#include "agvisor/kube/kubeconfig.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/kube_runtime/pod_manifest.h"
#include "agvisor/sandbox/pool.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/testing/kept_runtime.h"
#include "tests/kube/double_process.h"

namespace agvisor {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "agvisor_bench --suite kube: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Need(Result<T> r, const char* what) {
  if (!r.ok()) Fail(std::string(what) + ": " + r.error().ToString());
  return std::move(*r);
}
void Need(Result<void> r, const char* what) {
  if (!r.ok()) Fail(std::string(what) + ": " + r.error().ToString());
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

std::string Times(double kube, double docker) {
  if (kube <= 0 || docker <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1fx", kube / docker);
  return b;
}

SandboxSpec Spec(const std::string& image, const std::string& host) {
  SandboxSpec spec;
  spec.image = image;
  spec.host = host;
  spec.limits.cpus = 1;
  spec.limits.memory = "512m";
  spec.limits.disk = "none";
  spec.labels["bench.run"] = "1";
  return spec;
}

// One runtime's samples, in seconds.
struct Side {
  std::vector<double> create, stop, exec, acquire, first_exec;
};

void Creates(const std::string& image, const std::string& host, Side& side) {
  auto t0 = Clock::now();
  auto sb = Need(CreateSandbox(Spec(image, host)), "create");
  side.create.push_back(Since(t0));
  t0 = Clock::now();
  Need(sb->Stop(), "stop");
  side.stop.push_back(Since(t0));
}

void Execs(const std::string& image, const std::string& host, int runs, Side& side) {
  auto sb = Need(CreateSandbox(Spec(image, host)), "create");
  (void)Need(sb->Exec({"true"}), "first exec");  // untimed
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    auto r = Need(sb->Exec({"true"}), "exec true");
    side.exec.push_back(Since(t0));
    if (r.exit_code != 0) Fail("exec true exited " + std::to_string(r.exit_code));
  }
  Need(sb->Stop(), "stop");
}

void Acquires(const std::string& image, const std::string& host, int acquires, Side& side) {
  PoolOptions po;
  po.spec = Spec(image, host);
  po.size = 2;
  auto pool = Need(CreatePool(po), "pool");
  for (int i = 0; i < acquires; ++i) {
    // Against a ready pool: the latency a caller sees when the pool keeps up.
    Need(pool->WaitReady(std::chrono::seconds(180)), "pool ready");
    auto t0 = Clock::now();
    auto sb = Need(pool->Acquire({.lifetime = 600}), "acquire");
    side.acquire.push_back(Since(t0));
    auto r = Need(sb->Exec({"true"}), "exec after acquire");
    side.first_exec.push_back(Since(t0));
    if (r.exit_code != 0) Fail("exec true failed");
    Need(sb->Stop(), "stop");
  }
}

void Row(const char* what, const std::vector<double>& docker, const std::vector<double>& kube) {
  Spread d = SpreadOf(docker), k = SpreadOf(kube);
  std::printf("| %s | %zu | %s / %s | %s / %s | %s |\n", what, d.n, Ms(d.p50).c_str(),
              Ms(d.p95).c_str(), Ms(k.p50).c_str(), Ms(k.p95).c_str(), Times(k.p50, d.p50).c_str());
}

}  // namespace

void KubeSuite(const std::string& image, int creates, int runs, int acquires) {
  std::fprintf(stderr, "kube: starting the Kubernetes API test double ...\n");
  auto twin = Need(testing::KubeDoubleProcess::Start(
                       AGVISOR_SOURCE_DIR "/tests/kube/kube_double.py", /*quiet=*/true),
                   "start the double");
  ::setenv("KUBECONFIG", twin->kubeconfig().c_str(), 1);
  const std::string kube = testing::kKubeHost;

  // One untimed create per side: Docker's derived agent image, the double's first pod.
  for (const std::string& host : {std::string(), kube}) {
    Need(Need(CreateSandbox(Spec(image, host)), "warm-up create")->Stop(), "warm-up stop");
  }
  Side d, k;
  std::fprintf(stderr, "kube: %d cold creates per runtime, interleaved ...\n", creates);
  for (int i = 0; i < creates; ++i) {
    Creates(image, "", d);
    Creates(image, kube, k);
  }
  std::fprintf(stderr, "kube: %d exec round trips per runtime ...\n", runs);
  Execs(image, "", runs, d);
  Execs(image, kube, runs, k);
  std::fprintf(stderr, "kube: %d acquires from a pool of 2 per runtime ...\n", acquires);
  Acquires(image, "", acquires, d);
  Acquires(image, kube, acquires, k);

  // The double's own cost: what a bare call costs through it, against the Engine API call that
  // does the same on the same dockerd. A pod read is a dictionary lookup behind TLS and HTTP in
  // Python; a pods/exec is a WebSocket upgrade, then the double runs `docker exec`.
  std::fprintf(stderr, "kube: %d bare reads and execs per API ...\n", runs);
  auto docker = Need(ConnectDockerHost(""), "docker client");
  auto address = Need(kube::ParseKubeAddress(kube), "kube address");
  auto api = Need(kube::Client::Connect(Need(kube::LoadCredentials(address), "credentials")),
                  "kube client");
  auto dsb = Need(CreateSandbox(Spec(image, "")), "create");
  auto ksb = Need(CreateSandbox(Spec(image, kube)), "create");
  std::vector<double> d_read, k_read, d_exec, k_exec;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    (void)Need(docker->InspectContainer(dsb->container_name()), "inspect");
    d_read.push_back(Since(t0));
    t0 = Clock::now();
    (void)Need(api->GetPod(ksb->container_name()), "get pod");
    k_read.push_back(Since(t0));
    t0 = Clock::now();
    docker::ExecConfig ec;
    ec.cmd = {"true"};
    auto de = Need(docker->RunExec(dsb->container_name(), ec), "engine exec");
    d_exec.push_back(Since(t0));
    if (de.exit_code != 0) Fail("engine exec of true failed");
    t0 = Clock::now();
    auto ke = Need(api->Exec(ksb->container_name(), kPodSandboxContainer, {"true"}), "pods/exec");
    char buf[256];
    while (Need(ke->ReadStdout(buf, [](std::string_view) {}), "pods/exec read") > 0) {
    }
    const int code = Need(ke->ExitCode(), "pods/exec status");
    k_exec.push_back(Since(t0));
    if (code != 0) Fail("pods/exec of true exited " + std::to_string(code));
  }
  Need(dsb->Stop(), "stop");
  Need(ksb->Stop(), "stop");

  std::printf(
      "\n### Kubernetes runtime (against the API test double) vs Docker (image %s, 1 cpu, "
      "512m)\n\n",
      image.c_str());
  std::printf(
      "| operation | n per side | Docker median / p95 | Kubernetes (double) median / p95 | "
      "kube / Docker (median) |\n|---|---|---|---|---|\n");
  Row("create to ready (`Sandbox::Create`)", d.create, k.create);
  Row("stop right after create", d.stop, k.stop);
  Row("exec `true` round trip (over the channel)", d.exec, k.exec);
  Row("`Pool::Acquire` from a ready pool of 2", d.acquire, k.acquire);
  Row("`Pool::Acquire` + first `exec true`", d.first_exec, k.first_exec);
  std::printf(
      "\n### The double's own cost (bare calls, no agent): Engine API vs the double\n\n"
      "| call | n | Engine API median / p95 | double median / p95 | double / Engine API "
      "(median) |\n|---|---|---|---|---|\n");
  Row("read one object (inspect container / GET pod)", d_read, k_read);
  Row("exec `true` (Engine API exec / pods/exec over WebSocket)", d_exec, k_exec);
}

}  // namespace agvisor
