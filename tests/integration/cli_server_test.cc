// End-to-end tests of `agvisor --server` (label `integration`): the real agvisor binary talking
// to a real agvisord on a temp unix socket with a temp token file, against the real dockerd +
// runsc. create, exec (exit codes, stdin, a timeout, 5 MB of output byte for byte), cp of a
// directory both ways, ps/kill, port-forward, ls, top, stop, rm; and the errors of a daemon
// that is not running, a wrong token, a command that has no daemon equivalent, and a sandbox
// killed in the middle of a download.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "agvisor/base/subprocess.h"
#include "tests/integration/test_env.h"

namespace agvisor::testing {
namespace {

using ::testing::HasSubstr;
namespace json = boost::json;

class CliServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cli-server-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string log = dir_ + "/agvisord.log";
    auto p = Subprocess::Spawn(
        {.argv = {"sh", "-c", "exec \"$0\" --socket \"$1\" --token-file \"$2\" 2>>\"$3\"",
                  AGVISORD_BINARY, socket(), token_file(), log}});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    daemon_.emplace(std::move(*p));
    ASSERT_TRUE(
        WaitFor([&] { return ReadAll(log).find("agvisord listening") != std::string::npos; },
                std::chrono::seconds(20)))
        << ReadAll(log);
  }
  void TearDown() override {
    if (daemon_) (void)daemon_->Kill(SIGKILL);
    CleanupRun();
    std::filesystem::remove_all(dir_);
  }

  std::string socket() const { return dir_ + "/agvisord.sock"; }
  std::string token_file() const { return dir_ + "/token"; }
  std::string server() const { return "unix:" + socket(); }

  // `agvisor --server ... ARGS`, with the token file given by flag.
  CommandOutput Agvisor(std::vector<std::string> args, std::string_view input = {}) {
    args.insert(args.begin(),
                {AGVISOR_CLI_BINARY, "--server", server(), "--token-file", token_file()});
    auto r = RunCommand(std::move(args), input);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? *r : CommandOutput{};
  }

  std::string dir_;
  std::optional<Subprocess> daemon_;
};

