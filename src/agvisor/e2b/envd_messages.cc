#include "agvisor/e2b/envd_messages.h"

#include <boost/json.hpp>
#include <csignal>
#include <ctime>

#include "agvisor/api/codec.h"

namespace agvisor::e2b::envd {
namespace json = boost::json;
namespace {

Error Bad(std::string_view field, std::string_view why) {
  return Error::InvalidArgument(std::string(field) + ": " + std::string(why));
}

// The request's top object. Depth-bounded: these messages nest three levels at most.
Result<json::object> ParseObject(std::string_view text) {
  json::parse_options opts;
  opts.max_depth = 16;
  std::error_code ec;
  json::value v = json::parse(text, ec, {}, opts);
  if (ec) return Bad("request", "is not valid JSON (" + ec.message() + ")");
  if (!v.is_object()) return Bad("request", "must be a JSON object");
  return std::move(v.as_object());
}

// A field by its JSON name or its proto name; null counts as absent (proto3 JSON).
const json::value* Field(const json::object& o, std::string_view json_name,
                         std::string_view proto_name = {}) {
  const json::value* v = o.if_contains(json_name);
  if (!v && !proto_name.empty()) v = o.if_contains(proto_name);
  if (v && v->is_null()) return nullptr;
  return v;
}

Result<std::string> String(const json::value& v, std::string_view field) {
  if (!v.is_string()) return Bad(field, "must be a string");
  return std::string(v.as_string());
}

Result<bool> Bool(const json::value& v, std::string_view field) {
  if (!v.is_bool()) return Bad(field, "must be true or false");
  return v.as_bool();
}

// uint32: a number or a decimal string (proto3 JSON takes both).
Result<std::uint32_t> Uint32(const json::value& v, std::string_view field) {
  std::uint64_t n = 0;
  if (v.is_uint64()) {
    n = v.as_uint64();
  } else if (v.is_int64()) {
    if (v.as_int64() < 0) return Bad(field, "must not be negative");
    n = static_cast<std::uint64_t>(v.as_int64());
  } else if (v.is_double()) {
    double d = v.as_double();
    if (d < 0 || d != static_cast<double>(static_cast<std::uint64_t>(d)) || d > 4294967295.0) {
      return Bad(field, "must be a whole number from 0 to 4294967295");
    }
    n = static_cast<std::uint64_t>(d);
  } else if (v.is_string()) {
    auto s = v.as_string();
    if (s.empty() || s.size() > 10) return Bad(field, "must be a number from 0 to 4294967295");
    for (char c : s) {
      if (c < '0' || c > '9') return Bad(field, "must be a number from 0 to 4294967295");
      n = n * 10 + static_cast<std::uint64_t>(c - '0');
    }
  } else {
    return Bad(field, "must be a number");
  }
  if (n > 0xffffffffu) return Bad(field, "must be at most 4294967295");
  return static_cast<std::uint32_t>(n);
}

// A field that must be there; `why` says what it holds.
Result<const json::value*> RequiredField(const json::object& o, std::string_view field,
                                         std::string_view why = "is required") {
  const json::value* v = Field(o, field);
  if (!v) return Bad(field, why);
  return v;
}

// A non-empty string field (a path).
Result<std::string> RequiredPath(const json::object& o, std::string_view field) {
  auto* v = AGVISOR_TRY(RequiredField(o, field));
  auto path = AGVISOR_TRY(String(*v, field));
  if (path.empty()) return Bad(field, "must not be empty");
  return path;
}

Result<const json::object*> Object(const json::value& v, std::string_view field) {
  if (!v.is_object()) return Bad(field, "must be an object");
  return &v.as_object();
}

Result<ProcessSelector> Selector(const json::object& top) {
  const json::value* v = Field(top, "process");
  if (!v) return Bad("process", "is required (a selector with pid or tag)");
  auto* o = AGVISOR_TRY(Object(*v, "process"));
  // The oneof `selector`: connect-es writes its case's field directly.
  ProcessSelector s;
  if (auto* pid = Field(*o, "pid")) s.pid = AGVISOR_TRY(Uint32(*pid, "process.pid"));
  if (auto* tag = Field(*o, "tag")) s.tag = AGVISOR_TRY(String(*tag, "process.tag"));
  if (s.pid.has_value() == s.tag.has_value()) {
    return Bad("process", "must name exactly one of pid and tag");
  }
  return s;
}

Result<std::optional<PtySize>> Pty(const json::object& top, std::string_view field) {
  const json::value* v = Field(top, "pty");
  if (!v) return std::optional<PtySize>{};
  auto* o = AGVISOR_TRY(Object(*v, field));
  PtySize size;
  if (auto* sv = Field(*o, "size")) {
    auto* so = AGVISOR_TRY(Object(*sv, "pty.size"));
    if (auto* c = Field(*so, "cols")) size.cols = AGVISOR_TRY(Uint32(*c, "pty.size.cols"));
    if (auto* r = Field(*so, "rows")) size.rows = AGVISOR_TRY(Uint32(*r, "pty.size.rows"));
  }
  if (size.cols > 0xffff || size.rows > 0xffff) {
    return Bad("pty.size", "cols and rows must be at most 65535");
  }
  return std::optional(size);
}

json::object EventObject(std::string_view kind, json::object value) {
  json::object event;
  event[kind] = std::move(value);
  json::object top;
  top["event"] = std::move(event);
  return top;
}

std::string Serialize(const json::value& v) { return json::serialize(v); }

// {key: value}, serialized: most answers are one field.
std::string One(std::string_view key, json::value value) {
  json::object top;
  top[key] = std::move(value);
  return Serialize(top);
}

// The JSON array of `make(item)` for each item.
template <typename Item, typename Make>
json::array ArrayOf(const std::vector<Item>& items, Make make) {
  json::array list;
  for (const auto& item : items) list.emplace_back(make(item));
  return list;
}

json::object ConfigObject(const ProcessConfig& c) {
  json::object o;
  o["cmd"] = c.cmd;
  json::array args;
  for (const auto& a : c.args) args.emplace_back(api::SanitizeUtf8(a));
  o["args"] = std::move(args);
  json::object envs;
  for (const auto& [k, v] : c.envs) envs[api::SanitizeUtf8(k)] = api::SanitizeUtf8(v);
  o["envs"] = std::move(envs);
  if (c.cwd) o["cwd"] = api::SanitizeUtf8(*c.cwd);
  return o;
}

// The enums' proto names, by number.
constexpr std::string_view kFileTypeNames[] = {"FILE_TYPE_UNSPECIFIED", "FILE_TYPE_FILE",
                                               "FILE_TYPE_DIRECTORY", "FILE_TYPE_SYMLINK"};
constexpr std::string_view kEventTypeNames[] = {"EVENT_TYPE_UNSPECIFIED", "EVENT_TYPE_CREATE",
                                                "EVENT_TYPE_WRITE",       "EVENT_TYPE_REMOVE",
                                                "EVENT_TYPE_RENAME",      "EVENT_TYPE_CHMOD"};

template <std::size_t N, typename E>
std::string_view EnumName(const std::string_view (&names)[N], E value) {
  auto i = static_cast<std::size_t>(value);
  return i < N ? names[i] : names[0];
}

// google.protobuf.Timestamp's JSON form: RFC 3339 in UTC with nanoseconds when there are any.
std::string Rfc3339(std::int64_t unix_ns) {
  std::int64_t secs = unix_ns / 1000000000;
  std::int64_t nanos = unix_ns % 1000000000;
  if (nanos < 0) {
    nanos += 1000000000;
    secs -= 1;
  }
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out(buf, n);
  if (nanos != 0) {
    char frac[16];
    std::snprintf(frac, sizeof frac, ".%09lld", static_cast<long long>(nanos));
    out += frac;
  }
  out += 'Z';
  return out;
}

json::object EntryObject(const EntryInfo& e) {
  json::object o;
  o["name"] = api::SanitizeUtf8(e.name);
  o["type"] = EnumName(kFileTypeNames, e.type);
  o["path"] = api::SanitizeUtf8(e.path);
  o["size"] = std::to_string(e.size);  // int64: a string in proto3 JSON
  o["mode"] = e.mode;
  o["permissions"] = e.permissions;
  o["owner"] = api::SanitizeUtf8(e.owner);
  o["group"] = api::SanitizeUtf8(e.group);
  if (e.modified_unix_ns) o["modifiedTime"] = Rfc3339(*e.modified_unix_ns);
  if (e.symlink_target) o["symlinkTarget"] = api::SanitizeUtf8(*e.symlink_target);
  return o;
}

json::object FsEventObject(const FilesystemEvent& e) {
  json::object o;
  o["name"] = api::SanitizeUtf8(e.name);
  o["type"] = EnumName(kEventTypeNames, e.type);
  if (e.entry) o["entry"] = EntryObject(*e.entry);
  return o;
}

}  // namespace

Result<void> DecodeEmptyRequest(std::string_view text) {
  AGVISOR_TRY(ParseObject(text));
  return Ok();
}

Result<StartRequest> DecodeStartRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  StartRequest r;
  const json::value* pv = Field(top, "process");
  if (!pv) return Bad("process", "is required (cmd, args, envs, cwd)");
  auto* p = AGVISOR_TRY(Object(*pv, "process"));
  if (auto* cmd = Field(*p, "cmd")) r.process.cmd = AGVISOR_TRY(String(*cmd, "process.cmd"));
  if (r.process.cmd.empty()) return Bad("process.cmd", "is required");
  if (auto* args = Field(*p, "args")) {
    if (!args->is_array()) return Bad("process.args", "must be an array of strings");
    for (const auto& a : args->as_array()) {
      r.process.args.push_back(AGVISOR_TRY(String(a, "process.args[]")));
    }
  }
  if (auto* envs = Field(*p, "envs")) {
    auto* eo = AGVISOR_TRY(Object(*envs, "process.envs"));
    for (const auto& kv : *eo) {
      r.process.envs[std::string(kv.key())] = AGVISOR_TRY(String(kv.value(), "process.envs{}"));
    }
  }
  if (auto* cwd = Field(*p, "cwd")) r.process.cwd = AGVISOR_TRY(String(*cwd, "process.cwd"));
  r.pty = AGVISOR_TRY(Pty(top, "pty"));
  if (auto* tag = Field(top, "tag")) r.tag = AGVISOR_TRY(String(*tag, "tag"));
  if (auto* in = Field(top, "stdin")) r.stdin = AGVISOR_TRY(Bool(*in, "stdin"));
  return r;
}

