// gVisor platforms (SandboxSpec::platform) on the real dockerd + runsc (label `integration`): a
// ptrace sandbox runs its commands on the runtime scripts/setup-host registers for ptrace
// (runsc-ptrace; network none on its twin runsc-ptrace-none), and Docker's record of the container
// and runsc's own sentry process say so; a named one comes back on ptrace when made again without
// a platform; a bad platform value is refused before anything is made on the host. ptrace is the
// default (issue 36: an idle systrap sandbox keeps ~4% of a CPU busy); a runtime without a ptrace
// runtime of its own falls back to systrap with one warning per host. The host must have
// runsc-ptrace registered (setup-host does): its absence fails, as a missing daemon does. On
// ptrace the agent's exec pipes are raised for bulk output, and output comes back whole.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/runtimes.h"
#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadAll;
using testing::TestSpec;

class PlatformTest : public ::testing::Test {
 protected:
  void TearDown() override { testing::CleanupRun(); }

  docker::ContainerInfo Inspect(const std::string& container) {
    auto docker = ConnectDockerHost(TestSpec().host);
    EXPECT_TRUE(docker.ok()) << docker.error().ToString();
    if (!docker.ok()) return {};
    auto info = (*docker)->InspectContainer(container);
    EXPECT_TRUE(info.ok()) << info.error().ToString();
    return info.ok() ? *info : docker::ContainerInfo{};
  }
};

// The command line of the container's sentry (runsc-sandbox) on this machine: the platform runsc
// really runs, whatever the runtime is called. "" for a remote test host.
std::string SentryCommandLine(const std::string& container_id) {
  if (!TestSpec().host.empty()) return "";
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string n = e.path().filename();
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = ReadAll(e.path().string() + "/cmdline");
    if (!cmd.starts_with("runsc-sandbox") || cmd.find(container_id) == std::string::npos) continue;
    for (char& c : cmd) c = c == '\0' ? ' ' : c;
    return cmd;
  }
  return "(no runsc-sandbox process of " + container_id + ")";
}

TEST_F(PlatformTest, APtraceSandboxRunsOnThePtraceRuntime) {
  SandboxSpec spec = TestSpec();  // the default: ptrace
  auto sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto r = (*sb)->ExecShell("echo $((6 * 7))");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->out, "42\n");
  // Under gVisor too, a command's stdout pipe holds 1 MiB (agent/spawn.h: on ptrace each of the
  // agent's system calls is a trip through the tracer, so bulk output moves in fewer reads), and
  // the output that comes through those larger reads is the command's, byte for byte.
  auto pipe = (*sb)->Exec({"perl", "-e", "print fcntl(STDOUT, 1032, 0)"});
  ASSERT_TRUE(pipe.ok()) << pipe.error().ToString();
  EXPECT_EQ(pipe->out, "1048576") << pipe->err;
  auto seq = (*sb)->Exec({"seq", "1", "1500000"});
  ASSERT_TRUE(seq.ok()) << seq.error().ToString();
  std::string expected;
  for (int i = 1; i <= 1500000; ++i) expected += std::to_string(i) + "\n";
  EXPECT_EQ(seq->out.size(), expected.size());
  EXPECT_TRUE(seq->out == expected) << "the output came back different";
  auto info = Inspect((*sb)->container_name());
  EXPECT_EQ(info.host_config.runtime, "runsc-ptrace");
  EXPECT_FALSE(info.network_disabled);
  EXPECT_EQ(info.labels["agvisor.platform"], "ptrace");
  auto mine = (*sb)->Info();
  ASSERT_TRUE(mine.ok()) << mine.error().ToString();
  EXPECT_EQ(mine->platform, "ptrace");
  const std::string sentry = SentryCommandLine(info.id);
  if (!sentry.empty()) {
    EXPECT_THAT(sentry, HasSubstr("--platform=ptrace"));
  }

  // systrap when asked: runsc itself, whose sentry has no --platform of ours.
  SandboxSpec systrap = TestSpec();
  systrap.platform = "systrap";
  auto plain = CreateSandbox(systrap);
  ASSERT_TRUE(plain.ok()) << plain.error().ToString();
  auto pinfo = Inspect((*plain)->container_name());
  EXPECT_EQ(pinfo.host_config.runtime, "runsc");
  EXPECT_EQ(pinfo.labels["agvisor.platform"], "systrap");
  const std::string psentry = SentryCommandLine(pinfo.id);
  if (!psentry.empty()) {
    EXPECT_THAT(psentry, Not(HasSubstr("--platform=ptrace")));
  }
  auto listed = ListSandboxes(spec.host);
  ASSERT_TRUE(listed.ok()) << listed.error().ToString();
  int seen = 0;
  for (const auto& i : *listed) {
    if (i.container_name == (*sb)->container_name()) {
      EXPECT_EQ(i.platform, "ptrace");
      ++seen;
    } else if (i.container_name == (*plain)->container_name()) {
      EXPECT_EQ(i.platform, "systrap");
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
  EXPECT_TRUE((*sb)->Stop().ok());
  EXPECT_TRUE((*plain)->Stop().ok());
}

TEST_F(PlatformTest, NetworkNoneOnPtraceRunsOnItsTwin) {
  SandboxSpec spec = TestSpec();
  spec.platform = "ptrace";
  spec.network = "none";
  auto sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  // gVisor's own stack, loopback only: lo and nothing else.
  auto r = (*sb)->ExecShell("cat /proc/net/dev");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_THAT(r->out, AllOf(HasSubstr("lo:"), Not(HasSubstr("eth0"))));
  auto info = Inspect((*sb)->container_name());
  EXPECT_EQ(info.host_config.runtime, "runsc-ptrace-none");
  EXPECT_TRUE(info.network_disabled);
  const std::string sentry = SentryCommandLine(info.id);
  if (!sentry.empty()) {
    EXPECT_THAT(sentry, AllOf(HasSubstr("--platform=ptrace"), HasSubstr("--network=none")));
  }
  EXPECT_TRUE((*sb)->Stop().ok());
}

TEST_F(PlatformTest, ANamedSandboxComesBackOnPtrace) {
  SandboxSpec spec = TestSpec("pt");
  spec.platform = "ptrace";
  auto first = CreateSandbox(spec);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  ASSERT_TRUE((*first)->ExecShell("echo kept > /workspace/f").ok());
  ASSERT_TRUE((*first)->Stop().ok());

  SandboxSpec other = TestSpec("pt");
  other.platform = "systrap";
  auto refused = CreateSandbox(other);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(refused.error().message(), HasSubstr("made on gVisor platform 'ptrace'"));

  auto again = CreateSandbox(TestSpec("pt"));  // no platform: its own
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_EQ(Inspect((*again)->container_name()).host_config.runtime, "runsc-ptrace");
  auto r = (*again)->ExecShell("cat /workspace/f");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "kept\n");
  EXPECT_TRUE((*again)->Delete().ok());
}

