#include "agvisor/server/service.h"

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <csignal>
#include <thread>

#include "agvisor/api/codec.h"
#include "agvisor/client/desktop.h"
#include "agvisor/server/egress_host.h"
#include "agvisor/server/log.h"

namespace agvisor::server {
namespace {

constexpr std::size_t kEndedKept = 256;
constexpr std::size_t kPortChunk = 64 * 1024;
// How often an egress log WebSocket looks for new records (EgressLogWs).
constexpr std::chrono::milliseconds kEgressFollowPoll{200};

HttpResponse Json(int status, std::string body) {
  return HttpResponse{status, "application/json", std::move(body), {}};
}

HttpResponse NoContent() { return HttpResponse{204, "", "", {}}; }

// Answers 200 with the bytes `produce` hands its sink, as they come (chunked). The answer begins
// with the first byte, so an error before it (no such path) is still a JSON error with its
// status; one after it breaks the body off and is logged as `broken` for sandbox `id`.
Result<HttpResponse> StreamBody(
    HttpStream& io, const std::string& content_type, const std::string& id, std::string_view broken,
    const std::function<Result<void>(const channel::ByteSink&)>& produce) {
  bool began = false;
  auto begin = [&]() -> Result<void> {
    if (began) return Ok();
    began = true;
    return io.BeginBody(200, content_type);
  };
  auto r = produce([&](std::string_view bytes) -> Result<void> {
    AGVISOR_RETURN_IF_ERROR(begin());
    return io.WriteBody(bytes);
  });
  if (!r.ok()) {
    if (began) LogEvent("warn", broken, {{"id", id}, {"error", r.error().ToString()}});
    return r.error();
  }
  AGVISOR_RETURN_IF_ERROR(begin());
  return HttpResponse{200, content_type, "", {}};
}

HttpResponse ErrorResponse(const Error& e) {
  return Json(api::HttpStatusFor(e.code()), api::ErrorJson(e));
}

const std::string& Param(const api::RouteMatch& m, const std::string& key) {
  static const std::string kEmpty;
  auto it = m.params.find(key);
  return it == m.params.end() ? kEmpty : it->second;
}

Result<std::uint32_t> ParseUint(std::string_view text, std::string_view what, std::uint64_t max) {
  if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != text.npos) {
    return Error::InvalidArgument(std::string(what) + " '" + api::SanitizeUtf8(text) +
                                  "' is not a number");
  }
  auto n = std::stoull(std::string(text));
  if (n == 0 || n > max) {
    return Error::InvalidArgument(std::string(what) + " must be 1.." + std::to_string(max));
  }
  return static_cast<std::uint32_t>(n);
}

std::string Tagged(std::uint8_t tag, std::string_view bytes) {
  std::string s;
  s.reserve(bytes.size() + 1);
  s.push_back(static_cast<char>(tag));
  s.append(bytes);
  return s;
}

// Sends an error message and closes with `code`.
void FailWs(WebSocket& ws, const Error& e, int code = 1011) {
  (void)ws.Send(api::WsErrorJson(e), false);
  ws.Close(code, e.message());
}

}  // namespace

Service::Service(ServiceOptions options) : options_(std::move(options)) {}

Result<std::size_t> Service::Recover() {
  auto list = AGVISOR_TRY(place().List());
  std::size_t served = 0;
  for (const auto& info : list) {
    if (!info.running) continue;
    auto h = options_.sandboxes->Get(info.container_name);
    if (!h.ok()) {
      LogEvent("warn", "cannot open a sandbox found by label",
               {{"container", info.container_name}, {"error", h.error().ToString()}});
      continue;
    }
    ++served;
  }
  return served;
}

void Service::SweepPaused() {
  auto list = place().List();
  if (!list.ok()) return;  // the next sweep tries again
  for (const auto& info : *list) {
    if (info.state != "removed" || info.end_reason != EndReason::kLifetime) continue;
    const std::string id = api::SandboxIdFor(info.container_name);
    Forget(id, EndReason::kLifetime);
    LogEvent("info", "paused sandbox past its lifetime ended", {{"id", id}});
  }
}

void Service::ClosePools() {
  auto pools = place().ListPools();
  if (!pools.ok()) return;
  for (const auto& p : *pools) (void)place().ClosePool(p.name);
}

Result<std::shared_ptr<client::SandboxHandle>> Service::Get(const std::string& id) {
  const std::string cname = AGVISOR_TRY(api::ContainerNameForId(id));
  return options_.sandboxes->Get(cname);  // the place's words for a missing one
}

