// Runtime: where sandboxes run. The sandbox layer (Sandbox, Pool, sweep) asks a Runtime for
// instances (a container, a pod), their state, exec streams, volumes and private networks, and
// does not see Docker's or Kubernetes' types. DockerRuntime (docker_runtime/docker_runtime.h) is
// the Engine API; KubernetesRuntime (kube_runtime/kube_runtime.h) a namespace of a cluster;
// FakeRuntime (testing/fake_runtime.h, tests only) runs the real agent binary as a local process.
// A Runtime is an object its owner makes once (MakeRuntime, runtimes.h: the only code that knows
// the address forms) and hands to each Sandbox and Pool; it is shared and thread-safe, and what
// this process keeps about its host (start gate, sweep, paused and resized sandboxes, pools'
// reservations: RuntimeLocal, runtime_local.h) lives in it, not in statics keyed by host.
//
// Errors (each message names the operation and the object): kInvalidArgument, kNotFound,
// kConflict, kUnavailable, kPermissionDenied, kUnsupported (this runtime cannot: says which and
// the way out), kTimeout, kInternal. Never kSandboxDied: deciding a death is Sandbox's.
//
// Invariants every implementation applies to every instance, whatever InstanceSpec says (they are
// not fields, so no caller can forget them): not privileged, no new privileges, every capability
// dropped but kSandboxCapabilities (agent_paths.h), no host mounts, PID 1's stdio in no log.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/channel/channel.h"
#include "agvisor/channel/transport.h"
#include "agvisor/egress/policy.h"
#include "agvisor/sandbox/spec.h"
#include "agvisor/sandbox/step_trace.h"
#include "agvisor/sandbox/types.h"

