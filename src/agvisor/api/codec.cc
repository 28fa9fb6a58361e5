#include "agvisor/api/codec.h"

#include <sys/stat.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>
#include <type_traits>

namespace agvisor::api {
namespace {

namespace json = boost::json;

Error Bad(std::string_view field, std::string_view what) {
  return Error::InvalidArgument(std::string(field) + ": " + std::string(what));
}

Result<json::object> ParseObject(std::string_view body, std::string_view what) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return json::object();
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) {
    return Error::InvalidArgument(std::string(what) + ": the body is not valid JSON (" +
                                  ec.message() + ")");
  }
  if (!v.is_object()) {
    return Error::InvalidArgument(std::string(what) + ": the body must be a JSON object");
  }
  return std::move(v.as_object());
}

Result<void> OnlyKnown(const json::object& o, std::string_view what,
                       std::initializer_list<std::string_view> known) {
  for (const auto& kv : o) {
    bool ok = false;
    for (auto k : known) ok = ok || kv.key() == k;
    if (!ok) {
      std::string list;
      for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return Error::InvalidArgument(std::string(what) + ": unknown field \"" +
                                    std::string(kv.key()) + "\" (known: " + list + ")");
    }
  }
  return Ok();
}

Result<std::string> GetString(const json::value& v, std::string_view field) {
  if (!v.is_string()) return Bad(field, "must be a string");
  return std::string(v.as_string());
}

Result<double> GetNumber(const json::value& v, std::string_view field) {
  if (v.is_int64()) return static_cast<double>(v.as_int64());
  if (v.is_uint64()) return static_cast<double>(v.as_uint64());
  if (v.is_double()) return v.as_double();
  return Bad(field, "must be a number");
}

Result<std::int64_t> GetInt(const json::value& v, std::string_view field) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64() &&
      v.as_uint64() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return static_cast<std::int64_t>(v.as_uint64());
  }
  if (v.is_double() && std::trunc(v.as_double()) == v.as_double() &&
      std::abs(v.as_double()) < 9e15) {
    return static_cast<std::int64_t>(v.as_double());
  }
  return Bad(field, "must be a whole number");
}

Result<bool> GetBool(const json::value& v, std::string_view field) {
  if (!v.is_bool()) return Bad(field, "must be true or false");
  return v.as_bool();
}

Result<std::vector<std::string>> GetStringList(const json::value& v, std::string_view field) {
  if (!v.is_array()) return Bad(field, "must be an array of strings");
  std::vector<std::string> out;
  for (const auto& e : v.as_array()) {
    if (!e.is_string()) return Bad(field, "must be an array of strings");
    out.emplace_back(e.as_string());
  }
  return out;
}

// "env": {"K": "V"} or ["K=V", ...].
Result<std::vector<std::string>> GetEnv(const json::value& v) {
  if (v.is_array()) return GetStringList(v, "env");
  if (!v.is_object())
    return Bad("env", "must be an object {\"KEY\": \"value\"} or [\"KEY=value\"]");
  std::vector<std::string> out;
  for (const auto& kv : v.as_object()) {
    if (!kv.value().is_string()) return Bad("env", "values must be strings");
    out.push_back(std::string(kv.key()) + "=" + std::string(kv.value().as_string()));
  }
  return out;
}

// "argv" or "command" (exactly one).
Result<std::vector<std::string>> GetArgv(const json::object& o) {
  const json::value* argv = o.if_contains("argv");
  const json::value* command = o.if_contains("command");
  if (argv && command) return Bad("argv", "give either \"argv\" or \"command\", not both");
  if (argv) {
    auto list = AGVISOR_TRY(GetStringList(*argv, "argv"));
    if (list.empty()) return Bad("argv", "must not be empty");
    return list;
  }
  if (command) {
    auto c = AGVISOR_TRY(GetString(*command, "command"));
    return std::vector<std::string>{"sh", "-c", c};
  }
  return Bad("argv", "missing: give \"argv\" (a list) or \"command\" (run with sh -c)");
}

std::string Serialize(const json::value& v) { return json::serialize(v); }

json::object EntryObject(const FileEntry& e) {
  json::object o;
  o["name"] = SanitizeUtf8(e.name);
  std::string_view kind = "other";
  switch (e.kind) {
    case FileKind::kFile:
      kind = "file";
      break;
    case FileKind::kDir:
      kind = "dir";
      break;
    case FileKind::kSymlink:
      kind = "symlink";
      break;
    default:
      break;
  }
  o["kind"] = kind;
  o["mode"] = e.mode & 07777;
  o["size"] = e.size;
  o["mtime_unix_ms"] = e.mtime_unix_ms;
  if (!e.link_target.empty()) o["link_target"] = SanitizeUtf8(e.link_target);
  return o;
}

constexpr std::string_view kB64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

struct SignalName {
  std::string_view name;
  int number;
};
constexpr SignalName kSignals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},   {"STOP", SIGSTOP},
    {"CONT", SIGCONT}, {"ALRM", SIGALRM}, {"WINCH", SIGWINCH},
};

}  // namespace

// ---- Errors ----

namespace {

// How an error code stands in an HTTP answer: its status and its error body's "code".
struct HttpError {
  int status;
  std::string_view slug;
};

HttpError HttpErrorFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return {400, "invalid_argument"};
    case ErrorCode::kNotFound:
      return {404, "not_found"};
    case ErrorCode::kConflict:
      return {409, "conflict"};
    case ErrorCode::kUnavailable:
      return {503, "unavailable"};
    case ErrorCode::kTimeout:
      return {504, "timeout"};
    case ErrorCode::kPermissionDenied:
      return {403, "permission_denied"};
    case ErrorCode::kResourceExhausted:
      return {507, "resource_exhausted"};
    case ErrorCode::kUnsupported:
      return {501, "unsupported"};
    case ErrorCode::kSandboxDied:
      return {410, "sandbox_died"};
    case ErrorCode::kInternal:
      return {500, "internal"};
  }
  return {500, "internal"};
}

}  // namespace

int HttpStatusFor(ErrorCode code) { return HttpErrorFor(code).status; }

std::string_view ErrorSlug(ErrorCode code) { return HttpErrorFor(code).slug; }

ErrorCode ErrorCodeFromSlug(std::string_view slug) {
  for (auto c : {ErrorCode::kInvalidArgument, ErrorCode::kNotFound, ErrorCode::kConflict,
                 ErrorCode::kUnavailable, ErrorCode::kTimeout, ErrorCode::kPermissionDenied,
                 ErrorCode::kResourceExhausted, ErrorCode::kUnsupported, ErrorCode::kSandboxDied}) {
    if (ErrorSlug(c) == slug) return c;
  }
  return ErrorCode::kInternal;
}

std::string ErrorJson(ErrorCode code, std::string_view message) {
  return ErrorJsonSlug(ErrorSlug(code), message);
}

std::string ErrorJsonSlug(std::string_view slug, std::string_view message) {
  json::object e;
  e["code"] = slug;
  e["message"] = SanitizeUtf8(message);
  json::object o;
  o["error"] = std::move(e);
  return Serialize(o);
}

std::optional<Error> DecodeErrorJson(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::value* e = v.as_object().if_contains("error");
  if (!e || !e->is_object()) return std::nullopt;
  const json::value* code = e->as_object().if_contains("code");
  const json::value* msg = e->as_object().if_contains("message");
  if (!code || !code->is_string() || !msg || !msg->is_string()) return std::nullopt;
  return Error(ErrorCodeFromSlug(code->as_string()), std::string(msg->as_string()));
}

