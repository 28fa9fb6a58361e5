#include "agvisor/e2b/rest.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <vector>

#include "agvisor/api/codec.h"
#include "agvisor/base/private_file.h"
#include "agvisor/base/strings.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/client/place.h"
#include "agvisor/e2b/auth.h"
#include "agvisor/e2b/errors.h"
#include "agvisor/e2b/ids.h"
#include "agvisor/e2b/list.h"
#include "agvisor/e2b/metrics.h"
#include "agvisor/e2b/network.h"
#include "agvisor/sandbox/snapshot.h"
#include "agvisor/sandbox/spec.h"
#include "agvisor/server/log.h"

namespace agvisor::e2b {

namespace json = boost::json;
using server::HttpResponse;

namespace {

// A REST body is a few kilobytes of JSON; more is refused before it is read (a client cannot
// make agvisord hold --max-body bytes per request here).
constexpr std::size_t kMaxBodyBytes = 1 << 20;
constexpr std::int64_t kDefaultTimeoutSeconds = 300;  // E2B's default sandbox timeout
constexpr std::int64_t kMaxTimeoutSeconds = 86400;    // E2B's longest (24 h)
constexpr std::size_t kMaxMetadataEntries = 64;
constexpr std::size_t kMaxMetadataBytes = 4096;  // a key or value
constexpr std::size_t kMaxEnvEntries = 256;
constexpr std::size_t kMaxEnvBytes = 32768;  // a name or value
// E2B's `base` template runs on 2 vCPUs and 512 MiB.
constexpr double kCpus = 2;
constexpr int kMemoryMb = 512;

std::int64_t Now() { return static_cast<std::int64_t>(std::time(nullptr)); }

std::string Rfc3339(std::int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The body of a REST request, at most kMaxBodyBytes, parsed as a JSON object ("" = {}).
Result<json::object> ReadObject(server::HttpStream& stream) {
  std::string body;
  char buf[16384];
  for (;;) {
    auto n = stream.ReadBody(buf);
    if (!n.ok()) return n.error();
    if (*n == 0) break;
    body.append(buf, *n);
    if (body.size() > kMaxBodyBytes) {
      return Error::ResourceExhausted("the request body is over " + std::to_string(kMaxBodyBytes) +
                                      " bytes");
    }
  }
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return json::object{};
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return Error::InvalidArgument("the request body is not JSON: " + ec.message());
  if (!v.is_object()) return Error::InvalidArgument("the request body must be a JSON object");
  return std::move(v.as_object());
}

// A string -> string map field (metadata, envVars), bounded.
Result<std::map<std::string, std::string>> StringMap(const json::object& body,
                                                     std::string_view field,
                                                     std::size_t max_entries,
                                                     std::size_t max_bytes) {
  std::map<std::string, std::string> out;
  auto* v = body.if_contains(field);
  if (!v || v->is_null()) return out;
  if (!v->is_object()) {
    return Error::InvalidArgument(std::string(field) + " must be an object of strings");
  }
  if (v->as_object().size() > max_entries) {
    return Error::InvalidArgument(std::string(field) + " has more than " +
                                  std::to_string(max_entries) + " entries");
  }
  for (const auto& [k, val] : v->as_object()) {
    if (!val.is_string()) {
      return Error::InvalidArgument(std::string(field) + "." + std::string(k) +
                                    " must be a string");
    }
    if (k.empty() || k.size() > max_bytes || val.as_string().size() > max_bytes) {
      return Error::InvalidArgument(std::string(field) + ": keys must be 1-" +
                                    std::to_string(max_bytes) + " bytes, values at most that");
    }
    out[std::string(k)] = std::string(val.as_string());
  }
  return out;
}

// A timeout field in seconds (E2B sends whole seconds), within 1..kMaxTimeoutSeconds.
Result<std::optional<std::int64_t>> TimeoutField(const json::object& body, std::string_view field) {
  auto* v = body.if_contains(field);
  if (!v || v->is_null()) return std::optional<std::int64_t>{};
  if (!v->is_number()) return Error::InvalidArgument(std::string(field) + " must be seconds");
  double d = v->to_number<double>();
  if (!(d >= 1) || d > static_cast<double>(kMaxTimeoutSeconds) || std::floor(d) != d) {
    return Error::InvalidArgument(std::string(field) + " must be whole seconds from 1 to " +
                                  std::to_string(kMaxTimeoutSeconds) + " (24 hours)");
  }
  return std::optional<std::int64_t>(static_cast<std::int64_t>(d));
}

bool IsPaused(const SandboxInfo& info) { return info.state == "paused"; }

// The create request's network options (network.h maps them).
Result<E2bNetwork> ParseNetwork(const json::object& body, std::optional<bool> allow_internet) {
  E2bNetwork n;
  n.allow_internet_access = allow_internet;
  if (auto* iam = body.if_contains("iam"); iam && !iam->is_null()) n.unsupported.push_back("iam");
  auto* v = body.if_contains("network");
  if (!v || v->is_null()) return n;
  if (!v->is_object()) return Error::InvalidArgument("network must be an object");
  const json::object& o = v->as_object();
  for (auto [field, list] : {std::pair{"allowOut", &n.allow_out}, {"denyOut", &n.deny_out}}) {
    auto* l = o.if_contains(field);
    if (!l || l->is_null()) continue;
    if (!l->is_array() || l->as_array().size() > egress::kMaxEgressRules) {
      return Error::InvalidArgument(std::string("network.") + field +
                                    " must be a list of at most " +
                                    std::to_string(egress::kMaxEgressRules) + " strings");
    }
    for (const auto& e : l->as_array()) {
      if (!e.is_string()) {
        return Error::InvalidArgument(std::string("network.") + field + " must hold strings");
      }
      list->emplace_back(e.as_string());
    }
  }
  for (const char* f : {"rules", "egressProxy", "maskRequestHost", "httpsPorts"}) {
    if (auto* x = o.if_contains(f); x && !x->is_null()) n.unsupported.push_back(std::string(f));
  }
  if (auto* x = o.if_contains("allowPublicTraffic"); x && x->is_bool() && !x->as_bool()) {
    n.unsupported.push_back("allowPublicTraffic false");
  }
  return n;
}

}  // namespace

// A record as kept in the state directory.
std::string RecordJson(const Record& r) {
  json::object o;
  o["templateID"] = r.template_id;
  json::object meta, envs;
  for (const auto& [k, v] : r.metadata) meta[k] = v;
  for (const auto& [k, v] : r.envs) envs[k] = v;
  o["metadata"] = std::move(meta);
  o["envVars"] = std::move(envs);
  o["startedAt"] = r.started_at;
  o["endAt"] = r.end_at;
  o["autoPause"] = r.auto_pause;
  o["autoResume"] = r.auto_resume;
  if (r.hold_paused) o["holdPaused"] = true;
  if (r.allow_internet_access) o["allowInternetAccess"] = *r.allow_internet_access;
  o["cpuCount"] = r.cpu_count;
  o["memoryMB"] = r.memory_mb;
  return json::serialize(o);
}

std::optional<Record> RecordFromJson(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::object& o = v.as_object();
  Record r;
  auto str = [&](const char* k) {
    auto* x = o.if_contains(k);
    return x && x->is_string() ? std::string(x->as_string()) : std::string();
  };
  auto num = [&](const char* k) -> std::int64_t {
    auto* x = o.if_contains(k);
    return x && x->is_int64() ? x->as_int64() : 0;
  };
  auto flag = [&](const char* k) {
    auto* x = o.if_contains(k);
    return x && x->is_bool() && x->as_bool();
  };
  r.template_id = str("templateID");
  for (auto [k, m] : {std::pair{"metadata", &r.metadata}, {"envVars", &r.envs}}) {
    if (auto* x = o.if_contains(k); x && x->is_object()) {
      for (const auto& [name, val] : x->as_object()) {
        if (val.is_string()) (*m)[std::string(name)] = std::string(val.as_string());
      }
    }
  }
  r.started_at = num("startedAt");
  r.end_at = num("endAt");
  r.auto_pause = flag("autoPause");
  r.auto_resume = flag("autoResume");
  r.hold_paused = flag("holdPaused");
  if (auto* x = o.if_contains("allowInternetAccess"); x && x->is_bool()) {
    r.allow_internet_access = x->as_bool();
  }
  r.cpu_count = static_cast<int>(num("cpuCount"));
  r.memory_mb = static_cast<int>(num("memoryMB"));
  return r;
}

struct Instance {
  std::weak_ptr<client::SandboxHandle> handle;
  std::string id;
};

struct Rest::State {
  std::mutex mu;
  std::map<std::string, Record> records;  // by E2B id
  // Instance ids (container ids) of the sandboxes whose token was made, by E2B id, with the
  // handle they were read from: a token is derived from it (auth.h).
  std::map<std::string, Instance> instances;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::string dir;  // E2bOptions::state_dir
  MetricsBook metrics;

