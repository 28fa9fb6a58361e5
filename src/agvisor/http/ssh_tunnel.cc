#include "agvisor/http/ssh_tunnel.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "agvisor/http/fd_io.h"

namespace agvisor::http::internal {
namespace {

constexpr std::size_t kTailBytes = 4096;

void AppendTail(std::string& tail, const char* data, std::size_t n) {
  tail.append(data, n);
  if (tail.size() > kTailBytes) tail.erase(0, tail.size() - kTailBytes);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// A directory for the forwarded socket: $TMPDIR (if the socket path still fits in sun_path)
// or /tmp. mkdtemp creates it 0700.
Result<std::string> MakePrivateDir() {
  std::string base = "/tmp";
  if (const char* t = std::getenv("TMPDIR"); t && *t == '/' && std::strlen(t) < 60) base = t;
  std::string templ = base + "/agvisor-ssh-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return Error::FromErrno("mkdtemp " + templ, errno);
  return templ;
}

}  // namespace

namespace {

// The options every ssh we start shares, up to (not including) the destination. ssh keeps the
// FIRST value it sees for an option: the ones we depend on come first, the ConnectTimeout
// default after the caller's arguments so that the caller can override it.
std::vector<std::string> SshPrefix(const Endpoint& endpoint, const ClientOptions& options,
                                   std::vector<std::string> ours) {
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes"};
  argv.insert(argv.end(), ours.begin(), ours.end());
  argv.push_back("-T");
  if (endpoint.port != 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(endpoint.port));
  }
  argv.insert(argv.end(), options.ssh_args.begin(), options.ssh_args.end());
  auto secs = std::max<long long>(
      1, std::chrono::ceil<std::chrono::seconds>(options.connect_timeout).count());
  argv.push_back("-o");
  argv.push_back("ConnectTimeout=" + std::to_string(secs));
  return argv;
}

std::string Destination(const Endpoint& endpoint) {
  return endpoint.user.empty() ? endpoint.host : endpoint.user + "@" + endpoint.host;
}

}  // namespace

std::vector<std::string> SshCommandLine(const Endpoint& endpoint, const ClientOptions& options,
                                        const std::string& local_socket) {
  auto argv = SshPrefix(endpoint, options,
                        {"-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes"});
  argv.push_back("-L");
  argv.push_back(local_socket + ":" + endpoint.path);
  argv.push_back("--");  // ParseEndpoint already refuses a host or user starting with '-'
  argv.push_back(Destination(endpoint));
  // Runs until our end of its stdin closes, then ends the session (its parent, sshd's session
  // process): without that, ssh would wait for every forwarded connection to close first, and
  // Docker keeps an attached stream of a running sandbox open after our side is gone.
  argv.push_back(std::string(kTunnelRemoteCommand));
  return argv;
}

}  // namespace agvisor::http::internal

namespace agvisor::http {

std::vector<std::string> SshRemoteCommandLine(const Endpoint& endpoint,
                                              const ClientOptions& options,
                                              std::string remote_command) {
  auto argv = internal::SshPrefix(endpoint, options, {});
  argv.push_back("--");
  argv.push_back(internal::Destination(endpoint));
  argv.push_back(std::move(remote_command));
  return argv;
}

std::vector<std::string> SshStdioForwardCommandLine(const Endpoint& endpoint,
                                                    const ClientOptions& options,
                                                    std::string_view target_host,
                                                    std::uint16_t target_port) {
  // ssh reports why a channel failed ("open failed: connect failed: ...") at level INFO only:
  // kept even when the caller's options ask for less (the first value of an option wins).
  auto argv = internal::SshPrefix(endpoint, options, {"-o", "LogLevel=INFO"});
  argv.push_back("-W");
  // ssh splits host:port at the last ':'; an IPv6 literal needs its brackets.
  const bool v6 = target_host.find(':') != std::string_view::npos;
  argv.push_back((v6 ? "[" + std::string(target_host) + "]" : std::string(target_host)) + ":" +
                 std::to_string(target_port));
  argv.push_back("--");
  argv.push_back(internal::Destination(endpoint));
  return argv;
}

}  // namespace agvisor::http

