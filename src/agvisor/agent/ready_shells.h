// ReadyShells: a few `/bin/sh` processes started before they are needed, each waiting for its
// script on fd 3, so that an exec of `sh -c SCRIPT` skips the shell's own start (fork + execve of
// sh + its loader: most of an exec's time inside gVisor, and more after an idle pause).
//
// Used by init.cc (owns it, routes SIGCHLD, `init --ready-shells N`) and session.cc (EXEC asks
// Take first and starts the command cold when it gets nothing). docs/agent.md "Ready shells".
//
// A ready shell is SpawnCommand's child exactly as a cold command would be (own process group,
// child subreaper, the agent's environment, /dev/null on stdin, fresh stdout/stderr pipes) plus a
// pipe on fd 3. Its argv is `sh -c '<bootstrap>' sh`: the bootstrap opens with
// `: agvisor-agent ready shell ...` so `ps` inside shows what it is, reads fd 3 to its end with
// the `read` builtin, closes fd 3 and `eval`s what it read; "$0" is `sh` as for `sh -c`, "$$" is
// the pid the host gets in STARTED. Only the default key is served: an EXEC of exactly
// {"sh", "-c", SCRIPT} with no env, cwd, user, stdin or pty (background is fine) and a SCRIPT of
// at most kMaxScript bytes without NUL; anything else starts cold, as does a take that finds no
// live shell. A taken shell is replaced once no EXEC has come and no child has ended for
// kRefillQuiet: starting a
// shell costs the sandbox's CPU, and on a 1-CPU sandbox a replacement started right away slowed
// the next back-to-back exec more than the ready shell saved (bench/README.md, "Ready shells and
// back-to-back execs"), so a burst drains the shells and then runs cold, and the spaced calls of
// an agent find them refilled.
//
// Differences from a cold `sh -c` (documented in docs/agent.md): the shell's own error messages
// name `eval` ("sh: 1: eval: foo: not found"), and the last command is a child of the shell
// rather than exec'd in its place (a program killed by a signal sent to it alone, not to the
// group, shows as exit 128+N from the shell). Timeouts, SIGNAL and session ends go to the whole
// group/tree, as for a cold command.
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

#include "agvisor/agent/event_loop.h"
#include "agvisor/agent/spawn.h"
#include "agvisor/proto/messages.h"

namespace agvisor::agent {

class ReadyShells {
 public:
  // Scripts longer than this start cold: the bootstrap reads its script a byte at a time (dash's
  // `read` on a pipe), and the agent writes it in one atomic, never-blocking pipe write.
  static constexpr std::size_t kMaxScript = 4095;
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
  // A ready shell that now runs `request`'s script (written to its fd 3, which is then closed),
  // or nullopt: the request does not match, none is ready, or the one found had died. Called
  // for every EXEC: each one postpones a pending refill by kRefillQuiet.
  std::optional<SpawnedProcess> Take(const proto::ExecRequest& request);
  // SIGCHLD routing: true if `pid` was a ready shell (it is then forgotten and replaced); any
  // other child's end postpones a pending refill by kRefillQuiet.
  bool OnChildExited(pid_t pid, int wait_status);
  // pids of the shells now ready (tests, logs).
  std::vector<pid_t> ReadyPids() const;

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
};

// The bootstrap script of a ready shell (its argv[2]); exposed for tests.
const char* ReadyShellBootstrap();

}  // namespace agvisor::agent
