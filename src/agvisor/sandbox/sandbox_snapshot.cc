// Sandbox::Snapshot and Fork (snapshot.h): the agent's tar of "/" through the host's checker
// into the runtime's image import, and sandboxes made from it.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <thread>

#include "agvisor/base/strings.h"
#include "agvisor/base/tar_check.h"
#include "agvisor/proto/exit_codes.h"
#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/snapshot.h"

namespace agvisor {
namespace {

constexpr std::string_view kAgentImageRepo = "agvisor/with-agent";
// Labels every snapshot carries (docs/lifecycle.md, "Snapshots and forks"); kLabelSnapshotId is
// in snapshot.h.
constexpr std::string_view kLabelSnapshotOf = "agvisor.snapshot.of";
constexpr std::string_view kLabelSnapshotWorkspace = "agvisor.snapshot.workspace";
constexpr std::string_view kLabelSnapshotCreated = "agvisor.snapshot.created";
// How much of the agent's stream may wait between the exec's reader and the import's writer.
constexpr std::size_t kPipeBytes = 8u << 20;
constexpr std::uint64_t kProgressEvery = 4u << 20;

// A bounded hand-over of bytes from one thread (the exec's output) to another (the import's
// body), each side able to end it with an error the other then sees.
class BytePipe {
 public:
  // Blocks while full. Errors: the reader's Close (kUnavailable unless it gave one).
  Result<void> Write(std::string_view bytes) {
    std::unique_lock lock(mu_);
    while (!bytes.empty()) {
      cv_.wait(lock, [&] { return read_closed_ || size_ < kPipeBytes; });
      if (read_closed_) return Error::Unavailable("snapshot: the import stopped reading");
      const std::size_t n = std::min(bytes.size(), kPipeBytes - size_);
      chunks_.emplace_back(bytes.substr(0, n));
      size_ += n;
      bytes.remove_prefix(n);
      cv_.notify_all();
    }
    return Ok();
  }
  // The writer is done: `end` Ok = a clean end of the bytes, else the error the reader gets.
  void CloseWrite(Result<void> end) {
    std::lock_guard lock(mu_);
    write_end_ = std::move(end);
    cv_.notify_all();
  }
  // Up to buf.size() bytes; 0 = the writer ended cleanly. Errors: the writer's.
  Result<std::size_t> Read(std::span<char> buf) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !chunks_.empty() || write_end_.has_value(); });
    if (chunks_.empty()) {
      if (!write_end_->ok()) return write_end_->error();
      return std::size_t{0};
    }
    std::size_t n = 0;
    while (n < buf.size() && !chunks_.empty()) {
      std::string& front = chunks_.front();
      const std::size_t k = std::min(buf.size() - n, front.size() - front_pos_);
      std::memcpy(buf.data() + n, front.data() + front_pos_, k);
      n += k;
      front_pos_ += k;
      if (front_pos_ == front.size()) {
        chunks_.pop_front();
        front_pos_ = 0;
      }
    }
    size_ -= n;
    cv_.notify_all();
    return n;
  }
  void CloseRead() {
    std::lock_guard lock(mu_);
    read_closed_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  std::size_t front_pos_ = 0;
  std::size_t size_ = 0;  // bytes waiting (chunks_ minus front_pos_)
  std::optional<Result<void>> write_end_;
  bool read_closed_ = false;
};

std::string RandomId() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mu);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A caller's string in a message: at most 128 bytes, control bytes shown as '?'.
std::string Shown(std::string_view s) {
  std::string out(s.substr(0, 128));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out + (s.size() > 128 ? "..." : "");
}

bool LowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// A path component of a Docker repository: [a-z0-9]+ joined by '.', '_', '__' or '-'+.
bool PathComponentOk(std::string_view c) {
  std::size_t i = 0;
  while (true) {
    if (i == c.size() || !LowerAlnum(c[i])) return false;
    while (i < c.size() && LowerAlnum(c[i])) ++i;
    if (i == c.size()) return true;
    if (c[i] == '.') {
      ++i;
    } else if (c[i] == '_') {
      i += (i + 1 < c.size() && c[i + 1] == '_') ? 2 : 1;
    } else if (c[i] == '-') {
      while (i < c.size() && c[i] == '-') ++i;
    } else {
      return false;
    }
  }
}