  // Keeps `id`'s record in the state directory (under mu): a file per sandbox, written whole
  // and renamed into place, mode 0600 (envs may hold secrets). Best effort: a record that
  // cannot be written is logged and kept in memory.
  void Save(const std::string& id) {
    if (dir.empty()) return;
    auto it = records.find(id);
    if (it == records.end()) return;
    const std::string path = dir + "/" + id + ".json", tmp = path + ".tmp";
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    const std::string text = RecordJson(it->second);
    if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
        ::rename(tmp.c_str(), path.c_str()) != 0) {
      server::LogEvent("warn", "e2b: cannot keep a sandbox's record",
                       {{"path", path}, {"error", std::strerror(errno)}});
    }
  }
  void Erase(const std::string& id) {
    records.erase(id);
    instances.erase(id);
    metrics.Forget(id);
    if (!dir.empty()) ::unlink((dir + "/" + id + ".json").c_str());
  }
  // A thread of the Rest: `tick(lock)` once a second with mu held (it may let go of it while it
  // calls out), until the Rest stops.
  static std::thread EverySecond(std::shared_ptr<State> self,
                                 std::function<void(std::unique_lock<std::mutex>&)> tick) {
    return std::thread([self = std::move(self), tick = std::move(tick)] {
      std::unique_lock lock(self->mu);
      while (!self->stopping) {
        self->stop_cv.wait_for(lock, std::chrono::seconds(1));
        if (self->stopping) break;
        tick(lock);
      }
    });
  }
  // Reads the records kept by an earlier run.
  void Load() {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (!name.ends_with(".json")) continue;
      const std::string id = name.substr(0, name.size() - 5);
      auto text = ReadPrivateFile(dir + "/" + name, "E2B record");
      if (!IsSandboxId(id) || !text.ok()) continue;
      if (auto r = RecordFromJson(*text)) records[id] = std::move(*r);
    }
    ::closedir(d);
  }
};

