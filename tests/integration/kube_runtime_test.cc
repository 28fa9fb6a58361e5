// The Kubernetes runtime (sandbox/kube_runtime/) end to end against the loopback Kubernetes API
// test double (tests/kube/kube_double.py), whose pods are real runsc containers on the local
// dockerd: what only Kubernetes has (network none as a deny-all NetworkPolicy, RuntimeClasses, the
// refusals) and the agvisor CLI through kube://. Exec, files, processes, named workspaces and the
// channel are the shared suites' (sandbox_lifecycle_kube_test, sandbox_channel_kube_test: the
// Docker suites' binaries on this runtime).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <span>
#include <string>
#include <string_view>

#include "agvisor/base/subprocess.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/snapshot.h"
#include "tests/integration/kube_double.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using testing::RunId;
using testing::TestSpec;

constexpr const char* kHost = testing::kKubeHost;

::testing::Environment* const kKubeEnv =
    ::testing::AddGlobalTestEnvironment(new testing::KubeDoubleEnv());

SandboxSpec KubeSpec(std::optional<std::string> name = std::nullopt) {
  SandboxSpec s = TestSpec();
  s.host = kHost;
  // Pod names are DNS names: lower-case.
  if (name) s.name = RunId() + "-" + *name;
  return s;
}

TEST(KubeRuntimeTest, NetworkNoneIsADenyAllPolicy) {
  SandboxSpec spec = KubeSpec();
  spec.network = "none";
  auto sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  // The agent is PID 1 (no --channel-stdio: the channel is an exec relay).
  auto pid1 = (*sb)->Exec({"cat", "/proc/1/cmdline"});
  ASSERT_TRUE(pid1.ok()) << pid1.error().ToString();
  EXPECT_NE(pid1->out.find("agvisor-agent"), std::string::npos) << pid1->out;
  EXPECT_EQ(pid1->out.find("--channel-stdio"), std::string::npos) << pid1->out;
  // The double runs a pod under a deny-all policy with no network: loopback only.
  auto dev = (*sb)->Exec({"cat", "/proc/net/dev"});
  ASSERT_TRUE(dev.ok()) << dev.error().ToString();
  EXPECT_NE(dev->out.find("lo:"), std::string::npos) << dev->out;
  EXPECT_EQ(dev->out.find("eth0:"), std::string::npos) << dev->out;
  ASSERT_TRUE((*sb)->Stop().ok());
}

// kubectl against the double ($KUBECONFIG: KubeDoubleEnv).
Result<CommandOutput> Kubectl(std::vector<std::string> args, std::string_view input = {}) {
  args.insert(args.begin(), "kubectl");
  return RunCommand(std::move(args), input);
}

// The resourceVersion `kind` NAME was created with, from the ADDED event of a watch that starts
// at the beginning of the double's event log (a later version of a pod is its status's): 0 when
// none was seen.
long long CreatedVersion(const std::string& plural_path, const std::string& name) {
  auto w = Kubectl({"get", "--raw",
                    plural_path + "?watch=1&resourceVersion=1&timeoutSeconds=1&fieldSelector=" +
                        "metadata.name%3D" + name});
  if (!w.ok() || !w->status.success()) return 0;
  static const std::regex kAdded(R"re(^\{"type": "ADDED".*?"resourceVersion": "([0-9]+)")re");
  std::smatch m;
  for (std::size_t pos = 0; pos < w->out.size();) {
    std::size_t end = w->out.find('\n', pos);
    if (end == std::string::npos) end = w->out.size();
    const std::string line = w->out.substr(pos, end - pos);
    if (std::regex_search(line, m, kAdded)) return std::stoll(m[1]);
    pos = end + 1;
  }
  return 0;
}

