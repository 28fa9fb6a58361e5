#include "agvisor/sandbox/kube_runtime/pod_manifest.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdlib>

#include "agvisor/sandbox/agent_paths.h"
#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/kube_runtime/kube_runtime.h"

namespace agvisor {
namespace {

namespace json = boost::json;

InstanceSpec Named() {
  SandboxSpec s;
  s.name = "box";
  s.lifetime = 600;
  s.limits.cpus = 1.5;
  s.limits.memory = "512m";
  s.limits.shm = "128m";
  InstanceDecisions d;
  d.name = "agvisor-box";
  d.runtime = "gvisor";
  d.image = "agvisor/base:latest";
  d.source_image = "agvisor/base:latest";
  auto i = BuildInstanceSpec(s, d);
  EXPECT_TRUE(i.ok());
  return *i;
}

json::object Pod(const InstanceSpec& spec) {
  auto m = PodManifest(spec, {.agent_image = "agvisor/agent:test", .deadline_margin_seconds = 60});
  EXPECT_TRUE(m.ok()) << m.error().ToString();
  return json::parse(*m).as_object();
}

TEST(PodManifestTest, NamedSandbox) {
  json::object pod = Pod(Named());
  EXPECT_EQ(pod["kind"], "Pod");
  const json::object& meta = pod["metadata"].as_object();
  EXPECT_EQ(meta.at("name"), "agvisor-box");
  const json::object& labels = meta.at("labels").as_object();
  EXPECT_EQ(labels.at("agvisor"), "1");
  EXPECT_EQ(labels.at("agvisor.name"), "box");
  EXPECT_EQ(labels.at("agvisor.instance"), "agvisor-box");
  // Values Kubernetes refuses as label values travel as annotations.
  EXPECT_FALSE(labels.contains("agvisor.image"));
  EXPECT_EQ(meta.at("annotations").as_object().at("agvisor.image"), "agvisor/base:latest");

  const json::object& spec = pod["spec"].as_object();
  EXPECT_EQ(spec.at("runtimeClassName"), "gvisor");
  EXPECT_EQ(spec.at("restartPolicy"), "Never");
  EXPECT_EQ(spec.at("automountServiceAccountToken"), false);
  EXPECT_EQ(spec.at("enableServiceLinks"), false);
  EXPECT_EQ(spec.at("activeDeadlineSeconds"), 660);

  const json::object& c = spec.at("containers").as_array().at(0).as_object();
  EXPECT_EQ(c.at("name"), "sandbox");
  EXPECT_EQ(c.at("image"), "agvisor/base:latest");
  // The agent's init, without --channel-stdio: PID 1's stdout goes to the node's log.
  EXPECT_EQ(c.at("command"),
            (json::array{kAgentPath, "init", "--lifetime", "600", "--warm-shells", "2"}));
  EXPECT_EQ(c.at("workingDir"), "/workspace");
  const json::object& res = c.at("resources").as_object();
  EXPECT_EQ(res.at("limits"), res.at("requests"));
  EXPECT_EQ(res.at("limits").as_object().at("cpu"), "1500m");
  EXPECT_EQ(res.at("limits").as_object().at("memory"), "536870912");
  const json::object& sc = c.at("securityContext").as_object();
  EXPECT_EQ(sc.at("allowPrivilegeEscalation"), false);
  EXPECT_EQ(sc.at("privileged"), false);
  EXPECT_EQ(sc.at("capabilities").as_object().at("drop"), (json::array{"ALL"}));
  EXPECT_EQ(sc.at("capabilities").as_object().at("add").as_array().size(),
            kSandboxCapabilities.size());
  EXPECT_EQ(json::serialize(c.at("volumeMounts")),
            R"([{"name":"agvisor-agent","mountPath":"/.agvisor"},)"
            R"({"name":"agvisor-shm","mountPath":"/dev/shm"},)"
            R"({"name":"agvisor-workspace","mountPath":"/workspace"}])");
  EXPECT_EQ(json::serialize(spec.at("volumes")),
            R"([{"name":"agvisor-agent","emptyDir":{}},)"
            R"({"name":"agvisor-shm","emptyDir":{"medium":"Memory","sizeLimit":"134217728"}},)"
            R"({"name":"agvisor-workspace","persistentVolumeClaim":{"claimName":"agvisor-box"}}])");

  const json::object& init = spec.at("initContainers").as_array().at(0).as_object();
  EXPECT_EQ(init.at("image"), "agvisor/agent:test");
  EXPECT_EQ(init.at("command"), (json::array{"/bin/busybox", "cp", "/agvisor-agent",
                                             "/agvisor-install/agvisor-agent"}));
  EXPECT_EQ(init.at("securityContext"), c.at("securityContext"));
}

TEST(PodManifestTest, AnonymousSandboxHasNoDeadlineNorWorkspace) {
  SandboxSpec s;
  InstanceDecisions d;
  d.name = "agvisor-0a1b2c";
  d.runtime = "gvisor";
  d.image = "busybox:latest";
  d.source_image = "busybox:latest";
  auto i = BuildInstanceSpec(s, d);
  ASSERT_TRUE(i.ok());
  json::object pod = Pod(*i);
  const json::object& spec = pod["spec"].as_object();
  EXPECT_FALSE(spec.contains("activeDeadlineSeconds"));
  EXPECT_EQ(spec.at("volumes").as_array().size(), 1u);  // the agent's only
}

TEST(PodManifestTest, Refusals) {
  InstanceSpec i = Named();
  i.name = "agvisor-Box_1";
  auto e = PodManifest(i, {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.error().message().find("lower-case"), std::string::npos);
  i = Named();
  i.disk_cap = "5g";
  EXPECT_EQ(PodManifest(i, {}).error().code(), ErrorCode::kUnsupported);
  i = Named();
  i.network = "agvisor-egress-x";
  EXPECT_EQ(PodManifest(i, {}).error().code(), ErrorCode::kUnsupported);
}

json::object Policy(const InstanceSpec& spec, const PodOptions& options = {}) {
  auto m = NetworkPolicyManifest(spec, options);
  EXPECT_TRUE(m.ok()) << m.error().ToString();
  return m.ok() ? json::parse(*m).as_object() : json::object{};
}

TEST(PodManifestTest, NetworkNonePolicyDeniesAll) {
  InstanceSpec i = Named();
  i.network = "none";
  json::object p = Policy(i, {.blocked_cidrs = {"198.51.100.0/24"}, .dns_servers = {"10.96.0.10"}});
  EXPECT_EQ(p["kind"], "NetworkPolicy");
  EXPECT_EQ(p["metadata"].as_object().at("name"), "agvisor-box");
  // Both types with no rule: nothing in, nothing out (the options widen nothing here).
  EXPECT_EQ(json::serialize(p["spec"]),
            R"({"podSelector":{"matchLabels":{"agvisor.instance":"agvisor-box"}},)"
            R"("policyTypes":["Ingress","Egress"]})");
  // Names longer than a label value are selected by a hash.
  const std::string long_name = "agvisor-" + std::string(60, 'a');
  EXPECT_EQ(InstanceLabelValue(long_name).rfind("h-", 0), 0u);
  EXPECT_EQ(InstanceLabelValue(long_name).size(), 18u);
}

// Issue 32, point 6: a bridge pod had no policy, so it reached other sandbox pods, Services, the
// kubelet, the API server and cloud metadata. Its policy selects it, lets nothing in, and lets it
// out to the internet only: every private, shared and link-local range is excepted, both
// families, with the operator's blocks; DNS goes to kube-dns and the resolvers named.
TEST(PodManifestTest, BridgePolicyAllowsTheInternetAndTheClusterResolverOnly) {
  InstanceSpec i = Named();
  ASSERT_EQ(i.network, "bridge");
  json::object p = Policy(i, {.blocked_cidrs = {"198.51.100.0/24", "2001:db8:42::/56"},
                              .dns_servers = {"169.254.20.10", "fd00::a"}});
  ASSERT_TRUE(p.contains("spec"));
  const json::object& spec = p["spec"].as_object();
  EXPECT_EQ(json::serialize(spec.at("podSelector")),
            R"({"matchLabels":{"agvisor.instance":"agvisor-box"}})");
  EXPECT_EQ(spec.at("policyTypes"), (json::array{"Ingress", "Egress"}));
  EXPECT_FALSE(spec.contains("ingress"));  // no rule: no ingress at all
  const json::array& egress = spec.at("egress").as_array();
  ASSERT_EQ(egress.size(), 2u);
  // 1. The internet: any port, every address but the blocked ones.
  EXPECT_FALSE(egress[0].as_object().contains("ports"));
  EXPECT_EQ(
      json::serialize(egress[0].at("to")),
      R"([{"ipBlock":{"cidr":"0.0.0.0/0","except":["10.0.0.0/8","172.16.0.0/12",)"
      R"("192.168.0.0/16","100.64.0.0/10","169.254.0.0/16","192.0.0.0/24","168.63.129.16/32",)"
      R"("198.51.100.0/24"]}},)"
      R"({"ipBlock":{"cidr":"::/0","except":["fc00::/7","fe80::/10","2001:db8:42::/56"]}}])");
  // 2. DNS: UDP and TCP 53 to the kube-dns pods and the named resolvers, nothing else.
  EXPECT_EQ(
      json::serialize(egress[1].at("to")),
      R"([{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-system"}},)"
      R"("podSelector":{"matchLabels":{"k8s-app":"kube-dns"}}},)"
      R"({"ipBlock":{"cidr":"169.254.20.10/32"}},{"ipBlock":{"cidr":"fd00::a/128"}}])");
  EXPECT_EQ(json::serialize(egress[1].at("ports")),
            R"([{"protocol":"UDP","port":53},{"protocol":"TCP","port":53}])");
}