Rest::Rest(std::shared_ptr<client::HandleCache> sandboxes, E2bOptions options)
    : sandboxes_(std::move(sandboxes)),
      options_(std::move(options)),
      state_(std::make_shared<State>()) {
  state_->dir = options_.state_dir;
  if (!state_->dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(state_->dir, ec);
    ::chmod(state_->dir.c_str(), 0700);
    state_->Load();
  }
}

Rest::~Rest() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->stop_cv.notify_all();
  if (sweep_.joinable()) sweep_.join();
  if (sampler_.joinable()) sampler_.join();
}

namespace {

// The sandbox behind `id`, and its current info. Errors: kInvalidArgument (a bad id), kNotFound
// (no such sandbox, or one that ended).
struct Found {
  std::string container;
  std::shared_ptr<client::SandboxHandle> handle;
  SandboxInfo info;
};

Result<Found> Find(client::HandleCache& sandboxes, std::string_view id) {
  std::string container = AGVISOR_TRY(ContainerForId(id));
  auto handle = sandboxes.Get(container);
  if (!handle.ok()) {
    if (handle.error().code() == ErrorCode::kNotFound) {
      return Error::NotFound("sandbox " + std::string(id) + " not found");
    }
    return handle.error();
  }
  auto info = (*handle)->Info();
  if (!info.ok() || !info->running) {
    sandboxes.Forget(container);
    if (!info.ok() && info.error().code() != ErrorCode::kNotFound &&
        info.error().code() != ErrorCode::kSandboxDied) {
      return info.error();
    }
    return Error::NotFound("sandbox " + std::string(id) + " not found (it ended)");
  }
  return Found{container, *handle, *info};
}

}  // namespace

Result<Access> Rest::AccessOf(const std::string& id) {
  std::string container = AGVISOR_TRY(ContainerForId(id));
  auto handle = sandboxes_->Get(container);
  if (!handle.ok()) {
    if (handle.error().code() == ErrorCode::kNotFound) {
      return Error::NotFound("sandbox " + id + " not found");
    }
    return handle.error();
  }
  Access a{container, "", {}};
  std::string instance;
  {
    std::lock_guard lock(state_->mu);
    auto it = state_->records.find(id);
    if (it != state_->records.end()) a.envs = it->second.envs;
    // The instance is asked of the sandbox once per handle: a later sandbox of the same name
    // gets a new handle (the cache forgets ended ones), hence its own token.
    auto inst = state_->instances.find(id);
    if (inst != state_->instances.end() && inst->second.handle.lock() == *handle) {
      instance = inst->second.id;
    }
  }
  if (instance.empty()) {
    auto info = (*handle)->Info();
    if (!info.ok() || !info->running) {
      sandboxes_->Forget(container);
      return Error::NotFound("sandbox " + id + " not found (it ended)");
    }
    instance = info->container_id;
    std::lock_guard lock(state_->mu);
    state_->instances[id] = Instance{*handle, instance};
  }
  // A call to a paused sandbox wakes it: the daemon's handles resume before they act (agvisor's
  // rule for every door), unless it was made with autoResume false (mount.cc asks HeldPaused).
  a.token = EnvdAccessToken(options_.secret, id, instance);
  return a;
}

namespace {

// The sandbox JSON of create/connect (E2B's Sandbox schema).
std::string SandboxJson(std::string_view id, std::string_view template_id, std::string_view token,
                        std::string_view domain) {
  json::object o;
  o["sandboxID"] = id;
  o["templateID"] = template_id;
  o["clientID"] = "agvisor";
  o["envdVersion"] = kEnvdVersion;
  o["envdAccessToken"] = token;
  o["trafficAccessToken"] = nullptr;
  if (domain.empty()) {
    o["domain"] = nullptr;
  } else {
    o["domain"] = domain;
  }
  return json::serialize(o);
}

}  // namespace

bool Rest::HasRecord(const std::string& id) {
  std::lock_guard lock(state_->mu);
  return state_->records.count(id) != 0;
}

