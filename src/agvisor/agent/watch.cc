#include "agvisor/agent/watch.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace agvisor::agent {
namespace {

using proto::WatchEvent;
using proto::WatchEventKind;

// IN_ONLYDIR: the root was checked with stat, but a directory replaced by a file in between must
// not be watched as one. Subdirectories are added with IN_DONT_FOLLOW too (never through a link).
constexpr std::uint32_t kMask = IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO |
                                IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

Error WatchErrno(const std::string& what, int err) {
  if (err == ENOSPC || err == EMFILE || err == ENOMEM) {
    return Error(ErrorCode::kResourceExhausted,
                 what + ": the system's inotify limit is reached (" + std::strerror(err) + ")");
  }
  return Error::FromErrno(what, err);
}

}  // namespace

Watcher::Watcher(UniqueFd fd, std::string root, bool recursive, WatcherLimits limits)
    : fd_(std::move(fd)), root_(std::move(root)), recursive_(recursive), limits_(limits) {}

Watcher::~Watcher() = default;

Result<std::unique_ptr<Watcher>> Watcher::Create(const std::string& root, bool recursive,
                                                 WatcherLimits limits) {
  if (root.empty() || root.front() != '/') {
    return Error::InvalidArgument("watch '" + root + "': the path must be absolute");
  }
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) return Error::FromErrno("watch " + root, errno);
  if (!S_ISDIR(st.st_mode)) {
    return Error::InvalidArgument("watch " + root +
                                  ": not a directory (watch the directory that holds it)");
  }
  UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!fd.valid()) return WatchErrno("watch " + root + ": inotify_init1", errno);
  // "/" must not become "//a": the root's own path is kept without a trailing slash.
  std::string clean = root;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  std::unique_ptr<Watcher> w(new Watcher(std::move(fd), clean, recursive, limits));
  AGVISOR_RETURN_IF_ERROR(w->AddTree("", /*report=*/false));
  return w;
}

std::string Watcher::Join(const std::string& dir, const std::string& name) const {
  return dir.empty() ? name : dir + "/" + name;
}

Result<int> Watcher::AddOne(const std::string& rel) {
  const std::string full = rel.empty() ? root_ : (root_ == "/" ? "" : root_) + "/" + rel;
  if (dirs_.size() >= limits_.max_watches) {
    return Error(ErrorCode::kResourceExhausted,
                 "watch " + root_ + ": more than " + std::to_string(limits_.max_watches) +
                     " directories (watch a smaller tree, or without recursion)");
  }
  const std::uint32_t mask = kMask | (rel.empty() ? 0u : std::uint32_t{IN_DONT_FOLLOW});
  const int wd = ::inotify_add_watch(fd_.get(), full.c_str(), mask);
  if (wd < 0) return WatchErrno("watch " + full, errno);
  dirs_[wd] = rel;
  if (rel.empty()) root_wd_ = wd;
  return wd;
}

Result<void> Watcher::AddTree(const std::string& top, bool report) {
  std::vector<std::string> todo{top};
  while (!todo.empty()) {
    std::string rel = std::move(todo.back());
    todo.pop_back();
    auto wd = AddOne(rel);
    if (!wd.ok()) {
      if (rel.empty()) return wd.error();  // the root: the caller's error
      // Below the root: a directory that vanished (its delete is on its way) or cannot be
      // watched. At start that fails the watch only for the limit; later it is lost events.
      if (wd.error().code() == ErrorCode::kResourceExhausted && !report) return wd.error();
      if (wd.error().code() != ErrorCode::kNotFound) Overflow();
      continue;
    }
    if (!recursive_ && !report) continue;
    const std::string full = rel.empty() ? root_ : (root_ == "/" ? "" : root_) + "/" + rel;
    int dfd = ::open(full.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0) continue;  // vanished or not listable: its watch still reports what follows
    DIR* dir = ::fdopendir(dfd);
    if (dir == nullptr) {
      ::close(dfd);
      continue;
    }
    while (dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN) {
        struct stat st {};
        is_dir = ::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
      }
      std::string child = Join(rel, name);
      if (child.size() > proto::kMaxWatchPath) {
        if (report) Overflow();
        continue;
      }
      if (report) Push(WatchEvent{WatchEventKind::kCreate, is_dir, child, ""});
      if (is_dir && recursive_) todo.push_back(std::move(child));
    }
    ::closedir(dir);
  }
  return Ok();
}

Result<void> Watcher::ReadEvents() {
  // Aligned for struct inotify_event; large enough for many events per read.
  alignas(struct inotify_event) char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n < 0) return Error::FromErrno("watch " + root_ + ": read inotify events", errno);
    if (n == 0) break;
    std::size_t off = 0;
    while (off + sizeof(struct inotify_event) <= static_cast<std::size_t>(n)) {
      struct inotify_event ev;
      std::memcpy(&ev, buf + off, sizeof ev);
      const std::size_t name_at = off + sizeof ev;
      if (name_at + ev.len > static_cast<std::size_t>(n)) break;  // the kernel never splits one
      const std::string name(buf + name_at, ::strnlen(buf + name_at, ev.len));
      Handle(ev.wd, ev.mask, ev.cookie, name);
      off = name_at + ev.len;
    }
  }
  // A MOVED_FROM whose MOVED_TO did not come with it left the watched tree.
  FlushPendingMove();
  return Ok();
}