// A registry host: dot-separated [A-Za-z0-9-] labels (no '-' at either end), with an optional
// :PORT.
bool RegistryHostOk(std::string_view d) {
  const auto colon = d.find(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = d.substr(colon + 1);
    if (port.empty() || port.size() > 5) return false;
    for (char c : port) {
      if (c < '0' || c > '9') return false;
    }
    d = d.substr(0, colon);
  }
  for (std::string_view label : Split(d, '.')) {
    if (label.empty() || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!LowerAlnum(c) && !(c >= 'A' && c <= 'Z') && c != '-') return false;
    }
  }
  return true;
}

}  // namespace

Result<void> ValidateSnapshotTag(std::string_view tag) {
  auto word = [](char c) { return LowerAlnum(c) || (c >= 'A' && c <= 'Z') || c == '_'; };
  bool ok = !tag.empty() && tag.size() <= 128 && word(tag.front());
  for (char c : tag) ok = ok && (word(c) || c == '.' || c == '-');
  if (!ok) {
    return Error::InvalidArgument("snapshot tag '" + Shown(tag) +
                                  "' is not a tag: 1 to 128 letters, digits, '_', '.' or '-', "
                                  "starting with a letter, digit or '_'");
  }
  return Ok();
}

Result<void> ValidateSnapshotRepository(std::string_view repository) {
  auto refuse = [&](const std::string& why) {
    return Error::InvalidArgument("snapshot repository '" + Shown(repository) + "' " + why);
  };
  if (repository.empty()) return refuse("is empty (the default is agvisor/snapshot)");
  if (repository.size() > 200) return refuse("is longer than 200 characters");
  std::vector<std::string_view> parts = Split(repository, '/');
  const std::string_view first = parts.front();
  const bool host = parts.size() > 1 &&
                    (first.find_first_of(".:") != std::string_view::npos || first == "localhost");
  if (host && !RegistryHostOk(first))
    return refuse("has a bad registry host '" + Shown(first) + "'");
  for (std::size_t i = host ? 1 : 0; i < parts.size(); ++i) {
    if (!PathComponentOk(parts[i])) {
      return refuse(
          "is not a repository name: [HOST[:PORT]/]path, path components of lower-case letters "
          "and digits joined by '.', '_' or '-', no tag or digest (e.g. agvisor/snapshot)");
    }
  }
  // agvisor/ holds agvisor's own images (base, desktop, with-agent, agent, probe): a snapshot
  // there could stand in for the image with the agent of some image, or for a default image.
  // Judged without a registry host in front: on the default registry, HOST/agvisor/base is
  // agvisor/base.
  const std::string_view path =
      host ? repository.substr(first.size() + 1) : std::string_view(repository);
  const std::string def(kDefaultSnapshotRepository);
  if ((path == "agvisor" || path.starts_with("agvisor/")) && path != def &&
      !path.starts_with(def + "/")) {
    return refuse("is in agvisor/, the repositories of agvisor's own images; use " + def +
                  "[/...] or a repository of your own");
  }
  return Ok();
}

namespace {
std::mutex& RepositoryMutex() {
  static std::mutex mu;
  return mu;
}
std::string& RepositoryValue() {
  static std::string repo(kDefaultSnapshotRepository);
  return repo;
}
}  // namespace

std::string SnapshotRepository() {
  std::lock_guard lock(RepositoryMutex());
  return RepositoryValue();
}

Result<void> SetSnapshotRepository(std::string_view repository) {
  AGVISOR_RETURN_IF_ERROR(ValidateSnapshotRepository(repository));
  std::lock_guard lock(RepositoryMutex());
  RepositoryValue() = std::string(repository);
  return Ok();
}

