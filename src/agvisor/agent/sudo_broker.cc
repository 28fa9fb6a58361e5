#include "agvisor/agent/sudo_broker.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "agvisor/agent/activity_socket.h"
#include "agvisor/agent/log.h"
#include "agvisor/agent/signals.h"
#include "agvisor/agent/spawn.h"
#include "agvisor/agent/sudo.h"

namespace agvisor::agent {
namespace {

std::atomic<std::size_t> g_active_requests{0};

constexpr const char* kPrefix = "sudo: ";

void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Reads exactly `size` bytes (the socket's receive timeout bounds each wait). On the first read,
// takes the fds attached (at most 3 are accepted: more truncate the control data, refused).
Result<void> ReadExactly(int fd, char* data, std::size_t size, std::vector<UniqueFd>* fds) {
  std::size_t got = 0;
  while (got < size) {
    iovec iov{data + got, size - got};
    alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fds) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
    }
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Error::Timeout("sudo request: not sent within " +
                            std::to_string(kSudoRequestTimeout.count()) + " s");
    }
    if (n < 0) return Error::FromErrno("sudo request: recvmsg", errno);
    if (fds) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t k = 0; k < count; ++k) {
          int received;
          std::memcpy(&received, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
          fds->emplace_back(received);
        }
      }
      if (msg.msg_flags & MSG_CTRUNC) {
        return Error::InvalidArgument("sudo request: more than 3 fds attached");
      }
      fds = nullptr;  // fds only with the first bytes
    }
    if (n == 0) return Error::InvalidArgument("sudo request: the client closed before its end");
    got += static_cast<std::size_t>(n);
  }
  return Ok();
}

struct Received {
  SudoRequest request;
  std::vector<UniqueFd> fds;  // stdin, stdout, stderr
};

Result<Received> ReadRequest(int conn, std::vector<UniqueFd>* fds) {
  std::array<char, 4> header{};
  AGVISOR_RETURN_IF_ERROR(ReadExactly(conn, header.data(), header.size(), fds));
  if (fds->size() != 3) {
    return Error::InvalidArgument("sudo request: expected stdin, stdout and stderr attached, got " +
                                  std::to_string(fds->size()) + " fds");
  }
  const std::uint32_t length = AGVISOR_TRY(DecodeSudoLength(header));
  std::string payload(length, '\0');
  AGVISOR_RETURN_IF_ERROR(ReadExactly(conn, payload.data(), payload.size(), nullptr));
  return Received{AGVISOR_TRY(DecodeSudoRequest(payload)), std::move(*fds)};
}

// What StartCommand prepares before cloning: the child may only make system calls.
struct Prepared {
  std::vector<std::string> args, env, candidates;
  std::vector<char*> argv, envp;
  std::string cwd;
  int in_fd, out_fd, err_fd;
};

// The command's process, after the fork: root (uid, gid and groups 0), the client's fds, the
// cwd, execve. Never returns.
[[noreturn]] void ExecAsRoot(const Prepared& p) {
  ResetSignalsInChild();
  // Received fds are CLOEXEC: dup2 clears it on the copies. They are above 2 (the agent's own
  // 0..2 are taken), so no dup2 overwrites another.
  if (::dup2(p.in_fd, 0) != 0 || ::dup2(p.out_fd, 1) != 1 || ::dup2(p.err_fd, 2) != 2) ::_exit(1);
  const gid_t root_group = 0;
  if (::syscall(SYS_setgroups, 1, &root_group) != 0) ChildFail(kPrefix, "setgroups", "0", errno, 1);
  if (::syscall(SYS_setgid, 0) != 0) ChildFail(kPrefix, "setgid", "0", errno, 1);
  if (::syscall(SYS_setuid, 0) != 0) ChildFail(kPrefix, "setuid", "0", errno, 1);
  if (::chdir(p.cwd.c_str()) != 0)
    ChildFail(kPrefix, "cannot change directory to", p.cwd.c_str(), errno, 1);
  ExecFirstCandidate(kPrefix, p.candidates, p.argv.data(), p.envp.data());
}

