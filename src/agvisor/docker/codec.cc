#include "agvisor/docker/codec.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cctype>

#include "agvisor/base/strings.h"

namespace agvisor::docker {
namespace json = boost::json;
namespace {

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// For messages: a caller's value in quotes, escaped as for a terminal (base/strings.h).
std::string Quote(std::string_view s) { return "\"" + EscapeForTerminal(s) + "\""; }

Result<void> ValidateName(std::string_view name, std::string_view what, std::size_t max_len) {
  auto bad = [&](std::string_view why) {
    return Error::InvalidArgument(std::string(what) + " name " + Quote(name) + ": " +
                                  std::string(why));
  };
  if (name.empty()) return bad("must not be empty");
  if (name.size() > max_len) return bad("longer than " + std::to_string(max_len) + " characters");
  if (!IsAlnum(name.front())) return bad("must start with a letter or digit");
  for (char c : name) {
    if (!IsAlnum(c) && c != '_' && c != '.' && c != '-') {
      return bad("may contain only letters, digits, '_', '.' and '-'");
    }
  }
  return Ok();
}

// ---- JSON reading: lenient about absent/null fields, strict about types; first error kept. ----

struct DecodeState {
  std::string what;
  std::string error;  // the first type error
};

class Obj {
 public:
  Obj(DecodeState* state, const json::value* v, std::string path)
      : state_(state), path_(std::move(path)) {
    if (v != nullptr && v->is_object()) {
      obj_ = &v->get_object();
    } else if (v != nullptr && !v->is_null()) {
      Fail(path_, "an object");
    }
  }

  const json::value* Raw(std::string_view key) const {
    if (obj_ == nullptr) return nullptr;
    const json::value* v = obj_->if_contains(json::string_view(key.data(), key.size()));
    return (v == nullptr || v->is_null()) ? nullptr : v;
  }

  std::string Str(std::string_view key) const {
    const json::value* v = Raw(key);
    if (v == nullptr) return {};
    if (!v->is_string()) {
      Fail(Path(key), "a string");
      return {};
    }
    return std::string(v->get_string().data(), v->get_string().size());
  }

  bool Bool(std::string_view key) const {
    const json::value* v = Raw(key);
    if (v == nullptr) return false;
    if (!v->is_bool()) {
      Fail(Path(key), "a boolean");
      return false;
    }
    return v->get_bool();
  }

  std::optional<std::int64_t> OptInt(std::string_view key) const {
    const json::value* v = Raw(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_int64()) return v->get_int64();
    if (v->is_uint64() && v->get_uint64() <= std::uint64_t{INT64_MAX}) {
      return static_cast<std::int64_t>(v->get_uint64());
    }
    if (v->is_double()) return static_cast<std::int64_t>(v->get_double());
    Fail(Path(key), "an integer");
    return std::nullopt;
  }
  std::int64_t Int(std::string_view key) const { return OptInt(key).value_or(0); }

  std::vector<std::string> Strs(std::string_view key) const {
    std::vector<std::string> out;
    const json::value* v = Raw(key);
    if (v == nullptr) return out;
    if (v->is_string()) {  // Docker sometimes sends a lone string where a list is expected
      out.emplace_back(v->get_string().data(), v->get_string().size());
      return out;
    }
    if (!v->is_array()) {
      Fail(Path(key), "an array of strings");
      return out;
    }
    for (const json::value& e : v->get_array()) {
      if (!e.is_string()) {
        Fail(Path(key), "an array of strings");
        return {};
      }
      out.emplace_back(e.get_string().data(), e.get_string().size());
    }
    return out;
  }

  std::map<std::string, std::string> StrMap(std::string_view key) const {
    std::map<std::string, std::string> out;
    const json::value* v = Raw(key);
    if (v == nullptr) return out;
    if (!v->is_object()) {
      Fail(Path(key), "an object of strings");
      return out;
    }
    for (const auto& kv : v->get_object()) {
      if (!kv.value().is_string()) {
        Fail(Path(key), "an object of strings");
        return {};
      }
      out.emplace(std::string(kv.key().data(), kv.key().size()),
                  std::string(kv.value().get_string().data(), kv.value().get_string().size()));
    }
    return out;
  }

