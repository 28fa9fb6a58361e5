// FakeRuntime: a Runtime (runtime.h) for unit tests of the sandbox layer, with no Docker. An
// instance is a real local process of the built agent (`agvisor-agent init --socket DIR/x.sock`),
// so a Sandbox's channel, execs, files and deadlines are the agent's own (CreateAndStart runs the
// spec's argv, PID 1's stdio being the channel; the agent's stderr goes to the test's); an exec
// stream of `kAgentPath connect` is the agent's relay to that socket, and any other exec runs on
// this machine. It records every call, holds instances, volumes and networks in memory, and fails
// or changes state on request. Target agvisor_sandbox_testing (tests only).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agvisor/base/subprocess.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor {

class FakeRuntime final : public Runtime {
 public:
  // `agent_binary`: the agent to run (tests link agvisor::agent_binary: AGVISOR_AGENT_BINARY).
  FakeRuntime(std::string host, std::string agent_binary);
  ~FakeRuntime() override;

  // ---- What happened ----
  struct Call {
    std::string op;      // the method's name: "Inspect", "Remove", "OpenExecStream", ...
    std::string object;  // the instance, volume or network it was about
  };
  std::vector<Call> calls() const;
  int CallCount(std::string_view op) const;
  // Every object that exists, as "instance NAME", "volume NAME", "network NAME".
  std::set<std::string> Snapshot() const;

  // ---- What exists ----
  struct InstanceOptions {
    Labels labels;
    std::string image = "fake/with-agent";
    std::string status = "running";  // "running" starts the agent; anything else does not
    int exit_code = 0;
    std::int64_t created_unix = 0;  // 0 = now
    bool helper = false;
  };
  // Returns the new instance's id. Errors: kConflict (the name exists), those of spawning.
  Result<std::string> AddInstance(const std::string& name, InstanceOptions options);
  // Sets what Inspect reports (the agent, if running, is killed for any status but "running").
  void SetState(const std::string& name, std::string status, int exit_code, bool oom_killed);
  // Kills the instance's agent with `signal`: the channel breaks, Inspect says exited 128+N.
  void KillAgent(const std::string& name, int signal);
  // What EndedByMemoryLimit answers for the instance.
  void SetEndedByMemoryLimit(const std::string& name, bool yes);
  void AddVolume(const std::string& name, Labels labels = {});
  void AddNetwork(const std::string& instance_name);
  // An image ImageConfigOf then answers for (it makes none itself: every other image, and every
  // import, is kUnsupported).
  void AddImage(const std::string& ref, ImageConfig config);
  bool HasInstance(const std::string& name) const;
  bool HasVolume(const std::string& name) const;
  bool HasNetwork(const std::string& instance_name) const;
  // The spec the last CreateAndStart of `name` was given (nullopt: none was).
  std::optional<InstanceSpec> CreatedSpec(const std::string& name) const;

  // ---- Failures ----
  // The next `times` calls of `op` fail with `error` (before doing anything).
  void FailNext(std::string op, Error error, int times = 1);
  // The next CreateAndStart starts an agent that exits at once (a bad command line): the
  // instance is made and started, its handshake fails.
  void BreakNextAgent();
  // The next CreateAndStart hands back, as Kubernetes does, a relay rather than PID 1's stdio,
  // and that first relay did not start: it reads a runtime's error text, then EOF. Its `reopen`
  // opens a working relay (OpenExecStream of the agent's `connect`).
  void FailNextFirstRelay();
  // As FailNextFirstRelay, but as the Kubernetes client reports an exec that did not start (a
  // Failure Status on the error stream): the first relay's read fails with `error`, and so do
  // the next `reopens_failing` relays its `reopen` opens; later ones work.
  void FailNextRelaysWith(Error error, int reopens_failing);

