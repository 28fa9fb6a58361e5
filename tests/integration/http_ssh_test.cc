// Integration tests of http::Client against the real local dockerd, directly and through a real
// sshd on loopback (ssh://). The sshd runs with its own config, host key and client key, all in a
// temp dir made by the test. A missing dockerd or sshd is a failure, never a skip.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/http/client.h"
#include "tests/integration/sshd.h"

namespace agvisor::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Polls `pred` every 10 ms until it holds or `timeout` passes.
template <class Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = 10s) {
  auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Pids of the processes named `comm` whose parent is `ppid` (zombies excluded).
std::vector<pid_t> Children(pid_t ppid, const std::string& comm) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    std::getline(f, stat);
    auto open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t parent = 0;
    rest >> state >> parent;
    if (parent == ppid && state != 'Z' && stat.substr(open + 1, close - open - 1) == comm) {
      out.push_back(pid);
    }
  }
  ::closedir(d);
  return out;
}

bool Alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  auto close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

std::vector<std::string> TmpEntries(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = ::opendir("/tmp");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
  }
  ::closedir(d);
  return out;
}

std::size_t CountTmpEntries(const std::string& prefix) {
  std::size_t n = 0;
  DIR* d = ::opendir("/tmp");
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0;
  ::closedir(d);
  return n;
}

// A real sshd on 127.0.0.1 (tests/integration/sshd.h), for this test binary only.
class SshdFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = testing::TestSshd::Start();
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    sshd_ = std::move(s).value().release();
    port_ = sshd_->port();
  }

  static void TearDownTestSuite() {
    delete sshd_;
    sshd_ = nullptr;
  }

  static ClientOptions SshOptions() {
    ClientOptions o;
    o.ssh_args = sshd_->ssh_args();
    return o;
  }
  static std::string SshUrl() { return sshd_->url(); }

  static std::uint16_t port_;
  static testing::TestSshd* sshd_;
};
std::uint16_t SshdFixture::port_ = 0;
testing::TestSshd* SshdFixture::sshd_ = nullptr;

Request Get(std::string target) {
  Request r;
  r.target = std::move(target);
  return r;
}

TEST(LocalDockerTest, PingAnswersOk) {
  auto ep = ParseEndpoint("unix:///var/run/docker.sock");
  ASSERT_TRUE(ep.ok());
  auto client = Client::Connect(*ep);
  ASSERT_TRUE(client.ok()) << client.error().ToString();
  auto res = (*client)->Send(Get("/_ping"));
  ASSERT_TRUE(res.ok()) << res.error().ToString() << " (scripts/setup-host starts dockerd)";
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "OK");
  EXPECT_FALSE(res->header("Api-Version").empty());
}

TEST_F(SshdFixture, RequestsGoThroughOneSshProcess) {
  std::size_t tmp_before = CountTmpEntries("agvisor-ssh-");
  ASSERT_TRUE(Children(::getpid(), "ssh").empty());
  {
    auto ep = ParseEndpoint(SshUrl());
    ASSERT_TRUE(ep.ok()) << ep.error().ToString();
    auto client = Client::Connect(*ep, SshOptions());
    ASSERT_TRUE(client.ok()) << client.error().ToString();
    auto& c = *client;
    EXPECT_EQ(CountTmpEntries("agvisor-ssh-"), tmp_before + 1);

    auto ping = c->Send(Get("/_ping"));
    ASSERT_TRUE(ping.ok()) << ping.error().ToString();
    EXPECT_EQ(ping->status, 200);
    EXPECT_EQ(ping->body, "OK");

    auto version = c->Send(Get("/version"));
    ASSERT_TRUE(version.ok()) << version.error().ToString();
    EXPECT_EQ(version->status, 200);
    EXPECT_EQ(version->header("Content-Type"), "application/json");
    EXPECT_NE(version->body.find("\"ApiVersion\":\""), std::string::npos) << version->body;

    std::string streamed;
    auto s = c->SendStreamingResponse(Get("/version"), [&](std::string_view piece) {
      streamed.append(piece);
      return Ok();
    });
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    EXPECT_NE(streamed.find("\"ApiVersion\":\""), std::string::npos);

    for (int i = 0; i < 20; ++i) {
      auto r = c->Send(Get("/_ping"));
      ASSERT_TRUE(r.ok()) << i << ": " << r.error().ToString();
      EXPECT_EQ(r->body, "OK");
    }
    auto ssh = Children(::getpid(), "ssh");
    EXPECT_EQ(ssh.size(), 1u) << "one ssh process per Client, shared by every request";
  }
  // Destroying the Client killed and reaped ssh and removed its directory.
  EXPECT_TRUE(Children(::getpid(), "ssh").empty());
  EXPECT_EQ(CountTmpEntries("agvisor-ssh-"), tmp_before);
}