namespace agvisor {

using Labels = std::map<std::string, std::string>;
// The agent's or a relay's log lines (an exec's stderr), as they arrive.
using StderrSink = std::function<void(std::string_view)>;
// Bytes of an exec's stdout, as they arrive; an error stops the exec.
using OutputSink = std::function<Result<void>(std::string_view)>;

struct RuntimeTraits {
  std::string kind;  // "docker", "kubernetes", "fake": for messages
};

// Whether a root-disk cap can be enforced (Runtime::ProbeDiskCap).
struct DiskCapSupport {
  bool supported = false;
  // How a cap is passed where supported ("runsc overlay2 size annotation"), else why not, naming
  // the host's versions and the way out.
  std::string detail;
};

// What the host offers sandboxes, for pools to check against.
struct HostCapacity {
  std::int64_t memory_bytes = 0;  // 0 = the runtime does not know
  std::string source;             // where the figure comes from, for messages
};

// A sandbox's private network (egress policies): its name, the runtime's id of the network this
// call made, and the enforcer's address.
struct SandboxNetwork {
  std::string name;
  std::string id;
  std::string gateway;
};

// An instance's state in Docker's words, the contract of SandboxInfo::state: "created" (never
// started), "running", "paused", "restarting", "removing", "exited", "dead".
struct InstanceState {
  std::string status;
  bool running = false;  // alive: "running" or "paused" (as Docker's State.Running)
  int exit_code = 0;
  bool oom_killed = false;  // as far as the runtime knows at once (see EndedByMemoryLimit)
};

struct InstanceInfo {
  std::string id;
  std::string name;
  std::string image_ref;  // what the instance runs (the derived image)
  Labels labels;
  InstanceState state;
  std::int64_t created_unix = 0;  // when it was made (the host's clock; 0 = unknown)
};

struct InstanceSummary {
  std::string id;
  std::string name;  // "" when the runtime reports none
  std::string image;
  std::string status;  // as InstanceState::status
  Labels labels;
  std::int64_t created_unix = 0;
  // The runtime's own helper (the agent-image filler), not a sandbox: listed so that a sweep
  // removes leftovers of it, skipped by Sandbox::List.
  bool helper = false;
};

// The configuration of an image that a snapshot carries over (Runtime::ImageConfigOf,
// ImportImage): what its processes start with. The command is not among it: a sandbox's PID 1 is
// always the agent.
struct ImageConfig {
  std::vector<std::string> env;  // "K=V"
  std::string working_dir;       // "" = /
  std::string user;              // "" = root
  Labels labels;
};

// One image of the runtime's (Runtime::ImagesWithLabel, DerivedImagesOf).
struct ImageEntry {
  std::string id;                 // "sha256:..."
  std::vector<std::string> tags;  // "repo:tag"; none for an untagged image
  Labels labels;
  std::int64_t created_unix = 0;
  std::int64_t size_bytes = 0;  // its layers', shared ones included
};

// One instance to make, runtime-neutral: built from a SandboxSpec by BuildInstanceSpec
// (instance_spec.h, pure and pinned by its test), turned into the runtime's own request by it.
struct InstanceSpec {
  std::string name;          // the instance's name ("agvisor-x")
  std::string image;         // PrepareImage's answer
  std::string source_image;  // as the caller named it: prepared again if `image` vanished
  // PID 1 (the agent); its stdin and stdout carry the creating client's channel.
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V"
  std::string working_dir;       // "" = the image's
  Labels labels;
  // RequireGvisor's answer, and the runtime as asked: where `runtime` is not the platform's
  // runtime of `requested_runtime`, it is that one's "-none" twin, which brings its own network
  // stack (the instance gets no network of its own).
  std::string runtime;
  std::string requested_runtime;
  std::string platform;  // the gVisor platform (SandboxSpec::platform, resolved)
  std::string network;   // "bridge", "none", or a network's name (EnsureEgressNetwork)
  // The id of the egress network EnsureEgressNetwork made for this create (ApplyEgressNetwork),
  // "" for none: the only egress network the instance may join (NetworkJoinRefusal).
  std::string egress_network_id;
  std::vector<std::string> dns;  // resolver addresses; empty = the runtime's
  double cpus = 0;
  std::int64_t memory_bytes = 0;  // also the memory+swap cap: no swap
  std::int64_t pids = 0;          // the host's cap: HostPidsCap of limits.pids (instance_spec.h)
  std::int64_t shm_bytes = 0;     // 0 = the runtime's default
  std::optional<std::string> disk_cap;   // "5g": set only where ProbeDiskCap said supported
  bool remove_on_exit = false;           // gone when PID 1 ends (lifetime / idle_ttl)
  std::optional<std::string> workspace;  // a volume's name, mounted at /workspace
  bool allow_setuid = false;             // SandboxSpec::allow_setuid: no no-new-privileges
};

// A live resize (Runtime::Resize): the limits to change, in the runtime's units; unset = kept.
struct ResizeSpec {
  std::optional<double> cpus;
  std::optional<std::int64_t> memory_bytes;  // the memory and the memory+swap cap (no swap)
  std::optional<std::int64_t> pids;          // the host's cap (HostPidsCap, instance_spec.h)
  std::optional<std::int64_t> sandbox_pids;  // the caller's pids it was scaled from (messages)
};

// A made and started instance, with PID 1's stdio (attached before start: no byte is missed).
struct StartedInstance {
  std::string id;
  std::unique_ptr<channel::Transport> stdio;
  // Set where `stdio` is a relay into the instance rather than PID 1's own stdio (Kubernetes: an
  // exec of the agent's `connect`): opens another one. Sandbox::Create uses it once when the
  // first relay's handshake fails (an exec into a container that has just started can fail to
  // start under load); PID 1's stdio cannot be had twice, so Docker leaves it empty.
  std::function<Result<std::unique_ptr<channel::Transport>>()> reopen;
};

// What a layered snapshot of an instance goes on (Runtime::SnapshotBaseOf, Sandbox::Snapshot):
// the image the instance started from, as the runtime's layers and as a list of its entries.
struct SnapshotBase {
  // The diff ids of the layers of the instance's image, lowest first, without the agent's own
  // layer on top (agent_image.h): the snapshot's layer goes on these.
  std::vector<std::string> layers;
  // The image's entries below "/" but those below `excludes`, each an absolute path ending in
  // a NUL byte, then one more NUL: what the agent's `read-file --layer-since` reads on stdin.
  std::string tree;
  std::uint64_t tree_entries = 0;
  // When the instance was made, "SECONDS.NANOS" (the host's clock): every change the sandbox
  // made is at or after it.
  std::string since;
};

struct RuntimeLocal;
class StartGate;

class Runtime {
 public:
  Runtime();
  virtual ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  virtual const std::string& host() const = 0;  // as the caller wrote it ("" = local)
  virtual const RuntimeTraits& traits() const = 0;

