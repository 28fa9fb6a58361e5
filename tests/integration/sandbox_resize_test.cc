// Live resize against the real dockerd + runsc (label `integration`; docs/lifecycle.md, "Live
// resize"): a lowered memory cap ends the sandbox past it exactly as a create-time cap does
// (out of memory), a raised one lets a bigger allocation through, a CPU quota is measured on the
// host, pids count the processes inside (on ptrace and systrap), /workspace and a root-fs change
// are byte-identical across a resize, and an ssh:// host is refused with the reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "agvisor/base/fs.h"
#include "agvisor/sandbox/docker_runtime/cgroup_limits.h"
#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/sshd.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;
using testing::TestSpec;
using namespace std::chrono_literals;

// Writes `mib` MiB of bytes in Python (every page touched), then prints "ok".
std::string Allocate(int mib) {
  return "python3 -c 'b = b\"x\" * (" + std::to_string(mib) + " << 20); print(\"ok\")'";
}

class ResizeTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { testing::CleanupRun(); }
  static SandboxSpec Spec(std::optional<std::string> name = std::nullopt) {
    SandboxSpec s = TestSpec(std::move(name));
    s.host = "";  // the cgroup files are on this machine's Docker host
    return s;
  }
  static std::unique_ptr<Sandbox> MustCreate(const SandboxSpec& spec) {
    auto sb = CreateSandbox(spec);
    EXPECT_TRUE(sb.ok()) << sb.error().ToString();
    return sb.ok() ? std::move(*sb) : nullptr;
  }
  // The sandbox's cgroup directories on this machine, as the runtime finds them.
  static CgroupPaths Cgroup(Sandbox& sb) {
    auto docker = ConnectDockerHost("");
    EXPECT_TRUE(docker.ok());
    auto c = (*docker)->InspectContainer(sb.container_name());
    EXPECT_TRUE(c.ok());
    auto p = FindContainerCgroup(c->id, c->state.pid);
    EXPECT_TRUE(p.ok()) << p.error().ToString();
    return p.ok() ? *p : CgroupPaths{};
  }
  // CPU time the sandbox's cgroup (gVisor's sentry and everything in it) used, in seconds. On
  // cgroup v1, cpuacct may be mounted apart from cpu (it is on these hosts).
  static double CpuSeconds(const CgroupPaths& p) {
    if (p.version == CgroupVersion::kV1) {
      auto s = ReadSmallFile(p.cpu + "/cpuacct.usage", 64);
      if (!s) {
        const std::string cpu_root = "/sys/fs/cgroup/cpu";
        if (p.cpu.rfind(cpu_root + "/", 0) != 0) return -1;
        s = ReadSmallFile(
            "/sys/fs/cgroup/cpuacct" + p.cpu.substr(cpu_root.size()) + "/cpuacct.usage", 64);
      }
      return s ? std::stod(*s) / 1e9 : -1;
    }
    return StatField(p, "usage_usec") / 1e6;
  }
  // A number of the cpu controller's cpu.stat ("nr_throttled", v2's "usage_usec"); -1 if none.
  static double StatField(const CgroupPaths& p, const std::string& key) {
    auto s = ReadSmallFile(p.cpu + "/cpu.stat", 4096);
    if (!s) return -1;
    auto at = s->find(key + " ");
    return at == std::string::npos ? -1 : std::stod(s->substr(at + key.size() + 1));
  }
  struct CpuWindow {
    double cores = 0;      // CPU time over wall time
    double throttled = 0;  // periods in which the quota ran out
  };
  static CpuWindow Measure(const CgroupPaths& p, std::chrono::milliseconds window) {
    const double a = CpuSeconds(p), ta = StatField(p, "nr_throttled");
    auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(window);
    const double b = CpuSeconds(p), tb = StatField(p, "nr_throttled");
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return {(b - a) / wall, tb - ta};
  }
};

