#include "agvisor/agent/ready_shells.h"

#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "agvisor/agent/log.h"

namespace agvisor::agent {
namespace {

// argv of a ready shell. `sh -s` reads its commands from stdin, which is the pipe the agent
// writes the script into; the words after -s only name the process for `ps` (they become "$1",
// which the agent's prefix clears).
//
// Why -s and not a `sh -c` bootstrap that reads the script and evals it: dash running `-c`
// catches SIGINT, so the child it vforks for a command runs dash's handler until it execs, and
// that handler drops the signal in a vforked child. A SIGINT sent to the group in that instant
// was lost (the command ran on; ShellSemanticsTest.SignalsGoToTheWholeGroup, about one run in
// eight when signalled right after STARTED). A cold `sh -c CMD` never forks there: it execs its
// one command. Reading commands from stdin, dash leaves SIGINT at its default (killing the shell
// and the vforked child alike, as a cold shell is killed), needs no trap, and its error messages
// are those of `sh -c` ("sh: 1: foo: not found").
constexpr const char* kMarker = "agvisor-agent ready shell, waiting for its command on stdin";
// Before the script, on its first line (its line numbers stay): clear "$1", and give the
// script's commands /dev/null for stdin as a cold exec has. dash has read the whole script by
// then (its first read takes all of one atomic write), so it reads nothing more from the pipe.
constexpr std::string_view kPrefix = "set --; exec </dev/null; ";
static_assert(kPrefix.size() + ReadyShells::kMaxScript + 1 <= PIPE_BUF);

}  // namespace

ReadyShells::~ReadyShells() {
  timers_->Cancel(fill_timer_);
  // Closing its stdin makes a ready shell read an empty script and exit 0; SIGKILL first so
  // not even that runs. init's stop kills them anyway; this covers tests.
  for (auto& s : ready_) ::kill(s.pid, SIGKILL);
}

bool ReadyShells::Matches(const proto::ExecRequest& r) {
  if (r.argv.size() != 3 || r.argv[0] != "sh" || r.argv[1] != "-c") return false;
  if (!r.env.empty() || !r.cwd.empty() || !r.user.empty()) return false;
  if ((r.flags & (proto::kExecStdin | proto::kExecPty)) != 0) return false;
  const std::string& script = r.argv[2];
  return script.size() <= kMaxScript && script.find('\0') == std::string::npos;
}

std::optional<SpawnedProcess> ReadyShells::Take(const proto::ExecRequest& request) {
  if (count_ == 0) return std::nullopt;
  if (fill_timer_ != 0) ScheduleFill(kRefillQuiet);  // execs are coming: not yet
  if (!Matches(request)) return std::nullopt;
  while (!ready_.empty()) {
    SpawnedProcess shell = std::move(ready_.front());
    ready_.pop_front();
    ScheduleFill(kRefillQuiet);
    // At most PIPE_BUF bytes into an empty pipe: all or nothing, never EAGAIN.
    std::string script = std::string(kPrefix) + request.argv[2] + "\n";
    ssize_t n = ::write(shell.stdin_pipe.get(), script.data(), script.size());
    shell.stdin_pipe.reset();
    if (n == static_cast<ssize_t>(script.size())) {
      failures_ = 0;
      return shell;
    }
    // EPIPE: it died and is not reaped yet. It is a ready shell no longer: SIGCHLD reaps it as
    // an orphan (ProcessRegistry does not know it), and the next one is tried.
    LogLine("ready shell " + std::to_string(shell.pid) +
            " could not take its script: " + (n < 0 ? std::strerror(errno) : "short write"));
    ::kill(shell.pid, SIGKILL);
  }
  return std::nullopt;
}

bool ReadyShells::OnChildExited(pid_t pid, int wait_status) {
  for (auto it = ready_.begin(); it != ready_.end(); ++it) {
    if (it->pid != pid) continue;
    ready_.erase(it);
    if (given_up_) return true;
    if (++failures_ >= kMaxFailures) {
      given_up_ = true;
      LogLine("ready shells: " + std::to_string(failures_) +
              " died while waiting (the last with wait status " + std::to_string(wait_status) +
              "); execs start their shell cold from now on");
    } else {
      ScheduleFill();
    }
    return true;
  }
  // A command ended: execs are still coming and going, so a pending refill waits on.
  if (fill_timer_ != 0) ScheduleFill(kRefillQuiet);
  return false;
}

std::vector<pid_t> ReadyShells::ReadyPids() const {
  std::vector<pid_t> out;
  for (const auto& s : ready_) out.push_back(s.pid);
  return out;
}

void ReadyShells::ScheduleFill(std::chrono::milliseconds after) {
  if (given_up_ || ready_.size() >= count_) return;
  if (fill_timer_ != 0) timers_->Cancel(fill_timer_);
  fill_timer_ = timers_->Add(TimerQueue::Clock::now() + after, [this] {
    fill_timer_ = 0;
    Fill();
  });
}

bool ReadyShells::ShellReadsScriptsWhole(const std::vector<std::string>& env) {
  for (const auto& candidate : ExecCandidates("sh", env)) {
    if (::access(candidate.c_str(), X_OK) != 0) continue;
    char resolved[PATH_MAX];
    if (::realpath(candidate.c_str(), resolved) == nullptr) return false;
    return std::string_view(resolved).ends_with("/dash");
  }
  return false;
}

void ReadyShells::Fill() {
  if (!shell_checked_) {
    shell_checked_ = true;
    if (!ShellReadsScriptsWhole(BuildEnvironment({}, std::nullopt, /*pty=*/false))) {
      given_up_ = true;
      LogLine(
          "ready shells: this image's sh is not dash; execs start their shell cold "
          "(docs/agent.md \"Ready shells\")");
      return;
    }
  }
  while (!given_up_ && ready_.size() < count_) {
    if (auto r = StartOne(); !r.ok()) {
      // Out of processes or fds: the cold path will say so to the host; the next take retries.
      LogLine("ready shells: " + r.error().message());
      return;
    }
  }
}

Result<void> ReadyShells::StartOne() {
  SpawnRequest r;
  r.argv = {"sh", "-s", kMarker};
  r.env = BuildEnvironment({}, std::nullopt, /*pty=*/false);
  r.pipe_stdin = true;
  SpawnedProcess shell = AGVISOR_TRY(SpawnCommand(r));
  ready_.push_back(std::move(shell));
  return Ok();
}

}  // namespace agvisor::agent
