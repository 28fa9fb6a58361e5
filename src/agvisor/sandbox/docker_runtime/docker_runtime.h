// DockerRuntime: the Runtime (runtime.h) of a Docker host, over the Engine API client (docker/).
// Everything of the sandbox layer that speaks Docker lives in this folder
// (sandbox/docker_runtime/): containers, exec streams, volumes here; the image with the agent
// (agent_image.h), the gVisor check (runtime_check.h), the disk-cap probe (host_caps.h) and the
// egress bridge (egress_bridge.h) beside it. A DockerRuntime owns its host's client and what this
// process learnt of that host (runtimes, disk caps, derived images, the firewall's state): made
// once by MakeRuntime (runtimes.h) and shared, so an ssh host costs one ssh process however many
// sandboxes use it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/docker/types.h"
#include "agvisor/sandbox/docker_runtime/agent_image.h"
#include "agvisor/sandbox/docker_runtime/host_caps.h"
#include "agvisor/sandbox/docker_runtime/runtime_check.h"
#include "agvisor/sandbox/egress_network.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/step_trace.h"

namespace agvisor {
namespace docker {
class Client;
}

// A new docker::Client for a host ("" = $DOCKER_HOST or the local socket; "ssh://user@host", with
// $AGVISOR_SSH_ARGS): each call connects anew (on an ssh host, a new ssh process), so a caller
// that talks to the host more than once keeps it (a DockerRuntime keeps its own). Errors: those
// of docker::Client::Connect.
Result<std::shared_ptr<docker::Client>> ConnectDockerHost(std::string_view host);

// The Engine API's create request for `spec`, with the invariants of runtime.h (no privileges,
// no new privileges, CapDrop ALL + kSandboxCapabilities, log driver none, no swap). Where
// spec.runtime is the "-none" twin the container is made NetworkDisabled (gVisor's own stack).
docker::ContainerConfig ToContainerConfig(const InstanceSpec& spec);

// The Engine API import's `changes` for `config`: one Dockerfile line each ("ENV K=\"v\"",
// "WORKDIR \"/w\"", "USER \"u\"", "LABEL k=\"v\""), values quoted with '\\', '"' and '$'
// escaped, so nothing is expanded or split. Pure. Errors: kInvalidArgument for a value with a
// newline, NUL or other control character (a Dockerfile line cannot carry it), or a malformed
// variable or label name.
Result<std::vector<std::string>> ImportChanges(const ImageConfig& config);

class DockerRuntime final : public Runtime {
 public:
  DockerRuntime(std::string host, std::shared_ptr<docker::Client> client);
  ~DockerRuntime() override;

  docker::Client& client() { return *client_; }

  const std::string& host() const override { return host_; }
  const RuntimeTraits& traits() const override { return traits_; }

  // The local host and ssh:// hosts (agvisord runs there; its enforcer is checked over ssh);
  // kUnsupported for tcp:// (nothing here can check the enforcer there).
  Result<void> CheckEgressSupport() override;
  // What the host's sandbox-firewall file says (HostFirewallStatus): on an ssh:// host asked at
  // most once a minute per runtime, so a burst of creates costs one round trip.
  FirewallStatus Firewall();

  Result<std::string> RequireGvisor(std::string_view runtime, std::string_view platform,
                                    bool network_none) override;
  // ptrace where the host registers its runtime (runsc-ptrace) as gVisor on that platform
  // (DefaultPlatformOf, runtime_check.h), else systrap.
  Result<std::string> DefaultPlatform(std::string_view runtime, std::string* warning) override;
  Result<DiskCapSupport> ProbeDiskCap(std::string_view runtime, std::string_view image) override;
  // Docker's MemTotal (`docker info`); 0 when the daemon does not say.
  Result<HostCapacity> Capacity() override;
  Result<std::string> PrepareImage(std::string_view image) override;