// Issue 32, point 6: a bridge pod had no NetworkPolicy, so on a cluster it reached other sandbox
// pods, Services, the kubelet, the API server and cloud metadata. Now its policy (the manifest's
// blocks: pod_manifest_test) is made before the pod, stays while the pod runs, and goes with it,
// on stop and on a create that failed after it. The double stores it and, as it is no deny-all,
// gives the pod its network: enforcement is the CNI's, which the double does not play.
TEST(KubeRuntimeTest, BridgePodHasItsNetworkPolicyFromBeforeItsStartUntilItIsGone) {
  auto sb = CreateSandbox(KubeSpec());
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  const std::string name = (*sb)->container_name();
  // The pod names its policy: NAME-TOKEN (8 random hex digits of this create).
  auto named =
      Kubectl({"get", "pod", name, "-o", "jsonpath={.metadata.annotations.agvisor\\.policy}"});
  ASSERT_TRUE(named.ok() && named->status.success()) << (named.ok() ? named->err : "");
  const std::string policy_name = named->out;
  EXPECT_THAT(policy_name, ::testing::MatchesRegex(name + "-[0-9a-f]{8}"));
  // Nothing changes a policy once made: its resourceVersion now is the one it was made with.
  auto policy = Kubectl(
      {"get", "networkpolicy", policy_name, "-o",
       "jsonpath={.metadata.resourceVersion}|{.spec.podSelector.matchLabels.agvisor\\.instance} "
       "{.spec.policyTypes} ingress={.spec.ingress} {.spec.egress[0].to[0].ipBlock.except} "
       "{.spec.egress[1].ports[*].port}"});
  ASSERT_TRUE(policy.ok() && policy->status.success())
      << "no network policy " << policy_name << ": " << (policy.ok() ? policy->err : "");
  const std::size_t bar = policy->out.find('|');
  ASSERT_NE(bar, std::string::npos) << policy->out;
  const long long policy_version = std::stoll(policy->out.substr(0, bar));
  const long long pod_version = CreatedVersion("/api/v1/namespaces/default/pods", name);
  ASSERT_GT(pod_version, 0) << "no pod " << name << " was seen created";
  EXPECT_LT(policy_version, pod_version) << "the policy came after the pod";
  EXPECT_EQ(policy->out.substr(bar + 1),
            policy_name + R"( ["Ingress","Egress"] ingress= ["10.0.0.0/8","172.16.0.0/12",)"
                          R"("192.168.0.0/16","100.64.0.0/10","169.254.0.0/16",)"
                          R"("192.0.0.0/24","168.63.129.16/32"] 53 53)");
  auto dev = (*sb)->Exec({"cat", "/proc/net/dev"});
  ASSERT_TRUE(dev.ok()) << dev.error().ToString();
  EXPECT_NE(dev->out.find("eth0:"), std::string::npos) << dev->out;

  ASSERT_TRUE((*sb)->Stop().ok());
  auto gone = Kubectl({"get", "networkpolicy", policy_name});
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->status.success()) << gone->out;
  EXPECT_THAT(gone->err, ::testing::HasSubstr("NotFound"));

  // A create that fails once the policy is made (an image the nodes do not have) removes it.
  SandboxSpec missing = KubeSpec("no-image");
  missing.image = "agvisor/no-such-image:" + RunId();
  auto failed = CreateSandbox(missing);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code(), ErrorCode::kNotFound) << failed.error().ToString();
  const std::string failed_name = "agvisor-" + *missing.name;
  auto failed_pod = Kubectl({"get", "--raw",
                             "/api/v1/namespaces/default/pods?watch=1&resourceVersion=1&"
                             "timeoutSeconds=1&fieldSelector=metadata.name%3D" +
                                 failed_name});
  ASSERT_TRUE(failed_pod.ok());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(failed_pod->out, m,
                                std::regex(R"re("agvisor\.policy": "([a-z0-9.-]+)")re")))
      << failed_pod->out;
  const std::string failed_policy = m[1];
  EXPECT_GT(CreatedVersion("/apis/networking.k8s.io/v1/namespaces/default/networkpolicies",
                           failed_policy),
            0);
  auto left = Kubectl({"get", "networkpolicy", failed_policy});
  ASSERT_TRUE(left.ok());
  EXPECT_FALSE(left->status.success()) << left->out;
}

