// Channel over pipes to the REAL agent binary (`agvisor-agent init --channel-stdio --socket
// <tmp>` as a child process; no Docker): exec, stdin with credit, big output, timeout, pty, files,
// tar, ports, many threads on one channel, and the agent dying under an operation.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/channel/channel.h"

namespace agvisor::channel {
namespace {

using ::testing::HasSubstr;

class ChannelComponentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The transport writes to the agent's stdin pipe: a write racing with a killed agent
    // (AgentDeathFailsInFlightOperations) must fail with EPIPE, not kill the test with SIGPIPE
    // (as the CLI and agvisord ignore it too).
    ::signal(SIGPIPE, SIG_IGN);
    char tmpl[] = "/tmp/agvisor-chan-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto p = Subprocess::Spawn({.argv = {AGVISOR_AGENT_BINARY, "init", "--channel-stdio",
                                         "--socket", dir_ + "/agent.sock"},
                                .pipe_stdin = true,
                                .pipe_stdout = true});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    agent_.emplace(std::move(*p));
    auto t = FdTransport::Create(std::move(agent_->stdout_fd()), std::move(agent_->stdin_fd()));
    ASSERT_TRUE(t.ok());
    auto ch = Channel::Open(std::move(*t));
    ASSERT_TRUE(ch.ok()) << ch.error().ToString();
    ch_ = *ch;
  }
  void TearDown() override {
    ch_.reset();
    agent_.reset();  // kills and reaps
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  struct Run {
    proto::Exit exit;
    std::string out, err;
  };
  Run MustExec(proto::ExecRequest req, const ByteSource* in = nullptr) {
    Run r;
    auto e = ch_->Exec(std::move(req),
                       {[&](std::string_view b) { r.out.append(b); },
                        [&](std::string_view b) { r.err.append(b); }},
                       in);
    EXPECT_TRUE(e.ok()) << e.error().ToString();
    if (e.ok()) r.exit = *e;
    return r;
  }

  // Another session with the same agent: a `connect` relay to its socket, offering `version`.
  std::shared_ptr<Channel> Connect(std::uint16_t version = proto::kProtocolVersion) {
    auto p = Subprocess::Spawn(
        {.argv = {AGVISOR_AGENT_BINARY, "connect", "--socket", dir_ + "/agent.sock"},
         .pipe_stdin = true,
         .pipe_stdout = true});
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return nullptr;
    relays_.push_back(std::move(*p));
    auto t = FdTransport::Create(std::move(relays_.back().stdout_fd()),
                                 std::move(relays_.back().stdin_fd()));
    EXPECT_TRUE(t.ok());
    auto ch = Channel::Open(std::move(*t), {.version = version});
    EXPECT_TRUE(ch.ok()) << ch.error().ToString();
    return ch.ok() ? *ch : nullptr;
  }

  std::string dir_;
  std::optional<Subprocess> agent_;
  std::shared_ptr<Channel> ch_;
  std::deque<Subprocess> relays_;
};

TEST_F(ChannelComponentTest, ExecStreamsAndExitCodes) {
  EXPECT_EQ(ch_->agent().version, proto::kProtocolVersion);
  auto r = MustExec({.argv = {"sh", "-c", "echo out; echo err >&2; exit 7"}});
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.exit.exit_code, 7);
  auto missing = MustExec({.argv = {"/no/such/program"}});
  EXPECT_EQ(missing.exit.exit_code, 127);
  auto env = MustExec({.argv = {"sh", "-c", "echo $A; pwd"}, .env = {"A=b c"}, .cwd = "/tmp"});
  EXPECT_EQ(env.out, "b c\n/tmp\n");
}

TEST_F(ChannelComponentTest, StdinAndBigOutputAreFlowControlled) {
  std::string input(6 * 1024 * 1024 + 17, '\0');
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<char>(i * 131 + 7);
  std::size_t pos = 0;
  ByteSource src = [&](std::span<char> buf) -> Result<std::size_t> {
    std::size_t n = std::min(buf.size(), input.size() - pos);
    std::memcpy(buf.data(), input.data() + pos, n);
    pos += n;
    return n;
  };
  auto r = MustExec({.argv = {"cat"}}, &src);
  EXPECT_EQ(r.exit.exit_code, 0);
  EXPECT_TRUE(r.out == input) << r.out.size() << " bytes back";
  auto big = MustExec({.argv = {"head", "-c", "30000000", "/dev/zero"}});
  EXPECT_EQ(big.out.size(), 30000000u);
}