// ---- Bytes ----

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    std::uint32_t n = (static_cast<std::uint8_t>(in[i]) << 16) |
                      (static_cast<std::uint8_t>(in[i + 1]) << 8) |
                      static_cast<std::uint8_t>(in[i + 2]);
    out.push_back(kB64[(n >> 18) & 63]);
    out.push_back(kB64[(n >> 12) & 63]);
    out.push_back(kB64[(n >> 6) & 63]);
    out.push_back(kB64[n & 63]);
  }
  if (std::size_t rest = in.size() - i; rest > 0) {
    std::uint32_t n = static_cast<std::uint8_t>(in[i]) << 16;
    if (rest == 2) n |= static_cast<std::uint8_t>(in[i + 1]) << 8;
    out.push_back(kB64[(n >> 18) & 63]);
    out.push_back(kB64[(n >> 12) & 63]);
    out.push_back(rest == 2 ? kB64[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view text, std::string_view what) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return Bad(what, "is not valid base64 (wrong length)");
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    auto pos = kB64.find(c);
    if (pos == std::string_view::npos) {
      return Bad(what,
                 "is not valid base64 (unexpected character; standard alphabet A-Z a-z "
                 "0-9 + /, '=' padding)");
    }
    acc = (acc << 6) | static_cast<std::uint32_t>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    std::uint32_t min = 0;
    if (c < 0x80) {
      out.push_back(s[i++]);
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= s.size();
    std::uint32_t cp = len > 0 ? (c & (0xff >> (len + 1))) : 0;
    for (std::size_t k = 1; ok && k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    ok = ok && cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xef\xbf\xbd");
      ++i;
    }
  }
  return out;
}

// ---- Sandboxes ----

std::string SandboxIdFor(std::string_view container_name) {
  if (!container_name.empty() && container_name.front() == '/') container_name.remove_prefix(1);
  if (container_name.starts_with(kNamePrefix)) container_name.remove_prefix(kNamePrefix.size());
  return std::string(container_name);
}

Result<std::string> ContainerNameForId(std::string_view id) {
  if (auto r = ValidateName(id); !r.ok()) {
    return Error::InvalidArgument("sandbox id '" + SanitizeUtf8(id) +
                                  "' is invalid: ids are names ([A-Za-z0-9][A-Za-z0-9_.-]*, at "
                                  "most 63 characters) as GET /v1/sandboxes lists them");
  }
  return std::string(kNamePrefix) + std::string(id);
}

namespace {
Result<std::vector<std::string>> GetStrings(const json::object& o, std::string_view key,
                                            std::string_view field) {
  std::vector<std::string> out;
  const json::value* v = o.if_contains(key);
  if (!v) return out;
  if (!v->is_array()) return Bad(field, "must be an array of strings");
  for (const auto& e : v->as_array()) out.push_back(AGVISOR_TRY(GetString(e, field)));
  return out;
}

// {"allow_domains": [...], "allow_cidrs": [...], "ports": [...], "deny_domains": [...]}
Result<egress::EgressRules> ParseEgressRules(const json::value& v) {
  if (!v.is_object())
    return Bad("egress",
               "must be an object (allow_domains, allow_cidrs, ports, deny_domains, mode)");
  const auto& o = v.as_object();
  AGVISOR_RETURN_IF_ERROR(
      OnlyKnown(o, "egress", {"allow_domains", "allow_cidrs", "ports", "deny_domains", "mode"}));
  egress::EgressRules r;
  if (const json::value* m = o.if_contains("mode"); m && !m->is_null())
    r.mode = AGVISOR_TRY(GetString(*m, "egress.mode"));
  r.allow_domains = AGVISOR_TRY(GetStrings(o, "allow_domains", "egress.allow_domains"));
  r.allow_cidrs = AGVISOR_TRY(GetStrings(o, "allow_cidrs", "egress.allow_cidrs"));
  r.deny_domains = AGVISOR_TRY(GetStrings(o, "deny_domains", "egress.deny_domains"));
  if (const json::value* p = o.if_contains("ports")) {
    if (!p->is_array()) return Bad("egress.ports", "must be an array of port numbers");
    for (const auto& e : p->as_array()) {
      const std::int64_t n = AGVISOR_TRY(GetInt(e, "egress.ports"));
      if (n < 1 || n > 65535) return Bad("egress.ports", std::to_string(n) + " is not 1..65535");
      r.ports.push_back(static_cast<std::uint16_t>(n));
    }
  }
  return r;
}

// [{"name", "hosts": [...], "header", "value"}]: a create's brokered secrets ("value" absent:
// the operator's file, by name). Checked by ValidateSpec; never echoed in any answer.
Result<std::vector<SecretSpec>> ParseSecrets(const json::value& v) {
  if (!v.is_array()) return Bad("secrets", "must be an array of {name, hosts, header, value}");
  std::vector<SecretSpec> out;
  for (const auto& e : v.as_array()) {
    if (!e.is_object())
      return Bad("secrets", "each must be an object {name, hosts, header, value}");
    const auto& o = e.as_object();
    AGVISOR_RETURN_IF_ERROR(OnlyKnown(o, "secrets[]", {"name", "hosts", "header", "value"}));
    SecretSpec sec;
    if (auto* x = o.if_contains("name")) sec.name = AGVISOR_TRY(GetString(*x, "secrets[].name"));
    sec.hosts = AGVISOR_TRY(GetStrings(o, "hosts", "secrets[].hosts"));
    if (auto* x = o.if_contains("header"); x && !x->is_null()) {
      sec.header = AGVISOR_TRY(GetString(*x, "secrets[].header"));
    }
    if (auto* x = o.if_contains("value"); x && !x->is_null()) {
      sec.value = AGVISOR_TRY(GetString(*x, "secrets[].value"));
    }
    out.push_back(std::move(sec));
  }
  return out;
}

// The SandboxSpec fields shared by sandbox and pool requests.
Result<void> ParseSpecFields(const json::object& o, SandboxSpec& s) {
  if (auto* v = o.if_contains("egress"); v && !v->is_null())
    s.egress = AGVISOR_TRY(ParseEgressRules(*v));
  if (auto* v = o.if_contains("image")) s.image = AGVISOR_TRY(GetString(*v, "image"));
  if (auto* v = o.if_contains("gui")) s.gui = AGVISOR_TRY(GetBool(*v, "gui"));
  if (auto* v = o.if_contains("allow_setuid")) {
    s.allow_setuid = AGVISOR_TRY(GetBool(*v, "allow_setuid"));
  }
  if (auto* v = o.if_contains("network")) s.network = AGVISOR_TRY(GetString(*v, "network"));
  if (auto* v = o.if_contains("runtime")) s.runtime = AGVISOR_TRY(GetString(*v, "runtime"));
  // Checked by ValidateSpec ("systrap" or "ptrace"); null or absent = the default.
  if (auto* v = o.if_contains("platform"); v && !v->is_null()) {
    s.platform = AGVISOR_TRY(GetString(*v, "platform"));
  }
  if (auto* v = o.if_contains("warm_shells"); v && !v->is_null()) {
    // Range-checked by ValidateSpec; clamped here only so the int conversion cannot wrap.
    s.warm_shells = static_cast<int>(
        std::clamp<std::int64_t>(AGVISOR_TRY(GetInt(*v, "warm_shells")), -1, 1 << 20));
  }
  if (auto* v = o.if_contains("labels")) {
    if (!v->is_object()) return Bad("labels", "must be an object of strings");
    for (const auto& kv : v->as_object()) {
      if (!kv.value().is_string()) return Bad("labels", "values must be strings");
      s.labels[std::string(kv.key())] = std::string(kv.value().as_string());
    }
  }
  if (auto* v = o.if_contains("limits")) {
    if (!v->is_object()) return Bad("limits", "must be an object");
    const auto& l = v->as_object();
    AGVISOR_RETURN_IF_ERROR(OnlyKnown(l, "limits", {"cpus", "memory", "pids", "shm", "disk"}));
    if (auto* x = l.if_contains("cpus")) s.limits.cpus = AGVISOR_TRY(GetNumber(*x, "limits.cpus"));
    if (auto* x = l.if_contains("memory")) {
      s.limits.memory = AGVISOR_TRY(GetString(*x, "limits.memory"));
    }
    if (auto* x = l.if_contains("pids")) s.limits.pids = AGVISOR_TRY(GetInt(*x, "limits.pids"));
    if (auto* x = l.if_contains("shm"); x && !x->is_null()) {
      s.limits.shm = AGVISOR_TRY(GetString(*x, "limits.shm"));
    }
    if (auto* x = l.if_contains("disk")) s.limits.disk = AGVISOR_TRY(GetString(*x, "limits.disk"));
  }
  return Ok();
}
}  // namespace

Result<CreateRequest> ParseCreateRequest(std::string_view body) {
  auto o = AGVISOR_TRY(ParseObject(body, "create sandbox"));
  AGVISOR_RETURN_IF_ERROR(
      OnlyKnown(o, "create sandbox",
                {"image", "gui", "limits", "network", "lifetime", "idle_ttl", "idle_action", "name",
                 "runtime", "labels", "pool", "egress", "warm_shells", "platform", "wait",
                 "cold_create", "secrets", "allow_setuid"}));
  CreateRequest req;
  SandboxSpec& s = req.spec;
  AGVISOR_RETURN_IF_ERROR(ParseSpecFields(o, s));
  if (auto* v = o.if_contains("secrets"); v && !v->is_null()) {
    s.secrets = AGVISOR_TRY(ParseSecrets(*v));
  }
  if (auto* v = o.if_contains("name"); v && !v->is_null()) {
    s.name = AGVISOR_TRY(GetString(*v, "name"));
  }
  if (auto* v = o.if_contains("pool"); v && !v->is_null()) {
    req.pool = AGVISOR_TRY(GetString(*v, "pool"));
  }
  if (auto* v = o.if_contains("lifetime"); v && !v->is_null()) {
    s.lifetime = AGVISOR_TRY(GetInt(*v, "lifetime"));
  }
  if (auto* v = o.if_contains("idle_ttl"); v && !v->is_null()) {
    s.idle_ttl = AGVISOR_TRY(GetInt(*v, "idle_ttl"));
  }
  if (auto* v = o.if_contains("idle_action"); v && !v->is_null()) {
    s.idle_action = AGVISOR_TRY(GetString(*v, "idle_action"));
  }
  if (req.pool) {
    for (const auto& kv : o) {
      if (kv.key() != "pool" && kv.key() != "lifetime" && kv.key() != "idle_ttl" &&
          kv.key() != "wait" && kv.key() != "cold_create") {
        return Bad("pool",
                   "a sandbox from a pool has the pool's specification: only \"lifetime\", "
                   "\"idle_ttl\", \"wait\" and \"cold_create\" may come with \"pool\" (got \"" +
                       std::string(kv.key()) + "\")");
      }
    }
    if (auto* v = o.if_contains("wait"); v && !v->is_null()) {
      const double wait = AGVISOR_TRY(GetNumber(*v, "wait"));
      if (!(wait >= 0 && wait <= 3600)) return Bad("wait", "must be 0..3600 seconds");
      req.pool_wait = std::chrono::milliseconds(static_cast<std::int64_t>(wait * 1000));
    }
    if (auto* v = o.if_contains("cold_create")) {
      req.pool_cold_create = AGVISOR_TRY(GetBool(*v, "cold_create"));
    }
  } else if (o.contains("wait") || o.contains("cold_create")) {
    return Bad("pool", "\"wait\" and \"cold_create\" come only with \"pool\"");
  }
  return req;
}

Result<void> ValidatePoolName(std::string_view name) {
  if (ValidateName(name).ok()) return Ok();
  return Bad("name", "pool name '" + SanitizeUtf8(name) +
                         "' is invalid ([A-Za-z0-9][A-Za-z0-9_.-]*, at most 63 characters)");
}

Result<CreatePoolRequest> ParseCreatePoolRequest(std::string_view body) {
  auto o = AGVISOR_TRY(ParseObject(body, "create pool"));
  AGVISOR_RETURN_IF_ERROR(
      OnlyKnown(o, "create pool",
                {"name", "size", "max_age", "fill_parallelism", "image", "gui", "limits", "network",
                 "runtime", "labels", "warm_shells", "platform", "allow_setuid"}));
  CreatePoolRequest r;
  const json::value* name = o.if_contains("name");
  if (!name) return Bad("name", "missing: a pool needs a name (creates then say {\"pool\": name})");
  r.name = AGVISOR_TRY(GetString(*name, "name"));
  AGVISOR_RETURN_IF_ERROR(ValidatePoolName(r.name));
  AGVISOR_RETURN_IF_ERROR(ParseSpecFields(o, r.options.spec));
  if (auto* v = o.if_contains("size")) {
    r.options.size =
        static_cast<int>(std::clamp<std::int64_t>(AGVISOR_TRY(GetInt(*v, "size")), -1, 1 << 20));
  }
  if (auto* v = o.if_contains("max_age")) {
    r.options.max_age = std::chrono::seconds(AGVISOR_TRY(GetInt(*v, "max_age")));
  }
  // The default parallelism never exceeds a small pool's size.
  r.options.fill_parallelism = std::min(r.options.fill_parallelism, std::max(r.options.size, 1));
  if (auto* v = o.if_contains("fill_parallelism")) {
    r.options.fill_parallelism = static_cast<int>(
        std::clamp<std::int64_t>(AGVISOR_TRY(GetInt(*v, "fill_parallelism")), -1, 1 << 20));
  }
  return r;
}

namespace {
json::object PoolObject(const PoolInfo& pool) {
  json::object stats;
  ForEachPoolStat(pool.stats, [&stats](std::string_view key, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>) {
      stats[key] = SanitizeUtf8(value);
    } else {
      stats[key] = value;
    }
  });
  json::object o;
  o["name"] = pool.name;
  o["id"] = pool.id;
  o["size"] = pool.options.size;
  o["max_age"] = pool.options.max_age.count();
  o["image"] =
      pool.options.spec.image.empty() ? std::string(kDefaultImage) : pool.options.spec.image;
  o["platform"] = pool.options.spec.platform;  // Pool::Create resolved an unset one
  o["stats"] = std::move(stats);
  return o;
}
}  // namespace