  // ---- Runtime ----
  const std::string& host() const override { return host_; }
  const RuntimeTraits& traits() const override { return traits_; }
  // Egress policies are offered (its networks are names only, EnsureEgressNetwork).
  Result<void> CheckEgressSupport() override { return Ok(); }
  // gVisor runtimes: "runsc" and its twin "runsc-none".
  Result<std::string> RequireGvisor(std::string_view runtime, std::string_view platform,
                                    bool network_none) override;
  // kDefaultPlatform: the fake host has every platform's runtime, as setup-host registers them.
  Result<std::string> DefaultPlatform(std::string_view, std::string*) override {
    return std::string(kDefaultPlatform);
  }
  Result<DiskCapSupport> ProbeDiskCap(std::string_view runtime, std::string_view image) override;
  Result<HostCapacity> Capacity() override;                           // 8 GiB
  Result<std::string> PrepareImage(std::string_view image) override;  // "fake/with-agent:IMAGE"
  // kConflict when the name exists; kNotFound when spec.workspace names no volume.
  Result<StartedInstance> CreateAndStart(const InstanceSpec& spec, StepTrace& trace,
                                         StderrSink on_stderr) override;
  Result<InstanceInfo> Inspect(std::string_view ref) override;
  Result<std::vector<InstanceSummary>> List(const std::vector<std::string>& label_filters) override;
  Result<bool> Remove(std::string_view ref) override;
  // SIGSTOP / SIGCONT to the instance's agent (a real freeze: its clock runs on, as under runsc);
  // status "paused" / "running". kConflict as Docker's: not running, or already so.
  // Images: unsupported (a fake makes no images): kUnsupported, naming the runtime.
  Result<ImageConfig> ImageConfigOf(std::string_view image) override;
  Result<std::string> ImportImage(std::string_view ref, const ImageConfig& config,
                                  const channel::ByteSource& tar,
                                  const std::function<void(std::string_view)>& progress) override;
  Result<std::vector<ImageEntry>> ImagesWithLabel(std::string_view label) override;
  Result<bool> RemoveImage(std::string_view ref) override;
  Result<void> Pause(std::string_view id) override;
  Result<void> Unpause(std::string_view id) override;
  // Kept in memory (source "fake"; a created instance starts with its spec's limits, an added
  // one with none): enforced by nothing. kConflict when not running.
  Result<LiveLimits> Resize(std::string_view id, const ResizeSpec& spec) override;
  Result<LiveLimits> ReadLimits(std::string_view id) override;
  Result<SandboxStats> Stats(std::string_view id) override;  // kUnsupported
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
  Result<std::map<std::string, Labels>> VolumesWithLabel(std::string_view label) override;
  Result<SandboxNetwork> EnsureEgressNetwork(std::string_view name,
                                             const egress::EgressRules& rules,
                                             const Labels& labels) override;
  Result<void> RemoveEgressNetwork(std::string_view name) override;

 private:
  struct Instance {
    std::string id, name, image;
    Labels labels;
    InstanceState state;
    std::int64_t created_unix = 0;
    bool helper = false;
    bool memory_limit = false;
    bool remove_on_exit = false;
    LiveLimits limits{.source = "fake"};
    std::string socket;
    std::optional<Subprocess> agent;
  };
  // Records the call; returns the injected failure for it, if any. Needs mu_.
  std::optional<Error> Record(std::string_view op, std::string_view object);
  Instance* Find(std::string_view ref);  // by id or name; needs mu_
  void Refresh(Instance& i);             // an agent that exited: state "exited"; needs mu_
  void Reap();  // Refreshes all; forgets exited ones made with remove_on_exit; needs mu_
  std::vector<std::string> LocalArgv(const Instance& i, const std::vector<std::string>& argv);
  // An exec's call recorded (`op`), its instance running, and its argv on this machine.
  Result<std::vector<std::string>> ExecArgv(std::string_view op, std::string_view id,
                                            const std::vector<std::string>& argv);

  const std::string host_;
  const std::string agent_binary_;
  RuntimeTraits traits_{.kind = "fake"};
  std::string dir_;  // the agents' sockets
  mutable std::mutex mu_;
  std::vector<Call> calls_;
  std::map<std::string, std::deque<Error>> failures_;
  std::map<std::string, Instance> instances_;    // by name
  std::map<std::string, InstanceSpec> created_;  // by name
  std::map<std::string, Labels> volumes_;
  std::set<std::string> networks_;             // by instance name
  std::map<std::string, ImageConfig> images_;  // AddImage's
  int next_id_ = 1;
  bool break_next_agent_ = false;
  bool fail_next_first_relay_ = false;
  std::optional<Error> relay_error_;  // FailNextRelaysWith
  int relay_error_reopens_ = 0;
};

}  // namespace agvisor
