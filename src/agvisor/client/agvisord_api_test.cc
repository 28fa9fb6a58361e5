// Where agvisord is reached (pure parsing): the ssh:// form and the agvisord of a Docker host;
// to whom the token goes: a unix socket served by a process of another user (a real one,
// forked and made `nobody`) never gets it; and RunToEnd's result from a scripted Command: what
// Sandbox::Exec keeps (the cap, the dropped counts, the tails, which path ran).
#include "agvisor/client/agvisord_api.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "agvisor/base/unique_fd.h"
#include "agvisor/client/agvisord.h"

namespace agvisor::client {
namespace {

// A command that sends `out` and `err` in pieces of `piece` bytes, then ends as `exit` says.
class ScriptedCommand final : public Command {
 public:
  ScriptedCommand(std::string out, std::string err, std::size_t piece, ProcessExit exit)
      : out_(std::move(out)), err_(std::move(err)), piece_(piece), exit_(exit) {}
  Result<void> Write(std::string_view) override { return Ok(); }
  Result<void> CloseStdin() override { return Ok(); }
  Result<void> Resize(std::uint16_t, std::uint16_t) override { return Ok(); }
  Result<void> Signal(int) override { return Ok(); }
  Result<ProcessExit> Wait(const channel::ExecCallbacks& cb) override {
    for (std::size_t at = 0; at < std::max(out_.size(), err_.size()); at += piece_) {
      if (at < out_.size()) cb.on_stdout(std::string_view(out_).substr(at, piece_));
      if (at < err_.size()) cb.on_stderr(std::string_view(err_).substr(at, piece_));
    }
    return exit_;
  }
  void Close() override {}
  std::uint32_t pid() const override { return 7; }