std::string PoolJson(const PoolInfo& pool) { return Serialize(PoolObject(pool)); }

std::string PoolListJson(const std::vector<PoolInfo>& pools) {
  json::array a;
  for (const auto& p : pools) a.push_back(PoolObject(p));
  json::object o;
  o["pools"] = std::move(a);
  return Serialize(o);
}

std::string_view EndReasonSlug(EndReason reason) {
  switch (reason) {
    case EndReason::kNone:
      return "";
    case EndReason::kStopped:
      return "stopped";
    case EndReason::kLifetime:
      return "lifetime";
    case EndReason::kIdle:
      return "idle";
    case EndReason::kOutOfMemory:
      return "out_of_memory";
    case EndReason::kKilled:
      return "killed";
    case EndReason::kGone:
      return "gone";
  }
  return "";
}

namespace {
json::object SandboxObject(const SandboxView& v) {
  json::object o;
  o["id"] = v.id;
  o["container_name"] = v.info.container_name;
  o["name"] = v.info.name ? json::value(*v.info.name) : json::value(nullptr);
  o["container_id"] = v.info.container_id;
  o["image"] = v.info.image;
  o["state"] = v.info.state;
  o["running"] = v.info.running;
  auto reason = EndReasonSlug(v.info.end_reason);
  o["end_reason"] = reason.empty() ? json::value(nullptr) : json::value(reason);
  o["exit_code"] = v.info.exit_code;
  if (!v.info.platform.empty()) o["platform"] = v.info.platform;
  o["created"] = v.info.created_unix > 0 ? json::value(v.info.created_unix) : json::value(nullptr);
  if (v.info.idle_ttl) o["idle_ttl"] = *v.info.idle_ttl;
  json::object limits;
  if (!v.info.cpus.empty()) limits["cpus"] = v.info.cpus;
  if (!v.info.memory.empty()) limits["memory"] = v.info.memory;
  o["limits"] = std::move(limits);
  if (v.info.limits) {
    o["live_limits"] = json::object{{"cpus", v.info.limits->cpus},
                                    {"memory_bytes", v.info.limits->memory_bytes},
                                    {"pids", v.info.limits->pids},
                                    {"source", v.info.limits->source}};
  }
  if (v.resumed) o["resumed"] = *v.resumed;
  if (!v.disk_warning.empty()) o["disk_warning"] = v.disk_warning;
  return o;
}
}  // namespace

std::string SandboxJson(const SandboxView& v) { return Serialize(SandboxObject(v)); }

std::string SandboxListJson(const std::vector<SandboxView>& views) {
  json::array a;
  for (const auto& v : views) a.push_back(SandboxObject(v));
  json::object o;
  o["sandboxes"] = std::move(a);
  return Serialize(o);
}

Result<LimitsUpdate> ParseUpdateRequest(std::string_view body) {
  auto o = AGVISOR_TRY(ParseObject(body, "update"));
  AGVISOR_RETURN_IF_ERROR(OnlyKnown(o, "update", {"cpus", "memory", "pids"}));
  LimitsUpdate u;
  if (auto* v = o.if_contains("cpus"); v && !v->is_null()) {
    u.cpus = AGVISOR_TRY(GetNumber(*v, "cpus"));
  }
  if (auto* v = o.if_contains("memory"); v && !v->is_null()) {
    u.memory = AGVISOR_TRY(GetString(*v, "memory"));
  }
  if (auto* v = o.if_contains("pids"); v && !v->is_null()) {
    u.pids = AGVISOR_TRY(GetInt(*v, "pids"));
  }
  return u;
}

std::string UpdateRequestJson(const LimitsUpdate& u) {
  json::object o;
  if (u.cpus) o["cpus"] = *u.cpus;
  if (u.memory) o["memory"] = *u.memory;
  if (u.pids) o["pids"] = *u.pids;
  return Serialize(o);
}

// ---- Exec ----

Result<ExecRequest> ParseExecRequest(std::string_view body, bool websocket) {
  auto o = AGVISOR_TRY(ParseObject(body, "exec"));
  if (websocket) {
    AGVISOR_RETURN_IF_ERROR(OnlyKnown(
        o, "exec",
        {"argv", "command", "timeout", "env", "cwd", "user", "pty", "rows", "cols", "stdin"}));
  } else {
    AGVISOR_RETURN_IF_ERROR(OnlyKnown(
        o, "exec",
        {"argv", "command", "timeout", "env", "cwd", "user", "stdin", "stdin_b64", "encoding"}));
  }
  ExecRequest r;
  if (websocket) r.timeout = 0;
  r.argv = AGVISOR_TRY(GetArgv(o));
  if (auto* v = o.if_contains("timeout")) {
    // Its range is the core's (ValidateExecTimeout, ValidateProcessTimeout on a stream).
    r.timeout = AGVISOR_TRY(GetNumber(*v, "timeout"));
  }
  if (auto* v = o.if_contains("env")) r.env = AGVISOR_TRY(GetEnv(*v));
  if (auto* v = o.if_contains("cwd")) r.cwd = AGVISOR_TRY(GetString(*v, "cwd"));
  if (auto* v = o.if_contains("user")) r.user = AGVISOR_TRY(GetString(*v, "user"));
  if (websocket) {
    if (auto* v = o.if_contains("pty")) r.pty = AGVISOR_TRY(GetBool(*v, "pty"));
    if (auto* v = o.if_contains("stdin")) r.stdin = AGVISOR_TRY(GetBool(*v, "stdin"));
    for (auto [key, dst] : {std::pair{"rows", &r.rows}, std::pair{"cols", &r.cols}}) {
      if (auto* v = o.if_contains(key)) {
        auto n = AGVISOR_TRY(GetInt(*v, key));
        if (n < 1 || n > 65535) return Bad(key, "must be 1..65535");
        *dst = static_cast<std::uint16_t>(n);
      }
    }
    return r;
  }
  const json::value* text = o.if_contains("stdin");
  const json::value* b64 = o.if_contains("stdin_b64");
  if (text && b64) return Bad("stdin", "give either \"stdin\" or \"stdin_b64\", not both");
  if (text) r.input = AGVISOR_TRY(GetString(*text, "stdin"));
  if (b64) {
    auto t = AGVISOR_TRY(GetString(*b64, "stdin_b64"));
    r.input = AGVISOR_TRY(Base64Decode(t, "stdin_b64"));
  }
  if (auto* v = o.if_contains("encoding")) {
    auto e = AGVISOR_TRY(GetString(*v, "encoding"));
    if (e != "text" && e != "base64") return Bad("encoding", "must be \"text\" or \"base64\"");
    r.base64 = e == "base64";
  }
  return r;
}

