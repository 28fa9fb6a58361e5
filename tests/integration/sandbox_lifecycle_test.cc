// The seed's lifecycle promises against the real dockerd + runsc (label `integration`).
// docs/lifecycle.md maps each promise to the test here that proves it. Variants (CTest entries
// running this binary): sandbox_lifecycle_ssh_test (AGVISOR_TEST_OVER_SSH=1: the whole suite over
// ssh://root@127.0.0.1:PORT with a test sshd) and sandbox_lifecycle_kube_test
// (AGVISOR_TEST_OVER_KUBE=1: the cases of the Runtime seam on the Kubernetes runtime, against the
// Kubernetes API test double; tests/integration/CMakeLists.txt names them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "agvisor/base/tar.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/agent_blob.h"
#include "agvisor/sandbox/docker_runtime/agent_image.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/kube_double.h"
#include "tests/integration/sshd.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;
using testing::TestSpec;
using testing::WaitFor;
using namespace std::chrono_literals;

class LifecycleTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { testing::CleanupRun(Host()); }
  static std::string Host() { return testing::TestHost(); }
  // Whether the host still has the sandbox, running or not (Sandbox::List: any runtime).
  static bool Exists(const std::string& container) {
    auto list = ListSandboxes(Host());
    EXPECT_TRUE(list.ok()) << list.error().ToString();
    if (!list.ok()) return false;
    for (const auto& i : *list) {
      if (i.container_name == container) return true;
    }
    return false;
  }
  // Whether the sandbox ended by itself (lifetime, idle_ttl): on Docker its container is removed
  // (AutoRemove), and a named one is listed as `stopped` by its kept volume; on Kubernetes its
  // pod stays, exited (docs/kubernetes.md, "AutoRemove").
  static bool Ended(const std::string& container) {
    auto list = ListSandboxes(Host());
    EXPECT_TRUE(list.ok()) << list.error().ToString();
    if (!list.ok()) return false;
    for (const auto& i : *list) {
      if (i.container_name != container) continue;
      return i.state == "stopped" || (testing::OverKube() && !i.running);
    }
    return true;
  }
  static std::unique_ptr<Sandbox> MustCreate(const SandboxSpec& spec) {
    auto sb = CreateSandbox(spec);
    EXPECT_TRUE(sb.ok()) << sb.error().ToString();
    return sb.ok() ? std::move(*sb) : nullptr;
  }
};

// The exec semantics of docs/lifecycle.md, with and without ready shells (SandboxSpec::
// warm_shells, docs/agent.md "Ready shells"): each case runs both ways and must give the same
// answers, and with ready shells the `sh -c` execs must have taken one (ExecResult::prestarted),
// so the run cannot pass by falling back to the cold path.
class LifecycleExecTest : public LifecycleTest, public ::testing::WithParamInterface<int> {
 protected:
  static SandboxSpec Spec() {
    SandboxSpec s = TestSpec();
    s.warm_shells = GetParam();
    return s;
  }
  static bool Warm() { return GetParam() > 0; }
};

TEST_P(LifecycleExecTest, ExecSeparatesStreamsAndReturnsExitCode) {
  auto sb = MustCreate(Spec());
  ASSERT_TRUE(sb);
  auto r = sb->ExecShell("echo out; echo err >&2; exit 7");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->prestarted, Warm());
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 7);
  auto in = sb->Exec({"cat"}, {.input = std::string("héllo\0bytes", 12)});
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->out, std::string("héllo\0bytes", 12));
  auto info = sb->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->running);
  ASSERT_TRUE(sb->Stop().ok());
  EXPECT_FALSE(Exists(sb->container_name()));
  EXPECT_TRUE(sb->Stop().ok());  // idempotent
}

