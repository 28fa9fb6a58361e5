// Sandbox: one gVisor sandbox on a Docker host, with the seed's lifecycle (create, resume, exec,
// stop, delete, list), run by the in-sandbox agent as PID 1.
//
// Used by the CLI (apps/agvisor), later the daemon and the Python binding. A Sandbox handle is
// thread-safe: many threads may exec in one sandbox at once, and many sandboxes may be driven from
// one process. The host is reached through the Runtime object the caller hands in (runtime.h; made
// once by MakeRuntime, runtimes.h, and shared, so an ssh host costs one ssh process however many
// sandboxes use it). Every static entry point takes it; a handle keeps it.
//
// After the sandbox starts, every operation is a message on ONE agent channel per handle
// (channel/, docs/protocol.md): Create attaches to PID 1's stdio before start and serves the
// channel there (no exec on the create path); a handle from Open / resume / List opens it lazily
// with one exec of `agvisor-agent connect` (a relay). A channel that drops is reopened by the
// next call; a sandbox that died is reported as kSandboxDied with its reason. Starting, attaching
// to and signalling a background process each open a relay of their own (the protocol has no
// detach: a process stays attached to its session until that ends).
//
// Lifecycle (the seed's promises, see docs/lifecycle.md):
//   - Create() with a name re-attaches to a running sandbox of that name (its processes alive);
//     a stopped one is replaced by a fresh container on the same /workspace volume.
//   - lifetime and idle_ttl are enforced by the agent inside the sandbox: they hold when the
//     client dies. Anonymous sandboxes with either are removed by Docker when they end.
//   - Stop() removes the container (a named sandbox keeps its volume); Delete() also erases it.
//   - A sandbox killed by its memory or pids limit is reported as kSandboxDied with the reason.
//   - Pause() freezes it (processes keep their memory, get no CPU); any call resumes it first
//     unless the handle says not to (set_auto_resume). Lifetime runs on while paused, idle time
//     does not; a paused sandbox past its lifetime is ended by the host (docs/lifecycle.md).
#pragma once

#include <atomic>
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
#include "agvisor/sandbox/agent_paths.h"
#include "agvisor/sandbox/snapshot.h"
#include "agvisor/sandbox/spec.h"
#include "agvisor/sandbox/types.h"

namespace agvisor {
class Runtime;
struct ImageConfig;
struct SnapshotBase;

class Sandbox {
 public:
  // Creates and starts a sandbox on `runtime`, or re-attaches to a running one of the same name.
  // Validates the spec first; spec.host is "" or the runtime's host. Errors: kInvalidArgument
  // (spec; no runtime, or one of another host), kUnsupported (a limit this host cannot
  // enforce, e.g. an explicit disk cap), kNotFound (image missing: says how to build it),
  // kConflict (another client holds the name in a state we cannot attach to), kUnavailable.
  static Result<std::unique_ptr<Sandbox>> Create(std::shared_ptr<Runtime> runtime,
                                                 const SandboxSpec& spec);
  // A handle on an existing container by its container name ("agvisor-x"), as list returns it.
  // Errors: kNotFound (NoSuchSandbox's words), kInvalidArgument (no runtime), kUnavailable.
  static Result<std::unique_ptr<Sandbox>> Open(std::shared_ptr<Runtime> runtime,
                                               std::string_view container_name);
  // Every agvisor sandbox on the runtime's host, running or not, anonymous leftovers included,
  // and the named ones that were stopped (state "stopped": only their volume is left).
  static Result<std::vector<SandboxInfo>> List(const std::shared_ptr<Runtime>& runtime);

  // Removes the sandbox's container whether it runs or not, and with `erase_data` its volume.
  // Works on sandboxes whose container is already gone (expired named ones). Errors: kNotFound
  // when neither a container nor a volume of that name exists, kUnavailable.
  static Result<void> Remove(const std::shared_ptr<Runtime>& runtime,
                             std::string_view container_name, bool erase_data);

  ~Sandbox();