std::string ExecResultJson(const ExecResult& r, bool base64) {
  json::object o;
  o["exit_code"] = r.exit_code;
  o["timed_out"] = r.timed_out;
  o["encoding"] = base64 ? "base64" : "text";
  o["stdout"] = base64 ? Base64Encode(r.out) : SanitizeUtf8(r.out);
  o["stderr"] = base64 ? Base64Encode(r.err) : SanitizeUtf8(r.err);
  o["truncated"] = r.truncated;
  o["stdout_dropped"] = r.stdout_dropped;
  o["stderr_dropped"] = r.stderr_dropped;
  o["prestarted"] = r.prestarted;
  return Serialize(o);
}

// ---- Processes ----

Result<StartProcessRequest> ParseStartProcessRequest(std::string_view body) {
  auto o = AGVISOR_TRY(ParseObject(body, "start process"));
  AGVISOR_RETURN_IF_ERROR(
      OnlyKnown(o, "start process",
                {"argv", "command", "stdin", "timeout", "env", "cwd", "user", "keep_awake"}));
  StartProcessRequest r;
  r.argv = AGVISOR_TRY(GetArgv(o));
  if (auto* v = o.if_contains("stdin")) r.options.stdin = AGVISOR_TRY(GetBool(*v, "stdin"));
  if (auto* v = o.if_contains("keep_awake")) {
    r.options.keep_awake = AGVISOR_TRY(GetBool(*v, "keep_awake"));
  }
  if (auto* v = o.if_contains("timeout")) {
    // Its range is the core's (ValidateProcessTimeout), checked before anything starts.
    r.options.timeout = AGVISOR_TRY(GetNumber(*v, "timeout"));
  }
  if (auto* v = o.if_contains("env")) r.options.env = AGVISOR_TRY(GetEnv(*v));
  if (auto* v = o.if_contains("cwd")) r.options.cwd = AGVISOR_TRY(GetString(*v, "cwd"));
  if (auto* v = o.if_contains("user")) r.options.user = AGVISOR_TRY(GetString(*v, "user"));
  return r;
}

std::string ProcessListJson(const std::vector<ProcessInfo>& procs) {
  json::array a;
  for (const auto& p : procs) {
    json::object o;
    o["pid"] = p.pid;
    o["argv0"] = SanitizeUtf8(p.argv0);
    o["running"] = p.running;
    o["exit_code"] = p.running ? json::value(nullptr) : json::value(p.exit_code);
    o["keep_awake"] = p.keep_awake;
    a.push_back(std::move(o));
  }
  json::object o;
  o["processes"] = std::move(a);
  return Serialize(o);
}

Result<int> ParseSignal(std::string_view text) {
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos &&
      text.size() <= 2) {
    int n = std::stoi(std::string(text));
    if (n >= 1 && n <= 64) return n;
  }
  std::string_view name = text;
  if (name.starts_with("SIG")) name.remove_prefix(3);
  for (const auto& s : kSignals) {
    if (s.name == name) return s.number;
  }
  return Bad("signal", "'" + SanitizeUtf8(text) +
                           "' is not a signal: use a number 1..64 or a name (TERM, KILL, INT, "
                           "HUP, USR1, USR2, QUIT, STOP, CONT, ALRM, WINCH)");
}

Result<int> ParseSignalRequest(std::string_view body) {
  auto o = AGVISOR_TRY(ParseObject(body, "signal"));
  AGVISOR_RETURN_IF_ERROR(OnlyKnown(o, "signal", {"signal"}));
  const json::value* v = o.if_contains("signal");
  if (!v) return SIGTERM;
  if (v->is_string()) return ParseSignal(v->as_string());
  auto n = AGVISOR_TRY(GetInt(*v, "signal"));
  if (n < 1 || n > 64) return Bad("signal", "must be 1..64");
  return static_cast<int>(n);
}

Result<std::int64_t> ParseDesktopTokenRequest(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return 300;
  auto o = AGVISOR_TRY(ParseObject(body, "desktop token"));
  AGVISOR_RETURN_IF_ERROR(OnlyKnown(o, "desktop token", {"ttl"}));
  const json::value* v = o.if_contains("ttl");
  if (!v) return 300;
  auto ttl = AGVISOR_TRY(GetInt(*v, "ttl"));
  if (ttl < 1 || ttl > 86400) return Bad("ttl", "must be 1..86400 seconds");
  return ttl;
}

namespace {

struct InputAction {
  std::string_view name;
  DesktopInput::Action action;
  std::initializer_list<std::string_view> fields;  // "action" and these; the first `required`
  std::size_t required;
};

constexpr std::string_view kInputActions = "move, click, drag, scroll, type, key";

}  // namespace

Result<DesktopInput> ParseDesktopInputRequest(std::string_view body) {
  using A = DesktopInput::Action;
  static const InputAction kActions[] = {
      {"move", A::kMove, {"x", "y"}, 2},
      {"click", A::kClick, {"x", "y", "button", "count"}, 2},
      {"drag", A::kDrag, {"x", "y", "to_x", "to_y", "button"}, 4},
      {"scroll", A::kScroll, {"x", "y", "dy", "dx"}, 2},
      {"type", A::kType, {"text"}, 1},
      {"key", A::kKey, {"keys"}, 1},
  };
  auto o = AGVISOR_TRY(ParseObject(body, "desktop input"));
  const json::value* a = o.if_contains("action");
  if (a == nullptr) {
    return Bad("action", "is required: one of " + std::string(kInputActions));
  }
  const std::string name = AGVISOR_TRY(GetString(*a, "action"));
  const InputAction* spec = nullptr;
  for (const auto& k : kActions) {
    if (k.name == name) spec = &k;
  }
  if (spec == nullptr) {
    return Bad("action", "'" + SanitizeUtf8(name.substr(0, 32)) + "' is none of " +
                             std::string(kInputActions));
  }
  const std::string what = "desktop input (" + name + ")";
  for (const auto& kv : o) {
    const bool known = kv.key() == "action" || std::find(spec->fields.begin(), spec->fields.end(),
                                                         kv.key()) != spec->fields.end();
    if (!known) {
      std::string list;
      for (auto f : spec->fields) list += (list.empty() ? "" : ", ") + std::string(f);
      return Error::InvalidArgument(what + ": unknown field \"" + std::string(kv.key()) + "\" (" +
                                    name + " takes " + list + ")");
    }
  }
  for (std::size_t i = 0; i < spec->required; ++i) {
    const std::string_view f = spec->fields.begin()[i];
    if (!o.contains(f))
      return Error::InvalidArgument(what + ": \"" + std::string(f) + "\" is required");
  }
  DesktopInput in;
  in.action = spec->action;
  auto number = [&](std::string_view field, int& out, std::int64_t lo,
                    std::int64_t hi) -> Result<void> {
    const json::value* v = o.if_contains(field);
    if (v == nullptr) return Ok();
    const std::int64_t n = AGVISOR_TRY(GetInt(*v, field));
    if (n < lo || n > hi) {
      return Bad(field, "must be " + std::to_string(lo) + ".." + std::to_string(hi));
    }
    out = static_cast<int>(n);
    return Ok();
  };
  AGVISOR_RETURN_IF_ERROR(number("x", in.x, 0, 65535));
  AGVISOR_RETURN_IF_ERROR(number("y", in.y, 0, 65535));
  AGVISOR_RETURN_IF_ERROR(number("to_x", in.to_x, 0, 65535));
  AGVISOR_RETURN_IF_ERROR(number("to_y", in.to_y, 0, 65535));
  AGVISOR_RETURN_IF_ERROR(number("count", in.count, 1, 10));
  AGVISOR_RETURN_IF_ERROR(number("dy", in.dy, -100, 100));
  AGVISOR_RETURN_IF_ERROR(number("dx", in.dx, -100, 100));
  if (const json::value* v = o.if_contains("button"))
    in.button = AGVISOR_TRY(GetString(*v, "button"));
  if (const json::value* v = o.if_contains("text")) in.text = AGVISOR_TRY(GetString(*v, "text"));
  if (const json::value* v = o.if_contains("keys")) in.text = AGVISOR_TRY(GetString(*v, "keys"));
  return in;
}

// ---- Files ----

std::string FileEntryJson(const FileEntry& e) { return Serialize(EntryObject(e)); }

std::string FileListJson(std::string_view path, const std::vector<FileEntry>& entries) {
  json::array a;
  for (const auto& e : entries) a.push_back(EntryObject(e));
  json::object o;
  o["path"] = SanitizeUtf8(path);
  o["entries"] = std::move(a);
  return Serialize(o);
}

// ---- Metrics ----

std::string MetricsJson(std::string_view id, const SandboxStats& s, const EgressTraffic* egress) {
  json::object o;
  o["id"] = id;
  o["read"] = s.read;
  o["cpu_percent"] = std::round(s.cpu_percent * 100) / 100;
  o["online_cpus"] = s.online_cpus;
  o["memory_bytes"] = s.memory_bytes;
  o["memory_limit_bytes"] = s.memory_limit_bytes;
  o["pids"] = s.pids;
  o["pids_limit"] = s.pids_limit;
  if (egress != nullptr) {
    json::object e;
    e["allowed"] = egress->decisions.allowed;
    e["denied"] = egress->decisions.denied;
    e["learned"] = egress->decisions.learned;
    e["bytes_up"] = egress->bytes_up;
    e["bytes_down"] = egress->bytes_down;
    e["open_connections"] = egress->open_connections;
    o["egress"] = std::move(e);
  }
  return Serialize(o);
}

// ---- Query ----

Result<bool> QueryBool(const std::map<std::string, std::string>& query, std::string_view key,
                       bool dflt) {
  auto it = query.find(std::string(key));
  if (it == query.end()) return dflt;
  const std::string& v = it->second;
  if (v.empty() || v == "1" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "no") return false;
  return Bad(key, "'" + SanitizeUtf8(v) + "' is not a boolean (use 1/true/yes or 0/false/no)");
}