  // Attaches before start (no byte the agent writes is missed, no exec is paid on the create
  // path). A "-none" twin Docker no longer knows: made again on the runtime as asked, with
  // Docker's network none. Marks "create container", "attach", "start".
  Result<StartedInstance> CreateAndStart(const InstanceSpec& spec, StepTrace& trace,
                                         StderrSink on_stderr) override;
  Result<InstanceInfo> Inspect(std::string_view ref) override;
  // Agent-image fillers (label agvisor.agent=filler) come back as helpers.
  Result<std::vector<InstanceSummary>> List(const std::vector<std::string>& label_filters) override;
  Result<bool> Remove(std::string_view ref) override;
  Result<void> Pause(std::string_view id) override;
  Result<void> Unpause(std::string_view id) override;
  // Through the container's cgroup files (cgroup_limits.h): only where they are on this machine
  // (a unix-socket Docker host whose container cgroups are found here); ssh:// and tcp:// hosts
  // are refused with kUnsupported (resize through the agvisord on that host instead).
  Result<LiveLimits> Resize(std::string_view id, const ResizeSpec& spec) override;
  // The cgroup's values on a local host ("cgroup"), else Docker's record of create time
  // ("created": HostConfig's NanoCpus, Memory, PidsLimit).
  Result<LiveLimits> ReadLimits(std::string_view id) override;
  // Docker's stats, one sample; pids in the sandbox's terms (SandboxPidsInStats), the processes
  // now as gVisor counts them where this machine runs the sandbox (sentry_pids.h).
  Result<SandboxStats> Stats(std::string_view id) override;
  void WaitNotRunning(std::string_view id, std::chrono::milliseconds timeout) override;
  bool EndedByMemoryLimit(std::string_view id) override;

  Result<std::unique_ptr<channel::Transport>> OpenExecStream(std::string_view id,
                                                             const std::vector<std::string>& argv,
                                                             StderrSink on_stderr) override;
  Result<int> RunExec(std::string_view id, const std::vector<std::string>& argv,
                      const OutputSink& on_stdout, const StderrSink& on_stderr) override;

  Result<ImageConfig> ImageConfigOf(std::string_view image) override;
  // POST /images/create?fromSrc=- with the config as `changes` (Dockerfile ENV, WORKDIR, USER,
  // LABEL lines: see ImportChanges).
  Result<std::string> ImportImage(std::string_view ref, const ImageConfig& config,
                                  const channel::ByteSource& tar,
                                  const std::function<void(std::string_view)>& progress) override;
  // Layered snapshots (snapshot_layers.h): a local Docker with overlay2 only; elsewhere
  // kUnsupported, and the snapshot sends the whole file system.
  Result<SnapshotBase> SnapshotBaseOf(std::string_view id,
                                      const std::vector<std::string>& excludes) override;
  Result<int> RunExecWithInput(std::string_view id, const std::vector<std::string>& argv,
                               std::string input, const OutputSink& on_stdout,
                               const StderrSink& on_stderr) override;
  Result<std::string> LoadLayeredImage(std::string_view ref, const ImageConfig& config,
                                       const std::vector<std::string>& base_layers,
                                       const channel::ByteSource& layer) override;
  Result<std::vector<ImageEntry>> ImagesWithLabel(std::string_view label) override;
  Result<std::vector<ImageEntry>> DerivedImagesOf(std::string_view image_id) override;
  Result<bool> RemoveImage(std::string_view ref) override;

  Result<bool> EnsureVolume(std::string_view name, const Labels& labels) override;
  Result<std::optional<Labels>> VolumeLabels(std::string_view name) override;
  Result<bool> RemoveVolume(std::string_view name) override;
  Result<std::map<std::string, Labels>> VolumesWithLabel(std::string_view label) override;

  Result<SandboxNetwork> EnsureEgressNetwork(std::string_view name,
                                             const egress::EgressRules& rules,
                                             const Labels& labels) override;
  Result<void> RemoveEgressNetwork(std::string_view name) override;
  // CreateUserNetwork (egress_bridge.h).
  Result<std::string> CreateSharedNetwork(std::string_view name) override;
  // GET /system/df?type=volume (Docker walks each volume).
  Result<std::map<std::string, std::int64_t>> VolumeSizes() override;

 private:
  std::string host_;
  std::shared_ptr<docker::Client> client_;
  RuntimeTraits traits_{.kind = "docker"};
  RuntimeCheckCache runtimes_;
  std::atomic<bool> platform_fallback_warned_{false};
  DiskCapCache disk_caps_;
  AgentImageCache agent_images_;
  std::mutex firewall_mu_;
  std::optional<std::pair<FirewallStatus, std::chrono::steady_clock::time_point>> firewall_;
};

}  // namespace agvisor
