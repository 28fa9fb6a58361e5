// Faults around the Docker daemon and /workspace durability (docs/reliability.md): the content of
// a named sandbox's /workspace hashes the same across stop/start, kill, idle expiry and a dockerd
// restart; an exec or a create in flight when dockerd restarts returns an error in bounded time
// (never hangs), and what is left is found by list.
//
// This test restarts the machine's dockerd (SIGTERM, then started again as scripts/setup-host
// does), so it runs last and alone (RUN_SERIAL).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::TestSpec;

void Figure(const std::string& name, const std::string& value) {
  std::printf("FIGURE %s %s\n", name.c_str(), value.c_str());
  std::fflush(stdout);
}

std::string WorkspaceHash(Sandbox& sb) {
  auto r = sb.ExecShell("cd /workspace && find . -type f | sort | xargs sha256sum | sha256sum");
  EXPECT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r.ok() ? r->exit_code : -1, 0);
  return r.ok() ? r->out : "";
}

bool DockerAnswers() {
  auto r = RunCommand({"curl", "-sf", "--max-time", "2", "--unix-socket", "/var/run/docker.sock",
                       "http://localhost/_ping"});
  return r.ok() && r->status.success();
}

// Stops dockerd with SIGTERM and starts it again the way scripts/setup-host does.
void RestartDockerd() {
  auto pid = RunCommand({"pgrep", "-x", "dockerd"});
  ASSERT_TRUE(pid.ok() && pid->status.success()) << "dockerd is not running";
  ASSERT_TRUE(RunCommand({"kill", "-TERM", pid->out.substr(0, pid->out.find('\n'))}).ok());
  ASSERT_TRUE(testing::WaitFor(
      [] {
        auto p = RunCommand({"pgrep", "-x", "dockerd"});
        return p.ok() && !p->status.success();
      },
      60s))
      << "dockerd did not stop";
  auto start = RunCommand(
      {"sh", "-c", "setsid nohup dockerd >>/var/log/agvisor-dockerd.log 2>&1 </dev/null &"});
  ASSERT_TRUE(start.ok());
  ASSERT_TRUE(testing::WaitFor(DockerAnswers, 60s)) << "dockerd did not come back";
}

TEST(DockerdRestartTest, WorkspaceSurvivesEverythingAndFaultsNeverHang) {
  auto spec = TestSpec("durable");
  auto sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto w = (*sb)->ExecShell(
      "mkdir -p d/e && head -c 3000000 /dev/urandom > d/e/big && seq 100000 > list && "
      "printf 'a\\0b' > bin && ln -s list link");
  ASSERT_TRUE(w.ok() && w->exit_code == 0);
  const std::string hash = WorkspaceHash(**sb);
  ASSERT_FALSE(hash.empty());

  // stop, then create again
  ASSERT_TRUE((*sb)->Stop().ok());
  sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(WorkspaceHash(**sb), hash) << "after stop/start";

  // killed from outside
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  ASSERT_TRUE((*docker)->KillContainer((*sb)->container_name(), "KILL").ok());
  sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(WorkspaceHash(**sb), hash) << "after kill";
  ASSERT_TRUE((*sb)->Stop().ok());

  // idle expiry
  auto idle = spec;
  idle.idle_ttl = 2;
  sb = CreateSandbox(idle);
  ASSERT_TRUE(sb.ok());
  const std::string name = (*sb)->container_name();
  ASSERT_TRUE(testing::WaitFor([&] { return !(*docker)->InspectContainer(name).ok(); }, 20s));
  sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(WorkspaceHash(**sb), hash) << "after idle expiry";

  // dockerd restarted while an exec runs in this sandbox and a create is under way
  auto exec = std::async(std::launch::async, [&] {
    auto t0 = Clock::now();
    auto r = (*sb)->ExecShell("sleep 60", {.timeout = 90});
    return std::pair{std::move(r), Clock::now() - t0};
  });
  auto create = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);  // fault injection timing: a create racing the stop
    return CreateSandbox(TestSpec());
  });
  std::this_thread::sleep_for(500ms);  // let the exec start
  auto t_restart = Clock::now();
  RestartDockerd();
  Figure("dockerd_restart_s",
         std::to_string(std::chrono::duration<double>(Clock::now() - t_restart).count()));
  ASSERT_EQ(exec.wait_for(120s), std::future_status::ready) << "exec hung across the restart";
  auto [r, took] = exec.get();
  Figure("exec_across_restart",
         r.ok() ? "exit " + std::to_string(r->exit_code)
                : std::string(ErrorCodeName(r.error().code())) + ": " + r.error().message());
  Figure("exec_across_restart_s", std::to_string(std::chrono::duration<double>(took).count()));
  EXPECT_FALSE(r.ok() && r->exit_code == 0) << "a 60 s sleep cannot have finished";
  ASSERT_EQ(create.wait_for(120s), std::future_status::ready) << "create hung across the restart";
  auto created = create.get();
  Figure("create_across_restart",
         created.ok() ? "ok" : std::string(ErrorCodeName(created.error().code())));

  // Afterwards: the named sandbox comes back with its data, and list sees every leftover.
  auto back = CreateSandbox(spec);
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(WorkspaceHash(**back), hash) << "after a dockerd restart";
  auto list = ListSandboxes("");
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  EXPECT_TRUE((*back)->Delete().ok());
  testing::CleanupRun();
}

}  // namespace
}  // namespace agvisor