// Lowered: past the new cap the whole sandbox ends, reported as out of memory exactly as a
// create-time cap is (LifecycleTest.OutOfMemoryIsReportedAndNamedSandboxComesBack), naming the
// new cap; before that, /workspace and a root-fs change are unchanged by the resize, and the
// sandbox still sees its create-time MemTotal.
TEST_F(ResizeTest, LoweredMemoryEndsTheSandboxPastItAsOutOfMemory) {
  SandboxSpec spec = Spec("resize-down");
  spec.limits.memory = "1g";
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  auto data = sb->ExecShell(
      "head -c 8000000 /dev/urandom > /workspace/blob && head -c 3000000 /dev/urandom > "
      "/opt/rootfs-change && sha256sum /workspace/blob /opt/rootfs-change && grep MemTotal "
      "/proc/meminfo");
  ASSERT_TRUE(data.ok() && data->exit_code == 0) << (data.ok() ? data->err : "");
  // 400 MiB fits in 1g.
  auto fits = sb->ExecShell(Allocate(400), {.timeout = 60});
  ASSERT_TRUE(fits.ok()) << fits.error().ToString();
  EXPECT_EQ(fits->out, "ok\n") << fits->err;

  auto live = sb->Update({.memory = "256m"});
  ASSERT_TRUE(live.ok()) << live.error().ToString();
  EXPECT_EQ(live->memory_bytes, 256LL << 20);
  EXPECT_EQ(live->source, "cgroup");
  auto info = sb->Info();
  ASSERT_TRUE(info.ok() && info->limits);
  EXPECT_EQ(info->limits->memory_bytes, 256LL << 20);
  // Same data, and the same MemTotal line: the sandbox is not told (gVisor read it at start).
  auto again =
      sb->ExecShell("sha256sum /workspace/blob /opt/rootfs-change && grep MemTotal /proc/meminfo");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->out, data->out);
  if (auto at = again->out.rfind("MemTotal"); at != std::string::npos) {
    std::printf("inside after the resize to 256m: %s", again->out.substr(at).c_str());
  }

  auto r = sb->ExecShell(Allocate(400), {.timeout = 60});
  ASSERT_FALSE(r.ok()) << "exit " << r->exit_code << " out " << r->out << " err " << r->err;
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied);
  EXPECT_THAT(r.error().message(), HasSubstr("out of memory (limits.memory=256m)"));
  info = sb->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->end_reason, EndReason::kOutOfMemory);
  // A named sandbox comes back on its volume, at its create-time limits.
  auto back = MustCreate(spec);
  ASSERT_TRUE(back);
  auto kept = back->ExecShell("sha256sum /workspace/blob");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->out, data->out.substr(0, data->out.find('\n') + 1));
  ASSERT_TRUE(back->Delete().ok());
}

// Raised: an allocation the create-time cap would have ended the sandbox for goes through.
TEST_F(ResizeTest, RaisedMemoryLetsABiggerAllocationThrough) {
  SandboxSpec spec = Spec();
  spec.limits.memory = "256m";
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  auto live = sb->Update({.memory = "1g"});
  ASSERT_TRUE(live.ok()) << live.error().ToString();
  EXPECT_EQ(live->memory_bytes, 1LL << 30);
  auto r = sb->ExecShell(Allocate(400), {.timeout = 60});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "ok\n") << r->err;
  ASSERT_TRUE(sb->Stop().ok());
}

