// Sandbox operations over the agent channel against the real dockerd + runsc (label
// `integration`): files, upload/download, ports with network=none, PTY processes, and a handle
// that reconnects after its channel drops. sandbox_channel_kube_test runs the cases of the Runtime
// seam on the Kubernetes runtime (AGVISOR_TEST_OVER_KUBE=1, against the Kubernetes API test
// double; tests/integration/CMakeLists.txt names them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/kube_double.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;

// The shell loop that finds the relay processes (`agvisor-agent connect`) inside and runs ACTION
// with $p set to each one's pid.
std::string ForEachRelay(const std::string& action) {
  return "for p in /proc/[0-9]*; do if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q "
         "'^/.agvisor/agvisor-agent connect'; then " +
         action + "; fi; done";
}

// Kills the newest relay: the one a handle opened last (pids grow inside gVisor). On Kubernetes
// the creating handle's channel is a relay too, older than that of a handle opened after it.
std::string KillNewestRelay() {
  return "n=0; " + ForEachRelay("if [ ${p#/proc/} -gt $n ]; then n=${p#/proc/}; fi") +
         "; kill -9 $n";
}

// The relays of a creating handle: on Docker it speaks to PID 1's stdio; on Kubernetes it opens
// an exec relay as every other handle does (docs/kubernetes.md).
int CreatingHandleRelays() { return testing::OverKube() ? 1 : 0; }

[[maybe_unused]] auto* const over_kube = testing::AddKubeDoubleIfAsked();

namespace fs = std::filesystem;

class SandboxChannelTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { testing::CleanupRun(testing::TestHost()); }
  static std::unique_ptr<Sandbox> MustCreate(SandboxSpec spec = testing::TestSpec()) {
    auto sb = CreateSandbox(spec);
    EXPECT_TRUE(sb.ok()) << sb.error().ToString();
    return sb.ok() ? std::move(*sb) : nullptr;
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

TEST_F(SandboxChannelTest, FileOperations) {
  auto sb = MustCreate();
  ASSERT_TRUE(sb);
  std::string body(1 << 20, '\0');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 13);
  ASSERT_TRUE(sb->WriteFile("/tmp/d/e/f.bin", body, 0640).ok());
  auto back = sb->ReadFile("/tmp/d/e/f.bin");
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_TRUE(*back == body);
  // The file is there for commands too (gVisor's overlay: written inside, seen inside).
  EXPECT_EQ(sb->ExecShell("stat -c %s:%a /tmp/d/e/f.bin")->out, "1048576:640\n");
  auto st = sb->Stat("/tmp/d/e/f.bin");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->kind, FileKind::kFile);
  EXPECT_EQ(st->size, body.size());
  ASSERT_TRUE(sb->Mkdir("/tmp/d/g/h").ok());
  auto list = sb->ListDir("/tmp/d");
  ASSERT_TRUE(list.ok());
  std::vector<std::string> names;
  for (const auto& e : *list) names.push_back(e.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("e", "g"));
  EXPECT_EQ(sb->ReadFile("/tmp/nope").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(sb->ReadFile("relative").error().code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(sb->Remove("/tmp/d", true).ok());
  EXPECT_EQ(sb->Stat("/tmp/d").error().code(), ErrorCode::kNotFound);
}

// Files of 32 MiB and more come back through an exec of the agent's `read-file` (Docker's exec
// stream) rather than the channel; through a symlink they take the channel. Both byte-exact.
TEST_F(SandboxChannelTest, LargeFilesComeBackWholeByEitherPath) {
  auto sb = MustCreate();
  ASSERT_TRUE(sb);
  std::string body(40u << 20, '\0');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 131 + i / 4099);
  ASSERT_TRUE(sb->WriteFile("/tmp/big.bin", body).ok());
  ASSERT_TRUE(sb->ExecShell("ln -s /tmp/big.bin /tmp/link.bin")->exit_code == 0);
  for (const char* path : {"/tmp/big.bin", "/tmp/link.bin"}) {
    SCOPED_TRACE(path);
    auto back = sb->ReadFile(path);
    ASSERT_TRUE(back.ok()) << back.error().ToString();
    EXPECT_EQ(back->size(), body.size());
    EXPECT_TRUE(*back == body);
  }
  // The agent's read-file itself, as the host runs it: the bytes on stdout, and an exit code of
  // 64 + the wire error code with the reason on stderr when it cannot read.
  auto sum = sb->ExecShell(
      "/.agvisor/agvisor-agent read-file /tmp/big.bin | cmp - /tmp/big.bin && echo same; "
      "/.agvisor/agvisor-agent read-file /tmp/nope; echo $?; "
      "/.agvisor/agvisor-agent read-file /tmp; echo $?; "
      "/.agvisor/agvisor-agent read-file --tar /tmp/big.bin | tar -xOf - big.bin | "
      "cmp - /tmp/big.bin && echo tar-same; "
      "/.agvisor/agvisor-agent read-file --tar /tmp/nope; echo $?");
  ASSERT_TRUE(sum.ok()) << sum.error().ToString();
  EXPECT_EQ(sum->out, "same\n66\n65\ntar-same\n66\n");
  EXPECT_THAT(sum->err, HasSubstr("read-file: FILE_READ /tmp/nope: open: No such file"));
  EXPECT_THAT(sum->err, HasSubstr("read-file: FILE_READ /tmp: is a directory"));
  EXPECT_THAT(sum->err, HasSubstr("read-file: TAR_READ /tmp/nope"));
  // Download (`agvisor cp` out, agvisord's archive route) takes the same exec for a large file.
  fs::path local = fs::temp_directory_path() / ("agvisor-bigdown-" + testing::RunId());
  fs::remove_all(local);
  auto down = sb->Download("/tmp/big.bin", local.string());
  ASSERT_TRUE(down.ok()) << down.error().ToString();
  EXPECT_TRUE(Slurp(local / "big.bin") == body);
  fs::remove_all(local);
  // While the sink holds the first piece, the agent's `read-file --tar` is the one writing (not
  // the channel); an error of the sink ends the download with that error, as it is.
  int pieces = 0;
  std::string writers;
  auto stopped = sb->DownloadTar("/tmp/big.bin", [&](std::string_view) -> Result<void> {
    if (++pieces == 1) {
      auto ps = sb->ExecShell("ps -eo args | grep -c '^/.agvisor/agvisor-agent read-file.* --tar'");
      writers = ps.ok() ? ps->out : ps.error().ToString();
    }
    if (pieces == 2) return Error::Internal("the local disk is full");
    return Ok();
  });
  EXPECT_EQ(writers, "1\n");
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.error().message(), "the local disk is full");
  EXPECT_EQ(sb->ExecShell("echo still here")->out, "still here\n");
}