// A policy of the old form `agvisor-NAME`, selecting agvisor.instance=NAME and letting everything
// out: one left by a removal that timed out, or another create's of the name under way.
std::string PolicyOfTheName(const std::string& name) {
  return R"({"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":")" +
         name + R"("},"spec":{"podSelector":{"matchLabels":{"agvisor.instance":")" + name +
         R"("}},"policyTypes":["Ingress","Egress"],"egress":[{}]}})";
}

// Review of issue 32, point 6: a create that found a policy of its name with no pod deleted it by
// name and made its own. That policy may be another create's of the name, made a moment before
// its pod: then that create's pod (network none) started under this one's (bridge) policy. Now a
// create makes a policy of its own (a random token in its name and selector) and deletes nothing
// of another's; the policy found is left alone and selects no pod of this create. On main the
// found policy was replaced (another uid). A removal deletes its pod's own policy only.
TEST(KubeRuntimeTest, ACreateNeverReplacesAPolicyOfItsNameNorRunsUnderIt) {
  SandboxSpec spec = KubeSpec("rival");
  spec.network = "none";
  const std::string name = "agvisor-" + *spec.name;
  auto made = Kubectl({"apply", "--validate=false", "-f", "-"}, PolicyOfTheName(name));
  ASSERT_TRUE(made.ok() && made->status.success()) << (made.ok() ? made->err : "");
  struct Cleanup {
    std::string name;
    ~Cleanup() { (void)Kubectl({"delete", "networkpolicy", name}); }
  } cleanup{name};
  auto uid_of = [](const std::string& policy) {
    auto uid = Kubectl({"get", "networkpolicy", policy, "-o", "jsonpath={.metadata.uid}"});
    return uid.ok() && uid->status.success() ? uid->out : std::string("(none)");
  };
  const std::string rival_uid = uid_of(name);

  auto sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  EXPECT_EQ(uid_of(name), rival_uid) << "the create replaced the policy of its name";
  // The pod is selected by its own deny-all policy only, of another name and selector.
  auto pod = Kubectl({"get", "pod", name, "-o",
                      "jsonpath={.metadata.labels.agvisor\\.instance} "
                      "{.metadata.annotations.agvisor\\.policy}"});
  ASSERT_TRUE(pod.ok() && pod->status.success()) << (pod.ok() ? pod->err : "");
  const std::string instance = pod->out.substr(0, pod->out.find(' '));
  const std::string own = pod->out.substr(pod->out.find(' ') + 1);
  EXPECT_THAT(instance, ::testing::MatchesRegex(name + "-[0-9a-f]{8}"));
  EXPECT_EQ(own, instance);  // this name is short: the policy's name is the selector's value
  auto policy = Kubectl({"get", "networkpolicy", own, "-o",
                         "jsonpath={.spec.podSelector.matchLabels.agvisor\\.instance} "
                         "egress={.spec.egress}"});
  ASSERT_TRUE(policy.ok() && policy->status.success()) << (policy.ok() ? policy->err : "");
  EXPECT_EQ(policy->out, instance + " egress=");
  auto dev = (*sb)->Exec({"cat", "/proc/net/dev"});
  ASSERT_TRUE(dev.ok()) << dev.error().ToString();
  EXPECT_EQ(dev->out.find("eth0:"), std::string::npos) << dev->out;

  // The removal deletes the pod's policy, not the one of the name.
  ASSERT_TRUE((*sb)->Delete().ok());
  EXPECT_EQ(uid_of(own), "(none)");
  EXPECT_EQ(uid_of(name), rival_uid);
}

