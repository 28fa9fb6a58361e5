// The MCP tools: each a description, an inputSchema, and a function over the session's
// client::Place. Written against client/ only (the desktop verbs through client/desktop.h).
#include "agvisor/mcp/tools.h"

#include <atomic>
#include <csignal>
#include <map>
#include <mutex>

#include "agvisor/api/codec.h"
#include "agvisor/client/desktop.h"

namespace agvisor::mcp::internal {
namespace json = boost::json;

void Cancellation::OnCancel(std::function<void()> stop) {
  std::unique_lock lock(mu_);
  if (cancelled_ && stop) {
    lock.unlock();
    stop();
    return;
  }
  stop_ = std::move(stop);
}

void Cancellation::Cancel() {
  std::function<void()> stop;
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    stop.swap(stop_);
  }
  if (stop) stop();
}

bool Cancellation::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

namespace {

// ---- Arguments (already checked against the schema: the types are right) ----

std::optional<std::string> Str(const json::object& a, std::string_view k) {
  if (const auto* v = a.if_contains(k); v && v->is_string()) return std::string(v->as_string());
  return std::nullopt;
}
std::optional<std::int64_t> Int(const json::object& a, std::string_view k) {
  if (const auto* v = a.if_contains(k)) {
    if (v->is_int64()) return v->as_int64();
    if (v->is_uint64()) return static_cast<std::int64_t>(v->as_uint64());
    if (v->is_double()) return static_cast<std::int64_t>(v->as_double());
  }
  return std::nullopt;
}
std::optional<double> Num(const json::object& a, std::string_view k) {
  if (const auto* v = a.if_contains(k)) {
    if (v->is_number()) return v->to_number<double>();
  }
  return std::nullopt;
}
bool Bool(const json::object& a, std::string_view k, bool fallback) {
  if (const auto* v = a.if_contains(k); v && v->is_bool()) return v->as_bool();
  return fallback;
}
std::vector<std::string> Env(const json::object& a) {
  std::vector<std::string> env;
  if (const auto* v = a.if_contains("env"); v && v->is_object()) {
    for (const auto& kv : v->as_object()) {
      env.push_back(std::string(kv.key()) + "=" + std::string(kv.value().as_string()));
    }
  }
  return env;
}

// "sandbox": what create_sandbox returned ("agvisor-...") or a named sandbox's name.
Result<std::string> ContainerOf(const json::object& a) {
  std::string s = *Str(a, "sandbox");
  std::string_view id = s;
  if (id.starts_with(kNamePrefix)) id.remove_prefix(kNamePrefix.size());
  return api::ContainerNameForId(id);
}

Result<std::shared_ptr<client::SandboxHandle>> Open(const json::object& a, CallContext& ctx) {
  return ctx.session.HandleFor(AGVISOR_TRY(ContainerOf(a)));
}

// "command" (a shell line: sh -c) or "argv" (a program and its arguments), exactly one.
Result<std::vector<std::string>> CommandOf(std::string_view tool, const json::object& a) {
  const auto command = Str(a, "command");
  const auto* argv = a.if_contains("argv");
  if (command.has_value() == (argv != nullptr)) {
    return Error::InvalidArgument(std::string(tool) +
                                  ": give exactly one of 'command' (a shell command line, run "
                                  "with sh -c) and 'argv' (a program and its arguments)");
  }
  if (command) return std::vector<std::string>{"sh", "-c", *command};
  std::vector<std::string> out;  // empty: refused by the core (BuildExecRequest)
  for (const auto& v : argv->as_array()) out.emplace_back(v.as_string());
  return out;
}

ToolResult Structured(json::object o) { return ToolResult{std::move(o), {}}; }

// ---- Sandboxes ----

Result<ToolResult> CreateSandbox(const json::object& a, CallContext& ctx) {
  SandboxSpec spec;
  if (auto v = Str(a, "image")) spec.image = *v;
  spec.gui = Bool(a, "gui", false);
  if (auto v = Num(a, "cpus")) spec.limits.cpus = *v;
  if (auto v = Str(a, "memory")) spec.limits.memory = *v;
  if (auto v = Int(a, "pids")) spec.limits.pids = *v;
  if (auto v = Str(a, "disk")) spec.limits.disk = *v;
  if (auto v = Str(a, "network")) spec.network = *v;
  if (auto v = Str(a, "name")) spec.name = *v;
  spec.lifetime = Int(a, "lifetime").value_or(ctx.session.options().default_lifetime);
  spec.idle_ttl = Int(a, "idle_ttl");
  if (const auto* e = a.if_contains("egress")) {
    spec.egress = AGVISOR_TRY(api::ParseEgressRulesJson(json::serialize(*e)));
  }
  // By name only: the value is the operator's (agvisord's --secrets-file); a model never holds
  // one, so none is taken from the arguments (the schema refuses a "value").
  if (const auto* list = a.if_contains("secrets"); list && list->is_array()) {
    for (const auto& e : list->as_array()) {
      const auto& o = e.as_object();
      SecretSpec sec;
      if (auto v = Str(o, "name")) sec.name = *v;
      if (const auto* hosts = o.if_contains("hosts"); hosts && hosts->is_array()) {
        for (const auto& h : hosts->as_array()) sec.hosts.emplace_back(h.as_string());
      }
      if (auto v = Str(o, "header")) sec.header = *v;
      spec.secrets.push_back(std::move(sec));
    }
  }
  auto created = AGVISOR_TRY(ctx.session.place().Create(spec));
  const std::string cname = created.handle->container_name();
  ctx.session.Track(cname, std::shared_ptr<client::SandboxHandle>(std::move(created.handle)));
  json::object o{{"sandbox", cname},
                 {"name", created.name ? json::value(*created.name) : json::value(nullptr)},
                 {"resumed", created.resumed},
                 {"lifetime", *spec.lifetime}};
  if (spec.idle_ttl) o["idle_ttl"] = *spec.idle_ttl;
  if (!created.disk_warning.empty()) o["warning"] = created.disk_warning;
  return Structured(std::move(o));
}

Result<ToolResult> ListSandboxes(const json::object&, CallContext& ctx) {
  auto list = AGVISOR_TRY(ctx.session.place().List());
  const auto mine = ctx.session.Tracked();
  json::array a;
  for (const auto& i : list) {
    a.push_back(
        {{"sandbox", i.container_name},
         {"name", i.name ? json::value(*i.name) : json::value(nullptr)},
         {"image", i.image},
         {"state", i.state},
         {"running", i.running},
         {"this_session", std::find(mine.begin(), mine.end(), i.container_name) != mine.end()}});
  }
  return Structured({{"sandboxes", std::move(a)}});
}

Result<ToolResult> RemoveSandbox(const json::object& a, CallContext& ctx, bool erase) {
  const std::string cname = AGVISOR_TRY(ContainerOf(a));
  AGVISOR_RETURN_IF_ERROR(ctx.session.place().Remove(cname, erase));
  ctx.session.Forget(cname);
  return Structured({{"sandbox", cname}, {erase ? "deleted" : "stopped", true}});
}
Result<ToolResult> StopSandbox(const json::object& a, CallContext& ctx) {
  return RemoveSandbox(a, ctx, false);
}
Result<ToolResult> DeleteSandbox(const json::object& a, CallContext& ctx) {
  return RemoveSandbox(a, ctx, true);
}

Result<ToolResult> UpdateSandbox(const json::object& a, CallContext& ctx) {
  LimitsUpdate u;
  u.cpus = Num(a, "cpus");
  u.memory = Str(a, "memory");
  u.pids = Int(a, "pids");
  const std::string cname = AGVISOR_TRY(ContainerOf(a));
  auto live = AGVISOR_TRY(ctx.session.place().Update(cname, u));
  return Structured({{"sandbox", cname},
                     {"cpus", live.cpus},
                     {"memory_bytes", live.memory_bytes},
                     {"pids", live.pids}});
}

// ---- Snapshots ----

Result<ToolResult> SnapshotSandbox(const json::object& a, CallContext& ctx) {
  auto sb = AGVISOR_TRY(Open(a, ctx));
  SnapshotOptions o;
  o.image = *Str(a, "image");
  o.include_workspace = Bool(a, "workspace", false);
  auto r = AGVISOR_TRY(sb->Snapshot(o));
  json::object out;
  api::ForEachSnapshotField(r, [&](const char* name, const auto& value) { out[name] = value; });
  return Structured(std::move(out));
}

Result<ToolResult> ListSnapshots(const json::object&, CallContext& ctx) {
  json::array a;
  for (const SnapshotInfo& s : AGVISOR_TRY(ctx.session.place().ListSnapshots())) {
    json::object o;
    api::ForEachSnapshotInfoField(s, [&](const char* name, const auto& value) { o[name] = value; });
    a.push_back(std::move(o));
  }
  return Structured({{"snapshots", std::move(a)}});
}

Result<ToolResult> RemoveSnapshot(const json::object& a, CallContext& ctx) {
  const std::string tag = *Str(a, "image");
  AGVISOR_RETURN_IF_ERROR(ctx.session.place().RemoveSnapshot(tag));
  return Structured({{"image", tag}, {"removed", true}});
}

// ---- Commands ----

Result<ToolResult> Exec(const json::object& a, CallContext& ctx) {
  auto argv = AGVISOR_TRY(CommandOf("exec", a));
  ExecOptions o;
  o.timeout = Num(a, "timeout").value_or(o.timeout);
  o.input = Str(a, "stdin");
  o.env = Env(a);
  o.cwd = Str(a, "cwd").value_or("");
  o.user = Str(a, "user").value_or("");
  // Streamed always, so the result keeps the last kExecOutputCap bytes of each stream (the end
  // of a build log is where its error is); with a progress token each piece is also sent on.
  double sent = 0;
  auto piece = [&ctx, &sent](std::string_view b) {
    sent += static_cast<double>(b.size());
    if (ctx.progress) ctx.progress(sent, b);
  };
  o.on_stdout = piece;
  o.on_stderr = piece;
  const ProcessOptions po = AGVISOR_TRY(client::ProcessOptionsFor(o));  // checked before Open
  auto sb = AGVISOR_TRY(Open(a, ctx));
  // Started as a command, so that notifications/cancelled can kill it (the spec says a server
  // should stop what the client gave up on) instead of letting it run to its timeout.
  std::shared_ptr<client::Command> command = AGVISOR_TRY(sb->Start(argv, po));
  ctx.cancellation->OnCancel([command] { (void)command->Signal(SIGKILL); });
  auto ran = client::RunToEnd(*command, o);
  ctx.cancellation->OnCancel(nullptr);
  if (ctx.cancellation->cancelled()) {
    return Error::Conflict(
        "exec: cancelled by the client (notifications/cancelled): its "
        "process group was killed");
  }
  auto r = AGVISOR_TRY(std::move(ran));
  return Structured({{"exit_code", r.exit_code},
                     {"timed_out", r.timed_out},
                     {"stdout", api::SanitizeUtf8(r.out)},
                     {"stderr", api::SanitizeUtf8(r.err)},
                     {"truncated", r.truncated}});
}

Result<ToolResult> StartProcess(const json::object& a, CallContext& ctx) {
  auto argv = AGVISOR_TRY(CommandOf("start_process", a));
  BackgroundOptions o;
  o.timeout = Num(a, "timeout").value_or(0);  // its range: the core's (StartBackground)
  o.env = Env(a);
  o.cwd = Str(a, "cwd").value_or("");
  o.user = Str(a, "user").value_or("");
  o.keep_awake = Bool(a, "keep_awake", false);
  auto sb = AGVISOR_TRY(Open(a, ctx));
  const std::uint32_t pid = AGVISOR_TRY(sb->StartBackground(argv, o));
  return Structured({{"pid", pid}});
}

Result<ToolResult> ListProcesses(const json::object& a, CallContext& ctx) {
  auto sb = AGVISOR_TRY(Open(a, ctx));
  auto procs = AGVISOR_TRY(sb->ListProcesses());
  return Structured(json::parse(api::ProcessListJson(procs)).as_object());
}

// The enforcer's records of what the sandbox reached (docs/egress.md, "Log"): as the API's
// GET .../egress/log answers them.
Result<ToolResult> EgressLog(const json::object& a, CallContext& ctx) {
  const std::string cname = AGVISOR_TRY(ContainerOf(a));
  if (!ctx.session.options().egress_log) {
    return Error::Unsupported(
        "egress_log: the egress log is kept by agvisord, which runs the egress enforcers; use "
        "agvisord's /mcp, or `agvisor mcp --server`");
  }
  const auto last =
      static_cast<std::size_t>(Int(a, "last").value_or(api::kDefaultEgressLogRecords));
  const std::string body = AGVISOR_TRY(ctx.session.options().egress_log(cname, last));
  return Structured(json::parse(body).as_object());
}

Result<ToolResult> KillProcess(const json::object& a, CallContext& ctx) {
  const int signal = AGVISOR_TRY(api::ParseSignal(Str(a, "signal").value_or("TERM")));
  const auto pid = static_cast<std::uint32_t>(*Int(a, "pid"));
  auto sb = AGVISOR_TRY(Open(a, ctx));
  AGVISOR_RETURN_IF_ERROR(sb->Signal(pid, signal));
  return Structured({{"pid", pid}, {"signal", signal}});
}

// ---- Files ----

Result<ToolResult> ReadFile(const json::object& a, CallContext& ctx) {
  const std::string path = *Str(a, "path");
  auto sb = AGVISOR_TRY(Open(a, ctx));
  const FileEntry st = AGVISOR_TRY(sb->Stat(path));
  if (st.kind == FileKind::kDir) {
    return Error::InvalidArgument("read_file: " + path + " is a directory (use list_files)");
  }
  if (st.size > kReadFileCap) {
    return Error::ResourceExhausted("read_file: " + path + " is " + std::to_string(st.size) +
                                    " bytes, more than read_file returns (" +
                                    std::to_string(kReadFileCap) +
                                    "); read a part with exec (head -c, tail -c, sed -n)");
  }
  std::string data = AGVISOR_TRY(sb->ReadFile(path));
  const bool text = api::SanitizeUtf8(data) == data;
  return Structured({{"path", path},
                     {"size", data.size()},
                     {"encoding", text ? "utf-8" : "base64"},
                     {"content", text ? data : api::Base64Encode(data)}});
}

Result<ToolResult> WriteFile(const json::object& a, CallContext& ctx) {
  const std::string path = *Str(a, "path");
  std::string data = *Str(a, "content");
  if (Str(a, "encoding").value_or("utf-8") == "base64") {
    data = AGVISOR_TRY(api::Base64Decode(data, "write_file: content"));
  }
  const auto mode = static_cast<std::uint32_t>(Int(a, "mode").value_or(0644));
  auto sb = AGVISOR_TRY(Open(a, ctx));
  if (Bool(a, "make_parents", true)) {
    if (auto slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
      AGVISOR_RETURN_IF_ERROR(sb->Mkdir(path.substr(0, slash), /*parents=*/true, 0755));
    }
  }
  AGVISOR_RETURN_IF_ERROR(sb->WriteFile(path, data, mode));
  return Structured({{"path", path}, {"size", data.size()}});
}

Result<ToolResult> ListFiles(const json::object& a, CallContext& ctx) {
  const std::string path = *Str(a, "path");
  auto sb = AGVISOR_TRY(Open(a, ctx));
  auto entries = AGVISOR_TRY(sb->ListDir(path));
  return Structured(json::parse(api::FileListJson(path, entries)).as_object());
}

// ---- Desktop ----

Result<ToolResult> Screenshot(const json::object& a, CallContext& ctx) {
  auto sb = AGVISOR_TRY(Open(a, ctx));
  return ToolResult{{}, AGVISOR_TRY(desktop::Screenshot(*sb))};
}

int Coord(const json::object& a, std::string_view k) { return static_cast<int>(*Int(a, k)); }

Result<ToolResult> Done(Result<void> r) {
  AGVISOR_RETURN_IF_ERROR(r);
  return Structured({{"ok", true}});
}

Result<ToolResult> Move(const json::object& a, CallContext& ctx) {
  auto sb = AGVISOR_TRY(Open(a, ctx));
  return Done(desktop::MouseMove(*sb, Coord(a, "x"), Coord(a, "y")));
}
Result<ToolResult> Click(const json::object& a, CallContext& ctx) {
  auto sb = AGVISOR_TRY(Open(a, ctx));
  const auto button = AGVISOR_TRY(desktop::ParseMouseButton(Str(a, "button").value_or("left")));
  return Done(desktop::Click(*sb, Coord(a, "x"), Coord(a, "y"), button,
                             static_cast<int>(Int(a, "count").value_or(1))));
}
Result<ToolResult> Scroll(const json::object& a, CallContext& ctx) {
  auto sb = AGVISOR_TRY(Open(a, ctx));
  return Done(desktop::Scroll(*sb, Coord(a, "x"), Coord(a, "y"),
                              static_cast<int>(Int(a, "dy").value_or(0)),
                              static_cast<int>(Int(a, "dx").value_or(0))));
}
Result<ToolResult> Type(const json::object& a, CallContext& ctx) {
  auto sb = AGVISOR_TRY(Open(a, ctx));
  return Done(desktop::TypeText(*sb, *Str(a, "text")));
}
Result<ToolResult> Key(const json::object& a, CallContext& ctx) {
  auto sb = AGVISOR_TRY(Open(a, ctx));
  return Done(desktop::Key(*sb, *Str(a, "keys")));
}

// ---- The table ----

// Pieces the schemas below share, put in where the schema text says $SANDBOX, $COMMAND or $XY
// (SchemaOf).
constexpr std::string_view kSandboxProp =
    R"js("sandbox": {"type": "string", "description": "the sandbox: what create_sandbox returned (agvisor-...) or a named sandbox's name"})js";
constexpr std::string_view kCommandProps = R"js(
  "command": {"type": "string", "description": "a shell command line, run with sh -c (give this or argv)"},
  "argv": {"type": "array", "items": {"type": "string"}, "description": "a program and its arguments, run without a shell (give this or command)"},
  "cwd": {"type": "string", "description": "working directory (default: /workspace for named sandboxes, else the image's)"},
  "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "extra environment variables, {\"NAME\": \"value\"}"},
  "user": {"type": "string", "description": "user to run as (default: the image's)"})js";