  Obj Child(std::string_view key) const { return Obj(state_, Raw(key), Path(key)); }

  const json::array* Array(std::string_view key) const {
    const json::value* v = Raw(key);
    if (v == nullptr) return nullptr;
    if (!v->is_array()) {
      Fail(Path(key), "an array");
      return nullptr;
    }
    return &v->get_array();
  }

  // Reads each element of `array` (none when null) with `fn(const Obj&) -> T`; element i is
  // named "<path>[i]" in messages.
  template <typename Fn>
  static auto Each(DecodeState* state, const json::array* array, const std::string& path, Fn fn) {
    std::vector<std::decay_t<decltype(fn(std::declval<const Obj&>()))>> out;
    if (array == nullptr) return out;
    for (std::size_t i = 0; i < array->size(); ++i) {
      out.push_back(fn(Obj(state, &(*array)[i], path + "[" + std::to_string(i) + "]")));
    }
    return out;
  }

  // The elements of the array at `key` read with `fn`, as Each; empty when the key is absent.
  template <typename Fn>
  auto Items(std::string_view key, Fn fn) const {
    return Each(state_, Array(key), Path(key), fn);
  }

  DecodeState* state() const { return state_; }
  std::string Path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

 private:
  void Fail(const std::string& path, std::string_view expected) const {
    if (state_->error.empty()) {
      state_->error = "field " + (path.empty() ? std::string("(top)") : path) + ": expected " +
                      std::string(expected);
    }
  }

  DecodeState* state_;
  std::string path_;
  const json::object* obj_ = nullptr;
};

Result<json::value> Parse(std::string_view body, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) {
    return Error::Internal("decode docker " + std::string(what) +
                           ": invalid JSON: " + ec.message());
  }
  return v;
}

Error DecodeFailed(const DecodeState& state) {
  return Error::Internal("decode docker " + state.what + ": " + state.error);
}

// Decodes `body` as an object with `fn(Obj&) -> T`; any type error becomes kInternal.
template <typename T, typename Fn>
Result<T> DecodeObject(std::string_view body, std::string what, Fn fn) {
  json::value v = AGVISOR_TRY(Parse(body, what));
  DecodeState state{std::move(what), {}};
  if (!v.is_object()) {
    state.error = "expected a JSON object";
    return DecodeFailed(state);
  }
  Obj root(&state, &v, "");
  T out = fn(root);
  if (!state.error.empty()) return DecodeFailed(state);
  return out;
}

// Decodes `body` as an array whose elements are read with `fn(const Obj&) -> T`; any type error
// becomes kInternal.
template <typename T, typename Fn>
Result<std::vector<T>> DecodeArray(std::string_view body, std::string what, Fn fn) {
  json::value v = AGVISOR_TRY(Parse(body, what));
  DecodeState state{std::move(what), {}};
  if (!v.is_array()) {
    state.error = "expected a JSON array";
    return DecodeFailed(state);
  }
  std::vector<T> out = Obj::Each(&state, &v.get_array(), "", fn);
  if (!state.error.empty()) return DecodeFailed(state);
  return out;
}

std::string StripSlash(std::string s) {
  if (!s.empty() && s.front() == '/') s.erase(0, 1);
  return s;
}

// ---- JSON writing ----

json::array StrArray(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(json::string(s));
  return a;
}

json::object StrObject(const std::map<std::string, std::string>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

ErrorCode CodeFromMessage(std::string_view message, ErrorCode fallback) {
  const std::string m = ToLower(message);
  auto has = [&](std::string_view needle) { return m.find(needle) != std::string::npos; };
  if (has("no such ") || has("not found")) return ErrorCode::kNotFound;
  if (has("connection refused") || has("no such host") || has("i/o timeout") ||
      has("network is unreachable") || has("connection reset")) {
    return ErrorCode::kUnavailable;
  }
  if (has("already in use") || has("already exists") || has("conflict")) {
    return ErrorCode::kConflict;
  }
  if (has("permission denied") || has("unauthorized") || has("access denied")) {
    return ErrorCode::kPermissionDenied;
  }
  if (has("no space left") || has("out of memory") || has("cannot allocate memory")) {
    return ErrorCode::kResourceExhausted;
  }
  if (has("unknown runtime") || has("invalid ")) return ErrorCode::kInvalidArgument;
  return fallback;
}

}  // namespace

// ---- Validation ----

Result<void> ValidateContainerRef(std::string_view ref, std::string_view what) {
  // Docker's name charset also covers hex ids (full and abbreviated).
  return ValidateName(ref, what, 255);
}

Result<void> ValidateVolumeName(std::string_view name) { return ValidateName(name, "volume", 255); }

Result<void> ValidateExecId(std::string_view id) {
  if (id.size() != 64 || !std::all_of(id.begin(), id.end(), IsHex)) {
    return Error::InvalidArgument("exec id " + Quote(id) + ": expected 64 hex digits");
  }
  return Ok();
}

Result<void> ValidateImageRef(std::string_view ref) {
  auto bad = [&](std::string_view why) {
    return Error::InvalidArgument("image reference " + Quote(ref) + ": " + std::string(why));
  };
  if (ref.empty()) return bad("must not be empty");
  if (ref.size() > 512) return bad("longer than 512 characters");
  if (ref.front() == '-') return bad("must not start with '-'");
  if (!IsAlnum(ref.front())) return bad("must start with a letter or digit");
  for (char c : ref) {
    if (!IsAlnum(c) && std::string_view("_.:/@+-").find(c) == std::string_view::npos) {
      return bad("may contain only letters, digits and _ . : / @ + -");
    }
  }
  if (ref.find("..") != std::string_view::npos || ref.find("//") != std::string_view::npos) {
    return bad("must not contain \"..\" or \"//\"");
  }
  return Ok();
}

Result<void> ValidateSignal(std::string_view signal) {
  const bool ok = !signal.empty() && signal.size() <= 16 &&
                  std::all_of(signal.begin(), signal.end(), [](char c) {
                    return std::isupper(static_cast<unsigned char>(c)) ||
                           std::isdigit(static_cast<unsigned char>(c)) || c == '+' || c == '-';
                  });
  if (!ok) {
    return Error::InvalidArgument("signal " + Quote(signal) +
                                  ": expected a name (KILL, SIGTERM) or a number");
  }
  return Ok();
}

// ---- Targets ----

std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (IsAlnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      const auto b = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 0xf];
    }
  }
  return out;
}

