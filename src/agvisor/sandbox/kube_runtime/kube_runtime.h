// KubernetesRuntime: the Runtime (runtime.h) of a Kubernetes namespace, over kube::Client
// (kube/). A sandbox is a Pod (pod_manifest.h) with runtimeClassName a gVisor RuntimeClass; its
// channel is an exec of `agvisor-agent connect` over the API server's WebSocket exec stream;
// a named sandbox's volume is a PersistentVolumeClaim; every pod gets a NetworkPolicy made
// before it (pod_manifest.h: deny-all for network none, the internet only for bridge). Addressed as
// kube://[CONTEXT][/NAMESPACE] (kube/kubeconfig.h). What a cluster cannot do (pause, egress
// networks, disk caps, snapshots, live resize) is refused with kUnsupported and the reason.
// docs/kubernetes.md is the user's view.
//
// Everything of the sandbox layer that speaks Kubernetes is in this folder (the layering test
// checks it).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "agvisor/kube/codec.h"
#include "agvisor/sandbox/kube_runtime/pod_manifest.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor {
namespace kube {
class Client;
}

// A pod's state in the words of InstanceState (runtime.h): Pending "created", Running "running"
// (its sandbox container running), Succeeded/Failed "exited" with the sandbox container's exit
// code and OOMKilled, a pod being deleted "removing", Unknown "dead". Pure.
InstanceState InstanceStateOfPod(const kube::Pod& pod);
// Its labels and agvisor's annotations, merged (pod_manifest.h puts label values Kubernetes
// refuses into annotations).
Labels LabelsOfPod(const kube::Pod& pod);

// A new runtime of `host` (a kube: address), with DefaultOptions (MakeRuntime, runtimes.h, is the
// door to it). Errors: those of kube::ParseKubeAddress, kube::LoadCredentials and
// kube::Client::Connect.
Result<std::shared_ptr<Runtime>> MakeKubernetesRuntime(std::string_view host);
// Whether `host` is a kube: address (kube::ParseKubeAddress), without reading any kubeconfig.
Result<void> CheckKubeAddress(std::string_view host);

class KubernetesRuntime final : public Runtime {
 public:
  struct Options {
    // The agent image ($AGVISOR_KUBE_AGENT_IMAGE), and what a bridge pod's NetworkPolicy also
    // blocks and lets it ask for names: $AGVISOR_KUBE_BLOCKED_CIDRS and $AGVISOR_KUBE_DNS,
    // comma-separated (docs/kubernetes.md).
    PodOptions pod;
    // The RuntimeClass for the default runtime ("runsc"): $AGVISOR_KUBE_RUNTIME_CLASS or gvisor.
    std::string default_runtime_class = "gvisor";
    // A named sandbox's claim size: $AGVISOR_KUBE_WORKSPACE_SIZE or 10Gi.
    std::string workspace_size = "10Gi";
    // How long a pod may take to run (image pulls on a real cluster). Below the sweep's 120 s
    // (sweep.h), which removes pods still Pending past it: by then their creator gave up.
    std::chrono::seconds start_timeout{100};
  };
  // Options from the environment (above).
  static Options DefaultOptions();

  KubernetesRuntime(std::string host, std::shared_ptr<kube::Client> client, Options options);
  ~KubernetesRuntime() override;

  const std::string& host() const override { return host_; }
  const RuntimeTraits& traits() const override { return traits_; }

  // `runtime` names a RuntimeClass ("runsc", the default, means options.default_runtime_class);
  // refused unless the cluster has it with handler runsc or gvisor. Only the systrap platform
  // (a RuntimeClass's handler decides the platform on its nodes: make one per platform).
  Result<std::string> RequireGvisor(std::string_view runtime, std::string_view platform,
                                    bool network_none) override;
  // systrap: agvisor cannot choose ptrace per pod. The first call warns once (RuntimeClass).
  Result<std::string> DefaultPlatform(std::string_view runtime, std::string* warning) override;
  Result<DiskCapSupport> ProbeDiskCap(std::string_view runtime, std::string_view image) override;
  Result<HostCapacity> Capacity() override;
  // The image itself: the agent comes from the installer init container, not a derived image.
  Result<std::string> PrepareImage(std::string_view image) override;

