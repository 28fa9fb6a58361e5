// The agvisord API's handlers: each route of router.h served with the agvisor library (Sandbox)
// on one Docker host. Requests arrive decoded (server.h); bodies are parsed by codec.h.
//
// Used by daemon.cc, which hands Handle / HandleWebSocket to the Server. Thread-safe: handlers
// run on many connection threads at once; sandbox handles are shared between them.
//
// Sandboxes are found by label, not remembered: a handle is opened (Sandbox::Open) the first
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

#include "agvisor/api/router.h"
#include "agvisor/desktop/token.h"
#include "agvisor/sandbox/pool.h"
#include "agvisor/sandbox/runtimes.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/server/server.h"

namespace agvisor::server {

class EgressHost;

struct ServiceOptions {
  std::string docker_host;  // "" = $DOCKER_HOST or the local socket
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
  // Ends the paused sandboxes past their lifetime (their frozen agents cannot; Sandbox::List
  // does it) and forgets their handles. The daemon calls it every kPausedSweepInterval.
  void SweepPaused();
  static constexpr std::chrono::seconds kPausedSweepInterval{5};

  // The handle of sandbox `id` (opened on first use). Errors: kInvalidArgument (id), kNotFound,
  // kUnavailable.
  Result<std::shared_ptr<Sandbox>> Get(const std::string& id);

 private:
  Result<HttpResponse> Dispatch(const HttpRequest& req, const api::RouteMatch& match);
  // A call into a sandbox whose request says `resume=false`: kConflict when it is paused (calls
  // resume it otherwise, in Sandbox). Errors: kInvalidArgument (a bad `resume`), Get's.
  Result<void> RefuseIfPausedAndAsked(const api::RouteMatch& match);
  Result<HttpResponse> DispatchStream(const api::RouteMatch& match, HttpStream& io);
  void Forget(const std::string& id, EndReason reason);
  void ExecWs(Sandbox& sb, WebSocket& ws);
  void AttachWs(Sandbox& sb, std::uint32_t pid, WebSocket& ws);
  void PortWs(Sandbox& sb, std::uint16_t port, WebSocket& ws);
  void WatchWs(Sandbox& sb, const std::string& path, bool recursive, WebSocket& ws);

  ServiceOptions options_;
  LazyRuntime runtime_{options_.docker_host};  // the host's runtime, shared by every sandbox
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Sandbox>> handles_;
  // Sandboxes this daemon stopped or deleted, newest last (bounded): GET still answers with
  // their end reason after the container is gone.
  std::map<std::string, SandboxInfo> ended_;
  std::deque<std::string> ended_order_;
  // Warm pools by name. They live as long as the daemon (their members end on their own when
  // it dies: see pool.h).
  std::mutex pools_mu_;
  std::map<std::string, std::shared_ptr<Pool>> pools_;
};

}  // namespace agvisor::server