constexpr std::string_view kXyProps = R"js(
  "x": {"type": "integer", "minimum": 0, "description": "pixels from the left"},
  "y": {"type": "integer", "minimum": 0, "description": "pixels from the top"})js";

const Tool kTools[] = {
    {"create_sandbox",
     "Create and start a gVisor sandbox (a throwaway Linux machine with hard CPU and memory "
     "limits) and return its id in 'sandbox'. It ends itself after 'lifetime' seconds (default "
     "3600) and is removed when this MCP session ends. A 'name' makes it resumable: /workspace "
     "is kept in a volume, and creating the same name again re-attaches. 'gui' makes a desktop "
     "(use the desktop_* tools).",
     R"js({"type": "object", "additionalProperties": false, "properties": {
  "image": {"type": "string", "description": "image to run (default the host's default image; agvisor/desktop:latest with gui)"},
  "name": {"type": "string", "description": "makes the sandbox resumable ([A-Za-z0-9][A-Za-z0-9_.-]*, at most 63)"},
  "gui": {"type": "boolean", "description": "a desktop sandbox (Xvnc + xfce), ready when drawn"},
  "cpus": {"type": "number", "exclusiveMinimum": 0, "description": "CPU cores, fractions allowed (default 2)"},
  "memory": {"type": "string", "description": "RAM cap in Docker syntax, e.g. 512m, 2g (default 2g; no swap)"},
  "pids": {"type": "integer", "minimum": 1, "maximum": 65536, "description": "most processes inside (default 512)"},
  "disk": {"type": "string", "description": "root file system cap, e.g. 5g, or none"},
  "network": {"type": "string", "description": "bridge (default: the internet, not the host), none, or a network made with `agvisor network create NAME`"},
  "lifetime": {"type": "integer", "minimum": 1, "description": "seconds until the sandbox ends itself, even if this server dies (default 3600)"},
  "idle_ttl": {"type": "integer", "minimum": 1, "description": "seconds without activity (exec, file calls) until the sandbox ends itself"},
  "egress": {"type": "object", "additionalProperties": false, "description": "an egress policy: the sandbox reaches only what it allows (needs network bridge and agvisord on the Docker host)", "properties": {
    "allow_domains": {"type": "array", "items": {"type": "string"}, "description": "names it may reach, e.g. pypi.org, *.pythonhosted.org"},
    "allow_cidrs": {"type": "array", "items": {"type": "string"}, "description": "address blocks it may reach, e.g. 203.0.113.0/24"},
    "ports": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 65535}, "description": "destination ports (default 80 and 443)"},
    "deny_domains": {"type": "array", "items": {"type": "string"}, "description": "names never reached, even when allowed above"},
    "mode": {"type": "string", "description": "enforce (the default) or learn: what no rule allows is let through and logged (never loopback, metadata, private ranges or the host), for an operator to draw a policy from"}}},
  "secrets": {"type": "array", "description": "brokered secrets by name, from the operator's secrets file on agvisord's host (you never see or pass a value): the sandbox gets NAME=agvsec_<random>, and the egress enforcer puts the value into requests to the hosts (needs egress allowing them)", "items": {"type": "object", "additionalProperties": false, "required": ["name", "hosts"], "properties": {
    "name": {"type": "string", "description": "the secret's name in the operator's file; also the sandbox's environment variable"},
    "hosts": {"type": "array", "items": {"type": "string"}, "description": "exact host names it is sent to, e.g. api.openai.com"},
    "header": {"type": "string", "description": "the header the value goes in (default Authorization: Bearer/token/Basic)"}}}}}})js",
     CreateSandbox},
    {"list_sandboxes",
     "List every agvisor sandbox on the host, running or not; 'this_session' marks the ones this "
     "session created.",
     R"js({"type": "object", "additionalProperties": false, "properties": {}})js", ListSandboxes},
    {"stop_sandbox",
     "Stop a sandbox: its container and processes go; a named sandbox keeps its /workspace "
     "volume and can be created again by name.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox"], "properties": { $SANDBOX}})js",
     StopSandbox},
    {"delete_sandbox",
     "Delete a sandbox: stop it and erase its /workspace volume (named sandboxes).",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox"], "properties": { $SANDBOX}})js",
     DeleteSandbox},
    {"update_sandbox",
     "Resize a running sandbox in place: give any of cpus, memory and pids. Enforced as at "
     "create (past the new memory the whole sandbox ends, reported as out of memory; memory "
     "below what it uses now is refused). Returns the limits it runs under now.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox"], "properties": { $SANDBOX,
  "cpus": {"type": "number", "exclusiveMinimum": 0, "description": "CPU cores, fractions allowed"},
  "memory": {"type": "string", "description": "RAM cap in Docker syntax, e.g. 512m, 2g (no swap)"},
  "pids": {"type": "integer", "minimum": 1, "maximum": 65536, "description": "most processes inside"}}})js",
     UpdateSandbox},
    {"snapshot_sandbox",
     "Make a snapshot (a Docker image in agvisor's snapshot repository) of a sandbox's root "
     "file system as the sandbox sees it (files written anywhere, /workspace only with "
     "'workspace'); running processes are not kept. create_sandbox with 'image' set to "
     "'snapshot:TAG' (or the returned image) starts from it.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "image"], "properties": { $SANDBOX,
  "image": {"type": "string", "description": "the snapshot's tag (letters, digits, _ . -), made as agvisor/snapshot:TAG; an image of that name that is no snapshot is never replaced"},
  "workspace": {"type": "boolean", "description": "include /workspace (default false)"}}})js",
     SnapshotSandbox},
    {"list_snapshots",
     "List the snapshots on the host (snapshot_sandbox makes them) by tag: image, image_id, the "
     "sandbox it was made of, whether it holds /workspace, created (unix seconds), size_bytes.",
     R"js({"type": "object", "additionalProperties": false, "properties": {}})js", ListSnapshots},
    {"remove_snapshot",
     "Remove a snapshot and the images agvisor derived from it (its layers no other image holds "
     "go too). Only agvisor's own snapshots: any other image is refused, and so is a snapshot a "
     "sandbox runs from (the error names the sandbox).",
     R"js({"type": "object", "additionalProperties": false, "required": ["image"], "properties": {
  "image": {"type": "string", "description": "the snapshot's tag (or snapshot:TAG, agvisor/snapshot:TAG)"}}})js",
     RemoveSnapshot},
    {"exec",
     "Run a command in a sandbox to its end and return exit_code, stdout and stderr. At the "
     "timeout the whole process tree is killed and exit_code is 124. Each of stdout and stderr "
     "keeps its last 100000 bytes ('truncated' says older output was dropped); when the request "
     "carries a progressToken, output is also streamed as progress notifications as it comes.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox"], "properties": { $SANDBOX, $COMMAND,
  "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "seconds (default 120)"},
  "stdin": {"type": "string", "description": "text given to the command's standard input"}}})js",
     Exec},
    {"read_file",
     "Read a file in a sandbox (at most 8 MiB). UTF-8 text comes as is ('encoding': 'utf-8'), "
     "other bytes as base64 ('encoding': 'base64').",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "path"], "properties": { $SANDBOX, "path": {"type": "string", "description": "absolute path inside the sandbox"}}})js",
     ReadFile},
    {"write_file",
     "Write a file in a sandbox (replacing it), creating missing parent directories unless "
     "make_parents is false.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "path", "content"], "properties": { $SANDBOX,
  "path": {"type": "string", "description": "absolute path inside the sandbox"},
  "content": {"type": "string", "description": "the file's contents"},
  "encoding": {"type": "string", "enum": ["utf-8", "base64"], "description": "how content is given (default utf-8)"},
  "mode": {"type": "integer", "minimum": 0, "maximum": 4095, "description": "permission bits (default 420 = 0644)"},
  "make_parents": {"type": "boolean", "description": "create missing parent directories (default true)"}}})js",
     WriteFile},
    {"list_files",
     "List a directory in a sandbox. Returns its path and entries, each with the fields name; "
     "kind (file, dir, symlink or other); mode (the permission bits); size (bytes); "
     "mtime_unix_ms (milliseconds since the epoch); link_target (symlinks only).",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "path"], "properties": { $SANDBOX, "path": {"type": "string", "description": "absolute path of a directory inside the sandbox"}}})js",
     ListFiles},
    {"start_process",
     "Start a command in the background and return its pid at once (a server, a watcher). It "
     "keeps running after this call; redirect its output to a file to read it later, e.g. "
     "'python3 -m http.server 8000 > /tmp/server.log 2>&1'.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox"], "properties": { $SANDBOX, $COMMAND,
  "timeout": {"type": "number", "minimum": 0, "description": "seconds until its process tree is killed (default 0 = none)"},
  "keep_awake": {"type": "boolean", "description": "while it runs the sandbox is not idle, so idle_ttl does not end it; the idle clock starts when it exits (default false)"}}})js",
     StartProcess},
    {"list_processes",
     "List a sandbox's background processes (running, and the newest finished ones with their "
     "exit codes).",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox"], "properties": { $SANDBOX}})js",
     ListProcesses},
    {"kill_process", "Send a signal (default TERM) to a background process's process group.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "pid"], "properties": { $SANDBOX,
  "pid": {"type": "integer", "minimum": 1, "description": "what start_process returned"},
  "signal": {"type": "string", "description": "a name (TERM, KILL, INT, HUP, ...) or a number (default TERM)"}}})js",
     KillProcess},
    {"egress_log",
     "Read a sandbox's egress log: the last records of what it tried to reach through its "
     "egress policy (needs agvisord), oldest first. Each has time, via (http, https, tls, "
     "connect, dns, tcp), name, port, allowed and reason (the rule or why refused), address, "
     "and for a request method, path, status, bytes_up, bytes_down, duration_ms, and secret "
     "(the name of a brokered secret put in, never its value).",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox"], "properties": { $SANDBOX,
  "last": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "how many of the newest records (default 50)"}}})js",
     EgressLog},
    {"desktop_screenshot",
     "Take a screenshot of a desktop sandbox (created with gui) as a PNG image.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox"], "properties": { $SANDBOX}})js",
     Screenshot},
    {"desktop_click", "Click the mouse at x, y on a desktop sandbox's screen.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "x", "y"], "properties": { $SANDBOX, $XY,
  "button": {"type": "string", "enum": ["left", "middle", "right"], "description": "default left"},
  "count": {"type": "integer", "minimum": 1, "maximum": 3, "description": "clicks (2 = double click; default 1)"}}})js",
     Click},
    {"desktop_move", "Move the mouse pointer to x, y on a desktop sandbox's screen.",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "x", "y"], "properties": { $SANDBOX, $XY}})js",
     Move},
    {"desktop_scroll",
     "Turn the mouse wheel at x, y on a desktop sandbox: dy steps (> 0 down, < 0 up), dx steps "
     "(> 0 right, < 0 left).",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "x", "y", "dy"], "properties": { $SANDBOX, $XY,
  "dy": {"type": "integer", "description": "wheel steps down (negative: up)"},
  "dx": {"type": "integer", "description": "wheel steps right (negative: left; default 0)"}}})js",
     Scroll},
    {"desktop_type",
     "Type text into the focused window of a desktop sandbox (any UTF-8; a newline is Return, "
     "a tab is Tab).",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "text"], "properties": { $SANDBOX, "text": {"type": "string", "description": "the text to type"}}})js",
     Type},
    {"desktop_key",
     "Press key combinations on a desktop sandbox, in turn: e.g. 'Return', 'ctrl+c', "
     "'ctrl+alt+t shift+Tab' (X key names joined by +, combinations separated by spaces).",
     R"js({"type": "object", "additionalProperties": false, "required": ["sandbox", "keys"], "properties": { $SANDBOX, "keys": {"type": "string", "description": "key combinations, e.g. ctrl+s or Return"}}})js",
     Key},
};

