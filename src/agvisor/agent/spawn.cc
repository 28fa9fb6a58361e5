#include "agvisor/agent/spawn.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "agvisor/agent/signals.h"
#include "agvisor/base/strings.h"
#include "agvisor/proto/exit_codes.h"

extern char** environ;

namespace agvisor::agent {
// The child of vfork shares the parent's memory until it execs: it may only make system calls
// and read data prepared before vfork. No allocation, no writes to shared state.
void ChildWrite(const char* s) {
  std::size_t len = std::strlen(s);
  while (len > 0) {
    ssize_t n = ::write(STDERR_FILENO, s, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s += n;
    len -= static_cast<std::size_t>(n);
  }
}

void ChildFail(const char* prefix, const char* what, const char* object, int err, int code) {
  ChildWrite(prefix);
  ChildWrite(what);
  ChildWrite(" '");
  ChildWrite(object);
  ChildWrite("': ");
  ChildWrite(std::strerror(err));  // glibc's strerror returns static text for known errnos
  ChildWrite("\n");
  ::_exit(code);
}

void ExecFirstCandidate(const char* prefix, const std::vector<std::string>& candidates,
                        char* const* argv, char* const* envp) {
  // execvp's search, over the candidates computed before the fork: EACCES anywhere means "found
  // but not runnable" (126) unless a later candidate runs; otherwise not found (127).
  int err = ENOENT;
  bool denied = false;
  for (const auto& c : candidates) {
    ::execve(c.c_str(), argv, envp);
    err = errno;
    if (err == EACCES) denied = true;
    if (err != ENOENT && err != ENOTDIR && err != EACCES) break;
  }
  if (denied && (err == ENOENT || err == ENOTDIR)) err = EACCES;
  ChildFail(prefix, "cannot run", argv[0], err,
            err == ENOENT || err == ENOTDIR ? kExecExitNotFound : kExecExitCannotRun);
}

// SpawnCommand computes them before vfork (the child may not allocate).
std::vector<std::string> ExecCandidates(const std::string& program,
                                        const std::vector<std::string>& env) {
  if (program.find('/') != std::string::npos) return {program};
  std::string path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (const auto& kv : env) {
    if (kv.rfind("PATH=", 0) == 0) path = kv.substr(5);
  }
  std::vector<std::string> out;
  for (std::string_view dir : Split(path, ':')) {
    out.push_back((dir.empty() ? std::string(".") : std::string(dir)) + "/" + program);
  }
  return out;
}

namespace {

// dup2(from, to), also when from == to (dup2 is then a no-op that would leave CLOEXEC set, and
// the fd would vanish at execve).
bool MoveTo(int from, int to) {
  if (from == to) {
    int flags = ::fcntl(from, F_GETFD);
    return flags >= 0 && ::fcntl(from, F_SETFD, flags & ~FD_CLOEXEC) == 0;
  }
  return ::dup2(from, to) == to;
}

// For an fd just made here (a pipe end, the pty master): none of the flags F_SETFL changes is set
// yet, so one call sets O_NONBLOCK without reading them first. Under gVisor's ptrace platform
// every system call of the agent is a round trip through the tracer, and this runs per exec.
Result<void> SetNonBlocking(int fd) {
  if (::fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
    return Error::FromErrno("fcntl(fd " + std::to_string(fd) + ", F_SETFL, O_NONBLOCK)", errno);
  }
  return Ok();
}

Result<std::pair<UniqueFd, UniqueFd>> Pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Error::FromErrno("pipe2(O_CLOEXEC)", errno);
  return std::make_pair(UniqueFd(fds[0]), UniqueFd(fds[1]));
}

}  // namespace

std::vector<std::string> BuildEnvironment(const std::vector<std::string>& added,
                                          const std::optional<UserIds>& user, bool pty) {
  std::vector<std::string> order;
  std::map<std::string, std::string> values;
  auto put = [&](const std::string& kv) {
    auto eq = kv.find('=');
    std::string key = kv.substr(0, eq);
    if (!values.contains(key)) order.push_back(key);
    values[key] = kv;
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) put(*e);
  if (user && !user->name.empty()) {
    if (!user->home.empty()) put("HOME=" + user->home);
    put("USER=" + user->name);
    put("LOGNAME=" + user->name);
  }
  if (pty && !values.contains("TERM")) put("TERM=xterm");
  for (const auto& kv : added) put(kv);
  std::vector<std::string> out;
  out.reserve(order.size());
  for (const auto& k : order) out.push_back(values[k]);
  return out;
}

Result<void> ResizePty(int master, std::uint16_t rows, std::uint16_t cols) {
  winsize ws{};
  ws.ws_row = rows;
  ws.ws_col = cols;
  if (::ioctl(master, TIOCSWINSZ, &ws) != 0) {
    return Error::FromErrno("ioctl(pty " + std::to_string(master) + ", TIOCSWINSZ, " +
                                std::to_string(rows) + "x" + std::to_string(cols) + ")",
                            errno);
  }
  return Ok();
}

Result<SpawnedProcess> SpawnCommand(const SpawnRequest& r) {
  SpawnedProcess out;
  UniqueFd child_in, child_out, child_err;  // the child's ends
  if (r.pty) {
    UniqueFd master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!master.valid()) return Error::FromErrno("posix_openpt(O_RDWR|O_NOCTTY)", errno);
    if (::grantpt(master.get()) != 0) return Error::FromErrno("grantpt", errno);
    if (::unlockpt(master.get()) != 0) return Error::FromErrno("unlockpt", errno);
    char name[128];
    if (int err = ::ptsname_r(master.get(), name, sizeof(name)); err != 0) {
      return Error::FromErrno("ptsname_r", err);
    }
    UniqueFd slave(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!slave.valid()) return Error::FromErrno(std::string("open ") + name, errno);
    if (r.rows != 0 && r.cols != 0)
      AGVISOR_RETURN_IF_ERROR(ResizePty(master.get(), r.rows, r.cols));
    out.pty_master = std::move(master);
    child_in = std::move(slave);
  } else {
    if (r.pipe_stdin) {
      auto [rd, wr] = AGVISOR_TRY(Pipe());
      child_in = std::move(rd);
      out.stdin_pipe = std::move(wr);
    } else {
      child_in = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (!child_in.valid()) return Error::FromErrno("open /dev/null", errno);
    }
    auto [out_r, out_w] = AGVISOR_TRY(Pipe());
    // A pipe holds 64 KiB by default (Linux and gVisor alike); stdout's holds kOutputPipeBytes,
    // so a command with bulk output writes on while the agent forwards, and the agent reads more
    // per call (process.cc). Best effort: only a speed-up. gVisor allocates a pipe's buffer as it
    // fills, so a command that writes little costs nothing more.
    (void)::fcntl(out_r.get(), F_SETPIPE_SZ, kOutputPipeBytes);
    auto [err_r, err_w] = AGVISOR_TRY(Pipe());
    out.stdout_pipe = std::move(out_r);
    out.stderr_pipe = std::move(err_r);
    child_out = std::move(out_w);
    child_err = std::move(err_w);
  }