TEST_F(SshdFixture, SshDiesWhenItsClientIsKilled) {
  auto dirs_before = TmpEntries("agvisor-ssh-");
  int pfd[2];
  ASSERT_EQ(::pipe2(pfd, O_CLOEXEC), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The client process: bring the tunnel up, report ssh's pid, wait to be SIGKILLed.
    ::close(pfd[0]);
    auto client = Client::Connect(*ParseEndpoint(SshUrl()), SshOptions());
    pid_t ssh = 0;
    if (client.ok() && (*client)->Send(Get("/_ping")).ok()) {
      auto kids = Children(::getpid(), "ssh");
      if (kids.size() == 1) ssh = kids[0];
    }
    (void)!::write(pfd[1], &ssh, sizeof ssh);
    for (;;) ::pause();
  }
  ::close(pfd[1]);
  pid_t ssh = 0;
  ASSERT_EQ(::read(pfd[0], &ssh, sizeof ssh), static_cast<ssize_t>(sizeof ssh));
  ::close(pfd[0]);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_GT(ssh, 0) << "the client process could not bring the tunnel up";
  // Its stdin pipe closed with the client: the remote `cat` ends and ssh exits on its own.
  EXPECT_TRUE(Eventually([&] { return !Alive(ssh); }, 15s))
      << "ssh " << ssh << " outlived its client";
  if (Alive(ssh)) ::kill(ssh, SIGKILL);
  // A SIGKILLed client cannot remove its socket directory; the test does.
  for (const auto& d : TmpEntries("agvisor-ssh-")) {
    if (std::find(dirs_before.begin(), dirs_before.end(), d) == dirs_before.end()) {
      (void)RunCommand({"rm", "-rf", "/tmp/" + d});
    }
  }
}

// As above with a forwarded connection the remote end never closes, as Docker holds an attach
// to a running sandbox: ssh alone would wait for it to close; the tunnel's remote command ends
// the session instead.
TEST_F(SshdFixture, SshDiesWhenItsClientIsKilledWhileTheRemoteHoldsAStreamOpen) {
  auto dirs_before = TmpEntries("agvisor-ssh-");
  char dir_template[] = "/tmp/agvisor-holder-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string path = dir + "/holder.sock";
  int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  // The remote end: accepts and keeps every connection open, whatever the other side does.
  std::thread([listener] {
    for (;;) {
      int fd = ::accept(listener, nullptr, nullptr);
      if (fd < 0) return;
    }
  }).detach();
  int pfd[2];
  ASSERT_EQ(::pipe2(pfd, O_CLOEXEC), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pfd[0]);
    auto client = Client::Connect(*ParseEndpoint(SshUrl() + path), SshOptions());
    pid_t ssh = 0;
    if (client.ok()) {
      auto kids = Children(::getpid(), "ssh");
      if (kids.size() == 1) ssh = kids[0];
      // A request the remote end never answers: its connection stays open through the tunnel.
      std::thread([c = client->get()] { (void)c->Send(Get("/_ping")); }).detach();
      std::this_thread::sleep_for(1s);
    }
    (void)!::write(pfd[1], &ssh, sizeof ssh);
    for (;;) ::pause();
  }
  ::close(pfd[1]);
  pid_t ssh = 0;
  ASSERT_EQ(::read(pfd[0], &ssh, sizeof ssh), static_cast<ssize_t>(sizeof ssh));
  ::close(pfd[0]);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_GT(ssh, 0) << "the client process could not bring the tunnel up";
  EXPECT_TRUE(Eventually([&] { return !Alive(ssh); }, 15s))
      << "ssh " << ssh << " outlived its client while the remote end held a stream open";
  if (Alive(ssh)) ::kill(ssh, SIGKILL);
  ::shutdown(listener, SHUT_RDWR);
  (void)RunCommand({"rm", "-rf", dir});
  for (const auto& d : TmpEntries("agvisor-ssh-")) {  // the SIGKILLed client's socket directory
    if (std::find(dirs_before.begin(), dirs_before.end(), d) == dirs_before.end()) {
      (void)RunCommand({"rm", "-rf", "/tmp/" + d});
    }
  }
}

TEST_F(SshdFixture, ConnectFailureCarriesSshsMessage) {
  auto ep = ParseEndpoint("ssh://root@127.0.0.1:" +
                          std::to_string(testing::TestSshd::FreeLoopbackPort()));
  ASSERT_TRUE(ep.ok());
  auto start = Clock::now();
  auto client = Client::Connect(*ep, SshOptions());
  // A refused ssh connection fails at once, not at a timeout: 0.35 s at most loaded, 28x.
  EXPECT_LT(Clock::now() - start, 10s);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(client.error().message().find("Connection refused"), std::string::npos)
      << client.error().message();
  EXPECT_TRUE(Children(::getpid(), "ssh").empty());
}

TEST_F(SshdFixture, MissingRemoteSocketIsUnavailable) {
  auto ep = ParseEndpoint(SshUrl() + "/run/agvisor-no-such.sock");
  ASSERT_TRUE(ep.ok()) << ep.error().ToString();
  auto client = Client::Connect(*ep, SshOptions());
  ASSERT_TRUE(client.ok()) << client.error().ToString();  // the tunnel itself comes up
  Request r = Get("/_ping");
  r.timeout = 10s;
  auto res = (*client)->Send(r);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kUnavailable) << res.error().ToString();
  EXPECT_NE(res.error().message().find("/run/agvisor-no-such.sock"), std::string::npos)
      << res.error().message();
}

}  // namespace
}  // namespace agvisor::http