Result<std::string> NormalizeSnapshotImage(std::string_view name, std::string_view repository) {
  std::string_view tag = name;
  if (tag.starts_with(kSnapshotImagePrefix)) {
    tag.remove_prefix(kSnapshotImagePrefix.size());
  } else if (tag.size() > repository.size() && tag.starts_with(repository) &&
             tag[repository.size()] == ':') {
    tag.remove_prefix(repository.size() + 1);
  }
  if (tag.find_first_of("/:@") != std::string_view::npos) {
    return Error::InvalidArgument(
        "snapshot name '" + Shown(name) +
        "' names an image outside agvisor's snapshot repository: a snapshot is named by a tag "
        "(e.g. app-v1) and made only as " +
        std::string(repository) +
        ":TAG, so that it can never replace another image; `create "
        "--image snapshot:TAG` starts from it");
  }
  AGVISOR_RETURN_IF_ERROR(ValidateSnapshotTag(tag));
  return std::string(repository) + ":" + std::string(tag);
}

Result<std::string> NormalizeSnapshotImage(std::string_view name) {
  return NormalizeSnapshotImage(name, SnapshotRepository());
}

Result<std::string> ResolveSnapshotImage(std::string_view image) {
  if (!image.starts_with(kSnapshotImagePrefix)) return std::string(image);
  return NormalizeSnapshotImage(image);
}

