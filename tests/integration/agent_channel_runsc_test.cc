// The agent channel (docs/protocol.md) under Docker + gVisor (runsc): the static agent is PID 1
// of an agvisor/base container started with `init --channel-stdio`, and the test speaks the
// protocol through `docker start -a -i` (PID 1's own stdio, as the host will through the Engine
// API's attach) and through `docker exec -i C agvisor-agent connect` (the second way in).
//
// Docker is driven with the `docker` CLI through Subprocess/RunCommand: acceptable here only,
// because the host channel library is being written concurrently. A missing dockerd FAILS these
// tests. Containers carry the label agvisor.test=1 and are force-removed by the fixture.
//
// Also checks under runsc what the agent relies on: PR_SET_CHILD_SUBREAPER kept across execve
// (a timeout finds setsid / double-forked descendants of the command), openpty + TIOCSCTTY, and
// loopback TCP from PID 1 with --network=none. Prints the exec round trip (median of 50 `true`)
// and the output rate of 50 MB.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/agent/testing/channel_peer.h"
#include "agvisor/base/subprocess.h"

namespace agvisor {
namespace {

using agent::testing::ChannelPeer;
using agent::testing::Cmd;
using proto::Type;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

const std::string kAgent = AGVISOR_AGENT_BINARY;
const std::string kImage = "agvisor/base:latest";
const std::string kAgentInContainer = "/.agvisor/agvisor-agent";

double MsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t).count();
}

CommandOutput Docker(std::vector<std::string> args) {
  args.insert(args.begin(), "docker");
  auto r = RunCommand(args);
  if (!r.ok()) {
    ADD_FAILURE() << "cannot run docker: " << r.error().ToString();
    return {};
  }
  return std::move(*r);
}

class ChannelRunscTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "agvisor-test-channel-" + std::to_string(::getpid()) + "-" +
            std::to_string(std::rand() % 100000);
    auto c = Docker({"create", "-i", "--name", name_, "--label", "agvisor.test=1", "--log-driver",
                     "none", "--runtime", "runsc", "--network", "none", "--entrypoint",
                     kAgentInContainer, kImage, "init", "--channel-stdio"});
    if (!extra_args_.empty()) {
      // `docker create` above took the default command line; this fixture's differs.
      (void)RunCommand({"docker", "rm", "-f", name_});
      std::vector<std::string> args = {"create",         "-i",
                                       "--name",         name_,
                                       "--label",        "agvisor.test=1",
                                       "--log-driver",   "none",
                                       "--runtime",      "runsc",
                                       "--network",      "none",
                                       "--entrypoint",   kAgentInContainer,
                                       kImage,           "init",
                                       "--channel-stdio"};
      args.insert(args.end(), extra_args_.begin(), extra_args_.end());
      c = Docker(args);
    }
    ASSERT_TRUE(c.status.success()) << "docker create: " << c.err;
    char tmpl[] = "/tmp/agvisor-channel-stage-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    stage_ = tmpl;
    auto cp = RunCommand({"sh", "-c", "mkdir -p \"$1/.agvisor\" && cp \"$2\" \"$1/.agvisor/\"",
                          "sh", stage_, kAgent});
    ASSERT_TRUE(cp.ok() && cp->status.success());
    // Before start: gVisor's overlay may hide files put in after start (ENVIRONMENT.md).
    auto dcp = Docker({"cp", stage_ + "/.agvisor", name_ + ":/.agvisor"});
    ASSERT_TRUE(dcp.status.success()) << "docker cp: " << dcp.err;
    auto start = SteadyClock::now();
    auto p = Subprocess::Spawn(
        {.argv = {"docker", "start", "-a", "-i", name_}, .pipe_stdin = true, .pipe_stdout = true});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    attach_.emplace(std::move(*p));
    peer_.emplace(attach_->stdin_fd().get(), attach_->stdout_fd().get());
    auto w = peer_->Hello();
    ASSERT_TRUE(w) << "no WELCOME through docker start -a -i";
    ASSERT_EQ(w->type, Type::kWelcome);
    std::printf("docker start -a -i to WELCOME: %.0f ms\n", MsSince(start));
  }
  void TearDown() override {
    if (!name_.empty()) (void)RunCommand({"docker", "rm", "-f", name_});
    if (!stage_.empty()) (void)RunCommand({"rm", "-rf", stage_});
  }

  std::vector<std::string> extra_args_;  // after `init --channel-stdio`
  std::string name_, stage_;
  std::optional<Subprocess> attach_;
  std::optional<ChannelPeer> peer_;
};

