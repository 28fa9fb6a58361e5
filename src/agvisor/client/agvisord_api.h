// A client of agvisord's API (docs/openapi.yaml, docs/agvisord.md): one typed call per route.
// Plain requests and the archive streams go through http::Client; the exec, attach and port
// streams are WebSockets (Boost.Beast, confined to agvisord_api.cc), handed out as the Command
// and ByteStream of place.h.
//
// Used by the agvisord Place (agvisord.cc). Thread-safe: one RemoteClient may serve many
// threads.
//
// Errors the daemon sends ({"error": {"code", "message"}}) come back with their code
// (codec.h ErrorCodeFromSlug), so sandbox_died stays kSandboxDied. A daemon that cannot be
// reached is kUnavailable naming the address and how to start agvisord; a refused token is
// kPermissionDenied naming where the token came from.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/api/codec.h"
#include "agvisor/base/error.h"
#include "agvisor/channel/channel.h"
#include "agvisor/client/place.h"
#include "agvisor/http/client.h"
#include "agvisor/sandbox/types.h"

namespace agvisor::client {

// Parses where agvisord listens: "unix:/path" (also "unix:///path"), "http://127.0.0.1:PORT"
// (also "tcp://HOST:PORT"), or "ssh://[USER@]HOST[:PORT][/path/agvisord.sock]": agvisord's unix
// socket on another machine, reached through ssh (default path api::kRootSocketPath). Errors:
// kInvalidArgument naming the spec and the accepted forms.
Result<http::Endpoint> ParseServerAddress(std::string_view spec);
// The address as the user would write it ("unix:/run/agvisord.sock", "http://127.0.0.1:8080",
// "ssh://root@host").
std::string ServerAddressString(const http::Endpoint& endpoint);

// The bearer token and where it came from (named in errors: a file path or an environment
// variable).
struct RemoteToken {
  std::string token;
  std::string source;
};
// Whether the process at the other end of the connected unix socket `fd` (SO_PEERCRED: the
// server's uid when it accepted, which a later swap of the socket's path cannot change) may be
// sent the token: root's or this user's (effective uid). A socket path that another user made
// (under /tmp, in a shared directory) would otherwise collect the token. `address` names the
// server in the error. Errors: kPermissionDenied (names the uid, and what to check), errno
// codes of getsockopt. RemoteClient checks every unix connection it opens.
Result<void> CheckAgvisordPeer(int fd, std::string_view address);

// Reads a token file (surrounding whitespace dropped); never creates one. Errors: kNotFound (no
// such file: says agvisord writes it at start), kInvalidArgument (empty), errno codes.
Result<RemoteToken> ReadTokenFile(const std::string& path);

class WsConnection;  // a WebSocket to agvisord (agvisord_api.cc)

class RemoteClient {
 public:
  // Checks that something listens at `endpoint` (no request is sent; for ssh, the tunnel comes
  // up and the unauthenticated health route answers through it). Errors: kUnavailable ("cannot
  // reach agvisord at ...: is it running? start it with ..."), kInvalidArgument.
  static Result<std::unique_ptr<RemoteClient>> Connect(const http::Endpoint& endpoint,
                                                       RemoteToken token);
  ~RemoteClient();

  const http::Endpoint& endpoint() const { return endpoint_; }

