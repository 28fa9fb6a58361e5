// Process tree of the agent: finding descendants through /proc, reaping, and killing a whole tree.
//
// Used by init (reap zombies; stop everything on expiry) and exec (kill the command's tree on
// timeout). The parsing and the tree walk are pure and unit-tested; the rest reads /proc and sends
// signals.
//
// Why /proc and not process groups or cgroups: a command can leave its process group (setsid) and
// its parent (double fork); cgroups are not ours to create inside a container. But the agent is a
// child subreaper (PR_SET_CHILD_SUBREAPER), so an orphan is re-parented to the agent, never to
// PID 1 outside the tree: every descendant keeps a PPid chain ending at the agent. Walking those
// chains in /proc finds them all; repeating walk + SIGKILL until the agent has no child left also
// catches processes forked while we were killing.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::agent {

struct ProcessInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';  // R, S, D, Z (zombie), T, ...
};

// Parses the contents of /proc/PID/stat ("1234 (comm) S 1 ..."). The command name may contain
// spaces and ')' itself, so fields are counted from the last ')'. Unset if malformed.
std::optional<ProcessInfo> ParseProcStat(std::string_view stat);

// Every process visible in `proc_root` (pid, ppid, state). Processes that exit while we read are
// skipped. Errors: opendir's (kNotFound if /proc is not mounted).
Result<std::vector<ProcessInfo>> ReadProcessTable(const std::string& proc_root = "/proc");

// Pure: the pids of every descendant of `root` in `table` (not root itself), parents before
// children. Zombies are included (they are gone once reaped).
std::vector<pid_t> DescendantsOf(pid_t root, std::span<const ProcessInfo> table);

// Reaps every exited child without blocking, calling on_exit(pid, wait status) for each (may be
// empty). Returns true while this process still has children, false once it has none (ECHILD).
bool ReapChildren(const std::function<void(pid_t, int)>& on_exit = {});

// Which processes TerminateProcesses signals.
enum class KillScope {
  kDescendants,  // the descendants of this process (/proc walk): exec, or init when not PID 1
  kAllButSelf,   // every process of the PID namespace (kill(-1)): init as PID 1
};

struct TerminateOptions {
  KillScope scope = KillScope::kDescendants;
  // SIGTERM, then this long for the processes to exit, then SIGKILL. Zero: SIGKILL at once.
  std::chrono::milliseconds grace{1000};
  // Give up waiting this long after the SIGKILL (a process stuck in an uninterruptible sleep).
  std::chrono::milliseconds kill_wait{5000};
  // Also signal this process group (exec's command), in case its leader is briefly invisible.
  pid_t process_group = 0;
};

struct TerminateReport {
  int sigterm_sent = 0;   // processes signalled with SIGTERM (-1 for kill(-1))
  int sigkill_sent = 0;   // processes signalled with SIGKILL, over all rounds
  bool all_gone = false;  // nothing of the scope remained at the end
};

// Terminates every process of `scope` and reaps them (on_exit as for ReapChildren). Blocking; the
// waits poll every 10 ms: this runs once, while the agent is stopping or timing a command out.
TerminateReport TerminateProcesses(const TerminateOptions& options,
                                   const std::function<void(pid_t, int)>& on_exit = {});

}  // namespace agvisor::agent