Result<ProcessSelector> DecodeSelectorRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  return Selector(top);
}

Result<SendInputRequest> DecodeSendInputRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  SendInputRequest r;
  r.process = AGVISOR_TRY(Selector(top));
  auto* iv = AGVISOR_TRY(RequiredField(top, "input", "is required (stdin or pty bytes)"));
  auto* io = AGVISOR_TRY(Object(*iv, "input"));
  const json::value* in = Field(*io, "stdin");
  const json::value* pty = Field(*io, "pty");
  if ((in != nullptr) == (pty != nullptr)) {
    return Bad("input", "must carry exactly one of stdin and pty");
  }
  r.pty = pty != nullptr;
  auto text64 = AGVISOR_TRY(String(r.pty ? *pty : *in, r.pty ? "input.pty" : "input.stdin"));
  r.data = AGVISOR_TRY(api::Base64Decode(text64, r.pty ? "input.pty" : "input.stdin"));
  return r;
}

Result<SendSignalRequest> DecodeSendSignalRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  SendSignalRequest r;
  r.process = AGVISOR_TRY(Selector(top));
  auto* sv =
      AGVISOR_TRY(RequiredField(top, "signal", "is required (SIGNAL_SIGKILL or SIGNAL_SIGTERM)"));
  if (sv->is_string()) {
    auto s = sv->as_string();
    if (s == "SIGNAL_SIGKILL") {
      r.signal = SIGKILL;
    } else if (s == "SIGNAL_SIGTERM") {
      r.signal = SIGTERM;
    } else {
      return Bad("signal", "must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
    }
  } else {
    auto n = Uint32(*sv, "signal");
    if (!n || (*n != 9 && *n != 15)) return Bad("signal", "must be 9 (SIGKILL) or 15 (SIGTERM)");
    r.signal = static_cast<int>(*n);
  }
  return r;
}