Result<std::string> QueryPath(const std::map<std::string, std::string>& query) {
  auto it = query.find("path");
  if (it == query.end() || it->second.empty()) {
    return Bad("path", "missing: add ?path=/absolute/path/in/the/sandbox (percent-encoded)");
  }
  if (it->second.front() != '/') {
    return Bad("path", "'" + SanitizeUtf8(it->second) + "' must be absolute (start with '/')");
  }
  return it->second;
}

Result<std::optional<std::uint64_t>> QueryBytes(const std::map<std::string, std::string>& query,
                                                std::string_view key) {
  auto it = query.find(std::string(key));
  if (it == query.end()) return std::optional<std::uint64_t>();
  const std::string& v = it->second;
  constexpr std::uint64_t kMax = std::uint64_t{1} << 62;
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos ||
      std::stoull(v) > kMax) {
    return Bad(key, "'" + SanitizeUtf8(v) + "' is not a byte count (decimal digits, 0.." +
                        std::to_string(kMax) + ")");
  }
  return std::optional<std::uint64_t>(std::stoull(v));
}

Result<std::uint32_t> QueryMode(const std::map<std::string, std::string>& query,
                                std::uint32_t dflt) {
  auto it = query.find("mode");
  if (it == query.end()) return dflt;
  const std::string& v = it->second;
  if (v.empty() || v.size() > 4 || v.find_first_not_of("01234567") != std::string::npos) {
    return Bad("mode", "'" + SanitizeUtf8(v) + "' is not an octal mode (e.g. 644 or 0755)");
  }
  return static_cast<std::uint32_t>(std::stoul(v, nullptr, 8));
}

// ---- WebSocket control ----

Result<std::string> ParseWsAuthMessage(std::string_view text) {
  constexpr std::string_view kShape = R"(send {"type":"auth","token":"<token>"} first)";
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return Bad("auth message", "not a JSON object: " + std::string(kShape));
  const auto& o = v.as_object();
  const json::value* type = o.if_contains("type");
  const json::value* token = o.if_contains("token");
  if (!type || !type->is_string() || type->as_string() != "auth") {
    return Bad("auth message", "\"type\" must be \"auth\": " + std::string(kShape));
  }
  if (!token || !token->is_string() || token->as_string().empty()) {
    return Bad("auth message", "\"token\" must be a non-empty string: " + std::string(kShape));
  }
  if (o.size() != 2) {
    return Bad("auth message", "only \"type\" and \"token\" may be given: " + std::string(kShape));
  }
  return std::string(token->as_string());
}

std::string WsAuthJson(std::string_view token) {
  json::object o;
  o["type"] = "auth";
  o["token"] = token;
  return Serialize(o);
}

Result<WsControl> ParseWsControl(std::string_view text) {
  auto o = AGVISOR_TRY(ParseObject(text, "control message"));
  const json::value* t = o.if_contains("type");
  if (!t || !t->is_string()) {
    return Bad("type",
               "missing: a control message is {\"type\": \"eof\" | \"resize\" | \"signal\"}");
  }
  WsControl c;
  const auto& type = t->as_string();
  if (type == "eof") {
    c.type = WsControl::Type::kEof;
  } else if (type == "resize") {
    c.type = WsControl::Type::kResize;
    for (auto [key, dst] : {std::pair{"rows", &c.rows}, std::pair{"cols", &c.cols}}) {
      const json::value* v = o.if_contains(key);
      if (!v) return Bad(key, "missing in a resize message");
      auto n = AGVISOR_TRY(GetInt(*v, key));
      if (n < 1 || n > 65535) return Bad(key, "must be 1..65535");
      *dst = static_cast<std::uint16_t>(n);
    }
  } else if (type == "signal") {
    c.type = WsControl::Type::kSignal;
    const json::value* v = o.if_contains("signal");
    if (!v) return Bad("signal", "missing in a signal message");
    if (v->is_string()) {
      c.signal = AGVISOR_TRY(ParseSignal(v->as_string()));
    } else {
      auto n = AGVISOR_TRY(GetInt(*v, "signal"));
      if (n < 1 || n > 64) return Bad("signal", "must be 1..64");
      c.signal = static_cast<int>(n);
    }
  } else {
    return Bad("type", "'" + SanitizeUtf8(type) + "' is unknown (eof, resize, signal)");
  }
  return c;
}

std::string WsStartedJson(std::uint32_t pid) {
  json::object o;
  o["type"] = "started";
  o["pid"] = pid;
  return Serialize(o);
}

std::string WsExitJson(const ProcessExit& exit) {
  json::object o;
  o["type"] = "exit";
  o["exit_code"] = exit.exit_code;
  o["signal"] = exit.signal;
  o["timed_out"] = exit.timed_out;
  o["prestarted"] = exit.prestarted;
  return Serialize(o);
}

std::string WsErrorJson(const Error& e) {
  json::object err;
  err["code"] = ErrorSlug(e.code());
  err["message"] = SanitizeUtf8(e.message());
  json::object o;
  o["type"] = "error";
  o["error"] = std::move(err);
  return Serialize(o);
}

// ---- The client's side ----

namespace {

Error Malformed(std::string_view what, std::string_view body) {
  return Error::Internal("agvisord sent a malformed " + std::string(what) + ": " +
                         SanitizeUtf8(body.substr(0, 200)));
}

Result<json::object> ParseReply(std::string_view body, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return Malformed(what, body);
  return std::move(v.as_object());
}

std::string StringOr(const json::object& o, std::string_view key, std::string dflt = "") {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : dflt;
}

std::int64_t IntOr(const json::object& o, std::string_view key, std::int64_t dflt = 0) {
  const json::value* v = o.if_contains(key);
  if (!v) return dflt;
  auto n = GetInt(*v, key);
  return n.ok() ? *n : dflt;
}

EndReason EndReasonFromSlug(std::string_view slug) {
  for (auto r : {EndReason::kStopped, EndReason::kLifetime, EndReason::kIdle,
                 EndReason::kOutOfMemory, EndReason::kKilled, EndReason::kGone}) {
    if (EndReasonSlug(r) == slug) return r;
  }
  return EndReason::kNone;
}

Result<SandboxView> SandboxFromObject(const json::object& o, std::string_view body) {
  if (!o.contains("id") || !o.contains("container_name")) return Malformed("sandbox", body);
  SandboxView v;
  v.id = StringOr(o, "id");
  v.info.container_name = StringOr(o, "container_name");
  if (const json::value* n = o.if_contains("name"); n && n->is_string()) {
    v.info.name = std::string(n->as_string());
  }
  v.info.container_id = StringOr(o, "container_id");
  v.info.image = StringOr(o, "image");
  v.info.state = StringOr(o, "state");
  if (const json::value* r = o.if_contains("running"); r && r->is_bool()) {
    v.info.running = r->as_bool();
  }
  v.info.end_reason = EndReasonFromSlug(StringOr(o, "end_reason"));
  v.info.exit_code = static_cast<int>(IntOr(o, "exit_code"));
  v.info.platform = StringOr(o, "platform");
  v.info.created_unix = IntOr(o, "created");
  if (const json::value* t = o.if_contains("idle_ttl"); t && t->is_int64()) {
    v.info.idle_ttl = t->as_int64();
  }
  if (const json::value* l = o.if_contains("limits"); l && l->is_object()) {
    v.info.cpus = StringOr(l->as_object(), "cpus");
    v.info.memory = StringOr(l->as_object(), "memory");
  }
  if (const json::value* l = o.if_contains("live_limits"); l && l->is_object()) {
    const auto& lo = l->as_object();
    LiveLimits live;
    if (const json::value* c = lo.if_contains("cpus"); c && c->is_number()) {
      live.cpus = c->to_number<double>();
    }
    live.memory_bytes = IntOr(lo, "memory_bytes");
    live.pids = IntOr(lo, "pids");
    live.source = StringOr(lo, "source");
    v.info.limits = std::move(live);
  }
  if (const json::value* r = o.if_contains("resumed"); r && r->is_bool()) v.resumed = r->as_bool();
  v.disk_warning = StringOr(o, "disk_warning");
  return v;
}

}  // namespace

namespace {
json::object EgressRulesObject(const egress::EgressRules& r) {
  json::object e;
  auto strings = [](const std::vector<std::string>& v) {
    json::array a;
    for (const auto& s : v) a.emplace_back(s);
    return a;
  };
  e["allow_domains"] = strings(r.allow_domains);
  e["allow_cidrs"] = strings(r.allow_cidrs);
  json::array ports;
  for (std::uint16_t p : r.ports) ports.emplace_back(p);
  e["ports"] = std::move(ports);
  e["deny_domains"] = strings(r.deny_domains);
  e["mode"] = r.mode.empty() ? std::string(egress::kEgressModeEnforce) : r.mode;
  return e;
}
}  // namespace

