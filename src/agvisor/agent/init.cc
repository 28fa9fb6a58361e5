#include "agvisor/agent/init.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agvisor/agent/activity.h"
#include "agvisor/agent/activity_socket.h"
#include "agvisor/agent/desktop.h"
#include "agvisor/agent/event_loop.h"
#include "agvisor/agent/hosts.h"
#include "agvisor/agent/log.h"
#include "agvisor/agent/process.h"
#include "agvisor/agent/process_tree.h"
#include "agvisor/agent/session.h"
#include "agvisor/agent/signals.h"
#include "agvisor/agent/sudo.h"
#include "agvisor/agent/sudo_broker.h"
#include "agvisor/agent/trust.h"
#include "agvisor/agent/version.h"
#include "agvisor/proto/exit_codes.h"

namespace agvisor::agent {
namespace {

constexpr std::chrono::milliseconds kStopGrace(1000);

std::string Describe(const std::optional<std::chrono::milliseconds>& d) {
  return d ? FormatSeconds(*d) : std::string("none");
}

// Writes "<reason>\n" to `path` (best effort: the exit code carries the same information).
void WriteExitReason(const std::string& path, StopReason reason) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    LogLine("open " + path + ": " + std::strerror(errno));
    return;
  }
  std::string text = std::string(StopReasonName(reason)) + "\n";
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    LogLine("write " + path + ": " + std::strerror(errno));
  }
  ::close(fd);
}

// The agent binary's own path, for the sudo shim's symlink.
std::string SelfPath() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n))
               : std::string("/.agvisor/agvisor-agent");
}

int ExitCodeFor(StopReason reason) {
  switch (reason) {
    case StopReason::kLifetime:
      return kInitExitLifetime;
    case StopReason::kIdle:
      return kInitExitIdle;
    default:
      return kInitExitSignal;
  }
}

std::uint64_t UnixMillisNow() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// The running init: owns the loop, the timers, the listener, the channel sessions (stdio and
// one per socket connection) and the processes they started.
class InitServer {
 public:
  InitServer(const InitOptions& options, EventLoop loop, SignalFd signals, UniqueFd listener)
      : options_(options),
        loop_(std::move(loop)),
        signals_(std::move(signals)),
        listener_(std::move(listener)),
        tracker_({options.lifetime, options.idle_ttl}, Clock::now()),
        processes_(ProcessServices{&loop_, &timers_}),
        ready_shells_(&timers_, options.warm_shells),
        services_{&loop_, &timers_, &tracker_, &processes_, UnixMillisNow(), &ready_shells_} {
    tracker_.set_thaw_restarts_idle(options.track_idle);
  }

  Result<void> Start() {
    AGVISOR_RETURN_IF_ERROR(
        loop_.Add(signals_.fd(), EPOLLIN, [this](std::uint32_t) { OnSignals(); }));
    AGVISOR_RETURN_IF_ERROR(
        loop_.Add(listener_.get(), EPOLLIN, [this](std::uint32_t) { OnAccept(); }));
    if (options_.desktop) {
      // Not fatal: the sandbox still serves exec and files; the state file says what failed.
      auto d = Desktop::Start({.geometry = options_.desktop_geometry}, &loop_);
      if (d.ok()) {
        desktop_ = std::move(*d);
      } else {
        LogLine("desktop: " + d.error().message());
      }
    }
    ready_shells_.Start();
    if (options_.channel_stdio) {
      auto session = Session::ForStdio(services_);
      if (auto r = session->Start(); !r.ok()) {
        // Not fatal: the socket still serves (e.g. started without `-i`, stdin is /dev/null).
        LogLine("channel on stdio: " + r.error().message() + "; serving the socket only");
      } else {
        sessions_.push_back(std::move(session));
      }
    }
    return Ok();
  }