Result<UpdateRequest> DecodeUpdateRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  UpdateRequest r;
  r.process = AGVISOR_TRY(Selector(top));
  r.pty = AGVISOR_TRY(Pty(top, "pty"));
  return r;
}

std::string StartEventJson(std::uint32_t pid) {
  json::object start;
  start["pid"] = pid;
  return Serialize(EventObject("start", std::move(start)));
}

std::string DataEventJson(Output output, std::string_view bytes) {
  json::object data;
  std::string_view key = output == Output::kStdout   ? "stdout"
                         : output == Output::kStderr ? "stderr"
                                                     : "pty";
  data[key] = api::Base64Encode(bytes);
  return Serialize(EventObject("data", std::move(data)));
}

std::string EndEventJson(const EndEvent& end) {
  json::object o;
  o["exitCode"] = end.exit_code;
  o["exited"] = end.exited;
  o["status"] = end.status;
  if (end.error) o["error"] = api::SanitizeUtf8(*end.error);
  return Serialize(EventObject("end", std::move(o)));
}

std::string ProcessKeepaliveJson() { return Serialize(EventObject("keepalive", {})); }

EndEvent EndEventFor(std::int32_t exit_code, int signal) {
  EndEvent e;
  if (signal > 0) {
    // Go's os.ProcessState: exit code -1 and "signal: NAME" for a process a signal ended.
    e.exit_code = -1;
    e.exited = false;
    switch (signal) {
      case SIGKILL:
        e.status = "signal: killed";
        break;
      case SIGTERM:
        e.status = "signal: terminated";
        break;
      case SIGINT:
        e.status = "signal: interrupt";
        break;
      case SIGHUP:
        e.status = "signal: hangup";
        break;
      default:
        e.status = "signal: " + std::to_string(signal);
        break;
    }
    e.error = e.status;
    return e;
  }
  e.exit_code = exit_code;
  e.exited = true;
  e.status = "exit status " + std::to_string(exit_code);
  if (exit_code != 0) e.error = e.status;
  return e;
}