std::string BuildQuery(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [k, v] : params) {
    out += out.empty() ? '?' : '&';
    out += PercentEncode(k);
    out += '=';
    out += PercentEncode(v);
  }
  return out;
}

std::string EncodeLabelFilters(const std::vector<std::string>& labels) {
  if (labels.empty()) return {};
  json::object o;
  o["label"] = StrArray(labels);
  return json::serialize(o);
}

std::string VersionedPath(ApiVersion version, std::string_view path) {
  return "/v" + version.ToString() + std::string(path);
}

// ---- Request bodies ----

Result<std::string> EncodeContainerCreate(const ContainerConfig& c, ApiVersion version) {
  if (c.image.empty()) return Error::InvalidArgument("create container: image is required");
  AGVISOR_RETURN_IF_ERROR(ValidateImageRef(c.image));
  const HostConfig& h = c.host_config;
  if (!h.annotations.empty() && version < kAnnotationsApiVersion) {
    return Error::Unsupported("create container: HostConfig.Annotations needs Docker Engine API " +
                              kAnnotationsApiVersion.ToString() +
                              " (Docker 24+), the daemon speaks " + version.ToString());
  }
  json::object o;
  o["Image"] = c.image;
  if (!c.cmd.empty()) o["Cmd"] = StrArray(c.cmd);
  if (!c.entrypoint.empty()) o["Entrypoint"] = StrArray(c.entrypoint);
  if (!c.env.empty()) o["Env"] = StrArray(c.env);
  if (!c.working_dir.empty()) o["WorkingDir"] = c.working_dir;
  if (!c.user.empty()) o["User"] = c.user;
  if (!c.labels.empty()) o["Labels"] = StrObject(c.labels);
  o["Tty"] = c.tty;
  o["OpenStdin"] = c.open_stdin;
  o["AttachStdin"] = c.attach_stdin;
  o["AttachStdout"] = c.attach_stdout;
  o["AttachStderr"] = c.attach_stderr;
  o["StdinOnce"] = c.stdin_once;
  if (c.network_disabled) o["NetworkDisabled"] = true;

  json::object hc;
  if (!h.runtime.empty()) hc["Runtime"] = h.runtime;
  if (h.nano_cpus != 0) hc["NanoCpus"] = h.nano_cpus;
  if (h.memory != 0) hc["Memory"] = h.memory;
  if (h.memory_swap) hc["MemorySwap"] = *h.memory_swap;
  if (h.pids_limit) hc["PidsLimit"] = *h.pids_limit;
  if (!h.network_mode.empty()) hc["NetworkMode"] = h.network_mode;
  if (!h.dns.empty()) hc["Dns"] = StrArray(h.dns);
  if (h.shm_size != 0) hc["ShmSize"] = h.shm_size;
  hc["AutoRemove"] = h.auto_remove;
  if (!h.binds.empty()) hc["Binds"] = StrArray(h.binds);
  if (!h.mounts.empty()) {
    json::array mounts;
    for (const Mount& m : h.mounts) {
      if (m.type != "volume" && m.type != "bind" && m.type != "tmpfs") {
        return Error::InvalidArgument("create container: mount type " + Quote(m.type) +
                                      ": expected volume, bind or tmpfs");
      }
      if (m.target.empty() || m.target.front() != '/') {
        return Error::InvalidArgument("create container: mount target " + Quote(m.target) +
                                      ": must be an absolute path");
      }
      json::object mo;
      mo["Type"] = m.type;
      if (!m.source.empty()) mo["Source"] = m.source;
      mo["Target"] = m.target;
      mo["ReadOnly"] = m.read_only;
      mounts.emplace_back(std::move(mo));
    }
    hc["Mounts"] = std::move(mounts);
  }
  if (!h.cap_drop.empty()) hc["CapDrop"] = StrArray(h.cap_drop);
  if (!h.cap_add.empty()) hc["CapAdd"] = StrArray(h.cap_add);
  if (!h.security_opt.empty()) hc["SecurityOpt"] = StrArray(h.security_opt);
  hc["ReadonlyRootfs"] = h.readonly_rootfs;
  if (!h.annotations.empty()) hc["Annotations"] = StrObject(h.annotations);
  hc["Privileged"] = h.privileged;
  if (h.init) hc["Init"] = true;
  if (!h.log_driver.empty()) {
    json::object lc;
    lc["Type"] = h.log_driver;
    lc["Config"] = json::object();
    hc["LogConfig"] = std::move(lc);
  }
  o["HostConfig"] = std::move(hc);
  return json::serialize(o);
}