void Watcher::Handle(int wd, std::uint32_t mask, std::uint32_t cookie, const std::string& name) {
  if (pending_move_ && !((mask & IN_MOVED_TO) && cookie == pending_move_->cookie)) {
    FlushPendingMove();
  }
  if (mask & IN_Q_OVERFLOW) return Overflow();
  auto it = dirs_.find(wd);
  if (it == dirs_.end()) return;  // a watch removed meanwhile (moved out of the tree)
  if (mask & IN_IGNORED) {
    dirs_.erase(it);
    if (wd == root_wd_) root_gone_ = true;
    return;
  }
  if (mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
    // Below the root, the parent's watch reported it. The root moved or deleted: the watch is
    // over (paths under its old name would no longer lead anywhere).
    if (wd == root_wd_) root_gone_ = true;
    return;
  }
  if (root_gone_) return;
  const bool is_dir = (mask & IN_ISDIR) != 0;
  std::string path = Join(it->second, name);
  if (name.empty()) return;  // events about the watched directory itself (IN_MODIFY on it)
  if (path.size() > proto::kMaxWatchPath) return Overflow();
  if (mask & IN_CREATE) {
    Push(WatchEvent{WatchEventKind::kCreate, is_dir, path, ""});
    if (is_dir && recursive_) (void)AddTree(path, /*report=*/true);
  } else if (mask & IN_MODIFY) {
    if (!is_dir) Push(WatchEvent{WatchEventKind::kModify, false, path, ""});
  } else if (mask & IN_DELETE) {
    Push(WatchEvent{WatchEventKind::kDelete, is_dir, path, ""});
  } else if (mask & IN_MOVED_FROM) {
    pending_move_ = PendingMove{cookie, std::move(path), is_dir};
  } else if (mask & IN_MOVED_TO) {
    if (pending_move_) {
      PendingMove from = std::move(*pending_move_);
      pending_move_.reset();
      if (is_dir && recursive_) Rename(from.path, path);
      Push(WatchEvent{WatchEventKind::kMove, is_dir, path, std::move(from.path)});
    } else {
      Push(WatchEvent{WatchEventKind::kCreate, is_dir, path, ""});
      if (is_dir && recursive_) (void)AddTree(path, /*report=*/true);
    }
  }
}

void Watcher::FlushPendingMove() {
  if (!pending_move_) return;
  PendingMove from = std::move(*pending_move_);
  pending_move_.reset();
  if (from.is_dir) {
    // Its watches (if any) left the tree: their events would name paths outside it.
    const std::string prefix = from.path + "/";
    for (auto it = dirs_.begin(); it != dirs_.end();) {
      if (it->first != root_wd_ && (it->second == from.path || it->second.starts_with(prefix))) {
        ::inotify_rm_watch(fd_.get(), it->first);
        it = dirs_.erase(it);
      } else {
        ++it;
      }
    }
  }
  Push(WatchEvent{WatchEventKind::kDelete, from.is_dir, std::move(from.path), ""});
}

void Watcher::Rename(const std::string& from, const std::string& to) {
  const std::string prefix = from + "/";
  for (auto& [wd, rel] : dirs_) {
    if (wd == root_wd_) continue;
    if (rel == from) {
      rel = to;
    } else if (rel.starts_with(prefix)) {
      rel = to + "/" + rel.substr(prefix.size());
    }
  }
}

void Watcher::Push(WatchEvent event) {
  if (overflow_pending_) return;  // lost until the consumer has seen the overflow
  if (event.kind == WatchEventKind::kModify && !queue_.empty() &&
      queue_.back().kind == WatchEventKind::kModify && queue_.back().path == event.path) {
    return;
  }
  const std::size_t size = event.EncodedSize();
  if (queue_.size() >= limits_.max_queued_events ||
      queued_bytes_ + size > limits_.max_queued_bytes) {
    return Overflow();
  }
  queued_bytes_ += size;
  queue_.push_back(std::move(event));
}

void Watcher::Overflow() { overflow_pending_ = true; }

std::vector<WatchEvent> Watcher::Take(std::size_t max_bytes) {
  std::vector<WatchEvent> out;
  std::size_t bytes = 0;
  while (!queue_.empty()) {
    const std::size_t size = queue_.front().EncodedSize();
    if (bytes + size > max_bytes) break;
    bytes += size;
    queued_bytes_ -= size;
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  if (queue_.empty() && overflow_pending_ && bytes + WatchEvent::kMinEncodedSize <= max_bytes) {
    overflow_pending_ = false;
    out.push_back(WatchEvent{WatchEventKind::kOverflow, false, "", ""});
  }
  return out;
}

}  // namespace agvisor::agent
