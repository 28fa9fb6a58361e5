// Watcher: inotify on one directory (and, recursively, every directory below it) turned into the
// events of WATCH_EVENTS (docs/protocol.md, "Watch"), held in a bounded queue.
//
// Used by session.cc's WATCH stream: the session watches fd() in its epoll loop, calls
// ReadEvents when it is readable, and takes events with Take while the stream has window credit.
// Nothing here blocks (the inotify fd is non-blocking) and memory is bounded: at most
// WatcherLimits::max_watches directories and max_queued_events / max_queued_bytes of events. When
// the queue is full, further events are dropped and ONE kOverflow event takes their place (it is
// delivered after the events queued before the loss); the kernel's own queue overflow
// (IN_Q_OVERFLOW) is reported the same way. The consumer then rescans what it cares about.
//
// What inotify gives and how it is reported (paths relative to the root, '/'-separated):
//   IN_CREATE -> create; IN_MODIFY -> modify (consecutive modifies of one path in the queue are
//   one event); IN_DELETE -> delete; IN_MOVED_FROM + IN_MOVED_TO with one cookie -> move
//   (old_path -> path); a MOVED_FROM without its pair (moved out of the watch) -> delete, a
//   MOVED_TO without one (moved in) -> create.
// Recursive: a directory created or moved in below the root is watched at once and then listed,
// and what it already holds is reported as create events (inotify cannot see entries made
// before the watch was added), so `mkdir -p a/b && touch a/b/f` gives a, a/b and a/b/f; an
// entry made while its directory's watch is being added may be reported twice. A directory moved
// within the watch keeps its watch under its new path.
// The root itself: when it is deleted or moved away (or its file system unmounted) the watch is
// over (ended() turns true after the events before it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/proto/messages.h"

namespace agvisor::agent {

struct WatcherLimits {
  // Directories watched at most (the root included). More at start: kResourceExhausted; more
  // later (new directories): an overflow event, the new directory unwatched.
  std::size_t max_watches = 16384;
  // Events queued at most, and their encoded bytes (proto::WatchEvent::EncodedSize).
  std::size_t max_queued_events = 4096;
  std::size_t max_queued_bytes = 1024 * 1024;
};

class Watcher {
 public:
  // Watches the directory `root` (absolute; symlinks in it resolved, the last one too), and with
  // `recursive` every directory below it (symlinks to directories are not followed). Errors:
  // kInvalidArgument (relative path, or not a directory), kNotFound, kPermissionDenied,
  // kResourceExhausted (more than max_watches directories, or the system's inotify limits).
  static Result<std::unique_ptr<Watcher>> Create(const std::string& root, bool recursive,
                                                 WatcherLimits limits = {});
  ~Watcher();
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // The inotify fd: readable when ReadEvents has something to do.
  int fd() const { return fd_.get(); }
  // Reads every pending inotify event (until EAGAIN) into the queue. Errors: read(2)'s other
  // than EAGAIN/EINTR (the watch is then unusable).
  Result<void> ReadEvents();
  // Up to `max_bytes` of encoded events (at least one event if any is queued and the first fits),
  // oldest first, removed from the queue.
  std::vector<proto::WatchEvent> Take(std::size_t max_bytes);
  bool has_events() const { return !queue_.empty() || overflow_pending_; }
  // The root is gone: nothing more will be queued (events already queued are still taken).
  bool ended() const { return root_gone_; }
  std::size_t watch_count() const { return dirs_.size(); }

 private:
  Watcher(UniqueFd fd, std::string root, bool recursive, WatcherLimits limits);

  // Adds a watch for the directory `rel` ("" = the root); with `report`, what it holds is
  // queued as create events. Recursion is iterative (a work list), bounded by max_watches.
  Result<void> AddTree(const std::string& rel, bool report);
  Result<int> AddOne(const std::string& rel);
  void Handle(int wd, std::uint32_t mask, std::uint32_t cookie, const std::string& name);
  void Push(proto::WatchEvent event);
  void Overflow();
  void FlushPendingMove();
  // A watched directory moved from `from` to `to`: its watches take the new paths.
  void Rename(const std::string& from, const std::string& to);
  std::string Join(const std::string& dir, const std::string& name) const;

  UniqueFd fd_;
  std::string root_;
  bool recursive_;
  WatcherLimits limits_;
  std::map<int, std::string> dirs_;  // wd -> directory relative to the root ("" = root)
  int root_wd_ = -1;
  std::deque<proto::WatchEvent> queue_;
  std::size_t queued_bytes_ = 0;
  bool overflow_pending_ = false;
  bool root_gone_ = false;
  // An IN_MOVED_FROM waiting for its IN_MOVED_TO (same cookie), as it came in the last read.
  struct PendingMove {
    std::uint32_t cookie;
    std::string path;
    bool is_dir;
  };
  std::optional<PendingMove> pending_move_;
};

}  // namespace agvisor::agent