std::vector<std::string> SnapshotExcludes(bool include_workspace) {
  std::vector<std::string> out = {
      "/proc",        "/sys",       "/dev",          std::string(kAgentDir),
      "/run/agvisor", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"};
  if (!include_workspace) out.emplace_back("/workspace");
  return out;
}

struct Sandbox::SnapshotStream {
  TarCheckStats stats;
  std::optional<Error> error;  // the checker's or the producer's, kept as it is
  bool agent_predates_layers = false;
};

Result<SnapshotResult> Sandbox::Snapshot(const SnapshotOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::string ref = AGVISOR_TRY(NormalizeSnapshotImage(options.image));
  if (options.max_bytes == 0) {
    return Error::InvalidArgument("snapshot: the size cap must be above 0 bytes");
  }
  const std::string shown = name_ ? *name_ : container_name_;
  const std::string what = "snapshot of " + shown + " as " + ref;
  // A tag that exists is replaced only when it is a snapshot (snapshot.h): only the host's
  // import sets kLabelSnapshotId. Checked before the sandbox is woken or read.
  if (auto existing = runtime_->ImageConfigOf(ref); existing.ok()) {
    if (!existing->labels.contains(std::string(kLabelSnapshotId))) {
      return Error::Conflict(what + ": image " + ref +
                             " exists and was not made as a snapshot (it has no " +
                             std::string(kLabelSnapshotId) +
                             " label); a snapshot never replaces it: pick another tag, or "
                             "remove that image yourself if it is yours to drop");
    }
  } else if (existing.error().code() != ErrorCode::kNotFound) {
    return existing.error().WithContext(what);
  }
  AGVISOR_RETURN_IF_ERROR(WakeIfPausedHere());
  auto info = runtime_->Inspect(container_id_);
  if (!info.ok()) {
    if (info.error().code() == ErrorCode::kNotFound) return DiagnoseExecFailure(info.error());
    return info.error().WithContext(what);
  }
  if (info->state.status != "running") {
    if (info->state.status == "paused") {
      return Error::Conflict(what +
                             ": the sandbox is paused (resume it first: the agent inside "
                             "makes the snapshot)");
    }
    return DiagnoseExecFailure(Error::Conflict(what + ": the sandbox is not running"));
  }
  // The image's configuration that matters to a process (env, working directory, user) and its
  // labels but agvisor's own (those of the image with the agent would make it look like one).
  ImageConfig config = AGVISOR_TRY(runtime_->ImageConfigOf(info->image_ref));
  std::erase_if(config.labels, [](const auto& kv) { return kv.first.starts_with("agvisor"); });
  const std::string import_id = RandomId();
  config.labels[std::string(kLabelSnapshotOf)] = shown;
  config.labels[std::string(kLabelSnapshotId)] = import_id;
  config.labels[std::string(kLabelSnapshotWorkspace)] =
      options.include_workspace ? "true" : "false";
  config.labels[std::string(kLabelSnapshotCreated)] =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count());

  const std::vector<std::string> excludes = SnapshotExcludes(options.include_workspace);
  // A layer over the sandbox's image where the runtime can make one (snapshot_layers.h).
  std::optional<SnapshotBase> base;
  std::string whole_because = "asked for the whole file system";
  if (options.layered) {
    auto b = runtime_->SnapshotBaseOf(container_id_, excludes);
    if (b.ok()) {
      base = std::move(b).value();
    } else if (b.error().code() == ErrorCode::kUnsupported) {
      whole_because = b.error().message();
    } else {
      return b.error().WithContext(what);
    }
  }
  SnapshotStream stream;
  auto made = StreamSnapshot(ref, config, options, excludes, base ? &*base : nullptr, &stream);
  if (!made.ok() && base && made.error().code() == ErrorCode::kUnsupported &&
      stream.agent_predates_layers) {
    // An agent older than layers (a sandbox made by an older agvisor): the whole file system.
    whole_because = made.error().message();
    base.reset();
    stream = SnapshotStream{};
    made = StreamSnapshot(ref, config, options, excludes, nullptr, &stream);
  }
  if (!made.ok()) {
    // Nothing half-made may stay: the runtime saw a broken upload, but make sure no image of
    // this import exists (by its id label).
    if (auto ids = runtime_->ImagesWithLabel(std::string(kLabelSnapshotId) + "=" + import_id);
        ids.ok()) {
      for (const ImageEntry& i : *ids) (void)runtime_->RemoveImage(i.id);
    }
    Error e = stream.error ? *stream.error : made.error();
    if (stream.error && stream.error->code() == ErrorCode::kUnavailable) e = Diagnose(e);
    return e.WithContext(what);
  }
  const TarCheckStats& stats = stream.stats;
  SnapshotResult r;
  r.image = ref;
  r.image_id = *made;
  r.bytes = stats.bytes;
  r.entries = stats.entries;
  r.file_bytes = stats.file_bytes;
  r.seconds = SecondsSince(start);
  r.layered = base.has_value();
  r.whiteouts = stats.whiteouts;
  r.image_layers = base ? base->layers.size() + 1 : 1;
  if (!base) r.whole_because = whole_because;
  return r;
}

