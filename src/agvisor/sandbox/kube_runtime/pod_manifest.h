// The Kubernetes objects of a sandbox, as pure functions of its InstanceSpec: the Pod (with the
// invariants of runtime.h), the deny-all NetworkPolicy of a network-none sandbox and the
// PersistentVolumeClaim of a named one. pod_manifest_test.cc pins them. Used by
// KubernetesRuntime (kube_runtime.h); docs/kubernetes.md explains each field.
#pragma once

#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor {

// The sandbox's container in its pod; the init container that puts the agent in place.
inline constexpr std::string_view kPodSandboxContainer = "sandbox";
inline constexpr std::string_view kPodAgentInstaller = "agvisor-agent";
// The label that selects one sandbox's pod (its NetworkPolicy's selector): the pod's name, or a
// hash of it where the name is longer than a label value may be.
inline constexpr std::string_view kLabelInstance = "agvisor.instance";
// Where the agent image keeps the agent and busybox (the installer copies the one with the other).
inline constexpr std::string_view kAgentImageBinary = "/agvisor-agent";
inline constexpr std::string_view kAgentImageBusybox = "/bin/busybox";

struct PodOptions {
  std::string agent_image;  // the image with the agent (AgentImageRefForKube)
  // Added to the lifetime for activeDeadlineSeconds: the agent ends the sandbox at its lifetime;
  // Kubernetes kills the pod this much later if the agent did not.
  std::int64_t deadline_margin_seconds = 60;
};

// The value of kLabelInstance for pod `name`.
std::string InstanceLabelValue(std::string_view name);

// The Pod for `spec` as JSON: name spec.name; labels (those whose values Kubernetes allows as
// label values; the others as annotations); runtimeClassName spec.runtime; one init container
// copying the agent into an emptyDir mounted at kAgentDir; the sandbox container running the
// agent's init WITHOUT --channel-stdio (Kubernetes logs PID 1's stdout, which must not carry a
// channel), requests = limits (cpu, memory), /dev/shm as a memory emptyDir of spec.shm_bytes,
// the workspace claim at /workspace; restartPolicy Never, activeDeadlineSeconds from the lifetime
// label, no service account token, no service links, no privilege escalation, capabilities ALL
// dropped but kSandboxCapabilities. Errors: kInvalidArgument (a name that is not a DNS-1123
// subdomain: Kubernetes' rule for pod names), kUnsupported (what a pod cannot carry: a disk cap,
// a network other than bridge or none).
Result<std::string> PodManifest(const InstanceSpec& spec, const PodOptions& options);

// The NetworkPolicy `name` that denies all ingress and egress of the pod labelled
// kLabelInstance=InstanceLabelValue(name).
std::string DenyAllPolicyManifest(std::string_view name, const Labels& labels);

// The claim `name` (ReadWriteOnce, `size`, the cluster's default storage class).
std::string ClaimManifest(std::string_view name, const Labels& labels, std::string_view size);

// "agvisor/agent:<16 hex of the embedded agent's FNV-1a hash>": the image the installer runs,
// made by `docs/kubernetes.md`'s recipe (tests build it locally). $AGVISOR_KUBE_AGENT_IMAGE
// overrides it.
std::string AgentImageRefForKube();

}  // namespace agvisor
