#include "agvisor/sandbox/kube_runtime/pod_manifest.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <set>

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

// The policy of one create of agvisor-box.
const PolicyRef kBoxPolicy{.name = "agvisor-box-0a1b2c3d", .token = "0a1b2c3d", .uid = "u-1"};

json::object Pod(const InstanceSpec& spec) {
  auto m = PodManifest(spec, {.agent_image = "agvisor/agent:test", .deadline_margin_seconds = 60},
                       kBoxPolicy);
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
  EXPECT_EQ(labels.at("agvisor.instance"), "agvisor-box-0a1b2c3d");
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

TEST(PodManifestTest, AllowSetuidLetsTheSandboxsContainerEscalateOnly) {
  InstanceSpec i = Named();
  i.allow_setuid = true;
  json::object pod = Pod(i);
  const json::object& spec = pod["spec"].as_object();
  const json::object& c = spec.at("containers").as_array().at(0).as_object();
  const json::object& sc = c.at("securityContext").as_object();
  EXPECT_EQ(sc.at("allowPrivilegeEscalation"), true);
  EXPECT_EQ(sc.at("privileged"), false);
  EXPECT_EQ(sc.at("capabilities").as_object().at("add").as_array().size(),
            kSandboxCapabilities.size());
  // The agent's installer never escalates.
  const json::object& init = spec.at("initContainers").as_array().at(0).as_object();
  EXPECT_EQ(init.at("securityContext").as_object().at("allowPrivilegeEscalation"), false);
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
  auto m = NetworkPolicyManifest(spec, options, kBoxPolicy);
  EXPECT_TRUE(m.ok()) << m.error().ToString();
  return m.ok() ? json::parse(*m).as_object() : json::object{};
}

TEST(PodManifestTest, NetworkNonePolicyDeniesAll) {
  InstanceSpec i = Named();
  i.network = "none";
  json::object p = Policy(i, {.blocked_cidrs = {"198.51.100.0/24"}, .dns_servers = {"10.96.0.10"}});
  EXPECT_EQ(p["kind"], "NetworkPolicy");
  EXPECT_EQ(p["metadata"].as_object().at("name"), "agvisor-box-0a1b2c3d");
  // Both types with no rule: nothing in, nothing out (the options widen nothing here).
  EXPECT_EQ(json::serialize(p["spec"]),
            R"({"podSelector":{"matchLabels":{"agvisor.instance":"agvisor-box-0a1b2c3d"}},)"
            R"("policyTypes":["Ingress","Egress"]})");
}

// Review of issue 32, point 6: the policy of a name was replaced by name, so of two creates of one
// name at once, one could delete the other's new policy and put its own in, and the other's pod
// (network none) then ran under a bridge policy. Now each create's policy has a name and a
// selector of its own (a random token), so it neither replaces nor selects another's, and a
// leftover selects no later pod.
TEST(PodManifestTest, EachCreatesPolicySelectsItsOwnPodOnly) {
  const InstanceSpec box = Named();
  auto token = NewPolicyToken();
  ASSERT_TRUE(token.ok()) << token.error().ToString();
  EXPECT_EQ(token->size(), kPolicyTokenLength);
  EXPECT_EQ(token->find_first_not_of("0123456789abcdef"), std::string::npos) << *token;
  EXPECT_NE(*token, *NewPolicyToken());
  const PolicyRef other{.name = PolicyName(box.name, "99999999"), .token = "99999999"};
  EXPECT_EQ(PolicyName(box.name, "0a1b2c3d"), kBoxPolicy.name);
  EXPECT_EQ(other.name, "agvisor-box-99999999");
  // The selector of one create's policy is the label of its pod, not of the other create's.
  auto selector = [&](const PolicyRef& ref) {
    auto m = NetworkPolicyManifest(box, {}, ref);
    EXPECT_TRUE(m.ok());
    return json::serialize(json::parse(*m).at("spec").at("podSelector"));
  };
  auto label = [&](const PolicyRef& ref) {
    InstanceSpec s = box;
    s.labels["agvisor.instance"] = "agvisor-box";  // what a caller passes is not used
    auto m = PodManifest(s, {}, ref);
    EXPECT_TRUE(m.ok());
    return json::serialize(json::object{
        {"matchLabels",
         json::object{{"agvisor.instance",
                       json::parse(*m).at("metadata").at("labels").at("agvisor.instance")}}}});
  };
  EXPECT_EQ(selector(kBoxPolicy), label(kBoxPolicy));
  EXPECT_EQ(selector(other), label(other));
  EXPECT_NE(selector(kBoxPolicy), label(other));
  EXPECT_NE(selector(other), label(kBoxPolicy));
  // Without a policy (the check before anything is made) the pod has no selector label at all.
  InstanceSpec s = box;
  s.labels["agvisor.instance"] = "agvisor-box";
  auto unchecked = PodManifest(s, {});
  ASSERT_TRUE(unchecked.ok());
  EXPECT_FALSE(
      json::parse(*unchecked).at("metadata").at("labels").as_object().contains("agvisor.instance"));
}

// Review of issue 32, point 6: a name longer than a label value was selected by "h-" and its
// 64-bit FNV-1a hash, which is not collision-resistant: two names of one hash were selected by
// each other's policies. Now the first 160 bits of its SHA-256 (and the create's token).
TEST(PodManifestTest, LongNamesAreSelectedByTheirSha256) {
  const std::string long_name = "agvisor-" + std::string(60, 'a');
  // printf 'agvisor-%s' $(printf 'a%.0s' $(seq 60)) | sha256sum
  EXPECT_EQ(InstanceLabelValue(long_name, "0a1b2c3d"),
            "h-ed4801dc1c72a66d0e4d8934ffed3c2efec53ab8-0a1b2c3d");
  EXPECT_EQ(InstanceLabelValue("agvisor-" + std::string(46, 'a'), "0a1b2c3d"),
            "agvisor-" + std::string(46, 'a') + "-0a1b2c3d");  // 63: still the name
  EXPECT_EQ(InstanceLabelValue("agvisor-" + std::string(47, 'a'), "0a1b2c3d").rfind("h-", 0), 0u);
  EXPECT_NE(InstanceLabelValue(long_name, "0a1b2c3d"),
            InstanceLabelValue(long_name + "b", "0a1b2c3d"));
  // A policy's name may be 253 characters: the name itself up to there, a hash past it.
  const std::string longest = "agvisor-" + std::string(236, 'a');
  EXPECT_EQ(PolicyName(longest, "0a1b2c3d"), longest + "-0a1b2c3d");
  EXPECT_EQ(PolicyName(longest + "a", "0a1b2c3d").size(), 51u);
  EXPECT_EQ(PolicyName(long_name, "0a1b2c3d"), long_name + "-0a1b2c3d");
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
            R"({"matchLabels":{"agvisor.instance":"agvisor-box-0a1b2c3d"}})");
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
      R"({"ipBlock":{"cidr":"::/0","except":["fc00::/7","fe80::/10","64:ff9b:1::/48",)"
      R"("64:ff9b::a00:0/104","64:ff9b::ac10:0/108","64:ff9b::c0a8:0/112","64:ff9b::6440:0/106",)"
      R"("64:ff9b::a9fe:0/112","64:ff9b::c000:0/120","64:ff9b::a83f:8110/128",)"
      R"("64:ff9b::c633:6400/120","2001:db8:42::/56"]}}])");
  // 2. DNS: UDP and TCP 53 to the kube-dns pods and the named resolvers, nothing else.
  EXPECT_EQ(
      json::serialize(egress[1].at("to")),
      R"([{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-system"}},)"
      R"("podSelector":{"matchLabels":{"k8s-app":"kube-dns"}}},)"
      R"({"ipBlock":{"cidr":"169.254.20.10/32"}},{"ipBlock":{"cidr":"fd00::a/128"}}])");
  EXPECT_EQ(json::serialize(egress[1].at("ports")),
            R"([{"protocol":"UDP","port":53},{"protocol":"TCP","port":53}])");
}

