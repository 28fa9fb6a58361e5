#include "agvisor/sandbox/kube_runtime/pod_manifest.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "agvisor/egress/address.h"
#include "agvisor/kube/codec.h"
#include "agvisor/sandbox/agent_blob.h"
#include "agvisor/sandbox/agent_paths.h"
#include "agvisor/sandbox/instance_spec.h"

namespace agvisor {
namespace {

namespace json = boost::json;
using kube::IsLabelValue;

constexpr std::string_view kAgentVolume = "agvisor-agent";
constexpr std::string_view kShmVolume = "agvisor-shm";
constexpr std::string_view kWorkspaceVolume = "agvisor-workspace";
constexpr std::string_view kInstallDir = "/agvisor-install";

bool IsAlnumLower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// Kubernetes' DNS-1123 subdomain: what pod and claim names must be.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!IsAlnumLower(c) && c != '-' && c != '.') return false;
  }
  return IsAlnumLower(s.front()) && IsAlnumLower(s.back());
}

// metadata for `name` with `labels`: label values Kubernetes refuses (an image name with '/' and
// ':', a long value) go to annotations (kube::DecodeObjectLabels merges them back).
json::object Metadata(std::string_view name, const Labels& labels) {
  json::object l, a;
  for (const auto& [k, v] : labels) {
    if (IsLabelValue(v)) {
      l[k] = v;
    } else {
      a[k] = v;
    }
  }
  json::object m{{"name", name}, {"labels", std::move(l)}};
  if (!a.empty()) m["annotations"] = std::move(a);
  return m;
}

// allow_setuid: setuid programs of the sandbox's container may gain their owner's rights
// (InstanceSpec::allow_setuid); the installer's never may.
json::object SecurityContext(bool allow_setuid = false) {
  json::array add;
  for (auto cap : kSandboxCapabilities) add.emplace_back(cap);
  return json::object{
      {"allowPrivilegeEscalation", allow_setuid},
      {"privileged", false},
      {"capabilities", json::object{{"drop", json::array{"ALL"}}, {"add", std::move(add)}}},
  };
}

std::string Quantity(std::int64_t bytes) { return std::to_string(bytes); }

Result<void> CheckNetwork(std::string_view network) {
  if (network != "bridge" && network != "none") {
    return Error::Unsupported("network '" + std::string(network) +
                              "': on Kubernetes a sandbox's network is the pod network (bridge, "
                              "the internet only) or none (a deny-all NetworkPolicy)");
  }
  return Ok();
}

std::string Hex(std::span<const unsigned char> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

// `pod`, or "h-" and the first 40 hex digits of its SHA-256 where `pod` is longer than `max`.
std::string ShortName(std::string_view pod, std::size_t max) {
  if (pod.size() <= max) return std::string(pod);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // SHA-256 cannot fail on a memory buffer short of an OpenSSL without it, which Debian's is not.
  EVP_Digest(pod.data(), pod.size(), digest, &size, EVP_sha256(), nullptr);
  return "h-" + Hex(std::span<const unsigned char>(digest, 20));
}

// `v4` as it appears inside NAT64's well-known prefix 64:ff9b::/96 (RFC 6052).
egress::Cidr Nat64Of(const egress::Cidr& v4) {
  egress::Cidr out{.base = {.family = egress::IpAddress::Family::kV6}, .prefix = 96 + v4.prefix};
  out.base.bytes[1] = 0x64;
  out.base.bytes[2] = 0xff;
  out.base.bytes[3] = 0x9b;
  for (int i = 0; i < 4; ++i) out.base.bytes[12 + i] = v4.base.bytes[i];
  return out;
}

// Everything of one address family but `blocked` and the options' blocks of that family; for
// IPv6 also the IPv4 blocks of both inside NAT64's prefix.
Result<json::object> InternetBlock(std::string_view all, bool v4,
                                   std::span<const std::string_view> blocked,
                                   const std::vector<std::string>& extra) {
  json::array except;
  for (auto b : blocked) except.emplace_back(b);
  if (!v4) {
    for (auto b : kBridgePodBlockedV4) {
      auto cidr = egress::ParseCidr(b);
      if (cidr.ok()) except.emplace_back(egress::FormatCidr(Nat64Of(*cidr)));
    }
  }
  for (const auto& text : extra) {
    auto cidr = egress::ParseCidr(text);
    if (!cidr.ok()) {
      return Error::InvalidArgument("$AGVISOR_KUBE_BLOCKED_CIDRS: " + cidr.error().message());
    }
    if (cidr->prefix == 0) {
      return Error::InvalidArgument(
          "$AGVISOR_KUBE_BLOCKED_CIDRS: " + text +
          " blocks every address; name the cluster's pod and service CIDRs there, and use "
          "network none for a sandbox with no network");
    }
    if (cidr->base.is_v4() == v4) {
      except.emplace_back(egress::FormatCidr(*cidr));
    } else if (!v4) {
      except.emplace_back(egress::FormatCidr(Nat64Of(*cidr)));
    }
  }
  return json::object{{"ipBlock", json::object{{"cidr", all}, {"except", std::move(except)}}}};
}

// A bridge pod's egress rules: the internet, and DNS to the cluster's resolver.
Result<json::array> BridgeEgress(const PodOptions& options) {
  json::object v4 =
      AGVISOR_TRY(InternetBlock("0.0.0.0/0", true, kBridgePodBlockedV4, options.blocked_cidrs));
  json::object v6 =
      AGVISOR_TRY(InternetBlock("::/0", false, kBridgePodBlockedV6, options.blocked_cidrs));
  json::array internet{std::move(v4), std::move(v6)};
  json::array resolvers{json::object{
      {"namespaceSelector",
       json::object{{"matchLabels", json::object{{kKubeDnsNamespaceLabel, "kube-system"}}}}},
      {"podSelector", json::object{{"matchLabels", json::object{{kKubeDnsPodLabel, "kube-dns"}}}}},
  }};
  for (const auto& text : options.dns_servers) {
    auto address = egress::ParseIpAddress(text);
    if (!address.ok()) {
      return Error::InvalidArgument("$AGVISOR_KUBE_DNS: " + address.error().message());
    }
    const egress::Cidr one{.base = *address, .prefix = address->is_v4() ? 32 : 128};
    resolvers.emplace_back(
        json::object{{"ipBlock", json::object{{"cidr", egress::FormatCidr(one)}}}});
  }
  json::array dns_ports{json::object{{"protocol", "UDP"}, {"port", 53}},
                        json::object{{"protocol", "TCP"}, {"port", 53}}};
  return json::array{
      json::object{{"to", std::move(internet)}},
      json::object{{"to", std::move(resolvers)}, {"ports", std::move(dns_ports)}},
  };
}

}  // namespace

