#include "agvisor/sandbox/kube_runtime/kube_runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "agvisor/base/strings.h"
#include "agvisor/kube/client.h"
#include "agvisor/kube/kubeconfig.h"
#include "agvisor/sandbox/agent_paths.h"
#include "agvisor/sandbox/instance_spec.h"

namespace agvisor {
namespace {

using Clock = std::chrono::steady_clock;

// A process's stdio over a Kubernetes exec stream: its stdin and its stdout; stderr goes to
// `on_stderr`. A read error names `what` (the exec and its pod): an exec that never started ends
// with the server's reason (kube::ExecStream::ReadStdout), which a channel's handshake reports.
class KubeExecTransport : public channel::Transport {
 public:
  KubeExecTransport(std::unique_ptr<kube::ExecStream> stream, StderrSink on_stderr,
                    std::string what)
      : stream_(std::move(stream)), on_stderr_(std::move(on_stderr)), what_(std::move(what)) {}
  ~KubeExecTransport() override { Close(); }
  Result<std::size_t> Read(std::span<char> buf) override {
    auto n = stream_->ReadStdout(buf, [this](std::string_view b) {
      if (on_stderr_) on_stderr_(b);
    });
    if (!n.ok()) return n.error().WithContext(what_);
    return n;
  }
  Result<void> Write(std::string_view data) override { return stream_->Write(data); }
  void Close() override { stream_->Close(); }