bool Rest::HeldPaused(const std::string& id) {
  {
    std::lock_guard lock(state_->mu);
    auto it = state_->records.find(id);
    if (it == state_->records.end() || !it->second.hold_paused) return false;
  }
  auto container = ContainerForId(id);
  if (!container.ok()) return false;
  auto handle = sandboxes_->Get(*container);
  if (!handle.ok()) return false;
  auto running = (*handle)->RefuseIfPaused();
  return !running.ok() && running.error().code() == ErrorCode::kConflict;
}

std::vector<std::string> Rest::KnownIds() {
  std::lock_guard lock(state_->mu);
  std::vector<std::string> ids;
  for (const auto& [id, instance] : state_->instances) ids.push_back(id);
  return ids;
}

void Rest::StartSweep() {
  sweep_ = State::EverySecond(state_, [this, state = state_.get()](auto& lock) {
    const std::int64_t now = Now();
    std::vector<std::pair<std::string, bool>> due;  // id, pause
    for (auto& [id, r] : state->records) {
      if (r.end_at != 0 && r.end_at <= now) {
        due.emplace_back(id, r.auto_pause);
        r.end_at = 0;
      }
    }
    for (const auto& [id, pause] : due) {
      if (pause) {
        state->Save(id);
      } else {
        state->Erase(id);
      }
    }
    lock.unlock();
    for (const auto& [id, pause] : due) {
      const std::string container = std::string(kNamePrefix) + id;
      if (pause) {
        (void)sandboxes_->place().Pause(container);
      } else {
        sandboxes_->Forget(container);
        (void)sandboxes_->place().Remove(container, true);
      }
    }
    lock.lock();
  });
}

namespace {

// One metrics sample of a running (or paused) sandbox, now. Errors: Place::Stats's.
Result<MetricSample> TakeSample(client::Place& place, const SandboxInfo& info) {
  auto stats = AGVISOR_TRY(place.Stats(info));
  MetricSample m;
  m.at = Now();
  m.cpu_count = stats.online_cpus;
  m.cpu_used_pct = stats.cpu_percent / std::max(1, stats.online_cpus);
  m.mem_used = stats.memory_bytes;
  m.mem_total = stats.memory_limit_bytes;
  return m;
}

json::object MetricJson(const MetricSample& s) {
  json::object m;
  m["timestamp"] = Rfc3339(s.at);
  m["timestampUnix"] = s.at;
  m["cpuUsedPct"] = s.cpu_used_pct;
  m["cpuCount"] = s.cpu_count;
  m["memUsed"] = s.mem_used;
  m["memTotal"] = s.mem_total;
  m["memCache"] = 0;
  m["diskUsed"] = 0;
  m["diskTotal"] = 0;
  return m;
}

}  // namespace

void Rest::StartMetricsSampler() {
  sampler_ = State::EverySecond(state_, [this, state = state_.get()](auto& lock) {
    const std::vector<std::string> due = state->metrics.Due(Now());
    lock.unlock();
    for (const auto& id : due) {
      auto found = Find(*sandboxes_, id);
      // A paused sandbox has nothing to report (E2B keeps no metrics of one either), and Docker's
      // stats of a frozen container wait for a second reading that does not come.
      if (found.ok() && IsPaused(found->info)) continue;
      auto sample = found.ok() ? TakeSample(sandboxes_->place(), found->info)
                               : Result<MetricSample>(found.error());
      std::lock_guard relock(state->mu);
      if (sample.ok()) {
        state->metrics.Add(id, *sample);
      } else if (sample.error().code() == ErrorCode::kNotFound) {
        state->metrics.Forget(id);
      }
    }
    lock.lock();
  });
}

HttpResponse Rest::Metrics(const std::string& id, const api::RouteMatch& match) {
  auto range = ParseMetricsRange(match.query);
  if (!range.ok()) return ErrorResponse(range.error());
  auto found = Find(*sandboxes_, id);
  if (!found.ok()) return ErrorResponse(found.error());
  // A paused sandbox: the samples taken while it ran (see the sampler).
  std::optional<MetricSample> sample;
  if (!IsPaused(found->info)) {
    auto taken = TakeSample(sandboxes_->place(), found->info);
    if (!taken.ok()) return ErrorResponse(taken.error());
    sample = *taken;
  }
  json::array out;
  {
    std::lock_guard lock(state_->mu);
    if (sample) state_->metrics.Add(id, *sample);
    state_->metrics.Asked(id, Now());
    for (const auto& s : state_->metrics.Range(id, range->start, range->end)) {
      out.push_back(MetricJson(s));
    }
  }
  return JsonResponse(json::serialize(out));
}

namespace {

HttpResponse NotServed(std::string_view what, std::string_view why) {
  return ErrorResponse(501, std::string(what) + " is not available on agvisor: " +
                                std::string(why) + " (docs/e2b.md)");
}

}  // namespace

