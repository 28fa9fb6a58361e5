// envd's Filesystem service (filesystem.proto) and /files routes over client::SandboxHandle, and
// the method dispatch of envd_service.h.
//
// Metadata (stat, list, watch) comes from the agent's own calls; what changes the file system
// (upload, make dir, move, remove) runs as a command of the caller's user, so that what it makes
// is that user's and what the user may not touch fails as it would for them.
#include <algorithm>

#include "agvisor/base/strings.h"
#include "agvisor/e2b/envd_service.h"
#include "agvisor/e2b/envd_state.h"

namespace agvisor::e2b::envd {

UnaryAnswer CallProcessUnary(const Caller& c, std::string_view method, std::string_view json);
void CallProcessStream(const Caller& c, std::string_view method, std::string_view json,
                       const StreamOptions& options, const StreamWriter& write);

EnvdState::EnvdState() : impl_(std::make_unique<Impl>()) {}
EnvdState::~EnvdState() = default;

namespace {

// Entries ListDir reports at most (all depths together).
constexpr std::size_t kMaxListEntries = 100000;
// Events one GetWatcherEvents call returns at most (the rest wait for the next call).
constexpr std::size_t kMaxWatcherEvents = 10000;

std::string Key(const Caller& c) { return c.handle->container_name(); }

std::string Basename(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string Join(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

FileType TypeOf(proto::EntryKind kind) {
  switch (kind) {
    case proto::EntryKind::kFile:
      return FileType::kFile;
    case proto::EntryKind::kDir:
      return FileType::kDirectory;
    case proto::EntryKind::kSymlink:
      return FileType::kSymlink;
    case proto::EntryKind::kOther:
      break;
  }
  return FileType::kUnspecified;
}

EntryInfo InfoOf(const FileEntry& e, std::string path) {
  EntryInfo info;
  info.name = Basename(path);
  info.type = TypeOf(e.kind);
  info.path = std::move(path);
  info.size = static_cast<std::int64_t>(e.size);
  info.mode = e.mode & 07777;
  info.permissions = PermissionString(info.type, e.mode);
  info.modified_unix_ns = e.mtime_unix_ms * 1000000;
  if (info.type == FileType::kSymlink) info.symlink_target = e.link_target;
  return info;
}

// Runs argv as the caller's user; a command that failed becomes the error its message names.
Result<void> RunAsUser(const Caller& c, const std::vector<std::string>& argv,
                       std::optional<std::string> input, std::string_view what) {
  ExecOptions o;
  o.input = std::move(input);
  o.user = c.user;
  o.timeout = 600;
  o.max_output_bytes = 16 << 10;
  auto r = AGVISOR_TRY(c.handle->Exec(argv, o));
  if (r.exit_code == 0) return Ok();
  std::string err = r.err;
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  std::string message = std::string(what) + ": " + (err.empty() ? "failed" : err);
  auto has = [&err](std::string_view s) { return err.find(s) != std::string::npos; };
  if (has("No such file")) return Error::NotFound(message);
  if (has("Permission denied") || has("Operation not permitted")) {
    return Error::PermissionDenied(message);
  }
  if (has("File exists")) return Error::Conflict(message);
  if (has("Not a directory") || has("Is a directory")) return Error::InvalidArgument(message);
  if (has("No space left")) return Error::ResourceExhausted(message);
  return Error::Internal(message);
}

// The path of a {"path"} request, resolved for the caller's user.
Result<std::string> PathOf(const Caller& c, std::string_view json) {
  auto raw = AGVISOR_TRY(DecodePathRequest(json));
  return ResolvePath(raw, c.user);
}

Result<EntryInfo> StatPath(const Caller& c, const std::string& path) {
  auto e = c.handle->Stat(path);
  if (!e.ok()) {
    if (e.error().code() == ErrorCode::kNotFound) {
      return Error::NotFound("path " + path + " does not exist");
    }
    return e.error();
  }
  return InfoOf(*e, path);
}

Result<std::string> Stat(const Caller& c, std::string_view json) {
  auto path = AGVISOR_TRY(PathOf(c, json));
  return EntryResponseJson(AGVISOR_TRY(StatPath(c, path)));
}

Result<void> ListInto(const Caller& c, const std::string& dir, std::uint32_t depth,
                      std::vector<EntryInfo>& out) {
  auto entries = c.handle->ListDir(dir);
  if (!entries.ok()) {
    if (entries.error().code() == ErrorCode::kNotFound) {
      return Error::NotFound("directory " + dir + " does not exist");
    }
    return entries.error();
  }
  for (const auto& e : *entries) {
    if (out.size() >= kMaxListEntries) {
      return Error::ResourceExhausted("listing " + dir + ": more than " +
                                      std::to_string(kMaxListEntries) +
                                      " entries; list with a smaller depth");
    }
    out.push_back(InfoOf(e, Join(dir, e.name)));
    if (e.kind == proto::EntryKind::kDir && depth > 1) {
      AGVISOR_RETURN_IF_ERROR(ListInto(c, out.back().path, depth - 1, out));
    }
  }
  return Ok();
}

Result<std::string> ListDir(const Caller& c, std::string_view json) {
  auto [raw, depth] = AGVISOR_TRY(DecodeListDirRequest(json));
  auto dir = AGVISOR_TRY(ResolvePath(raw, c.user));
  auto info = AGVISOR_TRY(StatPath(c, dir));
  if (info.type != FileType::kDirectory) {
    return Error::InvalidArgument("path " + dir + " is not a directory");
  }
  std::vector<EntryInfo> out;
  AGVISOR_RETURN_IF_ERROR(ListInto(c, dir, depth, out));
  return ListDirResponseJson(out);
}

Result<std::string> MakeDir(const Caller& c, std::string_view json) {
  auto path = AGVISOR_TRY(PathOf(c, json));
  if (c.handle->Stat(path).ok()) return Error::Conflict("path " + path + " already exists");
  AGVISOR_RETURN_IF_ERROR(
      RunAsUser(c, {"mkdir", "-p", "--", path}, std::nullopt, "make dir " + path));
  return EntryResponseJson(AGVISOR_TRY(StatPath(c, path)));
}

Result<std::string> Move(const Caller& c, std::string_view json) {
  auto [raw_src, raw_dst] = AGVISOR_TRY(DecodeMoveRequest(json));
  auto src = AGVISOR_TRY(ResolvePath(raw_src, c.user));
  auto dst = AGVISOR_TRY(ResolvePath(raw_dst, c.user));
  AGVISOR_TRY(StatPath(c, src));
  AGVISOR_RETURN_IF_ERROR(
      RunAsUser(c, {"mv", "-T", "--", src, dst}, std::nullopt, "move " + src + " to " + dst));
  return EntryResponseJson(AGVISOR_TRY(StatPath(c, dst)));
}

Result<std::string> Remove(const Caller& c, std::string_view json) {
  auto path = AGVISOR_TRY(PathOf(c, json));
  AGVISOR_TRY(StatPath(c, path));
  AGVISOR_RETURN_IF_ERROR(RunAsUser(c, {"rm", "-rf", "--", path}, std::nullopt, "remove " + path));
  return std::string("{}");
}

// The SDK's events of one agent event: a move is fsnotify's pair (the old name renamed, the
// new one created).
void AddEvents(const Caller& c, const std::string& root, bool include_entry, const WatchEvent& e,
               std::vector<FilesystemEvent>& out) {
  auto event = [&](std::string name, EventType type) {
    FilesystemEvent f{std::move(name), type, std::nullopt};
    if (include_entry && type != EventType::kRemove && type != EventType::kRename) {
      if (auto info = StatPath(c, Join(root, f.name)); info.ok()) f.entry = std::move(*info);
    }
    out.push_back(std::move(f));
  };
  switch (e.kind) {
    case WatchEventKind::kCreate:
      event(e.path, EventType::kCreate);
      break;
    case WatchEventKind::kModify:
      event(e.path, EventType::kWrite);
      break;
    case WatchEventKind::kDelete:
      event(e.path, EventType::kRemove);
      break;
    case WatchEventKind::kMove:
      event(e.old_path, EventType::kRename);
      event(e.path, EventType::kCreate);
      break;
    case WatchEventKind::kOverflow:
      break;  // the SDK has no such event
  }
}

void WatchDir(const Caller& c, std::string_view json, const StreamOptions& options,
              const StreamWriter& write) {
  auto fail = [&](const Error& e) { (void)write(connect::EndStream(connect::FromError(e))); };
  auto r = DecodeWatchRequest(json);
  if (!r.ok()) return fail(r.error());
  auto root = ResolvePath(r->path, c.user);
  if (!root.ok()) return fail(root.error());
  auto info = StatPath(c, *root);
  if (!info.ok()) return fail(info.error());
  if (info->type != FileType::kDirectory) {
    return fail(Error::InvalidArgument("path " + *root + " is not a directory"));
  }
  auto watch = c.handle->Watch(*root, r->recursive);
  if (!watch.ok()) return fail(watch.error());
  std::shared_ptr<client::DirWatch> w = std::move(*watch);
  PumpStream(
      write, options, WatchKeepaliveJson(),
      [&](EventQueue& q) {
        q.Push(WatchStartJson());
        while (true) {
          auto next = w->Next(std::chrono::seconds(1));
          if (!next.ok()) {
            q.Finish(connect::FromError(next.error()));
            return;
          }
          if (!*next) break;
          std::vector<FilesystemEvent> events;
          for (const auto& e : **next) AddEvents(c, *root, r->include_entry, e, events);
          for (const auto& e : events) {
            if (!q.Push(WatchEventJson(e))) return;
          }
        }
        q.Finish(std::nullopt);
      },
      [&](bool) { w->Close(); });
}

Result<std::string> CreateWatcher(const Caller& c, std::string_view json) {
  auto r = AGVISOR_TRY(DecodeWatchRequest(json));
  auto root = AGVISOR_TRY(ResolvePath(r.path, c.user));
  auto info = AGVISOR_TRY(StatPath(c, root));
  if (info.type != FileType::kDirectory) {
    return Error::InvalidArgument("path " + root + " is not a directory");
  }
  auto id = AGVISOR_TRY(RandomHex(16));
  auto& st = c.state->impl();
  {
    std::lock_guard lock(st.mu);
    if (st.watchers[Key(c)].size() >= kMaxTrackedPerSandbox) {
      return Error::ResourceExhausted("envd keeps at most " +
                                      std::to_string(kMaxTrackedPerSandbox) +
                                      " watchers per sandbox: remove some first");
    }
  }
  auto watch = AGVISOR_TRY(c.handle->Watch(root, r.recursive));
  auto w = std::make_shared<Watcher>(Watcher{std::move(watch), root, r.include_entry});
  std::lock_guard lock(st.mu);
  st.watchers[Key(c)][id] = std::move(w);
  return CreateWatcherResponseJson(id);
}

std::shared_ptr<Watcher> FindWatcher(const Caller& c, const std::string& id, bool erase) {
  auto& st = c.state->impl();
  std::lock_guard lock(st.mu);
  auto* w = FindEntry(st.watchers, Key(c), id);
  if (!w) return nullptr;
  auto found = *w;
  if (erase) EraseEntry(st.watchers, Key(c), id);
  return found;
}

Result<std::string> GetWatcherEvents(const Caller& c, std::string_view json) {
  auto id = AGVISOR_TRY(DecodeWatcherIdRequest(json));
  auto w = FindWatcher(c, id, false);
  if (!w) return Error::NotFound("watcher " + id + " does not exist");
  std::vector<FilesystemEvent> events;
  while (events.size() < kMaxWatcherEvents) {
    auto next = AGVISOR_TRY(w->watch->Next(std::chrono::milliseconds(0)));
    if (!next || next->empty()) break;
    for (const auto& e : *next) AddEvents(c, w->root, w->include_entry, e, events);
  }
  return WatcherEventsResponseJson(events);
}

Result<std::string> RemoveWatcher(const Caller& c, std::string_view json) {
  auto id = AGVISOR_TRY(DecodeWatcherIdRequest(json));
  auto w = FindWatcher(c, id, true);
  if (!w) return Error::NotFound("watcher " + id + " does not exist");
  w->watch->Close();
  return std::string("{}");
}

UnaryAnswer Answer(Result<std::string> r) {
  if (!r.ok()) return {connect::FromError(r.error()), ""};
  return {std::nullopt, std::move(*r)};
}

constexpr std::string_view kProcess = "/process.Process/";
constexpr std::string_view kFilesystem = "/filesystem.Filesystem/";

}  // namespace

Result<std::string> ResolvePath(std::string_view path, std::string_view user) {
  if (path.empty()) return Error::InvalidArgument("path: must not be empty");
  if (path.find('\0') != std::string_view::npos) {
    return Error::InvalidArgument("path: must not contain a NUL byte");
  }
  std::string home = user == "root" ? "/root" : "/home/" + std::string(user);
  if (path.front() == '/') return std::string(path);
  if (path == "~") return home;
  if (path.starts_with("~/")) path.remove_prefix(2);
  return Join(home, path);
}

MethodKind KindOf(std::string_view method) {
  if (method.starts_with(kProcess)) {
    auto m = method.substr(kProcess.size());
    if (m == "Start" || m == "Connect") return MethodKind::kServerStream;
    if (m == "StreamInput") return MethodKind::kClientStream;
    if (m == "List" || m == "SendInput" || m == "CloseStdin" || m == "SendSignal" ||
        m == "Update") {
      return MethodKind::kUnary;
    }
  }
  if (method.starts_with(kFilesystem)) {
    auto m = method.substr(kFilesystem.size());
    if (m == "WatchDir") return MethodKind::kServerStream;
    if (m == "Stat" || m == "MakeDir" || m == "Move" || m == "ListDir" || m == "Remove" ||
        m == "CreateWatcher" || m == "GetWatcherEvents" || m == "RemoveWatcher") {
      return MethodKind::kUnary;
    }
  }
  return MethodKind::kUnknown;
}

UnaryAnswer CallUnary(const Caller& c, std::string_view method, std::string_view json) {
  if (method.starts_with(kProcess)) {
    return CallProcessUnary(c, method.substr(kProcess.size()), json);
  }
  auto m = method.substr(std::min(method.size(), kFilesystem.size()));
  if (m == "Stat") return Answer(Stat(c, json));
  if (m == "ListDir") return Answer(ListDir(c, json));
  if (m == "MakeDir") return Answer(MakeDir(c, json));
  if (m == "Move") return Answer(Move(c, json));
  if (m == "Remove") return Answer(Remove(c, json));
  if (m == "CreateWatcher") return Answer(CreateWatcher(c, json));
  if (m == "GetWatcherEvents") return Answer(GetWatcherEvents(c, json));
  if (m == "RemoveWatcher") return Answer(RemoveWatcher(c, json));
  return Answer(Error::Unsupported(std::string(method) + ": not a method envd serves"));
}

void CallStream(const Caller& c, std::string_view method, std::string_view json,
                const StreamOptions& options, const StreamWriter& write) {
  if (method.starts_with(kProcess)) {
    return CallProcessStream(c, method.substr(kProcess.size()), json, options, write);
  }
  WatchDir(c, json, options, write);
}

Result<void> ReadFileTo(const Caller& c, std::string_view raw,
                        const std::function<Result<void>(std::uint64_t size)>& begin,
                        const channel::ByteSink& write) {
  auto path = AGVISOR_TRY(ResolvePath(raw, c.user));
  auto info = AGVISOR_TRY(StatPath(c, path));
  if (info.type == FileType::kDirectory) {
    return Error::InvalidArgument("path " + path + " is a directory, not a file");
  }
  AGVISOR_RETURN_IF_ERROR(begin(static_cast<std::uint64_t>(info.size)));
  return c.handle->ReadFileTo(path, write, 0, std::nullopt);
}

Result<std::vector<EntryInfo>> WriteFiles(const Caller& c, const std::vector<UploadFile>& files) {
  std::vector<EntryInfo> out;
  for (const auto& f : files) {
    auto path = AGVISOR_TRY(ResolvePath(f.path, c.user));
    if (path.back() == '/') return Error::InvalidArgument("path " + path + " names a directory");
    // As the user: the parents it lacks are made, the file is theirs.
    AGVISOR_RETURN_IF_ERROR(RunAsUser(
        c, {"sh", "-c", "mkdir -p -- \"$(dirname -- \"$1\")\" && cat > \"$1\"", "envd-write", path},
        std::string(f.data), "write " + path));
    EntryInfo e;
    e.name = Basename(path);
    e.type = FileType::kFile;
    e.path = path;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace agvisor::e2b::envd