namespace agvisor::http::internal {

Result<std::unique_ptr<SshTunnel>> SshTunnel::Start(const Endpoint& endpoint,
                                                    const ClientOptions& options) {
  std::string dir = AGVISOR_TRY(MakePrivateDir());
  std::string socket = dir + "/docker.sock";
  SubprocessOptions so;
  so.argv = SshCommandLine(endpoint, options, socket);
  so.pipe_stdin = true;
  so.pipe_stdout = true;
  so.pipe_stderr = true;
  // Its own process group: a Ctrl-C meant for us must not kill the tunnel under us.
  so.new_process_group = true;
  auto spawned = Subprocess::Spawn(std::move(so));
  if (!spawned.ok()) {
    ::rmdir(dir.c_str());
    return spawned.error().WithContext("start ssh for " + endpoint.ToString());
  }
  std::unique_ptr<SshTunnel> t(new SshTunnel(dir, std::move(spawned).value()));
  // From here on ~SshTunnel cleans up (kill, reap, remove the directory).

  std::string what = "ssh tunnel to " + endpoint.ToString();
  auto deadline = DeadlineAfter(options.connect_timeout + std::chrono::seconds(15));
  std::string early_stderr;
  UniqueFd& err_fd = t->process_.stderr_fd();
  ::fcntl(err_fd.get(), F_SETFL, ::fcntl(err_fd.get(), F_GETFL) | O_NONBLOCK);
  for (;;) {
    if (ConnectUnix(socket, DeadlineAfter(std::chrono::seconds(1))).ok()) break;
    auto exited = t->process_.TryWait();
    if (exited.ok() && exited->has_value()) {
      // Collect what ssh said before it went (the pipe is at EOF or holds the last words).
      char buf[4096];
      ssize_t n;
      while ((n = ::read(err_fd.get(), buf, sizeof buf)) > 0) {
        AppendTail(early_stderr, buf, static_cast<std::size_t>(n));
      }
      std::string said = Trim(early_stderr);
      return Error::Unavailable(what + ": ssh exited (" + (*exited)->ToString() +
                                ") before the tunnel came up" + (said.empty() ? "" : ": " + said));
    }
    if (Clock::now() >= deadline) {
      return Error::Unavailable(what + ": the forwarded socket did not come up in time" +
                                (early_stderr.empty() ? "" : "; ssh said: " + Trim(early_stderr)));
    }
    // Wait for ssh to say something (or exit, which closes the pipe), at most 20 ms.
    pollfd p{err_fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 20) > 0) {
      char buf[4096];
      ssize_t n = ::read(err_fd.get(), buf, sizeof buf);
      if (n > 0) {
        AppendTail(early_stderr, buf, static_cast<std::size_t>(n));
      } else if (n == 0) {
        (void)t->process_.WaitFor(std::chrono::milliseconds(20));  // ssh is exiting
      }
    }
  }
  {
    std::lock_guard lock(t->mu_);
    t->stderr_tail_ = std::move(early_stderr);
  }
  int sp[2];
  if (::pipe2(sp, O_CLOEXEC) != 0) return Error::FromErrno("pipe2", errno);
  t->stop_read_.reset(sp[0]);
  t->stop_write_.reset(sp[1]);
  t->drain_thread_ = std::thread([p = t.get()] { p->Drain(); });
  return t;
}

SshTunnel::SshTunnel(std::string dir, Subprocess process)
    : dir_(std::move(dir)), socket_path_(dir_ + "/docker.sock"), process_(std::move(process)) {}

SshTunnel::~SshTunnel() {
  process_.stdin_fd().reset();
  (void)process_.Kill(SIGKILL);
  (void)process_.Wait();
  if (drain_thread_.joinable()) {
    stop_write_.reset();  // EOF on stop_read_ ends Drain()
    drain_thread_.join();
  }
  ::unlink(socket_path_.c_str());
  ::rmdir(dir_.c_str());
}

std::string SshTunnel::StderrTail() const {
  std::lock_guard lock(mu_);
  return Trim(stderr_tail_);
}

void SshTunnel::Drain() {
  int out = process_.stdout_fd().get();
  int err = process_.stderr_fd().get();
  char buf[4096];
  while (out >= 0 || err >= 0) {
    pollfd p[3] = {{stop_read_.get(), POLLIN, 0}, {out, POLLIN, 0}, {err, POLLIN, 0}};
    if (::poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[0].revents) return;
    for (int i = 1; i < 3; ++i) {
      if (!p[i].revents) continue;
      int& fd = i == 1 ? out : err;
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0 && i == 2) {
        std::lock_guard lock(mu_);
        AppendTail(stderr_tail_, buf, static_cast<std::size_t>(n));
      } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        fd = -1;  // poll ignores negative fds
      }
    }
  }
}

}  // namespace agvisor::http::internal