TEST_F(ChannelComponentTest, TimeoutIs124AndSignalsReachTheGroup) {
  auto r = MustExec({.argv = {"sh", "-c", "sleep 30"}, .timeout_ms = 300});
  EXPECT_EQ(r.exit.exit_code, 124);
  EXPECT_TRUE(r.exit.timed_out);
  auto p = ch_->Start({.argv = {"sleep", "30"}});
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Signal(SIGTERM).ok());
  auto e = (*p)->Wait({});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->exit_code, 128 + SIGTERM);
}

// Version 2: a background process is signalled whoever is attached (PROC_SIGNAL); Detach ends an
// attachment from another thread with the process running, so one channel attaches again and
// again; an agent spoken to in version 1 keeps the old rules (signal by attaching: kConflict).
TEST_F(ChannelComponentTest, BackgroundProcessSignalledWhileAttachedDetachedAndReattached) {
  auto started = ch_->Start({.argv = {"sh", "-c",
                                      "trap 'echo got-usr1' USR1; echo up; "
                                      "while :; do sleep 0.05; done"},
                             .flags = proto::kExecBackground});
  ASSERT_TRUE(started.ok());
  auto pid = (*started)->WaitStarted();
  ASSERT_TRUE(pid.ok());
  started->reset();  // a background exec: detached, still running
  auto other = Connect();
  ASSERT_TRUE(other);
  EXPECT_EQ(other->agent().version, proto::kProtocolVersion);
  for (int round = 0; round < 3; ++round) {
    auto attached = ch_->AttachProcess(*pid);  // kConflict unless the last one detached
    ASSERT_TRUE(attached.ok()) << attached.error().ToString();
    Process& p = **attached;
    std::string out;
    std::atomic<int> usr1{0};
    auto r = p.Wait({[&](std::string_view b) {
                       out.append(b);
                       // The replay first; then one signal per round, each seen once.
                       if (out.find("up") != std::string::npos && usr1 == 0) {
                         usr1 = 1;
                         EXPECT_TRUE(other->SignalProcess(*pid, SIGUSR1).ok());
                       }
                       std::size_t n = 0;
                       for (auto i = out.find("got-usr1"); i != std::string::npos;
                            i = out.find("got-usr1", i + 1)) {
                         ++n;
                       }
                       if (n == static_cast<std::size_t>(round) + 1 && usr1 == 1) {
                         usr1 = 2;
                         EXPECT_TRUE(p.Detach().ok());
                       }
                     },
                     nullptr});
    ASSERT_FALSE(r.ok()) << "the process exited: " << out;
    EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
    EXPECT_THAT(r.error().message(), HasSubstr("detached"));
  }
  EXPECT_FALSE(other->SignalProcess(*pid + 1000, SIGUSR1).ok());

  // Version 1: no PROC_SIGNAL, so a signal attaches, and conflicts with an attachment.
  auto old = Connect(1);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->agent().version, 1);
  auto held = ch_->AttachProcess(*pid);
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE((*held)->WaitStarted().ok());
  auto conflict = old->SignalProcess(*pid, SIGUSR1);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.error().code(), ErrorCode::kConflict);
  ASSERT_TRUE(other->SignalProcess(*pid, SIGKILL).ok());
  auto exit = (*held)->Wait({});
  ASSERT_TRUE(exit.ok()) << exit.error().ToString();
  EXPECT_EQ(exit->signal, SIGKILL);
}

TEST_F(ChannelComponentTest, PtyProcessWritesResizesAndExits) {
  auto p = ch_->Start(
      {.argv = {"sh"}, .flags = proto::kExecPty | proto::kExecStdin, .rows = 10, .cols = 40});
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Resize(33, 77).ok());
  ASSERT_TRUE((*p)->Write("stty size; exit 3\n").ok());
  std::string out;
  auto e = (*p)->Wait({[&](std::string_view b) { out.append(b); }, nullptr});
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  EXPECT_EQ(e->exit_code, 3);
  EXPECT_THAT(out, HasSubstr("33 77"));
}

