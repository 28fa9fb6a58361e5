// The Kubernetes runtime (sandbox/kube_runtime/) end to end against the loopback Kubernetes API
// test double (tests/kube/kube_double.py), whose pods are real runsc containers on the local
// dockerd: Sandbox::Create through kube://, exec and files over the agent channel (an exec of
// `agvisor-agent connect` over the API server's WebSocket), a named sandbox's claim across a
// stop, network none as a deny-all NetworkPolicy, the refusals, and the agvisor CLI.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "agvisor/base/subprocess.h"
#include "agvisor/sandbox/agent_blob.h"
#include "agvisor/sandbox/kube_runtime/pod_manifest.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/snapshot.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using testing::RunId;
using testing::TestSpec;

constexpr const char* kHost = "kube://agvisor-double/default";

Result<CommandOutput> Sh(const std::string& script, std::string_view input = {}) {
  return RunCommand({"sh", "-c", script}, input);
}

// The double, started once for the suite: its kubeconfig in $KUBECONFIG, the agent image built
// from this build's agent, the gvisor RuntimeClass made.
class KubeEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/agvisor-kube-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    kubeconfig_ = dir_ + "/kubeconfig";

    // The agent image: the agent and busybox (the installer's cp), imported as docs/kubernetes.md
    // says.
    const std::string root = dir_ + "/agent-root";
    ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((root + "/bin").c_str(), 0755), 0);
    {
      std::ofstream out(root + "/agvisor-agent", std::ios::binary);
      const auto blob = EmbeddedAgentBinary();
      out.write(blob.data(), static_cast<std::streamsize>(blob.size()));
    }
    ASSERT_EQ(::chmod((root + "/agvisor-agent").c_str(), 0755), 0);
    auto image = Sh("cp /bin/busybox " + root + "/bin/busybox && tar -C " + root +
                    " -c . | docker import - " + AgentImageRefForKube());
    ASSERT_TRUE(image.ok() && image->status.success())
        << (image.ok() ? image->err : image.error().ToString());

    const char* script = std::getenv("AGVISOR_KUBE_DOUBLE");
    std::string path = script && *script ? script : AGVISOR_KUBE_DOUBLE;
    auto p = Subprocess::Spawn(
        {.argv = {"/usr/bin/python3", path, "--kubeconfig", kubeconfig_, "--namespace", "default"},
         .pipe_stdout = true});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    double_ = std::make_unique<Subprocess>(std::move(*p));
    std::string line;
    char c;
    while (::read(double_->stdout_fd().get(), &c, 1) == 1 && c != '\n') line += c;
    ASSERT_EQ(line.rfind("READY https://127.0.0.1:", 0), 0u) << "the double said: " << line;
    ::setenv("KUBECONFIG", kubeconfig_.c_str(), 1);

    // --validate=false: the double serves no OpenAPI documents (tests/kube/README.md).
    auto rc = Sh("kubectl --kubeconfig " + kubeconfig_ + " apply --validate=false -f -",
                 "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gvisor\n"
                 "handler: runsc\n---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\n"
                 "metadata:\n  name: plain\nhandler: runc\n");
    ASSERT_TRUE(rc.ok() && rc->status.success()) << (rc.ok() ? rc->err : rc.error().ToString());
  }

  void TearDown() override {
    if (double_) {
      (void)double_->Kill(SIGTERM);  // it removes its containers and volumes
      (void)double_->WaitFor(std::chrono::seconds(60));
    }
    (void)Sh("rm -rf " + dir_);
  }

 private:
  std::string dir_, kubeconfig_;
  std::unique_ptr<Subprocess> double_;
};

::testing::Environment* const kKubeEnv = ::testing::AddGlobalTestEnvironment(new KubeEnv());

SandboxSpec KubeSpec(std::optional<std::string> name = std::nullopt) {
  SandboxSpec s = TestSpec();
  s.host = kHost;
  // Pod names are DNS names: lower-case.
  if (name) s.name = RunId() + "-" + *name;
  return s;
}