// The pod names its policy's uid, so that its removal deletes that policy only; it is no label.
TEST(PodManifestTest, PodNamesItsPolicy) {
  auto m = PodManifest(Named(), {.agent_image = "a"}, "0f1e-uid");
  ASSERT_TRUE(m.ok()) << m.error().ToString();
  const json::object meta = json::parse(*m).as_object().at("metadata").as_object();
  EXPECT_EQ(meta.at("annotations").as_object().at("agvisor.policy-uid"), "0f1e-uid");
  EXPECT_EQ(meta.at("annotations").as_object().at("agvisor.image"), "agvisor/base:latest");
  kube::Pod pod;
  pod.annotations = {{"agvisor.policy-uid", "0f1e-uid"}, {"agvisor.image", "x"}};
  EXPECT_EQ(LabelsOfPod(pod).count("agvisor.policy-uid"), 0u);
  EXPECT_EQ(LabelsOfPod(pod).at("agvisor.image"), "x");
}

TEST(PodManifestTest, BridgePolicyRefusesOptionsItCannotUse) {
  const InstanceSpec i = Named();
  auto refused = [&](PodOptions o, std::string_view words) {
    auto m = NetworkPolicyManifest(i, o);
    ASSERT_FALSE(m.ok()) << *m;
    EXPECT_EQ(m.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(m.error().message().find(words), std::string::npos) << m.error().message();
  };
  refused({.blocked_cidrs = {"10.96.0.0/12", "not-a-cidr"}}, "$AGVISOR_KUBE_BLOCKED_CIDRS");
  refused({.blocked_cidrs = {"203.0.113.7/24"}}, "203.0.113.0/24");  // host bits set
  refused({.blocked_cidrs = {"0.0.0.0/0"}}, "blocks every address");
  refused({.blocked_cidrs = {"::/0"}}, "blocks every address");
  refused({.dns_servers = {"kube-dns.kube-system"}}, "$AGVISOR_KUBE_DNS");
  InstanceSpec other = Named();
  other.network = "agvisor-egress-x";
  EXPECT_EQ(NetworkPolicyManifest(other, {}).error().code(), ErrorCode::kUnsupported);
}

// A name without a registry is looked up in a public one on a real cluster; $AGVISOR_KUBE_REGISTRY
// puts the agent image under the operator's.
TEST(PodManifestTest, AgentImageNamesTheRegistryItIsGiven) {
  EXPECT_FALSE(ImageNamesRegistry("agvisor/agent:0123"));
  EXPECT_FALSE(ImageNamesRegistry("busybox:latest"));
  EXPECT_FALSE(ImageNamesRegistry("agvisor.x"));  // one component: no registry part
  EXPECT_TRUE(ImageNamesRegistry("registry.example.invalid/agvisor/agent:0123"));
  EXPECT_TRUE(ImageNamesRegistry("localhost:5000/agvisor/agent:0123"));
  EXPECT_TRUE(ImageNamesRegistry("localhost/agvisor/agent:0123"));
  ::unsetenv("AGVISOR_KUBE_AGENT_IMAGE");
  ::unsetenv("AGVISOR_KUBE_REGISTRY");
  const std::string bare = AgentImageRefForKube();
  EXPECT_EQ(bare.rfind("agvisor/agent:", 0), 0u) << bare;
  ::setenv("AGVISOR_KUBE_REGISTRY", "registry.example.invalid", 1);
  EXPECT_EQ(AgentImageRefForKube(), "registry.example.invalid/" + bare);
  ::setenv("AGVISOR_KUBE_AGENT_IMAGE", "registry.example.invalid/mine:1", 1);
  EXPECT_EQ(AgentImageRefForKube(), "registry.example.invalid/mine:1");
  ::unsetenv("AGVISOR_KUBE_AGENT_IMAGE");
  ::unsetenv("AGVISOR_KUBE_REGISTRY");
}

TEST(PodManifestTest, Claim) {
  json::object c =
      json::parse(ClaimManifest("agvisor-box", {{"agvisor.name", "box"}}, "10Gi")).as_object();
  EXPECT_EQ(c["kind"], "PersistentVolumeClaim");
  EXPECT_EQ(json::serialize(c["spec"]),
            R"({"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"10Gi"}}})");
}

