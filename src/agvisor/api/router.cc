#include "agvisor/api/router.h"

#include <algorithm>
#include <array>

namespace agvisor::api {
namespace {

constexpr std::array kBuiltin = {
    RouteDef{"GET", "/v1/health", RouteId::kHealth, false, false},
    RouteDef{"GET", "/v1/sandboxes", RouteId::kListSandboxes},
    RouteDef{"POST", "/v1/sandboxes", RouteId::kCreateSandbox},
    RouteDef{"GET", "/v1/sandboxes/{id}", RouteId::kGetSandbox},
    RouteDef{"DELETE", "/v1/sandboxes/{id}", RouteId::kDeleteSandbox},
    RouteDef{"POST", "/v1/sandboxes/{id}/stop", RouteId::kStopSandbox},
    RouteDef{"POST", "/v1/sandboxes/{id}/pause", RouteId::kPauseSandbox},
    RouteDef{"POST", "/v1/sandboxes/{id}/resume", RouteId::kResumeSandbox},
    RouteDef{"POST", "/v1/sandboxes/{id}/update", RouteId::kUpdateSandbox},
    RouteDef{"POST", "/v1/sandboxes/{id}/snapshot", RouteId::kSnapshotSandbox},
    RouteDef{"POST", "/v1/sandboxes/{id}/fork", RouteId::kForkSandbox},
    RouteDef{"POST", "/v1/sandboxes/{id}/exec", RouteId::kExec},
    RouteDef{"GET", "/v1/sandboxes/{id}/exec/ws", RouteId::kExecWs, true},
    RouteDef{"GET", "/v1/sandboxes/{id}/files", RouteId::kReadFile, false, true, true},
    RouteDef{"PUT", "/v1/sandboxes/{id}/files", RouteId::kWriteFile},
    RouteDef{"DELETE", "/v1/sandboxes/{id}/files", RouteId::kDeleteFile},
    RouteDef{"GET", "/v1/sandboxes/{id}/files/stat", RouteId::kStatFile},
    RouteDef{"GET", "/v1/sandboxes/{id}/files/list", RouteId::kListDir},
    RouteDef{"POST", "/v1/sandboxes/{id}/files/mkdir", RouteId::kMkdir},
    RouteDef{"GET", "/v1/sandboxes/{id}/archive", RouteId::kGetArchive, false, true, true},
    RouteDef{"PUT", "/v1/sandboxes/{id}/archive", RouteId::kPutArchive, false, true, true},
    RouteDef{"POST", "/v1/sandboxes/{id}/processes", RouteId::kStartProcess},
    RouteDef{"GET", "/v1/sandboxes/{id}/processes", RouteId::kListProcesses},
    RouteDef{"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", RouteId::kSignalProcess},
    RouteDef{"GET", "/v1/sandboxes/{id}/processes/{pid}/ws", RouteId::kAttachProcessWs, true},
    RouteDef{"GET", "/v1/sandboxes/{id}/ports/{port}/ws", RouteId::kPortWs, true},
    RouteDef{"GET", "/v1/sandboxes/{id}/watch/ws", RouteId::kWatchWs, true},
    RouteDef{"GET", "/v1/sandboxes/{id}/metrics", RouteId::kMetrics},
    RouteDef{"POST", "/v1/sandboxes/{id}/desktop/token", RouteId::kDesktopToken},
    RouteDef{"GET", "/v1/sandboxes/{id}/desktop/screenshot", RouteId::kDesktopScreenshot},
    RouteDef{"POST", "/v1/sandboxes/{id}/desktop/input", RouteId::kDesktopInput},
    RouteDef{"GET", "/v1/sandboxes/{id}/egress", RouteId::kGetEgress},
    RouteDef{"PUT", "/v1/sandboxes/{id}/egress", RouteId::kSetEgress},
    RouteDef{"GET", "/v1/sandboxes/{id}/egress/log", RouteId::kEgressLog},
    RouteDef{"GET", "/v1/sandboxes/{id}/egress/log/ws", RouteId::kEgressLogWs, true},
    RouteDef{"GET", "/v1/pools", RouteId::kListPools},
    RouteDef{"POST", "/v1/pools", RouteId::kCreatePool},
    RouteDef{"DELETE", "/v1/pools/{name}", RouteId::kDeletePool},
};

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits "/a/b/c" into {"a", "b", "c"}; "" segments (double or trailing slashes) are kept, so
// they match nothing.
std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.empty() || path.front() != '/') return out;
  path.remove_prefix(1);
  for (;;) {
    auto slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

bool IsParam(std::string_view seg) {
  return seg.size() > 2 && seg.front() == '{' && seg.back() == '}';
}

// Matches path segments against a template; fills `params` (decoded) on success.
bool MatchTemplate(std::string_view tmpl, const std::vector<std::string_view>& segs,
                   std::map<std::string, std::string>& params) {
  auto t = Segments(tmpl);
  if (t.size() != segs.size()) return false;
  std::map<std::string, std::string> p;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (IsParam(t[i])) {
      if (segs[i].empty()) return false;
      auto v = PercentDecode(segs[i]);
      if (!v.ok() || v->find('/') != std::string::npos) return false;
      p[std::string(t[i].substr(1, t[i].size() - 2))] = std::move(*v);
    } else if (t[i] != segs[i]) {
      return false;
    }
  }
  params = std::move(p);
  return true;
}

}  // namespace

