// SshTunnel: the ssh:// transport. ONE `ssh` process forwards a private local unix socket to the
// remote Docker socket; the HTTP client then connects to that local socket for every request.
//
// Private to http/ (used by client.cc). The command line is
//   ssh -o BatchMode=yes -o ExitOnForwardFailure=yes -o StreamLocalBindUnlink=yes -T [-p PORT]
//       [ssh_args...] -o ConnectTimeout=S -L LOCAL:REMOTE -- [USER@]HOST
//       'cat >/dev/null; kill $PPID'
// LOCAL lives in a fresh mkdtemp directory (mode 0700, so no other user can reach the remote
// daemon through it). ssh's stdin is a pipe whose write end only we hold, and the remote command
// runs until its stdin ends: when this process dies, even by SIGKILL, the pipe closes, the remote
// `cat` exits and the remote shell ends its sshd session process, so the connection drops and ssh
// exits even while Docker holds forwarded streams open (an attach to a running sandbox: ssh
// alone would wait for them). The destructor does not wait for that: it kills ssh, reaps it and
// removes the directory.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "agvisor/base/error.h"
#include "agvisor/base/subprocess.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/http/client.h"

namespace agvisor::http::internal {

// The tunnel's remote command (above), run by the remote user's shell.
inline constexpr std::string_view kTunnelRemoteCommand = "cat >/dev/null; kill $PPID";

class SshTunnel {
 public:
  // Starts ssh and returns once the local socket accepts connections.
  // Errors: kUnavailable (ssh exited first: carries ssh's stderr; or the socket did not come up
  // within connect_timeout + 15 s), kNotFound (no `ssh` program), kInternal/kResourceExhausted
  // (temp dir, pipes).
  static Result<std::unique_ptr<SshTunnel>> Start(const Endpoint& endpoint,
                                                  const ClientOptions& options);
  ~SshTunnel();
  SshTunnel(const SshTunnel&) = delete;
  SshTunnel& operator=(const SshTunnel&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  pid_t pid() const { return process_.pid(); }
  // The last few KB ssh wrote to stderr (trimmed), for error messages; "" if none.
  std::string StderrTail() const;

 private:
  SshTunnel(std::string dir, Subprocess process);
  void Drain();  // runs on drain_thread_: keeps ssh's output pipes from filling up

  std::string dir_;
  std::string socket_path_;
  Subprocess process_;
  UniqueFd stop_read_, stop_write_;  // self-pipe that ends Drain()
  mutable std::mutex mu_;
  std::string stderr_tail_;  // guarded by mu_
  std::thread drain_thread_;
};

// The argv used for `endpoint` (exposed for unit tests).
std::vector<std::string> SshCommandLine(const Endpoint& endpoint, const ClientOptions& options,
                                        const std::string& local_socket);

}  // namespace agvisor::http::internal
