// The values callers pass to sandboxes and read back (exec and process options and results, a
// sandbox's info, file and watch entries, transfer options, warm pools' options and counters, a
// stats sample), apart from the Sandbox class and the Runtime seam that act on them: what every
// door (client/, cli/, server/, mcp/, python/) includes, so that none needs sandbox.h
// (tests/layering_test.sh checks it).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/base/resource_sample.h"
#include "agvisor/channel/channel.h"
#include "agvisor/sandbox/agent_paths.h"
#include "agvisor/sandbox/snapshot.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor {

// How long a streaming exec keeps output in memory: only the last this many bytes.
inline constexpr std::size_t kStreamTailBytes = 100 * 1000;
// How much collected (non-streaming) output Exec keeps per stream by default: far above what a
// command's answer needs, far below what an endless or hostile producer could send.
inline constexpr std::size_t kDefaultMaxOutputBytes = 256u << 20;

struct ExecOptions {
  std::optional<std::string> input;  // bytes for stdin; unset = no stdin (EOF at once)
  double timeout = 120;              // seconds; the whole process tree dies at the deadline
  std::vector<std::string> env;      // "K=V"
  std::string cwd;                   // "" = /workspace for named sandboxes, else the image's
  std::string user;                  // "" = the image's user
  // Streaming: called with output as it arrives (from the calling thread). When set, only the
  // last kStreamTailBytes of each stream are kept in the result. on_output gets both streams.
  std::function<void(std::string_view)> on_output;
  std::function<void(std::string_view)> on_stdout;
  std::function<void(std::string_view)> on_stderr;
  // Without streaming: the first this many bytes of each of stdout and stderr are kept; the rest
  // is read from the command (it is not slowed down or killed) and dropped, counted in
  // ExecResult::stdout_dropped / stderr_dropped. Output is sandbox-controlled: an endless stream
  // must not fill the caller's memory. 0 = keep everything (the caller trusts the command).
  std::size_t max_output_bytes = kDefaultMaxOutputBytes;
};

// How a command ended: a value, not an error.
struct ExecResult {
  int exit_code = 0;  // 124 = timed out; 128+N = killed by signal N
  bool timed_out = false;
  std::string out;         // stdout (its tail when streaming)
  std::string err;         // stderr (its tail when streaming)
  bool truncated = false;  // older output was dropped (streaming) or newer (max_output_bytes)
  // Collected output past ExecOptions::max_output_bytes: read and dropped, per stream.
  std::uint64_t stdout_dropped = 0;
  std::uint64_t stderr_dropped = 0;
  // The command ran in a shell the agent had started beforehand (SandboxSpec::warm_shells,
  // docs/agent.md "Ready shells"), not in one started for it.
  bool prestarted = false;
};

// One exec's output collected into its ExecResult as ExecOptions say, the same at every door:
// Sandbox::Exec over the agent channel, client::RunToEnd over agvisord's exec WebSocket or an
// MCP exec. Each piece goes to the options' callbacks, then is kept: streaming, the last
// kStreamTailBytes of each stream (trimmed at twice that, amortised); collected, the first
// max_output_bytes, the rest counted in stdout_dropped / stderr_dropped. Not copyable: the
// callbacks point at it.
class ExecOutputCollector {
 public:
  explicit ExecOutputCollector(const ExecOptions& options);
  ExecOutputCollector(const ExecOutputCollector&) = delete;
  ExecOutputCollector& operator=(const ExecOutputCollector&) = delete;
  // The callbacks to hand the stream; valid while this collector lives.
  channel::ExecCallbacks Callbacks();
  // The result once the command ended as `exit` says (exit code, timed out, which path ran).
  ExecResult Finish(const proto::Exit& exit);

 private:
  void Take(std::string& kept, std::uint64_t& dropped,
            const std::function<void(std::string_view)>& own, std::string_view piece);
  const ExecOptions& options_;
  const bool streaming_;
  ExecResult result_;
};

// A file's metadata as the agent sees it inside the sandbox (Stat, List).
using FileEntry = proto::Entry;
using FileKind = proto::EntryKind;