TEST_P(LifecycleExecTest, TimeoutReturns124AndKillsTheTree) {
  auto sb = MustCreate(Spec());
  ASSERT_TRUE(sb);
  auto t0 = std::chrono::steady_clock::now();
  auto r = sb->ExecShell("sleep 100 & setsid sleep 101 & (sleep 102 &); sleep 103", {.timeout = 1});
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->prestarted, Warm());
  EXPECT_EQ(r->exit_code, 124);
  EXPECT_TRUE(r->timed_out);
  // The 1 s timeout fired (the tree sleeps 100 s): 1.38 s at most on a loaded 2-core host (load
  // average 17-19), bound 3.6x that.
  EXPECT_LT(took, 5s);
  auto ps = sb->ExecShell("ps -eo args | grep -c '^sleep 10[0-3]' || true");
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->out, "0\n") << "processes left after the timeout";
}

TEST_P(LifecycleExecTest, ExecReturnsWhileABackgroundChildHoldsItsOutputOpen) {
  // A server started with `&` keeps the exec's stdout and stderr open and runs on: the exec
  // still ends when its main process does, collected or streamed.
  auto sb = MustCreate(Spec());
  ASSERT_TRUE(sb);
  auto t0 = std::chrono::steady_clock::now();
  auto r = sb->ExecShell("sleep 301 & echo started; echo warn >&2", {.timeout = 60});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->prestarted, Warm());
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->out, "started\n");
  EXPECT_EQ(r->err, "warn\n");
  std::string streamed;
  ExecOptions o;
  o.timeout = 60;
  o.on_output = [&](std::string_view b) { streamed.append(b); };
  r = sb->ExecShell("sleep 302 & echo streamed", o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(streamed, "streamed\n");
  // Neither exec waited for its background child (300 s) nor for its 60 s timeout: 0.92 s at
  // most on a loaded host, bound 32x that.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  auto ps = sb->ExecShell("ps -eo args | grep -c '^sleep 30[12]' || true");
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->out, "2\n") << "the background children should run on";
}

TEST_F(LifecycleTest, StreamingKeepsABoundedTail) {
  auto sb = MustCreate(TestSpec());
  ASSERT_TRUE(sb);
  std::size_t seen = 0;
  ExecOptions o;
  o.on_output = [&](std::string_view b) { seen += b.size(); };
  auto r = sb->ExecShell("head -c 3000000 /dev/zero | tr '\\0' x; echo; echo END", o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(seen, 3000000u + 5);
  EXPECT_LE(r->out.size(), kStreamTailBytes);
  EXPECT_TRUE(r->truncated);
  EXPECT_THAT(r->out, ::testing::EndsWith("x\nEND\n"));
}

TEST_F(LifecycleTest, LimitsAreVisibleInside) {
  auto spec = TestSpec();
  spec.limits.memory = "384m";
  spec.limits.pids = 200;
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  auto r = sb->ExecShell("grep MemTotal /proc/meminfo");
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->out, HasSubstr(std::to_string(384 * 1024) + " kB"));
  auto docker = ConnectDockerHost(Host());
  auto info = (*docker)->InspectContainer(sb->container_name());
  ASSERT_TRUE(info.ok());
  // pids are the processes inside: the host's cap is scaled by the platform (instance_spec.h).
  EXPECT_EQ(info->host_config.pids_limit, HostPidsCap("ptrace", 200));
  auto limits = sb->Info();
  ASSERT_TRUE(limits.ok() && limits->limits);
  EXPECT_EQ(limits->limits->pids, 200);
  EXPECT_EQ(info->host_config.memory, 384LL << 20);
  EXPECT_EQ(info->host_config.memory_swap, 384LL << 20);  // no swap
  EXPECT_EQ(info->host_config.nano_cpus, 1000000000);
  EXPECT_EQ(info->host_config.runtime, "runsc-ptrace");  // the default platform's
  EXPECT_FALSE(info->host_config.privileged);
}