Result<std::string> EncodeExecCreate(const ExecConfig& c) {
  if (c.cmd.empty()) return Error::InvalidArgument("create exec: cmd is required");
  json::object o;
  o["Cmd"] = StrArray(c.cmd);
  if (!c.env.empty()) o["Env"] = StrArray(c.env);
  if (!c.working_dir.empty()) o["WorkingDir"] = c.working_dir;
  if (!c.user.empty()) o["User"] = c.user;
  o["Tty"] = c.tty;
  o["AttachStdin"] = c.attach_stdin;
  o["AttachStdout"] = c.attach_stdout;
  o["AttachStderr"] = c.attach_stderr;
  o["Privileged"] = false;
  return json::serialize(o);
}

std::string EncodeExecStart(bool tty) {
  json::object o;
  o["Detach"] = false;
  o["Tty"] = tty;
  return json::serialize(o);
}

std::string EncodeVolumeCreate(std::string_view name,
                               const std::map<std::string, std::string>& labels) {
  json::object o;
  o["Name"] = json::string(json::string_view(name.data(), name.size()));
  o["Driver"] = "local";
  o["Labels"] = StrObject(labels);
  return json::serialize(o);
}

std::string EncodeNetworkCreate(const NetworkConfig& c) {
  json::object o;
  o["Name"] = json::string(json::string_view(c.name.data(), c.name.size()));
  o["Driver"] = "bridge";
  o["CheckDuplicate"] = true;
  o["Internal"] = c.internal;
  if (!c.bridge_name.empty()) {
    json::object opts;
    opts[std::string(kBridgeNameOption)] = json::string(c.bridge_name);
    o["Options"] = std::move(opts);
  }
  o["Labels"] = StrObject(c.labels);
  return json::serialize(o);
}