// An interactive or long-running command (StartProcess): write its stdin, resize its pty, signal
// it, wait for its exit. See channel::Process.
using Process = channel::Process;
// A TCP connection to a port inside the sandbox (OpenPort). See channel::PortStream.
using PortStream = channel::PortStream;
// A directory watch inside the sandbox (Watch): its events, relative to the watched directory.
// See channel::WatchStream (Next, Close) and proto::WatchEvent.
using WatchStream = channel::WatchStream;
using WatchEvent = proto::WatchEvent;
using WatchEventKind = proto::WatchEventKind;

struct ProcessOptions {
  bool pty = false;  // run under a pseudo-terminal of rows x cols (stdout and stderr merged)
  std::uint16_t rows = 24;
  std::uint16_t cols = 80;
  bool stdin = true;             // the caller will Write stdin (else /dev/null without a pty)
  double timeout = 0;            // seconds; 0 = none
  std::vector<std::string> env;  // "K=V"
  std::string cwd;
  std::string user;
};

// A command that keeps running when the client disconnects (StartBackground).
struct BackgroundOptions {
  bool stdin = false;  // a stdin pipe the caller may Write through AttachProcess
  // While it runs, the sandbox is not idle: idle_ttl does not end, stop or pause it; its idle
  // clock starts when the process exits (docs/lifecycle.md, "Idle policy"). Needs an agent of
  // protocol 6 (kUnsupported for a sandbox started by an older agvisor).
  bool keep_awake = false;
  double timeout = 0;            // seconds; 0 = none
  std::vector<std::string> env;  // "K=V"
  std::string cwd;
  std::string user;
};
// One background process as the agent lists it (running, or among the newest 64 finished).
using ProcessInfo = proto::ProcInfo;
// How a process ended: exit_code (128+N for signal N, 124 = timed out), signal, timed_out.
using ProcessExit = proto::Exit;

// Why a sandbox is no longer running.
enum class EndReason { kNone, kStopped, kLifetime, kIdle, kOutOfMemory, kKilled, kGone };
std::string_view EndReasonName(EndReason reason);  // "lifetime", "out of memory", ...

// What list and status report about one sandbox.
struct SandboxInfo {
  std::string container_name;       // "agvisor-<name or random>"
  std::optional<std::string> name;  // set for named (persistent) sandboxes
  std::string container_id;
  std::string image;
  // Docker's: "running", "paused", "exited", "created", ...; "stopped" for a named sandbox
  // whose container is gone and whose /workspace volume is kept (List only).
  std::string state;
  bool running = false;  // alive: "running" or "paused" (a paused one keeps its processes)
  EndReason end_reason = EndReason::kNone;
  int exit_code = 0;
  std::string host;
  std::string pool;  // the warm pool (docs/pools.md) that started it, or ""
  // The gVisor platform it runs on ("systrap", "ptrace"; SandboxSpec::platform), or "" for a
  // sandbox made before agvisor recorded it.
  std::string platform;
  // The limits it runs under now (Info of a running sandbox only; unset in lists and for one
  // that ended): after a live resize, the new ones (docs/lifecycle.md, "Live resize").
  std::optional<LiveLimits> limits;
  // When it was made (the host's clock, unix seconds; 0 = unknown) and the limits it was created
  // with, as given ("0.5", "512m"; "" = unknown: made before agvisor recorded them).
  std::int64_t created_unix = 0;
  std::string cpus;
  std::string memory;
  // Its idle_ttl in seconds as the handle knows it (Info only; a pool member's is the one
  // Acquire gave it); nullopt: none, or unknown.
  std::optional<std::int64_t> idle_ttl;
};

// Why the sandbox `info` describes is not running, worded once for every door (Sandbox's
// Diagnose in process, the agvisord handle from the daemon's view of it): kSandboxDied naming
// it, the reason (out of memory names `memory`, the limit it ran under; killed, the exit code)
// and, for a named sandbox, how to get a fresh container on the same /workspace.
Error SandboxDiedError(const SandboxInfo& info, std::string_view memory);