// ---- The schema check ----

std::string_view TypeName(const json::value& v) {
  switch (v.kind()) {
    case json::kind::string:
      return "a string";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
    case json::kind::null:
      return "null";
    case json::kind::double_:
      return "a number with a fraction";
    default:
      return "an integer";
  }
}

bool IsInteger(const json::value& v) {
  if (v.is_int64() || v.is_uint64()) return true;
  // 3.0 is an integer in JSON Schema.
  return v.is_double() &&
         v.as_double() == static_cast<double>(static_cast<std::int64_t>(v.as_double()));
}

Result<void> Check(const std::string& where, const json::object& schema, const json::value& v) {
  auto bad = [&](std::string rule) {
    return Error::InvalidArgument(where + " must be " + rule + " (got " + std::string(TypeName(v)) +
                                  ")");
  };
  const std::string_view type = schema.at("type").as_string();
  if (type == "string" && !v.is_string()) return bad("a string");
  if (type == "boolean" && !v.is_bool()) return bad("true or false");
  if (type == "integer" && !IsInteger(v)) return bad("an integer");
  if (type == "number" && !v.is_number()) return bad("a number");
  if (type == "array" && !v.is_array()) return bad("an array");
  if (type == "object" && !v.is_object()) return bad("an object");
  if (const auto* e = schema.if_contains("enum")) {
    bool found = false;
    std::string choices;
    for (const auto& c : e->as_array()) {
      found = found || c == v;
      choices += (choices.empty() ? "" : ", ") + json::serialize(c);
    }
    if (!found) {
      return Error::InvalidArgument(where + " must be one of " + choices + " (got " +
                                    api::SanitizeUtf8(json::serialize(v)) + ")");
    }
  }
  if (v.is_number()) {
    const double d = v.to_number<double>();
    if (const auto* m = schema.if_contains("minimum"); m && d < m->to_number<double>()) {
      return Error::InvalidArgument(where + " must be at least " + json::serialize(*m) + " (got " +
                                    json::serialize(v) + ")");
    }
    if (const auto* m = schema.if_contains("exclusiveMinimum"); m && d <= m->to_number<double>()) {
      return Error::InvalidArgument(where + " must be more than " + json::serialize(*m) + " (got " +
                                    json::serialize(v) + ")");
    }
    if (const auto* m = schema.if_contains("maximum"); m && d > m->to_number<double>()) {
      return Error::InvalidArgument(where + " must be at most " + json::serialize(*m) + " (got " +
                                    json::serialize(v) + ")");
    }
  }
  if (v.is_array()) {
    const auto& items = schema.at("items").as_object();
    std::size_t i = 0;
    for (const auto& item : v.as_array()) {
      AGVISOR_RETURN_IF_ERROR(Check(where + "[" + std::to_string(i++) + "]", items, item));
    }
  }
  if (v.is_object()) {
    const auto& o = v.as_object();
    const auto* props = schema.if_contains("properties");
    const auto* extra = schema.if_contains("additionalProperties");
    if (const auto* req = schema.if_contains("required")) {
      for (const auto& r : req->as_array()) {
        if (!o.contains(r.as_string())) {
          return Error::InvalidArgument(where + ": '" + std::string(r.as_string()) +
                                        "' is required");
        }
      }
    }
    for (const auto& kv : o) {
      const std::string key(kv.key());
      const json::value* sub = props ? props->as_object().if_contains(key) : nullptr;
      if (sub) {
        AGVISOR_RETURN_IF_ERROR(Check(where + "." + key, sub->as_object(), kv.value()));
      } else if (extra && extra->is_object()) {
        AGVISOR_RETURN_IF_ERROR(Check(where + "." + key, extra->as_object(), kv.value()));
      } else if (extra && extra->is_bool() && !extra->as_bool()) {
        std::string known;
        if (props) {
          for (const auto& p : props->as_object()) {
            known += (known.empty() ? "" : ", ") + std::string(p.key());
          }
        }
        return Error::InvalidArgument(where + ": unknown argument '" + api::SanitizeUtf8(key) +
                                      "' (known: " + (known.empty() ? "none" : known) + ")");
      }
    }
  }
  return Ok();
}

}  // namespace

