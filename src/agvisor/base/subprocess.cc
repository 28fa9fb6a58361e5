#include "agvisor/base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

extern char** environ;

namespace agvisor {
namespace {

Result<std::pair<UniqueFd, UniqueFd>> Pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Error::FromErrno("pipe2", errno);
  return std::pair{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

ExitStatus Decode(int wstatus) {
  ExitStatus s;
  if (WIFSIGNALED(wstatus)) {
    s.signal = WTERMSIG(wstatus);
  } else {
    s.exit_code = WEXITSTATUS(wstatus);
  }
  return s;
}

}  // namespace

std::string ExitStatus::ToString() const {
  if (signaled()) return "signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit " + std::to_string(exit_code);
}

Result<Subprocess> Subprocess::Spawn(SubprocessOptions o) {
  if (o.argv.empty()) return Error::InvalidArgument("spawn: empty argv");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  struct Cleanup {
    posix_spawn_file_actions_t* fa;
    posix_spawnattr_t* attr;
    ~Cleanup() {
      posix_spawn_file_actions_destroy(fa);
      posix_spawnattr_destroy(attr);
    }
  } cleanup{&fa, &attr};

  Subprocess p;
  UniqueFd child_in, child_out, child_err;
  if (o.pipe_stdin) {
    auto pr = AGVISOR_TRY(Pipe());
    child_in = std::move(pr.first);
    p.stdin_ = std::move(pr.second);
    posix_spawn_file_actions_adddup2(&fa, child_in.get(), 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  if (o.pipe_stdout) {
    auto pr = AGVISOR_TRY(Pipe());
    p.stdout_ = std::move(pr.first);
    child_out = std::move(pr.second);
    posix_spawn_file_actions_adddup2(&fa, child_out.get(), 1);
  }
  if (o.stderr_to_stdout) {
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  } else if (o.pipe_stderr) {
    auto pr = AGVISOR_TRY(Pipe());
    p.stderr_ = std::move(pr.first);
    child_err = std::move(pr.second);
    posix_spawn_file_actions_adddup2(&fa, child_err.get(), 2);
  }
  // The child starts with default signal dispositions and an empty mask, whatever ours are.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  if (o.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);

  std::vector<char*> argv;
  for (auto& a : o.argv) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::map<std::string, std::string> env_map;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    env_map[kv.substr(0, eq)] = kv;
  }
  for (const auto& kv : o.env) env_map[kv.substr(0, kv.find('='))] = kv;
  std::vector<std::string> env_store;
  for (auto& [k, kv] : env_map) env_store.push_back(kv);
  std::vector<char*> envp;
  for (auto& kv : env_store) envp.push_back(kv.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  if (rc != 0) return Error::FromErrno("spawn " + o.argv[0], rc);
  p.pid_ = pid;
  p.group_ = o.new_process_group;
  return p;
}

Subprocess::Subprocess(Subprocess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      group_(o.group_),
      detached_(o.detached_),
      status_(o.status_),
      stdin_(std::move(o.stdin_)),
      stdout_(std::move(o.stdout_)),
      stderr_(std::move(o.stderr_)) {}

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  if (this != &o) {
    this->~Subprocess();
    new (this) Subprocess(std::move(o));
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !status_ && !detached_) {
    (void)Kill(SIGKILL);
    (void)Wait();
  }
}

Result<ExitStatus> Subprocess::Wait() {
  if (status_) return *status_;
  int ws = 0;
  for (;;) {
    if (::waitpid(pid_, &ws, 0) >= 0) break;
    if (errno != EINTR) return Error::FromErrno("waitpid " + std::to_string(pid_), errno);
  }
  status_ = Decode(ws);
  return *status_;
}

Result<std::optional<ExitStatus>> Subprocess::TryWait() {
  if (status_) return std::optional<ExitStatus>(*status_);
  int ws = 0;
  pid_t r = ::waitpid(pid_, &ws, WNOHANG);
  if (r < 0) return Error::FromErrno("waitpid " + std::to_string(pid_), errno);
  if (r == 0) return std::optional<ExitStatus>();
  status_ = Decode(ws);
  return std::optional<ExitStatus>(*status_);
}

Result<ExitStatus> Subprocess::WaitFor(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto s = AGVISOR_TRY(TryWait());
    if (s) return *s;
    if (std::chrono::steady_clock::now() >= deadline) {
      return Error::Timeout("process " + std::to_string(pid_) + " still running after " +
                            std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Result<void> Subprocess::Kill(int sig) {
  if (pid_ <= 0 || status_) return Ok();
  if (::kill(group_ ? -pid_ : pid_, sig) != 0 && errno != ESRCH) {
    return Error::FromErrno("kill " + std::to_string(pid_), errno);
  }
  return Ok();
}

Result<CommandOutput> RunCommand(std::vector<std::string> argv, std::string_view input) {
  SubprocessOptions o;
  o.argv = std::move(argv);
  o.pipe_stdin = true;
  o.pipe_stdout = true;
  o.pipe_stderr = true;
  auto p = AGVISOR_TRY(Subprocess::Spawn(std::move(o)));
  CommandOutput out;
  size_t written = 0;
  if (input.empty()) p.stdin_fd().reset();
  // poll all three pipes so a chatty child never deadlocks against a full pipe.
  char buf[65536];
  while (p.stdout_fd() || p.stderr_fd() || p.stdin_fd()) {
    pollfd fds[3];
    int n = 0;
    int in_i = -1, out_i = -1, err_i = -1;
    if (p.stdin_fd()) {
      in_i = n;
      fds[n++] = {p.stdin_fd().get(), POLLOUT, 0};
    }
    if (p.stdout_fd()) {
      out_i = n;
      fds[n++] = {p.stdout_fd().get(), POLLIN, 0};
    }
    if (p.stderr_fd()) {
      err_i = n;
      fds[n++] = {p.stderr_fd().get(), POLLIN, 0};
    }
    if (::poll(fds, n, -1) < 0) {
      if (errno == EINTR) continue;
      return Error::FromErrno("poll", errno);
    }
    if (in_i >= 0 && fds[in_i].revents) {
      ssize_t w = ::write(p.stdin_fd().get(), input.data() + written, input.size() - written);
      if (w < 0 && errno != EINTR && errno != EAGAIN) {
        p.stdin_fd().reset();  // child closed its stdin: stop feeding it
      } else if (w > 0) {
        written += static_cast<size_t>(w);
        if (written == input.size()) p.stdin_fd().reset();
      }
    }
    auto drain = [&](int idx, UniqueFd& fd, std::string& into) {
      if (idx < 0 || !fds[idx].revents) return;
      ssize_t r = ::read(fd.get(), buf, sizeof buf);
      if (r > 0)
        into.append(buf, static_cast<size_t>(r));
      else if (r == 0 || (errno != EINTR && errno != EAGAIN))
        fd.reset();
    };
    drain(out_i, p.stdout_fd(), out.out);
    drain(err_i, p.stderr_fd(), out.err);
  }
  out.status = AGVISOR_TRY(p.Wait());
  return out;
}

}  // namespace agvisor