// A sandbox killed while a large file is being read: the read fails as kSandboxDied, with why.
TEST_F(SandboxChannelTest, SandboxKilledDuringALargeReadIsReportedAsDied) {
  auto sb = MustCreate();
  ASSERT_TRUE(sb);
  // 1 GiB, sparse (made at once): long enough to read that the kill below lands during the read
  // on a quiet machine too (200 MB was read whole within the 600 ms on the ptrace platform).
  ASSERT_TRUE(sb->ExecShell("truncate -s 1G /tmp/huge")->exit_code == 0);
  auto read = std::async(std::launch::async, [&] { return sb->ReadFile("/tmp/huge"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  ASSERT_TRUE((*docker)->KillContainer(sb->container_name()).ok());
  auto r = read.get();
  ASSERT_FALSE(r.ok()) << "the read finished before the kill (" << r->size() << " bytes)";
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied) << r.error().ToString();
  EXPECT_THAT(r.error().message(), HasSubstr("killed"));
}

TEST_F(SandboxChannelTest, UploadAndDownloadADirectory) {
  auto sb = MustCreate();
  ASSERT_TRUE(sb);
  fs::path local = fs::temp_directory_path() / ("agvisor-up-" + testing::RunId());
  fs::remove_all(local);
  fs::create_directories(local / "src" / "deep");
  std::ofstream(local / "src" / "a.txt") << "alpha\n";
  std::string big(3 * 1000 * 1000, 'z');
  std::ofstream(local / "src" / "deep" / "big", std::ios::binary) << big;
  fs::create_symlink("a.txt", local / "src" / "link");
  ASSERT_TRUE(sb->Upload((local / "src").string(), "/work").ok());
  EXPECT_EQ(sb->ExecShell("cat /work/src/a.txt; readlink /work/src/link; wc -c < "
                          "/work/src/deep/big")
                ->out,
            "alpha\na.txt\n3000000\n");
  ASSERT_TRUE(sb->ExecShell("echo made-inside > /work/src/new.txt").ok());
  fs::path down = local / "down";
  ASSERT_TRUE(sb->Download("/work/src", down.string()).ok());
  EXPECT_EQ(Slurp(down / "src" / "new.txt"), "made-inside\n");
  EXPECT_EQ(Slurp(down / "src" / "deep" / "big"), big);
  EXPECT_EQ(sb->Download("/work/none", down.string()).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(sb->Upload((local / "missing").string(), "/work").error().code(), ErrorCode::kNotFound);
  fs::remove_all(local);
}

TEST_F(SandboxChannelTest, PortToAServerInsideWithNetworkNone) {
  auto spec = testing::TestSpec();
  spec.network = "none";
  auto sb = MustCreate(spec);
  ASSERT_TRUE(sb);
  EXPECT_EQ(sb->OpenPort(8000).error().code(), ErrorCode::kUnavailable);
  // A one-connection echo server that says "ready" once it listens.
  auto server =
      sb->StartProcess({"python3", "-c",
                        "import socket,sys\n"
                        "s=socket.socket(); s.bind(('127.0.0.1',8000)); s.listen(1)\n"
                        "print('ready', flush=True)\n"
                        "c,_=s.accept(); d=c.recv(100); c.sendall(b'echo:'+d); c.close()\n"},
                       {.stdin = false, .timeout = 60});
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  std::promise<void> ready;
  auto exit = std::async(std::launch::async, [&] {
    bool said = false;
    return (*server)->Wait({[&](std::string_view b) {
                              if (!said && b.find("ready") != std::string_view::npos) {
                                said = true;
                                ready.set_value();
                              }
                            },
                            nullptr});
  });
  ASSERT_EQ(ready.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  auto port = sb->OpenPort(8000);
  ASSERT_TRUE(port.ok()) << port.error().ToString();
  ASSERT_TRUE((*port)->Write("hi").ok());
  std::string got;
  char buf[100];
  for (;;) {
    auto n = (*port)->Read(buf);
    ASSERT_TRUE(n.ok()) << n.error().ToString();
    if (*n == 0) break;
    got.append(buf, *n);
  }
  EXPECT_EQ(got, "echo:hi");
  auto e = exit.get();
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->exit_code, 0);
}

TEST_F(SandboxChannelTest, PtyProcessAndReconnectAfterTheChannelDrops) {
  auto created = MustCreate();
  ASSERT_TRUE(created);
  // channel through the connect relay
  auto sb = OpenSandbox(created->container_name(), created->host());
  ASSERT_TRUE(sb.ok());
  auto p = (*sb)->StartProcess({"sh"}, {.pty = true, .rows = 20, .cols = 60});
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  ASSERT_TRUE((*p)->Write("stty size; tty; exit 4\n").ok());
  std::string out;
  auto e = (*p)->Wait({[&](std::string_view b) { out.append(b); }, nullptr});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->exit_code, 4);
  EXPECT_THAT(out, HasSubstr("20 60"));
  EXPECT_THAT(out, HasSubstr("/dev/pts/"));
  // Kill the relay process of this handle: its channel breaks, the next call reconnects.
  auto killed = (*sb)->ExecShell(KillNewestRelay());
  EXPECT_FALSE(killed.ok() && killed->exit_code != 0);
  auto again = (*sb)->ExecShell("echo back");
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_EQ(again->out, "back\n");
  // The creating handle's channel (PID 1's stdio, or its own older relay) was never affected.
  EXPECT_EQ(created->ExecShell("echo first")->out, "first\n");
}

TEST_F(SandboxChannelTest, ThreadsOnOneHandleGetThroughARelayDrop) {
  auto created = MustCreate();
  ASSERT_TRUE(created);
  // channel through the connect relay
  auto sb = OpenSandbox(created->container_name(), created->host());
  ASSERT_TRUE(sb.ok());
  constexpr int kThreads = 4;
  std::atomic<bool> killed{false}, stop{false};
  std::array<std::atomic<int>, kThreads> before{}, after{}, failed{};
  std::array<std::string, kThreads> bad;  // an unexpected error or output, per thread
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const bool was_killed = killed;
        const std::string word = std::to_string(t) + "-" + std::to_string(i);
        auto r = (*sb)->ExecShell("echo " + word);
        if (r.ok() && r->out == word + "\n") {
          ++(was_killed ? after : before)[t];
        } else if (!r.ok() && r.error().code() != ErrorCode::kSandboxDied) {
          ++failed[t];  // a call in flight when the relay died
        } else {
          bad[t] = r.ok() ? "output '" + r->out + "'" : r.error().ToString();
          return;
        }
      }
    });
  }
  auto all = [&](auto& counts, int n) {
    return std::all_of(counts.begin(), counts.end(), [n](auto& c) { return c >= n; });
  };
  EXPECT_TRUE(testing::WaitFor([&] { return all(before, 3); }, std::chrono::seconds(60)));
  // Kill this handle's relay from outside it (the creating handle talks to PID 1 directly).
  auto kill = created->ExecShell(KillNewestRelay());
  ASSERT_TRUE(kill.ok()) << kill.error().ToString();
  killed = true;
  EXPECT_TRUE(testing::WaitFor([&] { return all(after, 5); }, std::chrono::seconds(60)));
  stop = true;
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(bad[t], "") << "thread " << t;
    EXPECT_GE(after[t], 5) << "thread " << t;
    EXPECT_LE(failed[t], 2) << "thread " << t << ": only calls in flight at the drop may fail";
  }
  // One reconnect for all of them: a single relay of this handle is left.
  auto relays = created->ExecShell("n=0; " + ForEachRelay("n=$((n+1))") + "; echo $n");
  ASSERT_TRUE(relays.ok());
  EXPECT_EQ(relays->out, std::to_string(1 + CreatingHandleRelays()) + "\n");
}