std::span<const RouteDef> BuiltinRoutes() { return kBuiltin; }

Result<std::string> PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    int hi = i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
    int lo = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return Error::InvalidArgument("bad percent-encoding in '" + std::string(s) +
                                    "': '%' must be followed by two hex digits");
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  if (out.find('\0') != std::string::npos) {
    return Error::InvalidArgument("a NUL byte (%00) is not allowed in a path or query");
  }
  return out;
}

Result<std::pair<std::string, std::map<std::string, std::string>>> SplitTarget(
    std::string_view target) {
  if (target.empty() || target.front() != '/') {
    return Error::InvalidArgument("request target '" + std::string(target) +
                                  "' is not a path (origin-form, starting with '/')");
  }
  auto q = target.find('?');
  std::string path(target.substr(0, q));
  std::map<std::string, std::string> query;
  if (q != std::string_view::npos) {
    std::string_view rest = target.substr(q + 1);
    while (!rest.empty()) {
      auto amp = rest.find('&');
      std::string_view kv = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      if (kv.empty()) continue;
      auto eq = kv.find('=');
      auto key = AGVISOR_TRY(PercentDecode(kv.substr(0, eq)));
      std::string value;
      if (eq != std::string_view::npos) value = AGVISOR_TRY(PercentDecode(kv.substr(eq + 1)));
      query[std::move(key)] = std::move(value);
    }
  }
  return std::make_pair(std::move(path), std::move(query));
}

Router::Router() : routes_(kBuiltin.begin(), kBuiltin.end()) {}

Result<void> Router::AddExtension(const RouteDef& def) {
  auto segs = Segments(def.path);
  bool ok = !segs.empty() && !segs.front().empty();
  for (std::size_t i = 0; i < segs.size(); ++i) {
    // An empty segment only at the end: a trailing slash ("/console/", a page's other spelling).
    const std::string_view s = segs[i];
    if ((s.empty() && i + 1 != segs.size()) ||
        (s.find_first_of("{}") != std::string_view::npos && !IsParam(s))) {
      ok = false;
    }
  }
  if (!ok) {
    return Error::InvalidArgument("route template '" + std::string(def.path) +
                                  "': use /segment/{param}/... (no empty segments but a "
                                  "trailing slash)");
  }
  for (const auto& r : routes_) {
    if (r.method == def.method && r.path == def.path) {
      return Error::Conflict("route " + std::string(def.method) + " " + std::string(def.path) +
                             " is already registered");
    }
  }
  routes_.push_back(def);
  return Ok();
}

Result<RouteMatch> Router::Match(std::string_view method, std::string_view target) const {
  auto [path, query] = AGVISOR_TRY(SplitTarget(target));
  auto segs = Segments(path);
  std::string allowed;
  for (const auto& r : routes_) {
    std::map<std::string, std::string> params;
    if (!MatchTemplate(r.path, segs, params)) continue;
    if (r.method == method) {
      return RouteMatch{&r, std::move(params), std::move(query)};
    }
    if (allowed.find(r.method) == std::string::npos) {
      allowed += (allowed.empty() ? "" : ", ") + std::string(r.method);
    }
  }
  if (!allowed.empty()) {
    return Error::Unsupported("method " + std::string(method) + " is not allowed on " + path +
                              " (allowed: " + allowed + ")");
  }
  return Error::NotFound("no route for " + std::string(method) + " " + path +
                         " (see docs/openapi.yaml)");
}

}  // namespace agvisor::api