Result<std::string> NewPolicyToken() {
  unsigned char raw[kPolicyTokenLength / 2];
  if (RAND_bytes(raw, sizeof raw) != 1) {
    return Error::Internal("make a network policy's name: RAND_bytes failed");
  }
  return Hex(raw);
}

std::string PolicyName(std::string_view pod, std::string_view token) {
  // 253: a DNS-1123 subdomain, the rule for a NetworkPolicy's name.
  return ShortName(pod, 253 - 1 - kPolicyTokenLength) + "-" + std::string(token);
}

std::string InstanceLabelValue(std::string_view pod, std::string_view token) {
  // 63: a label value's limit. A pod name's characters are a label value's.
  return ShortName(pod, 63 - 1 - kPolicyTokenLength) + "-" + std::string(token);
}

Result<std::string> PodManifest(const InstanceSpec& spec, const PodOptions& options,
                                const PolicyRef& policy) {
  if (!IsDnsSubdomain(spec.name)) {
    return Error::InvalidArgument(
        "sandbox name " + spec.name +
        ": on Kubernetes a pod's name may hold only lower-case letters, digits, '-' and '.'");
  }
  if (spec.disk_cap) {
    return Error::Unsupported(
        "a root-disk cap cannot be enforced on Kubernetes (docs/kubernetes.md)");
  }
  AGVISOR_RETURN_IF_ERROR(CheckNetwork(spec.network));
  Labels labels = spec.labels;
  labels.erase(std::string(kLabelInstance));
  if (!policy.token.empty()) {
    labels[std::string(kLabelInstance)] = InstanceLabelValue(spec.name, policy.token);
  }

  // The agent's own command line, minus --channel-stdio: the channel comes through an exec.
  json::array command;
  for (const auto& a : spec.argv) {
    if (a != "--channel-stdio") command.emplace_back(a);
  }
  json::array env;
  for (const auto& kv : spec.env) {
    auto eq = kv.find('=');
    env.emplace_back(json::object{{"name", kv.substr(0, eq)},
                                  {"value", eq == std::string::npos ? "" : kv.substr(eq + 1)}});
  }
  const std::string cpu =
      std::to_string(static_cast<std::int64_t>(std::llround(spec.cpus * 1000))) + "m";
  json::object quantities{{"cpu", cpu}, {"memory", Quantity(spec.memory_bytes)}};
  json::object resources{{"requests", quantities}, {"limits", quantities}};

  json::array mounts{json::object{{"name", kAgentVolume}, {"mountPath", kAgentDir}}};
  json::array volumes{json::object{{"name", kAgentVolume}, {"emptyDir", json::object{}}}};
  if (spec.shm_bytes > 0) {
    mounts.emplace_back(json::object{{"name", kShmVolume}, {"mountPath", "/dev/shm"}});
    volumes.emplace_back(json::object{
        {"name", kShmVolume},
        {"emptyDir", json::object{{"medium", "Memory"}, {"sizeLimit", Quantity(spec.shm_bytes)}}}});
  }
  if (spec.workspace) {
    mounts.emplace_back(json::object{{"name", kWorkspaceVolume}, {"mountPath", kWorkspace}});
    volumes.emplace_back(
        json::object{{"name", kWorkspaceVolume},
                     {"persistentVolumeClaim", json::object{{"claimName", *spec.workspace}}}});
  }

  json::object sandbox{
      {"name", kPodSandboxContainer},
      {"image", spec.image},
      {"imagePullPolicy", "IfNotPresent"},
      {"command", std::move(command)},
      {"resources", resources},
      {"securityContext", SecurityContext(spec.allow_setuid)},
      {"volumeMounts", std::move(mounts)},
  };
  if (!env.empty()) sandbox["env"] = std::move(env);
  if (!spec.working_dir.empty()) sandbox["workingDir"] = spec.working_dir;

  const std::string installed = std::string(kInstallDir) + "/agvisor-agent";
  json::object installer{
      {"name", kPodAgentInstaller},
      {"image", options.agent_image},
      {"imagePullPolicy", "IfNotPresent"},
      {"command", json::array{kAgentImageBusybox, "cp", kAgentImageBinary, installed}},
      {"resources", resources},
      {"securityContext", SecurityContext()},
      {"volumeMounts",
       json::array{json::object{{"name", kAgentVolume}, {"mountPath", kInstallDir}}}},
  };

  json::object pod_spec{
      {"restartPolicy", "Never"},
      {"runtimeClassName", spec.runtime},
      {"automountServiceAccountToken", false},
      {"enableServiceLinks", false},
      {"terminationGracePeriodSeconds", 5},
      {"initContainers", json::array{std::move(installer)}},
      {"containers", json::array{std::move(sandbox)}},
      {"volumes", std::move(volumes)},
  };
  if (auto it = spec.labels.find(std::string(kLabelLifetime)); it != spec.labels.end()) {
    char* end = nullptr;
    const long long lifetime = std::strtoll(it->second.c_str(), &end, 10);
    if (end != nullptr && *end == '\0' && lifetime > 0) {
      pod_spec["activeDeadlineSeconds"] = lifetime + options.deadline_margin_seconds;
    }
  }
  json::object metadata = Metadata(spec.name, labels);
  if (!policy.name.empty()) {
    auto& annotations = metadata["annotations"];
    if (!annotations.is_object()) annotations = json::object{};
    annotations.as_object()[kAnnotationPolicyName] = policy.name;
    annotations.as_object()[kAnnotationPolicyUid] = policy.uid;
  }
  json::object pod{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", std::move(metadata)},
      {"spec", std::move(pod_spec)},
  };
  return json::serialize(pod);
}

