#include "agvisor/agent/process_tree.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <thread>

#include "agvisor/base/fs.h"

namespace agvisor::agent {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

constexpr milliseconds kPollInterval(10);
// /proc/PID/stat is a line of well under 1 KiB.
constexpr std::size_t kMaxProcStat = 64 * 1024;

std::optional<pid_t> ParsePid(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  pid_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// The processes TerminateProcesses still has to get rid of: descendants, or for kAllButSelf every
// other live process. Zombies that are not ours cannot be reaped by us and do not count.
std::vector<pid_t> Targets(KillScope scope) {
  auto table = ReadProcessTable();
  if (!table.ok()) return {};
  pid_t self = ::getpid();
  std::vector<pid_t> out;
  if (scope == KillScope::kDescendants) {
    for (pid_t pid : DescendantsOf(self, *table)) out.push_back(pid);
    return out;
  }
  for (const auto& p : *table) {
    if (p.pid != self && p.state != 'Z') out.push_back(p.pid);
  }
  return out;
}

// Sends `sig` to the scope; returns how many processes were signalled (-1: kill(-1)).
int SignalScope(const TerminateOptions& o, int sig) {
  if (o.process_group > 0) ::kill(-o.process_group, sig);
  if (o.scope == KillScope::kAllButSelf) {
    // kill(-1): every process we may signal except ourselves (and, were we not PID 1, the
    // namespace's init). One call, so a fork racing with it is caught by the next round.
    ::kill(-1, sig);
    return -1;
  }
  int n = 0;
  for (pid_t pid : Targets(o.scope)) {
    if (::kill(pid, sig) == 0) ++n;
  }
  return n;
}

// True once nothing of the scope is left (everything reaped).
bool Gone(KillScope scope, const std::function<void(pid_t, int)>& on_exit) {
  bool have_children = ReapChildren(on_exit);
  if (scope == KillScope::kDescendants) return !have_children;
  return !have_children && Targets(scope).empty();
}

// Polls until Gone or the deadline; true if gone.
bool WaitGone(KillScope scope, SteadyClock::time_point deadline,
              const std::function<void(pid_t, int)>& on_exit,
              const std::function<void()>& each_round = {}) {
  for (;;) {
    if (Gone(scope, on_exit)) return true;
    if (SteadyClock::now() >= deadline) return false;
    if (each_round) each_round();
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace

std::optional<ProcessInfo> ParseProcStat(std::string_view stat) {
  auto open = stat.find(" (");
  auto close = stat.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  auto pid = ParsePid(stat.substr(0, open));
  // After ")": " S PPID ..."
  std::string_view rest = stat.substr(close + 1);
  if (!pid || rest.size() < 4 || rest[0] != ' ' || rest[2] != ' ') return std::nullopt;
  char state = rest[1];
  rest.remove_prefix(3);
  auto ppid = ParsePid(rest.substr(0, rest.find(' ')));
  if (!ppid) return std::nullopt;
  return ProcessInfo{*pid, *ppid, state};
}

Result<std::vector<ProcessInfo>> ReadProcessTable(const std::string& proc_root) {
  DIR* dir = ::opendir(proc_root.c_str());
  if (dir == nullptr) return Error::FromErrno("opendir " + proc_root, errno);
  std::vector<ProcessInfo> out;
  while (dirent* e = ::readdir(dir)) {
    if (!ParsePid(e->d_name)) continue;
    auto stat = ReadSmallFile(proc_root + "/" + e->d_name + "/stat", kMaxProcStat);
    if (!stat) continue;  // exited meanwhile
    if (auto info = ParseProcStat(*stat)) out.push_back(*info);
  }
  ::closedir(dir);
  return out;
}

std::vector<pid_t> DescendantsOf(pid_t root, std::span<const ProcessInfo> table) {
  std::multimap<pid_t, pid_t> children;
  for (const auto& p : table) {
    if (p.pid != root) children.emplace(p.ppid, p.pid);
  }
  std::vector<pid_t> out;
  std::vector<pid_t> frontier{root};
  // Breadth first; a cycle cannot happen in a consistent table, but a table read while processes
  // come and go is not a snapshot, so cap the walk at the table's size.
  while (!frontier.empty() && out.size() < table.size()) {
    std::vector<pid_t> next;
    for (pid_t parent : frontier) {
      auto [b, e] = children.equal_range(parent);
      for (auto it = b; it != e; ++it) {
        out.push_back(it->second);
        next.push_back(it->second);
      }
    }
    frontier = std::move(next);
  }
  return out;
}

bool ReapChildren(const std::function<void(pid_t, int)>& on_exit) {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      if (on_exit) on_exit(pid, status);
      continue;
    }
    if (pid == 0) return true;  // children left, none exited yet
    if (errno == EINTR) continue;
    return false;  // ECHILD
  }
}

TerminateReport TerminateProcesses(const TerminateOptions& o,
                                   const std::function<void(pid_t, int)>& on_exit) {
  TerminateReport r;
  if (Gone(o.scope, on_exit)) {
    r.all_gone = true;
    return r;
  }
  if (o.grace.count() > 0) {
    r.sigterm_sent = SignalScope(o, SIGTERM);
    if (WaitGone(o.scope, SteadyClock::now() + o.grace, on_exit)) {
      r.all_gone = true;
      return r;
    }
  }
  // SIGKILL every round: processes forked (or re-parented to us) since the last round get it too.
  auto kill_round = [&] {
    int n = SignalScope(o, SIGKILL);
    r.sigkill_sent = (n < 0 || r.sigkill_sent < 0) ? -1 : r.sigkill_sent + n;
  };
  kill_round();
  r.all_gone = WaitGone(o.scope, SteadyClock::now() + o.kill_wait, on_exit, kill_round);
  return r;
}

}  // namespace agvisor::agent
