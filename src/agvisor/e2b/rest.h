// E2B's REST API (the `Sandbox` class's static calls) over client::Place, under /e2b
// (mount.h): create (v1 and v2), connect and resume, list (list.h), getInfo, getMetrics
// (metrics.h), kill, setTimeout, pause, snapshots (create, list, delete) and fork; what agvisor
// cannot do answers 501 saying why (docs/e2b.md's table). Also the keeper of E2B's record of each
// sandbox (template, metadata, envs, timeout, lifecycle) and of the sandboxes' envd tokens, which
// mount.cc checks envd requests against, the sweep that ends (or pauses) sandboxes at their
// timeout, and the metrics sampler.
//
// Used by e2b/mount.cc only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agvisor/api/router.h"
#include "agvisor/client/handle_cache.h"
#include "agvisor/e2b/mount.h"
#include "agvisor/server/server.h"

namespace boost::json {
class object;
}  // namespace boost::json

namespace agvisor::e2b {

// What E2B knows of a sandbox beyond agvisor's own view.
struct Record {
  std::string template_id;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> envs;
  std::int64_t started_at = 0;  // unix seconds
  std::int64_t end_at = 0;      // unix seconds: the timeout; 0 = none
  bool auto_pause = false;      // lifecycle.onTimeout 'pause'
  bool auto_resume = false;     // lifecycle.autoResume
  // lifecycle.autoResume sent as false: while paused, envd calls and getHost traffic do not wake
  // it (HeldPaused); Sandbox.connect does. Unset lets the server choose: agvisor wakes.
  bool hold_paused = false;
  std::optional<bool> allow_internet_access;
  int cpu_count = 0;
  int memory_mb = 0;
};

// How a sandbox may be reached through envd.
struct Access {
  std::string container;  // "agvisor-<id>"
  std::string token;      // its envd access token
  std::map<std::string, std::string> envs;
};

class Rest {
 public:
  Rest(std::shared_ptr<client::HandleCache> sandboxes, E2bOptions options);
  ~Rest();
  Rest(const Rest&) = delete;
  Rest& operator=(const Rest&) = delete;

  // Serves one REST request (its route's path starts with kApiPrefix); the API key was checked.
  server::HttpResponse Serve(const server::HttpRequest& req, const api::RouteMatch& match,
                             server::HttpStream& stream);
  // The envd access of the sandbox `id` (a paused one wakes at the handle's next call). Errors:
  // kInvalidArgument (not an id), kNotFound (no such sandbox), Place's.
  Result<Access> AccessOf(const std::string& id);
  // Whether E2B's create or connect made a record of `id` (only such sandboxes' ports are
  // served on their E2B host names).
  bool HasRecord(const std::string& id);
  // Whether `id` is paused now and was made with autoResume false, so a call must not wake it
  // (one inspect, for such sandboxes only; false when it cannot tell: the call reports).
  bool HeldPaused(const std::string& id);
  // The ids of the sandboxes whose envd token this daemon has handed out or checked since it
  // started (a signed file URL names no sandbox: mount.cc tries these).
  std::vector<std::string> KnownIds();
  // Starts the sweep that ends (or pauses) sandboxes at their timeout, once a second.
  void StartSweep();
  // Starts the thread that samples the metrics of sandboxes getMetrics asked about (metrics.h).
  void StartMetricsSampler();

  client::HandleCache& sandboxes() { return *sandboxes_; }
  const E2bOptions& options() const { return options_; }

 private:
  // GET /v2/sandboxes (and v1): list.h's query, page and token.
  server::HttpResponse ListSandboxes(const api::RouteMatch& match);
  // GET /sandboxes/{id}/metrics: a sample now, and those of metrics.h's ring in the range.
  server::HttpResponse Metrics(const std::string& id, const api::RouteMatch& match);
  struct State;
  // Snapshots and forks (rest.cc): createSnapshot, listSnapshots, deleteSnapshot, fork.
  server::HttpResponse ServeSnapshots(const std::string& method, const std::string& path,
                                      const std::string& id, const api::RouteMatch& match,
                                      const boost::json::object& body, const std::string& domain);
  std::shared_ptr<client::HandleCache> sandboxes_;
  E2bOptions options_;
  std::shared_ptr<State> state_;
  std::thread sweep_;
  std::thread sampler_;
};

}  // namespace agvisor::e2b
