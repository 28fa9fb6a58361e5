// The Kubernetes objects of a sandbox, as pure functions of its InstanceSpec: the Pod (with the
// invariants of runtime.h), the NetworkPolicy every sandbox pod gets (deny-all for network none;
// internet only for bridge) and the PersistentVolumeClaim of a named one. pod_manifest_test.cc pins
// them. Used by KubernetesRuntime (kube_runtime.h); docs/kubernetes.md explains each field.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor {

// The sandbox's container in its pod; the init container that puts the agent in place.
inline constexpr std::string_view kPodSandboxContainer = "sandbox";
inline constexpr std::string_view kPodAgentInstaller = "agvisor-agent";
// The label that selects one sandbox's pod (its NetworkPolicy's selector): InstanceLabelValue, the
// pod's name (or a hash of it) and the random token of the create that made it.
inline constexpr std::string_view kLabelInstance = "agvisor.instance";
// The pod's annotations naming its NetworkPolicy (name and metadata.uid): its removal deletes that
// policy only (uid precondition), never one that another create of the name made.
inline constexpr std::string_view kAnnotationPolicyName = "agvisor.policy";
inline constexpr std::string_view kAnnotationPolicyUid = "agvisor.policy-uid";
// Where the agent image keeps the agent and busybox (the installer copies the one with the other).
inline constexpr std::string_view kAgentImageBinary = "/agvisor-agent";
inline constexpr std::string_view kAgentImageBusybox = "/bin/busybox";

struct PodOptions {
  std::string agent_image;  // the image with the agent (AgentImageRefForKube)
  // Added to the lifetime for activeDeadlineSeconds: the agent ends the sandbox at its lifetime;
  // Kubernetes kills the pod this much later if the agent did not.
  std::int64_t deadline_margin_seconds = 60;
  // A bridge pod's NetworkPolicy (NetworkPolicyManifest), as the operator wrote them (checked
  // where the policy is made): blocks it must not reach besides kBridgePodBlockedV4/V6 (the
  // cluster's pod and service CIDRs where they are outside those ranges, a public API server
  // address), and resolvers it may ask on port 53 besides the kube-dns pods of kube-system (a
  // node-local cache, the kube-dns Service's address for a CNI that judges before the Service's
  // translation).
  std::vector<std::string> blocked_cidrs;
  std::vector<std::string> dns_servers;
};

// What a bridge pod never reaches, whatever the options say: the blocks the Docker host's sandbox
// firewall closes (docs/security.md): RFC 1918, carrier-grade NAT (most clusters' pod and service
// CIDRs are in one of these), link-local (cloud metadata at 169.254.169.254, node-local DNS
// caches), 192.0.0.0/24 (an older metadata address), Azure's platform endpoint, and IPv6's
// unique-local (fd00:ec2::254, a metadata address, is in it) and link-local ranges.
inline constexpr std::array<std::string_view, 7> kBridgePodBlockedV4 = {
    "10.0.0.0/8",     "172.16.0.0/12", "192.168.0.0/16",  "100.64.0.0/10",
    "169.254.0.0/16", "192.0.0.0/24",  "168.63.129.16/32"};
// IPv6 also: 64:ff9b:1::/48 (local-use NAT64, RFC 8215: whatever the operator translates it to),
// and, made by NetworkPolicyManifest, every IPv4 block above (and of PodOptions::blocked_cidrs) as
// it appears inside NAT64's well-known 64:ff9b::/96 (RFC 6052): on an IPv6-only cluster with
// NAT64, 64:ff9b::a00:1 is 10.0.0.1.
inline constexpr std::array<std::string_view, 3> kBridgePodBlockedV6 = {"fc00::/7", "fe80::/10",
                                                                        "64:ff9b:1::/48"};
// The cluster resolver's pods, as kube-dns and CoreDNS label them, in the namespace labelled
// kKubeDnsNamespaceLabel=kube-system (Kubernetes labels every namespace with its name).
inline constexpr std::string_view kKubeDnsNamespaceLabel = "kubernetes.io/metadata.name";
inline constexpr std::string_view kKubeDnsPodLabel = "k8s-app";

