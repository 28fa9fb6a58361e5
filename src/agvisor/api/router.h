// The agvisord route table and its pure matcher: (method, path) -> which handler, with the path
// parameters ({id}, {pid}, {port}) and the decoded query string.
//
// Used by server/server.cc (dispatch) and by the OpenAPI check (router_test.cc compares kRoutes
// with the paths of docs/openapi.yaml). No I/O, no Beast: unit-tested beside it.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::api {

enum class RouteId {
  kHealth,
  kListSandboxes,
  kCreateSandbox,
  kGetSandbox,
  kDeleteSandbox,
  kStopSandbox,
  kPauseSandbox,
  kResumeSandbox,
  kUpdateSandbox,
  kSnapshotSandbox,
  kForkSandbox,
  kExec,
  kExecWs,
  kReadFile,
  kWriteFile,
  kDeleteFile,
  kStatFile,
  kListDir,
  kMkdir,
  kGetArchive,
  kPutArchive,
  kStartProcess,
  kListProcesses,
  kSignalProcess,
  kAttachProcessWs,
  kPortWs,
  kWatchWs,
  kMetrics,
  kDesktopToken,
  kDesktopScreenshot,
  kDesktopInput,
  kGetEgress,
  kSetEgress,
  kEgressLog,
  kEgressLogWs,
  kListPools,
  kCreatePool,
  kDeletePool,
  kExtension,  // a route registered at run time (Router::AddExtension), e.g. the desktop gateway
};

struct RouteDef {
  std::string_view method;  // "GET", "POST", ...
  std::string_view path;    // template: "/v1/sandboxes/{id}/exec"
  RouteId id;
  bool websocket = false;  // served after an HTTP Upgrade to WebSocket
  bool auth = true;        // false only for /v1/health
  // The body is read and the answer written by the handler as they flow (server.h HttpStream):
  // archives of any size in bounded memory.
  bool streaming = false;
};

// Every built-in route. docs/openapi.yaml documents exactly these (checked by router_test).
std::span<const RouteDef> BuiltinRoutes();

struct RouteMatch {
  const RouteDef* route = nullptr;
  std::map<std::string, std::string> params;  // {id} -> "x", percent-decoded
  std::map<std::string, std::string> query;   // ?a=b&c -> {a: b, c: ""}, percent-decoded
};

// Splits an origin-form target into its path and decoded query. Errors: kInvalidArgument (not
// origin-form, bad percent-encoding, a NUL byte).
Result<std::pair<std::string, std::map<std::string, std::string>>> SplitTarget(
    std::string_view target);

// The routes of one server: the built-ins plus extensions.
class Router {
 public:
  Router();
  // Adds a route (e.g. {"GET", "/v1/sandboxes/{id}/desktop/ws", kExtension, websocket=true}).
  // The strings must outlive the Router. Errors: kConflict (method+path already routed),
  // kInvalidArgument (a template that is not "/seg/{param}/...").
  Result<void> AddExtension(const RouteDef& def);

  // Errors: kInvalidArgument (a malformed target), kNotFound (no route has this path: HTTP 404),
  // kUnsupported (the path exists but not with this method: HTTP 405; the message lists the
  // allowed methods).
  Result<RouteMatch> Match(std::string_view method, std::string_view target) const;

  std::span<const RouteDef> routes() const { return routes_; }

 private:
  std::vector<RouteDef> routes_;
};

// Percent-decoding ("%2F" -> "/", '+' kept as is). Errors: kInvalidArgument.
Result<std::string> PercentDecode(std::string_view s);

}  // namespace agvisor::api
