// The client layer: "a place where sandboxes live", reached in process (the library on a Docker
// host) or through agvisord (HTTP + WebSocket). Callers are written once against Place and
// SandboxHandle and do not know which they have: the agvisor CLI and the Python package (other
// front ends next). Errors keep their agvisor::ErrorCode either way, so a caller's exit
// codes and exceptions hold through the daemon too.
//
// InProcess (in_process.cc) forwards to Sandbox; Agvisord (agvisord.h) speaks agvisord's API
// (agvisord_api.h). Handles are thread-safe as Sandbox is; a Command or ByteStream allows one
// reader and one writer at once (plus Close from anywhere).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/channel/channel.h"
#include "agvisor/channel/transport.h"
#include "agvisor/sandbox/host_verbs.h"
#include "agvisor/sandbox/spec.h"
#include "agvisor/sandbox/types.h"

namespace agvisor {
class Sandbox;
}  // namespace agvisor

namespace agvisor::client {

// A connection to a TCP port inside a sandbox (port-forward, desktop viewers): the library's
// PortStream, or agvisord's port WebSocket. A bidirectional byte stream (channel::Transport:
// Read, Write, Close; Read 0 = the sandbox side closed) that can also be half-closed. Errors:
// kUnavailable (the stream broke), the sandbox's for the port (nothing listens, kSandboxDied).
class ByteStream : public channel::Transport {
 public:
  // Half-close: the sandbox side reads end of file; reading goes on.
  virtual Result<void> CloseWrite() = 0;
};
// The library's PortStream as a ByteStream.
std::unique_ptr<ByteStream> WrapPortStream(std::shared_ptr<PortStream> stream);

// A command the caller talks to while it runs (shell, exec -i, attach): stdin, window size,
// signals, exit. Write/CloseStdin/Resize/Signal may be called from any thread while another
// thread is in Wait.
class Command {
 public:
  virtual ~Command() = default;
  // Bytes for the command's stdin. Errors: kUnavailable (the stream broke), kConflict (exited).
  virtual Result<void> Write(std::string_view data) = 0;
  virtual Result<void> CloseStdin() = 0;
  virtual Result<void> Resize(std::uint16_t rows, std::uint16_t cols) = 0;
  // Sends `signal` to the command's process group.
  virtual Result<void> Signal(int signal) = 0;
  // Output to `callbacks` until the command exits; how it ended. Called once. Errors: kSandboxDied
  // (with why), kUnavailable (the stream broke before the exit), the start's errors (kNotFound:
  // no such program, ...).
  virtual Result<ProcessExit> Wait(const channel::ExecCallbacks& callbacks) = 0;
  // Ends the stream from any thread (a blocked Write returns): a started command is killed, an
  // attached background one only detached. Idempotent.
  virtual void Close() = 0;
  // The command's pid inside the sandbox.
  virtual std::uint32_t pid() const = 0;
};

// Exec through a Command (agvisord's exec WebSocket; an MCP exec its client may cancel): the
// ProcessOptions that start it as ExecOptions `o` says (the one conversion; kInvalidArgument
// from ValidateExecTimeout: a run needs a timeout, where a process takes 0 as none), then
// RunToEnd feeds `o.input` on a thread of its own and collects the output as Sandbox::Exec does
// (ExecOutputCollector: callbacks, tails, the cap, dropped counts, which path ran) and returns
// how the command ended. Closing `command` from another thread kills it: RunToEnd then fails
// with the stream's error. Errors: those of Command::Wait.
Result<ProcessOptions> ProcessOptionsFor(const ExecOptions& o);
Result<ExecResult> RunToEnd(Command& command, const ExecOptions& o);

// A directory watch inside a sandbox (SandboxHandle::Watch): Sandbox::Watch's events, in process
// or through agvisord's watch WebSocket. Next and Close may run on different threads at once.
class DirWatch {
 public:
  virtual ~DirWatch() = default;
  // The next events, waiting up to `timeout`: a non-empty list, an empty one when none came in
  // time, nullopt once the watch is over (the directory was deleted or moved away, or Close).
  // Every event's path was checked (relative, bounded, no NUL). Errors: kSandboxDied (the
  // sandbox ended: why), kUnavailable (the stream broke), kInternal (the agent sent malformed
  // events: a broken or hostile sandbox).
  virtual Result<std::optional<std::vector<WatchEvent>>> Next(
      std::chrono::milliseconds timeout) = 0;
  // Ends the watch from any thread (a waiting Next returns nullopt). Idempotent.
  virtual void Close() = 0;
};

// One sandbox, by its container name ("agvisor-...").
class SandboxHandle {
 public:
  virtual ~SandboxHandle() = default;
  virtual const std::string& container_name() const = 0;
  // Runs argv to its end with Sandbox::Exec's semantics: live output through the options'
  // callbacks (a bounded tail kept), exit code 124 on timeout, `input` as stdin. Errors: as
  // Sandbox::Exec.
  virtual Result<ExecResult> Exec(const std::vector<std::string>& argv,
                                  const ExecOptions& options) = 0;
  virtual Result<std::unique_ptr<Command>> Start(const std::vector<std::string>& argv,
                                                 const ProcessOptions& options) = 0;
  virtual Result<std::uint32_t> StartBackground(const std::vector<std::string>& argv,
                                                const BackgroundOptions& options) = 0;
  virtual Result<std::vector<ProcessInfo>> ListProcesses() = 0;
  // Attaches to background process `pid`: its kept output replayed, then live output to
  // `callbacks` until it exits.
  virtual Result<ProcessExit> AttachProcess(std::uint32_t pid,
                                            const channel::ExecCallbacks& callbacks) = 0;
  virtual Result<void> Signal(std::uint32_t pid, int signal) = 0;
  // As Sandbox::Upload / Download (a tar stream each way; downloads extracted by
  // UnpackIntoLocalDir's host rules, on this machine, in either place).
  virtual Result<void> Upload(std::string_view local_path, std::string_view sandbox_dir,
                              const UploadOptions& options) = 0;
  virtual Result<void> Download(std::string_view sandbox_path, std::string_view local_dir,
                                const DownloadOptions& options) = 0;
  virtual Result<std::unique_ptr<ByteStream>> OpenPort(std::uint16_t port) = 0;
  // Attaches to background process `pid` and hands the session out (stdin when the process was
  // started with one; Wait replays the kept output, then live output). Close() only detaches:
  // the process runs on. Errors: kNotFound (no such process), kConflict (another client is
  // attached), the sandbox's.
  virtual Result<std::unique_ptr<Command>> Attach(std::uint32_t pid) = 0;
  // Sandbox's file calls (ReadFile, WriteFile, Stat, ListDir, Mkdir, Remove), with their errors
  // (kNotFound, kPermissionDenied, kInvalidArgument for a relative path, kConflict, ...).
  // Through agvisord a FileEntry's mode is its permission and type bits (an "other" entry's,
  // a fifo's or a device's, has no type bits).
  virtual Result<std::string> ReadFile(std::string_view path) = 0;
  // The file's first `max_bytes` bytes at most (all of a shorter one): bounded memory whatever
  // size the sandbox claims (through agvisord the files route's `length`). Errors: as ReadFile.
  virtual Result<std::string> ReadFilePrefix(std::string_view path, std::uint64_t max_bytes) = 0;
  virtual Result<void> WriteFile(std::string_view path, std::string_view data,
                                 std::uint32_t mode) = 0;
  virtual Result<FileEntry> Stat(std::string_view path) = 0;
  virtual Result<std::vector<FileEntry>> ListDir(std::string_view path) = 0;
  virtual Result<void> Mkdir(std::string_view path, bool parents, std::uint32_t mode) = 0;
  virtual Result<void> RemovePath(std::string_view path, bool recursive) = 0;
  // As Sandbox::Watch (its errors; through agvisord the watch WebSocket carries the events).
  virtual Result<std::unique_ptr<DirWatch>> Watch(std::string_view path, bool recursive) = 0;
  // As Sandbox::Info: state, running, why it ended. Errors: kNotFound (no such sandbox).
  virtual Result<SandboxInfo> Info() = 0;
  // As Sandbox::set_auto_resume, for this handle's calls only: false makes a call on a paused
  // sandbox fail with kConflict instead of resuming it.
  virtual void SetAutoResume(bool yes) = 0;
  virtual bool auto_resume() const = 0;
  // As Sandbox::Snapshot (docs/lifecycle.md, "Snapshots and forks"). Through agvisord the
  // daemon checks the stream and options.progress is called once, at the end. The default (a
  // handle that cannot): kUnsupported.
  virtual Result<SnapshotResult> Snapshot(const SnapshotOptions& options) {
    (void)options;
    return Error::Unsupported("snapshot of " + container_name() +
                              ": this place does not make snapshots");
  }
  // For agvisord's routes (the daemon serves its callers through an in-process place; other
  // handles answer kUnsupported):
  // As Sandbox::RefuseIfPaused: kConflict, naming the state and how to resume, when the sandbox
  // is paused now (one inspect), for a request that asked not to resume it.
  virtual Result<void> RefuseIfPaused() { return Unsupported("the paused check"); }
  // As Sandbox::ReadFileTo: the file's bytes to `sink` as they come (bounded memory).
  virtual Result<void> ReadFileTo(std::string_view path, const channel::ByteSink& sink,
                                  std::uint64_t offset, std::optional<std::uint64_t> length) {
    (void)path, (void)sink, (void)offset, (void)length;
    return Unsupported("a streamed file read");
  }
  // As Sandbox::UploadTar / DownloadTar: a tar stream each way, extracted or made inside.
  virtual Result<void> UploadTar(std::string_view sandbox_dir, const channel::ByteSource& source) {
    (void)sandbox_dir, (void)source;
    return Unsupported("a tar upload");
  }
  virtual Result<void> DownloadTar(std::string_view sandbox_path, const channel::ByteSink& sink) {
    (void)sandbox_path, (void)sink;
    return Unsupported("a tar download");
  }