  // Runs argv inside (no shell). Errors: kInvalidArgument (timeout vs idle_ttl), kSandboxDied
  // (the sandbox ended before or during the command: the message says why), kUnavailable.
  Result<ExecResult> Exec(const std::vector<std::string>& argv, const ExecOptions& options = {});
  // Runs `sh -c command`.
  Result<ExecResult> ExecShell(std::string_view command, const ExecOptions& options = {});

  // Starts argv and returns at once: the caller streams stdin, resizes the pty, signals, and
  // Waits (output goes to the callbacks given to Wait). Errors: as Exec.
  Result<std::unique_ptr<Process>> StartProcess(const std::vector<std::string>& argv,
                                                const ProcessOptions& options = {});

  // ---- Background processes: they outlive this handle and the client's connection ----
  // The agent keeps the last 1 MiB of each one's output for a later AttachProcess.
  // Starts argv in the background and returns its pid. Errors: as Exec.
  Result<std::uint32_t> StartBackground(const std::vector<std::string>& argv,
                                        const BackgroundOptions& options = {});
  // The background processes, running and recently finished. Errors: kSandboxDied, kUnavailable.
  Result<std::vector<ProcessInfo>> ListProcesses();
  // Attaches to background process `pid` on a session of its own: Wait delivers the kept output,
  // then live output and the exit; Signal/Resize/Write work. Destroying the Process detaches
  // (the process keeps running). Wait's errors: kNotFound (no background process `pid`),
  // kConflict (another client is attached to it), kSandboxDied, kUnavailable.
  Result<std::unique_ptr<Process>> AttachProcess(std::uint32_t pid);
  // AttachProcess and Wait: replayed and live output to `callbacks`, until the process exits.
  Result<ProcessExit> AttachProcess(std::uint32_t pid, const channel::ExecCallbacks& callbacks);
  // Sends `signal` to background process `pid` (its process group); a finished one is left
  // alone. Through the agent (attach + SIGNAL on a session of its own); when another client is
  // attached, through kill(1) inside as the default user. Errors: kNotFound (no background
  // process `pid`), kInvalidArgument (signal), kPermissionDenied (kill(1) failed),
  // kSandboxDied, kUnavailable.
  Result<void> Signal(std::uint32_t pid, int signal);

  // ---- Files (paths absolute inside the sandbox; its own view, symlinks resolved inside) ----
  // Errors of each: kNotFound, kPermissionDenied, kInvalidArgument (relative path), kConflict
  // (e.g. a directory where a file is expected), kSandboxDied, kUnavailable.
  // A regular file of 32 MiB or more comes through an exec of the agent's `read-file` (Docker's
  // exec stream, faster for bulk bytes; docs/agent.md), anything else over the channel.
  // The whole file in memory: for a file of any size the sandbox may claim, ReadFileTo is the
  // bounded way.
  Result<std::string> ReadFile(std::string_view path);
  // Streams the file's bytes to `sink` as they arrive (bounded memory, whatever size the sandbox
  // reports): `offset` bytes are skipped first (read and dropped: the agent reads from the
  // start), then at most `length` bytes go to `sink` (nullopt = to the end), and the read stops
  // there. A `sink` error stops the read and is returned as it is. Errors: as ReadFile.
  Result<void> ReadFileTo(std::string_view path, const channel::ByteSink& sink,
                          std::uint64_t offset = 0, std::optional<std::uint64_t> length = {});
  // Creates or replaces `path` (parent directories created as needed).
  Result<void> WriteFile(std::string_view path, std::string_view data, std::uint32_t mode = 0644);
  Result<FileEntry> Stat(std::string_view path);
  Result<std::vector<FileEntry>> ListDir(std::string_view path);
  Result<void> Mkdir(std::string_view path, bool parents = true, std::uint32_t mode = 0755);
  Result<void> Remove(std::string_view path, bool recursive = false);
  // Copies the local file or directory `local_path` into the sandbox directory `sandbox_dir`
  // (created if missing), as a tar stream (the system's `tar` packs it). Errors: as above, plus
  // kNotFound for a missing local path.
  Result<void> Upload(std::string_view local_path, std::string_view sandbox_dir,
                      const UploadOptions& options = {});
  // Copies the sandbox file or directory `sandbox_path` into the local directory `local_dir`
  // (created if missing), by UnpackIntoLocalDir's rules: regular files, directories and links
  // that stay inside `local_dir` only, modes & 0777, all or nothing.
  Result<void> Download(std::string_view sandbox_path, std::string_view local_dir,
                        const DownloadOptions& options = {});
  // The tar streams under Upload and Download, for callers that carry archives themselves
  // (agvisord's archive routes). UploadTar creates `sandbox_dir` (with parents) and extracts the
  // archive that `source` supplies under it by the agent's rules (base/tar_stream.h: nothing
  // lands outside the directory); DownloadTar hands `sink` a tar of `sandbox_path` (entries named
  // from its last component). Memory stays bounded (the channel's flow control). Errors: as
  // Upload / Download, kInvalidArgument for a refused or malformed entry, and those of
  // `source` / `sink` as they are.
  Result<void> UploadTar(std::string_view sandbox_dir, const channel::ByteSource& source);
  Result<void> DownloadTar(std::string_view sandbox_path, const channel::ByteSink& sink);

