#include "agvisor/agent/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agvisor/agent/log.h"
#include "agvisor/agent/process_tree.h"
#include "agvisor/proto/exit_codes.h"

namespace agvisor::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Output is read in pieces of up to this much (the session's queue, Session::kQueueHighWater,
// takes no more at once). Under gVisor's ptrace platform each read, each wake-up and each write
// of the agent is a round trip through the tracer, so bulk output moves in as few of them as the
// pipe and the queue allow (bench/README, "Output on ptrace").
constexpr std::size_t kReadChunk = 512 * 1024;
// At exit, read at most this much per fd (a background child may keep writing; it must not
// keep us reading forever).
constexpr std::size_t kDrainCap = 4 * 1024 * 1024;
constexpr std::chrono::milliseconds kGraceTick(50);
constexpr std::chrono::milliseconds kKillTick(10);

// One read buffer for every process: the loop is single-threaded and the bytes are copied into
// an exactly-sized frame, so a queue of small frames never pins kReadChunk each. Its pages are
// touched only as far as some exec's output has filled it.
char g_read_buf[kReadChunk];

proto::Exit ExitOf(int wait_status) {
  proto::Exit e;
  if (WIFSIGNALED(wait_status)) {
    e.signal = static_cast<std::uint8_t>(WTERMSIG(wait_status));
    e.exit_code = kExecExitSignalBase + WTERMSIG(wait_status);
  } else {
    e.exit_code = WEXITSTATUS(wait_status);
  }
  return e;
}

// Gone, or a zombie (its parent - we or the process that subreaped it - will reap it).
bool Gone(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return true;
  char buf[512];
  ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return true;
  auto info = ParseProcStat(std::string_view(buf, static_cast<std::size_t>(n)));
  return !info || info->state == 'Z' || info->state == 'X';
}

}  // namespace

ChannelProcess::ChannelProcess(ProcessServices services, SpawnedProcess spawned, std::string argv0,
                               bool background, std::optional<std::chrono::milliseconds> timeout)
    : svc_(services), pid_(spawned.pid), argv0_(std::move(argv0)), background_(background) {
  stdout_.fd = std::move(spawned.stdout_pipe);
  stdout_.number = 1;
  stderr_.fd = std::move(spawned.stderr_pipe);
  stderr_.number = 2;
  pty_.fd = std::move(spawned.pty_master);
  pty_.number = 1;
  stdin_ = std::move(spawned.stdin_pipe);
  if (timeout) {
    timeout_timer_ =
        svc_.timers->Add(SteadyClock::now() + *timeout, [this] { StartKill(/*timed_out=*/true); });
  }
  UpdateWatches();
}

ChannelProcess::~ChannelProcess() {
  svc_.timers->Cancel(timeout_timer_);
  svc_.timers->Cancel(kill_timer_);
  CloseOutputs();
  if (stdin_watched_) svc_.loop->Remove(stdin_.get());
}

void ChannelProcess::CloseOutputs() {
  for (OutFd* o : {&stdout_, &stderr_, &pty_}) {
    if (o->watched) svc_.loop->Remove(o->fd.get());
    o->watched = false;
    o->fd.reset();
  }
}