  // POST /v1/sandboxes.
  Result<api::SandboxView> CreateSandbox(const SandboxSpec& spec);
  // POST /v1/sandboxes {"pool": name, ...}: a member of the daemon's pool `pool`.
  Result<api::SandboxView> AcquireFromPool(std::string_view pool, const AcquireOptions& options);
  // POST /v1/pools, GET /v1/pools, DELETE /v1/pools/{name}. Errors: the daemon's (kConflict,
  // kNotFound, kInvalidArgument, kResourceExhausted).
  Result<api::PoolView> CreatePool(std::string_view name, const PoolOptions& options);
  Result<std::vector<api::PoolView>> ListPools();
  Result<void> DeletePool(std::string_view name);
  // GET /v1/sandboxes.
  Result<std::vector<api::SandboxView>> ListSandboxes();
  // GET /v1/sandboxes/{id}. Errors: kNotFound.
  Result<api::SandboxView> GetSandbox(std::string_view id);
  // The file routes: GET/PUT/DELETE .../files, GET .../files/stat, .../files/list, POST
  // .../files/mkdir (modes sent as octal permission bits). ReadFile holds the whole file, or its
  // first `length` bytes at most when given (the route's `length`; more is never kept).
  Result<std::string> ReadFile(std::string_view id, std::string_view path,
                               std::optional<std::uint64_t> length = std::nullopt);
  Result<void> WriteFile(std::string_view id, std::string_view path, std::string_view data,
                         std::uint32_t mode);
  Result<FileEntry> Stat(std::string_view id, std::string_view path);
  Result<std::vector<FileEntry>> ListDir(std::string_view id, std::string_view path);
  Result<void> Mkdir(std::string_view id, std::string_view path, bool parents, std::uint32_t mode);
  Result<void> RemovePath(std::string_view id, std::string_view path, bool recursive);
  // DELETE /v1/sandboxes/{id}?erase_data=0|1 (the container goes; the volume with `erase_data`).
  Result<void> RemoveSandbox(std::string_view id, bool erase_data);
  // POST /v1/sandboxes/{id}/pause (`pause`) or /resume.
  Result<void> PauseSandbox(std::string_view id, bool pause);
  // POST /v1/sandboxes/{id}/update: the limits the sandbox runs under afterwards.
  Result<LiveLimits> UpdateSandbox(std::string_view id, const LimitsUpdate& update);
  // POST /v1/sandboxes/{id}/snapshot and .../fork (the daemon does the work; long timeouts).
  Result<SnapshotResult> SnapshotSandbox(std::string_view id, const SnapshotOptions& options);
  Result<api::ForkView> ForkSandbox(std::string_view id, const ForkOptions& options);
  // false: every request from now on carries `resume=false` (calls on a paused sandbox fail
  // with kConflict instead of resuming it).
  void set_auto_resume(bool yes) { auto_resume_ = yes; }
  // The same for sandbox `id` only (whatever the client-wide setting, a false here holds).
  void set_auto_resume(std::string_view id, bool yes);
  // POST .../processes; GET .../processes; POST .../processes/{pid}/signal.
  Result<std::uint32_t> StartProcess(std::string_view id, const std::vector<std::string>& argv,
                                     const BackgroundOptions& options);
  Result<std::vector<ProcessInfo>> ListProcesses(std::string_view id);
  Result<void> SignalProcess(std::string_view id, std::uint32_t pid, int signal);
  // GET .../metrics.
  Result<SandboxStats> Metrics(std::string_view id);
  // GET .../egress: the policy and recent decisions; PUT replaces the policy.
  Result<api::EgressView> GetEgress(std::string_view id);
  Result<api::EgressView> SetEgress(std::string_view id, const egress::EgressRules& rules);
  // GET .../egress/log?last=N; GET .../egress/log/ws?last=N (AgvisordPlace::FollowEgressLog).
  Result<std::vector<egress::Decision>> EgressLog(std::string_view id, std::size_t last);
  Result<void> FollowEgressLog(
      std::string_view id, std::size_t last,
      const std::function<bool(const egress::Decision&, const std::string&)>& on_record);
  // PUT .../archive?path=DIR with the tar that `source` supplies (chunked, streamed).
  Result<void> PutArchive(std::string_view id, std::string_view dir,
                          const channel::ByteSource& source);
  // GET .../archive?path=PATH: the tar to `sink` as it arrives. A body broken off by the daemon
  // is kUnavailable, never a silent short archive.
  Result<void> GetArchive(std::string_view id, std::string_view path,
                          const channel::ByteSink& sink);

  // GET .../exec/ws: starts argv (options.timeout 0 = none) and returns once it runs. Close()
  // kills it.
  Result<std::unique_ptr<Command>> Exec(std::string_view id, const std::vector<std::string>& argv,
                                        const ProcessOptions& options);
  // GET .../processes/{pid}/ws: attached once this returns (Wait replays the kept output).
  // Close() only detaches.
  Result<std::unique_ptr<Command>> Attach(std::string_view id, std::uint32_t pid);
  // GET .../ports/{port}/ws.
  Result<std::unique_ptr<ByteStream>> OpenPort(std::string_view id, std::uint16_t port);
  // GET .../watch/ws?path=PATH&recursive=B: watching once this returns.
  Result<std::unique_ptr<DirWatch>> Watch(std::string_view id, std::string_view path,
                                          bool recursive);

 private:
  RemoteClient(http::Endpoint endpoint, RemoteToken token, std::shared_ptr<http::Client> http);
  Result<http::Response> Call(http::Request request);
  // An error answer (status >= 400) as an Error.
  Error ErrorOf(const http::Response& response) const;
  // The transport failed: the message names the daemon, not Docker.
  Error Unreachable(const Error& e) const;
  // An archive transfer whose connection broke: kSandboxDied (with why) when sandbox `id` ended
  // meanwhile (the daemon can only drop a stream it has begun), else Unreachable(e).
  Error TransferCut(std::string_view id, const Error& e);
  // A long transfer's request (archives, file reads), sent past Call to stream: the same target
  // (WithResume) and token as Call's, and a day's timeout.
  http::Request TransferRequest(std::string method, std::string target) const;
  // How a streamed transfer on sandbox `id` ended: TransferCut when its connection broke,
  // ErrorOf for an error answer.
  Result<void> TransferOutcome(std::string_view id, const Result<http::Response>& r);
  Result<std::unique_ptr<WsConnection>> OpenWebSocket(const std::string& target,
                                                      std::optional<std::string> first_message,
                                                      bool wait_started,
                                                      std::uint32_t* started_pid);

  http::Endpoint endpoint_;  // as given: named in messages
  RemoteToken token_;
  std::shared_ptr<http::Client> http_;  // for ssh, it owns the tunnel
  // Where WebSockets connect: endpoint_, or for ssh the tunnel's local socket.
  http::Endpoint socket_endpoint_;
  std::atomic<bool> auto_resume_{true};
  mutable std::mutex held_mu_;
  std::vector<std::string> held_;  // SandboxPath of each sandbox whose auto-resume is off
  // `target` with `resume=false` added when auto_resume_ is off, or off for its sandbox.
  std::string WithResume(std::string target) const;
};

}  // namespace agvisor::client