// network none still has a working loopback: `localhost` resolves and a TCP connection to it
// is made. (Docker's NetworkDisabled would start ~150 ms faster, but its namespace's `lo` stays
// down: "Network is unreachable" on 127.0.0.1 under runsc. Not used.)
// Network none, on the platform runtime's none twin (scripts/setup-host registers
// runsc-ptrace-none: gVisor's own loopback-only stack, no Docker network hook) and, for a runtime
// without a twin, on Docker's network none. Both: `localhost` resolves and 127.0.0.1 connects; no
// interface but lo.
TEST_F(LifecycleTest, NetworkNoneHasAWorkingLoopback) {
  struct Case {
    std::string runtime;    // asked for
    std::string runs_on;    // the container's runtime
    bool network_disabled;  // made without libnetwork
  };
  for (const Case& k :
       {Case{"runsc", "runsc-ptrace-none", true}, Case{"runsc-none", "runsc-none", false}}) {
    SCOPED_TRACE("runtime " + k.runtime);
    auto spec = TestSpec();
    spec.network = "none";
    spec.runtime = k.runtime;
    auto sb = MustCreate(spec);
    ASSERT_TRUE(sb);
    auto r = sb->ExecShell(
        "getent hosts localhost; python3 -c \"import socket\n"
        "s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
        "c=socket.create_connection(('localhost', s.getsockname()[1])); print('connected')\"; "
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
    ASSERT_TRUE(r.ok());
    EXPECT_THAT(r->out,
                ::testing::MatchesRegex("(127\\.0\\.0\\.1|::1) +localhost.*\nconnected\nlo\n"))
        << r->err;
    auto docker = ConnectDockerHost(Host());
    auto info = (*docker)->InspectContainer(sb->container_name());
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->host_config.network_mode, "none");
    EXPECT_EQ(info->host_config.runtime, k.runs_on)
        << "scripts/setup-host registers runsc-none; run it on this host";
    EXPECT_EQ(info->network_disabled, k.network_disabled);
  }
}

TEST_P(LifecycleExecTest, LifetimeEndsAnAnonymousSandboxWithNobodyConnected) {
  auto spec = Spec();
  spec.lifetime = 2;
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  const std::string name = sb->container_name();
  sb.reset();  // no client holds it
  EXPECT_FALSE(Ended(name));
  EXPECT_TRUE(WaitFor([&] { return Ended(name); }, 10s)) << "still there after lifetime";
}

TEST_P(LifecycleExecTest, IdleTtlEndsItButActivityKeepsItAlive) {
  auto spec = Spec();
  spec.idle_ttl = 3;
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  // A command longer than... no: the timeout must stay below idle_ttl.
  auto refused = sb->ExecShell("true", {.timeout = 3});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kInvalidArgument);
  // Activity: a 2 s command, twice, spans more than idle_ttl in total.
  for (int i = 0; i < 2; ++i) {
    auto r = sb->ExecShell("sleep 2", {.timeout = 2.5});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r->prestarted, Warm());
    EXPECT_EQ(r->exit_code, 0);
  }
  const std::string name = sb->container_name();
  EXPECT_FALSE(Ended(name));
  EXPECT_TRUE(WaitFor([&] { return Ended(name); }, 10s)) << "idle sandbox still there";
  auto late = sb->ExecShell("true", {.timeout = 1});
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code(), ErrorCode::kSandboxDied);
}

TEST_F(LifecycleTest, NamedWorkspaceSurvivesStopAndExpiry) {
  auto spec = TestSpec("keep");
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  EXPECT_TRUE(sb->persistent());
  EXPECT_EQ(sb->data_dir(), "/workspace");
  ASSERT_EQ(sb->ExecShell("echo one > f && pwd")->out, "/workspace\n");
  ASSERT_TRUE(sb->Stop().ok());

  spec.idle_ttl = 2;
  auto again = MustCreate(spec);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->resumed());
  EXPECT_EQ(again->ExecShell("cat f; echo two >> f", {.timeout = 1})->out, "one\n");
  const std::string name = again->container_name();
  ASSERT_TRUE(WaitFor([&] { return Ended(name); }, 10s));

  spec.idle_ttl.reset();
  auto third = MustCreate(spec);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->ExecShell("cat f")->out, "one\ntwo\n");
  ASSERT_TRUE(third->Delete().ok());
  auto fresh = MustCreate(spec);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->ExecShell("ls -A | wc -l")->out, "0\n") << "delete did not erase the data";
  ASSERT_TRUE(fresh->Delete().ok());
}