void ChannelProcess::UpdateWatches() {
  const bool can_read =
      !main_status_ && backlog_.empty() && (sink_ == nullptr || sink_->Room() > 0);
  for (OutFd* o : {&stdout_, &stderr_}) {
    bool want = o->fd.valid() && can_read;
    if (want == o->watched) continue;
    if (want) {
      auto r = svc_.loop->Add(o->fd.get(), EPOLLIN, [this, o](std::uint32_t) { OnReadable(*o); });
      if (!r.ok()) {
        LogLine("exec " + std::to_string(pid_) + ": " + r.error().message());
        continue;
      }
    } else {
      svc_.loop->Remove(o->fd.get());
    }
    o->watched = want;
  }
  // The pty master carries both directions, and the loop watches an fd once.
  if (pty_.fd.valid()) {
    std::uint32_t events = (can_read ? EPOLLIN : 0u) | (stdin_buf_.empty() ? 0u : EPOLLOUT);
    if (events == 0) {
      if (pty_.watched) svc_.loop->Remove(pty_.fd.get());
      pty_.watched = false;
    } else if (pty_.watched) {
      (void)svc_.loop->Modify(pty_.fd.get(), events);
    } else {
      auto r = svc_.loop->Add(pty_.fd.get(), events, [this](std::uint32_t ev) {
        if (ev & (EPOLLOUT | EPOLLERR)) FlushStdin();
        if (pty_.fd.valid() && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR))) OnReadable(pty_);
      });
      if (r.ok()) pty_.watched = true;
    }
  }
  if (stdin_.valid()) {
    bool want = !stdin_buf_.empty();
    if (want != stdin_watched_) {
      if (want) {
        auto r = svc_.loop->Add(stdin_.get(), EPOLLOUT, [this](std::uint32_t) { FlushStdin(); });
        if (r.ok()) stdin_watched_ = true;
      } else {
        svc_.loop->Remove(stdin_.get());
        stdin_watched_ = false;
      }
    }
  }
}