// The agent's archive of "/" (the whole file system, or with `base` a layer over the image),
// checked on its way into the runtime's import (or, for a layer, its load). Returns the image's
// id; `out` gets the checker's figures and the stream's own error, kept as it is.
Result<std::string> Sandbox::StreamSnapshot(const std::string& ref, const ImageConfig& config,
                                            const SnapshotOptions& options,
                                            const std::vector<std::string>& excludes,
                                            const SnapshotBase* base, SnapshotStream* out) {
  std::vector<std::string> argv = {std::string(kAgentPath), "read-file", "--watch-stdin", "--tar"};
  for (const std::string& p : excludes) {
    argv.push_back("--exclude");
    argv.push_back(p);
  }
  if (base) {
    argv.push_back("--layer-since");
    argv.push_back(base->since);
    // /workspace is a volume: its files' ctimes say nothing of the image.
    if (options.include_workspace) {
      argv.push_back("--layer-whole");
      argv.push_back("/workspace");
    }
  }
  argv.emplace_back("/");

  // The exec's output goes into the pipe on a thread of its own; the import reads it here.
  BytePipe pipe;
  std::string agent_err;
  std::thread producer([&] {
    auto on_out = [&](std::string_view b) { return pipe.Write(b); };
    auto on_err = [&](std::string_view b) {
      if (agent_err.size() < 16 * 1024) agent_err.append(b);
    };
    auto code = base ? runtime_->RunExecWithInput(container_id_, argv, base->tree, on_out, on_err)
                     : runtime_->RunExec(container_id_, argv, on_out, on_err);
    if (!code.ok()) {
      pipe.CloseWrite(code.error());
    } else if (*code == agent::kExitUsage) {
      out->agent_predates_layers = base != nullptr;
      pipe.CloseWrite(Error::Unsupported(
          base ? "the agent of this sandbox predates layered snapshots (no read-file "
                 "--layer-since)"
               : "the agent of this sandbox predates snapshots (no read-file --exclude): "
                 "recreate the sandbox with this agvisor"));
    } else if (*code != 0) {
      std::string msg = agent_err;
      while (!msg.empty() && msg.back() == '\n') msg.pop_back();
      pipe.CloseWrite(Error::Unavailable("the agent's archive of / ended with exit code " +
                                         std::to_string(*code) +
                                         (msg.empty() ? "" : ": " + msg.substr(0, 2000))));
    } else {
      pipe.CloseWrite(Ok());
    }
  });

  TarCheckOptions co;
  co.max_bytes = options.max_bytes;
  co.whiteouts = base != nullptr;
  TarStreamChecker checker(co);
  std::uint64_t reported = 0;
  channel::ByteSource source = [&](std::span<char> buf) -> Result<std::size_t> {
    auto n = pipe.Read(buf);
    if (!n.ok()) {
      out->error = n.error();
      return n.error();
    }
    if (*n == 0) {
      // The body ends cleanly only for a stream the checker accepted whole.
      if (auto f = checker.Finish(); !f.ok()) {
        out->error = f.error();
        return f.error();
      }
      if (options.progress) options.progress(checker.stats().bytes);
      return std::size_t{0};
    }
    if (auto p = checker.Push(std::string_view(buf.data(), *n)); !p.ok()) {
      out->error = p.error();
      return p.error();
    }
    if (options.progress && checker.stats().bytes - reported >= kProgressEvery) {
      reported = checker.stats().bytes;
      options.progress(reported);
    }
    return *n;
  };
  auto id = base ? runtime_->LoadLayeredImage(ref, config, base->layers, source)
                 : runtime_->ImportImage(ref, config, source, nullptr);
  pipe.CloseRead();  // a producer still writing stops (its exec is closed)
  producer.join();
  out->stats = checker.stats();
  if (!id.ok() && out->error) return *out->error;
  return id;
}

namespace {

// The tag of `image` ("REPOSITORY:TAG") in `repository`, or "" when it is not there.
std::string TagIn(std::string_view image, std::string_view repository) {
  if (image.size() <= repository.size() + 1 || !image.starts_with(repository) ||
      image[repository.size()] != ':') {
    return "";
  }
  return std::string(image.substr(repository.size() + 1));
}

// The sandbox that runs from `image` (one of its tags or its id): "sandbox NAME (STATUS)", or ""
// when none of agvisor's does.
std::string SandboxUsing(Runtime& runtime, const ImageEntry& image) {
  auto list = runtime.List({std::string(kLabelManaged)});
  if (!list.ok()) return "";
  for (const InstanceSummary& s : *list) {
    const bool uses = s.image == image.id ||
                      std::find(image.tags.begin(), image.tags.end(), s.image) != image.tags.end();
    if (!uses || s.helper) continue;
    auto name = s.labels.find(std::string(kLabelName));
    const std::string shown = name != s.labels.end() ? name->second
                              : s.name.empty()       ? s.id.substr(0, 12)
                                                     : s.name;
    return "sandbox " + Shown(shown) + " (" + s.status + ")";
  }
  return "";
}

}  // namespace