 private:
  std::string out_, err_;
  std::size_t piece_;
  ProcessExit exit_;
};

TEST(RunToEndTest, CollectedOutputStopsAtTheCapAndCountsTheRest) {
  ScriptedCommand c(std::string(10000, 'o'), "err", 999, {.exit_code = 3, .prestarted = true});
  auto r = RunToEnd(c, {.max_output_bytes = 4096});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, std::string(4096, 'o'));
  EXPECT_EQ(r->stdout_dropped, 10000u - 4096u);
  EXPECT_EQ(r->err, "err");
  EXPECT_EQ(r->stderr_dropped, 0u);
  EXPECT_TRUE(r->truncated);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_TRUE(r->prestarted);
}

TEST(RunToEndTest, StreamedOutputGoesToTheCallbacksAndKeepsTheTail) {
  const std::size_t n = 3 * kStreamTailBytes;
  std::string out(n, 'a');
  out.replace(n - 3, 3, "end");
  ScriptedCommand c(out, "", 4096, {.exit_code = 0});
  std::size_t seen = 0;
  auto r = RunToEnd(
      c, {.on_stdout = [&](std::string_view b) { seen += b.size(); }, .max_output_bytes = 10});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(seen, n);
  ASSERT_EQ(r->out.size(), kStreamTailBytes);  // the tail, not the cap
  EXPECT_EQ(r->out.substr(r->out.size() - 3), "end");
  EXPECT_EQ(r->stdout_dropped, 0u);
  EXPECT_TRUE(r->truncated);
  EXPECT_FALSE(r->prestarted);
}

TEST(ParseServerAddressTest, SshReachesAgvisordsSocketOnThatHost) {
  auto ep = ParseServerAddress("ssh://root@build1:2222");
  ASSERT_TRUE(ep.ok()) << ep.error().ToString();
  EXPECT_EQ(ep->kind, http::Endpoint::Kind::kSsh);
  EXPECT_EQ(ep->user, "root");
  EXPECT_EQ(ep->host, "build1");
  EXPECT_EQ(ep->port, 2222);
  EXPECT_EQ(ep->path, "/run/agvisord.sock");  // root's default there, not Docker's socket
  EXPECT_EQ(ServerAddressString(*ep), "ssh://root@build1:2222/run/agvisord.sock");

  auto with_path = ParseServerAddress("ssh://build1/tmp/a/agvisord.sock");
  ASSERT_TRUE(with_path.ok()) << with_path.error().ToString();
  EXPECT_EQ(with_path->path, "/tmp/a/agvisord.sock");
  EXPECT_EQ(ServerAddressString(*with_path), "ssh://build1/tmp/a/agvisord.sock");
}

TEST(ParseServerAddressTest, MalformedSshAddressesAreRefusedNamingTheForms) {
  for (const char* bad :
       {"ssh://-oProxyCommand=x", "ssh://", "ssh://h/relative:path", "ssh://h/with space"}) {
    auto ep = ParseServerAddress(bad);
    ASSERT_FALSE(ep.ok()) << bad;
    EXPECT_EQ(ep.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(ep.error().message().find("ssh://USER@HOST"), std::string::npos)
        << ep.error().message();
  }
}

TEST(EgressAgvisordAddressTest, AnSshDockerHostsAgvisordRunsOnThatHost) {
  auto a = EgressAgvisordAddress("ssh://root@build1:2222/var/run/docker.sock");
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(*a, "ssh://root@build1:2222");
  EXPECT_EQ(ParseServerAddress(*a)->path, "/run/agvisord.sock");
  auto tcp = EgressAgvisordAddress("tcp://127.0.0.1:2375");
  ASSERT_FALSE(tcp.ok());
  EXPECT_EQ(tcp.error().code(), ErrorCode::kUnsupported);
  auto local = EgressAgvisordAddress("unix:///var/run/docker.sock");
  if (local.ok()) {
    EXPECT_TRUE(local->starts_with("unix:/")) << *local;
  }
}

constexpr char kSecret[] = "s3cret-agvisord-token";

// A stand-in agvisord on a unix socket, served by a child process running as `uid`: it answers
// every request with 200 and an empty sandbox list, and writes 'T' to a pipe each time a request
// carried kSecret.
class PeerServer {
 public:
  explicit PeerServer(uid_t uid) {
    char dir[] = "/tmp/agvisor-peer-test-XXXXXX";
    EXPECT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/agvisord.sock";
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path_.c_str());
    // Bound by us (root): the socket file is root's; only the serving process is another user's.
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::chmod(path_.c_str(), 0666);
    int report[2], ready[2];
    EXPECT_EQ(::pipe2(report, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(report[0]);
      if (::setgid(uid == 0 ? 0 : 65534) != 0 || ::setuid(uid) != 0) ::_exit(2);
      // SO_PEERCRED names who called listen(): the uid set just above.
      if (::listen(fd.get(), 8) != 0) ::_exit(3);
      ::close(ready[1]);  // listening: the parent's read ends
      for (;;) {
        int c = ::accept(fd.get(), nullptr, nullptr);
        if (c < 0) ::_exit(4);
        char buf[16384];
        std::size_t got = 0;
        while (got < sizeof buf && !::memmem(buf, got, "\r\n\r\n", 4)) {
          ssize_t n = ::read(c, buf + got, sizeof buf - got);
          if (n <= 0) break;
          got += static_cast<std::size_t>(n);
        }
        if (::memmem(buf, got, kSecret, sizeof kSecret - 1)) (void)!::write(report[1], "T", 1);
        static const char kAnswer[] =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n"
            "Connection: close\r\n\r\n{\"sandboxes\":[]}";
        (void)!::send(c, kAnswer, sizeof kAnswer - 1, MSG_NOSIGNAL);
        ::close(c);
      }
    }
    ::close(report[1]);
    ::close(ready[1]);
    char c;
    EXPECT_EQ(::read(ready[0], &c, 1), 0);  // end of file: the child listens (or died)
    ::close(ready[0]);
    report_ = UniqueFd(report[0]);
  }
  ~PeerServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string address() const { return "unix:" + path_; }
  // Whether a request carried the token (waits a moment for the child's report).
  bool GotToken() const {
    pollfd p{report_.get(), POLLIN, 0};
    return ::poll(&p, 1, 200) == 1 && (p.revents & POLLIN);
  }

 private:
  std::string dir_, path_;
  pid_t pid_ = -1;
  UniqueFd report_;
};

TEST(AgvisordPeerTest, TheTokenIsNotSentToASocketServedByAnotherUser) {
  ASSERT_EQ(::geteuid(), 0u) << "the test makes a server of another user: run it as root";
  PeerServer nobody(65534);
  auto place = Agvisord(nobody.address(), "", kSecret);
  if (place.ok()) (void)(*place)->List();  // would send the token
  EXPECT_FALSE(nobody.GotToken()) << "the token went to uid 65534's socket";
  ASSERT_FALSE(place.ok());
  EXPECT_EQ(place.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(place.error().message(), ::testing::HasSubstr("uid 65534, neither root nor you"));
}

TEST(AgvisordPeerTest, RootsOrOwnSocketGetsTheToken) {
  PeerServer root(0);
  auto place = Agvisord(root.address(), "", kSecret);
  ASSERT_TRUE(place.ok()) << place.error().ToString();
  auto list = (*place)->List();
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  EXPECT_TRUE(root.GotToken());
}

}  // namespace
}  // namespace agvisor::client
