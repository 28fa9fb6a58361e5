// Data integrity across the lifecycle (issue 19 item 6; docs/lifecycle.md, "Data integrity";
// part of the reliability suite, docs/reliability.md), against the real dockerd + runsc: a
// hashed /workspace tree (random files, a few MB) and a hashed root file system change (/opt)
// are byte-identical after pause/resume, a live resize, a snapshot then fork (in the fork), an
// agvisord restart while the daemon holds the sandbox paused (still paused after it, until
// resumed); /workspace survives an idle stop (idle_action stop) and an explicit stop, each then
// resumed by its name, and the root fs change made since the create does not, as documented.
//
// The tests share one named sandbox and run in their declared order (each step builds on the
// one before, so the suite makes only 4 sandboxes and one snapshot). Every hash is computed
// inside the sandbox over names, types, modes, owners, link targets and contents; the first test
// proves it changes when one byte or one mode bit does. Each step prints its figures as
// "FIGURE name value" (bytes hashed, milliseconds). The suite starts an agvisord: run it under
// `flock /tmp/agvisor-egress.lock`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "agvisor/base/subprocess.h"
#include "agvisor/client/agvisord.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/snapshot.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;
using testing::RunId;
using testing::TestSpec;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

void Figure(const std::string& name, const std::string& value) {
  std::printf("FIGURE %s %s\n", name.c_str(), value.c_str());
  std::fflush(stdout);
}

long long MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// /workspace/integ: 12 random files of 60-720 kB (4.68 MB) in nested directories, one 0600 and
// owned by 1234:2345, an empty file, a symlink. /opt/integ: the root file system change, 3 random
// files (1.2 MB) and a symlink.
constexpr const char* kMakeTrees = R"SH(set -e
mkdir -p /workspace/integ/a/b /workspace/integ/c /opt/integ
i=0
for d in a a/b c; do for n in 1 2 3 4; do
  i=$((i+1)); head -c $((60000*i)) /dev/urandom > /workspace/integ/$d/f$n
done; done
chmod 600 /workspace/integ/a/b/f2 && chown 1234:2345 /workspace/integ/a/b/f2
: > /workspace/integ/c/empty && ln -s a/b/f3 /workspace/integ/link
for n in 1 2 3; do head -c 400000 /dev/urandom > /opt/integ/r$n; done
ln -s /opt/integ/r1 /opt/integ/link
)SH";

using testing::kHashTrees;

struct TreeHash {
  std::string line;  // "<sha256> <bytes> <entries>", or "absent"
  long long bytes = 0;
  bool operator==(const TreeHash& o) const { return line == o.line; }
};
void PrintTo(const TreeHash& h, std::ostream* os) { *os << h.line; }

class IntegrityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/agvisor-integrity-it-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = new std::string(tmpl);
  }
  static void TearDownTestSuite() {
    StopDaemon();
    delete source_;
    source_ = nullptr;
    testing::CleanupRun();
    // The snapshot image and the image with the agent derived from it (same label), children
    // first.
    if (auto docker = ConnectDockerHost(""); docker.ok()) {
      for (int round = 0; round < 3; ++round) {
        auto images = (*docker)->ListImages({"agvisor.snapshot.of=" + SourceName()});
        if (!images.ok() || images->empty()) break;
        for (const auto& i : *images) (void)(*docker)->RemoveImage(i.id, /*force=*/true);
      }
    }
    if (dir_) std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
    Figure("integrity_bytes_hashed_total", std::to_string(bytes_hashed_));
  }

  static std::string SourceName() { return RunId() + "-integ"; }
  static SandboxSpec SourceSpec() { return TestSpec("integ"); }

  // Hashes the trees at `dirs` inside, in one exec through `exec` (any place's Exec), counting
  // the bytes read. On failure, the error in place of each hash.
  template <typename Exec>
  static std::vector<TreeHash> Hash(Exec&& exec, const std::vector<std::string>& dirs,
                                    double timeout = 60) {
    ExecOptions o;
    o.timeout = timeout;
    std::vector<std::string> argv = {"sh", "-c", kHashTrees, "sh"};
    argv.insert(argv.end(), dirs.begin(), dirs.end());
    Result<ExecResult> r = exec(argv, o);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    std::vector<TreeHash> out(dirs.size(),
                              {r.ok() ? "exec failed: " + r->err : r.error().ToString()});
    if (!r.ok()) return out;
    EXPECT_EQ(r->exit_code, 0) << r->err;
    std::istringstream lines(r->out);
    for (auto& h : out) {
      if (!std::getline(lines, h.line)) break;
      if (h.line == "absent") continue;
      h.bytes = std::atoll(h.line.substr(h.line.find(' ') + 1).c_str());
      bytes_hashed_ += h.bytes;
    }
    return out;
  }
  // An exec's timeout must stay below the sandbox's idle_ttl (the fork's is kForkIdleTtl).
  static double TimeoutFor(Sandbox& sb) {
    return sb.name() && sb.name()->starts_with(RunId() + "-ifk") ? kForkIdleTtl - 1 : 60;
  }
  static std::vector<TreeHash> Hash(Sandbox& sb, const std::vector<std::string>& dirs) {
    return Hash([&](const std::vector<std::string>& argv,
                    const ExecOptions& o) { return sb.Exec(argv, o); },
                dirs, TimeoutFor(sb));
  }
  static TreeHash HashWorkspace(Sandbox& sb) { return Hash(sb, {kWorkspaceTree})[0]; }
  static std::string Sh(Sandbox& sb, const std::string& script) {
    auto r = sb.ExecShell(script, {.timeout = TimeoutFor(sb)});
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << script << ": " << r->err;
    return r->out;
  }
  // Both hashed trees of `sb` against the ones taken after the create.
  template <typename Exec>
  static void ExpectBothTreesKept(Exec&& exec, const std::string& step, double timeout = 60) {
    auto t0 = Clock::now();
    auto now = Hash(exec, {kWorkspaceTree, kRootFsTree}, timeout);
    Figure("integrity_" + step + "_hash_ms", std::to_string(MsSince(t0)));
    EXPECT_EQ(now[0], *workspace_) << step << ": /workspace";
    EXPECT_EQ(now[1], *rootfs_) << step << ": the root fs change";
  }
  static void ExpectBothTreesKept(Sandbox& sb, const std::string& step) {
    ExpectBothTreesKept([&](const std::vector<std::string>& argv,
                            const ExecOptions& o) { return sb.Exec(argv, o); },
                        step, TimeoutFor(sb));
  }

  static void StartDaemon() {
    std::filesystem::remove(*dir_ + "/agvisord.log");
    auto p = Subprocess::Spawn(
        {.argv = {"sh", "-c", "exec \"$0\" --socket \"$1\" --token-file \"$2\" 2>\"$3\"",
                  AGVISORD_BINARY, *dir_ + "/agvisord.sock", *dir_ + "/token",
                  *dir_ + "/agvisord.log"}});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    daemon_ = new Subprocess(std::move(*p));
    ASSERT_TRUE(testing::WaitFor(
        [] {
          return testing::ReadAll(*dir_ + "/agvisord.log").find("agvisord listening") !=
                 std::string::npos;
        },
        20s))
        << testing::ReadAll(*dir_ + "/agvisord.log");
  }
  // SIGTERM, as a service manager stops it; it must exit cleanly.
  static void StopDaemon() {
    if (!daemon_) return;
    EXPECT_TRUE(daemon_->Kill(SIGTERM).ok());
    auto st = daemon_->WaitFor(50s);
    EXPECT_TRUE(st.ok() && st->success()) << "agvisord did not exit cleanly after SIGTERM";
    delete daemon_;  // kills and reaps, should it still run
    daemon_ = nullptr;
  }
  static std::string DockerState(const std::string& container) {
    auto r = RunCommand({"docker", "inspect", "-f", "{{.State.Status}}", container});
    return r.ok() ? r->out : "inspect failed";
  }

  static constexpr int kForkIdleTtl = 6;
  static constexpr const char* kWorkspaceTree = "/workspace/integ";
  static constexpr const char* kRootFsTree = "/opt/integ";
  static inline std::string* dir_ = nullptr;
  static inline Subprocess* daemon_ = nullptr;
  static inline Sandbox* source_ = nullptr;
  static inline std::optional<TreeHash> workspace_, rootfs_;
  static inline std::optional<SnapshotResult> snapshot_;
  static inline long long bytes_hashed_ = 0;
};

