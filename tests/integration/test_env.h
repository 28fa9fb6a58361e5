// Shared helpers of the integration tests: a unique run id, the label every test sandbox
// carries, cleanup by that label (containers and volumes), so a failed test leaks nothing, and the
// test host's runtime (TestRuntime).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/runtimes.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/testing/kept_runtime.h"

namespace agvisor::testing {

inline const std::string& RunId() {
  static const std::string id = [] {
    std::random_device rd;
    char b[16];
    std::snprintf(b, sizeof b, "t%06x", rd() & 0xffffff);
    return std::string(b);
  }();
  return id;
}

inline constexpr const char* kRunLabel = "test.run";

// A file's whole content ("" when it cannot be read), e.g. a daemon's log.
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A spec with small limits and the run label; `name` gets the run id as prefix.
inline SandboxSpec TestSpec(std::optional<std::string> name = std::nullopt) {
  SandboxSpec s;
  s.limits.cpus = 1;
  s.limits.memory = "512m";
  s.limits.disk = "none";
  s.labels[kRunLabel] = RunId();
  if (name) s.name = RunId() + "-" + *name;
  if (const char* h = std::getenv("AGVISOR_TEST_HOST")) s.host = h;
  return s;
}

// Removes every container, volume and (egress) network of this run. On a kube:// host (the
// suites' kube variants) there is nothing to do here: the Kubernetes API test double removes every
// container and volume it made when it stops (tests/integration/kube_double.h).
inline void CleanupRun(std::string_view host = "") {
  if (IsKubernetesHost(host)) return;
  auto docker = ConnectDockerHost(host);
  ASSERT_TRUE(docker.ok()) << docker.error().ToString();
  const std::string filter = std::string(kRunLabel) + "=" + RunId();
  auto list = (*docker)->ListContainers(true, {filter});
  if (list.ok()) {
    for (const auto& c : *list) (void)(*docker)->RemoveContainer(c.id, true, true);
  }
  auto vols = (*docker)->ListVolumes({filter});
  if (vols.ok()) {
    for (const auto& v : *vols) (void)(*docker)->RemoveVolume(v.name, true);
  }
  auto nets = (*docker)->ListNetworks({filter});
  if (nets.ok()) {
    for (const auto& n : *nets) (void)(*docker)->RemoveNetwork(n.id);
  }
}

// The host the suite runs against: $AGVISOR_TEST_HOST (set by the ssh and kube variants), else
// "" (the local dockerd).
inline std::string TestHost() {
  const char* h = std::getenv("AGVISOR_TEST_HOST");
  return h ? h : "";
}

// The test host's runtime, kept for the whole test process (the entry points over it,
// CreateSandbox, OpenSandbox, ..., are sandbox/testing/kept_runtime.h's).
inline std::shared_ptr<Runtime> TestRuntime(const std::string& host = TestHost()) {
  auto runtime = KeptRuntime(host);
  if (!runtime) ADD_FAILURE() << "no runtime for host '" << host << "' (see stderr)";
  return runtime;
}

// Polls `cond` until it is true or `timeout` passes; returns whether it became true.
inline bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return cond();
}

// A shell script that hashes each directory argument inside a sandbox: one line per argument,
// "<sha256> <bytes of regular files> <entries>" of the tree there (names, types, modes, owners,
// link targets and every file's sha256), or "absent". Run as `sh -c kHashTrees sh DIR...`.
inline constexpr const char* kHashTrees = R"SH(for d in "$@"; do
  [ -d "$d" ] || { echo absent; continue; }
  h=$(cd "$d" && { find . -printf '%y %m %U:%G %p -> %l\n' | LC_ALL=C sort
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum; } | sha256sum) || exit 1
  echo "${h%% *} $(find "$d" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}') \
$(find "$d" | wc -l)"
done
)SH";

}  // namespace agvisor::testing