  // What the sandbox layer of this process keeps about this runtime's instances
  // (runtime_local.h), made on first use.
  RuntimeLocal& local();
  // The bound on concurrent starts on this runtime's host (start_gate.h), shared by every
  // create through this object.
  StartGate& start_gate();

  // ---- Host facts (cached in the runtime object where asking costs) ----
  // Whether sandboxes with egress policies can be made here (docs/egress.md), before anything is
  // made. Errors: kUnsupported naming why and the way out (the default: this runtime has no
  // enforcer), kInvalidArgument (a malformed host).
  virtual Result<void> CheckEgressSupport();
  // The runtime to run `runtime` sandboxes on `platform` (SandboxSpec::platform, "systrap" or
  // "ptrace") on, refused unless it is gVisor: the platform's runtime of `runtime`, or for
  // `network_none` its "-none" twin where the host has one (Docker: runtime_check.h). Errors:
  // kInvalidArgument (not gVisor: "sandboxes run only on gVisor ..."; a platform the host has no
  // runtime for, naming how to register one), kUnavailable.
  virtual Result<std::string> RequireGvisor(std::string_view runtime, std::string_view platform,
                                            bool network_none) = 0;
  // The platform of a `runtime` sandbox that asks for none (SandboxSpec::platform ""):
  // kDefaultPlatform where this host runs it, else systrap. On the first fallback of this runtime
  // object (one per host in a process: a place, agvisord), `warning` gets why and how to get the
  // default (a create's warning: Sandbox::disk_warning()). Errors: kUnavailable (the host's runtime
  // list could not be read).
  virtual Result<std::string> DefaultPlatform(std::string_view runtime, std::string* warning) = 0;
  // Whether a root-disk cap can be enforced for `image` on `runtime` here.
  virtual Result<DiskCapSupport> ProbeDiskCap(std::string_view runtime, std::string_view image) = 0;
  virtual Result<HostCapacity> Capacity() = 0;
  // The image to create sandboxes of `image` from, with the agent in it (agent_image.h).
  // Errors: kNotFound (no such image on the host), kUnavailable.
  virtual Result<std::string> PrepareImage(std::string_view image) = 0;

  // ---- Instances ----
  // Makes the instance, attaches PID 1's stdio (its stderr to
  // `on_stderr`) and starts it, marking the steps on `trace`; on any error nothing it made is
  // left. A prepared image that vanished is prepared again once from spec.source_image. Errors:
  // kConflict (an instance of that name exists: a named sandbox's race), kNotFound (no image),
  // kInvalidArgument (the runtime refused the spec), kUnavailable.
  virtual Result<StartedInstance> CreateAndStart(const InstanceSpec& spec, StepTrace& trace,
                                                 StderrSink on_stderr) = 0;
  // Errors: kNotFound (no such instance), kUnavailable.
  virtual Result<InstanceInfo> Inspect(std::string_view ref) = 0;
  // Every instance carrying all of `label_filters` ("key" or "key=value"), running or not.
  virtual Result<std::vector<InstanceSummary>> List(
      const std::vector<std::string>& label_filters) = 0;
  // Removes an instance whether it runs, is paused or not. Returns whether one was there (one
  // being removed already counts). A paused one that the runtime cannot end frozen (runsc) is
  // thawed first. Errors: kUnavailable.
  virtual Result<bool> Remove(std::string_view ref) = 0;
  // Freezes every process of a running instance (they keep their memory, get no CPU) / thaws
  // them; Inspect then says "paused" / "running". Errors: kNotFound, kConflict (not running, or
  // already in the asked state: the caller inspects to tell which), kUnsupported (this runtime
  // cannot), kUnavailable.
  virtual Result<void> Pause(std::string_view id) = 0;
  virtual Result<void> Unpause(std::string_view id) = 0;
  // Changes the limits of a running (or paused) instance in place and returns what it runs under
  // afterwards (docs/lifecycle.md, "Live resize"). All or nothing: a limit that fails leaves the
  // ones written before it as they were. Errors: kNotFound, kConflict (not running; memory under
  // what the instance uses now, which the host's kernel could not reclaim: the message says how
  // much it uses), kUnsupported (this runtime or host cannot: says why and the way out),
  // kPermissionDenied, kUnavailable.
  virtual Result<LiveLimits> Resize(std::string_view id, const ResizeSpec& spec) = 0;
  // The limits a running instance has now (LiveLimits::source says from where). Errors:
  // kNotFound, kConflict (not running), kUnavailable.
  virtual Result<LiveLimits> ReadLimits(std::string_view id) = 0;
  // One sample of a running instance's resource use (about a second: CPU use is the difference
  // of two readings), its pids in the sandbox's terms (its processes and the caller's cap, not
  // the host's tasks: SandboxPidsInStats, instance_spec.h). Errors: kNotFound, kConflict (not
  // running), kUnsupported (this runtime cannot: says why and the way out), kUnavailable.
  virtual Result<SandboxStats> Stats(std::string_view id) = 0;
  // Waits at most `timeout` for the instance to stop running (a death being recorded).
  virtual void WaitNotRunning(std::string_view id, std::chrono::milliseconds timeout) = 0;
  // Whether an instance that ended by SIGKILL was killed by its memory limit (a record that
  // may come a moment after the exit; asks for it for up to half a second).
  virtual bool EndedByMemoryLimit(std::string_view id) = 0;