// Review of issue 32, point 6: on an IPv6-only cluster with NAT64, 64:ff9b::a00:1 is 10.0.0.1,
// and the IPv6 block let it through. Every IPv4 block (the operator's too) is also blocked inside
// 64:ff9b::/96, and the local-use NAT64 prefix 64:ff9b:1::/48 whole.
TEST(PodManifestTest, BridgePolicyBlocksThePrivateRangesBehindNat64) {
  json::object p = Policy(Named(), {.blocked_cidrs = {"198.51.100.0/24"}});
  ASSERT_TRUE(p.contains("spec"));
  const json::object& v6 = p["spec"].at("egress").at(0).at("to").at(1).at("ipBlock").as_object();
  ASSERT_EQ(v6.at("cidr"), "::/0");
  std::set<std::string> except;
  for (const auto& e : v6.at("except").as_array()) except.insert(std::string(e.as_string()));
  for (const char* want : {"64:ff9b::a00:0/104", "64:ff9b::ac10:0/108", "64:ff9b::c0a8:0/112",
                           "64:ff9b::6440:0/106", "64:ff9b::a9fe:0/112", "64:ff9b::c000:0/120",
                           "64:ff9b::a83f:8110/128", "64:ff9b::c633:6400/120", "64:ff9b:1::/48"}) {
    EXPECT_EQ(except.count(want), 1u) << want << " is not blocked";
  }
}

// The pod names its policy and its uid, so that its removal deletes that policy only; they are no
// labels.
TEST(PodManifestTest, PodNamesItsPolicy) {
  auto m = PodManifest(Named(), {.agent_image = "a"}, kBoxPolicy);
  ASSERT_TRUE(m.ok()) << m.error().ToString();
  const json::object meta = json::parse(*m).as_object().at("metadata").as_object();
  EXPECT_EQ(meta.at("annotations").as_object().at("agvisor.policy"), "agvisor-box-0a1b2c3d");
  EXPECT_EQ(meta.at("annotations").as_object().at("agvisor.policy-uid"), "u-1");
  EXPECT_EQ(meta.at("annotations").as_object().at("agvisor.image"), "agvisor/base:latest");
  kube::Pod pod;
  pod.annotations = {
      {"agvisor.policy", "p"}, {"agvisor.policy-uid", "0f1e-uid"}, {"agvisor.image", "x"}};
  EXPECT_EQ(LabelsOfPod(pod).count("agvisor.policy"), 0u);
  EXPECT_EQ(LabelsOfPod(pod).count("agvisor.policy-uid"), 0u);
  EXPECT_EQ(LabelsOfPod(pod).at("agvisor.image"), "x");
}

TEST(PodManifestTest, BridgePolicyRefusesOptionsItCannotUse) {
  const InstanceSpec i = Named();
  auto refused = [&](PodOptions o, std::string_view words) {
    auto m = NetworkPolicyManifest(i, o, kBoxPolicy);
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
  EXPECT_EQ(NetworkPolicyManifest(other, {}, kBoxPolicy).error().code(), ErrorCode::kUnsupported);
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