  // Network policy (NetworkPolicyManifest, under a fresh token: PolicyRef), pod,
  // wait until it runs, then the channel: an exec of `agvisor-agent connect --wait 30`. Marks
  // "create network policy", "create pod", "pod running", "exec connect". Errors: also
  // kInvalidArgument for options the policy cannot be made of, kConflict when a pod of the name
  // exists.
  Result<StartedInstance> CreateAndStart(const InstanceSpec& spec, StepTrace& trace,
                                         StderrSink on_stderr) override;
  Result<InstanceInfo> Inspect(std::string_view ref) override;
  Result<std::vector<InstanceSummary>> List(const std::vector<std::string>& label_filters) override;
  // Deletes the pod at once and waits (up to 30 s) until it is gone, then its network policy
  // (the one of the name and uid its annotations name; none when there was no pod).
  Result<bool> Remove(std::string_view ref) override;
  Result<void> Pause(std::string_view id) override;                                 // kUnsupported
  Result<void> Unpause(std::string_view id) override;                               // kUnsupported
  Result<LiveLimits> Resize(std::string_view id, const ResizeSpec& spec) override;  // kUnsupported
  Result<LiveLimits> ReadLimits(std::string_view id) override;                      // kUnsupported
  Result<SandboxStats> Stats(std::string_view id) override;                         // kUnsupported
  // Images live in registries a cluster pulls from; snapshots need a node's image store.
  Result<ImageConfig> ImageConfigOf(std::string_view image) override;  // kUnsupported
  Result<std::string> ImportImage(
      std::string_view ref, const ImageConfig& config, const channel::ByteSource& tar,
      const std::function<void(std::string_view)>& progress) override;               // kUnsupported
  Result<std::vector<ImageEntry>> ImagesWithLabel(std::string_view label) override;  // none
  Result<bool> RemoveImage(std::string_view ref) override;                           // kUnsupported
  void WaitNotRunning(std::string_view id, std::chrono::milliseconds timeout) override;
  bool EndedByMemoryLimit(std::string_view id) override;

  Result<std::unique_ptr<channel::Transport>> OpenExecStream(std::string_view id,
                                                             const std::vector<std::string>& argv,
                                                             StderrSink on_stderr) override;
  Result<int> RunExec(std::string_view id, const std::vector<std::string>& argv,
                      const OutputSink& on_stdout, const StderrSink& on_stderr) override;

  Result<bool> EnsureVolume(std::string_view name, const Labels& labels) override;
  Result<std::optional<Labels>> VolumeLabels(std::string_view name) override;
  Result<bool> RemoveVolume(std::string_view name) override;

  Result<void> CheckEgressSupport() override;  // kUnsupported: no enforcer yet
  Result<SandboxNetwork> EnsureEgressNetwork(std::string_view name,
                                             const egress::EgressRules& rules,
                                             const Labels& labels) override;  // kUnsupported
  Result<void> RemoveEgressNetwork(std::string_view name) override;           // nothing to do
  Result<std::string> CreateSharedNetwork(std::string_view name) override;    // kUnsupported
  Result<std::map<std::string, std::int64_t>> VolumeSizes() override;         // kUnsupported

 private:
  Result<void> WaitRunning(const std::string& name);
  // Creates the NetworkPolicy of `spec` (NetworkPolicyManifest) under a fresh token. Errors: those
  // of the manifest; kConflict when one of its name exists (never replaced).
  Result<PolicyRef> CreatePolicy(const InstanceSpec& spec);

  std::string host_;
  std::shared_ptr<kube::Client> client_;
  Options options_;
  RuntimeTraits traits_{.kind = "kubernetes"};
  std::mutex mu_;
  std::atomic<bool> platform_fallback_warned_{false};
  std::map<std::string, std::string, std::less<>> verified_classes_;  // guarded by mu_
};

}  // namespace agvisor
