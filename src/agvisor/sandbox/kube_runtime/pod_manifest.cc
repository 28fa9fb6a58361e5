#include "agvisor/sandbox/kube_runtime/pod_manifest.h"

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>

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

json::object SecurityContext() {
  json::array add;
  for (auto cap : kSandboxCapabilities) add.emplace_back(cap);
  return json::object{
      {"allowPrivilegeEscalation", false},
      {"privileged", false},
      {"capabilities", json::object{{"drop", json::array{"ALL"}}, {"add", std::move(add)}}},
  };
}

std::string Quantity(std::int64_t bytes) { return std::to_string(bytes); }

}  // namespace

std::string InstanceLabelValue(std::string_view name) {
  if (IsLabelValue(name)) return std::string(name);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(AgentHashOf(name)));
  return "h-" + std::string(buf);
}

Result<std::string> PodManifest(const InstanceSpec& spec, const PodOptions& options) {
  if (!IsDnsSubdomain(spec.name)) {
    return Error::InvalidArgument(
        "sandbox name " + spec.name +
        ": on Kubernetes a pod's name may hold only lower-case letters, digits, '-' and '.'");
  }
  if (spec.disk_cap) {
    return Error::Unsupported(
        "a root-disk cap cannot be enforced on Kubernetes (docs/kubernetes.md)");
  }
  if (spec.network != "bridge" && spec.network != "none") {
    return Error::Unsupported("network '" + spec.network +
                              "': on Kubernetes a sandbox's network is the pod network (bridge) "
                              "or none (a deny-all NetworkPolicy)");
  }
  Labels labels = spec.labels;
  labels[std::string(kLabelInstance)] = InstanceLabelValue(spec.name);

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
      {"securityContext", SecurityContext()},
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
  json::object pod{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", Metadata(spec.name, labels)},
      {"spec", std::move(pod_spec)},
  };
  return json::serialize(pod);
}

std::string DenyAllPolicyManifest(std::string_view name, const Labels& labels) {
  json::object policy{
      {"apiVersion", "networking.k8s.io/v1"},
      {"kind", "NetworkPolicy"},
      {"metadata", Metadata(name, labels)},
      {"spec",
       json::object{
           {"podSelector", json::object{{"matchLabels", json::object{{kLabelInstance,
                                                                      InstanceLabelValue(name)}}}}},
           // Both types with no rule: nothing in, nothing out.
           {"policyTypes", json::array{"Ingress", "Egress"}},
       }},
  };
  return json::serialize(policy);
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
  return "agvisor/agent:" + EmbeddedAgentHash();
}

}  // namespace agvisor