// Below what the sandbox uses now: the kernel cannot reclaim it, the call is refused naming how
// much it uses, and nothing changed (the sandbox runs on at its old cap).
TEST_F(ResizeTest, MemoryBelowWhatItUsesIsRefusedAndNothingChanges) {
  SandboxSpec spec = Spec();
  spec.limits.memory = "1g";
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  // Hold 300 MiB in a background process.
  auto pid = sb->StartBackground({"python3", "-c",
                                  "import time\nb = b'x' * (300 << 20)\n"
                                  "open('/tmp/held', 'w').close()\n"
                                  "time.sleep(600)"});
  ASSERT_TRUE(pid.ok()) << pid.error().ToString();
  ASSERT_TRUE(testing::WaitFor([&] { return sb->Stat("/tmp/held").ok(); }, 30s));
  auto r = sb->Update({.memory = "64m"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kConflict) << r.error().ToString();
  EXPECT_THAT(r.error().message(), HasSubstr("below what the sandbox uses now"));
  auto info = sb->Info();
  ASSERT_TRUE(info.ok() && info->running && info->limits);
  EXPECT_EQ(info->limits->memory_bytes, 1LL << 30);
  EXPECT_TRUE(sb->Exec({"true"}).ok());
  ASSERT_TRUE(sb->Stop().ok());
}

// CPU: two busy loops inside. Resized to 0.25, the sandbox's cgroup uses at most the quota
// (x3 for a loaded 2-core host) and the kernel throttles it in most periods; resized back to 2
// (all of this host's cores) it is throttled in far fewer. Cores used are printed.
TEST_F(ResizeTest, CpuQuotaIsEnforcedAsMeasuredOnTheHost) {
  SandboxSpec spec = Spec();
  spec.limits.cpus = 2;
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(sb->StartBackground({"sh", "-c", "while :; do :; done"}).ok());
  }
  const CgroupPaths cg = Cgroup(*sb);
  ASSERT_GE(CpuSeconds(cg), 0);
  ASSERT_GE(StatField(cg, "nr_throttled"), 0);
  std::this_thread::sleep_for(1s);
  const CpuWindow before = Measure(cg, 3s);
  auto live = sb->Update({.cpus = 0.25});
  ASSERT_TRUE(live.ok()) << live.error().ToString();
  EXPECT_DOUBLE_EQ(live->cpus, 0.25);
  std::this_thread::sleep_for(500ms);
  const CpuWindow low = Measure(cg, 3s);
  live = sb->Update({.cpus = 2});
  ASSERT_TRUE(live.ok()) << live.error().ToString();
  std::this_thread::sleep_for(500ms);
  const CpuWindow high = Measure(cg, 3s);
  std::printf(
      "2 busy loops, cores used (periods throttled) over 3 s: cpus=2 %.2f (%.0f), resized to "
      "0.25 %.2f (%.0f), back to 2 %.2f (%.0f)\n",
      before.cores, before.throttled, low.cores, low.throttled, high.cores, high.throttled);
  RecordProperty("cores_at_quarter", std::to_string(low.cores));
  EXPECT_LE(low.cores, 0.25 * 3) << "the quota is not enforced";
  EXPECT_GE(low.throttled, 10) << "3 s is 30 periods of 100 ms: most should hit the quota";
  EXPECT_LT(high.throttled, low.throttled / 3) << "the raised quota did not take";
  ASSERT_TRUE(sb->Stop().ok());
}

// Forks `n` sleeping children in Python, prints "all N" once they all run, then ends them.
std::string ForkSleepers(int n) {
  return "python3 -c '\nimport os, time\nkids = []\nfor _ in range(" + std::to_string(n) +
         "):\n  pid = os.fork()\n  if pid == 0:\n    time.sleep(60)\n    os._exit(0)\n"
         "  kids.append(pid)\ntime.sleep(0.5)\nprint(\"all\", len(kids))\nfor k in kids:\n"
         "  os.kill(k, 9)\n  os.waitpid(k, 0)\n'";
}

