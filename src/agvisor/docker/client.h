// Docker Engine API client: typed calls for containers, execs (with their hijacked stdio
// streams), volumes and images, over agvisor::http (unix socket, tcp, or ssh-forwarded socket).
//
// Used by sandbox/ (the docker backend), images/ (offline image import), doctor and tests. It is
// a general Engine API client and knows nothing about sandboxes. The wire work (JSON, stream
// framing, version negotiation) is in the pure codec.h / demux.h / api_version.h.
//
// Connect negotiates the API version once (GET /version: min(daemon's, ours), ours being
// 1.41..1.45); every request then goes to /v{negotiated}/.... Every string that reaches a URL is
// validated (names/ids: Docker's name charset; images: a reference charset) or percent-encoded
// (query values), so no argument can inject a path or a parameter.
//
// Errors (every message names the operation and the object: "docker inspect container x: ..."):
//   kInvalidArgument   a malformed argument (caught before any request), or the daemon's 400
//   kNotFound          404: no such container / exec / volume / image
//   kConflict          409: name in use, container not running, removal in progress, ...
//   kUnavailable       the daemon cannot be reached (says which endpoint and how to fix it), 503
//   kPermissionDenied  the socket's permissions, 401/403
//   kUnsupported       the daemon's API version lacks a feature (names both versions)
//   kTimeout           a request passed ClientOptions::request_timeout
//   kInternal          the daemon's 500s and answers we cannot decode
// Each error from the daemon has Error::http_status() set.
//
// Thread safety: a Client is immutable after Connect and may be used from many threads at once
// (share it with std::shared_ptr). An ExecStream may be written from one thread while it is read
// from another; otherwise it is not shared.
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
#include "agvisor/docker/api_version.h"
#include "agvisor/docker/demux.h"
#include "agvisor/docker/types.h"
#include "agvisor/http/client.h"

namespace agvisor::docker {

// One piece of an exec's output: which stream, and its bytes (a TTY exec's output is all kStdout).
struct StreamPiece {
  StreamKind stream = StreamKind::kStdout;
  std::string bytes;
};

// The stdio of a started exec, or of a container's main process (AttachContainer): Docker's
// hijacked connection. Destroying it closes the connection; the process inside goes on until its
// stdin/stdout notice.
class ExecStream {
 public:
  // `what` names the stream in error messages; "" = "exec <exec_id>".
  ExecStream(std::unique_ptr<http::RawStream> raw, bool tty, std::string exec_id,
             std::string what = "");
  ~ExecStream();
  ExecStream(const ExecStream&) = delete;
  ExecStream& operator=(const ExecStream&) = delete;

  const std::string& exec_id() const { return exec_id_; }
  bool tty() const { return tty_; }

  // Sends bytes to the process's stdin (needs ExecConfig::attach_stdin).
  // Errors: kUnavailable (the connection is gone, e.g. the process exited).
  Result<void> Write(std::string_view data);
  // Half-closes: the process reads EOF on stdin; output keeps coming.
  Result<void> CloseStdin();
  // The next piece of output, or nullopt at the end (the process closed its output / exited).
  // Blocks until something arrives. Errors: kUnavailable (connection lost), kInternal
  // (malformed framing, or the stream ended inside a frame).
  Result<std::optional<StreamPiece>> Read() {
    return ReadUntil(std::chrono::steady_clock::time_point::max());
  }
  // As Read, but gives up at `deadline` with kTimeout when nothing arrived; the stream stays
  // usable (call again).
  Result<std::optional<StreamPiece>> ReadUntil(std::chrono::steady_clock::time_point deadline);
  // The stdout bytes only, demultiplexed in place into `buf` (no copy beyond the socket read):
  // up to buf.size() bytes, 0 at the end of the stream. Stderr pieces go to `on_stderr` (may be
  // empty: dropped). For byte-stream protocols over a process's stdout (the agent channel).
  // Do not mix with Read() on one stream. Errors: as Read.
  Result<std::size_t> ReadStdout(std::span<char> buf,
                                 const std::function<void(std::string_view)>& on_stderr);
  // Closes both directions; a Read blocked in another thread returns. Idempotent.
  void Close();

