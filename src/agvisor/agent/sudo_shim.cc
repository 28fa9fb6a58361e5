#include "agvisor/agent/sudo_shim.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "agvisor/agent/activity_socket.h"
#include "agvisor/agent/sudo.h"
#include "agvisor/agent/user.h"
#include "agvisor/base/fs.h"

extern char** environ;

namespace agvisor::agent {
namespace {

int g_broker_fd = -1;

// Async-signal-safe: one byte, the signal's number, for the broker to send on to the command.
void ForwardSignal(int sig) {
  const char byte = static_cast<char>(sig);
  const int saved = errno;
  (void)::send(g_broker_fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  errno = saved;
}

int Fail(const std::string& message) {
  const std::string line = "sudo: " + message + "\n";
  (void)::write(STDERR_FILENO, line.data(), line.size());
  return 1;
}

}  // namespace

Result<void> SendWithFds(int fd, std::string_view bytes, const std::vector<int>& fds) {
  constexpr std::size_t kMaxFds = 8;
  if (fds.size() > kMaxFds) return Error::InvalidArgument("SendWithFds: more than 8 fds");
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    iovec iov{const_cast<char*>(bytes.data() + sent), bytes.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
    if (sent == 0 && !fds.empty()) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
      std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
    }
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::FromErrno("sendmsg to the sudo broker", errno);
    sent += static_cast<std::size_t>(n);
  }
  return Ok();
}

Result<void> SendSudoRequest(int fd, const std::string& payload) {
  const auto length = EncodeSudoLength(static_cast<std::uint32_t>(payload.size()));
  return SendWithFds(fd, std::string(length.data(), length.size()) + payload,
                     {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO});
}

int RunSudo(const std::vector<std::string>& args, const std::string& socket_path) {
  auto options = ParseSudoCommandLine(args);
  if (!options.ok()) return Fail(options.error().message());
  if (options->help) {
    (void)::write(STDOUT_FILENO, SudoHelp().data(), SudoHelp().size());
    return 0;
  }
  // A closed stdio fd cannot be sent: /dev/null stands in for it.
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) (void)::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }
  const std::string passwd = ReadSmallFile("/etc/passwd", 16u << 20).value_or(std::string());
  std::string shell = RootShell(passwd);
  if (options->shell && !options->login) {
    if (const char* s = ::getenv("SHELL"); s && *s) shell = s;
  }
  std::vector<std::string> caller_env;
  for (char** e = environ; e && *e; ++e) caller_env.emplace_back(*e);
  const uid_t uid = ::getuid();
  auto caller = LookupUser(std::to_string(uid));
  SudoRequest request;
  request.argv = SudoCommandArgv(*options, shell);
  request.env = SudoEnvironment(
      *options, caller_env, shell,
      caller.ok() && !caller->name.empty() ? caller->name : std::to_string(uid), uid, ::getgid());
  if (options->login) {
    request.cwd = "/root";
  } else {
    char cwd[4096];
    request.cwd = ::getcwd(cwd, sizeof cwd) ? cwd : "/";
  }
  const std::string payload = EncodeSudoRequest(request);
  if (payload.size() > kSudoMaxPayloadBytes) {
    return Fail("the command and environment are " + std::to_string(payload.size()) +
                " bytes, more than the " + std::to_string(kSudoMaxPayloadBytes) + " allowed");
  }
  auto conn = ConnectActivitySocket(socket_path);
  if (!conn.ok()) {
    return Fail("no sudo broker in this sandbox (" + conn.error().message() +
                "): passwordless sudo works only in sandboxes created with allow_setuid "
                "(E2B's, or `agvisor create --allow-setuid`)");
  }
  if (auto sent = SendSudoRequest(conn->get(), payload); !sent.ok()) {
    return Fail(sent.error().message());
  }
  g_broker_fd = conn->get();
  struct sigaction forward {};
  forward.sa_handler = ForwardSignal;
  sigemptyset(&forward.sa_mask);
  forward.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &forward, nullptr);
  std::array<char, 2> reply{};
  std::size_t got = 0;
  while (got < reply.size()) {
    ssize_t n = ::recv(conn->get(), reply.data() + got, reply.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  auto outcome = got == reply.size() ? DecodeSudoOutcome(reply) : std::nullopt;
  if (!outcome) return Fail("the sudo broker ended the request without an exit status (busy?)");
  return SudoExitCode(*outcome);
}

}  // namespace agvisor::agent