  // Runs until a stop reason; returns it.
  StopReason Run() {
    for (;;) {
      if (stop_ != StopReason::kNone) return stop_;
      timers_.RunDue(Clock::now());
      Collect();
      ExpiryDecision d = tracker_.Decide(Clock::now());
      if (d.stop != StopReason::kNone) return d.stop;
      std::optional<Clock::time_point> deadline = d.next_check;
      if (auto t = timers_.Next(); t && (!deadline || *t < *deadline)) deadline = t;
      if (tracker_.policy().idle_ttl || options_.track_idle) {
        // A planned wake at least every tick, so that a pause is seen as a late wake (Woke).
        auto tick = Clock::now() + ActivityTracker::kFreezeTick;
        if (!deadline || tick < *deadline) deadline = tick;
      }
      if (auto r = loop_.RunOnce(deadline); !r.ok()) {
        // epoll_wait failing is a bug, not a condition to wait out: stop rather than spin.
        LogLine("event loop: " + r.error().message() + "; stopping");
        return StopReason::kSignal;
      }
      if (deadline) tracker_.Woke(*deadline, Clock::now());
    }
  }

  void LogStop(StopReason reason) const {
    switch (reason) {
      // The tracker's policy: SET_DEADLINES may have replaced the command line's.
      case StopReason::kLifetime:
        LogLine("lifetime " + FormatSeconds(*tracker_.policy().lifetime) + " reached, stopping");
        break;
      case StopReason::kIdle:
        LogLine("idle for " + FormatSeconds(*tracker_.policy().idle_ttl) + " (idle-ttl), stopping");
        break;
      default:
        LogLine(signal_name_ + " received, stopping");
        break;
    }
  }

  // Closes the socket so no new client arrives while the processes are terminated.
  void CloseSocket() {
    loop_.Remove(listener_.get());
    listener_.reset();
    ::unlink(options_.socket_path.c_str());
    sessions_.clear();
  }

 private:
  void OnSignals() {
    auto sigs = signals_.ReadPending();
    if (!sigs.ok()) {
      LogLine(sigs.error().message());
      return;
    }
    for (int sig : *sigs) {
      switch (sig) {
        case SIGCHLD:
          Reap();
          break;
        case SIGTERM:
        case SIGINT:
          if (stop_ == StopReason::kNone) {
            stop_ = StopReason::kSignal;
            signal_name_ = sig == SIGTERM ? "SIGTERM" : "SIGINT";
          }
          break;
        default:
          LogLine("signal " + std::to_string(sig) + " ignored");
          break;
      }
    }
    // SIGCHLD coalesces and a child may exit between reads: reaping on every wake-up is cheap.
    Reap();
  }

  void Reap() {
    ReapChildren([this](pid_t pid, int status) {
      if (desktop_ && desktop_->OnChildExited(pid, status)) return;
      if (ready_shells_.OnChildExited(pid, status)) return;
      processes_.OnChildExited(pid, status);
    });
  }

  // Drops what ended during the last batch of events (never from inside their own callbacks).
  void Collect() {
    for (auto& s : sessions_) s->Collect();
    std::size_t before = sessions_.size();
    std::erase_if(sessions_, [](const std::unique_ptr<Session>& s) { return s->closed(); });
    processes_.Collect();
    if (sessions_.size() < before && listener_paused_ && listener_.valid()) {
      listener_paused_ = false;
      auto r = loop_.Add(listener_.get(), EPOLLIN, [this](std::uint32_t) { OnAccept(); });
      if (!r.ok()) LogLine(r.error().message());
    }
  }

  void OnAccept() {
    for (;;) {
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN) return;
        LogLine(std::string("accept4 on ") + options_.socket_path + ": " + std::strerror(errno));
        if (errno == EMFILE || errno == ENFILE) {
          // Level-triggered: the pending connection would wake us forever. Stop listening until
          // a client leaves and frees an fd.
          loop_.Remove(listener_.get());
          listener_paused_ = true;
        }
        return;
      }
      auto session = Session::ForSocket(services_, UniqueFd(fd));
      if (auto r = session->Start(); !r.ok()) {
        LogLine(r.error().message());
        continue;
      }
      sessions_.push_back(std::move(session));
    }
  }

  const InitOptions& options_;
  EventLoop loop_;
  SignalFd signals_;
  UniqueFd listener_;
  TimerQueue timers_;
  ActivityTracker tracker_;
  ProcessRegistry processes_;
  ReadyShells ready_shells_;
  AgentServices services_;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::unique_ptr<Desktop> desktop_;  // --desktop
  bool listener_paused_ = false;
  StopReason stop_ = StopReason::kNone;
  std::string signal_name_ = "signal";
};

}  // namespace