api::SandboxView Service::Adopt(client::Created created) {
  std::shared_ptr<client::SandboxHandle> h = options_.sandboxes->Put(std::move(created.handle));
  const std::string sid = api::SandboxIdFor(h->container_name());
  {
    std::lock_guard lock(mu_);
    if (ended_.erase(sid)) std::erase(ended_order_, sid);
  }
  api::SandboxView v{sid, {}, created.resumed, std::move(created.disk_warning)};
  if (auto info = h->Info(); info.ok()) {
    v.info = std::move(*info);
  } else {
    v.info.container_name = h->container_name();
    v.info.name = std::move(created.name);
    v.info.state = "running";
    v.info.running = true;
  }
  return v;
}

void Service::Forget(const std::string& id, EndReason reason, std::optional<std::string> name) {
  SandboxInfo info;
  info.container_name = std::string(kNamePrefix) + id;
  options_.sandboxes->Forget(info.container_name);
  std::lock_guard lock(mu_);
  info.name = std::move(name);
  info.state = "removed";
  info.end_reason = reason;
  info.host = options_.docker_host;
  if (ended_.count(id) == 0) ended_order_.push_back(id);
  ended_[id] = std::move(info);
  while (ended_order_.size() > kEndedKept) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

HttpResponse Service::Handle(const HttpRequest& req, const api::RouteMatch& match) {
  auto r = Dispatch(req, match);
  if (!r.ok()) return ErrorResponse(r.error());
  return std::move(*r);
}

Result<void> Service::RefuseIfPausedAndAsked(const api::RouteMatch& m) {
  const std::string& id = Param(m, "id");
  if (id.empty()) return Ok();
  switch (m.route->id) {
    case api::RouteId::kGetSandbox:
    case api::RouteId::kDeleteSandbox:
    case api::RouteId::kStopSandbox:
    case api::RouteId::kPauseSandbox:
    case api::RouteId::kResumeSandbox:
    case api::RouteId::kUpdateSandbox:
      return Ok();  // about the sandbox, not calls into it
    default:
      break;
  }
  if (AGVISOR_TRY(api::QueryBool(m.query, "resume", true))) return Ok();
  auto sb = AGVISOR_TRY(Get(id));
  return sb->RefuseIfPaused();
}

Result<HttpResponse> Service::Dispatch(const HttpRequest& req, const api::RouteMatch& m) {
  const std::string& id = Param(m, "id");
  AGVISOR_RETURN_IF_ERROR(RefuseIfPausedAndAsked(m));
  switch (m.route->id) {
    case api::RouteId::kHealth: {
      const std::size_t n = options_.sandboxes->size();
      return Json(200, "{\"status\":\"ok\",\"version\":\"" + options_.version +
                           "\",\"open_handles\":" + std::to_string(n) + "}");
    }
    case api::RouteId::kListSandboxes: {
      auto list = AGVISOR_TRY(place().List());
      std::vector<api::SandboxView> views;
      for (auto& info : list) {
        api::SandboxView v{api::SandboxIdFor(info.container_name), std::move(info), {}, {}};
        if (!v.info.running && v.info.end_reason == EndReason::kNone) {
          // The list call does not say why a sandbox ended; its inspect does.
          if (auto h = Get(v.id); h.ok()) {
            if (auto full = (*h)->Info(); full.ok()) v.info = std::move(*full);
          }
        }
        views.push_back(std::move(v));
      }
      return Json(200, api::SandboxListJson(views));
    }
    case api::RouteId::kCreateSandbox: {
      auto cr = AGVISOR_TRY(api::ParseCreateRequest(req.body));
      client::Created created;
      if (cr.pool) {
        created = AGVISOR_TRY(place().Acquire(*cr.pool, {.lifetime = cr.spec.lifetime,
                                                         .idle_ttl = cr.spec.idle_ttl,
                                                         .wait = cr.pool_wait,
                                                         .cold_create = cr.pool_cold_create}));
      } else {
        created = AGVISOR_TRY(place().Create(cr.spec));
      }
      const api::SandboxView v = Adopt(std::move(created));
      const bool resumed = v.resumed.value_or(false);
      LogEvent("info", "sandbox created", {{"id", v.id}, {"resumed", resumed ? "1" : "0"}});
      return Json(resumed ? 200 : 201, api::SandboxJson(v));
    }
    case api::RouteId::kGetSandbox: {
      auto h = Get(id);
      if (!h.ok()) {
        if (h.error().code() == ErrorCode::kNotFound) {
          std::lock_guard lock(mu_);
          if (auto it = ended_.find(id); it != ended_.end()) {
            return Json(200, api::SandboxJson({id, it->second, {}, {}}));
          }
        }
        return h.error();
      }
      auto info = AGVISOR_TRY((*h)->Info());
      return Json(200, api::SandboxJson({id, std::move(info), {}, {}}));
    }
    case api::RouteId::kDeleteSandbox: {
      const std::string cname = AGVISOR_TRY(api::ContainerNameForId(id));
      const bool erase = AGVISOR_TRY(api::QueryBool(m.query, "erase_data", true));
      AGVISOR_RETURN_IF_ERROR(place().Remove(cname, erase));
      Forget(id, EndReason::kStopped);
      LogEvent("info", "sandbox deleted", {{"id", id}, {"erase_data", erase ? "1" : "0"}});
      return NoContent();
    }
    case api::RouteId::kStopSandbox: {
      auto sb = AGVISOR_TRY(Get(id));
      auto info = AGVISOR_TRY(sb->Info());
      // Removes the container; a named sandbox keeps its volume.
      AGVISOR_RETURN_IF_ERROR(place().Remove(sb->container_name(), /*erase_data=*/false));
      Forget(id, EndReason::kStopped, std::move(info.name));
      LogEvent("info", "sandbox stopped", {{"id", id}});
      std::lock_guard lock(mu_);
      return Json(200, api::SandboxJson({id, ended_[id], {}, {}}));
    }
    case api::RouteId::kPauseSandbox:
    case api::RouteId::kResumeSandbox: {
      const bool pause = m.route->id == api::RouteId::kPauseSandbox;
      auto sb = AGVISOR_TRY(Get(id));
      auto r = pause ? place().Pause(sb->container_name()) : place().Resume(sb->container_name());
      AGVISOR_RETURN_IF_ERROR(r);
      LogEvent("info", pause ? "sandbox paused" : "sandbox resumed", {{"id", id}});
      auto info = AGVISOR_TRY(sb->Info());
      return Json(200, api::SandboxJson({id, std::move(info), {}, {}}));
    }
    case api::RouteId::kUpdateSandbox: {
      auto update = AGVISOR_TRY(api::ParseUpdateRequest(req.body));
      auto sb = AGVISOR_TRY(Get(id));
      auto live = AGVISOR_TRY(place().Update(sb->container_name(), update));
      LogEvent("info", "sandbox resized",
               {{"id", id},
                {"cpus", std::to_string(live.cpus)},
                {"memory_bytes", std::to_string(live.memory_bytes)},
                {"pids", std::to_string(live.pids)}});
      auto info = AGVISOR_TRY(sb->Info());
      return Json(200, api::SandboxJson({id, std::move(info), {}, {}}));
    }
    case api::RouteId::kSnapshotSandbox: {
      SnapshotOptions o = AGVISOR_TRY(api::ParseSnapshotRequest(req.body));
      auto sb = AGVISOR_TRY(Get(id));
      auto r = AGVISOR_TRY(sb->Snapshot(o));
      LogEvent("info", "sandbox snapshot made",
               {{"id", id}, {"image", r.image}, {"bytes", std::to_string(r.bytes)}});
      return Json(200, api::SnapshotResultJson(r));
    }
    case api::RouteId::kForkSandbox: {
      ForkOptions o = AGVISOR_TRY(api::ParseForkRequest(req.body));
      auto sb = AGVISOR_TRY(Get(id));
      auto forked = AGVISOR_TRY(place().Fork(sb->container_name(), o));
      api::ForkView view;
      view.snapshot = std::move(forked.snapshot);
      view.seconds = forked.seconds;
      for (auto& f : forked.sandboxes) view.sandboxes.push_back(Adopt(std::move(f)));
      LogEvent("info", "sandbox forked",
               {{"id", id},
                {"image", view.snapshot.image},
                {"count", std::to_string(view.sandboxes.size())}});
      return Json(200, api::ForkResultJson(view));
    }
    case api::RouteId::kExec: {
      auto er = AGVISOR_TRY(api::ParseExecRequest(req.body, /*websocket=*/false));
      auto sb = AGVISOR_TRY(Get(id));
      ExecOptions o;
      o.input = std::move(er.input);
      o.timeout = er.timeout;
      o.env = std::move(er.env);
      o.cwd = std::move(er.cwd);
      o.user = std::move(er.user);
      // Output is sandbox-controlled: at most this much of each stream is held (and its JSON).
      o.max_output_bytes = options_.max_exec_output;
      auto res = AGVISOR_TRY(sb->Exec(er.argv, o));
      return Json(200, api::ExecResultJson(res, er.base64));
    }
    case api::RouteId::kWriteFile: {
      auto path = AGVISOR_TRY(api::QueryPath(m.query));
      auto mode = AGVISOR_TRY(api::QueryMode(m.query, 0644));
      auto sb = AGVISOR_TRY(Get(id));
      AGVISOR_RETURN_IF_ERROR(sb->WriteFile(path, req.body, mode));
      return NoContent();
    }
    case api::RouteId::kDeleteFile: {
      auto path = AGVISOR_TRY(api::QueryPath(m.query));
      auto recursive = AGVISOR_TRY(api::QueryBool(m.query, "recursive", false));
      auto sb = AGVISOR_TRY(Get(id));
      AGVISOR_RETURN_IF_ERROR(sb->RemovePath(path, recursive));
      return NoContent();
    }
    case api::RouteId::kStatFile: {
      auto path = AGVISOR_TRY(api::QueryPath(m.query));
      auto sb = AGVISOR_TRY(Get(id));
      auto e = AGVISOR_TRY(sb->Stat(path));
      return Json(200, api::FileEntryJson(e));
    }
    case api::RouteId::kListDir: {
      auto path = AGVISOR_TRY(api::QueryPath(m.query));
      auto sb = AGVISOR_TRY(Get(id));
      auto entries = AGVISOR_TRY(sb->ListDir(path));
      return Json(200, api::FileListJson(path, entries));
    }
    case api::RouteId::kMkdir: {
      auto path = AGVISOR_TRY(api::QueryPath(m.query));
      auto parents = AGVISOR_TRY(api::QueryBool(m.query, "parents", true));
      auto mode = AGVISOR_TRY(api::QueryMode(m.query, 0755));
      auto sb = AGVISOR_TRY(Get(id));
      AGVISOR_RETURN_IF_ERROR(sb->Mkdir(path, parents, mode));
      return NoContent();
    }
    case api::RouteId::kStartProcess: {
      auto pr = AGVISOR_TRY(api::ParseStartProcessRequest(req.body));
      auto sb = AGVISOR_TRY(Get(id));
      auto pid = AGVISOR_TRY(sb->StartBackground(pr.argv, pr.options));
      return Json(201, "{\"pid\":" + std::to_string(pid) + "}");
    }
    case api::RouteId::kListProcesses: {
      auto sb = AGVISOR_TRY(Get(id));
      auto procs = AGVISOR_TRY(sb->ListProcesses());
      return Json(200, api::ProcessListJson(procs));
    }
    case api::RouteId::kSignalProcess: {
      auto pid = AGVISOR_TRY(ParseUint(Param(m, "pid"), "pid", 0xffffffffu));
      auto sig = AGVISOR_TRY(api::ParseSignalRequest(req.body));
      auto sb = AGVISOR_TRY(Get(id));
      AGVISOR_RETURN_IF_ERROR(sb->Signal(pid, sig));
      return NoContent();
    }
    case api::RouteId::kMetrics: {
      auto sb = AGVISOR_TRY(Get(id));
      auto info = AGVISOR_TRY(sb->Info());
      if (!info.running) {
        std::string why(api::EndReasonSlug(info.end_reason));
        return Error::SandboxDied("sandbox " + id + " is not running" +
                                  (why.empty() ? "" : " (end reason: " + why + ")") +
                                  ": it has no metrics");
      }
      auto stats = place().Stats(info);
      if (!stats.ok()) {
        // Removed while its stats were read: Docker cuts the stream short ("invalid JSON"). That
        // is a sandbox gone (410), not a daemon failure (500, logged as an error).
        if (auto now = sb->Info(); !now.ok() || !now->running) {
          return Error::SandboxDied("sandbox " + id + " ended while its metrics were read");
        }
        return stats.error();
      }
      // A sandbox with an egress policy also gets its enforcer's counters ("egress"; sandboxes
      // without one have no such member).
      std::optional<api::EgressTraffic> traffic;
      if (options_.egress != nullptr) {
        if (auto t = options_.egress->Traffic(sb->container_name()); t.ok()) traffic = *t;
      }
      return Json(200, api::MetricsJson(id, *stats, traffic ? &*traffic : nullptr));
    }
    case api::RouteId::kEgressLog: {
      const std::string container = AGVISOR_TRY(EgressContainer(id));
      const std::size_t last = AGVISOR_TRY(EgressLogLast(m));
      return Json(200, api::EgressLogJson(id, AGVISOR_TRY(options_.egress->Log(container, last))));
    }
    case api::RouteId::kGetEgress:
    case api::RouteId::kSetEgress: {
      const std::string container = AGVISOR_TRY(EgressContainer(id));
      if (m.route->id == api::RouteId::kGetEgress) {
        return Json(200, api::EgressViewJson(id, AGVISOR_TRY(options_.egress->View(container))));
      }
      const egress::EgressRules rules = AGVISOR_TRY(api::ParseEgressRulesJson(req.body));
      return Json(
          200, api::EgressViewJson(id, AGVISOR_TRY(options_.egress->SetRules(container, rules))));
    }
    case api::RouteId::kDesktopToken: {
      if (!options_.desktop_key) {
        return Error::Unsupported(
            "agvisord runs without a desktop key: start it with --desktop-key-file FILE (the "
            "gateway's 32-byte key as 64 hex digits) to mint desktop tokens");
      }
      const std::int64_t ttl = AGVISOR_TRY(api::ParseDesktopTokenRequest(req.body));
      auto sb = AGVISOR_TRY(Get(id));
      const std::string password = AGVISOR_TRY(desktop::Password(*sb));
      const std::string token =
          AGVISOR_TRY(desktop::MintVncToken(*options_.desktop_key,
                                            {.container = sb->container_name(),
                                             .docker_host = options_.docker_host,
                                             .port = desktop::kVncPort,
                                             .password = password},
                                            std::chrono::seconds(ttl)));
      boost::json::object o;
      o["token"] = token;
      o["expires_in"] = ttl;
      o["gateway_path"] = "/v1/desktop/ws";
      return Json(200, boost::json::serialize(o));
    }
    case api::RouteId::kDesktopScreenshot: {
      auto sb = AGVISOR_TRY(Get(id));
      return HttpResponse{200, "image/png", AGVISOR_TRY(desktop::Screenshot(*sb)), {}};
    }
    case api::RouteId::kDesktopInput: {
      auto sb = AGVISOR_TRY(Get(id));
      AGVISOR_RETURN_IF_ERROR(DesktopInput(*sb, req.body));
      return NoContent();
    }
    case api::RouteId::kListPools:
      return Json(200, api::PoolListJson(AGVISOR_TRY(place().ListPools())));
    case api::RouteId::kCreatePool: {
      auto pr = AGVISOR_TRY(api::ParseCreatePoolRequest(req.body));
      const PoolInfo pool = AGVISOR_TRY(place().CreatePool(pr.name, pr.options));
      LogEvent("info", "pool created",
               {{"pool", pr.name}, {"size", std::to_string(pr.options.size)}});
      return Json(201, api::PoolJson(pool));
    }
    case api::RouteId::kDeletePool: {
      const std::string& name = Param(m, "name");
      AGVISOR_RETURN_IF_ERROR(place().ClosePool(name));
      LogEvent("info", "pool deleted", {{"pool", name}});
      return NoContent();
    }
    default:
      return Error::Internal("route " + std::string(m.route->path) + " has no HTTP handler");
  }
}

Result<void> Service::DesktopInput(client::SandboxHandle& sb, std::string_view body) {
  const api::DesktopInput in = AGVISOR_TRY(api::ParseDesktopInputRequest(body));
  switch (in.action) {
    case api::DesktopInput::Action::kMove:
      return desktop::MouseMove(sb, in.x, in.y);
    case api::DesktopInput::Action::kClick: {
      const auto button = AGVISOR_TRY(desktop::ParseMouseButton(in.button));
      return desktop::Click(sb, in.x, in.y, button, in.count);
    }
    case api::DesktopInput::Action::kDrag: {
      const auto button = AGVISOR_TRY(desktop::ParseMouseButton(in.button));
      return desktop::Drag(sb, in.x, in.y, in.to_x, in.to_y, button);
    }
    case api::DesktopInput::Action::kScroll:
      return desktop::Scroll(sb, in.x, in.y, in.dy, in.dx);
    case api::DesktopInput::Action::kType:
      return desktop::TypeText(sb, in.text);
    case api::DesktopInput::Action::kKey:
      return desktop::Key(sb, in.text);
  }
  return Error::Internal("desktop input: an action without a verb");
}

// ---- Streaming routes ----

HttpResponse Service::HandleStream(const HttpRequest&, const api::RouteMatch& match,
                                   HttpStream& io) {
  auto r = DispatchStream(match, io);
  if (!r.ok()) return ErrorResponse(r.error());
  return std::move(*r);
}

Result<HttpResponse> Service::DispatchStream(const api::RouteMatch& m, HttpStream& io) {
  const std::string& id = Param(m, "id");
  AGVISOR_RETURN_IF_ERROR(RefuseIfPausedAndAsked(m));
  switch (m.route->id) {
    case api::RouteId::kReadFile: {
      auto path = AGVISOR_TRY(api::QueryPath(m.query));
      auto offset = AGVISOR_TRY(api::QueryBytes(m.query, "offset"));
      auto length = AGVISOR_TRY(api::QueryBytes(m.query, "length"));
      auto sb = AGVISOR_TRY(Get(id));
      // Streamed as it arrives (chunked): the file's size is the sandbox's word, so nothing is
      // sized or held from it. A client that stops reading stops the read (WriteBody fails).
      return StreamBody(io, "application/octet-stream", id, "file read broken off",
                        [&](const channel::ByteSink& sink) {
                          return sb->ReadFileTo(path, sink, offset.value_or(0), length);
                        });
    }
    case api::RouteId::kGetArchive: {
      auto path = AGVISOR_TRY(api::QueryPath(m.query));
      auto sb = AGVISOR_TRY(Get(id));
      return StreamBody(io, "application/x-tar", id, "archive download broken off",
                        [&](const channel::ByteSink& sink) { return sb->DownloadTar(path, sink); });
    }
    case api::RouteId::kPutArchive: {
      auto path = AGVISOR_TRY(api::QueryPath(m.query));
      auto sb = AGVISOR_TRY(Get(id));
      AGVISOR_RETURN_IF_ERROR(sb->UploadTar(
          path, [&](std::span<char> buf) -> Result<std::size_t> { return io.ReadBody(buf); }));
      return NoContent();
    }
    default:
      return Error::Internal("route " + std::string(m.route->path) + " has no streaming handler");
  }
}

// ---- WebSockets ----

void Service::HandleWebSocket(const HttpRequest&, const api::RouteMatch& m, WebSocket& ws) {
  auto sb = Get(Param(m, "id"));
  if (!sb.ok()) return FailWs(ws, sb.error(), 1008);
  if (auto r = RefuseIfPausedAndAsked(m); !r.ok()) return FailWs(ws, r.error(), 1008);
  switch (m.route->id) {
    case api::RouteId::kExecWs:
      return ExecWs(**sb, ws);
    case api::RouteId::kAttachProcessWs: {
      auto pid = ParseUint(Param(m, "pid"), "pid", 0xffffffffu);
      if (!pid.ok()) return FailWs(ws, pid.error(), 1008);
      return AttachWs(**sb, *pid, ws);
    }
    case api::RouteId::kPortWs: {
      auto port = ParseUint(Param(m, "port"), "port", 65535);
      if (!port.ok()) return FailWs(ws, port.error(), 1008);
      return PortWs(**sb, static_cast<std::uint16_t>(*port), ws);
    }
    case api::RouteId::kEgressLogWs: {
      auto container = EgressContainer(Param(m, "id"));
      if (!container.ok()) return FailWs(ws, container.error(), 1008);
      auto last = EgressLogLast(m);
      if (!last.ok()) return FailWs(ws, last.error(), 1008);
      return EgressLogWs(*container, *last, ws);
    }
    case api::RouteId::kWatchWs: {
      auto path = api::QueryPath(m.query);
      if (!path.ok()) return FailWs(ws, path.error(), 1008);
      auto recursive = api::QueryBool(m.query, "recursive", true);
      if (!recursive.ok()) return FailWs(ws, recursive.error(), 1008);
      return WatchWs(**sb, *path, *recursive, ws);
    }
    default:
      return FailWs(ws, Error::Internal("no WebSocket handler for this route"));
  }
}

namespace {

// Feeds a process's stdin and control messages from the client until the client closes (then
// `on_gone` runs) or the command ended (`finished`).
void PumpClientToProcess(WebSocket& ws, client::Command& p, const std::atomic<bool>& finished,
                         const std::function<void()>& on_gone) {
  for (;;) {
    auto msg = ws.Receive();
    if (!msg.ok() || !msg->has_value()) {
      if (!finished) on_gone();
      return;
    }
    const WsMessage& w = **msg;
    if (w.binary) {
      if (w.data.empty() || static_cast<std::uint8_t>(w.data[0]) != api::kTagStdin) {
        (void)ws.Send(api::WsErrorJson(Error::InvalidArgument(
                          "binary messages to the server start with the stdin tag 0x00")),
                      false);
        continue;
      }
      (void)p.Write(std::string_view(w.data).substr(1));
      continue;
    }
    auto c = api::ParseWsControl(w.data);
    if (!c.ok()) {
      (void)ws.Send(api::WsErrorJson(c.error()), false);
      continue;
    }
    switch (c->type) {
      case api::WsControl::Type::kEof:
        (void)p.CloseStdin();
        break;
      case api::WsControl::Type::kResize:
        (void)p.Resize(c->rows, c->cols);
        break;
      case api::WsControl::Type::kSignal:
        (void)p.Signal(c->signal);
        break;
    }
  }
}

// Delivers a process's output as tagged binary messages, then its exit, and closes.
void PumpProcessToClient(WebSocket& ws, client::Command& p, std::atomic<bool>& finished,
                         std::string_view what) {
  channel::ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view b) { (void)ws.Send(Tagged(api::kTagStdout, b), true); };
  cb.on_stderr = [&](std::string_view b) { (void)ws.Send(Tagged(api::kTagStderr, b), true); };
  auto exit = p.Wait(cb);
  finished = true;
  if (!exit.ok()) {
    (void)ws.Send(api::WsErrorJson(exit.error().WithContext(what)), false);
    ws.Close(1011, "failed");
    return;
  }
  (void)ws.Send(api::WsExitJson(*exit), false);
  ws.Close(1000, "exited");
}

// Serves process `pid` over `ws` until it ends: its STARTED message, the client's input to it
// (`on_gone` when the client leaves first), its output and exit to the client (`what` names the
// operation in an error).
void ServeProcess(WebSocket& ws, client::Command& proc, std::uint32_t pid,
                  const std::function<void()>& on_gone, std::string_view what) {
  (void)ws.Send(api::WsStartedJson(pid), false);
  std::atomic<bool> finished{false};
  std::thread in([&] { PumpClientToProcess(ws, proc, finished, on_gone); });
  PumpProcessToClient(ws, proc, finished, what);
  in.join();
}

}  // namespace

