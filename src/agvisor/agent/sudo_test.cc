#include "agvisor/agent/sudo.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <thread>

#include "agvisor/agent/sudo_broker.h"
#include "agvisor/agent/sudo_shim.h"

namespace agvisor::agent {
namespace {

using Strings = std::vector<std::string>;

std::string Payload(const char* bytes, std::size_t size) { return std::string(bytes, size); }

// The broker's 2-byte outcome on `fd` as the shim's exit code; nullopt when it closed first.
std::optional<int> ReadOutcome(int fd) {
  char reply[2];
  std::size_t got = 0;
  for (ssize_t n; got < 2 && (n = ::read(fd, reply + got, 2 - got)) > 0;) got += n;
  if (got != 2) return std::nullopt;
  auto outcome = DecodeSudoOutcome({reply[0], reply[1]});
  return outcome ? std::optional<int>(SudoExitCode(*outcome)) : std::nullopt;
}

TEST(SudoWireTest, RequestRoundTrips) {
  SudoRequest r{.argv = {"id", "-u", ""}, .env = {"PATH=/bin", "EMPTY="}, .cwd = "/home/user"};
  auto d = DecodeSudoRequest(EncodeSudoRequest(r));
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  EXPECT_EQ(d->argv, r.argv);
  EXPECT_EQ(d->env, r.env);
  EXPECT_EQ(d->cwd, r.cwd);
}

TEST(SudoWireTest, HostileRequestsAreRefusedWithWhy) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "NUL"},
      {Payload("/\0aid", 4), "NUL"},
      {Payload("/\0", 2), "no command"},
      {Payload("relative\0aid\0", 13), "not absolute"},
      {Payload("/\0a\0", 4), "no command"},
      {Payload("/\0xid\0", 6), "neither"},
      {Payload("/\0aid\0\0", 7), "neither"},
      {Payload("/\0aid\0eNOEQUALS\0", 16), "NAME=value"},
      {Payload("/\0aid\0e=v\0", 10), "NAME=value"},
      {std::string(kSudoMaxPayloadBytes + 1, '\0'), "more than"},
  };
  for (const auto& [bytes, says] : cases) {
    auto d = DecodeSudoRequest(bytes);
    ASSERT_FALSE(d.ok()) << says;
    EXPECT_EQ(d.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(d.error().message().find(says), std::string::npos) << d.error().message();
  }
  std::string many = Payload("/\0", 2);
  for (std::size_t i = 0; i <= kSudoMaxStrings; ++i) many += Payload("ax\0", 3);
  auto d = DecodeSudoRequest(many);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("more than 16384"), std::string::npos);
}

TEST(SudoWireTest, LengthIsBounded) {
  EXPECT_EQ(*DecodeSudoLength(EncodeSudoLength(1234)), 1234u);
  EXPECT_FALSE(DecodeSudoLength(EncodeSudoLength(0)).ok());
  EXPECT_FALSE(DecodeSudoLength(EncodeSudoLength(kSudoMaxPayloadBytes + 1)).ok());
  EXPECT_FALSE(DecodeSudoLength({'\xff', '\xff', '\xff', '\xff'}).ok());
}

TEST(SudoWireTest, OutcomeAndExitCode) {
  auto x = DecodeSudoOutcome(EncodeSudoOutcome({.signaled = false, .value = 200}));
  ASSERT_TRUE(x);
  EXPECT_EQ(SudoExitCode(*x), 200);
  auto s = DecodeSudoOutcome(EncodeSudoOutcome({.signaled = true, .value = SIGTERM}));
  ASSERT_TRUE(s);
  EXPECT_EQ(SudoExitCode(*s), 128 + SIGTERM);
  EXPECT_FALSE(DecodeSudoOutcome({'?', '\0'}));
  EXPECT_FALSE(DecodeSudoOutcome({'s', '\0'}));
}

