#include "agvisor/agent/exec.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/agent/activity_socket.h"
#include "agvisor/agent/event_loop.h"
#include "agvisor/agent/log.h"
#include "agvisor/agent/process_tree.h"
#include "agvisor/agent/signals.h"
#include "agvisor/proto/exit_codes.h"

namespace agvisor::agent {
namespace {

// What the child reports through the error pipe when it cannot get to execvp's success.
struct ChildFailure {
  enum Stage : int { kChdir = 1, kExec = 2 } stage;
  int err;
};

int ExitCodeOf(int wait_status) {
  if (WIFSIGNALED(wait_status)) return kExecExitSignalBase + WTERMSIG(wait_status);
  return WEXITSTATUS(wait_status);
}

// The forked child: never returns.
[[noreturn]] void RunChild(const ExecOptions& o, std::vector<char*>& argv, int error_pipe) {
  ResetSignalsInChild();
  ::setpgid(0, 0);
  ChildFailure failure{ChildFailure::kExec, 0};
  if (o.cwd && ::chdir(o.cwd->c_str()) != 0) {
    failure = {ChildFailure::kChdir, errno};
  } else {
    // After fork in a single-threaded process, setenv (malloc) is safe.
    for (const auto& kv : o.env) {
      auto eq = kv.find('=');
      ::setenv(kv.substr(0, eq).c_str(), kv.c_str() + eq + 1, 1);
    }
    ::execvp(argv[0], argv.data());
    failure = {ChildFailure::kExec, errno};
  }
  ssize_t ignored = ::write(error_pipe, &failure, sizeof(failure));
  (void)ignored;
  ::_exit(kExecExitAgent);
}

class ExecRunner {
 public:
  explicit ExecRunner(const ExecOptions& o) : o_(o) {}

  int Run() {
    // Activity: held until exec exits (the kernel closes the fd). Missing socket: run anyway.
    auto activity = ConnectActivitySocket(o_.socket_path);
    if (activity.ok()) activity_ = std::move(*activity);

    if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
      LogLine(std::string("exec: prctl(PR_SET_CHILD_SUBREAPER, 1): ") + std::strerror(errno) +
              " (a timeout may miss descendants that double-fork)");
    }
    auto signals = SignalFd::Create({SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT});
    if (!signals.ok()) return Fail(signals.error().message());
    signals_ = std::move(*signals);
    auto loop = EventLoop::Create();
    if (!loop.ok()) return Fail(loop.error().message());
    loop_ = std::move(*loop);

    if (int rc = Spawn(); rc >= 0) return rc;

    auto added = loop_->Add(signals_->fd(), EPOLLIN, [this](std::uint32_t) { OnSignals(); });
    if (!added.ok()) {
      LogLine("exec: " + added.error().message());
      KillTree();
      return kExecExitAgent;
    }
    std::optional<std::chrono::steady_clock::time_point> deadline;
    if (o_.timeout) deadline = std::chrono::steady_clock::now() + *o_.timeout;
    for (;;) {
      if (main_status_) return ExitCodeOf(*main_status_);
      if (deadline && std::chrono::steady_clock::now() >= *deadline) return TimeOut();
      if (auto r = loop_->RunOnce(deadline); !r.ok()) {
        LogLine("exec: " + r.error().message());
        return TimeOut();  // cannot wait any more: do not leave the tree behind
      }
    }
  }

 private:
  int Fail(const std::string& message) {
    LogLine("exec: " + message);
    return kExecExitAgent;
  }

  // Forks and execs the command. Returns -1 when it runs, else exec's exit code.
  int Spawn() {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
      return Fail(std::string("pipe2: ") + std::strerror(errno));
    UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
    std::vector<std::string> args = o_.argv;
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    pid_t pid = ::fork();
    if (pid < 0) return Fail(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) RunChild(o_, argv, write_end.get());
    main_pid_ = pid;
    // Also from the parent, so the group exists before we ever signal it (no race with the child).
    ::setpgid(pid, pid);
    write_end.reset();

    ChildFailure failure{};
    ssize_t n;
    do {
      n = ::read(read_end.get(), &failure, sizeof(failure));
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof(failure))) return -1;  // EOF: execvp succeeded

    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    main_status_ = status;
    const std::string prog = o_.argv[0];
    if (failure.stage == ChildFailure::kChdir) {
      return Fail("cannot change directory to " + *o_.cwd + ": " + std::strerror(failure.err));
    }
    LogLine("exec: cannot run '" + prog + "': " + std::strerror(failure.err));
    return failure.err == ENOENT ? kExecExitNotFound : kExecExitCannotRun;
  }

  void OnSignals() {
    auto sigs = signals_->ReadPending();
    if (!sigs.ok()) LogLine("exec: " + sigs.error().message());
    if (sigs.ok()) {
      for (int sig : *sigs) {
        if (sig != SIGCHLD && !main_status_) ::kill(-main_pid_, sig);  // forward to the command
      }
    }
    ReapChildren([this](pid_t pid, int status) {
      if (pid == main_pid_) main_status_ = status;
      // Other children are orphans re-parented to us (we are a subreaper): reaped, not waited for.
    });
  }

  // SIGTERM to the whole tree, SIGKILL after the grace, until no descendant is left.
  void KillTree() {
    TerminateReport report = TerminateProcesses(
        {.scope = KillScope::kDescendants, .grace = o_.grace, .process_group = main_pid_});
    if (!report.all_gone) LogLine("exec: some processes of the command survived SIGKILL");
  }

  int TimeOut() {
    KillTree();
    return kExecExitTimeout;
  }

  const ExecOptions& o_;
  UniqueFd activity_;
  std::optional<SignalFd> signals_;
  std::optional<EventLoop> loop_;
  pid_t main_pid_ = -1;
  std::optional<int> main_status_;
};

}  // namespace

int RunExec(const ExecOptions& options) {
  ExecRunner runner(options);
  return runner.Run();
}

}  // namespace agvisor::agent