void Service::ExecWs(client::SandboxHandle& sb, WebSocket& ws) {
  auto first = ws.Receive();
  if (!first.ok() || !first->has_value()) return;
  if ((*first)->binary) {
    return FailWs(
        ws,
        Error::InvalidArgument("the first message of an exec WebSocket is a JSON text message "
                               "{\"argv\": [...]} (docs/agvisord.md)"),
        1008);
  }
  auto er = api::ParseExecRequest((*first)->data, /*websocket=*/true);
  if (!er.ok()) return FailWs(ws, er.error(), 1008);
  ProcessOptions o;
  o.pty = er->pty;
  o.rows = er->rows;
  o.cols = er->cols;
  o.stdin = er->stdin || er->pty;
  o.timeout = er->timeout;
  o.env = er->env;
  o.cwd = er->cwd;
  o.user = er->user;
  auto p = sb.Start(er->argv, o);  // started: its pid is known
  if (!p.ok()) return FailWs(ws, p.error());
  client::Command& proc = **p;
  // A client that goes away takes its command with it (as a terminal would).
  ServeProcess(
      ws, proc, proc.pid(), [&] { (void)proc.Signal(SIGKILL); }, "exec");
}

void Service::AttachWs(client::SandboxHandle& sb, std::uint32_t pid, WebSocket& ws) {
  auto p = sb.Attach(pid);
  if (!p.ok()) return FailWs(ws, p.error());
  client::Command& proc = **p;
  // A client that goes away detaches: Wait ends, the process runs on.
  ServeProcess(
      ws, proc, pid, [&] { proc.Close(); }, "attach");
}