int RunInit(const InitOptions& options) {
  const bool pid1 = ::getpid() == 1;
  if (!pid1 && ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    // Not fatal: as a plain process init still reaps its own children.
    LogLine(std::string("prctl(PR_SET_CHILD_SUBREAPER, 1): ") + std::strerror(errno));
  }
  // SIGPIPE: a no-op handler (not SIG_IGN, which children would inherit across execve), so a
  // write to a pipe or socket whose reader left fails with EPIPE instead of killing PID 1.
  struct sigaction pipe_action {};
  pipe_action.sa_handler = [](int) {};
  sigemptyset(&pipe_action.sa_mask);
  if (::sigaction(SIGPIPE, &pipe_action, nullptr) != 0) {
    LogLine(std::string("sigaction(SIGPIPE): ") + std::strerror(errno));
    return kInitExitSetup;
  }
  auto signals = SignalFd::Create({SIGCHLD, SIGTERM, SIGINT, SIGHUP});
  if (!signals.ok()) {
    LogLine("init: " + signals.error().message());
    return kInitExitSetup;
  }
  auto loop = EventLoop::Create();
  if (!loop.ok()) {
    LogLine("init: " + loop.error().message());
    return kInitExitSetup;
  }
  auto listener = ListenActivitySocket(options.socket_path);
  if (!listener.ok()) {
    LogLine("init: activity socket: " + listener.error().message());
    return kInitExitSetup;
  }
  if (pid1) {
    // Before anything runs that may resolve `localhost` (the desktop, the first exec).
    if (auto r = FillEmptyHostsFile("/etc/hosts"); !r.ok()) LogLine("init: " + r.error().message());
  }
  // A sandbox with brokered secrets: its CA before anything runs that may verify a certificate.
  if (auto r = InstallSandboxCaFromEnv(); !r.ok()) {
    LogLine("init: " + r.error().message());
  } else if (*r) {
    LogLine("init: sandbox CA installed");
  }
  if (options.sudo_broker) {
    // Not fatal: the sandbox serves everything else; sudo then says there is no broker.
    if (auto r = StartSudoBroker(std::string(kSudoSocketPath)); !r.ok()) {
      LogLine("init: sudo broker: " + r.error().message());
    }
    if (auto r = InstallSudoShim(SelfPath()); !r.ok())
      LogLine("init: sudo: " + r.error().message());
  }
  const std::string reason_path = SocketDirectory(options.socket_path) + "/exit-reason";
  ::unlink(reason_path.c_str());  // a stale reason from an earlier run of a resumed sandbox

  InitServer server(options, std::move(*loop), std::move(*signals), std::move(*listener));
  if (auto r = server.Start(); !r.ok()) {
    LogLine("init: " + r.error().message());
    return kInitExitSetup;
  }
  LogLine("init " + std::string(kAgentVersion) + " started (pid " + std::to_string(::getpid()) +
          ", lifetime " + Describe(options.lifetime) + ", idle-ttl " + Describe(options.idle_ttl) +
          ", warm shells " + std::to_string(options.warm_shells) + ", socket " +
          options.socket_path + (options.channel_stdio ? ", channel on stdio" : "") + ")");

  StopReason reason = server.Run();
  server.LogStop(reason);
  WriteExitReason(reason_path, reason);
  server.CloseSocket();
  TerminateReport report = TerminateProcesses(
      {.scope = pid1 ? KillScope::kAllButSelf : KillScope::kDescendants, .grace = kStopGrace});
  if (!report.all_gone) LogLine("some processes survived SIGKILL; exiting anyway");
  if (report.sigkill_sent != 0) LogLine("processes ignored SIGTERM for 1s and were SIGKILLed");
  return ExitCodeFor(reason);
}

}  // namespace agvisor::agent