 private:
  Error Unsupported(std::string_view what) const {
    return Error::Unsupported(std::string(what) + " of " + container_name() +
                              ": this place offers it in process only");
  }
};

// What Create reports.
struct Created {
  std::unique_ptr<SandboxHandle> handle;
  std::optional<std::string> name;
  bool resumed = false;
  std::string disk_warning;
};

// The host verbs' values (Place::HostReport, BuildImage), runtime-neutral: sandbox/host_verbs.h.
using HostCheck = agvisor::HostCheck;
using ImageBuildOptions = agvisor::ImageBuildOptions;
// The name BuildImage gives an image of `kind` when ImageBuildOptions::name is "" (for kube-agent
// the one the Kubernetes runtime's pods use: $AGVISOR_KUBE_AGENT_IMAGE or agvisor/agent:HASH).
std::string DefaultImageName(std::string_view kind);

// What Fork reports: the snapshot and the running forks, PREFIX-1 first.
struct Forked {
  SnapshotResult snapshot;
  std::vector<Created> sandboxes;
  double seconds = 0;
};

class Place {
 public:
  virtual ~Place() = default;
  // As Sandbox::Create (the spec's host is the place's).
  virtual Result<Created> Create(const SandboxSpec& spec) = 0;
  // A handle on "agvisor-..." (in process: kNotFound when there is no such sandbox; through
  // agvisord that error comes with the first operation).
  virtual Result<std::unique_ptr<SandboxHandle>> Open(std::string_view container_name) = 0;
  virtual Result<std::vector<SandboxInfo>> List() = 0;
  // As Sandbox::Remove.
  virtual Result<void> Remove(std::string_view container_name, bool erase_data) = 0;
  // As Sandbox::Pause / Resume (docs/lifecycle.md, "Pause and resume").
  virtual Result<void> Pause(std::string_view container_name) = 0;
  virtual Result<void> Resume(std::string_view container_name) = 0;
  // As Sandbox::Update (docs/lifecycle.md, "Live resize"): the limits it runs under afterwards.
  virtual Result<LiveLimits> Update(std::string_view container_name,
                                    const LimitsUpdate& update) = 0;
  // Whether calls through handles opened from now on resume a paused sandbox first (the
  // default) or fail with kConflict naming the state and how to resume (Sandbox::auto_resume;
  // through agvisord each request says so with `resume=false`).
  virtual void SetAutoResume(bool yes) = 0;
  // As agvisor::Fork (snapshot.h) of the named sandbox `container_name`: a snapshot with its
  // /workspace, then options.count sandboxes from it. options.spec's host is the place's.
  // Through agvisord the daemon does it all; options.progress is called once, at the end. The
  // default (a place that cannot): kUnsupported.
  virtual Result<Forked> Fork(std::string_view container_name, const ForkOptions& options) {
    (void)options;
    return Error::Unsupported("fork of " + std::string(container_name) +
                              ": this place does not make forks");
  }
  // Snapshots (docs/lifecycle.md, "Snapshots and forks"): as agvisor::ListSnapshots and
  // RemoveSnapshot (snapshot.h) on the place's host; through agvisord GET /v1/snapshots and
  // DELETE /v1/snapshots?image=NAME. Every door lists and removes snapshots through these. The
  // defaults (a place that cannot): kUnsupported.
  virtual Result<std::vector<SnapshotInfo>> ListSnapshots() {
    return Error::Unsupported("snapshots: this place makes none");
  }
  virtual Result<void> RemoveSnapshot(std::string_view name) {
    return Error::Unsupported("remove snapshot " + std::string(name) + ": this place makes none");
  }
  // Warm pools (docs/pools.md), named within the place: in process they live as long as the
  // Place object (closed with it); through agvisord as long as the daemon (POST/GET/DELETE
  // /v1/pools). Every door (CLI, Python, agvisord's routes, MCP) manages pools through these.
  // CreatePool: as Pool::Create, under `name` (the pool-name rules of api/codec.h); kConflict
  // when the place has a pool of that name. The default (a place that cannot): kUnsupported.
  virtual Result<PoolInfo> CreatePool(std::string_view name, const PoolOptions& options) {
    (void)options;
    return Error::Unsupported("pool " + std::string(name) + ": this place has no warm pools");
  }
  // A member of pool `name` with the caller's deadlines (Pool::Acquire; kNotFound: no such
  // pool). Created::resumed is false; the handle is the member's.
  virtual Result<Created> Acquire(std::string_view name, const AcquireOptions& options) {
    (void)options;
    return Error::Unsupported("pool " + std::string(name) + ": this place has no warm pools");
  }
  // Every pool of the place with its counters, by name.
  virtual Result<std::vector<PoolInfo>> ListPools() { return std::vector<PoolInfo>{}; }
  // Blocks until pool `name` has `size` members ready (Pool::WaitReady; through agvisord by
  // polling GET /v1/pools). Errors: kNotFound, kTimeout (with the last start error).
  virtual Result<void> WaitPoolReady(std::string_view name, std::chrono::milliseconds timeout) {
    (void)timeout;
    return Error::Unsupported("pool " + std::string(name) + ": this place has no warm pools");
  }
  // Closes pool `name`: its members not handed out are removed (Pool::Close). kNotFound.
  virtual Result<void> ClosePool(std::string_view name) {
    return Error::Unsupported("pool " + std::string(name) + ": this place has no warm pools");
  }
  // The verbs of the host itself rather than of one sandbox (`agvisor doctor`, `image build`,
  // `network create`). In process they act on the place's host; through agvisord, which has no
  // route for them, kUnsupported naming the way out (run them on the daemon's host). The
  // defaults (a place that cannot): kUnsupported.
  // HostReport: every check of the host; a failed check is a kFail entry, not an error.
  virtual Result<std::vector<HostCheck>> HostReport() {
    return Error::Unsupported("host checks: this place has none");
  }
  // BuildImage: builds an image into the host's Docker (a Kubernetes host's nodes pull theirs:
  // it goes to this machine's Docker, to be pushed) and returns its id. Errors: those of
  // images::BuildImage (kPermissionDenied: not root, kNotFound: debootstrap missing, ...),
  // kInvalidArgument (an unknown kind).
  virtual Result<std::string> BuildImage(const ImageBuildOptions& options) {
    return Error::Unsupported("image build of " + options.kind + ": this place builds none");
  }
  // VolumeSizes: the bytes each volume of the host uses (Docker counts them by walking each: slow
  // on big ones), by volume name, the container name of a named sandbox; -1 = not counted.
  virtual Result<std::map<std::string, std::int64_t>> VolumeSizes() {
    return Error::Unsupported("volume sizes: this place counts none");
  }
  // CreateNetwork: a bridge network sandboxes may share (`create --network NAME`); its id.
  // Errors: kConflict (it exists), kInvalidArgument (a bad name), kUnsupported (a Kubernetes
  // host: pods have the pod network or none).
  virtual Result<std::string> CreateNetwork(std::string_view name) {
    return Error::Unsupported("network " + std::string(name) + ": this place makes none");
  }
  // One sample of the runtime's stats for a running sandbox (Runtime::Stats; about a second).
  // Errors: Runtime::Stats's (kUnsupported on Kubernetes, saying why), kNotFound.
  virtual Result<SandboxStats> Stats(const SandboxInfo& sandbox) = 0;
};

// The library on Docker host `host` ("" = $DOCKER_HOST or the local socket).
std::unique_ptr<Place> InProcess(std::string host);
// The same with a broker of secrets (agvisord's, whose enforcer holds their values): a create
// with SandboxSpec::secrets has them brokered first. Without one such a create is refused.
std::unique_ptr<Place> InProcess(std::string host, std::shared_ptr<SecretBroker> broker);
// A handle on a sandbox the library made (a warm pool's member, Pool::Acquire; agvisord's own
// sandboxes): the handle shares it.
std::unique_ptr<SandboxHandle> WrapSandbox(std::shared_ptr<Sandbox> sandbox);

}  // namespace agvisor::client