namespace {
json::object SpecObject(const SandboxSpec& spec) {
  json::object limits;
  limits["cpus"] = spec.limits.cpus;
  limits["memory"] = spec.limits.memory;
  limits["pids"] = spec.limits.pids;
  if (spec.limits.shm) limits["shm"] = *spec.limits.shm;
  if (!spec.limits.disk.empty()) limits["disk"] = spec.limits.disk;
  json::object o;
  if (!spec.image.empty()) o["image"] = spec.image;
  if (spec.gui) o["gui"] = true;
  o["limits"] = std::move(limits);
  o["network"] = spec.network;
  if (spec.lifetime) o["lifetime"] = *spec.lifetime;
  if (spec.idle_ttl) o["idle_ttl"] = *spec.idle_ttl;
  if (spec.idle_action != "destroy") o["idle_action"] = spec.idle_action;
  if (spec.name) o["name"] = *spec.name;
  o["runtime"] = spec.runtime;
  if (!spec.labels.empty()) {
    json::object labels;
    for (const auto& [k, v] : spec.labels) labels[k] = v;
    o["labels"] = std::move(labels);
  }
  if (spec.egress) o["egress"] = EgressRulesObject(*spec.egress);
  if (spec.warm_shells != kDefaultWarmShells) o["warm_shells"] = spec.warm_shells;
  if (!spec.platform.empty()) o["platform"] = spec.platform;
  if (spec.allow_setuid) o["allow_setuid"] = true;
  return o;
}

// The array `key` of a reply, each element an object made into a T by `from_object`.
template <typename T>
Result<std::vector<T>> ParseListReply(std::string_view body, std::string_view what,
                                      std::string_view key,
                                      Result<T> (*from_object)(const json::object&,
                                                               std::string_view)) {
  auto o = AGVISOR_TRY(ParseReply(body, what));
  const json::value* a = o.if_contains(key);
  if (!a || !a->is_array()) return Malformed(what, body);
  std::vector<T> out;
  for (const auto& e : a->as_array()) {
    if (!e.is_object()) return Malformed(what, body);
    out.push_back(AGVISOR_TRY(from_object(e.as_object(), body)));
  }
  return out;
}

PoolStats PoolStatsFromObject(const json::object& o) {
  PoolStats s;
  s.ready = static_cast<int>(IntOr(o, "ready"));
  s.starting = static_cast<int>(IntOr(o, "starting"));
  s.acquired = static_cast<std::uint64_t>(IntOr(o, "acquired"));
  s.cold = static_cast<std::uint64_t>(IntOr(o, "cold"));
  s.started = static_cast<std::uint64_t>(IntOr(o, "started"));
  s.start_failures = static_cast<std::uint64_t>(IntOr(o, "start_failures"));
  s.recycled = static_cast<std::uint64_t>(IntOr(o, "recycled"));
  s.discarded = static_cast<std::uint64_t>(IntOr(o, "discarded"));
  s.last_error = StringOr(o, "last_error");
  return s;
}

Result<PoolView> PoolFromObject(const json::object& o, std::string_view body) {
  if (!o.contains("name") || !o.contains("id")) return Malformed("pool", body);
  PoolView v{.name = StringOr(o, "name"), .id = StringOr(o, "id")};
  v.options.size = static_cast<int>(IntOr(o, "size"));
  v.options.max_age = std::chrono::seconds(IntOr(o, "max_age"));
  v.options.spec.image = StringOr(o, "image");
  v.options.spec.platform = StringOr(o, "platform");
  if (const json::value* st = o.if_contains("stats"); st && st->is_object()) {
    v.stats = PoolStatsFromObject(st->as_object());
  }
  return v;
}
}  // namespace

std::string CreateRequestJson(const SandboxSpec& spec) {
  json::object o = SpecObject(spec);
  if (!spec.secrets.empty()) {
    json::array secrets;
    for (const SecretSpec& sec : spec.secrets) {
      json::object e;
      e["name"] = sec.name;
      json::array hosts;
      for (const std::string& h : sec.hosts) hosts.emplace_back(h);
      e["hosts"] = std::move(hosts);
      if (!sec.header.empty()) e["header"] = sec.header;
      if (sec.value) e["value"] = *sec.value;
      secrets.emplace_back(std::move(e));
    }
    o["secrets"] = std::move(secrets);
  }
  return Serialize(o);
}

std::string AcquireRequestJson(std::string_view name, const AcquireOptions& options) {
  json::object o;
  o["pool"] = name;
  if (options.lifetime) o["lifetime"] = *options.lifetime;
  if (options.idle_ttl) o["idle_ttl"] = *options.idle_ttl;
  if (options.wait.count() > 0) o["wait"] = static_cast<double>(options.wait.count()) / 1000;
  if (!options.cold_create) o["cold_create"] = false;
  return Serialize(o);
}

std::string CreatePoolRequestJson(std::string_view name, const PoolOptions& options) {
  json::object o = SpecObject(options.spec);
  o["name"] = name;
  o["size"] = options.size;
  o["max_age"] = options.max_age.count();
  o["fill_parallelism"] = options.fill_parallelism;
  return Serialize(o);
}

Result<PoolView> ParsePoolJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "pool"));
  return PoolFromObject(o, body);
}

Result<std::vector<PoolView>> ParsePoolListJson(std::string_view body) {
  return ParseListReply(body, "pool list", "pools", PoolFromObject);
}

Result<SandboxView> ParseSandboxJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "sandbox"));
  return SandboxFromObject(o, body);
}

Result<std::vector<SandboxView>> ParseSandboxListJson(std::string_view body) {
  return ParseListReply(body, "sandbox list", "sandboxes", SandboxFromObject);
}

Result<std::vector<ProcessInfo>> ParseProcessListJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "process list"));
  const json::value* a = o.if_contains("processes");
  if (!a || !a->is_array()) return Malformed("process list", body);
  std::vector<ProcessInfo> out;
  for (const auto& e : a->as_array()) {
    if (!e.is_object() || !e.as_object().contains("pid")) return Malformed("process list", body);
    const auto& p = e.as_object();
    ProcessInfo info;
    info.pid = static_cast<std::uint32_t>(IntOr(p, "pid"));
    info.argv0 = StringOr(p, "argv0");
    const json::value* r = p.if_contains("running");
    info.running = r && r->is_bool() && r->as_bool();
    info.exit_code = static_cast<std::int32_t>(IntOr(p, "exit_code"));
    const json::value* k = p.if_contains("keep_awake");
    info.keep_awake = k && k->is_bool() && k->as_bool();
    out.push_back(std::move(info));
  }
  return out;
}

namespace {

Result<FileEntry> EntryFromObject(const json::value& v, std::string_view body) {
  if (!v.is_object() || !v.as_object().contains("name")) return Malformed("file entry", body);
  const auto& o = v.as_object();
  FileEntry e;
  e.name = StringOr(o, "name");
  const std::string kind = StringOr(o, "kind");
  e.kind = kind == "file"      ? FileKind::kFile
           : kind == "dir"     ? FileKind::kDir
           : kind == "symlink" ? FileKind::kSymlink
                               : FileKind::kOther;
  // The daemon sends the permission bits; the type bits follow from the kind, as st_mode has
  // them in process (an "other" entry keeps permissions only).
  e.mode = static_cast<std::uint32_t>(IntOr(o, "mode")) & 07777;
  e.mode |= e.kind == FileKind::kFile      ? S_IFREG
            : e.kind == FileKind::kDir     ? S_IFDIR
            : e.kind == FileKind::kSymlink ? S_IFLNK
                                           : 0;
  e.size = static_cast<std::uint64_t>(IntOr(o, "size"));
  e.mtime_unix_ms = IntOr(o, "mtime_unix_ms");
  e.link_target = StringOr(o, "link_target");
  return e;
}

}  // namespace

Result<FileEntry> ParseFileEntryJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "file entry"));
  return EntryFromObject(json::value(std::move(o)), body);
}

Result<std::vector<FileEntry>> ParseFileListJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "directory listing"));
  const json::value* a = o.if_contains("entries");
  if (!a || !a->is_array()) return Malformed("directory listing", body);
  std::vector<FileEntry> out;
  for (const auto& e : a->as_array()) out.push_back(AGVISOR_TRY(EntryFromObject(e, body)));
  return out;
}

namespace {

// The command fields every process request has: argv, and env, cwd, user where set.
json::object CommandJson(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const std::string& cwd, const std::string& user) {
  json::object o;
  json::array a;
  for (const auto& s : argv) a.emplace_back(s);
  o["argv"] = std::move(a);
  if (!env.empty()) {
    json::array e;
    for (const auto& kv : env) e.emplace_back(kv);
    o["env"] = std::move(e);
  }
  if (!cwd.empty()) o["cwd"] = cwd;
  if (!user.empty()) o["user"] = user;
  return o;
}

}  // namespace

std::string StartProcessRequestJson(const std::vector<std::string>& argv,
                                    const BackgroundOptions& options) {
  json::object o = CommandJson(argv, options.env, options.cwd, options.user);
  if (options.stdin) o["stdin"] = true;
  if (options.timeout > 0) o["timeout"] = options.timeout;
  // Only when set: an older agvisord refuses fields it does not know.
  if (options.keep_awake) o["keep_awake"] = true;
  return Serialize(o);
}

Result<std::uint32_t> ParsePidJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "process"));
  auto pid = IntOr(o, "pid", -1);
  if (pid <= 0 || pid > 0xffffffffLL) return Malformed("process", body);
  return static_cast<std::uint32_t>(pid);
}

Result<SandboxStats> ParseMetricsJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "metrics"));
  if (!o.contains("memory_bytes")) return Malformed("metrics", body);
  SandboxStats s;
  s.read = StringOr(o, "read");
  if (const json::value* c = o.if_contains("cpu_percent")) {
    auto n = GetNumber(*c, "cpu_percent");
    if (n.ok()) s.cpu_percent = *n;
  }
  s.online_cpus = static_cast<int>(IntOr(o, "online_cpus"));
  s.memory_bytes = static_cast<std::uint64_t>(IntOr(o, "memory_bytes"));
  s.memory_limit_bytes = static_cast<std::uint64_t>(IntOr(o, "memory_limit_bytes"));
  s.pids = static_cast<std::uint64_t>(IntOr(o, "pids"));
  s.pids_limit = static_cast<std::uint64_t>(IntOr(o, "pids_limit"));
  return s;
}