std::string RandomBytes(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST_F(CliServerTest, CreateExecCpPsPortForwardStopRm) {
  const std::string name = RunId() + "-srv";
  const std::string label = std::string(kRunLabel) + "=" + RunId();
  auto c = Agvisor({"create", "--name", name, "--label", label, "--disk", "none", "--memory",
                    "512m", "--lifetime", "900"});
  ASSERT_EQ(c.status.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, "agvisor-" + name + "\n");
  // The daemon made it: its log says so.
  EXPECT_THAT(ReadAll(dir_ + "/agvisord.log"), HasSubstr("sandbox created"));

  // ---- exec: output, exit codes, stdin, timeout ----
  auto e = Agvisor({"exec", name, "--", "echo out; echo err >&2; exit 7"});
  EXPECT_EQ(e.out, "out\n");
  EXPECT_EQ(e.err, "err\n");
  EXPECT_EQ(e.status.exit_code, 7);
  auto argv = Agvisor({"exec", name, "--", "printf", "%s|", "a b", "c"});
  EXPECT_EQ(argv.out, "a b|c|");
  auto in = Agvisor({"exec", "-i", name, "--", "wc -c"}, std::string(300000, 'x'));
  EXPECT_EQ(in.out, "300000\n") << in.err;
  auto to = Agvisor({"exec", "-t", "1", name, "--", "sleep 30"});
  EXPECT_EQ(to.status.exit_code, 124) << to.err;
  auto pwd = Agvisor({"exec", name, "--", "pwd"});
  EXPECT_EQ(pwd.out, "/workspace\n");

  // ---- cp of a directory both ways (nested files, a symlink, 5 MB of binary) ----
  const std::string src = dir_ + "/src";
  std::filesystem::create_directories(src + "/tree/a/b");
  std::ofstream(src + "/tree/a/b/deep.txt") << "deep\n";
  const std::string blob = RandomBytes(5'000'000, 11);
  std::ofstream(src + "/tree/blob.bin", std::ios::binary) << blob;
  std::filesystem::create_symlink("a/b/deep.txt", src + "/tree/link");
  // Existing directories on both sides: the copy goes into them (docker cp's rules).
  ASSERT_EQ(Agvisor({"exec", name, "--", "mkdir -p /workspace/in"}).status.exit_code, 0);
  std::filesystem::create_directories(dir_ + "/out");
  auto up = Agvisor({"cp", src + "/tree", name + ":/workspace/in"});
  ASSERT_EQ(up.status.exit_code, 0) << up.err;
  EXPECT_EQ(Agvisor({"exec", name, "--", "readlink in/tree/link"}).out, "a/b/deep.txt\n");
  // 5 MB of output through the exec WebSocket, byte for byte.
  auto cat = Agvisor({"exec", name, "--", "cat", "/workspace/in/tree/blob.bin"});
  EXPECT_EQ(cat.status.exit_code, 0) << cat.err;
  EXPECT_EQ(cat.out.size(), blob.size());
  EXPECT_TRUE(cat.out == blob) << "5 MB of output differ";
  auto down = Agvisor({"cp", name + ":/workspace/in/tree", dir_ + "/out"});
  ASSERT_EQ(down.status.exit_code, 0) << down.err;
  auto diff = RunCommand({"diff", "-r", "--no-dereference", src + "/tree", dir_ + "/out/tree"});
  ASSERT_TRUE(diff.ok());
  EXPECT_TRUE(diff->status.success()) << diff->out << diff->err;
  EXPECT_TRUE(std::filesystem::is_symlink(dir_ + "/out/tree/link"));
  // Bad paths: the daemon's error, with the CLI's exit code.
  auto rel = Agvisor({"cp", name + ":relative", dir_ + "/x"});
  EXPECT_EQ(rel.status.exit_code, 2) << rel.err;
  EXPECT_THAT(rel.err, HasSubstr("absolute"));
  auto missing = Agvisor({"cp", name + ":/no/such/dir", dir_ + "/x"});
  EXPECT_EQ(missing.status.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("/no/such/dir"));

  // ---- background processes: exec -d, ps, kill ----
  auto d = Agvisor({"exec", "-d", name, "--", "sleep 300"});
  ASSERT_EQ(d.status.exit_code, 0) << d.err;
  const std::string pid = d.out.substr(0, d.out.find('\n'));
  auto ps = Agvisor({"--json", "ps", name});
  ASSERT_EQ(ps.status.exit_code, 0) << ps.err;
  bool running = false;
  const json::value procs = json::parse(ps.out);
  for (const auto& p : procs.as_array()) {
    if (std::to_string(p.at("pid").to_number<std::int64_t>()) == pid) {
      running = p.at("state") == "running";
    }
  }
  EXPECT_TRUE(running) << ps.out;
  EXPECT_EQ(Agvisor({"kill", "-s", "KILL", name, pid}).status.exit_code, 0);
  EXPECT_TRUE(WaitFor(
      [&] {
        auto l = Agvisor({"ps", name});
        return l.out.find(pid) != std::string::npos && l.out.find("exited") != std::string::npos;
      },
      std::chrono::seconds(10)));

  // ---- port-forward through the ports WebSocket ----
  auto srv = Agvisor(
      {"exec", "-d", name, "--", "python3", "-c",
       "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
       "s.bind(('127.0.0.1',7777))\ns.listen()\nwhile True:\n c,_=s.accept()\n"
       " c.sendall(c.recv(100).upper())\n c.close()"});
  ASSERT_EQ(srv.status.exit_code, 0) << srv.err;
  auto pf = Subprocess::Spawn({.argv = {AGVISOR_CLI_BINARY, "--server", server(), "--token-file",
                                        token_file(), "port-forward", name, "0:7777"},
                               .pipe_stdout = true});
  ASSERT_TRUE(pf.ok());
  std::string line;
  char ch;
  while (::read(pf->stdout_fd().get(), &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  ASSERT_THAT(line, HasSubstr("forwarding 127.0.0.1:"));
  const int port = std::stoi(line.substr(line.find(':') + 1));
  std::string answer;
  EXPECT_TRUE(WaitFor(
      [&] {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        answer.clear();
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::write(fd, "ping", 4) == 4) {
          char buf[16];
          ssize_t n;
          while ((n = ::read(fd, buf, sizeof buf)) > 0) answer.append(buf, n);
        }
        ::close(fd);
        return answer == "PING";
      },
      std::chrono::seconds(20)))
      << answer;
  (void)pf->Kill(SIGTERM);

  // ---- ls and top see it ----
  auto ls = Agvisor({"--json", "ls"});
  ASSERT_EQ(ls.status.exit_code, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("\"container\":\"agvisor-" + name + "\""));
  auto top = Agvisor({"--json", "top"});
  ASSERT_EQ(top.status.exit_code, 0) << top.err;
  bool sampled = false;
  const json::value rows = json::parse(top.out);
  for (const auto& r : rows.as_array()) {
    if (r.at("container").as_string() == "agvisor-" + name) {
      sampled = r.as_object().contains("memory_limit_bytes") &&
                r.at("memory_limit_bytes").to_number<std::int64_t>() == (512 << 20);
    }
  }
  EXPECT_TRUE(sampled) << top.out;

  // ---- stop keeps /workspace; a new create of the name finds the data; rm erases it ----
  EXPECT_EQ(Agvisor({"exec", name, "--", "echo kept > mark"}).status.exit_code, 0);
  auto stop = Agvisor({"stop", name});
  EXPECT_EQ(stop.status.exit_code, 0) << stop.err;
  auto gone = Agvisor({"exec", name, "--", "true"});
  EXPECT_NE(gone.status.exit_code, 0);
  EXPECT_THAT(gone.err, HasSubstr(name));
  ASSERT_EQ(
      Agvisor({"create", "--name", name, "--label", label, "--disk", "none"}).status.exit_code, 0);
  EXPECT_EQ(Agvisor({"exec", name, "--", "cat mark"}).out, "kept\n");
  EXPECT_EQ(Agvisor({"rm", name}).status.exit_code, 0);
  auto after = Agvisor({"rm", name});
  EXPECT_EQ(after.status.exit_code, 1);  // not_found
}

TEST_F(CliServerTest, RunAndTheDaemonsErrorsMapToExitCodes) {
  const std::string label = std::string(kRunLabel) + "=" + RunId();
  auto r = Agvisor({"run", "--label", label, "--disk", "none", "--", "echo hi; exit 4"});
  EXPECT_EQ(r.out, "hi\n");
  EXPECT_EQ(r.status.exit_code, 4) << r.err;
  // invalid_argument from the daemon -> 2, naming the field.
  auto bad = Agvisor({"create", "--label", label, "--memory", "0"});
  EXPECT_EQ(bad.status.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("memory"));
  // not_found: exec's "failed before the command's outcome was known" (125), as on a host.
  auto missing = Agvisor({"exec", "no-such-" + RunId(), "--", "true"});
  EXPECT_EQ(missing.status.exit_code, 125);
  EXPECT_THAT(missing.err, HasSubstr("no-such-" + RunId()));
  // A verb of the host itself: the agvisord place has no route for it and says where it runs
  // (kUnsupported, exit 1); the same for image build, network create and ls --size.
  for (std::vector<std::string> verb : {std::vector<std::string>{"doctor"},
                                        {"image", "build", "base"},
                                        {"network", "create", "n-" + RunId()},
                                        {"ls", "--size"}}) {
    auto host_verb = Agvisor(verb);
    EXPECT_EQ(host_verb.status.exit_code, 1) << verb[0];
    EXPECT_THAT(host_verb.err, HasSubstr("not through agvisord")) << verb[0];
    EXPECT_THAT(host_verb.err, HasSubstr("run it on the daemon's host")) << verb[0];
  }
}

// `agvisor desktop` through the daemon (one Place for every verb): the password over the files
// route, the screen over the ports WebSocket (VNC), input over exec. Before issue 34 the CLI
// refused `desktop` with --server.
TEST_F(CliServerTest, DesktopVerbsGoThroughTheDaemon) {
  const std::string label = std::string(kRunLabel) + "=" + RunId();
  auto c = Agvisor({"create", "--gui", "--network", "none", "--label", label, "--disk", "none",
                    "--memory", "1g"});
  ASSERT_EQ(c.status.exit_code, 0) << c.err;
  const std::string name = c.out.substr(0, c.out.find('\n'));
  auto pw = Agvisor({"desktop", name, "password"});
  EXPECT_EQ(pw.status.exit_code, 0) << pw.err;
  EXPECT_EQ(pw.out.size(), 9u) << pw.out;  // 8 letters and digits, a newline
  auto size = Agvisor({"desktop", name, "size"});
  EXPECT_EQ(size.out, "1280x800\n") << size.err;
  auto shot = Agvisor({"desktop", name, "screenshot", "-"});
  ASSERT_EQ(shot.status.exit_code, 0) << shot.err;
  EXPECT_EQ(shot.out.substr(0, 8), "\x89PNG\r\n\x1a\n");
  ASSERT_EQ(Agvisor({"desktop", name, "move", "101", "202"}).status.exit_code, 0);
  auto where = Agvisor({"exec", "-u", "user", "--env=DISPLAY=:0", name, "--", "xdotool",
                        "getmouselocation", "--shell"});
  EXPECT_THAT(where.out, HasSubstr("X=101\nY=202\n")) << where.err;
  auto bad = Agvisor({"desktop", name, "key", "Return;", "true"});
  EXPECT_EQ(bad.status.exit_code, 2) << bad.err;  // invalid_argument, before anything runs
  EXPECT_EQ(Agvisor({"rm", name}).status.exit_code, 0);
}

// A sandbox killed in the middle of `cp` out of it: the daemon can only drop the stream it has
// begun, and the CLI then asks about the sandbox and reports it died (exit 3), not a dropped
// connection.
TEST_F(CliServerTest, SandboxKilledDuringADownloadIsReportedAsDied) {
  const std::string label = std::string(kRunLabel) + "=" + RunId();
  auto c = Agvisor({"create", "--label", label, "--disk", "none", "--memory", "1g"});
  ASSERT_EQ(c.status.exit_code, 0) << c.err;
  const std::string name = c.out.substr(0, c.out.find('\n'));
  auto mk = Agvisor({"exec", name, "--",
                     "mkdir -p /tmp/big && head -c 300000000 /dev/urandom "
                     "> /tmp/big/f"});
  ASSERT_EQ(mk.status.exit_code, 0) << mk.err;
  auto cp = Subprocess::Spawn({.argv = {AGVISOR_CLI_BINARY, "--server", server(), "--token-file",
                                        token_file(), "cp", name + ":/tmp/big", dir_ + "/down"},
                               .pipe_stderr = true});
  ASSERT_TRUE(cp.ok()) << cp.error().ToString();
  // Once bytes arrive, the download is under way: kill the sandbox.
  // down does not exist: big's contents land as down (docker cp's rules).
  const std::string part = dir_ + "/down/f";
  ASSERT_TRUE(WaitFor(
      [&] {
        std::error_code ec;
        return std::filesystem::file_size(part, ec) > (1u << 20) && !ec;
      },
      std::chrono::seconds(60)))
      << "the download did not start";
  auto kill = RunCommand({"docker", "kill", name});
  ASSERT_TRUE(kill.ok() && kill->status.success()) << (kill.ok() ? kill->err : "");
  auto st = cp->WaitFor(std::chrono::seconds(60));
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  std::string err;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(cp->stderr_fd().get(), buf, sizeof buf)) > 0) err.append(buf, n);
  EXPECT_EQ(st->exit_code, 3) << err;  // sandbox_died
  EXPECT_THAT(err, HasSubstr("ended during the transfer")) << err;
  // A failed download is undone: the part written so far and the directories it made are gone.
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/down")) << "a failed download left files";
}