void WriteInt(int fd, int value) {
  while (::write(fd, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

// A started command: its keeper, and the pipe on which the keeper sends the command's pid, then
// its wait status.
struct Started {
  pid_t keeper = -1;
  UniqueFd reports;
};

// Starts the command under a keeper process. The keeper is cloned without an exit signal, so
// that init's waitpid(-1) leaves it to this thread (waitpid with __WCLONE); the command cannot be
// that child itself, since execve gives a process SIGCHLD as its exit signal again (Linux's
// de_thread, and gVisor alike). The keeper forks the command, waits for it and reports.
// Errors: those of pipe2 / clone.
Result<Started> StartCommand(const SudoRequest& r, const std::vector<UniqueFd>& fds) {
  Prepared p{.args = r.argv,
             .env = r.env,
             .candidates = ExecCandidates(r.argv[0], r.env),
             .cwd = r.cwd,
             .in_fd = fds[0].get(),
             .out_fd = fds[1].get(),
             .err_fd = fds[2].get()};
  for (auto& a : p.args) p.argv.push_back(a.data());
  p.argv.push_back(nullptr);
  for (auto& e : p.env) p.envp.push_back(e.data());
  p.envp.push_back(nullptr);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Error::FromErrno("pipe2", errno);
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  // Forks (no CLONE_VM: other threads share the agent's memory), with no exit signal (flags 0).
  long keeper = ::syscall(SYS_clone, 0L, nullptr, nullptr, nullptr, 0L);
  if (keeper < 0) return Error::FromErrno("clone", errno);
  if (keeper == 0) {
    long command = ::syscall(SYS_clone, static_cast<long>(SIGCHLD), nullptr, nullptr, nullptr, 0L);
    if (command == 0) ExecAsRoot(p);
    WriteInt(write_end.get(), static_cast<int>(command));
    int status = 0;
    while (command > 0 && ::waitpid(static_cast<pid_t>(command), &status, 0) < 0 &&
           errno == EINTR) {
    }
    if (command > 0) WriteInt(write_end.get(), status);
    ::_exit(0);
  }
  return Started{static_cast<pid_t>(keeper), std::move(read_end)};
}

// Reads one int of the keeper's report; nullopt at its end.
std::optional<int> ReadInt(int fd) {
  int value = 0;
  std::size_t got = 0;
  while (got < sizeof value) {
    ssize_t n = ::read(fd, reinterpret_cast<char*>(&value) + got, sizeof value - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    got += static_cast<std::size_t>(n);
  }
  return value;
}

void Serve(UniqueFd conn) {
  const timeval timeout{.tv_sec = kSudoRequestTimeout.count(), .tv_usec = 0};
  ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(conn.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::vector<UniqueFd> fds;
  auto received = ReadRequest(conn.get(), &fds);
  if (!received.ok()) {
    // Told on the client's stderr when it sent one (the shim's, so its user sees why).
    if (fds.size() >= 3) WriteAll(fds[2].get(), "sudo: " + received.error().message() + "\n");
    WriteAll(conn.get(), std::string_view(EncodeSudoOutcome({.value = 1}).data(), 2));
    return;
  }
  auto started = StartCommand(received->request, received->fds);
  received->fds.clear();  // the command holds its own copies
  if (!started.ok()) {
    LogLine("sudo broker: " + started.error().message());
    WriteAll(conn.get(), std::string_view(EncodeSudoOutcome({.value = 1}).data(), 2));
    return;
  }
  const std::optional<int> command = ReadInt(started->reports.get());
  // Signal bytes from the client while the command runs; the reader ends when the connection is
  // shut down below. `done` (under `mu`) keeps it from signalling a reaped (reusable) pid.
  const timeval none{};
  ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  std::mutex mu;
  bool done = !command.has_value();
  std::thread forwarder([&] {
    char sig;
    for (;;) {
      ssize_t n = ::recv(conn.get(), &sig, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) continue;
      std::lock_guard lock(mu);
      if (!done) ::kill(*command, sig);
    }
  });
  const std::optional<int> status = command ? ReadInt(started->reports.get()) : std::nullopt;
  {
    std::lock_guard lock(mu);
    done = true;
  }
  while (::waitpid(started->keeper, nullptr, __WCLONE) < 0 && errno == EINTR) {
  }
  SudoOutcome outcome{.value = 1};
  if (status && WIFEXITED(*status)) outcome = {.signaled = false, .value = WEXITSTATUS(*status)};
  if (status && WIFSIGNALED(*status)) outcome = {.signaled = true, .value = WTERMSIG(*status)};
  if (!status) LogLine("sudo broker: the command's keeper ended without its status");
  WriteAll(conn.get(), std::string_view(EncodeSudoOutcome(outcome).data(), 2));
  ::shutdown(conn.get(), SHUT_RDWR);
  forwarder.join();
}

}  // namespace

void ServeSudoConnection(UniqueFd connection) { Serve(std::move(connection)); }

Result<void> StartSudoBroker(const std::string& path) {
  UniqueFd listener = AGVISOR_TRY(ListenUnixSocket(path, 0755, 0666));
  // The accepting thread blocks in accept4: the listener is made blocking.
  int flags = ::fcntl(listener.get(), F_GETFL);
  if (flags < 0 || ::fcntl(listener.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return Error::FromErrno("fcntl " + path, errno);
  }
  std::thread([listener = std::move(listener), path] {
    for (;;) {
      int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        LogLine("sudo broker: accept4 on " + path + ": " + std::strerror(errno));
        // EMFILE and the like: wait for requests to end and free fds rather than spin.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      UniqueFd conn(fd);
      if (g_active_requests.fetch_add(1) >= kSudoMaxRequests) {
        g_active_requests.fetch_sub(1);
        continue;  // closed: the shim says the broker is busy
      }
      std::thread([conn = std::move(conn)]() mutable {
        Serve(std::move(conn));
        g_active_requests.fetch_sub(1);
      }).detach();
    }
  }).detach();
  return Ok();
}

Result<void> InstallSudoShim(const std::string& agent_path) {
  const std::string shim(kSudoShimPath);
  struct stat st {};
  if (::lstat(shim.c_str(), &st) == 0) {
    char target[4096];
    ssize_t n = S_ISLNK(st.st_mode) ? ::readlink(shim.c_str(), target, sizeof target) : -1;
    if (n > 0 && std::string_view(target, static_cast<std::size_t>(n)) == agent_path) return Ok();
    return Error::Conflict(shim + ": the image has its own; left alone (sudo may not work)");
  }
  const std::string dir = shim.substr(0, shim.find_last_of('/'));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Error::FromErrno("mkdir " + dir, errno);
  }
  if (::symlink(agent_path.c_str(), shim.c_str()) != 0 && errno != EEXIST) {
    return Error::FromErrno("symlink " + shim, errno);
  }
  return Ok();
}

}  // namespace agvisor::agent