// pids are the processes inside the sandbox, on ptrace (about 9 host tasks per waiting process)
// as on systrap (about 2): the host's cap, which Docker and a live resize write, is scaled by
// the sandbox's platform, and every door reads the caller's number back. Past it, gVisor
// cannot make a host task and the whole sandbox ends, reported as the pids limit. On ptrace
// gVisor keeps the host tasks of ended processes for reuse, so a cap below that high-water
// mark is refused (kConflict).
TEST_F(ResizeTest, PidsCountTheProcessesInsideAtCreateAndAfterAResize) {
  SandboxSpec spec = Spec();
  spec.platform = "ptrace";
  spec.limits.pids = 64;
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  const CgroupPaths cg = Cgroup(*sb);
  auto host_cap = [&](const CgroupPaths& p) { return ReadSmallFile(p.pids + "/pids.max", 64); };
  EXPECT_EQ(host_cap(cg), std::to_string(HostPidsCap("ptrace", 64)) + "\n");
  auto lowered = sb->Update({.pids = 32});
  ASSERT_TRUE(lowered.ok()) << lowered.error().ToString();
  EXPECT_EQ(lowered->pids, 32);
  EXPECT_EQ(host_cap(cg), std::to_string(HostPidsCap("ptrace", 32)) + "\n");
  auto info = sb->Info();
  ASSERT_TRUE(info.ok() && info->limits);
  EXPECT_EQ(info->limits->pids, 32);
  // 25 waiting processes fit under 32 (with the agent, its ready shells and this exec's python).
  auto fit32 = sb->ExecShell(ForkSleepers(25), {.timeout = 60});
  ASSERT_TRUE(fit32.ok()) << fit32.error().ToString();
  EXPECT_EQ(fit32->out, "all 25\n") << fit32->err;
  auto up = sb->Update({.pids = 64});
  ASSERT_TRUE(up.ok()) << up.error().ToString();
  auto fit64 = sb->ExecShell(ForkSleepers(56), {.timeout = 60});
  ASSERT_TRUE(fit64.ok()) << fit64.error().ToString();
  EXPECT_EQ(fit64->out, "all 56\n") << fit64->err;
  auto now = ReadSmallFile(cg.pids + "/pids.current", 64);
  ASSERT_TRUE(now.has_value());
  // The host's tasks of those processes stay (ptrace reuses them): a cap below them is refused.
  auto refused = sb->Update({.pids = 1});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(refused.error().message(), HasSubstr("host tasks gVisor runs"));
  EXPECT_EQ(host_cap(cg), std::to_string(HostPidsCap("ptrace", 64)) + "\n");  // unchanged
  // Well past 64: the sandbox ends, and that is what is reported.
  auto burst = sb->ExecShell(ForkSleepers(200), {.timeout = 60});
  std::printf(
      "pids on ptrace: 56 waiting processes ran under pids=64 (%lld host tasks after, "
      "cap %lld); 200: %s\n",
      std::stoll(*now), static_cast<long long>(HostPidsCap("ptrace", 64)),
      burst.ok() ? burst->out.c_str() : burst.error().ToString().c_str());
  ASSERT_FALSE(burst.ok()) << "200 processes ran under pids=64";
  EXPECT_EQ(burst.error().code(), ErrorCode::kSandboxDied);
  EXPECT_THAT(burst.error().message(), HasSubstr("the pids limit"));

  // A sandbox made on systrap keeps systrap's scale across a resize.
  spec.platform = "systrap";
  spec.limits.pids = 100;
  auto sys = MustCreate(spec);
  ASSERT_TRUE(sys);
  const CgroupPaths scg = Cgroup(*sys);
  EXPECT_EQ(host_cap(scg), std::to_string(HostPidsCap("systrap", 100)) + "\n");
  auto half = sys->Update({.pids = 50});
  ASSERT_TRUE(half.ok()) << half.error().ToString();
  EXPECT_EQ(half->pids, 50);
  EXPECT_EQ(host_cap(scg), std::to_string(HostPidsCap("systrap", 50)) + "\n");
  auto fit50 = sys->ExecShell(ForkSleepers(42), {.timeout = 60});
  ASSERT_TRUE(fit50.ok()) << fit50.error().ToString();
  EXPECT_EQ(fit50->out, "all 42\n") << fit50->err;
}

// An ssh:// host: the cgroup files are on the other machine; refused with the reason and the
// way out, nothing written (the same sandbox, reached over a loopback sshd).
TEST_F(ResizeTest, AnSshHostIsRefusedWithTheReason) {
  auto sb = MustCreate(Spec());
  ASSERT_TRUE(sb);
  auto sshd = testing::TestSshd::Start();
  ASSERT_TRUE(sshd.ok()) << sshd.error().ToString();
  std::string args;
  for (const auto& a : (*sshd)->ssh_args()) args += (args.empty() ? "" : " ") + a;
  ::setenv("AGVISOR_SSH_ARGS", args.c_str(), 1);
  {
    auto remote = OpenSandbox(sb->container_name(), (*sshd)->url());
    ASSERT_TRUE(remote.ok()) << remote.error().ToString();
    auto r = (*remote)->Update({.memory = "256m"});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kUnsupported);
    EXPECT_THAT(r.error().message(), HasSubstr("cgroup files on the Docker host"));
    EXPECT_THAT(r.error().message(), HasSubstr("agvisord on that host"));
    auto info = (*remote)->Info();  // reading works: Docker's record of create time
    ASSERT_TRUE(info.ok() && info->limits);
    EXPECT_EQ(info->limits->source, "created");
    EXPECT_EQ(info->limits->memory_bytes, 512LL << 20);
  }
  ::unsetenv("AGVISOR_SSH_ARGS");
  auto local = sb->Info();
  ASSERT_TRUE(local.ok() && local->limits);
  EXPECT_EQ(local->limits->memory_bytes, 512LL << 20);  // unchanged
  ASSERT_TRUE(sb->Stop().ok());
}

}  // namespace
}  // namespace agvisor
