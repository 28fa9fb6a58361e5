#include "agvisor/sandbox/kube_runtime/kube_doctor.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "agvisor/kube/client.h"
#include "agvisor/kube/kubeconfig.h"
#include "agvisor/sandbox/kube_runtime/kube_runtime.h"
#include "agvisor/sandbox/kube_runtime/pod_manifest.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor {
namespace {

using Status = HostCheck::Status;

// Every call KubernetesRuntime makes through kube::Client, as the permission it needs. Exec over
// WebSocket is a GET that the API server authorizes as "get" on pods/exec, and since 1.30 also as
// "create" (the AuthorizePodWebsocketUpgradeCreatePermission gate, on by default): both.
const std::vector<kube::Access>& RuntimeAccess() {
  static const std::vector<kube::Access> access = {
      {"", "pods", "create"},                              // CreatePod
      {"", "pods", "get"},                                 // GetPod (waits, Inspect)
      {"", "pods", "list"},                                // ListPods (list, sweep, pools)
      {"", "pods", "delete"},                              // DeletePod
      {"", "pods/exec", "create"},                         // Exec (the channel, RunExec)
      {"", "pods/exec", "get"},                            //
      {"", "persistentvolumeclaims", "create"},            // named sandboxes' workspaces
      {"", "persistentvolumeclaims", "get"},               // VolumeLabels
      {"", "persistentvolumeclaims", "delete"},            // delete --erase
      {"networking.k8s.io", "networkpolicies", "create"},  // network none
      {"networking.k8s.io", "networkpolicies", "delete"},  //
      {"node.k8s.io", "runtimeclasses", "get"},            // RequireGvisor (cluster-scoped)
  };
  return access;
}

std::string Name(const kube::Access& a) {
  return (a.group.empty() ? "core" : a.group) + "/" + a.resource + " " + a.verb;
}

std::string Ms(std::chrono::steady_clock::duration d) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f ms", std::chrono::duration<double, std::milli>(d).count());
  return b;
}

// Where LoadCredentials took them from (kubeconfig.h), in words.
std::string CredentialSource(const kube::Credentials& c) {
  const char* env = std::getenv("KUBECONFIG");
  if (env != nullptr && *env != '\0') return "$KUBECONFIG (" + std::string(env) + ")";
  if (c.context == "in-cluster") return "the pod's service account";
  return "~/.kube/config";
}

std::string Joined(std::span<const std::string_view> fixed, const std::vector<std::string>& more) {
  std::string out;
  for (auto f : fixed) out += (out.empty() ? "" : ", ") + std::string(f);
  for (const auto& m : more) out += (out.empty() ? "" : ", ") + m;
  return out;
}

HostCheck NetworkPolicyCheck(const PodOptions& options) {
  InstanceSpec probe;
  probe.name = "agvisor-doctor";
  probe.network = "bridge";
  const std::string token(kPolicyTokenLength, '0');
  if (auto policy = NetworkPolicyManifest(probe, options,
                                          {.name = PolicyName(probe.name, token), .token = token});
      !policy.ok()) {
    return {"network policy", Status::kFail, policy.error().message(),
            "write comma-separated CIDR blocks in $AGVISOR_KUBE_BLOCKED_CIDRS and addresses in "
            "$AGVISOR_KUBE_DNS (docs/kubernetes.md)"};
  }
  std::vector<std::string> blocked;
  for (auto v6 : kBridgePodBlockedV6) blocked.emplace_back(v6);
  blocked.insert(blocked.end(), options.blocked_cidrs.begin(), options.blocked_cidrs.end());
  blocked.emplace_back("the IPv4 ones inside NAT64's 64:ff9b::/96");
  std::string dns = "the kube-dns pods of kube-system";
  for (const auto& d : options.dns_servers) dns += ", " + d;
  return {"network policy", Status::kWarn,
          "every sandbox pod gets a NetworkPolicy (network none: deny-all; bridge: no ingress, "
          "egress to every address but " +
              Joined(kBridgePodBlockedV4, blocked) + ", DNS to " + dns +
              "); whether the cluster's CNI enforces NetworkPolicies cannot be verified from "
              "outside (one that does not ignores them silently, and bridge pods then reach the "
              "cluster)",
          "use a CNI that enforces NetworkPolicies (Calico, Cilium, GKE Dataplane V2); name the "
          "pod and service CIDRs outside private ranges in $AGVISOR_KUBE_BLOCKED_CIDRS"};
}

}  // namespace

std::vector<std::string> KubeRuntimePermissions() {
  std::vector<std::string> out;
  for (const auto& a : RuntimeAccess()) out.push_back(Name(a));
  return out;
}