// How a download writes to this machine.
struct DownloadOptions {
  // The most bytes of file data the download may write in all (0: no budget). An entry whose
  // declared size passes it is refused at its header, before any of its data is written
  // (kResourceExhausted), and the download is undone.
  std::uint64_t max_bytes = 0;
  // Non-empty: the sandbox file or directory lands in the local directory under this name
  // instead of its own (one path component; `agvisor cp NAME:/a/f ./g` makes the file ./g).
  std::string name;
};

// How an upload writes into the sandbox.
struct UploadOptions {
  // Non-empty: the local file or directory lands in the sandbox directory under this name
  // instead of its own (one path component, no newline; `agvisor cp f NAME:/tmp/new.txt`).
  std::string name;
};

// The local halves of Sandbox::Upload / Download, for anything that carries the archive to a
// sandbox another way (the CLI through agvisord): PackLocalPath runs the system's `tar` on the
// local file or directory `local_path` (the user's own files) and hands its archive to `send`
// (the top entry named options.name when given: tar's --transform);
// UnpackIntoLocalDir creates `local_dir` and extracts there what `receive` delivers to its sink
// with the project's reader under its host rules (base/tar_stream.h, TarReaderOptions;
// docs/security.md, "Downloads"): never the system's `tar`, since the archive comes from the
// sandbox. A download that fails for any reason removes what it had created (and `local_dir`
// itself if it made it). Errors: kNotFound (no such local path), those of `send` / `receive`,
// kInternal (tar failed: its message); for downloads kInvalidArgument (a refused or malformed
// entry, named) and kResourceExhausted (the byte budget, the bookkeeping bound, a full disk).
Result<void> PackLocalPath(std::string_view local_path,
                           const std::function<Result<void>(const channel::ByteSource&)>& send,
                           const UploadOptions& options = {});
Result<void> UnpackIntoLocalDir(
    std::string_view local_dir,
    const std::function<Result<void>(const channel::ByteSink&)>& receive,
    const DownloadOptions& options = {});

// The kNotFound every door gives for a sandbox that does not exist (a typo, one removed or
// expired): "no sandbox named NAME (`agvisor ls` lists them)", NAME without "agvisor-".
Error NoSuchSandbox(std::string_view container_name);

// ---- Warm pools (pool.h) ----

struct PoolOptions {
  // The members' specification. name, lifetime and idle_ttl must be unset (a pool's members are
  // anonymous; lifetime and idle_ttl come with each Acquire).
  SandboxSpec spec;
  int size = 2;                       // members kept ready, 1..64
  std::chrono::seconds max_age{300};  // replace members older than this, 10 s .. 24 h
  int fill_parallelism = 2;           // members this pool starts at once, 1..size
};

struct AcquireOptions {
  std::optional<std::int64_t> lifetime;  // seconds, counted from Acquire; unset: none
  std::optional<std::int64_t> idle_ttl;  // seconds without activity; unset: none
  // When no member is ready: how long to wait for one being started before a cold create.
  std::chrono::milliseconds wait{0};
  // false: no cold create; an empty pool is kResourceExhausted after `wait`.
  bool cold_create = true;
};

struct PoolStats {
  int ready = 0;               // members ready to be handed out
  int starting = 0;            // members being started
  std::uint64_t acquired = 0;  // handed out from the pool
  std::uint64_t cold = 0;      // Acquire calls served by a cold create (pool empty)
  std::uint64_t started = 0;   // members started
  std::uint64_t start_failures = 0;
  std::uint64_t recycled = 0;   // members replaced for age
  std::uint64_t discarded = 0;  // members found dead (channel closed, deadlines refused)
  std::string last_error;       // the last start failure, "" if none
};

// A named warm pool as its owner describes it (client::Place::CreatePool and ListPools, agvisord's
// /v1/pools): its name, the random id its members carry in the agvisor.pool label, what it was
// made with and its counters at the time.
struct PoolInfo {
  std::string name;
  std::string id;
  PoolOptions options;
  PoolStats stats;
};

// One sample of an instance's resource use (Runtime::Stats: `agvisor top`, agvisord's metrics
// route), the same whatever runtime took it.
using SandboxStats = ResourceSample;

}  // namespace agvisor