std::string ListResponseJson(const std::vector<ListedProcess>& processes) {
  return One("processes", ArrayOf(processes, [](const ListedProcess& p) {
               json::object o;
               o["config"] = ConfigObject(p.config);
               o["pid"] = p.pid;
               if (p.tag) o["tag"] = api::SanitizeUtf8(*p.tag);
               return o;
             }));
}

Result<std::string> DecodePathRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  return RequiredPath(top, "path");
}

Result<std::pair<std::string, std::string>> DecodeMoveRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  auto src = AGVISOR_TRY(RequiredPath(top, "source"));
  auto dst = AGVISOR_TRY(RequiredPath(top, "destination"));
  return std::pair(std::move(src), std::move(dst));
}

Result<std::pair<std::string, std::uint32_t>> DecodeListDirRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  auto path = AGVISOR_TRY(RequiredPath(top, "path"));
  std::uint32_t depth = 1;
  if (auto* d = Field(top, "depth")) depth = AGVISOR_TRY(Uint32(*d, "depth"));
  if (depth == 0) depth = 1;
  return std::pair(std::move(path), depth);
}

Result<WatchRequest> DecodeWatchRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  WatchRequest r;
  r.path = AGVISOR_TRY(RequiredPath(top, "path"));
  if (auto* b = Field(top, "recursive")) r.recursive = AGVISOR_TRY(Bool(*b, "recursive"));
  if (auto* b = Field(top, "includeEntry", "include_entry")) {
    r.include_entry = AGVISOR_TRY(Bool(*b, "includeEntry"));
  }
  if (auto* b = Field(top, "allowNetworkMounts", "allow_network_mounts")) {
    r.allow_network_mounts = AGVISOR_TRY(Bool(*b, "allowNetworkMounts"));
  }
  return r;
}

Result<std::string> DecodeWatcherIdRequest(std::string_view text) {
  auto top = AGVISOR_TRY(ParseObject(text));
  const json::value* v = Field(top, "watcherId", "watcher_id");
  if (!v) return Bad("watcherId", "is required");
  return String(*v, "watcherId");
}

std::string PermissionString(FileType type, std::uint32_t mode) {
  std::string s;
  // Go's FileMode.String: type letters first ("d", "L" for a symlink), then rwx triples.
  if (type == FileType::kDirectory) s += 'd';
  if (type == FileType::kSymlink) s += 'L';
  if (s.empty()) s += '-';
  static constexpr char kRwx[] = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) s += (mode & (1u << (8 - i))) ? kRwx[i] : '-';
  return s;
}

std::string EntryResponseJson(const EntryInfo& entry) { return One("entry", EntryObject(entry)); }