std::vector<HostCheck> DiagnoseKubeHost(std::string_view host) {
  std::vector<HostCheck> checks;
  const std::string fix_credentials =
      "set KUBECONFIG or ~/.kube/config to a context that reaches the cluster (kubectl "
      "--context CONTEXT version must work); inside a pod, the service account is used "
      "(deploy/agvisord.yaml)";

  // 1. Credentials and the API server.
  auto address = kube::ParseKubeAddress(host);
  if (!address.ok()) {
    checks.push_back({"kubernetes", Status::kFail, address.error().message(),
                      "write the host as kube://[CONTEXT][/NAMESPACE] (docs/kubernetes.md)"});
    return checks;
  }
  auto credentials = kube::LoadCredentials(*address);
  if (!credentials.ok()) {
    checks.push_back({"kubernetes", Status::kFail, credentials.error().message(), fix_credentials});
    return checks;
  }
  const std::string source = CredentialSource(*credentials);
  const std::string where = credentials->ToString();
  auto t0 = std::chrono::steady_clock::now();
  auto client = kube::Client::Connect(*credentials);
  auto version = client.ok() ? (*client)->ServerVersion() : Result<std::string>(client.error());
  if (!version.ok()) {
    checks.push_back({"kubernetes", Status::kFail,
                      "credentials from " + source + ", " + where +
                          ": the API server does not answer: " + version.error().message(),
                      fix_credentials});
    return checks;
  }
  checks.push_back({"kubernetes", Status::kOk,
                    "credentials from " + source + ", " + where + ": Kubernetes " + *version +
                        ", answered in " + Ms(std::chrono::steady_clock::now() - t0)});

  // 2. The namespace: agvisor's pods there.
  const std::string ns = (*client)->namespace_name();
  if (auto pods = (*client)->ListPods("agvisor"); !pods.ok()) {
    checks.push_back({"namespace", Status::kFail,
                      "namespace " + ns + ": cannot list pods: " + pods.error().message(),
                      "create the namespace, or name another one: kube://CONTEXT/NAMESPACE"});
  } else {
    checks.push_back({"namespace", Status::kOk,
                      "namespace " + ns + ": " + std::to_string(pods->size()) +
                          " agvisor pod(s) (label agvisor)"});
  }

  // 3. The RuntimeClass, checked as every create checks it.
  auto options = KubernetesRuntime::DefaultOptions();
  KubernetesRuntime runtime(std::string(host), *client, options);
  if (auto cls = runtime.RequireGvisor("runsc", "", false); !cls.ok()) {
    checks.push_back({"runtime class", Status::kFail, cls.error().message(),
                      "kubectl apply -f deploy/runtimeclass.yaml (handler runsc: the nodes need "
                      "containerd's runsc shim), or on GKE a node pool with GKE Sandbox (class "
                      "gvisor); set AGVISOR_KUBE_RUNTIME_CLASS to use another class"});
  } else {
    checks.push_back(
        {"runtime class", Status::kOk,
         "RuntimeClass " + *cls + " has a gVisor handler (runsc or gvisor): sandboxes run on it" +
             (std::getenv("AGVISOR_KUBE_RUNTIME_CLASS") ? " ($AGVISOR_KUBE_RUNTIME_CLASS)" : "")});
  }

  // 4. RBAC: one SelfSubjectAccessReview per permission used.
  {
    std::vector<std::string> denied;
    std::string unknown;
    for (const auto& a : RuntimeAccess()) {
      auto r = (*client)->ReviewAccess(a);
      if (!r.ok()) {
        unknown = r.error().message();
        break;
      }
      if (!r->allowed)
        denied.push_back(Name(a) + (r->reason.empty() ? "" : " (" + r->reason + ")"));
    }
    const std::string n = std::to_string(RuntimeAccess().size());
    if (!unknown.empty()) {
      checks.push_back({"rbac", Status::kWarn,
                        "could not check the " + n +
                            " permissions the runtime uses (SelfSubjectAccessReview: " + unknown +
                            ")",
                        "compare your role with deploy/rbac.yaml"});
    } else if (!denied.empty()) {
      std::string list;
      for (const auto& d : denied) list += (list.empty() ? "" : ", ") + d;
      checks.push_back({"rbac", Status::kFail,
                        "namespace " + ns + ": denied " + std::to_string(denied.size()) + " of " +
                            n + " permissions the runtime uses: " + list,
                        "kubectl apply -n " + ns +
                            " -f deploy/rbac.yaml, and bind the Role agvisor and the ClusterRole "
                            "agvisor-runtimeclasses to these credentials (deploy/agvisord.yaml "
                            "binds them to agvisord's service account)"});
    } else {
      checks.push_back({"rbac", Status::kOk,
                        "namespace " + ns + ": all " + n +
                            " permissions the runtime uses are allowed (SelfSubjectAccessReview)"});
    }
  }

  // 5. The NetworkPolicy of every sandbox pod: made as a create makes it; whether the cluster
  // enforces it is the CNI's business, which nothing outside the cluster's nodes can see.
  checks.push_back(NetworkPolicyCheck(options.pod));

  // 6. The images the nodes pull.
  const std::string& agent = options.pod.agent_image;
  const bool agent_qualified = ImageNamesRegistry(agent);
  checks.push_back(
      {"agent image", agent_qualified ? Status::kInfo : Status::kWarn,
       agent +
           (std::getenv("AGVISOR_KUBE_AGENT_IMAGE")
                ? " ($AGVISOR_KUBE_AGENT_IMAGE)"
                : " (this build's agent; $AGVISOR_KUBE_AGENT_IMAGE names another)") +
           ": the nodes must be able to pull it (docs/kubernetes.md makes it)" +
           (agent_qualified ? ""
                            : "; it names no registry, so a real cluster's nodes look for it in "
                              "a public one, where anyone may publish that name"),
       "push it to the registry your nodes pull from and set $AGVISOR_KUBE_REGISTRY to that "
       "registry (or $AGVISOR_KUBE_AGENT_IMAGE to the whole name)"});
  checks.push_back({"sandbox image", Status::kInfo,
                    std::string(kDefaultImage) +
                        " by default: the nodes pull it (no image is built on a cluster); on a "
                        "real cluster name images with their registry (--image "
                        "REGISTRY/agvisor/base:latest)"});
  checks.push_back({"sandbox", Status::kInfo,
                    "no pod is started by doctor on a cluster: `agvisor --host " +
                        std::string(host) + " run -- true` starts one"});
  return checks;
}

}  // namespace agvisor