Result<std::string> NetworkPolicyManifest(const InstanceSpec& spec, const PodOptions& options,
                                          const PolicyRef& policy) {
  AGVISOR_RETURN_IF_ERROR(CheckNetwork(spec.network));
  json::object policy_spec{
      {"podSelector",
       json::object{{"matchLabels",
                     json::object{{kLabelInstance, InstanceLabelValue(spec.name, policy.token)}}}}},
      // Both types: what no rule allows is denied. No ingress rule: nothing comes in.
      {"policyTypes", json::array{"Ingress", "Egress"}},
  };
  if (spec.network == "bridge") {
    json::array egress = AGVISOR_TRY(BridgeEgress(options));
    policy_spec["egress"] = std::move(egress);
  }
  json::object manifest{
      {"apiVersion", "networking.k8s.io/v1"},
      {"kind", "NetworkPolicy"},
      {"metadata", Metadata(policy.name, spec.labels)},
      {"spec", std::move(policy_spec)},
  };
  return json::serialize(manifest);
}

std::string ClaimManifest(std::string_view name, const Labels& labels, std::string_view size) {
  json::object claim{
      {"apiVersion", "v1"},
      {"kind", "PersistentVolumeClaim"},
      {"metadata", Metadata(name, labels)},
      {"spec",
       json::object{
           {"accessModes", json::array{"ReadWriteOnce"}},
           {"resources", json::object{{"requests", json::object{{"storage", size}}}}},
       }},
  };
  return json::serialize(claim);
}

std::string AgentImageRefForKube() {
  if (const char* env = std::getenv("AGVISOR_KUBE_AGENT_IMAGE"); env != nullptr && *env != '\0') {
    return env;
  }
  std::string registry;
  if (const char* env = std::getenv("AGVISOR_KUBE_REGISTRY"); env != nullptr) registry = env;
  while (!registry.empty() && registry.back() == '/') registry.pop_back();
  return (registry.empty() ? "" : registry + "/") + "agvisor/agent:" + EmbeddedAgentHash();
}

bool ImageNamesRegistry(std::string_view image) {
  const auto slash = image.find('/');
  if (slash == std::string_view::npos) return false;
  const std::string_view first = image.substr(0, slash);
  return first == "localhost" || first.find_first_of(".:") != std::string_view::npos;
}

}  // namespace agvisor