// The trees, and proof that the hash sees a changed byte, a changed mode bit and a removed
// file (so every later comparison can fail); then pause/resume keeps both.
TEST_F(IntegrityTest, HashSeesEveryChangeAndBothTreesSurvivePauseResume) {
  auto t0 = Clock::now();
  auto sb = CreateSandbox(SourceSpec());
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  source_ = sb->release();
  Figure("integrity_create_ms", std::to_string(MsSince(t0)));
  t0 = Clock::now();
  Sh(*source_, kMakeTrees);
  Figure("integrity_write_trees_ms", std::to_string(MsSince(t0)));
  auto first = Hash(*source_, {kWorkspaceTree, kRootFsTree});
  workspace_ = first[0];
  rootfs_ = first[1];
  ASSERT_GT(workspace_->bytes, 4'000'000) << workspace_->line;
  ASSERT_GT(rootfs_->bytes, 1'000'000) << rootfs_->line;
  Figure("integrity_workspace_tree", workspace_->line);
  Figure("integrity_rootfs_tree", rootfs_->line);

  // One byte in the middle of one file, one mode bit, one file gone: each changes the hash.
  // Each is undone from a copy, and the hash is the first one again. (One exec: $0 is the hash
  // script.)
  t0 = Clock::now();
  auto changed = source_->Exec({"sh", "-c", R"SH(set -e
f=/workspace/integ/a/b/f3
h() { sh -c "$0" sh /workspace/integ; }
cp -p $f /tmp/orig
printf '\001' | dd of=$f bs=1 seek=300000 conv=notrunc status=none
if cmp -s $f /tmp/orig; then echo the byte did not change >&2; exit 1; fi
h
cp -p /tmp/orig $f && chmod 640 $f && h
mv $f /tmp/moved && h
mv /tmp/moved $f && chmod 644 $f && h
)SH",
                                kHashTrees},
                               {.timeout = 60});
  ASSERT_TRUE(changed.ok()) << changed.error().ToString();
  ASSERT_EQ(changed->exit_code, 0) << changed->err;
  std::istringstream lines(changed->out);
  for (const char* change : {"a byte", "a mode bit", "a file gone", "all undone"}) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line)) << changed->out;
    bytes_hashed_ += std::atoll(line.substr(line.find(' ') + 1).c_str());
    if (std::string_view(change) == "all undone") {
      EXPECT_EQ(line, workspace_->line) << change;
    } else {
      EXPECT_NE(line, workspace_->line) << change;
    }
  }
  Figure("integrity_hash_sees_changes_ms", std::to_string(MsSince(t0)));

  t0 = Clock::now();
  ASSERT_TRUE(source_->Pause().ok());
  Figure("integrity_pause_ms", std::to_string(MsSince(t0)));
  EXPECT_EQ(DockerState(source_->container_name()), "paused\n");
  t0 = Clock::now();
  ASSERT_TRUE(source_->Resume().ok());
  Figure("integrity_resume_ms", std::to_string(MsSince(t0)));
  EXPECT_EQ(DockerState(source_->container_name()), "running\n");
  ExpectBothTreesKept(*source_, "pause_resume");
}

// Down and up again: memory, cpus and pids written live; the trees are untouched.
TEST_F(IntegrityTest, BothTreesSurviveALiveResize) {
  ASSERT_TRUE(source_ && workspace_);
  auto t0 = Clock::now();
  auto down = source_->Update({.cpus = 0.5, .memory = "384m", .pids = 256});
  ASSERT_TRUE(down.ok()) << down.error().ToString();
  EXPECT_EQ(down->memory_bytes, 384ll << 20);
  auto up = source_->Update({.cpus = 2, .memory = "768m", .pids = 2048});
  ASSERT_TRUE(up.ok()) << up.error().ToString();
  EXPECT_EQ(up->memory_bytes, 768ll << 20);
  Figure("integrity_resize_two_updates_ms", std::to_string(MsSince(t0)));
  ExpectBothTreesKept(*source_, "resize");
}

// A fork of 1 (a snapshot with /workspace, then a create from it): both trees are in the fork.
// The fork runs under idle_action stop: at its idle_ttl it stops, and its name, created again,
// has /workspace but not the root fs change the fork made after its create.
TEST_F(IntegrityTest, SnapshotThenForkCarriesBothTreesAndAnIdleStopKeepsOnlyTheWorkspace) {
  ASSERT_TRUE(source_ && workspace_);
  constexpr int kIdleTtl = kForkIdleTtl;
  ForkOptions o;
  o.count = 1;
  o.prefix = RunId() + "-ifk";
  o.image = "integrity-" + RunId();
  o.spec = TestSpec();
  o.spec.idle_ttl = kIdleTtl;
  o.spec.idle_action = "stop";
  auto t0 = Clock::now();
  auto f = Fork(*source_, o);
  ASSERT_TRUE(f.ok()) << f.error().ToString();
  ASSERT_EQ(f->sandboxes.size(), 1u);
  snapshot_ = f->snapshot;
  Figure("integrity_fork_ms", std::to_string(MsSince(t0)));
  Figure("integrity_fork_snapshot_ms",
         std::to_string(static_cast<long long>(f->snapshot.seconds * 1000)));
  Figure("integrity_fork_snapshot_stream_bytes", std::to_string(f->snapshot.bytes));
  Sandbox& fork = *f->sandboxes[0];
  ExpectBothTreesKept(fork, "fork");
  // A root fs change of the fork's own, then idle until it stops (bound: 3x idle_ttl, a start).
  Sh(fork, "echo made-after-create > /opt/integ-after");
  t0 = Clock::now();
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto i = fork.Info();
        return i.ok() && !i->running;
      },
      std::chrono::seconds(3 * kIdleTtl + 5)));
  Figure("integrity_idle_stop_after_ms", std::to_string(MsSince(t0)));
  auto info = fork.Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->end_reason, EndReason::kIdle);
  EXPECT_EQ(DockerState(fork.container_name()), "exited\n");  // kept, as idle_action stop says
  // Its name again (the fork's image, spec): a fresh container on the same /workspace.
  SandboxSpec again = o.spec;
  again.name = *fork.name();
  again.image = f->snapshot.image;
  t0 = Clock::now();
  auto back = CreateSandbox(again);
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  Figure("integrity_idle_stop_resume_ms", std::to_string(MsSince(t0)));
  EXPECT_EQ(HashWorkspace(**back), *workspace_) << "idle stop: /workspace";
  EXPECT_EQ(Sh(**back, "cat /opt/integ-after 2>/dev/null; echo end"), "end\n")
      << "the root fs change made after the create survived a stop";
  ASSERT_TRUE((*back)->Delete().ok());
}

