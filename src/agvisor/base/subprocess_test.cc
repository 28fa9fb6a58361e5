#include "agvisor/base/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace agvisor {
namespace {

TEST(SubprocessTest, RunCommandCapturesBothStreamsAndInput) {
  auto r = RunCommand({"sh", "-c", "cat; echo err >&2; exit 3"}, "hello");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "hello");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->status.exit_code, 3);
  EXPECT_FALSE(r->status.success());
}

TEST(SubprocessTest, LargeOutputDoesNotDeadlock) {
  auto r = RunCommand({"sh", "-c", "head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out.size(), 3000000u);
  EXPECT_EQ(r->err.size(), 3000000u);
}

TEST(SubprocessTest, MissingProgramIsNotFound) {
  auto r = RunCommand({"agvisor-no-such-program-xyz"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
}

TEST(SubprocessTest, DestructorKillsAndReaps) {
  pid_t pid;
  {
    auto p = Subprocess::Spawn({.argv = {"sleep", "60"}});
    ASSERT_TRUE(p.ok());
    pid = p->pid();
    EXPECT_EQ(::kill(pid, 0), 0);
  }
  EXPECT_EQ(::kill(pid, 0), -1);  // reaped: the pid no longer exists
}

TEST(SubprocessTest, WaitForTimesOutThenKillReportsSignal) {
  auto p = Subprocess::Spawn({.argv = {"sleep", "60"}});
  ASSERT_TRUE(p.ok());
  auto w = p->WaitFor(std::chrono::milliseconds(50));
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), ErrorCode::kTimeout);
  ASSERT_TRUE(p->Kill(SIGTERM).ok());
  auto s = p->Wait();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->signal, SIGTERM);
}

}  // namespace
}  // namespace agvisor