std::string WsExecRequestJson(const std::vector<std::string>& argv, const ProcessOptions& options) {
  json::object o = CommandJson(argv, options.env, options.cwd, options.user);
  o["timeout"] = options.timeout;
  o["stdin"] = options.stdin;
  o["pty"] = options.pty;
  if (options.pty) {
    o["rows"] = options.rows;
    o["cols"] = options.cols;
  }
  return Serialize(o);
}

std::string WsControlJson(const WsControl& c) {
  json::object o;
  switch (c.type) {
    case WsControl::Type::kEof:
      o["type"] = "eof";
      break;
    case WsControl::Type::kResize:
      o["type"] = "resize";
      o["rows"] = c.rows;
      o["cols"] = c.cols;
      break;
    case WsControl::Type::kSignal:
      o["type"] = "signal";
      o["signal"] = c.signal;
      break;
  }
  return Serialize(o);
}

// The egress log's records (docs/egress.md, "Log"): the one JSON shape of a Decision.
namespace {

json::object DecisionObject(const egress::Decision& d) {
  json::object e;
  e["time"] = egress::FormatDecisionTime(d.time);
  e["seq"] = d.seq;
  e["sandbox"] = SanitizeUtf8(d.sandbox);
  e["via"] = SanitizeUtf8(d.via);
  e["name"] = SanitizeUtf8(d.name);
  e["port"] = d.port;
  e["allowed"] = d.allowed;
  e["learned"] = d.learned;
  e["reason"] = SanitizeUtf8(d.reason);
  e["address"] = SanitizeUtf8(d.address);
  e["method"] = SanitizeUtf8(d.method);
  e["path"] = SanitizeUtf8(d.path);
  e["status"] = d.status;
  e["bytes_up"] = d.bytes_up;
  e["bytes_down"] = d.bytes_down;
  e["duration_ms"] = d.duration.count();
  e["secret"] = SanitizeUtf8(d.secret);
  e["closes"] = d.closes;
  return e;
}

egress::Decision DecisionFromObject(const json::object& o) {
  egress::Decision d;
  if (auto t = egress::ParseDecisionTime(StringOr(o, "time"))) d.time = *t;
  d.seq = static_cast<std::uint64_t>(IntOr(o, "seq"));
  d.sandbox = StringOr(o, "sandbox");
  d.via = StringOr(o, "via");
  d.name = StringOr(o, "name");
  d.port = static_cast<std::uint16_t>(IntOr(o, "port"));
  const json::value* a = o.if_contains("allowed");
  d.allowed = a && a->is_bool() && a->as_bool();
  const json::value* l = o.if_contains("learned");
  d.learned = d.allowed && l && l->is_bool() && l->as_bool();
  d.reason = StringOr(o, "reason");
  d.address = StringOr(o, "address");
  d.method = StringOr(o, "method");
  d.path = StringOr(o, "path");
  d.status = static_cast<int>(IntOr(o, "status"));
  d.bytes_up = static_cast<std::uint64_t>(IntOr(o, "bytes_up"));
  d.bytes_down = static_cast<std::uint64_t>(IntOr(o, "bytes_down"));
  d.duration = std::chrono::milliseconds(IntOr(o, "duration_ms"));
  d.secret = StringOr(o, "secret");
  d.closes = static_cast<std::uint64_t>(IntOr(o, "closes"));
  egress::BoundDecision(d);  // a file or an answer is read as it is: bounded again
  return d;
}

// JSON text with DEL and the C1 controls (U+0080-U+009F) escaped too: JSON leaves them raw, and
// a terminal takes U+009B for CSI, so a record printed as it is (`--json`, a file) could carry
// an escape sequence a sandbox chose. The input is valid UTF-8 (SanitizeUtf8), where 0xC2 only
// leads a character, and those bytes occur only inside strings.
std::string SerializeForTerminal(const json::value& v) {
  const std::string in = json::serialize(v);
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto c = static_cast<unsigned char>(in[i]);
    const auto next = i + 1 < in.size() ? static_cast<unsigned char>(in[i + 1]) : 0;
    char esc[8];
    if (c == 0x7f) {
      out += "\\u007f";
    } else if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {
      std::snprintf(esc, sizeof esc, "\\u00%02x", next);
      out += esc;
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

Result<WsServerMessage> ParseWsServerMessage(std::string_view text) {
  auto o = AGVISOR_TRY(ParseReply(text, "stream message"));
  const std::string type = StringOr(o, "type");
  WsServerMessage m;
  if (type == "started") {
    m.type = WsServerMessage::Type::kStarted;
    m.pid = static_cast<std::uint32_t>(IntOr(o, "pid"));
  } else if (type == "exit") {
    m.type = WsServerMessage::Type::kExit;
    m.exit.exit_code = static_cast<std::int32_t>(IntOr(o, "exit_code"));
    m.exit.signal = static_cast<std::uint8_t>(IntOr(o, "signal"));
    const json::value* t = o.if_contains("timed_out");
    m.exit.timed_out = t && t->is_bool() && t->as_bool();
    const json::value* p = o.if_contains("prestarted");
    m.exit.prestarted = p && p->is_bool() && p->as_bool();
  } else if (type == "error") {
    auto e = DecodeErrorJson(text);
    if (!e) return Malformed("stream message", text);
    m.type = WsServerMessage::Type::kError;
    m.error = std::move(*e);
  } else if (type == "end") {
    m.type = WsServerMessage::Type::kEnd;
  } else if (type == "record") {
    const json::value* r = o.if_contains("record");
    if (!r || !r->is_object()) return Malformed("egress log record", text);
    m.type = WsServerMessage::Type::kRecord;
    m.record = DecisionFromObject(r->as_object());
    m.record_json = SerializeForTerminal(*r);
  } else if (type == "event") {
    m.type = WsServerMessage::Type::kEvent;
    const std::string kind = StringOr(o, "kind");
    bool known = false;
    for (auto k : {WatchEventKind::kCreate, WatchEventKind::kModify, WatchEventKind::kDelete,
                   WatchEventKind::kMove, WatchEventKind::kOverflow}) {
      if (kind == proto::WatchEventKindName(k)) {
        m.event.kind = k;
        known = true;
      }
    }
    if (!known) return Malformed("watch event", text);
    if (m.event.kind != WatchEventKind::kOverflow) {
      m.event.path = StringOr(o, "path");
      const json::value* d = o.if_contains("is_dir");
      m.event.is_dir = d && d->is_bool() && d->as_bool();
      if (!proto::CheckWatchPath(m.event.path, "path").ok()) return Malformed("watch event", text);
    }
    if (m.event.kind == WatchEventKind::kMove) {
      m.event.old_path = StringOr(o, "old_path");
      if (!proto::CheckWatchPath(m.event.old_path, "old_path").ok()) {
        return Malformed("watch event", text);
      }
    }
  } else {
    return Malformed("stream message", text);
  }
  return m;
}

std::string WsWatchEventJson(const WatchEvent& event) {
  json::object o;
  o["type"] = "event";
  o["kind"] = proto::WatchEventKindName(event.kind);
  if (event.kind != WatchEventKind::kOverflow) {
    o["path"] = SanitizeUtf8(event.path);
    o["is_dir"] = event.is_dir;
  }
  if (event.kind == WatchEventKind::kMove) o["old_path"] = SanitizeUtf8(event.old_path);
  return Serialize(o);
}

std::string WsEndJson() { return R"({"type":"end"})"; }

// ---- Egress ----

std::string EgressRulesJson(const egress::EgressRules& rules) {
  return Serialize(EgressRulesObject(rules));
}

Result<egress::EgressRules> ParseEgressRulesJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseObject(body, "egress policy"));
  return ParseEgressRules(json::value(o));
}

// ---- The egress log (docs/egress.md, "Log") ----

std::string DecisionJson(const egress::Decision& d) {
  return SerializeForTerminal(DecisionObject(d));
}

Result<egress::Decision> ParseDecisionJson(std::string_view line) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec || !v.is_object() || !egress::ParseDecisionTime(StringOr(v.as_object(), "time"))) {
    return Error::InvalidArgument("not an egress log record: " + SanitizeUtf8(line.substr(0, 80)));
  }
  return DecisionFromObject(v.as_object());
}

std::string EgressLogJson(std::string_view id, const std::vector<egress::Decision>& records) {
  json::object o;
  o["id"] = std::string(id);
  json::array a;
  for (const egress::Decision& d : records) a.push_back(DecisionObject(d));
  o["records"] = std::move(a);
  return SerializeForTerminal(o);
}

Result<std::vector<egress::Decision>> ParseEgressLogJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "egress log"));
  const json::value* r = o.if_contains("records");
  if (!r || !r->is_array()) return Malformed("egress log", body);
  std::vector<egress::Decision> out;
  for (const auto& e : r->as_array()) {
    if (e.is_object()) out.push_back(DecisionFromObject(e.as_object()));
  }
  return out;
}

std::string WsEgressRecordJson(const egress::Decision& d) {
  json::object o;
  o["type"] = "record";
  o["record"] = DecisionObject(d);
  return SerializeForTerminal(o);
}