// One create's NetworkPolicy. `token`: 8 random hex digits (NewPolicyToken), fresh for each create,
// in the policy's name and its selector's value, so that two creates of one name never share,
// replace or delete each other's policy, and a policy left behind selects no later pod. `uid`:
// the API server's, once made.
struct PolicyRef {
  std::string name;   // PolicyName(pod, token)
  std::string token;  //
  std::string uid;
};
inline constexpr std::size_t kPolicyTokenLength = 8;
// A fresh token (OpenSSL's RAND_bytes). Errors: kInternal (no randomness).
Result<std::string> NewPolicyToken();
// The policy's name: "POD-TOKEN", or "h-HASH-TOKEN" where that would be longer than the 253
// characters of a name (HASH: the first 40 hex digits of the SHA-256 of `pod`).
std::string PolicyName(std::string_view pod, std::string_view token);
// The value of kLabelInstance for pod `pod` made with `token`: "POD-TOKEN", or "h-HASH-TOKEN"
// where that would be longer than the 63 characters of a label value. Distinct names or tokens
// give distinct values (the token has a fixed length; pod names never start with "h-", and SHA-256
// collisions are out of reach).
std::string InstanceLabelValue(std::string_view pod, std::string_view token);

// The Pod for `spec` as JSON: name spec.name; labels (those whose values Kubernetes allows as
// label values; the others as annotations); runtimeClassName spec.runtime; one init container
// copying the agent into an emptyDir mounted at kAgentDir; the sandbox container running the
// agent's init WITHOUT --channel-stdio (Kubernetes logs PID 1's stdout, which must not carry a
// channel), requests = limits (cpu, memory), /dev/shm as a memory emptyDir of spec.shm_bytes,
// the workspace claim at /workspace; restartPolicy Never, activeDeadlineSeconds from the lifetime
// label, no service account token, no service links, no privilege escalation, capabilities ALL
// dropped but kSandboxCapabilities. Errors: kInvalidArgument (a name that is not a DNS-1123
// subdomain: Kubernetes' rule for pod names), kUnsupported (what a pod cannot carry: a disk cap,
// a network other than bridge or none). `policy`: its NetworkPolicy (a `policy.token` empty only to
// check the spec): kLabelInstance=InstanceLabelValue(spec.name, policy.token), and the annotations
// kAnnotationPolicyName and kAnnotationPolicyUid.
Result<std::string> PodManifest(const InstanceSpec& spec, const PodOptions& options,
                                const PolicyRef& policy = {});

// The NetworkPolicy `policy.name` that selects the pod labelled
// kLabelInstance=InstanceLabelValue(spec.name, policy.token) and no other, made before the pod
// for every sandbox. Both policy
// types, no ingress rule: agvisor reaches a pod only through the API server (pods/exec), never over
// the pod network. Egress: network none, none at all; bridge, every address but
// kBridgePodBlockedV4/V6 and options.blocked_cidrs, and DNS (UDP and TCP 53) to the kube-dns pods
// and options.dns_servers. Errors: kInvalidArgument (an entry of options.blocked_cidrs that is no
// CIDR block or a /0, one of options.dns_servers that is no address: each names
// $AGVISOR_KUBE_BLOCKED_CIDRS or $AGVISOR_KUBE_DNS), kUnsupported (another network, as
// PodManifest).
Result<std::string> NetworkPolicyManifest(const InstanceSpec& spec, const PodOptions& options,
                                          const PolicyRef& policy);

// The claim `name` (ReadWriteOnce, `size`, the cluster's default storage class).
std::string ClaimManifest(std::string_view name, const Labels& labels, std::string_view size);

// "[$AGVISOR_KUBE_REGISTRY/]agvisor/agent:<16 hex of the embedded agent's FNV-1a hash>": the
// image the installer runs, made by `docs/kubernetes.md`'s recipe (tests build it locally).
// $AGVISOR_KUBE_AGENT_IMAGE overrides it.
std::string AgentImageRefForKube();

// Whether `image` names its registry ("registry.example.invalid/agvisor/agent:x",
// "localhost:5000/a"): its first path component has a '.' or ':' or is localhost. A name without
// one ("agvisor/agent:x") is looked up by a real cluster's nodes in a public registry, where
// anyone may publish under that name (`agvisor doctor` warns).
bool ImageNamesRegistry(std::string_view image);

}  // namespace agvisor
