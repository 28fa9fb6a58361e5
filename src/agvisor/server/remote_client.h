// A client of agvisord's API (docs/openapi.yaml, docs/agvisord.md): typed calls for the CLI's
// --server mode. Plain requests and the archive streams go through http::Client; the exec,
// attach and port streams are WebSockets (Boost.Beast, confined to remote_client.cc).
//
// Used by src/agvisor/cli (its agvisord backend). Thread-safe: one RemoteClient may serve many
// threads; a RemoteStream allows one reader and one writer at once (plus Close from anywhere).
//
// Errors the daemon sends ({"error": {"code", "message"}}) come back with their code
// (codec.h ErrorCodeFromSlug), so sandbox_died stays kSandboxDied. A daemon that cannot be
// reached is kUnavailable naming the address and how to start agvisord; a refused token is
// kPermissionDenied naming where the token came from.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/channel/channel.h"
#include "agvisor/docker/types.h"
#include "agvisor/http/client.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/server/codec.h"

namespace agvisor::server {

// Parses where agvisord listens: "unix:/path" (also "unix:///path") or "http://127.0.0.1:PORT"
// (also "tcp://HOST:PORT"). Errors: kInvalidArgument naming the spec and the accepted forms.
Result<http::Endpoint> ParseServerAddress(std::string_view spec);
// The address as the user would write it ("unix:/run/agvisord.sock", "http://127.0.0.1:8080").
std::string ServerAddressString(const http::Endpoint& endpoint);

// The bearer token and where it came from (named in errors: a file path or an environment
// variable).
struct RemoteToken {
  std::string token;
  std::string source;
};
// Reads a token file (surrounding whitespace dropped); never creates one. Errors: kNotFound (no
// such file: says agvisord writes it at start), kInvalidArgument (empty), errno codes.
Result<RemoteToken> ReadTokenFile(const std::string& path);

// One exec, attach or port WebSocket.
class RemoteStream {
 public:
  virtual ~RemoteStream() = default;
  // ---- exec and attach ----
  // Bytes for the command's stdin.
  virtual Result<void> WriteStdin(std::string_view bytes) = 0;
  virtual Result<void> CloseStdin() = 0;
  virtual Result<void> Resize(std::uint16_t rows, std::uint16_t cols) = 0;
  virtual Result<void> Signal(int signal) = 0;
  // Delivers output to `callbacks` until the command exits. Errors: those the daemon reports
  // (kSandboxDied, kNotFound, ...), kUnavailable (the stream broke before the exit).
  virtual Result<ProcessExit> Wait(const channel::ExecCallbacks& callbacks) = 0;
  // ---- ports (raw bytes) ----
  // Up to buf.size() bytes from the sandbox's port; 0 = it closed. Errors: kUnavailable.
  virtual Result<std::size_t> Read(std::span<char> buf) = 0;
  virtual Result<void> Write(std::string_view bytes) = 0;
  // Half-close: the sandbox side reads end of file; reading goes on.
  virtual Result<void> CloseWrite() = 0;
  // Ends the stream (an exec's command is killed; an attach only detaches). Idempotent.
  virtual void Close() = 0;
};

class RemoteClient {
 public:
  // Checks that something listens at `endpoint` (no request is sent). Errors: kUnavailable
  // ("cannot reach agvisord at ...: is it running? start it with ..."), kInvalidArgument.
  static Result<std::unique_ptr<RemoteClient>> Connect(const http::Endpoint& endpoint,
                                                       RemoteToken token);
  ~RemoteClient();

  const http::Endpoint& endpoint() const { return endpoint_; }

  // POST /v1/sandboxes.
  Result<SandboxView> CreateSandbox(const SandboxSpec& spec);
  // GET /v1/sandboxes.
  Result<std::vector<SandboxView>> ListSandboxes();
  // DELETE /v1/sandboxes/{id}?erase_data=0|1 (the container goes; the volume with `erase_data`).
  Result<void> RemoveSandbox(std::string_view id, bool erase_data);
  // POST .../processes; GET .../processes; POST .../processes/{pid}/signal.
  Result<std::uint32_t> StartProcess(std::string_view id, const std::vector<std::string>& argv,
                                     const BackgroundOptions& options);
  Result<std::vector<ProcessInfo>> ListProcesses(std::string_view id);
  Result<void> SignalProcess(std::string_view id, std::uint32_t pid, int signal);
  // GET .../metrics.
  Result<docker::ContainerStats> Metrics(std::string_view id);
  // GET .../egress: the policy and recent decisions; PUT replaces the policy.
  Result<EgressView> GetEgress(std::string_view id);
  Result<EgressView> SetEgress(std::string_view id, const egress::EgressRules& rules);
  // PUT .../archive?path=DIR with the tar that `source` supplies (chunked, streamed).
  Result<void> PutArchive(std::string_view id, std::string_view dir,
                          const channel::ByteSource& source);
  // GET .../archive?path=PATH: the tar to `sink` as it arrives. A body broken off by the daemon
  // is kUnavailable, never a silent short archive.
  Result<void> GetArchive(std::string_view id, std::string_view path,
                          const channel::ByteSink& sink);

  // GET .../exec/ws: starts argv (options.timeout 0 = none) and returns once it runs.
  Result<std::unique_ptr<RemoteStream>> Exec(std::string_view id,
                                             const std::vector<std::string>& argv,
                                             const ProcessOptions& options);
  // GET .../processes/{pid}/ws: attached once this returns (Wait replays the kept output).
  Result<std::unique_ptr<RemoteStream>> Attach(std::string_view id, std::uint32_t pid);
  // GET .../ports/{port}/ws.
  Result<std::unique_ptr<RemoteStream>> OpenPort(std::string_view id, std::uint16_t port);

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
  Result<std::unique_ptr<RemoteStream>> OpenWebSocket(const std::string& target,
                                                      std::optional<std::string> first_message,
                                                      bool wait_started);

  http::Endpoint endpoint_;
  RemoteToken token_;
  std::shared_ptr<http::Client> http_;
};

}  // namespace agvisor::server