void Service::PortWs(client::SandboxHandle& sb, std::uint16_t port, WebSocket& ws) {
  auto s = sb.OpenPort(port);
  if (!s.ok()) return FailWs(ws, s.error());
  // The connection inside is made: say so first, so a client knows at once whether anything
  // listens (as the library's OpenPort does) rather than at its first read.
  if (!ws.Send(api::WsStartedJson(0), false).ok()) return;
  client::ByteStream& stream = **s;
  std::thread in([&] {
    bool write_closed = false;
    for (;;) {
      auto msg = ws.Receive();
      if (!msg.ok() || !msg->has_value()) break;
      if (!(*msg)->binary) {
        // {"type":"eof"}: the client half-closed; the sandbox side reads end of file and may
        // still answer. Other text messages carry nothing here.
        auto c = api::ParseWsControl((*msg)->data);
        if (c.ok() && c->type == api::WsControl::Type::kEof && !write_closed) {
          write_closed = true;
          (void)stream.CloseWrite();
        }
        continue;
      }
      if (write_closed || !stream.Write((*msg)->data).ok()) break;
    }
    if (!write_closed) (void)stream.CloseWrite();
  });
  std::string buf(kPortChunk, '\0');
  for (;;) {
    auto n = stream.Read(std::span<char>(buf.data(), buf.size()));
    if (!n.ok()) {
      (void)ws.Send(api::WsErrorJson(n.error()), false);
      break;
    }
    if (*n == 0) break;
    if (!ws.Send(std::string_view(buf.data(), *n), true).ok()) break;
  }
  ws.Close(1000, "port closed");
  in.join();
}