  // A connection to 127.0.0.1:port inside the sandbox (works with network=none). Errors:
  // kUnavailable (nothing listens there), kSandboxDied.
  Result<std::unique_ptr<PortStream>> OpenPort(std::uint16_t port);

  // Watches the directory `path` inside (absolute), and with `recursive` every directory below
  // it, new ones included (inotify in the agent; docs/lifecycle.md, "Watch"): create, modify,
  // delete and move events from the moment this returns, and one overflow event where the
  // agent's bounded queue dropped some (a slow consumer). An open watch counts as activity (the
  // idle clock does not run). Errors of Next are those of the channel: pass them to Diagnose to
  // learn whether the sandbox died. Errors: kInvalidArgument (a relative path, or not a
  // directory), kNotFound, kPermissionDenied, kResourceExhausted (too many directories below
  // it), kUnsupported (a sandbox whose agent predates watching), kSandboxDied, kUnavailable.
  Result<std::unique_ptr<WatchStream>> Watch(std::string_view path, bool recursive = true);

  // Replaces the running sandbox's lifetime and idle_ttl (seconds; nullopt = none): the agent
  // counts the new lifetime from now and restarts the idle clock (a warm pool does this when it
  // hands a member out). Exec timeouts are then checked against the new idle_ttl; call it before
  // other threads use the handle. Errors: kInvalidArgument (<= 0), kSandboxDied, kUnavailable.
  Result<void> SetDeadlines(std::optional<std::int64_t> lifetime,
                            std::optional<std::int64_t> idle_ttl);
  // True while this handle's agent channel is open (no reconnect is tried): a cheap liveness
  // check (a sandbox that died closes the channel).
  bool ChannelOpen() const;

  // The agent's last log lines (its stderr on the attach stream): for diagnostics.
  std::vector<std::string> AgentLog() const;
  // An operation's error, diagnosed: when its channel broke (kUnavailable), gives Docker a moment
  // to record a death and returns kSandboxDied with the reason if the sandbox died; else `e`.
  // Every call here does this itself; it is for errors of a Process's own calls (Wait, Write).
  Error Diagnose(const Error& e);