TEST(KubeRuntimeTest, Refusals) {
  SandboxSpec plain = KubeSpec();
  plain.runtime = "plain";  // a RuntimeClass whose handler is runc
  auto e = CreateSandbox(plain);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.error().message().find("only on gVisor"), std::string::npos) << e.error().message();
  SandboxSpec missing = KubeSpec();
  missing.runtime = "nosuchclass";
  e = CreateSandbox(missing);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("no RuntimeClass 'nosuchclass'"), std::string::npos);
  // What the Pod API cannot do is refused at create, with the reason (docs/kubernetes.md, "What
  // differs from Docker").
  auto refused = [](SandboxSpec s, ErrorCode code, std::string_view words) {
    auto r = CreateSandbox(s);
    ASSERT_FALSE(r.ok()) << "created " << (*r)->container_name();
    EXPECT_EQ(r.error().code(), code) << r.error().ToString();
    EXPECT_THAT(r.error().message(), ::testing::HasSubstr(std::string(words)));
  };
  SandboxSpec s = KubeSpec();
  s.platform = "ptrace";
  refused(s, ErrorCode::kInvalidArgument, "make a RuntimeClass for it");
  s = KubeSpec();
  s.egress = egress::EgressRules{.allow_domains = {"example.org"}};
  refused(s, ErrorCode::kUnsupported, "not available on Kubernetes yet");
  s = KubeSpec();
  s.limits.disk = "1g";
  refused(s, ErrorCode::kUnsupported, "root-disk cap");
  s = KubeSpec();
  s.name = "Upper";  // its claim is made first: the API server's 422 names the rule
  refused(s, ErrorCode::kInvalidArgument, "lowercase RFC 1123");

  // And on a running sandbox: pause, resume, live resize, snapshot and fork; it runs on after.
  auto sb = CreateSandbox(KubeSpec("refusals"));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto paused = (*sb)->Pause();
  ASSERT_FALSE(paused.ok());
  EXPECT_EQ(paused.error().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(paused.error().message(), ::testing::HasSubstr("no way to freeze"));
  auto resumed = (*sb)->Resume();
  EXPECT_TRUE(resumed.ok() || resumed.error().code() == ErrorCode::kUnsupported)
      << resumed.error().ToString();
  auto resized = (*sb)->Update({.memory = "1g"});
  ASSERT_FALSE(resized.ok());
  EXPECT_EQ(resized.error().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(resized.error().message(), ::testing::HasSubstr("fixed at create"));
  auto snap = (*sb)->Snapshot({.image = "kube-" + RunId()});
  ASSERT_FALSE(snap.ok());
  EXPECT_EQ(snap.error().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(snap.error().message(), ::testing::HasSubstr("makes no images"));
  auto fork = Fork(**sb, {.count = 1});
  ASSERT_FALSE(fork.ok());
  EXPECT_EQ(fork.error().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(fork.error().message(), ::testing::HasSubstr("makes no images"));
  auto info = (*sb)->Info();
  ASSERT_TRUE(info.ok()) << info.error().ToString();
  auto stats = KeptRuntime(kHost)->Stats(info->container_id);  // `agvisor top`, the metrics route
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.error().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(stats.error().message(), ::testing::HasSubstr("metrics.k8s.io"));
  auto sizes = KeptRuntime(kHost)->VolumeSizes();  // `agvisor ls --size`
  ASSERT_FALSE(sizes.ok());
  EXPECT_EQ(sizes.error().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(sizes.error().message(), ::testing::HasSubstr("volume claims are not read"));
  EXPECT_EQ((*sb)->ExecShell("echo alive")->out, "alive\n");

  // An exec the container runtime cannot start: kubelet (and the double) answer with a Failure
  // Status on the error stream, which the runtime's exec stream reports with its message, where
  // the channel's handshake and RunExec find it (sandbox.cc reopens a relay once on it).
  Result<std::shared_ptr<Runtime>> runtime = agvisor::testing::TestRuntime(kHost);
  ASSERT_TRUE(runtime.ok()) << runtime.error().ToString();
  auto relay = (*runtime)->OpenExecStream((*sb)->container_name(), {"/no/such/program"}, nullptr);
  ASSERT_TRUE(relay.ok()) << relay.error().ToString();
  char buf[256];
  auto read = (*relay)->Read(std::span<char>(buf, sizeof buf));
  ASSERT_FALSE(read.ok()) << "read " << *read
                          << " bytes: " << std::string_view(buf, read.ok() ? *read : 0);
  EXPECT_EQ(read.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(read.error().message(),
              ::testing::HasSubstr("exec of /no/such/program in pod " + (*sb)->container_name() +
                                   ": exec failed: Internal error occurred: error executing "
                                   "command in container: OCI runtime exec failed"));
  auto ran = (*runtime)->RunExec((*sb)->container_name(), {"/no/such/program"},
                                 [](std::string_view) -> Result<void> { return Ok(); }, nullptr);
  ASSERT_FALSE(ran.ok()) << "exit code " << *ran;
  EXPECT_THAT(ran.error().message(), ::testing::HasSubstr("Internal error occurred"));
  ASSERT_TRUE((*sb)->Delete().ok());
}

// `agvisor doctor --host kube://...`: the context and server, the namespace, the RuntimeClass,
// RBAC (the double answers SelfSubjectAccessReviews by deploy/rbac.yaml: double_process.h) and the
// agent image; a missing RuntimeClass and one whose handler is runc are FAIL lines and exit 1.
TEST(KubeRuntimeTest, DoctorReportsTheCluster) {
  auto ok = RunCommand({AGVISOR_CLI_BINARY, "--host", kHost, "doctor"});
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_EQ(ok->status.exit_code, 0) << ok->out << ok->err;
  using ::testing::ContainsRegex;
  using ::testing::HasSubstr;
  EXPECT_THAT(ok->out, ContainsRegex("ok +kubernetes +credentials from \\$KUBECONFIG \\(.*\\), "
                                     "context agvisor-double \\(https://127.0.0.1:[0-9]+\\), "
                                     "namespace default: Kubernetes v1.32.0-agvisor-kube-double"));
  EXPECT_THAT(ok->out, ContainsRegex("ok +namespace +namespace default: [0-9]+ agvisor pod"));
  EXPECT_THAT(ok->out,
              ContainsRegex("ok +runtime class +RuntimeClass gvisor has a gVisor handler"));
  EXPECT_THAT(ok->out, ContainsRegex("ok +rbac +namespace default: all 12 permissions the runtime "
                                     "uses are allowed"));
  // Issue 32, point 6: the policy every pod gets, and that no client can see the CNI enforce it;
  // an agent image without a registry is one a real cluster looks for in a public registry.
  EXPECT_THAT(ok->out, ContainsRegex("warn +network policy +every sandbox pod gets a "
                                     "NetworkPolicy \\(network none: deny-all; bridge: no "
                                     "ingress, egress to every address but 10.0.0.0/8, .*"
                                     "169.254.0.0/16, .*fc00::/7, fe80::/10, 64:ff9b:1::/48, "
                                     "the IPv4 ones inside NAT64's 64:ff9b::/96, DNS to the "
                                     "kube-dns "
                                     "pods of kube-system\\); whether the cluster's CNI enforces "
                                     "NetworkPolicies cannot be verified from outside"));
  EXPECT_THAT(ok->out, ContainsRegex("warn +agent image +agvisor/agent:[0-9a-f]{16} .*names no "
                                     "registry"));
  EXPECT_THAT(ok->out, HasSubstr("fix: push it to the registry your nodes pull from and set "
                                 "$AGVISOR_KUBE_REGISTRY"));
  EXPECT_THAT(ok->out, HasSubstr("this host can run agvisor sandboxes"));

  // Options the policy cannot be made of fail the line (and every create).
  auto bad_cidr = RunCommand({"env", "AGVISOR_KUBE_BLOCKED_CIDRS=10.96.0.0/12, 0.0.0.0/0",
                              "AGVISOR_KUBE_REGISTRY=registry.example.invalid", AGVISOR_CLI_BINARY,
                              "--host", kHost, "doctor"});
  ASSERT_TRUE(bad_cidr.ok()) << bad_cidr.error().ToString();
  EXPECT_EQ(bad_cidr->status.exit_code, 1) << bad_cidr->out;
  EXPECT_THAT(bad_cidr->out, ContainsRegex("FAIL +network policy +\\$AGVISOR_KUBE_BLOCKED_CIDRS: "
                                           "0.0.0.0/0 blocks every address"));
  EXPECT_THAT(bad_cidr->out, ContainsRegex("info +agent image +registry.example.invalid/agvisor/"
                                           "agent:[0-9a-f]{16} "));

  auto missing = RunCommand({"env", "AGVISOR_KUBE_RUNTIME_CLASS=no-such-class", AGVISOR_CLI_BINARY,
                             "--host", kHost, "doctor"});
  ASSERT_TRUE(missing.ok()) << missing.error().ToString();
  EXPECT_EQ(missing->status.exit_code, 1) << missing->out;
  EXPECT_THAT(missing->out,
              ContainsRegex("FAIL +runtime class +sandboxes run only on gVisor: .*has "
                            "no RuntimeClass 'no-such-class'"));
  EXPECT_THAT(missing->out, HasSubstr("fix: kubectl apply -f deploy/runtimeclass.yaml"));
  EXPECT_THAT(missing->out, ContainsRegex("ok +rbac "));  // the other checks still run
  EXPECT_THAT(missing->out, HasSubstr("cannot run agvisor sandboxes: see FAIL above"));

  auto runc = RunCommand({"env", "AGVISOR_KUBE_RUNTIME_CLASS=plain", AGVISOR_CLI_BINARY, "--json",
                          "--host", kHost, "doctor"});
  ASSERT_TRUE(runc.ok()) << runc.error().ToString();
  EXPECT_EQ(runc->status.exit_code, 1);
  EXPECT_THAT(runc->out, HasSubstr("\"check\":\"runtime class\",\"status\":\"fail\""));
  EXPECT_THAT(runc->out, HasSubstr("has handler 'runc', not runsc or gvisor"));

  // A context the kubeconfig does not have: the first check fails and the others are not run.
  auto lost =
      RunCommand({AGVISOR_CLI_BINARY, "--host", "kube://no-such-context/default", "doctor"});
  ASSERT_TRUE(lost.ok()) << lost.error().ToString();
  EXPECT_EQ(lost->status.exit_code, 1);
  EXPECT_THAT(lost->out, ContainsRegex("^FAIL +kubernetes +.*no-such-context"));
  EXPECT_THAT(lost->out, ::testing::Not(HasSubstr("runtime class")));
}

TEST(KubeRuntimeTest, CliRunsACommand) {
  auto out = RunCommand({AGVISOR_CLI_BINARY, "--host", kHost, "run", "--", "echo", "hi"});
  ASSERT_TRUE(out.ok()) << out.error().ToString();
  EXPECT_TRUE(out->status.success()) << out->err;
  EXPECT_EQ(out->out, "hi\n");
}

// `agvisor image build kube-agent` (made by this suite's double too, through the same function):
// a busybox that needs a libc, or none, is refused naming the package; a good one makes an image
// whose init container can copy the agent with it.
TEST(KubeRuntimeTest, CliBuildsTheAgentImageAndRefusesABusyboxThatNeedsALibc) {
  auto dynamic = RunCommand({AGVISOR_CLI_BINARY, "image", "build", "kube-agent", "--busybox",
                             "/bin/ls", "--tag", "agvisor/agent:never-made"});
  ASSERT_TRUE(dynamic.ok());
  EXPECT_EQ(dynamic->status.exit_code, 2) << dynamic->err;
  EXPECT_THAT(dynamic->err, ::testing::HasSubstr("/bin/ls is not a statically linked"));
  EXPECT_THAT(dynamic->err, ::testing::HasSubstr("busybox-static"));
  auto missing = RunCommand(
      {AGVISOR_CLI_BINARY, "image", "build", "kube-agent", "--busybox", "/no/such/busybox"});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status.exit_code, 1) << missing->err;
  EXPECT_THAT(missing->err, ::testing::HasSubstr("no busybox at /no/such/busybox"));
  const std::string tag = "agvisor/agent:kube-test-" + RunId();
  auto made = RunCommand({AGVISOR_CLI_BINARY, "image", "build", "kube-agent", "--tag", tag});
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE(made->status.success()) << made->err;
  // What the pod's init container runs: busybox's cp of the agent, in that image alone.
  auto cp = RunCommand({"docker", "run", "--rm", "--runtime=runsc", "--network=none", tag,
                        "/bin/busybox", "sh", "-c", "cp /agvisor-agent /tmp/a && /tmp/a --help"});
  (void)RunCommand({"docker", "rmi", "-f", tag});
  ASSERT_TRUE(cp.ok());
  EXPECT_TRUE(cp->status.success()) << cp->err;
  EXPECT_THAT(cp->out + cp->err, ::testing::HasSubstr("agvisor"));
}

// The CLI's lifecycle through kube:// (issue 18's "done when"): create a named sandbox, exec,
// cp both ways, shell on a real terminal (util-linux `script` gives it one), ls, stop (the claim
// stays), rm (the claim goes).
TEST(KubeRuntimeTest, CliCreateExecCpShellLsStopRm) {
  const std::string name = RunId() + "-cli";
  auto cli = [](std::vector<std::string> args) {
    args.insert(args.begin(), {AGVISOR_CLI_BINARY, "--host", kHost});
    auto r = RunCommand(args);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? *r : CommandOutput{};
  };
  struct Remove {
    std::string name;
    ~Remove() { (void)RunCommand({AGVISOR_CLI_BINARY, "--host", kHost, "rm", name}); }
  } remove{name};
  auto created = cli({"create", "--name", name});
  ASSERT_TRUE(created.status.success()) << created.err;
  auto exec = cli({"exec", name, "--", "sh", "-c", "echo made > /workspace/out.txt; id -u"});
  EXPECT_TRUE(exec.status.success()) << exec.err;
  EXPECT_EQ(exec.out, "0\n");

  char tmpl[] = "/tmp/agvisor-kube-cli-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(RunCommand({"sh", "-c", "echo sent > \"$0\"/in.txt", dir}).ok());
  auto up = cli({"cp", dir + "/in.txt", name + ":/workspace"});
  EXPECT_TRUE(up.status.success()) << up.err;
  auto down = cli({"cp", name + ":/workspace/out.txt", dir});
  EXPECT_TRUE(down.status.success()) << down.err;
  auto got = RunCommand({"cat", dir + "/out.txt"});
  EXPECT_EQ(got.ok() ? got->out : "", "made\n");

  // A terminal: the shell's stdin is a tty inside, and what it reads is the uploaded file.
  auto shell = RunCommand({"script", "-q", "-e", "-c",
                           std::string(AGVISOR_CLI_BINARY) + " --host " + kHost + " shell " + name +
                               " -- sh -c 'test -t 0 && echo tty; cat /workspace/in.txt'",
                           "/dev/null"});
  ASSERT_TRUE(shell.ok()) << shell.error().ToString();
  EXPECT_TRUE(shell->status.success()) << shell->out << shell->err;
  EXPECT_THAT(shell->out, ::testing::HasSubstr("tty\r\nsent\r\n"));

  auto ls = cli({"ls"});
  EXPECT_THAT(ls.out, ::testing::HasSubstr(name)) << ls.err;
  auto stopped = cli({"stop", name});
  EXPECT_TRUE(stopped.status.success()) << stopped.err;
  // Stopped, its /workspace (the claim) stays: a new create finds the file.
  auto again = cli({"run", "--name", name, "--", "cat", "/workspace/out.txt"});
  EXPECT_EQ(again.out, "made\n") << again.err;
  auto removed = cli({"rm", name});
  EXPECT_TRUE(removed.status.success()) << removed.err;
  auto after = cli({"run", "--name", name, "--", "sh", "-c", "ls /workspace | wc -l"});
  EXPECT_EQ(after.out, "0\n") << after.err;
  (void)RunCommand({"rm", "-rf", dir});
}

}  // namespace
}  // namespace agvisor
