// EventLoop: a single-threaded epoll loop with a deadline. The agent's only scheduler.
//
// Used by init (signalfd, the activity socket's listener and clients) and exec (signalfd, its
// deadline). The channel protocol will add its connections as more watched fds; nothing else
// needs to change. Level-triggered: a handler that leaves data unread is called again.
// Handlers may Add/Remove any fd (including their own) while running; an event for an fd removed
// earlier in the same batch is dropped, even if the fd number was reused meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor::agent {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  // Called with the epoll event bits (EPOLLIN, EPOLLHUP, ...).
  using Handler = std::function<void(std::uint32_t events)>;

  // Errors: those of epoll_create1 (kResourceExhausted, ...).
  static Result<EventLoop> Create();

  // Watches `fd` (not owned) for `events` (EPOLLIN, EPOLLOUT, ...). Errors: kConflict if the fd is
  // already watched, else those of epoll_ctl.
  Result<void> Add(int fd, std::uint32_t events, Handler handler);
  // Changes the events of a watched fd. Errors: kNotFound, epoll_ctl's.
  Result<void> Modify(int fd, std::uint32_t events);
  // Stops watching `fd` (call before closing it). No-op if not watched.
  void Remove(int fd);

  // Waits until a watched fd is ready or `deadline` passes (unset: no deadline), then runs the
  // handlers of the ready fds. Returns after one batch, or at the deadline with nothing run, or
  // on EINTR. Errors: those of epoll_wait other than EINTR.
  Result<void> RunOnce(std::optional<Clock::time_point> deadline);

 private:
  struct Watch {
    int fd;
    Handler handler;
  };
  explicit EventLoop(UniqueFd epfd) : epfd_(std::move(epfd)) {}

  UniqueFd epfd_;
  std::uint64_t next_id_ = 1;
  std::map<int, std::uint64_t> id_by_fd_;
  std::map<std::uint64_t, std::shared_ptr<Watch>> watches_;
};

// TimerQueue: one-shot callbacks at steady-clock instants, run by the owner of the loop (init
// passes Next() as the loop's deadline, then calls RunDue). Used for exec timeouts and the
// SIGTERM -> SIGKILL grace of a tree kill. Callbacks may add or cancel timers.
class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = std::uint64_t;

  // Schedules `fn` at `when`; returns an id for Cancel (never 0).
  Id Add(Clock::time_point when, std::function<void()> fn);
  // No-op for an id that already ran or was cancelled (and for 0).
  void Cancel(Id id);
  // The earliest pending instant, if any.
  std::optional<Clock::time_point> Next() const;
  // Runs every timer due at `now`, earliest first (including ones added by callbacks that are
  // already due).
  void RunDue(Clock::time_point now);

 private:
  Id next_id_ = 1;
  std::multimap<Clock::time_point, Id> by_time_;
  std::map<Id, std::pair<Clock::time_point, std::function<void()>>> timers_;
};

}  // namespace agvisor::agent