 private:
  std::unique_ptr<kube::ExecStream> stream_;
  StderrSink on_stderr_;
  std::string what_;
};

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// The comma-separated entries of $name, blanks around them dropped, empty ones skipped.
std::vector<std::string> EnvList(const char* name) {
  std::vector<std::string> out;
  const char* v = Env(name);
  if (v == nullptr) return out;
  for (std::string_view e : Split(v, ',')) {
    while (!e.empty() && (e.front() == ' ' || e.front() == '\t')) e.remove_prefix(1);
    while (!e.empty() && (e.back() == ' ' || e.back() == '\t')) e.remove_suffix(1);
    if (!e.empty()) out.emplace_back(e);
  }
  return out;
}

// Waiting reasons that mean the pod will never start by itself.
bool ImageProblem(const std::string& reason) {
  return reason == "ErrImagePull" || reason == "ImagePullBackOff" ||
         reason == "ErrImageNeverPull" || reason == "InvalidImageName";
}
bool StartProblem(const std::string& reason) {
  return reason == "CreateContainerConfigError" || reason == "CreateContainerError" ||
         reason == "RunContainerError" || reason == "CrashLoopBackOff";
}

std::string Describe(const kube::Pod& pod) {
  std::string s = "phase " + (pod.phase.empty() ? std::string("unknown") : pod.phase);
  if (!pod.reason.empty()) s += " (" + pod.reason + ")";
  if (!pod.message.empty()) s += ": " + pod.message;
  auto add = [&](const std::vector<kube::ContainerState>& list) {
    for (const auto& c : list) {
      if (c.reason.empty() && c.state != "terminated") continue;
      s += "; container " + c.name + " " + c.state;
      if (!c.reason.empty()) s += " " + c.reason;
      if (c.state == "terminated") s += " exit " + std::to_string(c.exit_code);
      if (!c.message.empty()) s += ": " + c.message.substr(0, 300);
    }
  };
  add(pod.init_containers);
  add(pod.containers);
  return s;
}

}  // namespace

InstanceState InstanceStateOfPod(const kube::Pod& pod) {
  InstanceState st;
  const kube::ContainerState* c = pod.Container(kPodSandboxContainer);
  if (pod.deleting) {
    st.status = "removing";
  } else if (pod.phase == "Pending") {
    st.status = "created";
  } else if (pod.phase == "Running") {
    if (c != nullptr && c->state == "terminated") {
      st.status = "exited";
    } else {
      st.status = "running";
      st.running = true;
    }
  } else if (pod.phase == "Succeeded" || pod.phase == "Failed") {
    st.status = "exited";
  } else {
    st.status = "dead";
  }
  if (c != nullptr && c->state == "terminated") {
    st.exit_code = c->exit_code;
    st.oom_killed = c->reason == "OOMKilled";
  } else if (st.status == "exited" && pod.reason == "DeadlineExceeded") {
    st.exit_code = 137;  // killed at activeDeadlineSeconds
  }
  return st;
}

Labels LabelsOfPod(const kube::Pod& pod) {
  Labels out = pod.labels;
  for (const auto& [k, v] : pod.annotations) {
    // The runtime's own bookkeeping.
    if (k == kAnnotationPolicyUid || k == kAnnotationPolicyName) continue;
    if (k == "agvisor" || k.rfind("agvisor.", 0) == 0 || out.count(k) == 0) out[k] = v;
  }
  return out;
}

Result<std::shared_ptr<Runtime>> MakeKubernetesRuntime(std::string_view host) {
  auto address = AGVISOR_TRY(kube::ParseKubeAddress(host));
  auto credentials = AGVISOR_TRY(kube::LoadCredentials(address));
  auto client = AGVISOR_TRY(kube::Client::Connect(std::move(credentials)));
  return std::shared_ptr<Runtime>(std::make_shared<KubernetesRuntime>(
      std::string(host), std::move(client), KubernetesRuntime::DefaultOptions()));
}

Result<void> CheckKubeAddress(std::string_view host) {
  AGVISOR_RETURN_IF_ERROR(kube::ParseKubeAddress(host));
  return Ok();
}

KubernetesRuntime::Options KubernetesRuntime::DefaultOptions() {
  Options o;
  o.pod.agent_image = AgentImageRefForKube();
  o.pod.blocked_cidrs = EnvList("AGVISOR_KUBE_BLOCKED_CIDRS");
  o.pod.dns_servers = EnvList("AGVISOR_KUBE_DNS");
  if (const char* c = Env("AGVISOR_KUBE_RUNTIME_CLASS")) o.default_runtime_class = c;
  if (const char* s = Env("AGVISOR_KUBE_WORKSPACE_SIZE")) o.workspace_size = s;
  return o;
}

KubernetesRuntime::KubernetesRuntime(std::string host, std::shared_ptr<kube::Client> client,
                                     Options options)
    : host_(std::move(host)), client_(std::move(client)), options_(std::move(options)) {}

KubernetesRuntime::~KubernetesRuntime() = default;

Result<std::string> KubernetesRuntime::DefaultPlatform(std::string_view runtime,
                                                       std::string* warning) {
  if (!platform_fallback_warned_.exchange(true)) {
    *warning =
        "sandboxes on " + host_ + " count as gVisor's systrap platform, not the default " +
        std::string(kDefaultPlatform) +
        " (an idle systrap sandbox keeps ~4% of a CPU busy, a ptrace one ~0.1%): on "
        "Kubernetes the RuntimeClass's runsc configuration decides the platform (RuntimeClass " +
        (runtime.empty() || runtime == "runsc" ? options_.default_runtime_class
                                               : std::string(runtime)) +
        "); give its handler platform=\"ptrace\" on the nodes (docs/kubernetes.md)";
  }
  return std::string(kPlatformSystrap);
}

Result<std::string> KubernetesRuntime::RequireGvisor(std::string_view runtime,
                                                     std::string_view platform, bool) {
  if (!platform.empty() && platform != "systrap") {
    return Error::InvalidArgument(
        "gVisor platform '" + std::string(platform) +
        "' cannot be chosen per sandbox on Kubernetes: the platform is the runsc configuration of "
        "a RuntimeClass's handler on the nodes; make a RuntimeClass for it and pass its name as "
        "the runtime (docs/kubernetes.md)");
  }
  const std::string cls =
      runtime.empty() || runtime == "runsc" ? options_.default_runtime_class : std::string(runtime);
  {
    std::lock_guard lock(mu_);
    if (verified_classes_.count(cls)) return cls;
  }
  auto handler = AGVISOR_TRY(client_->RuntimeClassHandler(cls));
  if (!handler) {
    return Error::InvalidArgument(
        "sandboxes run only on gVisor: the cluster (" + client_->credentials().ToString() +
        ") has no RuntimeClass '" + cls +
        "'; create one whose handler is runsc (deploy/runtimeclass.yaml), or name yours with "
        "--runtime");
  }
  if (*handler != "runsc" && *handler != "gvisor") {
    return Error::InvalidArgument("sandboxes run only on gVisor: RuntimeClass '" + cls +
                                  "' has handler '" + *handler +
                                  "', not runsc or gvisor; name a gVisor RuntimeClass with "
                                  "--runtime");
  }
  std::lock_guard lock(mu_);
  verified_classes_[cls] = *handler;
  return cls;
}

Result<DiskCapSupport> KubernetesRuntime::ProbeDiskCap(std::string_view, std::string_view) {
  return DiskCapSupport{
      .supported = false,
      .detail =
          "on Kubernetes a root-disk cap would be an ephemeral-storage limit, which kubelet "
          "enforces by evicting the pod after the fact, not as a cap; agvisor does not "
          "offer it there (docs/kubernetes.md)"};
}

Result<HostCapacity> KubernetesRuntime::Capacity() {
  return HostCapacity{.memory_bytes = 0, .source = "Kubernetes: the scheduler's (not asked)"};
}

Result<std::string> KubernetesRuntime::PrepareImage(std::string_view image) {
  return std::string(image);
}

Result<void> KubernetesRuntime::WaitRunning(const std::string& name) {
  const auto deadline = Clock::now() + options_.start_timeout;
  auto delay = std::chrono::milliseconds(20);
  for (;;) {
    auto pod = client_->GetPod(name);
    if (!pod.ok()) {
      if (pod.error().code() == ErrorCode::kNotFound) {
        return Error::Unavailable("pod " + name + " was deleted while it started");
      }
      return pod.error();
    }
    const kube::ContainerState* c = pod->Container(kPodSandboxContainer);
    if (pod->phase == "Running" && c != nullptr && c->state == "running") return Ok();
    if (pod->phase == "Succeeded" || pod->phase == "Failed" || pod->deleting) {
      return Error::Unavailable("pod " + name + " ended before it ran: " + Describe(*pod));
    }
    for (const auto* list : {&pod->init_containers, &pod->containers}) {
      for (const auto& s : *list) {
        if (s.state != "waiting") continue;
        if (ImageProblem(s.reason)) {
          return Error::NotFound("pod " + name + ": the image of container " + s.name +
                                 " is not available to the cluster's nodes (" + s.reason +
                                 (s.message.empty() ? "" : ": " + s.message.substr(0, 300)) +
                                 "); the agent image is made as docs/kubernetes.md says");
        }
        if (StartProblem(s.reason)) {
          return Error::Unavailable("pod " + name + " cannot start: " + Describe(*pod));
        }
      }
    }
    if (Clock::now() >= deadline) {
      return Error::Timeout("pod " + name + " did not run within " +
                            std::to_string(options_.start_timeout.count()) +
                            " s: " + Describe(*pod));
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(250));
  }
}

Result<PolicyRef> KubernetesRuntime::CreatePolicy(const InstanceSpec& spec) {
  PolicyRef policy{.token = AGVISOR_TRY(NewPolicyToken())};
  policy.name = PolicyName(spec.name, policy.token);
  const std::string manifest = AGVISOR_TRY(NetworkPolicyManifest(spec, options_.pod, policy));
  // A fresh name: nothing of another create's, nor a leftover, is ever replaced or reused (a
  // leftover selects no pod made since, whose token differs). One of the name is a 1 in 2^32
  // coincidence.
  auto uid = AGVISOR_TRY(client_->CreateObject(kube::Collection::kNetworkPolicies, manifest));
  if (!uid) {
    return Error::Conflict("create network policy " + policy.name +
                           ": one of that name exists; create the sandbox again");
  }
  policy.uid = *uid;
  return policy;
}

Result<StartedInstance> KubernetesRuntime::CreateAndStart(const InstanceSpec& spec,
                                                          StepTrace& trace, StderrSink on_stderr) {
  // The pod is checked before anything is made, the policy before it is made.
  AGVISOR_RETURN_IF_ERROR(PodManifest(spec, options_.pod));
  // The policy before the pod, so that the pod never runs a moment without it; the pod carries
  // its token (the selector's value) and names it.
  const PolicyRef policy = AGVISOR_TRY(CreatePolicy(spec));
  trace.Mark("create network policy");
  auto pod = client_->CreatePod(AGVISOR_TRY(PodManifest(spec, options_.pod, policy)));
  trace.Mark("create pod");
  if (!pod.ok()) {
    // Also on a conflict (a pod of the name made by another create, under that create's own
    // policy): this policy selects no pod but the one not made.
    (void)client_->DeleteObject(kube::Collection::kNetworkPolicies, policy.name, policy.uid);
    return pod.error();
  }
  auto started = [&]() -> Result<StartedInstance> {
    AGVISOR_RETURN_IF_ERROR(WaitRunning(spec.name));
    trace.Mark("pod running");
    // Kubernetes logs PID 1's stdout, so the creating client's channel is an exec relay, not
    // PID 1's stdio; init may not have made its socket yet: the relay waits for it.
    const std::vector<std::string> relay = {std::string(kAgentPath), "connect", "--wait", "30"};
    auto stream = AGVISOR_TRY(OpenExecStream(spec.name, relay, on_stderr));
    trace.Mark("exec connect");
    return StartedInstance{.id = spec.name,
                           .stdio = std::move(stream),
                           .reopen = [this, name = spec.name, relay, on_stderr] {
                             return OpenExecStream(name, relay, on_stderr);
                           }};
  }();
  if (!started.ok()) (void)Remove(spec.name);
  return started;
}

Result<InstanceInfo> KubernetesRuntime::Inspect(std::string_view ref) {
  auto pod = AGVISOR_TRY(client_->GetPod(ref));
  InstanceInfo i;
  i.id = pod.name;
  i.name = pod.name;
  i.image_ref = pod.image;
  i.labels = LabelsOfPod(pod);
  i.state = InstanceStateOfPod(pod);
  i.created_unix = pod.created_unix;
  return i;
}

Result<std::vector<InstanceSummary>> KubernetesRuntime::List(
    const std::vector<std::string>& label_filters) {
  auto selector = AGVISOR_TRY(kube::LabelSelector(label_filters));
  auto pods = AGVISOR_TRY(client_->ListPods(selector));
  std::vector<InstanceSummary> out;
  out.reserve(pods.size());
  for (auto& p : pods) {
    InstanceSummary s;
    s.id = p.name;
    s.name = p.name;
    s.image = p.image;
    s.status = InstanceStateOfPod(p).status;
    s.labels = LabelsOfPod(p);
    s.created_unix = p.created_unix;
    out.push_back(std::move(s));
  }
  return out;
}

Result<bool> KubernetesRuntime::Remove(std::string_view ref) {
  const std::string name(ref);
  // The policy the pod was made with (its name and uid); none for a pod of an older agvisor.
  std::string policy_name, policy_uid;
  if (auto pod = client_->GetPod(name); pod.ok()) {
    auto annotation = [&](std::string_view key) {
      auto it = pod->annotations.find(std::string(key));
      return it == pod->annotations.end() ? std::string() : it->second;
    };
    policy_name = annotation(kAnnotationPolicyName);
    policy_uid = annotation(kAnnotationPolicyUid);
  }
  // A graceful delete of 1 s, not 0: with 0 the API server drops the object at once while kubelet
  // still kills the containers, so a "gone" pod could still run (an open exec answered after
  // Stop, its claim still mounted when deleted). With a grace period the object stays until
  // kubelet has killed them (SIGTERM, SIGKILL after 1 s; the agent ends at the SIGTERM).
  const bool had = AGVISOR_TRY(client_->DeletePod(name, /*grace_seconds=*/1));
  // Gone before this returns, as a removed container is: a named sandbox made again at once
  // needs the name, and the network policy must outlive the pod it guards.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  auto delay = std::chrono::milliseconds(20);
  bool gone = !had;
  while (!gone && Clock::now() < deadline) {
    auto pod = client_->GetPod(name);
    if (!pod.ok() && pod.error().code() == ErrorCode::kNotFound) {
      gone = true;
      break;
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(250));
  }
  // Only that policy, and only if it is still the one of that uid. Nothing is deleted by name
  // alone: without a pod there is no policy to find (a leftover selects no later pod; see
  // docs/kubernetes.md on sweeping them).
  if (gone && had && !policy_name.empty() && !policy_uid.empty()) {
    (void)client_->DeleteObject(kube::Collection::kNetworkPolicies, policy_name, policy_uid);
  }
  return had;
}

Result<void> KubernetesRuntime::Pause(std::string_view id) {
  return Error::Unsupported("pause sandbox " + std::string(id) +
                            ": Kubernetes has no way to freeze a pod's processes");
}

Result<void> KubernetesRuntime::Unpause(std::string_view id) {
  return Error::Unsupported("resume sandbox " + std::string(id) +
                            ": Kubernetes has no way to freeze a pod's processes");
}

Result<LiveLimits> KubernetesRuntime::Resize(std::string_view id, const ResizeSpec&) {
  return Error::Unsupported("resize sandbox " + std::string(id) +
                            ": a pod's limits are fixed at create on the Kubernetes runtime (the "
                            "in-place pod resize feature is not used); create a new sandbox with "
                            "the limits you need");
}

namespace {
Error NoImages(std::string_view what) {
  return Error::Unsupported(std::string(what) +
                            ": the Kubernetes runtime makes no images (a snapshot needs a node's "
                            "image store and a registry the cluster pulls from); snapshot and "
                            "fork on a Docker host");
}
}  // namespace

Result<ImageConfig> KubernetesRuntime::ImageConfigOf(std::string_view image) {
  return NoImages("read the configuration of image " + std::string(image));
}

Result<std::string> KubernetesRuntime::ImportImage(std::string_view ref, const ImageConfig&,
                                                   const channel::ByteSource&,
                                                   const std::function<void(std::string_view)>&) {
  return NoImages("make image " + std::string(ref));
}

Result<std::vector<ImageEntry>> KubernetesRuntime::ImagesWithLabel(std::string_view) {
  return std::vector<ImageEntry>{};  // it makes none
}

Result<bool> KubernetesRuntime::RemoveImage(std::string_view ref) {
  return NoImages("remove image " + std::string(ref));
}

Result<LiveLimits> KubernetesRuntime::ReadLimits(std::string_view id) {
  return Error::Unsupported("read the live limits of sandbox " + std::string(id) +
                            ": the Kubernetes runtime reports only the create-time limits");
}

Result<SandboxStats> KubernetesRuntime::Stats(std::string_view id) {
  // Pods' CPU and memory come from the metrics API (metrics.k8s.io), which only a cluster with
  // metrics-server serves, and pids not at all: not read here yet.
  return Error::Unsupported("stats of sandbox " + std::string(id) +
                            ": the Kubernetes runtime reads no stats yet (the cluster's "
                            "metrics.k8s.io API would give CPU and memory where metrics-server "
                            "runs); meanwhile `kubectl top pod " +
                            std::string(id) + "` shows them");
}

void KubernetesRuntime::WaitNotRunning(std::string_view id, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    auto pod = client_->GetPod(id);
    if (!pod.ok() || !InstanceStateOfPod(*pod).running) return;
    if (Clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool KubernetesRuntime::EndedByMemoryLimit(std::string_view id) {
  auto pod = client_->GetPod(id);
  return pod.ok() && InstanceStateOfPod(*pod).oom_killed;
}

Result<std::unique_ptr<channel::Transport>> KubernetesRuntime::OpenExecStream(
    std::string_view id, const std::vector<std::string>& argv, StderrSink on_stderr) {
  auto stream = AGVISOR_TRY(client_->Exec(id, kPodSandboxContainer, argv));
  return std::unique_ptr<channel::Transport>(std::make_unique<KubeExecTransport>(
      std::move(stream), std::move(on_stderr),
      "exec of " + (argv.empty() ? std::string() : argv.front()) + " in pod " + std::string(id)));
}

Result<int> KubernetesRuntime::RunExec(std::string_view id, const std::vector<std::string>& argv,
                                       const OutputSink& on_stdout, const StderrSink& on_stderr) {
  // stdin stays open until the process ends or `on_stdout` fails (then the stream is closed).
  auto stream = AGVISOR_TRY(client_->Exec(id, kPodSandboxContainer, argv));
  std::vector<char> buf(64 * 1024);
  for (;;) {
    auto n = stream->ReadStdout(std::span<char>(buf.data(), buf.size()), [&](std::string_view b) {
      if (on_stderr) on_stderr(b);
    });
    if (!n.ok()) return n.error().WithContext("exec in pod " + std::string(id));
    if (*n == 0) break;
    if (auto r = on_stdout(std::string_view(buf.data(), *n)); !r.ok()) {
      stream->Close();
      return r.error();
    }
  }
  return stream->ExitCode();
}

Result<bool> KubernetesRuntime::EnsureVolume(std::string_view name, const Labels& labels) {
  auto uid =
      AGVISOR_TRY(client_->CreateObject(kube::Collection::kPersistentVolumeClaims,
                                        ClaimManifest(name, labels, options_.workspace_size)));
  return uid.has_value();
}

Result<std::optional<Labels>> KubernetesRuntime::VolumeLabels(std::string_view name) {
  return client_->ObjectLabels(kube::Collection::kPersistentVolumeClaims, name);
}

Result<bool> KubernetesRuntime::RemoveVolume(std::string_view name) {
  return client_->DeleteObject(kube::Collection::kPersistentVolumeClaims, name);
}

Result<void> KubernetesRuntime::CheckEgressSupport() {
  return Error::Unsupported("egress policies on " + host_ +
                            ": not available on Kubernetes yet (docs/kubernetes.md); use "
                            "network none, or a Docker host");
}

Result<SandboxNetwork> KubernetesRuntime::EnsureEgressNetwork(std::string_view name,
                                                              const egress::EgressRules&,
                                                              const Labels&) {
  return Error::Unsupported(
      "egress policy for sandbox " + std::string(name) +
      ": not available on Kubernetes yet (the enforcer would run as a Service the pod's traffic "
      "is forced through); use network none, or a Docker host");
}

Result<void> KubernetesRuntime::RemoveEgressNetwork(std::string_view) { return Ok(); }

Result<std::string> KubernetesRuntime::CreateSharedNetwork(std::string_view) {
  return Error::Unsupported("networks on " + host_ +
                            ": a Kubernetes sandbox has the pod network (bridge) or none");
}

Result<std::map<std::string, std::int64_t>> KubernetesRuntime::VolumeSizes() {
  return Error::Unsupported("ls --size on " + host_ +
                            ": the sizes of a cluster's volume claims are not read yet (a "
                            "claim's usage is the node's to report); ls without --size works");
}

}  // namespace agvisor