TEST(PodStateTest, Mapping) {
  kube::Pod p;
  p.phase = "Pending";
  EXPECT_EQ(InstanceStateOfPod(p).status, "created");
  p.phase = "Running";
  p.containers = {{.name = "sandbox", .state = "running"}};
  EXPECT_TRUE(InstanceStateOfPod(p).running);
  EXPECT_EQ(InstanceStateOfPod(p).status, "running");
  p.phase = "Failed";
  p.containers = {
      {.name = "sandbox", .state = "terminated", .reason = "OOMKilled", .exit_code = 137}};
  auto st = InstanceStateOfPod(p);
  EXPECT_EQ(st.status, "exited");
  EXPECT_FALSE(st.running);
  EXPECT_EQ(st.exit_code, 137);
  EXPECT_TRUE(st.oom_killed);
  p.deleting = true;
  EXPECT_EQ(InstanceStateOfPod(p).status, "removing");
  kube::Pod u;
  u.phase = "Unknown";
  EXPECT_EQ(InstanceStateOfPod(u).status, "dead");
  kube::Pod labelled;
  labelled.labels = {{"agvisor", "1"}};
  labelled.annotations = {{"agvisor.image", "a/b:c"}, {"unrelated", "x"}};
  auto l = LabelsOfPod(labelled);
  EXPECT_EQ(l.at("agvisor.image"), "a/b:c");
  EXPECT_EQ(l.at("agvisor"), "1");
}

}  // namespace
}  // namespace agvisor