TEST(KubeRuntimeTest, CreateExecFilesStop) {
  auto sb = Sandbox::Create(KubeSpec());
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto r = (*sb)->Exec({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  // The agent is PID 1 and enforces timeouts on the whole tree.
  auto pid1 = (*sb)->Exec({"cat", "/proc/1/cmdline"});
  ASSERT_TRUE(pid1.ok());
  EXPECT_NE(pid1->out.find("agvisor-agent"), std::string::npos);
  auto slow = (*sb)->Exec({"sleep", "30"}, {.timeout = 1});
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(slow->exit_code, 124);

  std::string data(300 * 1024, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  ASSERT_TRUE((*sb)->WriteFile("/tmp/blob", data).ok());
  auto back = (*sb)->ReadFile("/tmp/blob");
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(*back, data);

  // A second handle opens its channel with an exec relay, as a resumed one does.
  auto info = (*sb)->Info();
  ASSERT_TRUE(info.ok());
  auto other = Sandbox::Open(info->container_name, kHost);
  ASSERT_TRUE(other.ok()) << other.error().ToString();
  auto seen = (*other)->ReadFile("/tmp/blob");
  ASSERT_TRUE(seen.ok()) << seen.error().ToString();
  EXPECT_EQ(seen->size(), data.size());

  auto listed = Sandbox::List(kHost);
  ASSERT_TRUE(listed.ok()) << listed.error().ToString();
  bool found = false;
  for (const auto& s : *listed) found |= s.container_name == info->container_name;
  EXPECT_TRUE(found);

  ASSERT_TRUE((*sb)->Stop().ok());
  auto gone = Sandbox::Open(info->container_name, kHost);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kNotFound);
}

TEST(KubeRuntimeTest, NamedSandboxKeepsItsWorkspaceClaim) {
  SandboxSpec spec = KubeSpec("keep");
  {
    auto sb = Sandbox::Create(spec);
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    ASSERT_TRUE((*sb)->WriteFile("/workspace/note", "kept").ok());
    ASSERT_TRUE((*sb)->Stop().ok());
  }
  auto again = Sandbox::Create(spec);
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  auto note = (*again)->ReadFile("/workspace/note");
  ASSERT_TRUE(note.ok()) << note.error().ToString();
  EXPECT_EQ(*note, "kept");
  ASSERT_TRUE((*again)->Delete().ok());
}

TEST(KubeRuntimeTest, NetworkNoneIsADenyAllPolicy) {
  SandboxSpec spec = KubeSpec();
  spec.network = "none";
  auto sb = Sandbox::Create(spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  // The double runs a pod under a deny-all policy with no network: loopback only.
  auto dev = (*sb)->Exec({"cat", "/proc/net/dev"});
  ASSERT_TRUE(dev.ok()) << dev.error().ToString();
  EXPECT_NE(dev->out.find("lo:"), std::string::npos) << dev->out;
  EXPECT_EQ(dev->out.find("eth0:"), std::string::npos) << dev->out;
  ASSERT_TRUE((*sb)->Stop().ok());
}

TEST(KubeRuntimeTest, Refusals) {
  SandboxSpec plain = KubeSpec();
  plain.runtime = "plain";  // a RuntimeClass whose handler is runc
  auto e = Sandbox::Create(plain);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.error().message().find("only on gVisor"), std::string::npos) << e.error().message();
  SandboxSpec missing = KubeSpec();
  missing.runtime = "nosuchclass";
  e = Sandbox::Create(missing);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("no RuntimeClass 'nosuchclass'"), std::string::npos);
  auto sb = Sandbox::Create(KubeSpec());
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto paused = (*sb)->Pause();
  ASSERT_FALSE(paused.ok());
  EXPECT_EQ(paused.error().code(), ErrorCode::kUnsupported);
  // The other lifecycle verbs of issue 19 that need the host are refused the same way, saying
  // why (docs/lifecycle.md); the sandbox runs on.
  auto resized = (*sb)->Update({.memory = "768m"});
  ASSERT_FALSE(resized.ok());
  EXPECT_EQ(resized.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(resized.error().message().find("fixed at create"), std::string::npos)
      << resized.error().ToString();
  SnapshotOptions so;
  so.image = "agvisor-test/kube-snapshot:refused";
  auto snap = (*sb)->Snapshot(so);
  ASSERT_FALSE(snap.ok());
  EXPECT_EQ(snap.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(snap.error().message().find("makes no images"), std::string::npos)
      << snap.error().ToString();
  auto still = (*sb)->Exec({"echo", "running"});
  ASSERT_TRUE(still.ok()) << still.error().ToString();
  EXPECT_EQ(still->out, "running\n");
  ASSERT_TRUE((*sb)->Stop().ok());
}

TEST(KubeRuntimeTest, CliRunsACommand) {
  auto out = RunCommand({AGVISOR_CLI_BINARY, "--host", kHost, "run", "--", "echo", "hi"});
  ASSERT_TRUE(out.ok()) << out.error().ToString();
  EXPECT_TRUE(out->status.success()) << out->err;
  EXPECT_EQ(out->out, "hi\n");
}

}  // namespace
}  // namespace agvisor