// gVisor's own pty: closing stdin types the EOF character, so `cat` ends (after a partial line).
TEST_F(SandboxChannelTest, ClosingStdinOfAPtyEndsAReader) {
  auto sb = MustCreate();
  ASSERT_TRUE(sb);
  auto p =
      sb->StartProcess({"sh", "-c", "stty -echo; cat; echo ended"}, {.pty = true, .timeout = 30});
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  ASSERT_TRUE((*p)->Write("no newline").ok());
  ASSERT_TRUE((*p)->CloseStdin().ok());
  std::string out;
  auto e = (*p)->Wait({[&](std::string_view b) { out.append(b); }, nullptr});
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  EXPECT_FALSE(e->timed_out) << out;
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_THAT(out, HasSubstr("no newline"));
  EXPECT_THAT(out, HasSubstr("ended"));
}

TEST_F(SandboxChannelTest, StoppedSandboxIsReportedAsDied) {
  auto sb = MustCreate();
  ASSERT_TRUE(sb);
  auto other = OpenSandbox(sb->container_name(), sb->host());
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->ExecShell("true").ok());
  ASSERT_TRUE(sb->Stop().ok());
  auto r = (*other)->ReadFile("/etc/hostname");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied) << r.error().ToString();
}

TEST_F(SandboxChannelTest, BackgroundProcessOutlivesTheHandleAndReplaysItsOutput) {
  auto sb = MustCreate();
  ASSERT_TRUE(sb);
  const std::string cname = sb->container_name();
  const std::string host = sb->host();
  // Tick 1, then wait for /tmp/go, which the test makes only once the attachment below has
  // shown tick 1: so tick 1 came from the replay, delivered at once (not held back until the
  // exit), and ticks 2 and 3 came live. No clock decides it.
  auto pid = sb->StartBackground(
      {"sh", "-c",
       "echo tick 1; : > /tmp/ticked; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo tick 2; "
       "echo tick 3"});
  ASSERT_TRUE(pid.ok()) << pid.error().ToString();
  ASSERT_GT(*pid, 0u);
  // Another handle's session: once tick 1 is out, drop this one.
  ASSERT_TRUE(
      testing::WaitFor([&] { return sb->Stat("/tmp/ticked").ok(); }, std::chrono::seconds(30)));
  sb.reset();
  auto again = OpenSandbox(cname, host);
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  auto list = (*again)->ListProcesses();
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].pid, *pid);
  EXPECT_EQ((*list)[0].argv0, "sh");
  EXPECT_TRUE((*list)[0].running);
  // The replay has tick 1; /tmp/go is made from another thread once it arrived (after 60 s
  // without it too, so that a broken replay fails the assertions below instead of hanging).
  std::string out;
  std::promise<void> saw_tick1;
  bool released = false;
  channel::ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view b) {
    out.append(b);
    if (!released && out.find("tick 1\n") != std::string::npos) {
      released = true;
      saw_tick1.set_value();
    }
  };
  std::atomic<bool> go_by_deadline = false;
  std::thread go([&, seen = saw_tick1.get_future()] {
    go_by_deadline = seen.wait_for(std::chrono::seconds(60)) != std::future_status::ready;
    EXPECT_TRUE((*again)->WriteFile("/tmp/go", "").ok());
  });
  auto exit = (*again)->AttachProcess(*pid, cb);
  go.join();
  ASSERT_TRUE(exit.ok()) << exit.error().ToString();
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_EQ(out, "tick 1\ntick 2\ntick 3\n");
  EXPECT_FALSE(go_by_deadline) << "the replay did not bring tick 1 while the process ran";
  // Finished: listed with its code; attaching again replays everything and exits at once.
  list = (*again)->ListProcesses();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_FALSE((*list)[0].running);
  EXPECT_EQ((*list)[0].exit_code, 0);
  out.clear();
  exit = (*again)->AttachProcess(*pid, cb);
  ASSERT_TRUE(exit.ok()) << exit.error().ToString();
  EXPECT_EQ(out, "tick 1\ntick 2\ntick 3\n");
}