HttpResponse Rest::ListSandboxes(const api::RouteMatch& match) {
  auto q = ParseListQuery(match.query);
  if (!q.ok()) return ErrorResponse(q.error());
  auto list = sandboxes_->place().List();
  if (!list.ok()) return ErrorResponse(list.error());
  std::vector<ListRow> rows;
  std::vector<json::object> bodies;
  {
    std::lock_guard lock(state_->mu);
    for (const auto& s : *list) {
      auto sid = IdForContainer(s.container_name);
      if (!sid || !s.running) continue;
      const std::string st = IsPaused(s) ? "paused" : "running";
      auto rec = state_->records.find(*sid);
      const Record* r = rec == state_->records.end() ? nullptr : &rec->second;
      const std::string template_id = r ? r->template_id : s.image;
      const std::int64_t started = r && r->started_at ? r->started_at : s.created_unix;
      if (!ListWants(*q, st, template_id, r ? &r->metadata : nullptr, started)) continue;
      json::object o;
      o["sandboxID"] = *sid;
      o["templateID"] = template_id;
      o["clientID"] = "agvisor";
      o["state"] = st;
      o["cpuCount"] = r ? r->cpu_count : 0;
      o["memoryMB"] = r ? r->memory_mb : 0;
      o["diskSizeMB"] = 0;
      o["envdVersion"] = kEnvdVersion;
      json::object meta;
      if (r) {
        for (const auto& [k, v] : r->metadata) meta[k] = v;
      }
      o["metadata"] = std::move(meta);
      o["startedAt"] = Rfc3339(started);
      o["endAt"] = Rfc3339(r && r->end_at ? r->end_at : started + kMaxTimeoutSeconds);
      rows.push_back({*sid, started});
      bodies.push_back(std::move(o));
    }
  }
  const ListPage page = PageOf(rows, *q);
  json::array out;
  for (std::size_t i : page.rows) out.push_back(std::move(bodies[i]));
  HttpResponse resp = JsonResponse(json::serialize(out));
  if (!page.next_token.empty()) resp.headers.emplace_back("x-next-token", page.next_token);
  return resp;
}