Result<std::string> Service::EgressContainer(const std::string& id) const {
  if (options_.egress == nullptr) return NoEgressEnforcers();
  return api::ContainerNameForId(id);
}

Result<std::size_t> Service::EgressLogLast(const api::RouteMatch& m) {
  auto it = m.query.find("last");
  if (it == m.query.end()) return api::kDefaultEgressLogRecords;
  return static_cast<std::size_t>(
      AGVISOR_TRY(ParseUint(it->second, "last", api::kMaxEgressLogRecords)));
}

void Service::EgressLogWs(const std::string& container, std::size_t last, WebSocket& ws) {
  EgressHost& egress = *options_.egress;
  // Where following starts is read before the files: a record written in between comes twice
  // rather than never.
  auto cursor = egress.LastSeq(container);
  if (!cursor.ok()) return FailWs(ws, cursor.error(), 1008);
  auto first = egress.Log(container, last);
  if (!first.ok()) return FailWs(ws, first.error(), 1008);
  if (!ws.Send(api::WsStartedJson(0), false).ok()) return;
  for (const egress::Decision& d : *first) {
    if (!ws.Send(api::WsEgressRecordJson(d), false).ok()) return;
  }
  // The client's side carries nothing but its close, which ends the follow.
  std::atomic<bool> closed{false};
  std::thread in([&] {
    for (;;) {
      auto msg = ws.Receive();
      if (!msg.ok() || !msg->has_value()) break;
    }
    closed = true;
  });
  std::uint64_t seen = *cursor;
  while (!closed) {
    auto batch = egress.Since(container, seen);
    if (!batch.ok()) {
      // No longer served: the sandbox (and its network) was removed.
      (void)ws.Send(api::WsEndJson(), false);
      ws.Close(1000, "the sandbox's egress network is gone");
      break;
    }
    bool sent = true;
    for (const egress::Decision& d : *batch) {
      seen = d.seq;
      if (!(sent = ws.Send(api::WsEgressRecordJson(d), false).ok())) break;
    }
    if (!sent) break;
    // A poll of the ring (a lock and a copy of what is new): records reach a follower within
    // this, and a sandbox's burst is sent as one batch.
    std::this_thread::sleep_for(kEgressFollowPoll);
  }
  ws.Close(1000, "done");
  in.join();
}