// agvisord pauses the sandbox, is stopped (SIGTERM) and started again: in between and after it
// the sandbox stays paused (Docker's state, the new daemon's list, a call asked not to resume is
// refused); resumed through the new daemon, both trees hash as before.
TEST_F(IntegrityTest, AnAgvisordRestartWhilePausedKeepsItPausedAndBothTrees) {
  ASSERT_TRUE(source_ && workspace_);
  const std::string cname = source_->container_name();
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string address = "unix:" + *dir_ + "/agvisord.sock";
  {
    auto place = client::Agvisord(address, *dir_ + "/token");
    ASSERT_TRUE(place.ok()) << place.error().ToString();
    ASSERT_TRUE((*place)->Pause(cname).ok());
  }
  auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(StopDaemon());
  EXPECT_EQ(DockerState(cname), "paused\n") << "the daemon's stop thawed it";
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  Figure("integrity_agvisord_restart_ms", std::to_string(MsSince(t0)));
  auto place = client::Agvisord(address, *dir_ + "/token");
  ASSERT_TRUE(place.ok()) << place.error().ToString();
  auto list = (*place)->List();
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  std::string listed = "absent";
  for (const auto& i : *list) {
    if (i.container_name == cname) listed = i.state;
  }
  EXPECT_EQ(listed, "paused");
  auto h = (*place)->Open(cname);
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  (*h)->SetAutoResume(false);
  auto refused = (*h)->Exec({"true"}, {});
  ASSERT_FALSE(refused.ok()) << "a call asked not to resume ran on the restarted daemon";
  EXPECT_EQ(refused.error().code(), ErrorCode::kConflict) << refused.error().ToString();
  EXPECT_THAT(refused.error().message(), HasSubstr("is paused"));
  // A file read streams past the client's plain calls: it is refused all the same.
  auto read = (*h)->ReadFile("/etc/hostname");
  ASSERT_FALSE(read.ok()) << "a file read asked not to resume resumed the sandbox";
  EXPECT_EQ(read.error().code(), ErrorCode::kConflict) << read.error().ToString();
  EXPECT_EQ(DockerState(cname), "paused\n");
  t0 = Clock::now();
  ASSERT_TRUE((*place)->Resume(cname).ok());
  Figure("integrity_agvisord_resume_ms", std::to_string(MsSince(t0)));
  EXPECT_EQ(DockerState(cname), "running\n");
  (*h)->SetAutoResume(true);
  auto exec = [&](const std::vector<std::string>& argv, const ExecOptions& eo) {
    return (*h)->Exec(argv, eo);
  };
  ExpectBothTreesKept(exec, "agvisord_restart");
  ASSERT_NO_FATAL_FAILURE(StopDaemon());
}

// Stop, then the name again: /workspace is the same tree; the root fs change is gone (as any
// stop under gVisor: docs/lifecycle.md).
TEST_F(IntegrityTest, AStopThenResumeKeepsTheWorkspaceAndLosesTheRootFsChange) {
  ASSERT_TRUE(source_ && workspace_);
  auto t0 = Clock::now();
  ASSERT_TRUE(source_->Stop().ok());
  auto back = CreateSandbox(SourceSpec());
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  Figure("integrity_stop_resume_ms", std::to_string(MsSince(t0)));
  auto after = Hash(**back, {kWorkspaceTree, kRootFsTree});
  EXPECT_EQ(after[0], *workspace_) << "stop: /workspace";
  EXPECT_EQ(after[1].line, "absent")
      << "the root fs change survived a stop (docs/lifecycle.md says it does not)";
  ASSERT_TRUE((*back)->Delete().ok());
}

}  // namespace
}  // namespace agvisor