TEST_F(ChannelComponentTest, FilesAndTarRoundTrip) {
  const std::string d = dir_ + "/files";
  std::string body(3 * 1024 * 1024, '\0');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i % 251);
  ASSERT_TRUE(ch_->WriteFile(d + "/a/b.bin", body, 0600, true).ok());
  auto back = ch_->ReadFile(d + "/a/b.bin");
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_TRUE(*back == body);
  auto st = ch_->Stat(d + "/a/b.bin");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, body.size());
  EXPECT_EQ(st->mode & 0777, 0600u);
  EXPECT_EQ(ch_->Stat(d + "/nope").error().code(), ErrorCode::kNotFound);
  ASSERT_TRUE(ch_->Mkdir(d + "/x/y", 0755, true).ok());
  auto list = ch_->List(d);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);
  // TAR_READ of a/ then TAR_WRITE of it under copy/: the same bytes arrive.
  std::string tar;
  ASSERT_TRUE(ch_->TarRead(d + "/a",
                           [&](std::string_view b) -> Result<void> {
                             tar.append(b);
                             return Ok();
                           })
                  .ok());
  std::size_t pos = 0;
  ASSERT_TRUE(ch_->TarWrite(d + "/copy",
                            [&](std::span<char> buf) -> Result<std::size_t> {
                              std::size_t n = std::min(buf.size(), tar.size() - pos);
                              std::memcpy(buf.data(), tar.data() + pos, n);
                              pos += n;
                              return n;
                            })
                  .ok());
  auto copy = ch_->ReadFile(d + "/copy/a/b.bin");
  ASSERT_TRUE(copy.ok()) << copy.error().ToString();
  EXPECT_TRUE(*copy == body);
  ASSERT_TRUE(ch_->Remove(d + "/copy", true).ok());
  EXPECT_EQ(ch_->Stat(d + "/copy").error().code(), ErrorCode::kNotFound);
}

TEST_F(ChannelComponentTest, PortStreamToALoopbackServer) {
  int srv = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(srv, 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread server([srv] {  // echoes upper-cased until EOF, then closes
    int c = ::accept4(srv, nullptr, nullptr, SOCK_CLOEXEC);
    char buf[4096];
    ssize_t n;
    while ((n = ::read(c, buf, sizeof buf)) > 0) {
      for (ssize_t i = 0; i < n; ++i) buf[i] = static_cast<char>(std::toupper(buf[i]));
      (void)!::write(c, buf, static_cast<std::size_t>(n));
    }
    ::close(c);
  });
  auto port = ch_->OpenPort(ntohs(a.sin_port));
  ASSERT_TRUE(port.ok()) << port.error().ToString();
  ASSERT_TRUE((*port)->Write("hello").ok());
  ASSERT_TRUE((*port)->CloseWrite().ok());
  std::string got;
  char buf[64];
  for (;;) {
    auto n = (*port)->Read(buf);
    ASSERT_TRUE(n.ok()) << n.error().ToString();
    if (*n == 0) break;
    got.append(buf, *n);
  }
  EXPECT_EQ(got, "HELLO");
  server.join();
  ::close(srv);
  // Nothing listens on the port any more: kUnavailable, and the channel lives on.
  EXPECT_EQ(ch_->OpenPort(ntohs(a.sin_port)).error().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(ch_->Ping().ok());
}

TEST_F(ChannelComponentTest, ManyThreadsOnOneChannel) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        std::string out;
        std::string word = "w" + std::to_string(t) + "_" + std::to_string(i);
        auto e = ch_->Exec({.argv = {"echo", word}},
                           {[&](std::string_view b) { out.append(b); }, nullptr});
        if (e.ok() && e->exit_code == 0 && out == word + "\n") ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, 60);
}