TEST_F(LifecycleTest, ResumeAttachesToARunningSandboxWithItsProcesses) {
  auto spec = TestSpec("resume");
  auto first = MustCreate(spec);
  ASSERT_TRUE(first);
  auto bg = first->ExecShell("nohup sleep 1000 >/dev/null 2>&1 & echo $!");
  ASSERT_TRUE(bg.ok());
  std::string pid = bg->out;
  ASSERT_FALSE(pid.empty());
  pid.pop_back();  // the newline
  first.reset();   // the client goes away, the sandbox stays

  spec.limits.memory = "1g";  // ignored on resume: fixed at creation
  auto second = MustCreate(spec);
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->resumed());
  auto alive = second->ExecShell("kill -0 " + pid + " && echo alive");
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(alive->out, "alive\n");
  ASSERT_TRUE(second->Delete().ok());
}

TEST_F(LifecycleTest, OutOfMemoryIsReportedAndNamedSandboxComesBack) {
  auto spec = TestSpec("oom");
  spec.limits.memory = "256m";
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  ASSERT_TRUE(sb->ExecShell("echo kept > f").ok());
  auto r = sb->ExecShell("python3 -c 'b = bytearray(1 << 30); print(len(b))'", {.timeout = 60});
  ASSERT_FALSE(r.ok()) << "exit " << r->exit_code << " out " << r->out << " err " << r->err;
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied);
  EXPECT_THAT(r.error().message(), HasSubstr("out of memory"));
  auto info = sb->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->end_reason, EndReason::kOutOfMemory);
  auto again = MustCreate(spec);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->ExecShell("cat f")->out, "kept\n");
  ASSERT_TRUE(again->Delete().ok());
}

TEST_F(LifecycleTest, ListFindsAnonymousLeftoversRunningOrNot) {
  auto spec = TestSpec();
  auto a = MustCreate(spec);
  ASSERT_TRUE(a);
  auto docker = ConnectDockerHost(Host());
  auto b = MustCreate(spec);
  ASSERT_TRUE(b);
  ASSERT_TRUE((*docker)->KillContainer(b->container_name(), "KILL").ok());
  auto list = ListSandboxes(Host());
  ASSERT_TRUE(list.ok());
  bool saw_a = false, saw_b = false;
  for (const auto& i : *list) {
    if (i.container_name == a->container_name()) saw_a = i.running;
    if (i.container_name == b->container_name()) saw_b = !i.running;
  }
  EXPECT_TRUE(saw_a);
  EXPECT_TRUE(saw_b);
  // A handle from the list works: exec on the running one, stop on both.
  auto opened = OpenSandbox(a->container_name(), Host());
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ((*opened)->ExecShell("echo hi")->out, "hi\n");
  EXPECT_TRUE(RemoveSandbox(a->container_name(), Host(), false).ok());
  EXPECT_TRUE(RemoveSandbox(b->container_name(), Host(), false).ok());
  EXPECT_EQ(RemoveSandbox(b->container_name(), Host(), false).error().code(), ErrorCode::kNotFound);
}