 private:
  // The result of one read of the raw stream, errors in context; at its end (0) marks eof_ and
  // checks that the demuxer ended on a frame boundary.
  Result<std::size_t> AfterRead(Result<std::size_t> n);

  std::unique_ptr<http::RawStream> raw_;
  bool tty_;
  std::string exec_id_;
  std::string what_;
  Demuxer demux_;
  std::vector<StreamPiece> pending_;  // decoded, not yet handed out (reader thread only)
  std::size_t pending_pos_ = 0;
  bool eof_ = false;
};

// What RunExec returns: the outcome is a value (a non-zero exit code is not an error).
struct ExecOutput {
  int exit_code = -1;
  std::string out;
  std::string err;  // empty for TTY execs (merged into out)
};

class Client {
 public:
  // Connects to `host` and negotiates the API version. `host`: "" = $DOCKER_HOST, else the
  // local socket; "unix:///path", "tcp://host:port", "ssh://[user@]host[:port]".
  // Errors: kUnavailable (no daemon there: says how to start one or set DOCKER_HOST),
  // kPermissionDenied (socket permissions), kUnsupported (API < 1.41), kInvalidArgument (host).
  static Result<std::shared_ptr<Client>> Connect(std::string_view host = "",
                                                 http::ClientOptions options = {});
  // As Connect, over an existing HTTP client (tests, custom transports).
  static Result<std::shared_ptr<Client>> ConnectWith(std::shared_ptr<http::Client> http);

  ApiVersion api_version() const { return api_version_; }
  const http::Endpoint& endpoint() const;
  // The /version answer seen at Connect.
  const VersionInfo& daemon_version() const { return version_; }

  // ---- System ----
  Result<void> Ping();            // GET /_ping
  Result<VersionInfo> Version();  // GET /version (fresh)
  Result<SystemInfo> Info();      // GET /info