  // ---- Processes beside PID 1 ----
  // argv with stdin open: the transport carries its stdin and stdout; its stderr goes to
  // `on_stderr`. Errors: kNotFound (no instance), kConflict (it is not running), kUnavailable.
  virtual Result<std::unique_ptr<channel::Transport>> OpenExecStream(
      std::string_view id, const std::vector<std::string>& argv, StderrSink on_stderr) = 0;
  // argv with stdin held open until it ends or `on_stdout` fails (then the exec is closed and
  // that error returned); its stdout to `on_stdout`, stderr to `on_stderr`. Returns its exit
  // code. Errors: as OpenExecStream, and `on_stdout`'s as they are.
  virtual Result<int> RunExec(std::string_view id, const std::vector<std::string>& argv,
                              const OutputSink& on_stdout, const StderrSink& on_stderr) = 0;

  // ---- Images (snapshots: Sandbox::Snapshot) ----
  // The configuration of `image` (a reference or id). Errors: kNotFound, kUnavailable.
  virtual Result<ImageConfig> ImageConfigOf(std::string_view image) = 0;
  // Makes image `ref` ("repo:tag") from the root file system tar that `tar` supplies, with
  // `config`; `progress` gets the runtime's own status lines. The upload is streamed: an error
  // of `tar` aborts it (the runtime sees a broken upload, never a complete one) and is returned.
  // Returns the image's id. Errors: kInvalidArgument (ref, or a config value the runtime cannot
  // carry: names it), kUnsupported (this runtime makes no images), kUnavailable, `tar`'s.
  virtual Result<std::string> ImportImage(
      std::string_view ref, const ImageConfig& config, const channel::ByteSource& tar,
      const std::function<void(std::string_view)>& progress) = 0;
  // Layered snapshots (docs/lifecycle.md, "Snapshots and forks"): what a layer of instance `id`
  // goes on, its image's entries but those below the absolute paths `excludes`. Errors:
  // kUnsupported (the default; this runtime or host cannot: the caller sends the whole file
  // system instead), kNotFound, kUnavailable.
  virtual Result<SnapshotBase> SnapshotBaseOf(std::string_view id,
                                              const std::vector<std::string>& excludes);
  // RunExec with `input` written to stdin first; stdin then stays open as RunExec holds it.
  // Errors: RunExec's; kUnsupported (the default).
  virtual Result<int> RunExecWithInput(std::string_view id, const std::vector<std::string>& argv,
                                       std::string input, const OutputSink& on_stdout,
                                       const StderrSink& on_stderr);
  // Makes image `ref` ("repo:tag") of the layers `base_layers` (SnapshotBase::layers) plus the
  // layer tar that `layer` supplies, with `config`. The layer is read whole before the runtime
  // sees any of it: an error of `layer` is returned and nothing is made. Returns the image's id.
  // Errors: kUnsupported (the default), kInvalidArgument (ref, the runtime refused the image),
  // kResourceExhausted (no room for the layer), kUnavailable, `layer`'s.
  virtual Result<std::string> LoadLayeredImage(std::string_view ref, const ImageConfig& config,
                                               const std::vector<std::string>& base_layers,
                                               const channel::ByteSource& layer);
  // The images carrying `label` ("key" or "key=value"), tagged or not. Errors: kUnavailable.
  virtual Result<std::vector<ImageEntry>> ImagesWithLabel(std::string_view label) = 0;
  // The images this runtime made of image `image_id` for its own use, which its instances run
  // from and which hold its layers (Docker: the image with the agent, agent_image.h). Removing
  // a snapshot removes these first. Errors: kUnavailable. The default: none.
  virtual Result<std::vector<ImageEntry>> DerivedImagesOf(std::string_view image_id) {
    (void)image_id;
    return std::vector<ImageEntry>{};
  }
  // Removes image `ref` (its tag; the image when it was the last, with the layers no other
  // image holds). Returns whether one was there. Errors: kConflict (a container uses it),
  // kUnavailable.
  virtual Result<bool> RemoveImage(std::string_view ref) = 0;