  for (int fd :
       {out.stdin_pipe.get(), out.stdout_pipe.get(), out.stderr_pipe.get(), out.pty_master.get()}) {
    if (fd >= 0) AGVISOR_RETURN_IF_ERROR(SetNonBlocking(fd));
  }

  // Everything the child needs, prepared before vfork: the child only makes system calls.
  static constexpr const char* kPrefix = "agvisor-agent: ";
  std::vector<std::string> args = r.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = r.env;
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::vector<std::string> candidates = ExecCandidates(r.argv[0], r.env);
  const std::string user_name = r.user ? r.user->name : std::string();
  const std::string gid_text = r.user ? std::to_string(r.user->gid) : std::string();
  const std::string uid_text = r.user ? std::to_string(r.user->uid) : std::string();
  const int in_fd = child_in.get(), out_fd = child_out.get(), err_fd = child_err.get();

  // vfork, not fork: under gVisor a fork copies the agent's whole address space map and costs
  // several milliseconds per exec; vfork shares it until the child execs (measured in bench/).
  pid_t pid = ::vfork();
  if (pid < 0) return Error::FromErrno("vfork", errno);
  if (pid == 0) {
    ResetSignalsInChild();
    if (r.pty) {
      // A new session whose controlling terminal is the pty: job control, ^C and `tty` work.
      if (::setsid() < 0 || ::ioctl(in_fd, TIOCSCTTY, 0) != 0) ::_exit(kExecExitAgent);
      if (!MoveTo(in_fd, 0) || !MoveTo(in_fd, 1) || !MoveTo(in_fd, 2)) ::_exit(kExecExitAgent);
    } else {
      ::setpgid(0, 0);
      if (!MoveTo(in_fd, 0) || !MoveTo(out_fd, 1) || !MoveTo(err_fd, 2)) {
        ::_exit(kExecExitAgent);
      }
    }
    // Failure only means a timeout may miss double-forked descendants; nowhere to report it.
    (void)::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    if (r.user) {
      const UserIds& u = *r.user;
      // Raw system calls: glibc's wrappers synchronise all threads of the (shared) process.
      if (::syscall(SYS_setgroups, u.groups.size(), u.groups.data()) != 0) {
        ChildFail(kPrefix, "setgroups for user", user_name.c_str(), errno, kExecExitAgent);
      }
      if (::syscall(SYS_setgid, u.gid) != 0) {
        ChildFail(kPrefix, "setgid", gid_text.c_str(), errno, kExecExitAgent);
      }
      if (::syscall(SYS_setuid, u.uid) != 0) {
        ChildFail(kPrefix, "setuid", uid_text.c_str(), errno, kExecExitAgent);
      }
    }
    if (!r.cwd.empty() && ::chdir(r.cwd.c_str()) != 0) {
      ChildFail(kPrefix, "cannot change directory to", r.cwd.c_str(), errno, kExecExitAgent);
    }
    ExecFirstCandidate(kPrefix, candidates, argv.data(), envp.data());
  }
  // The group exists before anyone signals it (no race with the child's own setpgid). A pty child
  // makes its own session instead (setpgid from here would fail once it has).
  if (!r.pty) ::setpgid(pid, pid);
  out.pid = pid;
  return out;
}

}  // namespace agvisor::agent