TEST_F(ChannelRunscTest, ExecRoundTripAndMedianOfFiftyTrue) {
  auto r = peer_->RunExec(1, Cmd({"sh", "-c", "echo out; echo err >&2; exit 5"}));
  ASSERT_TRUE(r.exit);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.exit->exit_code, 5);
  std::vector<double> ms;
  for (int i = 0; i < 50; ++i) {
    auto t = SteadyClock::now();
    auto e = peer_->RunExec(static_cast<std::uint32_t>(3 + 2 * i), Cmd({"true"}));
    ms.push_back(MsSince(t));
    ASSERT_TRUE(e.exit);
    ASSERT_EQ(e.exit->exit_code, 0);
  }
  std::sort(ms.begin(), ms.end());
  // Reference on the same machine, same moment: fork+exec of /bin/true by a shell inside.
  auto ref = peer_->RunExec(
      201, Cmd({"sh", "-c",
                "s=$(date +%s%N); i=0; while [ $i -lt 50 ]; do /bin/true; i=$((i+1)); done; "
                "echo $(( ($(date +%s%N) - s) / 50000 ))"}));
  std::printf("reference: fork+exec of /bin/true by sh inside the sandbox: %s us each\n",
              ref.out.substr(0, ref.out.find('\n')).c_str());
  std::printf(
      "exec round trip of `true` through the channel (runsc): median %.2f ms, "
      "min %.2f ms, p90 %.2f ms\n",
      ms[25], ms[0], ms[45]);
}

TEST_F(ChannelRunscTest, FiftyMegabytesOfOutput) {
  auto t = SteadyClock::now();
  auto r = peer_->RunExec(1, Cmd({"head", "-c", "50000000", "/dev/zero"}));
  double took = MsSince(t);
  ASSERT_TRUE(r.exit);
  EXPECT_EQ(r.exit->exit_code, 0);
  EXPECT_EQ(r.out.size(), 50000000u);
  std::printf("50 MB of output through the channel (runsc): %.0f ms, %.0f MB/s\n", took,
              50.0 / (took / 1000));
}

TEST_F(ChannelRunscTest, TimeoutKillsSetsidAndDoubleForkedDescendants) {
  auto r = peer_->RunExec(
      1, Cmd({"sh", "-c", "setsid sleep 1000 & (sleep 1001 &); trap '' TERM; sleep 1002"}, 500));
  ASSERT_TRUE(r.exit);
  EXPECT_EQ(r.exit->exit_code, 124);
  EXPECT_TRUE(r.exit->timed_out);
  auto ps = peer_->RunExec(3, Cmd({"sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"}));
  EXPECT_EQ(ps.out.find("sleep 100"), std::string::npos) << ps.out;
}

TEST_F(ChannelRunscTest, PtyAndPortForwardToAnHttpServerInside) {
  auto tty = peer_->RunExec(1, Cmd({"tty"}, 0, proto::kExecPty));
  ASSERT_TRUE(tty.exit);
  EXPECT_EQ(tty.out.rfind("/dev/pts/", 0), 0u) << tty.out;

  peer_->Send(Type::kExec, 3,
              Cmd({"python3", "-m", "http.server", "8765", "--bind", "127.0.0.1"}, 0,
                  proto::kExecBackground)
                  .Encode());
  // Poll PORT_OPEN until the server listens (python takes a moment to start under gVisor).
  std::uint32_t stream = 5;
  bool open = false;
  auto deadline = SteadyClock::now() + milliseconds(20000);
  while (!open && SteadyClock::now() < deadline) {
    peer_->Send(Type::kPortOpen, stream, proto::PortOpen{8765}.Encode());
    for (;;) {
      auto f = peer_->Next();
      ASSERT_TRUE(f);
      if (f->stream != stream) continue;
      open = f->type == Type::kOk;
      break;
    }
    if (!open) {
      stream += 2;
      ::usleep(100 * 1000);  // a retry interval, not synchronisation: nothing to wait on
    }
  }
  ASSERT_TRUE(open) << "http.server never listened";
  peer_->Send(Type::kData, stream, "GET / HTTP/1.0\r\n\r\n");
  std::string got;
  for (;;) {
    auto f = peer_->Next();
    ASSERT_TRUE(f);
    if (f->stream != stream) continue;
    if (f->type == Type::kData) got += f->payload;
    if (f->type == Type::kClose || f->type == Type::kError) break;
  }
  EXPECT_EQ(got.rfind("HTTP/1.0 200", 0), 0u) << got.substr(0, 200);
}

TEST_F(ChannelRunscTest, SecondSessionThroughDockerExecConnect) {
  auto t = SteadyClock::now();
  auto p = Subprocess::Spawn({.argv = {"docker", "exec", "-i", name_, kAgentInContainer, "connect"},
                              .pipe_stdin = true,
                              .pipe_stdout = true});
  ASSERT_TRUE(p.ok());
  ChannelPeer second(p->stdin_fd().get(), p->stdout_fd().get());
  auto w = second.Hello();
  ASSERT_TRUE(w);
  ASSERT_EQ(w->type, Type::kWelcome);
  std::printf("docker exec -i connect to WELCOME: %.0f ms\n", MsSince(t));
  auto a = second.RunExec(1, Cmd({"echo", "second"}));
  auto b = peer_->RunExec(1, Cmd({"echo", "first"}));
  EXPECT_EQ(a.out, "second\n");
  EXPECT_EQ(b.out, "first\n");
  p->stdin_fd().reset();
  auto st = p->WaitFor(milliseconds(10000));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->exit_code, 0);
}