std::string EncodeLayeredImageConfig(const LayeredImage& image) {
  json::object config;
  if (!image.env.empty()) config["Env"] = StrArray(image.env);
  if (!image.working_dir.empty()) config["WorkingDir"] = image.working_dir;
  if (!image.user.empty()) config["User"] = image.user;
  if (!image.labels.empty()) config["Labels"] = StrObject(image.labels);
  std::vector<std::string> layers = image.base_layers;
  layers.push_back(image.layer_diff_id);
  json::object o;
  o["architecture"] = image.architecture;
  o["os"] = image.os;
  o["created"] = image.created;
  o["config"] = std::move(config);
  o["rootfs"] = json::object{{"type", "layers"}, {"diff_ids", StrArray(layers)}};
  return json::serialize(o);
}

std::string EncodeLayeredImageManifest(const LayeredImage& image, std::string_view config_name,
                                       std::string_view layer_name) {
  std::vector<std::string> files;
  for (std::size_t i = 0; i < image.base_layers.size(); ++i) {
    files.push_back("base-" + std::to_string(i) + "/layer.tar");
  }
  files.emplace_back(layer_name);
  json::object m;
  m["Config"] = std::string(config_name);
  m["RepoTags"] = StrArray({image.repo_tag});
  m["Layers"] = StrArray(files);
  return json::serialize(json::array{m});
}

// ---- Response bodies ----

Result<std::string> DecodeIdResponse(std::string_view body) {
  auto id = AGVISOR_TRY(
      DecodeObject<std::string>(body, "create response", [](const Obj& o) { return o.Str("Id"); }));
  if (id.empty())
    return Error::Internal("decode docker create response: no Id in " +
                           std::string(body.substr(0, 200)));
  return id;
}

Result<ContainerInfo> DecodeContainerInspect(std::string_view body) {
  return DecodeObject<ContainerInfo>(body, "container inspect", [](const Obj& o) {
    ContainerInfo c;
    c.id = o.Str("Id");
    c.name = StripSlash(o.Str("Name"));
    c.image = o.Str("Image");
    c.created = o.Str("Created");
    const Obj config = o.Child("Config");
    c.image_ref = config.Str("Image");
    c.labels = config.StrMap("Labels");
    c.cmd = config.Strs("Cmd");
    c.entrypoint = config.Strs("Entrypoint");
    c.env = config.Strs("Env");
    c.tty = config.Bool("Tty");
    c.open_stdin = config.Bool("OpenStdin");
    c.network_disabled = config.Bool("NetworkDisabled");
    const Obj s = o.Child("State");
    c.state.status = s.Str("Status");
    c.state.running = s.Bool("Running");
    c.state.paused = s.Bool("Paused");
    c.state.restarting = s.Bool("Restarting");
    c.state.oom_killed = s.Bool("OOMKilled");
    c.state.dead = s.Bool("Dead");
    c.state.exit_code = static_cast<int>(s.Int("ExitCode"));
    c.state.error = s.Str("Error");
    c.state.pid = s.Int("Pid");
    c.state.started_at = s.Str("StartedAt");
    c.state.finished_at = s.Str("FinishedAt");
    c.merged_dir = o.Child("GraphDriver").Child("Data").Str("MergedDir");
    const Obj h = o.Child("HostConfig");
    c.host_config.runtime = h.Str("Runtime");
    c.host_config.network_mode = h.Str("NetworkMode");
    c.host_config.nano_cpus = h.Int("NanoCpus");
    c.host_config.memory = h.Int("Memory");
    c.host_config.memory_swap = h.Int("MemorySwap");
    c.host_config.pids_limit = h.Int("PidsLimit");
    c.host_config.shm_size = h.Int("ShmSize");
    c.host_config.auto_remove = h.Bool("AutoRemove");
    c.host_config.readonly_rootfs = h.Bool("ReadonlyRootfs");
    c.host_config.privileged = h.Bool("Privileged");
    c.host_config.annotations = h.StrMap("Annotations");
    c.mounts = o.Items("Mounts", [](const Obj& m) {
      return MountPoint{m.Str("Type"), m.Str("Name"), m.Str("Source"), m.Str("Destination"),
                        m.Bool("RW")};
    });
    return c;
  });
}