// `agvisor --server ... cp` out of a hostile sandbox: the archive comes through agvisord, and
// this machine extracts it by the same host rules as a local download. The sandbox makes a
// setuid copy of a binary and an absolute link with its own files; then it replaces its agent
// (a root process inside can) so that its next archive names an entry under a link the first
// download planted.
TEST_F(CliServerTest, DownloadsThroughTheDaemonAreSafeOnThisMachine) {
  const std::string label = std::string(kRunLabel) + "=" + RunId();
  auto c = Agvisor({"create", "--label", label, "--disk", "none", "--memory", "512m"});
  ASSERT_EQ(c.status.exit_code, 0) << c.err;
  const std::string name = c.out.substr(0, c.out.find('\n'));
  auto sh = [&](const std::string& script) {
    auto r = Agvisor({"exec", name, "--", "set -e; " + script});
    ASSERT_EQ(r.status.exit_code, 0) << script << ": " << r.err;
  };
  sh("mkdir -p /tmp/t/d; cp /bin/sh /tmp/t/suid; chmod 4755 /tmp/t/suid; chmod 2775 /tmp/t/d; "
     "ln -s .. /tmp/t/up");
  const std::string res = dir_ + "/res";
  std::filesystem::create_directories(res);  // an existing directory: the copy goes into it
  auto down = Agvisor({"cp", name + ":/tmp/t", res});
  ASSERT_EQ(down.status.exit_code, 0) << down.err;
  struct stat st;
  ASSERT_EQ(::lstat((res + "/t/suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "a setuid bit reached the host";
  ASSERT_EQ(::lstat((res + "/t/d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0775u);
  ASSERT_EQ(std::filesystem::read_symlink(res + "/t/up"), "..");  // planted: res/t/up -> res

  // An absolute link: refused naming it, and the download undone.
  sh("mkdir -p /tmp/abs; echo a > /tmp/abs/a; ln -s /etc /tmp/abs/etc");
  auto abs = Agvisor({"cp", name + ":/tmp/abs", res});
  EXPECT_EQ(abs.status.exit_code, 2) << abs.err;
  EXPECT_THAT(abs.err, HasSubstr("tar entry 'abs/etc'"));
  EXPECT_FALSE(std::filesystem::exists(res + "/abs"));

  // The hostile agent: `read-file` (taken for a regular file of 32 MiB or more) now answers
  // with a forged archive whose one entry goes under the planted link.
  std::string forged(512, '\0');
  const std::string entry = "up/escaped";
  std::memcpy(forged.data(), entry.data(), entry.size());
  std::memcpy(forged.data() + 100, "0000644", 8);
  std::memcpy(forged.data() + 108, "0000000", 8);
  std::memcpy(forged.data() + 116, "0000000", 8);
  std::memcpy(forged.data() + 124, "00000000004", 12);
  std::memcpy(forged.data() + 136, "00000000000", 12);
  forged[156] = '0';
  std::memcpy(forged.data() + 257,
              "ustar\0"
              "00",
              8);
  std::memset(forged.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char ch : forged) sum += static_cast<unsigned char>(ch);
  std::snprintf(forged.data() + 148, 8, "%06o", sum);
  forged += std::string("evil") + std::string(508, '\0') + std::string(1024, '\0');
  std::ofstream(dir_ + "/forged.tar", std::ios::binary) << forged;
  auto put = Agvisor({"cp", dir_ + "/forged.tar", name + ":/tmp"});
  ASSERT_EQ(put.status.exit_code, 0) << put.err;
  sh(R"(cp /.agvisor/agvisor-agent /.agvisor/real-agent
printf '#!/bin/sh\nif [ "$1" = read-file ]; then exec cat /tmp/forged.tar; fi\n' > /tmp/hostile
printf 'exec /.agvisor/real-agent "$@"\n' >> /tmp/hostile
chmod 755 /tmp/hostile; mv /tmp/hostile /.agvisor/agvisor-agent; truncate -s 40M /tmp/big)");
  auto second = Agvisor({"cp", name + ":/tmp/big", res + "/t"});
  EXPECT_EQ(second.status.exit_code, 2) << second.err;
  EXPECT_THAT(second.err, HasSubstr("'up/escaped'"));
  EXPECT_THAT(second.err, HasSubstr("symlink"));
  EXPECT_FALSE(std::filesystem::exists(res + "/escaped")) << "written through a planted link";
}

TEST_F(CliServerTest, DeadServerAndWrongTokenSayWhatToDo) {
  // Nothing listens: the address and how to start agvisord.
  const std::string dead = dir_ + "/nobody.sock";
  auto r = RunCommand(
      {AGVISOR_CLI_BINARY, "--server", "unix:" + dead, "--token-file", token_file(), "ls"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("cannot reach agvisord at unix:" + dead));
  EXPECT_THAT(r->err, HasSubstr("agvisord --socket " + dead));
  // The environment variable works the same way.
  r = RunCommand({"env", "AGVISOR_SERVER=unix:" + dead, "AGVISOR_TOKEN=x", AGVISOR_CLI_BINARY,
                  "exec", "box", "--", "true"});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->err, HasSubstr("cannot reach agvisord at unix:" + dead));
  // A wrong token: the file is named.
  const std::string wrong = dir_ + "/wrong.token";
  std::ofstream(wrong) << "not-the-token\n";
  r = RunCommand({AGVISOR_CLI_BINARY, "--server", server(), "--token-file", wrong, "ls"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr(wrong));
  EXPECT_THAT(r->err, HasSubstr("refused"));
  // ... also on a WebSocket route (exec).
  r = RunCommand({AGVISOR_CLI_BINARY, "--server", server(), "--token-file", wrong, "exec", "box",
                  "--", "true"});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->err, HasSubstr(wrong));
  // A missing token file, and a malformed address.
  r = RunCommand({AGVISOR_CLI_BINARY, "--server", server(), "--token-file", dir_ + "/none", "ls"});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->err, HasSubstr("no agvisord token file at " + dir_ + "/none"));
  r = RunCommand({AGVISOR_CLI_BINARY, "--server", "ftp://x", "ls"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("unix:/path/to/agvisord.sock, http://127.0.0.1:PORT or ssh://"));
  // Plain HTTP off loopback is refused before anything is sent (the token would travel in the
  // clear); 192.0.2.1 is a documentation address.
  r = RunCommand({AGVISOR_CLI_BINARY, "--server", "http://192.0.2.1:8080", "ls"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("in the clear"));
}

// Not a check: the exec round trip through the daemon next to the direct one (printed).
TEST_F(CliServerTest, ExecRoundTripFigures) {
  const std::string name = RunId() + "-srv-rt";
  const std::string label = std::string(kRunLabel) + "=" + RunId();
  ASSERT_EQ(
      Agvisor({"create", "--name", name, "--label", label, "--disk", "none"}).status.exit_code, 0);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto time = [&](const std::vector<std::string>& argv) {
    std::vector<double> ms;
    for (int i = 0; i < 9; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto r = RunCommand(argv);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      EXPECT_TRUE(r.ok() && r->status.success());
    }
    return median(ms);
  };
  const double via_server = time({AGVISOR_CLI_BINARY, "--server", server(), "--token-file",
                                  token_file(), "exec", name, "--", "true"});
  const double direct = time({AGVISOR_CLI_BINARY, "exec", name, "--", "true"});
  std::printf(
      "agvisor exec true (process start to exit), median of 9: --server %.1f ms, "
      "direct %.1f ms\n",
      via_server, direct);
  EXPECT_EQ(Agvisor({"rm", name}).status.exit_code, 0);
}

}  // namespace
}  // namespace agvisor::testing