HttpResponse Rest::Serve(const server::HttpRequest& req, const api::RouteMatch& match,
                         server::HttpStream& stream) {
  const std::string path(match.route->path.substr(kApiPrefix.size()));
  const std::string& method = req.method;
  auto id_it = match.params.find("id");
  const std::string id = id_it == match.params.end() ? "" : id_it->second;
  auto fail = [](const Error& e) { return ErrorResponse(e); };
  auto body = ReadObject(stream);
  if (!body.ok()) {
    return body.error().code() == ErrorCode::kResourceExhausted
               ? ErrorResponse(413, body.error().message())
               : fail(body.error());
  }
  auto domain = [&]() -> std::string {
    if (!options_.domain.empty()) return options_.domain;
    return DomainFromHost(req.header("host"));
  };

  if (method == "POST" && (path == "/sandboxes" || path == "/v2/sandboxes")) {
    Record r;
    auto tmpl = body->if_contains("templateID");
    if (!tmpl || !tmpl->is_string() || tmpl->as_string().empty()) {
      return ErrorResponse(400, "templateID must be a template name, e.g. \"base\"");
    }
    r.template_id = std::string(tmpl->as_string());
    SandboxSpec spec;
    if (r.template_id == "base") {
      spec.image = options_.base_image;
    } else {
      if (auto v = ValidateImage(r.template_id); !v.ok()) {
        return ErrorResponse(400, "templateID " + v.error().message());
      }
      spec.image = r.template_id;
    }
    auto metadata = StringMap(*body, "metadata", kMaxMetadataEntries, kMaxMetadataBytes);
    if (!metadata.ok()) return fail(metadata.error());
    r.metadata = std::move(*metadata);
    auto envs = StringMap(*body, "envVars", kMaxEnvEntries, kMaxEnvBytes);
    if (!envs.ok()) return fail(envs.error());
    r.envs = std::move(*envs);
    auto timeout = TimeoutField(*body, "timeout");
    if (!timeout.ok()) return fail(timeout.error());
    if (auto* v = body->if_contains("volumeMounts"); v && !v->is_null()) {
      if (!v->is_array() || !v->as_array().empty()) {
        return NotServed("volumeMounts", "volumes are a later step");
      }
    }
    if (auto* v = body->if_contains("mcp"); v && !v->is_null()) {
      return NotServed("mcp", "agvisord serves MCP itself at /mcp (docs/mcp.md)");
    }
    if (auto* v = body->if_contains("autoPause"); v && v->is_bool()) r.auto_pause = v->as_bool();
    if (auto* v = body->if_contains("autoResume"); v && v->is_object()) {
      if (auto* e = v->as_object().if_contains("enabled"); e && e->is_bool()) {
        r.auto_resume = e->as_bool();
        r.hold_paused = !e->as_bool();
      }
    }
    if (r.auto_resume && !r.auto_pause) {
      return ErrorResponse(400, "autoResume needs lifecycle.onTimeout 'pause'");
    }
    if (auto* v = body->if_contains("allow_internet_access"); v && !v->is_null()) {
      if (!v->is_bool()) return ErrorResponse(400, "allow_internet_access must be true or false");
      r.allow_internet_access = v->as_bool();
    }
    auto parsed = ParseNetwork(*body, r.allow_internet_access);
    if (!parsed.ok()) return fail(parsed.error());
    auto net = MapNetwork(*parsed);
    if (!net.ok()) return fail(net.error());
    spec.network = net->network;
    spec.egress = net->egress;
    spec.limits.cpus = kCpus;
    spec.limits.memory = std::to_string(kMemoryMb) + "m";
    // E2B's templates run commands as `user` with passwordless sudo (docs/security.md,
    // "Capabilities": root inside is exec's user 'root' anyway).
    spec.allow_setuid = true;
    r.cpu_count = static_cast<int>(kCpus);
    r.memory_mb = kMemoryMb;
    spec.labels["e2b.template"] = r.template_id.size() <= 256 ? r.template_id : "";
    auto created = sandboxes_->place().Create(spec);
    // A missing image is the core's kNotFound, worded for every door (how to pull or build it):
    // 404, the SDK's NotFoundError.
    if (!created.ok()) return fail(created.error().WithContext("template " + r.template_id));
    auto handle = sandboxes_->Put(std::move(created->handle));
    auto sid = IdForContainer(handle->container_name());
    auto info = handle->Info();
    if (!sid || !info.ok()) {
      (void)sandboxes_->place().Remove(handle->container_name(), true);
      return ErrorResponse(500, "the new sandbox has no E2B id or info");
    }
    r.started_at = Now();
    r.end_at = r.started_at + timeout->value_or(kDefaultTimeoutSeconds);
    const std::string token = EnvdAccessToken(options_.secret, *sid, info->container_id);
    {
      std::lock_guard lock(state_->mu);
      state_->records[*sid] = r;
      state_->Save(*sid);
      state_->instances[*sid] = Instance{handle, info->container_id};
    }
    return JsonResponse(SandboxJson(*sid, r.template_id, token, domain()), 201);
  }

  if (method == "GET" && (path == "/sandboxes" || path == "/v2/sandboxes")) {
    return ListSandboxes(match);
  }

  if (path == "/sandboxes/{id}" && method == "GET") {
    auto found = Find(*sandboxes_, id);
    if (!found.ok()) return fail(found.error());
    json::object o;
    Record r;
    bool known = false;
    {
      std::lock_guard lock(state_->mu);
      auto it = state_->records.find(id);
      if (it != state_->records.end()) r = it->second, known = true;
    }
    o["sandboxID"] = id;
    o["templateID"] = known ? r.template_id : found->info.image;
    o["clientID"] = "agvisor";
    o["state"] = IsPaused(found->info) ? "paused" : "running";
    o["cpuCount"] = r.cpu_count;
    o["memoryMB"] = r.memory_mb;
    o["diskSizeMB"] = 0;
    o["envdVersion"] = kEnvdVersion;
    json::object meta;
    for (const auto& [k, v] : r.metadata) meta[k] = v;
    o["metadata"] = std::move(meta);
    const std::int64_t started = known ? r.started_at : found->info.created_unix;
    o["startedAt"] = Rfc3339(started);
    o["endAt"] = Rfc3339(known && r.end_at ? r.end_at : started + kMaxTimeoutSeconds);
    if (r.allow_internet_access) o["allowInternetAccess"] = *r.allow_internet_access;
    o["lifecycle"] =
        json::object{{"onTimeout", r.auto_pause ? "pause" : "kill"}, {"autoResume", r.auto_resume}};
    const std::string d = domain();
    if (!d.empty()) o["domain"] = d;
    return JsonResponse(json::serialize(o));
  }

  if (path == "/sandboxes/{id}" && method == "DELETE") {
    auto container = ContainerForId(id);
    if (!container.ok()) return fail(container.error());
    auto found = Find(*sandboxes_, id);
    if (!found.ok()) return fail(found.error());
    sandboxes_->Forget(*container);
    if (auto r = sandboxes_->place().Remove(*container, true); !r.ok()) return fail(r.error());
    std::lock_guard lock(state_->mu);
    state_->Erase(id);
    return {204, "", "", {}};
  }

  if ((path == "/sandboxes/{id}/timeout" || path == "/sandboxes/{id}/refreshes") &&
      method == "POST") {
    auto seconds = TimeoutField(*body, path.ends_with("timeout") ? "timeout" : "duration");
    if (!seconds.ok()) return fail(seconds.error());
    auto found = Find(*sandboxes_, id);
    if (!found.ok()) return fail(found.error());
    std::lock_guard lock(state_->mu);
    auto& r = state_->records[id];
    if (r.started_at == 0) r.started_at = found->info.created_unix;
    r.end_at = Now() + seconds->value_or(kDefaultTimeoutSeconds);
    state_->Save(id);
    return {204, "", "", {}};
  }

  if (path == "/sandboxes/{id}/pause" && method == "POST") {
    auto found = Find(*sandboxes_, id);
    if (!found.ok()) return fail(found.error());
    if (IsPaused(found->info)) return ErrorResponse(409, "sandbox " + id + " is already paused");
    if (auto r = sandboxes_->place().Pause(found->container); !r.ok()) return fail(r.error());
    return {204, "", "", {}};
  }

  if ((path == "/sandboxes/{id}/resume" || path == "/sandboxes/{id}/connect" ||
       path == "/v2/sandboxes/{id}/connect") &&
      method == "POST") {
    auto seconds = TimeoutField(*body, "timeout");
    if (!seconds.ok()) return fail(seconds.error());
    if (auto* m = body->if_contains("memory"); m && m->is_bool() && !m->as_bool()) {
      return NotServed("onResume 'reboot'",
                       "a paused agvisor sandbox keeps its memory; resume it as it was");
    }
    auto found = Find(*sandboxes_, id);
    if (!found.ok()) return fail(found.error());
    const bool paused = IsPaused(found->info);
    if (path == "/sandboxes/{id}/resume" && !paused) {
      return ErrorResponse(409, "sandbox " + id + " is not paused");
    }
    if (paused) {
      if (auto r = sandboxes_->place().Resume(found->container); !r.ok()) return fail(r.error());
    }
    std::string template_id = found->info.image;
    {
      std::lock_guard lock(state_->mu);
      auto& r = state_->records[id];
      if (r.started_at == 0) r.started_at = found->info.created_unix;
      if (r.template_id.empty()) r.template_id = found->info.image;
      // Connecting never shortens the timeout (E2B's rule); resuming restarts it.
      const std::int64_t want = Now() + seconds->value_or(kDefaultTimeoutSeconds);
      if (paused || r.end_at < want) r.end_at = want;
      template_id = r.template_id;
      state_->instances[id] = Instance{found->handle, found->info.container_id};
      state_->Save(id);
    }
    const std::string token = EnvdAccessToken(options_.secret, id, found->info.container_id);
    return JsonResponse(SandboxJson(id, template_id, token, domain()), paused ? 201 : 200);
  }

  if (path == "/sandboxes/{id}/metrics" && method == "GET") return Metrics(id, match);

  if (path == "/sandboxes/{id}/network" && method == "PUT") {
    return NotServed("updateNetwork",
                     "a sandbox's network is chosen at create; agvisor's egress policy of a "
                     "running sandbox is changed with `agvisor egress set`");
  }
  if (path == "/sandboxes/{id}/snapshots" || path == "/snapshots" ||
      path == "/sandboxes/{id}/fork" || (path == "/templates/{id}" && method == "DELETE")) {
    return ServeSnapshots(method, path, id, match, *body, domain());
  }
  if (path.starts_with("/templates") || path.starts_with("/v2/templates") ||
      path.starts_with("/v3/templates")) {
    return NotServed("template building",
                     "agvisor runs images of the host; build one with `agvisor image build` or "
                     "`docker build`, then pass its name as the template");
  }
  if (path.starts_with("/volumes")) {
    return NotServed("volumes", "E2B volumes are not mapped onto agvisor yet");
  }
  if (path.starts_with("/secrets")) {
    return NotServed("secrets",
                     "E2B's secrets are not mapped onto agvisor's brokered secrets "
                     "(`agvisor create --secret`, docs/egress.md)");
  }
  return ErrorResponse(404, "no such E2B route: " + method + " " + path);
}

