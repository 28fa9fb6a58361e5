// The agvisord API's handlers: each route of router.h served through one client::Place (the
// in-process place daemon.cc makes, shared with the desktop gateway and the MCP route) and the
// SandboxHandles of one client::HandleCache. Requests arrive decoded (server.h); bodies are
// parsed by codec.h. The daemon executes nothing itself: every route is a Place or handle call.
//
// Used by daemon.cc, which hands Handle / HandleWebSocket to the Server. Thread-safe: handlers
// run on many connection threads at once; sandbox handles are shared between them.
//
// Sandboxes are found by label, not remembered: a handle is opened (Place::Open) the first
// time an id is used, so sandboxes created before a daemon restart, or by the CLI, are served
// like the daemon's own. Recover() opens the running ones at start.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "agvisor/api/codec.h"
#include "agvisor/api/router.h"
#include "agvisor/client/handle_cache.h"
#include "agvisor/desktop/token.h"
#include "agvisor/server/server.h"

namespace agvisor::server {

class EgressHost;

struct ServiceOptions {
  // Where the sandboxes live (client::InProcess of docker_host) and their shared handles.
  std::shared_ptr<client::HandleCache> sandboxes;
  // The place's host: desktop tokens name it, warm pools are made there. "" = $DOCKER_HOST or
  // the local socket.
  std::string docker_host;
  // The desktop gateway's key (--desktop-key-file): POST .../desktop/token mints with it. Unset:
  // that route answers 501.
  std::optional<desktop::TokenKey> desktop_key;
  std::string version = "0.1.0";
  // POST exec (collected output): bytes kept per stream; the rest is read from the command and
  // dropped, counted in the answer's stdout_dropped / stderr_dropped (--max-exec-output).
  std::size_t max_exec_output = kDefaultMaxExecOutput;
  static constexpr std::size_t kDefaultMaxExecOutput = 1u << 20;
  // The egress enforcers (GET/PUT .../egress); null when agvisord enforces none (--no-egress,
  // or a Docker host that is not this machine): those routes then answer 501.
  EgressHost* egress = nullptr;
};

class Service {
 public:
  explicit Service(ServiceOptions options);

  // Lists the host's sandboxes by label and opens a handle on each running one. Returns how
  // many it serves. Errors: kUnavailable (no Docker).
  Result<std::size_t> Recover();

  // Every built-in non-WebSocket route. Never throws; errors become {"error": ...} bodies.
  HttpResponse Handle(const HttpRequest& req, const api::RouteMatch& match);
  // Every built-in WebSocket route (exec, process attach, port forward).
  void HandleWebSocket(const HttpRequest& req, const api::RouteMatch& match, WebSocket& ws);
  // Every built-in streaming route (the archive routes: a directory as a tar stream each way;
  // GET files: a file's bytes as they come).
  HttpResponse HandleStream(const HttpRequest& req, const api::RouteMatch& match, HttpStream& io);

  // Closes every warm pool (their members not handed out are removed). For shutdown.
  void ClosePools();
  // Ends the paused sandboxes past their lifetime (their frozen agents cannot; Place::List
  // does it) and forgets their handles. The daemon calls it every kPausedSweepInterval.
  void SweepPaused();
  static constexpr std::chrono::seconds kPausedSweepInterval{5};

  // The handle of sandbox `id` (opened on first use). Errors: kInvalidArgument (id), kNotFound,
  // kUnavailable.
  Result<std::shared_ptr<client::SandboxHandle>> Get(const std::string& id);

 private:
  Result<HttpResponse> Dispatch(const HttpRequest& req, const api::RouteMatch& match);
  // A call into a sandbox whose request says `resume=false`: kConflict when it is paused (calls
  // resume it otherwise). Errors: kInvalidArgument (a bad `resume`), Get's.
  Result<void> RefuseIfPausedAndAsked(const api::RouteMatch& match);
  Result<HttpResponse> DispatchStream(const api::RouteMatch& match, HttpStream& io);
  // Keeps a sandbox just created, acquired or forked (its handle, and it is no longer ended) and
  // describes it as POST answers.
  api::SandboxView Adopt(client::Created created);
  // Drops sandbox `id`'s handle and remembers it ended for `reason` (`name`: its name, if any).
  void Forget(const std::string& id, EndReason reason, std::optional<std::string> name = {});
  // POST .../desktop/input: one action of a desktop sandbox's user (client/desktop.h).
  Result<void> DesktopInput(client::SandboxHandle& sb, std::string_view body);
  void ExecWs(client::SandboxHandle& sb, WebSocket& ws);
  void AttachWs(client::SandboxHandle& sb, std::uint32_t pid, WebSocket& ws);
  void PortWs(client::SandboxHandle& sb, std::uint16_t port, WebSocket& ws);
  void WatchWs(client::SandboxHandle& sb, const std::string& path, bool recursive, WebSocket& ws);
  // The egress routes' sandbox: its container name; kUnsupported when this agvisord enforces
  // no egress policies.
  Result<std::string> EgressContainer(const std::string& id) const;
  // The log routes' `last` (api::kDefaultEgressLogRecords; 1..kMaxEgressLogRecords).
  static Result<std::size_t> EgressLogLast(const api::RouteMatch& m);
  // GET .../egress/log/ws: "started", the last `last` records, then each new one as it is
  // recorded, until the client closes or the sandbox's network is gone ("end").
  void EgressLogWs(const std::string& container, std::size_t last, WebSocket& ws);

  client::Place& place() { return options_.sandboxes->place(); }

  ServiceOptions options_;
  std::mutex mu_;
  // Sandboxes this daemon stopped or deleted, newest last (bounded): GET still answers with
  // their end reason after the container is gone.
  std::map<std::string, SandboxInfo> ended_;
  std::deque<std::string> ended_order_;
};

}  // namespace agvisor::server