  // ---- Pause (docs/lifecycle.md, "Pause and resume") ----
  // Freezes every process of the sandbox: they keep their memory and get no CPU until Resume or
  // the next call on any handle of the same Runtime object (which resumes it first; handles of
  // other runtimes and processes resume it when they next open a session). Idempotent. Errors:
  // kSandboxDied (it is not running: why), kUnsupported (the runtime cannot), kUnavailable.
  Result<void> Pause();
  // Thaws a paused sandbox; a running one is left as it is. A paused sandbox whose lifetime
  // passed while frozen is not thawed but ended, as its agent would have ended it (removed; a
  // named one keeps its volume): kSandboxDied, "lifetime reached while paused". Errors:
  // kSandboxDied, kUnavailable.
  Result<void> Resume();
  // Whether calls on this handle resume a paused sandbox first (the default). When not, a call
  // on a sandbox paused through this runtime fails with kConflict naming the state and how to
  // resume.
  void set_auto_resume(bool yes) { auto_resume_ = yes; }
  bool auto_resume() const { return auto_resume_; }
  // kConflict (naming the state and how to resume) when the sandbox is paused now, as the
  // runtime says (one inspect): for front ends whose caller asked a single call not to resume.
  // Errors: also those of inspecting.
  Result<void> RefuseIfPaused();

  // ---- Live resize (docs/lifecycle.md, "Live resize") ----
  // Changes the cpus, memory and pids of the running (or paused: it stays so) sandbox in place,
  // in the host's cgroup files, and returns the limits it runs under now. Enforced as the
  // create-time limits are: past the new memory the whole sandbox ends, reported as out of
  // memory; CPU is a quota. Inside, /proc/meminfo keeps the create-time MemTotal. Errors:
  // kInvalidArgument (nothing to change, a malformed value, memory under kMinMemoryBytes: no
  // request is sent), kConflict (memory under what the sandbox uses now: the host's kernel could
  // not reclaim it; nothing changed), kUnsupported (the host's cgroup files are out of reach:
  // ssh:// and tcp:// Docker hosts; the message names the way out), kPermissionDenied (not
  // root), kSandboxDied (it is not running: why), kUnavailable.
  Result<LiveLimits> Update(const LimitsUpdate& update);

  // ---- Snapshots (snapshot.h; docs/lifecycle.md, "Snapshots and forks") ----
  // Makes snapshot options.image, the image "REPOSITORY:TAG" in the snapshot repository
  // (snapshot.h), of the sandbox's root file system as the sandbox sees it (the agent's tar of
  // "/", checked on the host, streamed into the runtime's image import; where the runtime can,
  // only what changed, as a layer over the sandbox's image: docs/lifecycle.md), keeping the image's
  // env, working directory and user, labelled agvisor.snapshot.of=<name>. Processes are not kept.
  // Resumes a sandbox this process paused (as every call does). Errors: kInvalidArgument
  // (options, a name outside the snapshot repository; a stream the host's checker refused,
  // naming the entry), kResourceExhausted (past options.max_bytes), kConflict (an image of that
  // name exists that is no snapshot: never replaced; paused and not to be resumed),
  // kUnsupported (the runtime makes no images; an agent that predates snapshots),
  // kSandboxDied, kUnavailable. On any error no image of this call is left.
  Result<SnapshotResult> Snapshot(const SnapshotOptions& options);

  // Removes the container; a named sandbox keeps its volume. Idempotent.
  Result<void> Stop();
  // Stop() and erase the named sandbox's volume.
  Result<void> Delete();
  // Running or not, and why it ended.
  Result<SandboxInfo> Info();

  const std::string& container_name() const { return container_name_; }
  const std::optional<std::string>& name() const { return name_; }
  bool persistent() const { return name_.has_value(); }
  // "/workspace" for named sandboxes, "" otherwise.
  std::string data_dir() const { return persistent() ? "/workspace" : ""; }
  // True when Create() attached to a sandbox that was already running.
  bool resumed() const { return resumed_; }
  // The create's warnings, "; "-joined: the default disk cap could not be enforced on this host
  // (the reason); the default platform is not available on this host (Runtime::DefaultPlatform:
  // the first create through a runtime object only). Callers show it as "warning: ...".
  const std::string& disk_warning() const { return disk_warning_; }
  const std::string& host() const { return host_; }
  // The runtime it runs on (what Fork and desktops reach the host through).
  const std::shared_ptr<Runtime>& runtime() const { return runtime_; }
  std::optional<std::int64_t> idle_ttl() const { return idle_ttl_; }