std::string ListDirResponseJson(const std::vector<EntryInfo>& entries) {
  return One("entries", ArrayOf(entries, EntryObject));
}

std::string WriteInfoJson(const std::vector<EntryInfo>& entries) {
  return Serialize(ArrayOf(entries, [](const EntryInfo& e) {
    json::object o;
    o["name"] = api::SanitizeUtf8(e.name);
    o["type"] = e.type == FileType::kDirectory ? "dir" : "file";
    o["path"] = api::SanitizeUtf8(e.path);
    return o;
  }));
}

std::string WatchStartJson() { return One("start", json::object{}); }

std::string WatchEventJson(const FilesystemEvent& event) {
  return One("filesystem", FsEventObject(event));
}

std::string WatchKeepaliveJson() { return One("keepalive", json::object{}); }

std::string CreateWatcherResponseJson(std::string_view watcher_id) {
  return One("watcherId", json::string(watcher_id));
}

std::string WatcherEventsResponseJson(const std::vector<FilesystemEvent>& events) {
  return One("events", ArrayOf(events, FsEventObject));
}

namespace {

// The value of parameter `name` in a header value ("a; name=v; b" or name="v").
std::optional<std::string> HeaderParam(std::string_view value, std::string_view name) {
  std::size_t pos = 0;
  while ((pos = value.find(';', pos)) != std::string_view::npos) {
    ++pos;
    while (pos < value.size() && value[pos] == ' ') ++pos;
    auto eq = value.find('=', pos);
    if (eq == std::string_view::npos) return std::nullopt;
    std::string key;
    for (char ch : value.substr(pos, eq - pos)) key.push_back(static_cast<char>(std::tolower(ch)));
    std::string_view rest = value.substr(eq + 1);
    std::string v;
    if (!rest.empty() && rest.front() == '"') {
      auto close = rest.find('"', 1);
      if (close == std::string_view::npos) return std::nullopt;
      v = std::string(rest.substr(1, close - 1));
    } else {
      v = std::string(rest.substr(0, rest.find(';')));
      while (!v.empty() && v.back() == ' ') v.pop_back();
    }
    if (key == name) return v;
    pos = eq;
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<FormFile>> ParseMultipart(std::string_view content_type, std::string_view body,
                                             std::size_t max_parts) {
  auto boundary = HeaderParam(content_type, "boundary");
  if (!boundary || boundary->empty() || boundary->size() > 200) {
    return Bad("Content-Type", "multipart/form-data needs a boundary of 1 to 200 characters");
  }
  const std::string delim = "--" + *boundary;
  const std::string next = "\r\n" + delim;
  if (!body.starts_with(delim)) return Bad("body", "does not start with the multipart boundary");
  std::size_t pos = delim.size();
  std::vector<FormFile> out;
  while (true) {
    if (body.substr(pos, 2) == "--") return out;  // the closing boundary
    if (body.substr(pos, 2) != "\r\n") return Bad("body", "a boundary is not followed by CRLF");
    pos += 2;
    auto headers_end = body.find("\r\n\r\n", pos);
    if (headers_end == std::string_view::npos) return Bad("body", "a part's headers never end");
    std::optional<std::string> filename;
    std::string_view headers = body.substr(pos, headers_end - pos);
    std::size_t line_start = 0;
    while (line_start <= headers.size()) {
      auto eol = headers.find("\r\n", line_start);
      auto line = headers.substr(
          line_start, eol == std::string_view::npos ? std::string_view::npos : eol - line_start);
      std::string lower;
      for (char ch : line.substr(0, 20)) lower.push_back(static_cast<char>(std::tolower(ch)));
      if (lower.starts_with("content-disposition:")) filename = HeaderParam(line, "filename");
      if (eol == std::string_view::npos) break;
      line_start = eol + 2;
    }
    pos = headers_end + 4;
    auto end = body.find(next, pos);
    if (end == std::string_view::npos) return Bad("body", "a part is not closed by the boundary");
    if (!filename || filename->empty()) {
      return Bad("body", "every part needs a filename (the file's path)");
    }
    if (out.size() >= max_parts) {
      return Bad("body", "more than " + std::to_string(max_parts) + " files in one upload");
    }
    out.push_back({std::move(*filename), body.substr(pos, end - pos)});
    pos = end + next.size();
  }
}

}  // namespace agvisor::e2b::envd
