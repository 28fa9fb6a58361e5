#include "agvisor/agent/ready_shells.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "agvisor/agent/log.h"

namespace agvisor::agent {
namespace {

// `read -r` with an empty IFS keeps each line as it is (backslashes, blanks); the loop's last
// partial line stays in __l, so "$__s$__l" is the script byte for byte. `unset` runs inside the
// eval, after the expansion, so the script sees neither variable. The agent always ends the
// script with a newline, so __l is empty in practice.
//
// SIGINT: `sh -c` catches it (dash does, to stop at the end of a foreground command), and one that
// came while the shell was still reading its script was lost (the script then ran: a Ctrl-C or
// SIGNAL right after STARTED did nothing; ShellSemanticsTest.SignalsGoToTheWholeGroup caught it
// about one run in four). So until its script runs, a SIGINT makes the shell kill itself with
// SIGINT, as a cold `sh -c` would die of it; `trap - INT` then gives the script the shell's own
// handling back.
constexpr const char* kBootstrap =
    ": agvisor-agent ready shell, waiting for its command on fd 3; "
    "trap 'trap - INT; kill -INT $$' INT; "
    "__s=; while IFS= read -r __l; do __s=\"$__s$__l\n\"; done <&3; exec 3<&-; "
    "eval \"trap - INT; unset __s __l; $__s$__l\"";

}  // namespace

const char* ReadyShellBootstrap() { return kBootstrap; }

ReadyShells::~ReadyShells() {
  timers_->Cancel(fill_timer_);
  // Closing fd 3's write end makes a ready shell eval an empty script and exit 0; SIGKILL first
  // so not even that runs. init's stop kills them anyway; this covers tests.
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
    std::string script = request.argv[2] + "\n";
    // At most PIPE_BUF bytes into an empty pipe: all or nothing, never EAGAIN.
    ssize_t n = ::write(shell.script_pipe.get(), script.data(), script.size());
    shell.script_pipe.reset();
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

void ReadyShells::Fill() {
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
  r.argv = {"sh", "-c", kBootstrap, "sh"};
  r.env = BuildEnvironment({}, std::nullopt, /*pty=*/false);
  r.script_pipe = true;
  SpawnedProcess shell = AGVISOR_TRY(SpawnCommand(r));
  ready_.push_back(std::move(shell));
  return Ok();
}

}  // namespace agvisor::agent