Result<std::vector<ContainerSummary>> DecodeContainerList(std::string_view body) {
  return DecodeArray<ContainerSummary>(body, "container list", [](const Obj& o) {
    ContainerSummary s;
    s.id = o.Str("Id");
    for (std::string& n : o.Strs("Names")) s.names.push_back(StripSlash(std::move(n)));
    s.image = o.Str("Image");
    s.labels = o.StrMap("Labels");
    s.state = o.Str("State");
    s.status = o.Str("Status");
    s.created = o.Int("Created");
    return s;
  });
}

Result<ExecInfo> DecodeExecInspect(std::string_view body) {
  return DecodeObject<ExecInfo>(body, "exec inspect", [](const Obj& o) {
    ExecInfo e;
    e.id = o.Str("ID");
    e.container_id = o.Str("ContainerID");
    e.running = o.Bool("Running");
    if (auto code = o.OptInt("ExitCode"); code && !e.running) e.exit_code = static_cast<int>(*code);
    e.pid = o.Int("Pid");
    return e;
  });
}

Result<ContainerStats> DecodeContainerStats(std::string_view body) {
  return DecodeObject<ContainerStats>(body, "container stats", [](const Obj& o) {
    ContainerStats st;
    st.read = o.Str("read");
    auto u64 = [](std::int64_t v) { return v > 0 ? static_cast<std::uint64_t>(v) : 0; };
    const Obj cpu = o.Child("cpu_stats");
    const Obj pre = o.Child("precpu_stats");
    st.cpu_total_ns = u64(cpu.Child("cpu_usage").Int("total_usage"));
    st.online_cpus = static_cast<int>(cpu.Int("online_cpus"));
    if (st.online_cpus == 0) {
      if (const auto* per = cpu.Child("cpu_usage").Array("percpu_usage")) {
        st.online_cpus = static_cast<int>(per->size());
      }
    }
    const std::int64_t cpu_delta =
        cpu.Child("cpu_usage").Int("total_usage") - pre.Child("cpu_usage").Int("total_usage");
    const std::int64_t sys_delta = cpu.Int("system_cpu_usage") - pre.Int("system_cpu_usage");
    if (cpu_delta > 0 && sys_delta > 0 && pre.Int("system_cpu_usage") > 0) {
      st.cpu_percent = static_cast<double>(cpu_delta) / static_cast<double>(sys_delta) *
                       std::max(st.online_cpus, 1) * 100.0;
    }
    const Obj mem = o.Child("memory_stats");
    std::uint64_t usage = u64(mem.Int("usage"));
    std::int64_t inactive = mem.Child("stats").Int("total_inactive_file");  // cgroup v1
    if (inactive == 0) inactive = mem.Child("stats").Int("inactive_file");  // cgroup v2
    st.memory_bytes = u64(inactive) < usage ? usage - u64(inactive) : usage;
    st.memory_limit_bytes = u64(mem.Int("limit"));
    st.pids = u64(o.Child("pids_stats").Int("current"));
    st.pids_limit = u64(o.Child("pids_stats").Int("limit"));
    return st;
  });
}

Result<VersionInfo> DecodeVersion(std::string_view body) {
  auto v = AGVISOR_TRY(DecodeObject<VersionInfo>(body, "version", [](const Obj& o) {
    VersionInfo out;
    out.version = o.Str("Version");
    out.api_version = o.Str("ApiVersion");
    out.min_api_version = o.Str("MinAPIVersion");
    out.os = o.Str("Os");
    out.arch = o.Str("Arch");
    out.kernel = o.Str("KernelVersion");
    return out;
  }));
  if (v.api_version.empty()) {
    return Error::Internal("decode docker version: no ApiVersion (is this a Docker daemon?)");
  }
  return v;
}