// Ready shells (`init --warm-shells 2`, agent/ready_shells.h) under runsc: they show in `ps`
// inside, an exec of `sh -c` takes one, and the test prints what they save and cost. The cold
// path runs in the same sandbox, interleaved: `sh -c true sh` (an extra argument) never takes a
// ready shell but starts the same shell for the same script.
class ReadyShellsRunscTest : public ChannelRunscTest {
 protected:
  ReadyShellsRunscTest() { extra_args_ = {"--warm-shells", "2"}; }
  std::uint32_t stream_ = 1;
  // want_prestarted: nullopt = either path (counted in *prestarted_count when given).
  testing::AssertionResult Run(std::vector<std::string> argv, std::optional<bool> want_prestarted,
                               double* ms = nullptr, int* prestarted_count = nullptr) {
    auto t = SteadyClock::now();
    auto e = peer_->RunExec(stream_, Cmd(std::move(argv)));
    if (ms) *ms = MsSince(t);
    stream_ += 2;
    if (!e.exit || e.exit->exit_code != 0) return testing::AssertionFailure() << "exec failed";
    if (prestarted_count && e.exit->prestarted) ++*prestarted_count;
    if (want_prestarted && e.exit->prestarted != *want_prestarted) {
      return testing::AssertionFailure() << "prestarted " << e.exit->prestarted;
    }
    return testing::AssertionSuccess();
  }
};

TEST_F(ReadyShellsRunscTest, PsShowsThemAndExecsTakeThem) {
  auto ps = peer_->RunExec(stream_, Cmd({"sh", "-c", "sleep 0.3; ps -eo pid,args"}));
  stream_ += 2;
  ASSERT_TRUE(ps.exit);
  EXPECT_TRUE(ps.exit->prestarted);
  std::printf("ps inside:\n%s", ps.out.c_str());
  std::size_t ready = 0;
  for (auto p = ps.out.find("agvisor-agent ready shell"); p != std::string::npos;
       p = ps.out.find("agvisor-agent ready shell", p + 1)) {
    ++ready;
  }
  // Two waiting plus the one running this very `ps` (its command line is the same).
  EXPECT_EQ(ready, 3u) << ps.out;

  // Memory of one ready shell, as the sandbox counts it (VmRSS inside gVisor).
  auto mem = peer_->RunExec(
      stream_, Cmd({"sh", "-c",
                    "for p in /proc/[0-9]*; do if grep -q 'ready shell' $p/cmdline 2>/dev/null "
                    "&& [ $p != /proc/$$ ]; then grep VmRSS $p/status; fi; done"}));
  stream_ += 2;
  std::printf("ready shells' VmRSS inside:\n%s", mem.out.c_str());

  // Back to back, then with 200 ms between calls (an agent thinking): cold and warm interleaved.
  // Back to back, the used shells are not replaced during the burst (ReadyShells::kRefillQuiet):
  // the `sh -c true` execs there run cold after the first ones, which the count says; 200 ms
  // apart, every one takes a ready shell.
  for (int gap_ms : {0, 200}) {
    std::vector<double> cold, warm;
    int prestarted = 0;
    const int n = gap_ms == 0 ? 40 : 20;
    for (int i = 0; i < n; ++i) {
      double ms = 0;
      ::usleep(gap_ms * 1000);  // the pause being measured, not synchronisation
      ASSERT_TRUE(Run({"sh", "-c", "true", "sh"}, false, &ms));
      cold.push_back(ms);
      ::usleep(gap_ms * 1000);
      ASSERT_TRUE(Run({"sh", "-c", "true"}, gap_ms == 0 ? std::nullopt : std::optional(true), &ms,
                      &prestarted));
      warm.push_back(ms);
    }
    std::printf("%d ms apart: %d of %d `sh -c true` execs took a ready shell\n", gap_ms, prestarted,
                n);
    if (gap_ms == 0) {
      EXPECT_LT(prestarted, n) << "a burst never ran cold: refilled during it";
    }
    std::sort(cold.begin(), cold.end());
    std::sort(warm.begin(), warm.end());
    auto p95 = [](const std::vector<double>& v) { return v[v.size() * 95 / 100 - 1]; };
    std::printf(
        "exec `sh -c true`, %d ms between calls (runsc): cold median %.2f ms p95 %.2f ms; "
        "ready shell median %.2f ms p95 %.2f ms\n",
        gap_ms, cold[cold.size() / 2], p95(cold), warm[warm.size() / 2], p95(warm));
  }
}

}  // namespace
}  // namespace agvisor
