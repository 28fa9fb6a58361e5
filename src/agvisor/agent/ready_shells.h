// ReadyShells: a few `/bin/sh` processes started before they are needed, each waiting for its
// script on stdin, so that an exec of `sh -c SCRIPT` skips the shell's own start (fork + execve of
// sh + its loader: most of an exec's time inside gVisor, and more after an idle pause).
//
// Used by init.cc (owns it, routes SIGCHLD, `init --ready-shells N`) and session.cc (EXEC asks
// Take first and starts the command cold when it gets nothing). docs/agent.md "Ready shells".
//
// A ready shell is SpawnCommand's child exactly as a cold command would be (own process group,
// child subreaper, the agent's environment, fresh stdout/stderr pipes), but with a pipe on stdin
// instead of /dev/null. Its argv is `sh -s 'agvisor-agent ready shell, ...'`, so `ps` inside shows
// what it is; dash reads its commands from stdin. Take writes `set --; exec </dev/null; SCRIPT`
// and a newline in one atomic write and closes the pipe: dash's first read takes all of it, "$1"
// is cleared and stdin is /dev/null again on the script's own first line (its line numbers
// stay), "$0" is `sh` as for `sh -c`, "$$" is the pid the host gets in STARTED. Used only where
// the image's `sh` is dash (ShellReadsScriptsWhole); elsewhere every exec starts cold. Only the
// default key is served: an EXEC of exactly {"sh", "-c", SCRIPT} with no env, cwd, user, stdin or
// pty (background is fine) and a SCRIPT of at most kMaxScript bytes without NUL; anything else
// starts cold, as does a take that finds no live shell. A taken shell is replaced once no EXEC
// has come and no child has ended for kRefillQuiet: starting a shell costs the sandbox's CPU, and
// on a 1-CPU sandbox a replacement started right away slowed the next back-to-back exec more than
// the ready shell saved (bench/README.md, "Ready shells and back-to-back execs"), so a burst
// drains the shells and then runs cold, and the spaced calls of an agent find them refilled.
//
// Differences from a cold `sh -c` (documented in docs/agent.md): the last command is a child of
// the shell rather than exec'd in its place (a program killed by a signal sent to it alone, not
// to the group, shows as exit 128+N from the shell); "$-" has `s`. Timeouts, SIGNAL and session
// ends go to the whole group/tree, as for a cold command.
//
// Ready shells are not operations: they never count as activity (activity.h) and are not in the
// ProcessRegistry (PROC_LIST). init's stop kills them with everything else. A shell that dies
// while ready is reaped and replaced; after kMaxFailures such deaths in a row (an image without
// /bin/sh, a user killing them) the agent stops starting them and logs it once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/agent/event_loop.h"
#include "agvisor/agent/spawn.h"
#include "agvisor/proto/messages.h"

namespace agvisor::agent {

class ReadyShells {
 public:
  // Scripts longer than this start cold: the agent writes its prefix (`set --; exec </dev/null; `),
  // the script and a newline in one atomic, never-blocking pipe write (at most PIPE_BUF, 4096).
  static constexpr std::size_t kMaxScript = 4070;
  static constexpr int kMaxFailures = 3;
  // How long no EXEC may come and no child end before used shells are replaced.
  static constexpr std::chrono::milliseconds kRefillQuiet{100};

  // `count` shells are kept ready (0 = none: Take always answers nullopt).
  ReadyShells(TimerQueue* timers, std::size_t count) : timers_(timers), count_(count) {}
  ~ReadyShells();
  ReadyShells(const ReadyShells&) = delete;
  ReadyShells& operator=(const ReadyShells&) = delete;

  // Starts the first shells (from a timer, so the caller is not held up).
  void Start() { ScheduleFill(); }
  // Whether `request` may run in a ready shell (pure: the key and the script's shape).
  static bool Matches(const proto::ExecRequest& request);
  // A ready shell that now runs `request`'s script (written to its stdin, which is then closed),
  // or nullopt: the request does not match, none is ready, or the one found had died. Called
  // for every EXEC: each one postpones a pending refill by kRefillQuiet.
  std::optional<SpawnedProcess> Take(const proto::ExecRequest& request);
  // SIGCHLD routing: true if `pid` was a ready shell (it is then forgotten and replaced); any
  // other child's end postpones a pending refill by kRefillQuiet.
  bool OnChildExited(pid_t pid, int wait_status);
  // pids of the shells now ready (tests, logs).
  std::vector<pid_t> ReadyPids() const;
  // Whether the `sh` that `env`'s PATH finds first is dash: ready shells are used only then.
  // They read their script from stdin, and dash reads it in blocks (all of it at once); bash
  // reads it line by line, so a command of the script that reads stdin would take its next lines.
  static bool ShellReadsScriptsWhole(const std::vector<std::string>& env);

 private:
  // Fill after `after` (replacing a pending fill's time).
  void ScheduleFill(std::chrono::milliseconds after = std::chrono::milliseconds(0));
  void Fill();
  Result<void> StartOne();

  TimerQueue* timers_;
  std::size_t count_;
  std::deque<SpawnedProcess> ready_;
  TimerQueue::Id fill_timer_ = 0;
  int failures_ = 0;  // ready shells that died in a row without being taken
  bool given_up_ = false;
  bool shell_checked_ = false;  // ShellReadsScriptsWhole asked (at the first fill)
};

}  // namespace agvisor::agent