TEST_F(ChannelComponentTest, SetDeadlinesEndsTheAgentAtTheNewIdleTtl) {
  auto huge = ch_->SetDeadlines(std::chrono::hours(24 * 365 * 101), std::nullopt);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(huge.error().message(), HasSubstr("100 years"));
  // Started without limits, the agent would run forever; SET_DEADLINES gives it an idle-ttl.
  ASSERT_TRUE(ch_->SetDeadlines(std::nullopt, std::chrono::milliseconds(300)).ok());
  auto t0 = std::chrono::steady_clock::now();
  auto st = agent_->Wait();
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  EXPECT_EQ(st->exit_code, 4) << st->ToString();  // kInitExitIdle
  // The new 300 ms idle-ttl ended it: 0.33 s at most on a loaded 2-core host (load average 17-19),
  // 15x.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// IDLE_QUERY against the real agent: busy while an exec runs (from another session too), idle
// from its end, and asking neither counts as activity nor restarts the clock.
TEST_F(ChannelComponentTest, IdleQuerySeesHoldsAndIsNotActivity) {
  auto p = ch_->Start({.argv = {"sleep", "100"}});
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  ASSERT_TRUE((*p)->WaitStarted().ok());
  auto other = Connect();
  ASSERT_TRUE(other);
  auto busy = other->QueryIdle();
  ASSERT_TRUE(busy.ok()) << busy.error().ToString();
  EXPECT_EQ(busy->holds, 1u);
  EXPECT_EQ(busy->idle_ms, 0u);
  ASSERT_TRUE((*p)->Signal(SIGKILL).ok());
  (void)(*p)->Wait({});
  p->reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto first = other->QueryIdle();
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_EQ(first->holds, 0u);
  EXPECT_GE(first->idle_ms, 250u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto second = ch_->QueryIdle();
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  EXPECT_GE(second->idle_ms, first->idle_ms + 250) << "asking restarted the idle clock";
}

TEST_F(ChannelComponentTest, SetDeadlinesLifetimeHoldsWhileBusy) {
  auto p = ch_->Start({.argv = {"sleep", "100"}});
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  ASSERT_TRUE((*p)->WaitStarted().ok());
  ASSERT_TRUE(ch_->SetDeadlines(std::chrono::milliseconds(400), std::nullopt).ok());
  auto t0 = std::chrono::steady_clock::now();
  auto st = agent_->Wait();
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  EXPECT_EQ(st->exit_code, 3) << st->ToString();  // kInitExitLifetime, exec in flight or not
  // The new 400 ms lifetime ended it under `sleep 100`: 0.59 s at most loaded, 8x.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(ChannelComponentTest, AgentDeathFailsInFlightOperations) {
  std::thread killer([&] {
    // Kill once the command runs (a STARTED has been seen by then, or soon).
    auto r = ch_->Ping();
    EXPECT_TRUE(r.ok());
    (void)agent_->Kill(SIGKILL);
  });
  auto e = ch_->Exec({.argv = {"sleep", "30"}}, {});
  killer.join();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(ch_->broken());
  EXPECT_EQ(ch_->ReadFile("/etc/hostname").error().code(), ErrorCode::kUnavailable);
}

// ---- Watch: the real agent's inotify events over the channel ----

std::string ShowEvent(const proto::WatchEvent& e) {
  std::string s(proto::WatchEventKindName(e.kind));
  if (e.kind == proto::WatchEventKind::kMove) s += " " + e.old_path + " ->";
  if (!e.path.empty()) s += " " + e.path;
  if (e.is_dir) s += "/";
  return s;
}

// Events until `last` is among them or `within` passed.
std::vector<std::string> CollectUntil(WatchStream& w, const std::string& last,
                                      std::chrono::milliseconds within) {
  std::vector<std::string> got;
  const auto end = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < end) {
    auto batch = w.Next(std::chrono::milliseconds(100));
    EXPECT_TRUE(batch.ok()) << batch.error().ToString();
    if (!batch.ok() || !batch->has_value()) break;
    for (const auto& e : **batch) got.push_back(ShowEvent(e));
    if (std::find(got.begin(), got.end(), last) != got.end()) break;
  }
  return got;
}

TEST_F(ChannelComponentTest, WatchReportsWhatAnExecDoes) {
  const std::string root = dir_ + "/w";
  std::filesystem::create_directories(root);
  auto w = ch_->Watch(root, /*recursive=*/true);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  // New directories first: what happens in one before the agent's watch on it exists is not
  // seen (docs/agent.md, "Watch"), and the agent adds that watch before it sends the create.
  // (In one exec, a loaded host once showed `create d/g` for a file made and moved out of d/e
  // before d/e was watched.)
  auto mk = MustExec({.argv = {"sh", "-c", "cd " + root + " && echo a > top && mkdir -p d/e"}});
  ASSERT_EQ(mk.exit.exit_code, 0) << mk.err;
  // Everything happened before the exec returned; the agent's events follow on the same
  // channel: 10 s is far beyond the milliseconds this takes, only a hang would pass it.
  auto got = CollectUntil(**w, "create d/e/", std::chrono::seconds(10));
  auto r = MustExec(
      {.argv = {"sh", "-c",
                "cd " + root + " && echo a > d/e/f && mv d/e/f d/g && rm d/g && touch done"}});
  ASSERT_EQ(r.exit.exit_code, 0) << r.err;
  for (auto& e : CollectUntil(**w, "create done", std::chrono::seconds(10))) {
    got.push_back(std::move(e));
  }
  auto pos = [&](const std::string& e) {
    return std::find(got.begin(), got.end(), e) - got.begin();
  };
  const std::vector<std::string> expected = {"create d/",    "create d/e/",       "create d/e/f",
                                             "modify d/e/f", "move d/e/f -> d/g", "delete d/g",
                                             "create done"};
  for (const auto& e : expected) {
    EXPECT_LT(pos(e), static_cast<long>(got.size()))
        << e << " missing from " << ::testing::PrintToString(got);
  }
  EXPECT_LT(pos("move d/e/f -> d/g"), pos("delete d/g"));
  (*w)->Close();
  EXPECT_TRUE(ch_->Ping().ok());  // the session goes on
}

TEST_F(ChannelComponentTest, WatchOfAMissingPathOrAFileIsAClearError) {
  auto missing = ch_->Watch(dir_ + "/nope", true);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  auto file = ch_->Watch(AGVISOR_AGENT_BINARY, true);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(file.error().message(), HasSubstr("not a directory"));
  EXPECT_FALSE(ch_->broken());
}

TEST_F(ChannelComponentTest, ASlowConsumerGetsOneOverflowEventThenLiveEvents) {
  const std::string root = dir_ + "/flood";
  std::filesystem::create_directories(root);
  // A small window: the agent stops sending after 4 KiB and queues the rest (4096 events at
  // most), so 6000 files (12000 events) must overflow while the host reads nothing.
  auto small = [&]() -> std::shared_ptr<Channel> {
    auto p = Subprocess::Spawn(
        {.argv = {AGVISOR_AGENT_BINARY, "connect", "--socket", dir_ + "/agent.sock"},
         .pipe_stdin = true,
         .pipe_stdout = true});
    if (!p.ok()) return nullptr;
    relays_.push_back(std::move(*p));
    auto t = FdTransport::Create(std::move(relays_.back().stdout_fd()),
                                 std::move(relays_.back().stdin_fd()));
    if (!t.ok()) return nullptr;
    auto c = Channel::Open(std::move(*t), {.initial_window = 4096});
    return c.ok() ? *c : nullptr;
  }();
  ASSERT_NE(small, nullptr);
  auto w = small->Watch(root, false);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  auto r = MustExec({.argv = {"sh", "-c",
                              "cd " + root +
                                  " && i=0; while [ $i -lt 6000 ]; do echo x > f$i; "
                                  "i=$((i+1)); done"}});
  ASSERT_EQ(r.exit.exit_code, 0) << r.err;
  // The queue's 4096 events then the overflow; 20 s is far beyond the ~0.1 s it takes.
  std::vector<std::string> got = CollectUntil(**w, "overflow", std::chrono::seconds(20));
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), "overflow") << got.size() << " events, none an overflow";
  EXPECT_EQ(std::count(got.begin(), got.end(), "overflow"), 1);
  EXPECT_LT(got.size(), 12000u);  // events were dropped, not all delivered
  EXPECT_EQ(got.front(), "create f0");
  // Once the consumer has seen the overflow, events flow live again.
  auto after = MustExec({.argv = {"touch", root + "/after"}});
  ASSERT_EQ(after.exit.exit_code, 0);
  auto later = CollectUntil(**w, "create after", std::chrono::seconds(10));
  EXPECT_EQ(later, std::vector<std::string>{"create after"});
}

}  // namespace
}  // namespace agvisor::channel