Result<std::vector<SnapshotInfo>> ListSnapshots(Runtime& runtime) {
  const std::string repository = SnapshotRepository();
  std::vector<SnapshotInfo> out;
  for (const ImageEntry& e : AGVISOR_TRY(runtime.ImagesWithLabel(kLabelSnapshotId))) {
    auto label = [&](std::string_view key) {
      auto it = e.labels.find(std::string(key));
      return it == e.labels.end() ? std::string() : it->second;
    };
    for (const std::string& t : e.tags) {
      std::string tag = TagIn(t, repository);
      if (tag.empty()) continue;
      SnapshotInfo i;
      i.tag = std::move(tag);
      i.image = t;
      i.image_id = e.id;
      i.of = label(kLabelSnapshotOf);
      i.workspace = label(kLabelSnapshotWorkspace) == "true";
      const std::string created = label(kLabelSnapshotCreated);
      i.created_unix = created.empty() ? e.created_unix : std::atoll(created.c_str());
      i.size_bytes = e.size_bytes;
      out.push_back(std::move(i));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const SnapshotInfo& a, const SnapshotInfo& b) { return a.tag < b.tag; });
  return out;
}

Result<void> RemoveSnapshot(Runtime& runtime, std::string_view name) {
  // Only a name in the snapshot repository gets this far: any other image is refused here.
  const std::string ref = AGVISOR_TRY(NormalizeSnapshotImage(name));
  const std::string what = "remove snapshot " + ref;
  std::optional<ImageEntry> snapshot;
  for (ImageEntry& e : AGVISOR_TRY(runtime.ImagesWithLabel(kLabelSnapshotId))) {
    if (std::find(e.tags.begin(), e.tags.end(), ref) != e.tags.end()) snapshot = std::move(e);
  }
  if (!snapshot) {
    auto other = runtime.ImageConfigOf(ref);
    if (other.ok()) {
      return Error::PermissionDenied(
          what + ": that image was not made as a snapshot (it has no " +
          std::string(kLabelSnapshotId) +
          " label); agvisor removes only its own snapshots: remove it with docker if it is yours");
    }
    if (other.error().code() != ErrorCode::kNotFound) return other.error().WithContext(what);
    return Error::NotFound(what + ": no such snapshot (`agvisor snapshot ls` lists them)");
  }
  // The images with the agent first: sandboxes run from those, and they hold the snapshot's
  // layers. The runtime refuses one a container uses (Docker: 409), which names no sandbox.
  auto in_use = [&](const ImageEntry& image, const Error& e) {
    std::string user = SandboxUsing(runtime, image);
    if (user.empty()) return e.WithContext(what);
    return Error::Conflict(
        what + ": " + user +
        " runs from it; remove that sandbox first (`agvisor rm NAME`), then the snapshot");
  };
  for (const ImageEntry& d : AGVISOR_TRY(runtime.DerivedImagesOf(snapshot->id))) {
    for (const std::string& t : d.tags) {
      auto r = runtime.RemoveImage(t);
      if (!r.ok() && r.error().code() == ErrorCode::kConflict) return in_use(d, r.error());
      if (!r.ok()) return r.error().WithContext(what);
    }
  }
  auto r = runtime.RemoveImage(ref);
  if (!r.ok() && r.error().code() == ErrorCode::kConflict) return in_use(*snapshot, r.error());
  if (!r.ok()) return r.error().WithContext(what);
  if (!*r) return Error::NotFound(what + ": no such snapshot (removed meanwhile)");
  return Ok();
}

Result<std::vector<std::string>> ForkNames(std::string_view source_name,
                                           const ForkOptions& options) {
  if (options.count < 1 || options.count > kMaxForkCount) {
    return Error::InvalidArgument("fork: count " + std::to_string(options.count) +
                                  " is out of range (1.." + std::to_string(kMaxForkCount) + ")");
  }
  const std::string prefix =
      options.prefix.empty() ? std::string(source_name) + "-fork" : options.prefix;
  std::vector<std::string> names;
  for (int i = 1; i <= options.count; ++i) {
    std::string n = prefix + "-" + std::to_string(i);
    if (auto v = ValidateName(n); !v.ok()) {
      return v.error().WithContext("fork: the name of fork " + std::to_string(i) +
                                   " (shorten --prefix)");
    }
    names.push_back(std::move(n));
  }
  return names;
}