  // ---- Containers ----
  // `name` "" = Docker picks one. Returns the new container's id.
  // Errors: kConflict (name in use), kNotFound (no such image), kUnsupported (a field the API
  // version lacks), kInvalidArgument.
  Result<std::string> CreateContainer(const ContainerConfig& config, std::string_view name);
  // Already running is a success (Docker's 304).
  Result<void> StartContainer(std::string_view container);
  Result<ContainerInfo> InspectContainer(std::string_view container);
  // The actions ("create", "start", "oom", "die", ...) Docker logged for `container` between the
  // two times (unix seconds with fractions), oldest first. Docker keeps only its last 256 events:
  // ask soon after the fact.
  Result<std::vector<std::string>> ContainerEventActions(std::string_view container, double since,
                                                         double until);
  // One stats sample (GET /containers/{id}/stats?stream=false): the daemon takes two readings
  // about a second apart, so this call takes ~1 s. Errors: kNotFound, kConflict.
  Result<ContainerStats> GetContainerStats(std::string_view container);
  // Blocks until `condition` ("not-running", "next-exit", "removed") holds and returns the exit
  // code. No request timeout applies unless `timeout` > 0 (then kTimeout).
  Result<int> WaitContainer(std::string_view container, std::string_view condition = "not-running",
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Errors: kConflict (not running).
  Result<void> KillContainer(std::string_view container, std::string_view signal = "KILL");
  // POST /containers/{id}/pause and /unpause (the cgroup freezer; under runsc, runsc's pause).
  // Errors: kNotFound, kConflict (not running; pausing a paused one or unpausing a running one).
  Result<void> PauseContainer(std::string_view container);
  Result<void> UnpauseContainer(std::string_view container);
  // SIGTERM, then SIGKILL after `timeout_s`. Already stopped is a success (Docker's 304).
  Result<void> StopContainer(std::string_view container, int timeout_s = 10);
  Result<void> RemoveContainer(std::string_view container, bool force = false,
                               bool remove_volumes = false);
  // `label_filters`: "key" or "key=value", all must match. `all`: include stopped ones.
  Result<std::vector<ContainerSummary>> ListContainers(
      bool all = true, const std::vector<std::string>& label_filters = {});
  Result<void> RenameContainer(std::string_view container, std::string_view new_name);
  // Extracts a tar archive into the container at `path` (a directory that exists). Under gVisor
  // do this before start (files put in later may be hidden by its overlay).
  Result<void> PutArchive(std::string_view container, std::string_view path, std::string_view tar);
  // The same, with the archive streamed (chunked) from `source`.
  Result<void> PutArchiveStream(std::string_view container, std::string_view path,
                                const http::BodySource& source);
  // Attaches to the main process's stdio (POST /containers/{id}/attach?stream=1 with stdin,
  // stdout, stderr as asked; hijacked). Attach before StartContainer to see every byte the
  // process writes (the container needs OpenStdin for stdin, and AttachStd* set). `tty` must
  // match the container's Tty (a non-TTY stream is multiplexed). Errors: kNotFound (no such
  // container), kConflict, kUnavailable.
  Result<std::unique_ptr<ExecStream>> AttachContainer(std::string_view container, bool stdin,
                                                      bool stdout, bool stderr, bool tty = false);
  // The container's stdout and stderr so far, interleaved in order (stdout only if
  // `include_stderr` is false). For short logs (probes, diagnostics): the whole log is buffered.
  Result<std::string> ContainerLogs(std::string_view container, bool include_stdout = true,
                                    bool include_stderr = true);

  // ---- Exec ----
  // Returns the exec id. Errors: kNotFound (no such container), kConflict (not running).
  Result<std::string> CreateExec(std::string_view container, const ExecConfig& config);
  // Starts the exec and hands over its stdio. `tty` must match ExecConfig::tty.
  Result<std::unique_ptr<ExecStream>> StartExec(std::string_view exec_id, bool tty);
  Result<ExecInfo> InspectExec(std::string_view exec_id);
  Result<void> ResizeExec(std::string_view exec_id, int rows, int cols);
  // Creates, starts and collects an exec: writes `input` (when set) from a second thread while
  // reading, so large input and output cannot deadlock; returns once the process exited.
  Result<ExecOutput> RunExec(std::string_view container, ExecConfig config,
                             std::optional<std::string> input = std::nullopt);
  // RunExec with the output handed to `on_output` piece by piece as it arrives, in bounded
  // memory; returns the exit code. An error from `on_output` closes the exec's streams and is
  // returned. With `config.attach_stdin` and no `input`, stdin is held open (nothing written)
  // until the streams close: how the process can tell that its reader went away.
  using PieceSink = std::function<Result<void>(StreamPiece&)>;
  // With `keep_stdin_open`, stdin stays open after `input` (until the streams close), so the
  // process can read its input first and then tell when its reader went away.
  Result<int> StreamExec(std::string_view container, ExecConfig config,
                         std::optional<std::string> input, const PieceSink& on_output,
                         bool keep_stdin_open = false);

  // ---- Networks (bridge) ----
  // Returns the new network's id. Errors: kConflict (the name exists), kInvalidArgument.
  Result<std::string> CreateNetwork(const NetworkConfig& config);
  Result<NetworkInfo> InspectNetwork(std::string_view network);
  // Networks carrying every label filter ("key" or "key=value").
  Result<std::vector<NetworkInfo>> ListNetworks(const std::vector<std::string>& label_filters);
  // kNotFound when there is no such network; kConflict while a container is still attached.
  Result<void> RemoveNetwork(std::string_view network);

  // ---- Volumes ----
  Result<VolumeInfo> CreateVolume(std::string_view name,
                                  const std::map<std::string, std::string>& labels = {});
  Result<VolumeInfo> InspectVolume(std::string_view name);
  // Errors: kConflict (in use by a container), kNotFound.
  Result<void> RemoveVolume(std::string_view name, bool force = false);
  Result<std::vector<VolumeInfo>> ListVolumes(const std::vector<std::string>& label_filters = {});
  // Every volume with the bytes it uses (GET /system/df: the daemon walks each volume, which
  // takes a while on big ones).
  Result<std::vector<VolumeInfo>> VolumeSizes();

  // ---- Images ----
  using ProgressCallback = std::function<void(std::string_view status_line)>;
  Result<ImageInfo> InspectImage(std::string_view image);
  // Imports a root file system tar (streamed from `tar`) as repo:tag; returns the image id.
  // `progress` gets the daemon's status lines (after the upload: the daemon answers at the end).
  // `changes`: Dockerfile lines applied to the image's configuration (ENV, WORKDIR, USER, LABEL,
  // CMD, ...), one `changes` query value each. An error of `tar` drops the connection mid-body
  // (the daemon sees a broken upload and makes no image) and is returned.
  Result<std::string> ImportImage(std::string_view repo, std::string_view tag,
                                  const http::BodySource& tar, const ProgressCallback& progress,
                                  const std::vector<std::string>& changes = {});
  // Loads the image archive (`docker save`'s format) that `archive` streams: POST /images/load.
  // `object` names it in errors. An error of `archive` drops the connection mid-body and is
  // returned; an error the daemon reports in its answer's stream is returned as kInvalidArgument
  // (the archive was refused) or kUnavailable.
  Result<void> LoadImage(const http::BodySource& archive, std::string_view object);
  // Pulls `ref` ("name[:tag]" or "name@digest"; no tag = latest) from its registry, streaming
  // progress. Errors: kUnavailable (registry unreachable), kNotFound (no such image/tag), ...
  Result<void> PullImage(std::string_view ref, const ProgressCallback& progress);
  Result<void> RemoveImage(std::string_view image, bool force = false);
  // Images carrying every label filter ("key" or "key=value"); tagged and untagged.
  Result<std::vector<ImageSummary>> ListImages(const std::vector<std::string>& label_filters);
  // Makes image repo:tag from `container`'s file system (running or never started, not paused)
  // with its configuration plus `changes` (Dockerfile instructions such as "LABEL k=v").
  // Returns the image id.
  Result<std::string> CommitContainer(std::string_view container, std::string_view repo,
                                      std::string_view tag,
                                      const std::vector<std::string>& changes = {});

  Client(std::shared_ptr<http::Client> http, ApiVersion version, VersionInfo info);

 private:
  // Sends `request` (target relative to /v{version}); a status >= 400 (or one not in `ok`) is
  // decoded into the daemon's error for `operation object`.
  Result<http::Response> Call(http::Request request, std::string_view operation,
                              std::string_view object, std::initializer_list<int> ok = {});
  // GETs `target` (as Call) and decodes the answer's body with `decode`.
  template <typename T>
  Result<T> Get(std::string target, std::string_view operation, std::string_view object,
                Result<T> (*decode)(std::string_view body));
  // POSTs the JSON `body` to `target` (as Call) and decodes the answer's body with `decode`.
  template <typename T>
  Result<T> PostJson(std::string target, std::string body, std::string_view operation,
                     std::string_view object, Result<T> (*decode)(std::string_view body));
  // Sends `method target` without a body (as Call); the answer's body is not needed.
  Result<void> Send(std::string method, std::string target, std::string_view operation,
                    std::string_view object, std::initializer_list<int> ok = {});
  // Sends the tar that `source` makes as the body of `method target` (target as for Call), with
  // the timeout of a long operation; errors as Call.
  Result<http::Response> SendTar(std::string method, std::string target,
                                 const http::BodySource& source, std::string_view operation,
                                 std::string_view object);
  std::string Path(std::string_view path) const;

  std::shared_ptr<http::Client> http_;
  ApiVersion api_version_;
  VersionInfo version_;
};

}  // namespace agvisor::docker