TEST_F(SandboxChannelTest, BackgroundProcessSignalAndMissingPid) {
  auto sb = MustCreate();
  ASSERT_TRUE(sb);
  auto pid = sb->StartBackground({"sh", "-c", "echo up; exec sleep 300"});
  ASSERT_TRUE(pid.ok()) << pid.error().ToString();
  std::string out;
  {
    // Attach until it said "up", then detach from the callback: it runs on.
    auto p = sb->AttachProcess(*pid);
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    auto w = (*p)->Wait({[&](std::string_view b) {
                           out.append(b);
                           if (out == "up\n") (void)(*p)->Detach();
                         },
                         nullptr});
    ASSERT_FALSE(w.ok()) << "exited: " << w->exit_code;
    EXPECT_EQ(w.error().code(), ErrorCode::kUnavailable) << w.error().ToString();
  }
  // Signalling leaves it attached to no one: a later attach works, and replays its output.
  ASSERT_TRUE(sb->Signal(*pid, SIGTERM).ok());
  out.clear();
  channel::ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view b) { out.append(b); };
  auto exit = sb->AttachProcess(*pid, cb);
  ASSERT_TRUE(exit.ok()) << exit.error().ToString();
  EXPECT_EQ(exit->exit_code, 128 + SIGTERM);
  EXPECT_EQ(out, "up\n");
  // Signalling one another client is attached to works too.
  auto sleeper = sb->StartBackground({"sleep", "300"});
  ASSERT_TRUE(sleeper.ok());
  auto watching = sb->AttachProcess(*sleeper);
  ASSERT_TRUE(watching.ok());
  auto watcher = std::async(std::launch::async, [&] { return (*watching)->Wait({}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its PROC_ATTACH is in
  auto conflict = sb->Signal(*sleeper, SIGINT);
  EXPECT_TRUE(conflict.ok()) << conflict.error().ToString();
  auto watched = watcher.get();
  ASSERT_TRUE(watched.ok()) << watched.error().ToString();
  EXPECT_EQ(watched->exit_code, 128 + SIGINT);
  // A finished process takes signals quietly; a pid that is no background process is kNotFound.
  EXPECT_TRUE(sb->Signal(*pid, SIGKILL).ok());
  auto missing = sb->AttachProcess(999999, cb);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.error().message(), HasSubstr("999999"));
  auto sig = sb->Signal(999999, SIGTERM);
  ASSERT_FALSE(sig.ok());
  EXPECT_EQ(sig.error().code(), ErrorCode::kNotFound);
  // Interactive attach: stdin reaches a background process started with one; destroying the
  // Process detaches, and the process keeps running.
  auto cat = sb->StartBackground({"cat"}, {.stdin = true});
  ASSERT_TRUE(cat.ok()) << cat.error().ToString();
  {
    auto p = sb->AttachProcess(*cat);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->Write("hello\n").ok());
  }
  auto p = sb->AttachProcess(*cat);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->CloseStdin().ok());
  out.clear();
  auto cat_exit = (*p)->Wait(cb);
  ASSERT_TRUE(cat_exit.ok()) << cat_exit.error().ToString();
  EXPECT_EQ(cat_exit->exit_code, 0);
  EXPECT_EQ(out, "hello\n");
  // Detach from another thread while Wait runs: Wait returns, the process runs on, and the same
  // handle attaches again at once (DETACH on the handle's own channel, no new session).
  auto ticker = sb->StartBackground({"sh", "-c", "while :; do echo t; sleep 0.1; done"});
  ASSERT_TRUE(ticker.ok());
  for (int round = 0; round < 3; ++round) {
    auto t = sb->AttachProcess(*ticker);
    ASSERT_TRUE(t.ok()) << t.error().ToString();
    Process& tp = **t;
    auto w = tp.Wait({[&](std::string_view) { (void)tp.Detach(); }, nullptr});
    ASSERT_FALSE(w.ok());
    EXPECT_THAT(w.error().message(), HasSubstr("detached"));
  }
  auto procs = sb->ListProcesses();
  ASSERT_TRUE(procs.ok());
  bool running = false;
  for (const auto& pi : *procs) running |= pi.pid == *ticker && pi.running;
  EXPECT_TRUE(running);
  ASSERT_TRUE(sb->Signal(*ticker, SIGKILL).ok());
}

}  // namespace
}  // namespace agvisor