TEST_F(LifecycleTest, TwoClientsRacingOnOneNameEndWithOneContainer) {
  auto spec = TestSpec("race");
  constexpr int kClients = 4;
  std::vector<Result<std::unique_ptr<Sandbox>>> results;
  results.reserve(kClients);
  for (int i = 0; i < kClients; ++i) results.emplace_back(Error::Internal("not run"));
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      while (!go) std::this_thread::yield();
      results[i] = CreateSandbox(spec);
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  int ok = 0;
  std::string id;
  for (auto& r : results) {
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), ErrorCode::kConflict) << r.error().ToString();
      continue;
    }
    ++ok;
    auto info = (*r)->Info();
    ASSERT_TRUE(info.ok());
    if (id.empty()) id = info->container_id;
    EXPECT_EQ(info->container_id, id) << "two containers for one name";
    ASSERT_TRUE((*r)->ExecShell("echo x >> shared").ok());
  }
  EXPECT_GE(ok, 1);
  auto list = ListSandboxes(Host());
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  EXPECT_EQ(std::count_if(list->begin(), list->end(),
                          [&](const SandboxInfo& i) { return i.name == spec.name; }),
            1);
  auto lines = OpenSandbox(ContainerNameFor(*spec.name), Host());
  ASSERT_TRUE(lines.ok());
  EXPECT_EQ((*lines)->ExecShell("wc -l < shared")->out, std::to_string(ok) + "\n");
  ASSERT_TRUE((*lines)->Delete().ok());
}

TEST_F(LifecycleTest, RefusalsCreateNothing) {
  // Counted by this run's label: other clients of the same daemon may create sandboxes meanwhile.
  auto docker = ConnectDockerHost(Host());
  ASSERT_TRUE(docker.ok());
  const std::string run_filter = std::string(testing::kRunLabel) + "=" + testing::RunId();
  auto before = (*docker)->ListContainers(true, {run_filter});
  ASSERT_TRUE(before.ok());
  auto expect_refused = [](SandboxSpec s, ErrorCode code, std::string_view words) {
    auto r = CreateSandbox(s);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), code) << r.error().ToString();
    EXPECT_THAT(r.error().message(), HasSubstr(std::string(words)));
  };
  auto s = TestSpec();
  s.limits.cpus = 0;
  expect_refused(s, ErrorCode::kInvalidArgument, "limits.cpus");
  s = TestSpec();
  s.limits.memory = "0";
  expect_refused(s, ErrorCode::kInvalidArgument, "limits.memory");
  s = TestSpec();
  s.limits.pids = -1;
  expect_refused(s, ErrorCode::kInvalidArgument, "limits.pids");
  s = TestSpec();
  s.limits.disk = "2gb";
  expect_refused(s, ErrorCode::kInvalidArgument, "limits.disk");
  s = TestSpec();
  s.name = "x,readonly";  // would inject mount options
  expect_refused(s, ErrorCode::kInvalidArgument, "name");
  s = TestSpec();
  s.name = "a:/etc";
  expect_refused(s, ErrorCode::kInvalidArgument, "name");
  s = TestSpec();
  s.image = "--privileged";
  expect_refused(s, ErrorCode::kInvalidArgument, "image");
  s = TestSpec();
  s.runtime = "runsc --debug";
  expect_refused(s, ErrorCode::kInvalidArgument, "runtime");
  s = TestSpec();
  s.gui = true;
  s.limits.memory = "1g";  // a desktop's least
  s.runtime = "runc";
  expect_refused(s, ErrorCode::kInvalidArgument, "sandboxes run only on gVisor");
  s = TestSpec();
  s.runtime = "runc";  // headless too; over ssh the binary is asked on the remote host
  expect_refused(s, ErrorCode::kInvalidArgument, "gVisor runtimes on ");
  s = TestSpec();
  s.network = "host";
  expect_refused(s, ErrorCode::kInvalidArgument, "network");
  s = TestSpec();
  s.labels["agvisor"] = "0";  // would hide it from list
  expect_refused(s, ErrorCode::kInvalidArgument, "reserved");
  s = TestSpec();
  s.lifetime = 0;
  expect_refused(s, ErrorCode::kInvalidArgument, "lifetime");
  s = TestSpec();
  s.image = "agvisor/no-such-image:latest";
  expect_refused(s, ErrorCode::kNotFound, "not found");
  s = TestSpec();
  s.runtime = "no-such-runtime";
  auto bad_runtime = CreateSandbox(s);
  EXPECT_FALSE(bad_runtime.ok());
  auto after = (*docker)->ListContainers(true, {run_filter});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), before->size()) << "a refused create left a container";
}