// A runtime the host has no ptrace runtime for (runsc-none: no runsc-none-ptrace is registered)
// falls back to systrap: the first create through a runtime object (a place, agvisord: one per
// host) says so in its warning, the later ones do not; the default runtime still gets ptrace.
TEST_F(PlatformTest, WithoutAPtraceRuntimeTheDefaultFallsBackToSystrapWithOneWarning) {
  auto runtime = MakeRuntime(TestSpec().host);
  ASSERT_TRUE(runtime.ok()) << runtime.error().ToString();
  SandboxSpec spec = TestSpec();
  spec.runtime = "runsc-none";
  spec.network = "none";
  auto first = Sandbox::Create(*runtime, spec);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_THAT((*first)->disk_warning(),
              AllOf(HasSubstr("systrap"), HasSubstr("not the default ptrace"),
                    HasSubstr("runsc-none-ptrace"), HasSubstr("agvisor doctor")));
  auto info = Inspect((*first)->container_name());
  EXPECT_EQ(info.host_config.runtime, "runsc-none");
  EXPECT_EQ(info.labels["agvisor.platform"], "systrap");
  auto r = (*first)->ExecShell("echo up");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "up\n");

  auto second = Sandbox::Create(*runtime, spec);
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  EXPECT_THAT((*second)->disk_warning(), Not(HasSubstr("platform")));  // once per host
  EXPECT_EQ(Inspect((*second)->container_name()).labels["agvisor.platform"], "systrap");

  auto standard = Sandbox::Create(*runtime, TestSpec());
  ASSERT_TRUE(standard.ok()) << standard.error().ToString();
  EXPECT_THAT((*standard)->disk_warning(), Not(HasSubstr("platform")));
  EXPECT_EQ(Inspect((*standard)->container_name()).host_config.runtime, "runsc-ptrace");
  for (auto* sb : {&*first, &*second, &*standard}) EXPECT_TRUE((*sb)->Stop().ok());
}

TEST_F(PlatformTest, ABadPlatformIsRefusedBeforeAnythingIsMade) {
  SandboxSpec spec = TestSpec("bad");
  spec.platform = "kvm";
  auto sb = CreateSandbox(spec);
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(sb.error().message(),
              AllOf(HasSubstr("platform 'kvm'"), HasSubstr("systrap"), HasSubstr("ptrace")));
  auto docker = ConnectDockerHost(spec.host);
  ASSERT_TRUE(docker.ok()) << docker.error().ToString();
  const std::string run = std::string(testing::kRunLabel) + "=" + testing::RunId();
  auto containers = (*docker)->ListContainers(true, {run});
  ASSERT_TRUE(containers.ok()) << containers.error().ToString();
  EXPECT_TRUE(containers->empty());
  auto volumes = (*docker)->ListVolumes({run});
  ASSERT_TRUE(volumes.ok()) << volumes.error().ToString();
  EXPECT_TRUE(volumes->empty());
}

}  // namespace
}  // namespace agvisor