 private:
  friend class Pool;
  struct LogRing;
  Sandbox();
  // Create with labels of agvisor's own (e.g. agvisor.pool), which a spec may not carry.
  static Result<std::unique_ptr<Sandbox>> Create(
      std::shared_ptr<Runtime> runtime, const SandboxSpec& spec,
      const std::map<std::string, std::string>& system_labels);
  Result<SandboxInfo> InfoLocked();
  // Before a call: when this process paused the sandbox, resumes it (or refuses: auto_resume).
  // A lock-free check when nothing is paused here; with idle_action pause, also an Inspect when
  // the previous call was long enough ago that a lister may have frozen it (idle_pause.h).
  Result<void> WakeIfPausedHere();
  // One snapshot stream (sandbox_snapshot.cc): the agent's archive checked into the runtime's
  // import, or with `base` its layer into a load.
  struct SnapshotStream;
  Result<std::string> StreamSnapshot(const std::string& ref, const ImageConfig& config,
                                     const SnapshotOptions& options,
                                     const std::vector<std::string>& excludes,
                                     const SnapshotBase* base, SnapshotStream* out);
  // After the runtime refused an exec (`e`): when the sandbox is paused, resumes it (or refuses)
  // and returns true (try again); false when it is not paused. Errors: Resume's, or kConflict.
  Result<bool> WakeIfPaused(const Error& e);
  Error PausedError() const;
  // Turns a failed exec into kSandboxDied when the container is gone or stopped.
  Error DiagnoseExecFailure(const Error& e);
  // The bulk path of ReadFile and DownloadTar for large regular files (sandbox.cc,
  // kBulkReadBytes): an exec of the agent's read-file (`tar`: read-file --tar, TAR_READ's stream)
  // whose stdout goes to `sink`. false: this sandbox's agent has no such subcommand (nothing
  // reached `sink`; use the channel). Errors: as FILE_READ / TAR_READ, and `sink`'s as they are.
  Result<bool> ReadByExec(std::string_view path, bool tar, const channel::ByteSink& sink);
  // The open channel, or a new one through the connect relay. Errors: kSandboxDied,
  // kUnavailable.
  Result<std::shared_ptr<channel::Channel>> Channel();
  // A new channel through a connect relay, not shared (its own session). Errors: as Channel().
  Result<std::shared_ptr<channel::Channel>> OpenChannel();
  // The channel for an operation on one background process: Channel(), or, with an agent of
  // protocol version 1 (no DETACH, no PROC_SIGNAL), a session of its own, whose end detaches.
  Result<std::shared_ptr<channel::Channel>> ProcessChannel();

  // Where the sandbox runs (runtime.h).
  std::shared_ptr<Runtime> runtime_;
  std::string host_;
  std::string container_name_;
  std::string container_id_;
  std::optional<std::string> name_;
  std::optional<std::int64_t> idle_ttl_;
  // idle_action pause: a lister may freeze the sandbox once it has been idle for idle_ttl_, so a
  // call that comes that long after this handle's previous one checks first (WakeIfPausedHere).
  bool idle_pause_ = false;
  std::atomic<std::int64_t> last_call_ns_{0};  // steady clock; 0 = none yet
  // For the out-of-memory message: the create-time limits.memory (a resize made through this
  // runtime is found by container id instead, RuntimeLocal).
  std::string memory_;
  bool resumed_ = false;
  std::string disk_warning_;

  mutable std::mutex channel_mu_;  // one relay at a time; guards channel_
  std::shared_ptr<channel::Channel> channel_;
  // The protocol version to offer the agent: lowered to 1 once an older agent refused 2, so
  // later sessions do not pay a refused handshake each.
  std::atomic<std::uint16_t> agent_protocol_{proto::kProtocolVersion};
  std::shared_ptr<LogRing> agent_log_;
  std::atomic<bool> auto_resume_{true};
};

}  // namespace agvisor