std::span<const Tool> Tools() { return kTools; }

const Tool* FindTool(std::string_view name) {
  for (const auto& t : kTools) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const json::object& SchemaOf(const Tool& tool) {
  // Parsed once, on first use; the table is constant.
  static const std::map<std::string_view, json::object> parsed = [] {
    std::map<std::string_view, json::object> m;
    for (const auto& t : kTools) {
      std::string text(t.schema);
      for (auto [token, piece] : {std::pair{std::string_view("$SANDBOX"), kSandboxProp},
                                  std::pair{std::string_view("$COMMAND"), kCommandProps},
                                  std::pair{std::string_view("$XY"), kXyProps}}) {
        if (auto at = text.find(token); at != std::string::npos) {
          text.replace(at, token.size(), piece);
        }
      }
      m.emplace(t.name, json::parse(text).as_object());
    }
    return m;
  }();
  return parsed.at(tool.name);
}

Result<void> ValidateArguments(std::string_view tool, const json::object& schema,
                               const json::object& args) {
  // The top level reads "exec: argument 'timeout' must be ...", nested ones name their path.
  const auto* props = schema.if_contains("properties");
  if (const auto* req = schema.if_contains("required")) {
    for (const auto& r : req->as_array()) {
      if (!args.contains(r.as_string())) {
        return Error::InvalidArgument(std::string(tool) + ": argument '" +
                                      std::string(r.as_string()) + "' is required");
      }
    }
  }
  for (const auto& kv : args) {
    const std::string key(kv.key());
    const json::value* sub = props ? props->as_object().if_contains(key) : nullptr;
    if (!sub) {
      std::string known;
      if (props) {
        for (const auto& p : props->as_object()) {
          known += (known.empty() ? "" : ", ") + std::string(p.key());
        }
      }
      return Error::InvalidArgument(std::string(tool) + ": unknown argument '" +
                                    api::SanitizeUtf8(key) +
                                    "' (known: " + (known.empty() ? "none" : known) + ")");
    }
    AGVISOR_RETURN_IF_ERROR(
        Check(std::string(tool) + ": argument '" + key + "'", sub->as_object(), kv.value()));
  }
  return Ok();
}

}  // namespace agvisor::mcp::internal