// ---- Snapshots and forks (docs/e2b.md): E2B's calls onto client::Place's verbs ----

namespace {

// A snapshot's E2B id: "snapshot:TAG", what Sandbox.create takes as a template (the sandbox
// core resolves it, as any door's image).
std::string SnapshotId(std::string_view image) {
  return std::string(kSnapshotImagePrefix) + std::string(image.substr(image.rfind(':') + 1));
}

json::object SnapshotEntry(const std::string& snapshot_id, std::string_view tag) {
  return {{"snapshotID", snapshot_id}, {"names", json::array{json::string(tag)}}};
}

}  // namespace

HttpResponse Rest::ServeSnapshots(const std::string& method, const std::string& path,
                                  const std::string& id, const api::RouteMatch& match,
                                  const json::object& body, const std::string& domain) {
  auto fail = [](const Error& e) { return ErrorResponse(e); };
  client::Place& place = sandboxes_->place();
  if (path == "/sandboxes/{id}/snapshots" && method == "POST") {
    auto found = Find(*sandboxes_, id);
    if (!found.ok()) return fail(found.error());
    SnapshotOptions o;
    if (auto* n = body.if_contains("name"); n && !n->is_null()) {
      if (!n->is_string()) return ErrorResponse(400, "name must be a string");
      o.image = std::string(n->as_string());  // checked by the core: a tag
    } else {
      o.image = "e2b-" + id + "-" + std::to_string(Now());
    }
    o.include_workspace = true;  // E2B's snapshot is the sandbox's whole file system
    auto r = found->handle->Snapshot(o);
    if (!r.ok()) return fail(r.error());
    const std::string sid = SnapshotId(r->image);
    return JsonResponse(
        json::serialize(SnapshotEntry(sid, sid.substr(kSnapshotImagePrefix.size()))), 201);
  }
  if (path == "/snapshots" && method == "GET") {
    auto query = [&](const char* k) {
      auto it = match.query.find(k);
      return it == match.query.end() ? std::string() : it->second;
    };
    std::string of;  // the source's name as its snapshots' label says it
    if (const std::string sid = query("sandboxID"); !sid.empty()) {
      auto container = ContainerForId(sid);
      if (!container.ok()) return fail(container.error());
      of = *container;
    }
    const std::string name = query("name"), after = query("nextToken");
    // E2B's page: 1-1000 (its list's bounds), all of them when the caller gives no limit.
    auto asked = api::QueryBytes(match.query, "limit");
    if (!asked.ok()) return fail(asked.error());
    if (*asked && (**asked == 0 || **asked > 1000))
      return ErrorResponse(400, "limit must be 1-1000");
    const std::uint64_t limit = asked->value_or(~std::uint64_t{0});
    auto list = place.ListSnapshots();
    if (!list.ok()) return fail(list.error());
    json::array out;  // ListSnapshots sorts by tag: the page token is the last tag sent
    HttpResponse resp = JsonResponse("");
    std::string last;
    for (const SnapshotInfo& s : *list) {
      // A named source's label is its name, an anonymous one's its container name.
      if (!of.empty() && s.of != of && std::string(kNamePrefix) + s.of != of) continue;
      if (!name.empty() && s.tag != name && SnapshotId(s.image) != name) continue;
      if (!after.empty() && s.tag <= after) continue;
      if (out.size() == limit) {
        resp.headers.emplace_back("x-next-token", last);
        break;
      }
      out.push_back(SnapshotEntry(SnapshotId(s.image), s.tag));
      last = s.tag;
    }
    resp.body = json::serialize(out);
    return resp;
  }
  if (path == "/templates/{id}" && method == "DELETE") {
    // Sandbox.deleteSnapshot(id): only a snapshot goes (the core refuses any other image);
    // 404 makes the SDK answer false.
    if (auto r = place.RemoveSnapshot(id); !r.ok()) return fail(r.error());
    return {204, "", "", {}};
  }
  if (path == "/sandboxes/{id}/fork" && method == "POST") {
    auto found = Find(*sandboxes_, id);
    if (!found.ok()) return fail(found.error());
    auto timeout = TimeoutField(body, "timeout");
    if (!timeout.ok()) return fail(timeout.error());
    ForkOptions o;
    if (auto* c = body.if_contains("count"); c && !c->is_null()) {
      if (!c->is_int64() || c->as_int64() < 1 || c->as_int64() > kMaxForkCount) {
        return ErrorResponse(400, "count must be 1-" + std::to_string(kMaxForkCount));
      }
      o.count = static_cast<int>(c->as_int64());
    }
    // Each fork is a named sandbox whose name is an E2B id: "<id>-<6 hex>-N" (lower-case hex: a
    // fork's names differ from one fork call to the next).
    auto suffix = RandomHex(3);
    if (!suffix.ok()) return fail(suffix.error());
    o.prefix = id + "-" + *suffix;
    o.image = "e2b-fork-" + id + "-" + std::to_string(Now());
    Record source;
    {
      std::lock_guard lock(state_->mu);
      if (auto it = state_->records.find(id); it != state_->records.end()) source = it->second;
    }
    // The forks run as E2B's create makes sandboxes; one whose source was made without
    // internet access gets none either (docs/e2b.md says what else is not carried over).
    o.spec.limits.cpus = kCpus;
    o.spec.limits.memory = std::to_string(kMemoryMb) + "m";
    o.spec.allow_setuid = true;  // as create's
    if (source.allow_internet_access == false) o.spec.network = "none";
    auto forked = place.Fork(found->container, o);
    if (!forked.ok()) return fail(forked.error());
    const std::string template_id = SnapshotId(forked->snapshot.image);
    json::array out;
    for (client::Created& c : forked->sandboxes) {
      auto handle = sandboxes_->Put(std::move(c.handle));
      auto sid = IdForContainer(handle->container_name());
      auto info = handle->Info();
      if (!sid || !info.ok()) {
        out.push_back(json::object{
            {"error", json::object{{"code", 500}, {"message", "the fork has no E2B id or info"}}}});
        continue;
      }
      Record r = source;
      r.template_id = template_id;
      r.started_at = Now();
      r.end_at = r.started_at + timeout->value_or(kDefaultTimeoutSeconds);
      r.cpu_count = static_cast<int>(kCpus);
      r.memory_mb = kMemoryMb;
      {
        std::lock_guard lock(state_->mu);
        state_->records[*sid] = r;
        state_->Save(*sid);
        state_->instances[*sid] = Instance{handle, info->container_id};
      }
      const std::string token = EnvdAccessToken(options_.secret, *sid, info->container_id);
      out.push_back(
          json::object{{"sandbox", json::parse(SandboxJson(*sid, template_id, token, domain))}});
    }
    return JsonResponse(json::serialize(out));
  }
  return ErrorResponse(404, "no such E2B route: " + method + " " + path);
}

}  // namespace agvisor::e2b