std::string EgressViewJson(std::string_view id, const EgressView& v) {
  json::object o;
  o["id"] = std::string(id);
  o["network"] = v.network;
  o["gateway"] = v.gateway;
  o["policy"] = EgressRulesObject(v.rules);
  o["describe"] = v.describe;
  o["allowed"] = v.counters.allowed;
  o["denied"] = v.counters.denied;
  o["learned"] = v.counters.learned;
  o["suggested"] = EgressRulesObject(v.suggested);
  o["learned_destinations"] = v.learned_destinations;
  o["learned_dropped"] = v.learned_dropped;
  json::array recent;
  for (const egress::Decision& d : v.recent) recent.push_back(DecisionObject(d));
  o["recent"] = std::move(recent);
  return SerializeForTerminal(o);
}

Result<EgressView> ParseEgressViewJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "egress"));
  EgressView v;
  v.json = std::string(body);
  v.container = std::string(kNamePrefix) + StringOr(o, "id");
  v.network = StringOr(o, "network");
  v.gateway = StringOr(o, "gateway");
  if (const json::value* p = o.if_contains("policy")) v.rules = AGVISOR_TRY(ParseEgressRules(*p));
  v.describe = StringOr(o, "describe");
  v.counters.allowed = static_cast<std::uint64_t>(IntOr(o, "allowed"));
  v.counters.denied = static_cast<std::uint64_t>(IntOr(o, "denied"));
  v.counters.learned = static_cast<std::uint64_t>(IntOr(o, "learned"));
  if (const json::value* p = o.if_contains("suggested"))
    v.suggested = AGVISOR_TRY(ParseEgressRules(*p));
  v.learned_destinations = static_cast<std::uint64_t>(IntOr(o, "learned_destinations"));
  v.learned_dropped = static_cast<std::uint64_t>(IntOr(o, "learned_dropped"));
  if (const json::value* r = o.if_contains("recent"); r && r->is_array()) {
    for (const auto& e : r->as_array()) {
      if (!e.is_object()) continue;
      egress::Decision d = DecisionFromObject(e.as_object());
      d.sandbox.clear();  // the view names its sandbox once
      v.recent_lines.push_back(egress::FormatDecision(d));
      v.recent.push_back(std::move(d));
    }
  }
  return v;
}

// ---- Snapshots and forks ----

Result<SnapshotOptions> ParseSnapshotRequest(std::string_view body) {
  auto o = AGVISOR_TRY(ParseObject(body, "snapshot"));
  AGVISOR_RETURN_IF_ERROR(OnlyKnown(o, "snapshot", {"image", "workspace", "max_bytes"}));
  SnapshotOptions r;
  const json::value* image = o.if_contains("image");
  if (!image) return Bad("image", "missing: the snapshot's tag");
  r.image = AGVISOR_TRY(GetString(*image, "image"));
  if (auto* v = o.if_contains("workspace"))
    r.include_workspace = AGVISOR_TRY(GetBool(*v, "workspace"));
  if (auto* v = o.if_contains("max_bytes"); v && !v->is_null()) {
    const std::int64_t n = AGVISOR_TRY(GetInt(*v, "max_bytes"));
    if (n <= 0) return Bad("max_bytes", "must be above 0");
    r.max_bytes = static_cast<std::uint64_t>(n);
  }
  return r;
}

std::string SnapshotRequestJson(const SnapshotOptions& options) {
  json::object o;
  o["image"] = options.image;
  o["workspace"] = options.include_workspace;
  o["max_bytes"] = options.max_bytes;
  return Serialize(o);
}

namespace {
json::object SnapshotObject(const SnapshotResult& r) {
  json::object o;
  ForEachSnapshotField(r, [&](const char* name, const auto& value) { o[name] = value; });
  return o;
}

Result<SnapshotResult> SnapshotFromObject(const json::object& o, std::string_view body) {
  if (!o.contains("image") || !o.contains("image_id")) return Malformed("snapshot", body);
  SnapshotResult r;
  r.image = StringOr(o, "image");
  r.image_id = StringOr(o, "image_id");
  r.bytes = static_cast<std::uint64_t>(IntOr(o, "bytes"));
  r.entries = static_cast<std::uint64_t>(IntOr(o, "entries"));
  r.file_bytes = static_cast<std::uint64_t>(IntOr(o, "file_bytes"));
  if (auto* v = o.if_contains("seconds"); v) {
    auto n = GetNumber(*v, "seconds");
    if (n.ok()) r.seconds = *n;
  }
  if (auto* v = o.if_contains("layered"); v && v->is_bool()) r.layered = v->as_bool();
  r.whiteouts = static_cast<std::uint64_t>(IntOr(o, "whiteouts"));
  r.image_layers = static_cast<std::uint64_t>(IntOr(o, "image_layers"));
  r.whole_because = StringOr(o, "whole_because");
  return r;
}
}  // namespace

std::string SnapshotListJson(const std::vector<SnapshotInfo>& snapshots) {
  json::array a;
  for (const SnapshotInfo& s : snapshots) {
    json::object o;
    ForEachSnapshotInfoField(s, [&](const char* name, const auto& value) { o[name] = value; });
    a.push_back(std::move(o));
  }
  return Serialize(json::object{{"snapshots", std::move(a)}});
}

namespace {
Result<SnapshotInfo> SnapshotInfoFromObject(const json::object& o, std::string_view body) {
  if (!o.contains("image")) return Malformed("snapshot list", body);
  SnapshotInfo s;
  s.tag = StringOr(o, "tag");
  s.image = StringOr(o, "image");
  s.image_id = StringOr(o, "image_id");
  s.of = StringOr(o, "of");
  if (auto* v = o.if_contains("workspace"); v && v->is_bool()) s.workspace = v->as_bool();
  s.created_unix = IntOr(o, "created");
  s.size_bytes = IntOr(o, "size_bytes");
  return s;
}
}  // namespace

Result<std::vector<SnapshotInfo>> ParseSnapshotListJson(std::string_view body) {
  return ParseListReply(body, "snapshot list", "snapshots", SnapshotInfoFromObject);
}

std::string SnapshotResultJson(const SnapshotResult& result) {
  return Serialize(SnapshotObject(result));
}

Result<SnapshotResult> ParseSnapshotResultJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "snapshot"));
  return SnapshotFromObject(o, body);
}

Result<ForkOptions> ParseForkRequest(std::string_view body) {
  auto o = AGVISOR_TRY(ParseObject(body, "fork"));
  AGVISOR_RETURN_IF_ERROR(OnlyKnown(o, "fork", {"count", "prefix", "image", "max_bytes", "spec"}));
  ForkOptions r;
  const json::value* count = o.if_contains("count");
  if (!count) return Bad("count", "missing: how many forks to make");
  r.count =
      static_cast<int>(std::clamp<std::int64_t>(AGVISOR_TRY(GetInt(*count, "count")), -1, 1 << 20));
  if (auto* v = o.if_contains("prefix"); v && !v->is_null()) {
    r.prefix = AGVISOR_TRY(GetString(*v, "prefix"));
  }
  if (auto* v = o.if_contains("image"); v && !v->is_null()) {
    r.image = AGVISOR_TRY(GetString(*v, "image"));
  }
  if (auto* v = o.if_contains("max_bytes"); v && !v->is_null()) {
    const std::int64_t n = AGVISOR_TRY(GetInt(*v, "max_bytes"));
    if (n <= 0) return Bad("max_bytes", "must be above 0");
    r.max_bytes = static_cast<std::uint64_t>(n);
  }
  if (auto* v = o.if_contains("spec"); v && !v->is_null()) {
    if (!v->is_object()) return Bad("spec", "must be an object (a create request)");
    if (v->as_object().contains("name") || v->as_object().contains("pool") ||
        v->as_object().contains("image")) {
      return Bad("spec", "the forks' name, image and pool are the fork's: leave them out");
    }
    auto req = ParseCreateRequest(Serialize(*v));
    if (!req.ok()) return req.error().WithContext("spec");
    r.spec = std::move(req->spec);
  }
  return r;
}

std::string ForkRequestJson(const ForkOptions& options) {
  json::object o;
  o["count"] = options.count;
  if (!options.prefix.empty()) o["prefix"] = options.prefix;
  if (!options.image.empty()) o["image"] = options.image;
  o["max_bytes"] = options.max_bytes;
  SandboxSpec spec = options.spec;
  spec.name.reset();
  spec.image.clear();
  o["spec"] = json::parse(CreateRequestJson(spec));
  return Serialize(o);
}

std::string ForkResultJson(const ForkView& view) {
  json::object o;
  o["snapshot"] = SnapshotObject(view.snapshot);
  json::array a;
  for (const auto& v : view.sandboxes) a.push_back(SandboxObject(v));
  o["sandboxes"] = std::move(a);
  o["seconds"] = view.seconds;
  return Serialize(o);
}

Result<ForkView> ParseForkResultJson(std::string_view body) {
  auto o = AGVISOR_TRY(ParseReply(body, "fork"));
  const json::value* snap = o.if_contains("snapshot");
  const json::value* list = o.if_contains("sandboxes");
  if (!snap || !snap->is_object() || !list || !list->is_array()) return Malformed("fork", body);
  ForkView v;
  v.snapshot = AGVISOR_TRY(SnapshotFromObject(snap->as_object(), body));
  for (const auto& e : list->as_array()) {
    if (!e.is_object()) return Malformed("fork", body);
    v.sandboxes.push_back(AGVISOR_TRY(SandboxFromObject(e.as_object(), body)));
  }
  if (auto* s = o.if_contains("seconds"); s) {
    auto n = GetNumber(*s, "seconds");
    if (n.ok()) v.seconds = *n;
  }
  return v;
}

}  // namespace agvisor::api