TEST_F(LifecycleTest, DiskCapIsEnforcedOrRefusedNeverDropped) {
  auto docker = ConnectDockerHost(Host());
  auto s = TestSpec();
  s.limits.disk = "1g";
  auto r = CreateSandbox(s);
  if ((*docker)->api_version() < docker::kAnnotationsApiVersion) {
    // This host cannot pass runsc the size: an explicit cap must be refused, naming versions.
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kUnsupported);
    EXPECT_THAT(r.error().message(), HasSubstr((*docker)->api_version().ToString()));
    EXPECT_THAT(r.error().message(), HasSubstr("disk='none'"));
    // The default runs uncapped and says so.
    s.limits.disk = "";
    auto d = MustCreate(s);
    ASSERT_TRUE(d);
    EXPECT_THAT(d->disk_warning(), HasSubstr("not enforced"));
  } else {
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    auto w = (*r)->ExecShell("head -c 1100m /dev/zero > /big; echo $?", {.timeout = 60});
    ASSERT_TRUE(w.ok());
    EXPECT_NE(w->out, "0\n");
  }
}

// Also: the agent reaches a sandbox in an image derived from the caller's once per host and
// agent build (src/agvisor/sandbox/docker_runtime/agent_image.h), made again when the image is
// rebuilt, the old one pruned after a day.
TEST_F(LifecycleTest, AnyImageWorksEvenOneWithoutAShell) {
  auto docker = ConnectDockerHost(Host());
  ASSERT_TRUE(docker.ok());
  const std::string repo = "agvisor-test/empty";
  const std::string ref = repo + ":" + testing::RunId();
  auto import = [&](const std::string& marker) -> Result<std::string> {
    TarWriter w;
    AGVISOR_RETURN_IF_ERROR(w.AddDirectory("etc"));
    AGVISOR_RETURN_IF_ERROR(w.AddFile("etc/marker", marker));
    const std::string tar = w.Finish();
    std::size_t pos = 0;
    http::BodySource source = [&](std::span<char> buf) -> Result<std::size_t> {
      std::size_t n = std::min(buf.size(), tar.size() - pos);
      std::memcpy(buf.data(), tar.data() + pos, n);
      pos += n;
      return n;
    };
    return (*docker)->ImportImage(repo, testing::RunId(), source, nullptr);
  };
  auto derived = [&]() {
    std::vector<std::string> tags;
    auto list = (*docker)->ListImages({"agvisor.agent.source=" + ref});
    EXPECT_TRUE(list.ok()) << list.error().ToString();
    if (list.ok()) {
      for (const auto& i : *list) tags.insert(tags.end(), i.repo_tags.begin(), i.repo_tags.end());
    }
    return tags;
  };
  auto id = import("empty\n");
  ASSERT_TRUE(id.ok()) << id.error().ToString();
  auto spec = TestSpec();
  spec.image = ref;
  for (int round = 0; round < 2; ++round) {  // the second reuses the derived image
    auto sb = MustCreate(spec);
    ASSERT_TRUE(sb);
    auto v = sb->Exec({std::string(kAgentPath), "version"});
    ASSERT_TRUE(v.ok()) << v.error().ToString();
    EXPECT_EQ(v->exit_code, 0);
    EXPECT_THAT(v->out, HasSubstr("agvisor-agent"));
    auto no_shell = sb->ExecShell("true");
    ASSERT_TRUE(no_shell.ok());
    EXPECT_EQ(no_shell->exit_code, 127);
    auto info = sb->Info();
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->image, ref);  // as the caller named it
    EXPECT_TRUE(sb->Stop().ok());
    EXPECT_EQ(derived(), std::vector<std::string>{AgentImageRef(*id, EmbeddedAgentBinary())});
  }
  // Removed behind this process's back (which still believes it exists): made again.
  ASSERT_TRUE((*docker)->RemoveImage(AgentImageRef(*id, EmbeddedAgentBinary())).ok());
  {
    auto sb = MustCreate(spec);
    ASSERT_TRUE(sb);
    EXPECT_TRUE(sb->Stop().ok());
    EXPECT_EQ(derived(), std::vector<std::string>{AgentImageRef(*id, EmbeddedAgentBinary())});
  }
  // Rebuilt: a new derived image; the old one stays for a day (AgentImagesToPrune).
  auto id2 = import("rebuilt\n");
  ASSERT_TRUE(id2.ok()) << id2.error().ToString();
  ASSERT_NE(*id, *id2);
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  auto marker = sb->ReadFile("/etc/marker");
  ASSERT_TRUE(marker.ok()) << marker.error().ToString();
  EXPECT_EQ(*marker, "rebuilt\n");
  EXPECT_TRUE(sb->Stop().ok());
  auto now_derived = derived();
  EXPECT_NE(
      std::find(now_derived.begin(), now_derived.end(), AgentImageRef(*id2, EmbeddedAgentBinary())),
      now_derived.end());
  auto list = (*docker)->ListImages({"agvisor.agent.source=" + ref});
  ASSERT_TRUE(list.ok());
  for (const auto& i : *list) EXPECT_TRUE((*docker)->RemoveImage(i.id, true).ok());
  EXPECT_TRUE((*docker)->RemoveImage(ref, true).ok());
  (void)(*docker)->RemoveImage(*id, true);
}