void Service::WatchWs(client::SandboxHandle& sb, const std::string& path, bool recursive,
                      WebSocket& ws) {
  auto w = sb.Watch(path, recursive);
  if (!w.ok()) return FailWs(ws, w.error());
  if (!ws.Send(api::WsStartedJson(0), false).ok()) return;
  client::DirWatch& watch = **w;
  // The client's side carries nothing but its close, which ends the watch (Close wakes Next).
  std::thread in([&] {
    for (;;) {
      auto msg = ws.Receive();
      if (!msg.ok() || !msg->has_value()) break;
    }
    watch.Close();
  });
  for (;;) {
    // The events were checked by the channel (relative, bounded, no NUL): each becomes one
    // text message. A client that reads slowly holds this thread in Send, so the channel's
    // window stops the agent, whose bounded queue then reports an overflow.
    auto batch = watch.Next(std::chrono::seconds(60));
    if (!batch.ok()) {
      // Diagnosed by the handle: a broken channel of a sandbox that died says why.
      (void)ws.Send(api::WsErrorJson(batch.error().WithContext("watch " + path)), false);
      ws.Close(1011, "failed");
      break;
    }
    if (!batch->has_value()) {
      (void)ws.Send(api::WsEndJson(), false);
      ws.Close(1000, "watch ended");
      break;
    }
    bool sent = true;
    for (const WatchEvent& e : **batch) {
      if (!(sent = ws.Send(api::WsWatchEventJson(e), false).ok())) break;
    }
    if (!sent) break;
  }
  watch.Close();
  in.join();
}

}  // namespace agvisor::server