  // ---- Volumes ----
  // Makes volume `name` with `labels` unless it exists. Returns whether this call made it.
  virtual Result<bool> EnsureVolume(std::string_view name, const Labels& labels) = 0;
  // The labels of volume `name`, or nullopt when there is none. Errors: kUnavailable.
  virtual Result<std::optional<Labels>> VolumeLabels(std::string_view name) = 0;
  // Removes volume `name`, waiting up to 15 s while an instance that just went still holds it.
  // Returns whether one was there. Errors: kConflict (still in use), kUnavailable.
  virtual Result<bool> RemoveVolume(std::string_view name) = 0;
  // Every volume carrying `label` (a key): its name and labels. What `ls` lists of the named
  // sandboxes that are stopped (their volume kept, no instance). A runtime that cannot list
  // them yet (Kubernetes: its claims) lists none. Errors: kUnavailable.
  virtual Result<std::map<std::string, Labels>> VolumesWithLabel(std::string_view label) {
    (void)label;
    return std::map<std::string, Labels>{};
  }

  // ---- Private networks (egress policies, docs/egress.md) ----
  // The network of instance `name`, made when missing, once its enforcer answers there. Errors:
  // kConflict (a network of that name that agvisor did not make), kUnsupported (this runtime has
  // none), kUnavailable (no enforcer: says how to start agvisord).
  virtual Result<SandboxNetwork> EnsureEgressNetwork(std::string_view name,
                                                     const egress::EgressRules& rules,
                                                     const Labels& labels) = 0;
  // Removes the network of instance `name` if any; one still in use is left (not an error).
  virtual Result<void> RemoveEgressNetwork(std::string_view name) = 0;

  // ---- Shared networks (`agvisor network create`, docs/security.md "Shared networks") ----
  // Makes network `name` that sandboxes may join with SandboxSpec::network; returns its id.
  // Errors: kUnsupported (the default: this runtime has none; says what it offers instead),
  // kInvalidArgument (the name), kConflict (it exists), kUnavailable.
  virtual Result<std::string> CreateSharedNetwork(std::string_view name);

  // ---- Volume sizes (`agvisor ls --size`) ----
  // The bytes each volume of the host uses, by volume name; -1 = not counted. Slow where the
  // runtime walks each volume (Docker). Errors: kUnsupported (the default: this runtime does not
  // count them; says why), kUnavailable.
  virtual Result<std::map<std::string, std::int64_t>> VolumeSizes();

 private:
  std::once_flag local_once_;
  std::unique_ptr<RuntimeLocal> local_;
};

// The extra ssh arguments for ssh:// hosts: $AGVISOR_SSH_ARGS split on spaces (e.g.
// "-i KEY -o Port=2222"). Shared by the Docker runtime's tunnel, its gVisor check and the
// egress enforcer's probe.
std::vector<std::string> HostSshArgs();

}  // namespace agvisor