TEST_P(LifecycleExecTest, ShellSignalsEnvUserPtyAndListing) {
  auto sb = MustCreate(Spec());
  ASSERT_TRUE(sb);
  // $0 and $$ are those of `sh -c`; a shell killed by a signal reports 128+N.
  auto r = sb->ExecShell("echo \"$0 $#\"; kill -TERM $$");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->prestarted, Warm());
  EXPECT_EQ(r->out, "sh 0\n");
  EXPECT_EQ(r->exit_code, 143);
  // SIGNAL to a started `sh -c`: the whole group gets it, the exit says so.
  auto p = sb->StartProcess({"sh", "-c", "echo up; sleep 100"}, {.stdin = false});
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  std::string out;
  auto started = (*p)->WaitStarted();
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE((*p)->Signal(SIGINT).ok());
  auto exit = (*p)->Wait({.on_stdout = [&](std::string_view b) { out.append(b); }});
  ASSERT_TRUE(exit.ok()) << exit.error().ToString();
  EXPECT_EQ(exit->exit_code, 130);
  EXPECT_EQ(exit->signal, SIGINT);
  EXPECT_EQ(exit->prestarted, Warm());
  // env, cwd and user requests are another key: they start cold, with what they asked for.
  r = sb->ExecShell("echo \"$A $(pwd) $(id -u)\"",
                    {.env = {"A=b"}, .cwd = "/tmp", .user = "65534"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_FALSE(r->prestarted);
  EXPECT_EQ(r->out, "b /tmp 65534\n");
  // The default environment is the same either way. (After the cold execs above, the used
  // shells are replaced once no exec has come or ended for 100 ms: an agent's pause,
  // docs/agent.md.)
  if (Warm()) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto warm_env = sb->ExecShell("env | sort");
  auto cold_env = sb->Exec({"sh", "-c", "env | sort", "sh"});
  ASSERT_TRUE(warm_env.ok() && cold_env.ok());
  EXPECT_EQ(warm_env->prestarted, Warm());
  EXPECT_FALSE(cold_env->prestarted);
  EXPECT_EQ(warm_env->out, cold_env->out);
  // A pty: cold (another key), a terminal as before.
  auto tty = sb->StartProcess({"sh", "-c", "tty"}, {.pty = true});
  ASSERT_TRUE(tty.ok()) << tty.error().ToString();
  std::string tty_out;
  auto tty_exit = (*tty)->Wait({.on_stdout = [&](std::string_view b) { tty_out.append(b); }});
  ASSERT_TRUE(tty_exit.ok());
  EXPECT_FALSE(tty_exit->prestarted);
  EXPECT_EQ(tty_out.rfind("/dev/pts/", 0), 0u) << tty_out;
  // Ready shells are not the host's processes; `ps` inside names them for what they are.
  auto listed = sb->ListProcesses();
  ASSERT_TRUE(listed.ok()) << listed.error().ToString();
  EXPECT_TRUE(listed->empty());
  // With ready shells: the two waiting (a used one is replaced in the background, so the last
  // replacement may come a moment after the exec that used it returned); without: none. `ps` runs
  // without a shell, so it takes none of them.
  std::size_t shells = 0;
  std::string listing;
  const bool settled = testing::WaitFor(
      [&] {
        auto ps = sb->Exec({"ps", "-eo", "args"});
        if (!ps.ok() || ps->prestarted) return false;
        listing = ps->out;
        shells = 0;
        for (std::size_t at = 0;
             (at = listing.find("\nsh -s agvisor-agent ready shell", at)) != std::string::npos;
             ++at) {
          ++shells;
        }
        return shells == (Warm() ? 2u : 0u);
      },
      std::chrono::seconds(10));
  EXPECT_TRUE(settled) << shells << " ready shells 10 s after the last exec:\n" << listing;
}

INSTANTIATE_TEST_SUITE_P(WarmShells, LifecycleExecTest, ::testing::Values(0, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 0 ? std::string("Cold")
                                               : "Warm" + std::to_string(i.param);
                         });

// With AGVISOR_TEST_OVER_SSH=1 (the CTest entry sandbox_lifecycle_ssh_test), the whole suite
// runs against ssh://root@127.0.0.1:PORT through a real sshd started here.
class OverSsh : public ::testing::Environment {
 public:
  void SetUp() override {
    auto s = testing::TestSshd::Start();
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    sshd_ = std::move(s).value();
    std::string args;
    for (const auto& a : sshd_->ssh_args()) args += (args.empty() ? "" : " ") + a;
    ::setenv("AGVISOR_SSH_ARGS", args.c_str(), 1);
    ::setenv("AGVISOR_TEST_HOST", sshd_->url().c_str(), 1);
  }
  void TearDown() override { sshd_.reset(); }

 private:
  std::unique_ptr<testing::TestSshd> sshd_;
};

[[maybe_unused]] auto* const over_kube = testing::AddKubeDoubleIfAsked();

[[maybe_unused]] auto* const over_ssh = [] {
  const char* v = std::getenv("AGVISOR_TEST_OVER_SSH");
  return v && std::string(v) == "1" ? ::testing::AddGlobalTestEnvironment(new OverSsh) : nullptr;
}();

TEST_F(LifecycleTest, RunsAgainstTheIntendedHost) {
  const char* v = std::getenv("AGVISOR_TEST_OVER_SSH");
  auto sb = MustCreate(TestSpec());
  ASSERT_TRUE(sb);
  if (v && std::string(v) == "1") {
    EXPECT_THAT(sb->host(), ::testing::StartsWith("ssh://root@127.0.0.1:"));
  } else if (testing::OverKube()) {
    EXPECT_EQ(sb->host(), testing::kKubeHost);
  } else {
    EXPECT_EQ(sb->host(), "");
  }
}

}  // namespace
}  // namespace agvisor