Result<ForkResult> Fork(Sandbox& source, const ForkOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  // An anonymous source (E2B's sandboxes are) has no /workspace volume: its /workspace is a
  // directory of its root file system, which the snapshot holds as any other. Its forks are
  // named after its container name without the prefix.
  std::string src = source.name().value_or(source.container_name());
  if (!source.name() && src.starts_with(kNamePrefix)) src.erase(0, kNamePrefix.size());
  const std::vector<std::string> names = AGVISOR_TRY(ForkNames(src, options));
  const std::shared_ptr<Runtime>& runtime = source.runtime();
  // Every name must be free: an existing sandbox would be re-attached and a leftover volume
  // would keep its own /workspace instead of the copy.
  for (const std::string& n : names) {
    const std::string cname = ContainerNameFor(n);
    auto inst = runtime->Inspect(cname);
    if (inst.ok()) {
      return Error::Conflict("fork of " + src + ": a sandbox named " + n +
                             " exists (remove it, or pick another --prefix)");
    }
    if (inst.error().code() != ErrorCode::kNotFound) return inst.error();
    if (AGVISOR_TRY(runtime->VolumeLabels(cname))) {
      return Error::Conflict(
          "fork of " + src + ": the /workspace volume " + cname + " of a former sandbox named " +
          n + " exists (erase it with `agvisor rm --data " + n + "`, or pick another --prefix)");
    }
  }
  SnapshotOptions so;
  so.image = options.image;
  if (so.image.empty()) {
    so.image = "fork-" + src + "-" +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
  }
  so.include_workspace = true;
  so.max_bytes = options.max_bytes;
  so.layered = options.layered;
  so.progress = options.progress;
  ForkResult out;
  out.snapshot = AGVISOR_TRY(source.Snapshot(so));
  // The first fork alone (its create derives the image with the agent from the snapshot, once
  // per host), then the others at once: each is a container start of its own, which the
  // runtime's start gate bounds. Each has its own new volume (isolation is per volume).
  std::vector<std::optional<Result<std::unique_ptr<Sandbox>>>> made(names.size());
  auto create = [&](std::size_t i) {
    SandboxSpec spec = options.spec;
    spec.name = names[i];
    spec.image = out.snapshot.image;
    spec.host = source.host();
    made[i] = Sandbox::Create(runtime, spec);
  };
  create(0);
  if (made[0]->ok()) {
    std::vector<std::thread> others;
    for (std::size_t i = 1; i < names.size(); ++i) others.emplace_back(create, i);
    for (std::thread& t : others) t.join();
  }
  std::optional<Error> failed;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!made[i]) continue;  // not tried: the first one failed
    Result<std::unique_ptr<Sandbox>>& sb = *made[i];
    if (sb.ok() && !(*sb)->resumed()) {
      out.sandboxes.push_back(std::move(sb).value());
      continue;
    }
    if (!failed) {
      const Error e = sb.ok()
                          ? Error::Conflict("a sandbox named " + names[i] + " appeared meanwhile")
                          : sb.error();
      failed = e.WithContext("fork of " + src + " (fork " + names[i] +
                             "; the forks made were removed, the snapshot " + out.snapshot.image +
                             " stays)");
    }
    if (!sb.ok() && sb.error().code() != ErrorCode::kConflict) {
      // A create that failed leaves no container; the volume it made for the name goes too
      // (the name was free before: checked above). A conflict is another client's sandbox.
      (void)Sandbox::Remove(runtime, ContainerNameFor(names[i]), /*erase_data=*/true);
    }
  }
  if (failed) {
    for (auto& sb : out.sandboxes) (void)sb->Delete();
    return *failed;
  }
  out.seconds = SecondsSince(start);
  return out;
}

}  // namespace agvisor
