#include "agvisor/agent/event_loop.h"

#include <sys/epoll.h>

#include <cerrno>
#include <climits>
#include <string>

namespace agvisor::agent {

Result<EventLoop> EventLoop::Create() {
  int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) return Error::FromErrno("epoll_create1(EPOLL_CLOEXEC)", errno);
  return EventLoop(UniqueFd(fd));
}

Result<void> EventLoop::Add(int fd, std::uint32_t events, Handler handler) {
  if (id_by_fd_.contains(fd)) {
    return Error::Conflict("event loop: fd " + std::to_string(fd) + " is already watched");
  }
  std::uint64_t id = next_id_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (::epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    return Error::FromErrno("epoll_ctl(ADD, fd " + std::to_string(fd) + ")", errno);
  }
  id_by_fd_[fd] = id;
  watches_[id] = std::make_shared<Watch>(Watch{fd, std::move(handler)});
  return Ok();
}

Result<void> EventLoop::Modify(int fd, std::uint32_t events) {
  auto it = id_by_fd_.find(fd);
  if (it == id_by_fd_.end()) {
    return Error::NotFound("event loop: fd " + std::to_string(fd) + " is not watched");
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = it->second;
  if (::epoll_ctl(epfd_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) {
    return Error::FromErrno("epoll_ctl(MOD, fd " + std::to_string(fd) + ")", errno);
  }
  return Ok();
}

void EventLoop::Remove(int fd) {
  auto it = id_by_fd_.find(fd);
  if (it == id_by_fd_.end()) return;
  // Failure is harmless here (the fd may already be closed, which removes it from epoll).
  (void)::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  watches_.erase(it->second);
  id_by_fd_.erase(it);
}

Result<void> EventLoop::RunOnce(std::optional<Clock::time_point> deadline) {
  int timeout_ms = -1;
  if (deadline) {
    auto now = Clock::now();
    if (*deadline <= now) {
      timeout_ms = 0;
    } else {
      // Round up: waking a fraction of a millisecond early would spin until the deadline.
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - now).count();
      timeout_ms = left > INT_MAX ? INT_MAX : static_cast<int>(left);
    }
  }
  epoll_event events[32];
  int n = ::epoll_wait(epfd_.get(), events, 32, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return Ok();
    return Error::FromErrno("epoll_wait", errno);
  }
  for (int i = 0; i < n; ++i) {
    auto it = watches_.find(events[i].data.u64);
    if (it == watches_.end()) continue;     // removed by an earlier handler of this batch
    std::shared_ptr<Watch> w = it->second;  // keeps the handler alive if it removes itself
    w->handler(events[i].events);
  }
  return Ok();
}

TimerQueue::Id TimerQueue::Add(Clock::time_point when, std::function<void()> fn) {
  Id id = next_id_++;
  by_time_.emplace(when, id);
  timers_.emplace(id, std::make_pair(when, std::move(fn)));
  return id;
}

void TimerQueue::Cancel(Id id) {
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  auto [b, e] = by_time_.equal_range(it->second.first);
  for (auto t = b; t != e; ++t) {
    if (t->second == id) {
      by_time_.erase(t);
      break;
    }
  }
  timers_.erase(it);
}

std::optional<TimerQueue::Clock::time_point> TimerQueue::Next() const {
  if (by_time_.empty()) return std::nullopt;
  return by_time_.begin()->first;
}

void TimerQueue::RunDue(Clock::time_point now) {
  while (!by_time_.empty() && by_time_.begin()->first <= now) {
    Id id = by_time_.begin()->second;
    by_time_.erase(by_time_.begin());
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;
    std::function<void()> fn = std::move(it->second.second);
    timers_.erase(it);
    fn();
  }
}

}  // namespace agvisor::agent