TEST(SudoCommandLineTest, TakesTheOptionsAgentsUse) {
  auto o = ParseSudoCommandLine({"-n", "-E", "-H", "-u", "root", "--", "A=1", "id", "-u"});
  ASSERT_TRUE(o.ok()) << o.error().ToString();
  EXPECT_TRUE(o->preserve_env);
  EXPECT_EQ(o->assignments, Strings{"A=1"});
  EXPECT_EQ(o->command, (Strings{"id", "-u"}));
  for (const Strings& args :
       {Strings{"-nu0", "id"}, Strings{"-u#0", "id"}, Strings{"--user=root", "id"},
        Strings{"-nE", "id"}, Strings{"--non-interactive", "id"}}) {
    EXPECT_TRUE(ParseSudoCommandLine(args).ok()) << args[0];
  }
  // Options after the command are the command's.
  o = ParseSudoCommandLine({"ls", "-u", "bob"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->command, (Strings{"ls", "-u", "bob"}));
  o = ParseSudoCommandLine({"-i"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(SudoCommandArgv(*o, "/bin/bash"), (Strings{"/bin/bash", "-l"}));
  o = ParseSudoCommandLine({"-s", "echo", "a b;c"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(SudoCommandArgv(*o, "/bin/sh"), (Strings{"/bin/sh", "-c", "echo a\\ b\\;c"}));
}

TEST(SudoCommandLineTest, RefusesWhatItDoesNotDoWithWhy) {
  const std::pair<Strings, std::string> cases[] = {
      {{"-u", "bob", "id"}, "root only"},    {{"-u"}, "needs a user"},
      {{"-k", "id"}, "unknown option '-k'"}, {{"--askpass", "id"}, "unknown option '--askpass'"},
      {{"-i", "-s"}, "cannot be combined"},  {{}, "no command"},
      {{"-n", "A=1"}, "no command"},
  };
  for (const auto& [args, says] : cases) {
    auto o = ParseSudoCommandLine(args);
    ASSERT_FALSE(o.ok()) << says;
    EXPECT_NE(o.error().message().find(says), std::string::npos) << o.error().message();
  }
}

TEST(SudoCommandLineTest, EnvironmentIsASafeSetUnlessPreserved) {
  const Strings caller = {"PATH=/home/user/bin", "HOME=/home/user", "TERM=xterm", "SECRET=x",
                          "LC_ALL=C"};
  auto o = ParseSudoCommandLine({"A=1", "env"});
  ASSERT_TRUE(o.ok());
  auto env = SudoEnvironment(*o, caller, "/bin/bash", "user", 1000, 1000);
  auto has = [&](const std::string& kv) {
    return std::find(env.begin(), env.end(), kv) != env.end();
  };
  EXPECT_TRUE(has("HOME=/root"));
  EXPECT_TRUE(has("TERM=xterm"));
  EXPECT_TRUE(has("LC_ALL=C"));
  EXPECT_TRUE(has("A=1"));
  EXPECT_TRUE(has("SUDO_USER=user"));
  EXPECT_TRUE(has("SUDO_UID=1000"));
  EXPECT_FALSE(has("SECRET=x"));
  EXPECT_FALSE(has("PATH=/home/user/bin"));
  o = ParseSudoCommandLine({"-E", "env"});
  env = SudoEnvironment(*o, caller, "/bin/bash", "user", 1000, 1000);
  EXPECT_TRUE(has("SECRET=x"));
  EXPECT_TRUE(has("PATH=/home/user/bin"));
  EXPECT_TRUE(has("HOME=/home/user"));
}

TEST(SudoCommandLineTest, RootShellFromPasswd) {
  EXPECT_EQ(RootShell("daemon:x:1:1::/:/usr/sbin/nologin\nroot:x:0:0:root:/root:/bin/bash\n"),
            "/bin/bash");
  EXPECT_EQ(RootShell("garbage"), "/bin/sh");
}

// The broker's side of a connection, fed by hostile clients: each ends promptly with the
// connection closed (or an outcome of 1), never a hang or a crash.
TEST(SudoBrokerTest, HostileClientsEndTheirOwnRequestOnly) {
  auto serve = [](auto client) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    std::thread broker([fd = sv[0]] { ServeSudoConnection(UniqueFd(fd)); });
    client(sv[1]);
    ::shutdown(sv[1], SHUT_WR);
    const std::optional<int> code = ReadOutcome(sv[1]);
    broker.join();
    ::close(sv[1]);
    EXPECT_TRUE(!code || *code == 1) << *code;
  };
  serve([](int) {});                                                // closes at once
  serve([](int fd) { (void)::write(fd, "\x7f\xff\xff\xff", 4); });  // huge length, no fds
  serve([](int fd) { (void)::write(fd, "garbage garbage", 15); });  // garbage, no fds
  serve([](int fd) { (void)::write(fd, "\0\0", 2); });              // half a header
  // Wrong fd counts, and a bad request with the fds: the reason goes to the stderr sent.
  int err_pipe[2];
  ASSERT_EQ(::pipe2(err_pipe, O_CLOEXEC | O_NONBLOCK), 0);
  const auto header = EncodeSudoLength(4);
  const std::string bad = std::string(header.data(), 4) + Payload("/\0x\0", 4);
  serve([&](int fd) { (void)SendWithFds(fd, bad, {0, 1}); });
  serve([&](int fd) { (void)SendWithFds(fd, bad, {0, 1, err_pipe[1], 0}); });
  serve([&](int fd) { (void)SendWithFds(fd, bad, {0, 1, err_pipe[1]}); });
  char said[256] = {};
  ASSERT_GT(::read(err_pipe[0], said, sizeof said - 1), 0);
  EXPECT_EQ(std::string(said),
            "sudo: sudo request: expected stdin, stdout and stderr attached, got 4 fds\n"
            "sudo: sudo request: an entry is neither an argument nor an environment entry\n");
  ::close(err_pipe[0]);
  ::close(err_pipe[1]);
}

// A real request through ServeSudoConnection: the command's exit code comes back (root only:
// the command is made root with setgroups/setuid).
TEST(SudoBrokerTest, RunsTheCommandAndSendsItsExitCode) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::thread broker([fd = sv[0]] { ServeSudoConnection(UniqueFd(fd)); });
  const std::string payload = EncodeSudoRequest(
      {.argv = {"sh", "-c", "exit 7"}, .env = {"PATH=/bin:/usr/bin"}, .cwd = "/"});
  ASSERT_TRUE(SendSudoRequest(sv[1], payload).ok());
  const std::optional<int> code = ReadOutcome(sv[1]);
  broker.join();
  ::close(sv[1]);
  EXPECT_EQ(code, 7);
}

}  // namespace
}  // namespace agvisor::agent