Result<SystemInfo> DecodeInfo(std::string_view body) {
  return DecodeObject<SystemInfo>(body, "info", [](const Obj& o) {
    SystemInfo s;
    const Obj runtimes = o.Child("Runtimes");
    if (const json::value* rv = o.Raw("Runtimes"); rv != nullptr && rv->is_object()) {
      for (const auto& kv : rv->get_object()) {
        const std::string name(kv.key().data(), kv.key().size());
        const Obj r = runtimes.Child(name);
        s.runtimes[name] = RuntimeInfo{r.Str("path"), r.Strs("runtimeArgs")};
      }
    }
    s.default_runtime = o.Str("DefaultRuntime");
    s.cgroup_version = o.Str("CgroupVersion");
    s.cgroup_driver = o.Str("CgroupDriver");
    s.driver = o.Str("Driver");
    s.kernel_version = o.Str("KernelVersion");
    s.operating_system = o.Str("OperatingSystem");
    s.ncpu = static_cast<int>(o.Int("NCPU"));
    s.mem_total = o.Int("MemTotal");
    s.docker_root_dir = o.Str("DockerRootDir");
    s.server_version = o.Str("ServerVersion");
    s.security_options = o.Strs("SecurityOptions");
    return s;
  });
}

namespace {
VolumeInfo ReadVolume(const Obj& o) {
  VolumeInfo v;
  v.name = o.Str("Name");
  v.driver = o.Str("Driver");
  v.mountpoint = o.Str("Mountpoint");
  v.created_at = o.Str("CreatedAt");
  v.scope = o.Str("Scope");
  v.labels = o.StrMap("Labels");
  v.size = o.Child("UsageData").OptInt("Size");
  return v;
}
}  // namespace

namespace {
NetworkInfo ReadNetwork(const Obj& o) {
  NetworkInfo n;
  n.id = o.Str("Id");
  n.name = o.Str("Name");
  n.driver = o.Str("Driver");
  n.internal = o.Bool("Internal");
  n.bridge_name = o.StrMap("Options")[std::string(kBridgeNameOption)];
  n.labels = o.StrMap("Labels");
  const Obj ipam = o.Child("IPAM");
  if (const json::array* a = ipam.Array("Config"); a && !a->empty()) {
    const Obj first(ipam.state(), &(*a)[0], "IPAM.Config[0]");
    n.subnet = first.Str("Subnet");
    n.gateway = first.Str("Gateway");
  }
  return n;
}
}  // namespace

Result<NetworkInfo> DecodeNetwork(std::string_view body) {
  return DecodeObject<NetworkInfo>(body, "network", ReadNetwork);
}

Result<std::vector<NetworkInfo>> DecodeNetworkList(std::string_view body) {
  return DecodeArray<NetworkInfo>(body, "network list", ReadNetwork);
}

Result<VolumeInfo> DecodeVolume(std::string_view body) {
  return DecodeObject<VolumeInfo>(body, "volume", ReadVolume);
}

Result<std::vector<VolumeInfo>> DecodeVolumeList(std::string_view body) {
  return DecodeObject<std::vector<VolumeInfo>>(
      body, "volume list", [](const Obj& o) { return o.Items("Volumes", ReadVolume); });
}

Result<std::vector<VolumeInfo>> DecodeDiskUsageVolumes(std::string_view body) {
  return DecodeObject<std::vector<VolumeInfo>>(
      body, "disk usage", [](const Obj& o) { return o.Items("Volumes", ReadVolume); });
}

Result<ImageInfo> DecodeImageInspect(std::string_view body) {
  return DecodeObject<ImageInfo>(body, "image inspect", [](const Obj& o) {
    ImageInfo i;
    i.id = o.Str("Id");
    i.repo_tags = o.Strs("RepoTags");
    i.created = o.Str("Created");
    i.size = o.Int("Size");
    i.architecture = o.Str("Architecture");
    i.os = o.Str("Os");
    const Obj c = o.Child("Config");
    i.cmd = c.Strs("Cmd");
    i.entrypoint = c.Strs("Entrypoint");
    i.env = c.Strs("Env");
    i.working_dir = c.Str("WorkingDir");
    i.user = c.Str("User");
    i.labels = c.StrMap("Labels");
    i.layers = o.Child("RootFS").Strs("Layers");
    return i;
  });
}

