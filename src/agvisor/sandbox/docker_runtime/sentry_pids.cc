#include "agvisor/sandbox/docker_runtime/sentry_pids.h"

#include <unistd.h>

#include <chrono>
#include <climits>
#include <csignal>

#include "agvisor/base/fs.h"
#include "agvisor/base/strings.h"
#include "agvisor/base/subprocess.h"

namespace agvisor {

std::optional<RunscCall> RunscCallOf(std::string_view exe, std::string_view cmdline) {
  if (exe.empty()) return std::nullopt;
  const auto args = Split(cmdline, '\0');
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    // Go's flag package takes "-root" and "--root", "=VALUE" or the next argument.
    if (a.rfind("--", 0) == 0) {
      a.remove_prefix(2);
    } else if (a.rfind("-", 0) == 0) {
      a.remove_prefix(1);
    } else {
      continue;
    }
    if (a.rfind("root=", 0) == 0 && a.size() > 5) {
      return RunscCall{std::string(exe), std::string(a.substr(5))};
    }
    if (a == "root" && i + 1 < args.size() && !args[i + 1].empty()) {
      return RunscCall{std::string(exe), std::string(args[i + 1])};
    }
  }
  return std::nullopt;
}

std::vector<std::string> SentryPidsArgv(const RunscCall& call, std::string_view id) {
  // The sentry's cgroup of a container is "/<container id>" in each hierarchy (runsc's
  // mountCgroupSubmounts), where the container's processes and its execs start.
  const std::string cid(id);
  return {call.runsc, "--root=" + call.root, "read-control", cid, "pids",
          "/" + cid,  "pids.current"};
}

Result<std::int64_t> ReadSentryPids(std::string_view id, std::int64_t pid) {
  bool hex = id.size() == 64;
  for (char c : id) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) {
    return Error::InvalidArgument("count the processes of '" + std::string(id) +
                                  "': not a full container id");
  }
  const std::string what = "count the processes of " + std::string(id.substr(0, 12));
  const std::string proc = "/proc/" + std::to_string(pid);
  char exe[PATH_MAX];
  const ssize_t n = pid > 0 ? ::readlink((proc + "/exe").c_str(), exe, sizeof exe - 1) : -1;
  auto cmdline = pid > 0 ? ReadSmallFile(proc + "/cmdline", 64 * 1024) : std::nullopt;
  if (n <= 0 || !cmdline) {
    return Error::NotFound(what + ": its sandbox process " + std::to_string(pid) +
                           " is not readable here (another machine, or not root)");
  }
  auto call = RunscCallOf(std::string_view(exe, static_cast<std::size_t>(n)), *cmdline);
  if (!call) return Error::NotFound(what + ": its sandbox process names no runsc --root");
  auto child = AGVISOR_TRY(Subprocess::Spawn(
      {.argv = SentryPidsArgv(*call, id), .pipe_stdout = true, .stderr_to_stdout = true}));
  // The sentry answers at once, paused or not (runsc pauses inside the sentry, whose control
  // server keeps serving); a wedged one must not hold a stats sample.
  auto status = child.WaitFor(std::chrono::seconds(5));
  if (!status.ok()) {
    (void)child.Kill(SIGKILL);
    return Error::Timeout(what + ": runsc read-control did not answer in 5 s");
  }
  std::string out;
  char buf[512];
  ssize_t got = 0;
  while (out.size() < 4096 && (got = ::read(child.stdout_fd().get(), buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<std::size_t>(got));
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  std::int64_t count = 0;
  bool digits = !out.empty() && out.size() < 12;
  for (char c : out) {
    digits = digits && c >= '0' && c <= '9';
    if (digits) count = count * 10 + (c - '0');
  }
  if (!status->success() || !digits) {
    return Error::Internal(what + ": runsc read-control " + status->ToString() + ": " +
                           EscapeForTerminal(out));
  }
  return count;
}

}  // namespace agvisor
