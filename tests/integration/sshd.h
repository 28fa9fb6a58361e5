// A real sshd on 127.0.0.1, for integration tests of ssh:// Docker hosts: its own config, host
// key and client key in a temp dir made here. Root logs in with the client key only.
// A missing /usr/sbin/sshd is a test failure (apt-get install openssh-server), never a skip.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agvisor/base/subprocess.h"

namespace agvisor::testing {

class TestSshd {
 public:
  // Starts sshd and waits until it accepts connections. Errors: kInternal with the reason.
  static Result<std::unique_ptr<TestSshd>> Start() {
    auto s = std::unique_ptr<TestSshd>(new TestSshd());
    char templ[] = "/tmp/agvisor-sshd-test-XXXXXX";
    if (::mkdtemp(templ) == nullptr) return Error::FromErrno("mkdtemp", errno);
    s->dir_ = templ;
    const std::string& d = s->dir_;
    for (const char* key : {"host_key", "client_key"}) {
      auto r = RunCommand({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "agvisor-test",
                           "-f", d + "/" + key});
      if (!r.ok() || !r->status.success()) return Error::Internal("ssh-keygen failed");
    }
    AGVISOR_RETURN_IF_ERROR(RunCommand({"cp", d + "/client_key.pub", d + "/authorized_keys"}));
    s->port_ = FreeLoopbackPort();
    std::ofstream(d + "/sshd_config") << "Port " << s->port_ << "\n"
                                      << "ListenAddress 127.0.0.1\n"
                                      << "HostKey " << d << "/host_key\n"
                                      << "PidFile " << d << "/sshd.pid\n"
                                      << "AuthorizedKeysFile " << d << "/authorized_keys\n"
                                      << "StrictModes no\nUsePAM no\n"
                                      << "PermitRootLogin prohibit-password\n"
                                      << "PasswordAuthentication no\n"
                                      << "KbdInteractiveAuthentication no\n"
                                      << "AllowStreamLocalForwarding yes\n"
                                      << "MaxStartups 100\nMaxSessions 100\n"
                                      << "LogLevel ERROR\n";
    ::mkdir("/run/sshd", 0755);  // sshd's privilege separation directory
    SubprocessOptions o;
    // sshd re-executes itself and insists on an absolute path.
    o.argv = {"/usr/sbin/sshd", "-D", "-e", "-f", d + "/sshd_config"};
    auto p = Subprocess::Spawn(std::move(o));
    if (!p.ok()) return p.error().WithContext("start sshd (apt-get install openssh-server)");
    s->sshd_ = std::make_unique<Subprocess>(std::move(p).value());
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!TcpAccepts(s->port_)) {
      auto st = s->sshd_->TryWait();
      if (!st.ok() || st->has_value()) return Error::Internal("sshd exited; see its stderr");
      if (std::chrono::steady_clock::now() > deadline) {
        return Error::Timeout("sshd did not listen within 10 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return s;
  }

  ~TestSshd() {
    sshd_.reset();  // SIGKILL + reap
    if (!dir_.empty()) (void)RunCommand({"rm", "-rf", dir_});
  }

  std::uint16_t port() const { return port_; }
  const std::string& dir() const { return dir_; }
  std::string url() const { return "ssh://root@127.0.0.1:" + std::to_string(port_); }
  // ssh arguments that log in with the test key and trust the test host key.
  std::vector<std::string> ssh_args() const {
    return {"-i", dir_ + "/client_key",       "-o", "UserKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR"};
  }

  static std::uint16_t FreeLoopbackPort() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
  }

  static bool TcpAccepts(std::uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  }

 private:
  TestSshd() = default;
  std::string dir_;
  std::uint16_t port_ = 0;
  std::unique_ptr<Subprocess> sshd_;
};

}  // namespace agvisor::testing