Result<std::vector<std::string>> DecodeEventActions(std::string_view body) {
  std::vector<std::string> out;
  while (!body.empty()) {
    const auto nl = body.find('\n');
    const std::string_view line = body.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
    out.push_back(AGVISOR_TRY(
        DecodeObject<std::string>(line, "event", [](const Obj& o) { return o.Str("Action"); })));
  }
  return out;
}

Result<std::vector<ImageSummary>> DecodeImageList(std::string_view body) {
  return DecodeArray<ImageSummary>(body, "image list", [](const Obj& o) {
    ImageSummary s;
    s.id = o.Str("Id");
    s.repo_tags = o.Strs("RepoTags");
    s.labels = o.StrMap("Labels");
    s.created = o.Int("Created");
    s.size = o.Int("Size");
    return s;
  });
}

Result<int> DecodeWaitResponse(std::string_view body, std::string_view container) {
  struct Wait {
    std::int64_t code;
    std::string error;
  };
  auto w = AGVISOR_TRY(DecodeObject<Wait>(body, "wait response", [](const Obj& o) {
    return Wait{o.Int("StatusCode"), o.Child("Error").Str("Message")};
  }));
  if (!w.error.empty()) {
    return Error::Internal("docker wait container " + std::string(container) + ": " + w.error);
  }
  return static_cast<int>(w.code);
}

Error DecodeDaemonError(int http_status, std::string_view body, std::string_view operation,
                        std::string_view object) {
  std::string message;
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (!ec && v.is_object()) {
    if (const json::value* m = v.get_object().if_contains("message"); m && m->is_string()) {
      message.assign(m->get_string().data(), m->get_string().size());
    }
  }
  if (message.empty()) {
    message = std::string(body.substr(0, 500));
    while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) {
      message.pop_back();
    }
    if (message.empty()) message = "HTTP status " + std::to_string(http_status);
  }
  // Docker answers 500 for most failures; its message tells them apart.
  const ErrorCode code =
      ErrorCodeForHttpStatus(http_status).value_or(CodeFromMessage(message, ErrorCode::kInternal));
  std::string text = "docker " + std::string(operation);
  if (!object.empty()) text += " " + std::string(object);
  Error e(code, text + ": " + message);
  e.set_http_status(http_status);
  return e;
}

// ---- Progress ----

Result<void> ProgressDecoder::DecodeLine(std::string_view line, const OnMessage& on_message) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  if (line.empty()) return Ok();
  const std::string prefix = "docker " + operation_ + (object_.empty() ? "" : " " + object_);
  json::value v = AGVISOR_TRY(Parse(line, operation_ + " progress"));
  DecodeState state{operation_ + " progress", {}};
  const Obj o(&state, &v, "");
  std::string error = o.Str("error");
  if (error.empty()) error = o.Child("errorDetail").Str("message");
  if (!error.empty()) {
    Error e(CodeFromMessage(error, ErrorCode::kInternal), prefix + ": " + error);
    error_ = e;
    return e;
  }
  ProgressMessage m{o.Str("id"), o.Str("status"), o.Str("progress")};
  if (!state.error.empty()) {
    error_ = DecodeFailed(state);
    return *error_;
  }
  if (!m.status.empty()) last_status_ = m.status;
  if (on_message) on_message(m);
  return Ok();
}

Result<void> ProgressDecoder::Feed(std::string_view chunk, const OnMessage& on_message) {
  if (error_) return *error_;
  partial_.append(chunk);
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    auto r = DecodeLine(std::string_view(partial_).substr(start, nl - start), on_message);
    if (!r.ok()) return r;
  }
  partial_.erase(0, start);
  return Ok();
}

Result<void> ProgressDecoder::Finish(const OnMessage& on_message) {
  if (error_) return *error_;
  std::string rest = std::move(partial_);
  partial_.clear();
  return DecodeLine(rest, on_message);
}

}  // namespace agvisor::docker