bool ChannelProcess::ReadOnce(OutFd& out, std::size_t max, bool to_sink) {
  max = std::min(max, kReadChunk);
  ssize_t n = ::read(out.fd.get(), g_read_buf, max);
  if (n > 0) {
    std::string_view data(g_read_buf, static_cast<std::size_t>(n));
    if (background_) KeepInRing(out.number, data);
    if (sink_ != nullptr) {
      if (to_sink) {
        std::string frame(proto::kOutputHeaderSize, '\0');
        frame.append(data);
        sink_->SendOutput(out.number, std::move(frame));
      } else {
        backlog_.push_back({out.number, std::string(data)});
      }
    }
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  // EOF; EIO is how a pty master says that no slave is open any more.
  if (n < 0 && errno != EIO) {
    LogLine("exec " + std::to_string(pid_) + ": read(fd " + std::to_string(out.fd.get()) +
            "): " + std::strerror(errno));
  }
  if (&out == &pty_) {
    // Input to a pty whose slave is gone goes nowhere.
    if (sink_ && !stdin_buf_.empty()) sink_->StdinConsumed(stdin_buf_.size());
    stdin_buf_.clear();
  }
  if (out.watched) svc_.loop->Remove(out.fd.get());
  out.watched = false;
  out.fd.reset();
  return false;
}

void ChannelProcess::OnReadable(OutFd& out) {
  for (int i = 0; i < 16 && out.fd.valid() && !main_status_ && backlog_.empty(); ++i) {
    std::size_t room = sink_ != nullptr ? sink_->Room() : kReadChunk;
    if (room == 0) break;
    if (!ReadOnce(out, room, /*to_sink=*/true)) break;
  }
  UpdateWatches();
}

void ChannelProcess::KeepInRing(std::uint8_t fd, std::string_view bytes) {
  if (bytes.size() >= kRingBytes) {
    ring_.clear();
    ring_.push_back({fd, std::string(bytes.substr(bytes.size() - kRingBytes))});
    ring_bytes_ = kRingBytes;
    return;
  }
  if (!ring_.empty() && ring_.back().fd == fd && ring_.back().bytes.size() < kReadChunk) {
    ring_.back().bytes.append(bytes);
  } else {
    ring_.push_back({fd, std::string(bytes)});
  }
  ring_bytes_ += bytes.size();
  while (ring_bytes_ > kRingBytes) {
    std::size_t over = ring_bytes_ - kRingBytes;
    Chunk& front = ring_.front();
    if (front.bytes.size() <= over) {
      ring_bytes_ -= front.bytes.size();
      ring_.pop_front();
    } else {
      front.bytes.erase(0, over);
      ring_bytes_ -= over;
    }
  }
}

void ChannelProcess::FlushBacklog() {
  while (sink_ != nullptr && !backlog_.empty()) {
    std::size_t room = std::min(sink_->Room(), proto::kMaxOutputChunk);
    if (room == 0) return;
    Chunk& front = backlog_.front();
    std::size_t n = std::min(room, front.bytes.size());
    std::string frame(proto::kOutputHeaderSize, '\0');
    frame.append(front.bytes, 0, n);
    std::uint8_t fd = front.fd;
    if (n == front.bytes.size()) {
      backlog_.pop_front();
    } else {
      front.bytes.erase(0, n);
    }
    sink_->SendOutput(fd, std::move(frame));
  }
}

void ChannelProcess::MaybeFinish() {
  if (!exit_ || killing_ || !backlog_.empty() || sink_ == nullptr) return;
  ProcessSink* s = sink_;
  sink_ = nullptr;
  proto::Exit e = *exit_;
  e.prestarted = prestarted_;
  s->Exited(e);
}

void ChannelProcess::Attach(ProcessSink* sink, bool replay) {
  sink_ = sink;
  backlog_.clear();
  if (replay) backlog_.assign(ring_.begin(), ring_.end());
  Resume();
}

void ChannelProcess::Detach(ProcessSink* sink) {
  if (sink_ != sink) return;
  sink_ = nullptr;
  backlog_.clear();
  if (!background_ && !main_status_) StartKill(/*timed_out=*/false);
  UpdateWatches();
}

void ChannelProcess::Resume() {
  FlushBacklog();
  MaybeFinish();
  UpdateWatches();
}

void ChannelProcess::WriteStdin(std::string_view data) {
  const bool open = stdin_.valid() || pty_.fd.valid();
  if (!open || stdin_eof_) {
    if (sink_) sink_->StdinConsumed(data.size());
    return;
  }
  if (!data.empty()) last_stdin_ = data.back();
  stdin_buf_.append(data);
  FlushStdin();
}

void ChannelProcess::FlushStdin() {
  int fd = stdin_.valid() ? stdin_.get() : pty_.fd.get();
  std::size_t consumed = 0;
  while (fd >= 0 && !stdin_buf_.empty()) {
    ssize_t n = ::write(fd, stdin_buf_.data(), stdin_buf_.size());
    if (n > 0) {
      // Only the host's bytes are credited back, not an EOF character the agent added.
      const std::size_t host = stdin_buf_.size() - own_tail_;
      const auto written = static_cast<std::size_t>(n);
      consumed += std::min(written, host);
      if (written > host) own_tail_ -= written - host;
      stdin_buf_.erase(0, written);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    // EPIPE (the command closed its stdin; SIGPIPE has a no-op handler in init), EIO (pty):
    // what is left goes nowhere, but the host still gets its credit back.
    consumed += stdin_buf_.size() - own_tail_;
    own_tail_ = 0;
    stdin_buf_.clear();
    if (stdin_.valid()) {
      if (stdin_watched_) svc_.loop->Remove(stdin_.get());
      stdin_watched_ = false;
      stdin_.reset();
    }
    break;
  }
  if (stdin_buf_.empty() && stdin_eof_ && stdin_.valid()) {
    if (stdin_watched_) svc_.loop->Remove(stdin_.get());
    stdin_watched_ = false;
    stdin_.reset();
  }
  if (consumed > 0 && sink_ != nullptr) sink_->StdinConsumed(consumed);
  UpdateWatches();
}

void ChannelProcess::CloseStdin() {
  if (stdin_eof_) return;
  stdin_eof_ = true;
  if (pty_.fd.valid() && !stdin_.valid()) {
    // A pty has no end of file to close: in canonical mode the terminal's EOF character is the
    // reader's end of file, typed once after a complete line and twice after a partial one
    // (the first only ends the line). In raw mode nothing is sent: the program reads bytes.
    termios t{};
    if (::tcgetattr(pty_.fd.get(), &t) == 0 && (t.c_lflag & ICANON) != 0 &&
        t.c_cc[VEOF] != _POSIX_VDISABLE) {
      const bool partial = last_stdin_ != '\n' && last_stdin_ != '\r';
      const std::string eof(partial ? 2 : 1, static_cast<char>(t.c_cc[VEOF]));
      stdin_buf_.append(eof);
      own_tail_ += eof.size();
    }
  }
  FlushStdin();
}

Result<void> ChannelProcess::Signal(int sig) {
  if (main_status_) return Ok();  // gone: the pid may already belong to someone else
  if (::kill(-pid_, sig) == 0) return Ok();
  // A pty child makes its own session; until it has, its group does not exist yet.
  if (::kill(pid_, sig) == 0) return Ok();
  return Error::FromErrno("kill(" + std::to_string(pid_) + ", " + std::to_string(sig) + ")", errno);
}

Result<void> ChannelProcess::Resize(std::uint16_t rows, std::uint16_t cols) {
  if (!pty_.fd.valid()) return Ok();
  return ResizePty(pty_.fd.get(), rows, cols);
}

void ChannelProcess::KeepAwake(ActivityTracker* tracker) {
  keep_awake_ = true;
  if (!main_status_) awake_ = ActivityHold(tracker);
}

void ChannelProcess::OnMainExited(int wait_status) {
  main_status_ = wait_status;
  awake_.Reset();  // the idle clock starts now
  svc_.timers->Cancel(timeout_timer_);
  timeout_timer_ = 0;
  // Drain what the pipes hold at this moment (without blocking), then close our ends: a
  // background child that keeps them open does not hold the exec.
  for (OutFd* o : {&stdout_, &stderr_, &pty_}) {
    std::size_t drained = 0;
    while (o->fd.valid() && drained < kDrainCap) {
      if (!ReadOnce(*o, kReadChunk, /*to_sink=*/false)) break;
      drained += kReadChunk;
    }
  }
  CloseOutputs();
  if (stdin_watched_) svc_.loop->Remove(stdin_.get());
  stdin_watched_ = false;
  stdin_.reset();
  if (sink_ && !stdin_buf_.empty()) sink_->StdinConsumed(stdin_buf_.size());
  stdin_buf_.clear();
  if (!killing_) exit_ = ExitOf(wait_status);
  FlushBacklog();
  MaybeFinish();
}

void ChannelProcess::CollectTree(bool stop_them) {
  if (main_status_) return;  // no root to walk from: the chains now end at init
  for (int round = 0; round < 8; ++round) {
    auto table = ReadProcessTable();
    if (!table.ok()) {
      LogLine("exec " + std::to_string(pid_) + ": " + table.error().message());
      return;
    }
    std::vector<pid_t> tree = DescendantsOf(pid_, *table);
    tree.push_back(pid_);
    bool added = false;
    for (pid_t p : tree) {
      if (victims_.insert(p).second) {
        added = true;
        if (stop_them) ::kill(p, SIGSTOP);  // a stopped process cannot fork
      }
    }
    if (!added) return;
  }
}

void ChannelProcess::StartKill(bool timed_out) {
  timed_out_ = timed_out_ || timed_out;
  if (killing_) return;
  killing_ = true;
  CollectTree(/*stop_them=*/false);
  ::kill(-pid_, SIGTERM);
  for (pid_t p : victims_) ::kill(p, SIGTERM);
  auto deadline = SteadyClock::now() + kKillGrace;
  // Until the grace is over: every tick, pick up descendants forked since, and finish early
  // once everything has exited.
  struct Tick {
    ChannelProcess* self;
    SteadyClock::time_point deadline;
    void operator()() const {
      self->kill_timer_ = 0;
      if (SteadyClock::now() >= deadline) {
        self->kill_phase_ = true;
        self->KillRound();
        return;
      }
      self->GraceTick();
      if (self->killing_) {
        self->kill_timer_ = self->svc_.timers->Add(
            std::min(deadline, SteadyClock::now() + kGraceTick), Tick{self, deadline});
      }
    }
  };
  kill_timer_ =
      svc_.timers->Add(std::min(deadline, SteadyClock::now() + kGraceTick), Tick{this, deadline});
}

void ChannelProcess::GraceTick() {
  std::set<pid_t> before = victims_;
  CollectTree(/*stop_them=*/false);
  for (pid_t p : victims_) {
    if (!before.contains(p)) ::kill(p, SIGTERM);
  }
  std::erase_if(victims_, [](pid_t p) { return Gone(p); });
  if (main_status_ && victims_.empty()) {
    FinishKill();
  }
}

void ChannelProcess::FinishKill() {
  killing_ = false;
  svc_.timers->Cancel(kill_timer_);
  kill_timer_ = 0;
  exit_ = timed_out_ ? proto::Exit{kExecExitTimeout, 0, true} : ExitOf(*main_status_);
  Resume();
}

void ChannelProcess::KillRound() {
  CollectTree(/*stop_them=*/true);
  if (!main_status_) ::kill(-pid_, SIGKILL);
  for (pid_t p : victims_) ::kill(p, SIGKILL);
  std::erase_if(victims_, [](pid_t p) { return Gone(p); });
  if (main_status_ && victims_.empty()) {
    FinishKill();
    return;
  }
  kill_timer_ = svc_.timers->Add(SteadyClock::now() + kKillTick, [this] {
    kill_timer_ = 0;
    KillRound();
  });
}

// ---------------------------------------------------------------------------------------------

Result<std::shared_ptr<ChannelProcess>> ProcessRegistry::Start(
    const SpawnRequest& request, bool background,
    std::optional<std::chrono::milliseconds> timeout) {
  SpawnedProcess spawned = AGVISOR_TRY(SpawnCommand(request));
  return Adopt(std::move(spawned), request.argv[0], background, timeout);
}

std::shared_ptr<ChannelProcess> ProcessRegistry::Adopt(
    SpawnedProcess spawned, std::string argv0, bool background,
    std::optional<std::chrono::milliseconds> timeout) {
  pid_t pid = spawned.pid;
  auto proc = std::make_shared<ChannelProcess>(svc_, std::move(spawned), std::move(argv0),
                                               background, timeout);
  procs_[pid] = proc;
  return proc;
}

bool ProcessRegistry::OnChildExited(pid_t pid, int wait_status) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return false;
  std::shared_ptr<ChannelProcess> keep = it->second;  // alive through the callbacks
  keep->OnMainExited(wait_status);
  return true;
}

std::shared_ptr<ChannelProcess> ProcessRegistry::FindBackground(pid_t pid) const {
  auto it = procs_.find(pid);
  if (it == procs_.end() || !it->second->background()) return nullptr;
  return it->second;
}

std::vector<proto::ProcInfo> ProcessRegistry::ListBackground() const {
  std::vector<proto::ProcInfo> out;
  for (const auto& [pid, p] : procs_) {
    if (!p->background()) continue;
    proto::ProcInfo info;
    info.pid = static_cast<std::uint32_t>(pid);
    info.argv0 = p->argv0();
    info.running = !p->exit().has_value();
    info.exit_code = p->exit() ? p->exit()->exit_code : 0;
    info.keep_awake = p->keep_awake();
    out.push_back(std::move(info));
  }
  return out;
}

void ProcessRegistry::Collect() {
  for (auto it = procs_.begin(); it != procs_.end();) {
    ChannelProcess& p = *it->second;
    if (p.done() && !p.background()) {
      it = procs_.erase(it);
      continue;
    }
    if (p.done() && p.background() &&
        std::find(finished_background_.begin(), finished_background_.end(), it->first) ==
            finished_background_.end()) {
      finished_background_.push_back(it->first);
    }
    ++it;
  }
  while (finished_background_.size() > kKeepFinished) {
    pid_t oldest = finished_background_.front();
    finished_background_.pop_front();
    auto it = procs_.find(oldest);
    if (it != procs_.end() && it->second.use_count() == 1) procs_.erase(it);
  }
}

}  // namespace agvisor::agent
