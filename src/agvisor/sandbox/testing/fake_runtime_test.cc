// The fake runtime's own promises, which the sandbox layer's unit tests build on: an instance
// runs the real agent (a channel through its connect relay works), an exec runs locally, state
// and failures change on request, and everything is recorded.
#include "agvisor/sandbox/testing/fake_runtime.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "agvisor/channel/channel.h"
#include "agvisor/sandbox/agent_paths.h"

namespace agvisor {
namespace {

TEST(FakeRuntimeTest, AnInstanceRunsTheAgentAndServesAChannelThroughTheRelay) {
  FakeRuntime rt("fake://a", AGVISOR_AGENT_BINARY);
  auto id = rt.AddInstance("agvisor-a", {.labels = {{"agvisor", "1"}}});
  ASSERT_TRUE(id.ok()) << id.error().ToString();
  auto t = rt.OpenExecStream(*id, {std::string(kAgentPath), "connect"}, [](std::string_view) {});
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  auto ch = channel::Channel::Open(std::move(*t));
  ASSERT_TRUE(ch.ok()) << ch.error().ToString();
  std::string out;
  auto e = (*ch)->Exec({.argv = {"sh", "-c", "echo hi"}},
                       {[&](std::string_view b) { out.append(b); }, [](std::string_view) {}});
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(out, "hi\n");
  EXPECT_EQ(rt.CallCount("OpenExecStream"), 1);
}

TEST(FakeRuntimeTest, RunExecRunsLocallyWithItsExitCodeAndStreams) {
  FakeRuntime rt("fake://a", AGVISOR_AGENT_BINARY);
  auto id = rt.AddInstance("agvisor-a", {});
  ASSERT_TRUE(id.ok());
  std::string out, err;
  auto code = rt.RunExec(
      *id, {"sh", "-c", "echo out; echo err >&2; exit 3"},
      [&](std::string_view b) -> Result<void> {
        out.append(b);
        return Ok();
      },
      [&](std::string_view b) { err.append(b); });
  ASSERT_TRUE(code.ok()) << code.error().ToString();
  EXPECT_EQ(*code, 3);
  EXPECT_EQ(out, "out\n");
  EXPECT_EQ(err, "err\n");
  // A sink that refuses stops the exec with its error.
  auto stopped = rt.RunExec(
      *id, {"sh", "-c", "yes"},
      [](std::string_view) -> Result<void> { return Error::Internal("enough"); },
      [](std::string_view) {});
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.error().message(), "enough");
}

TEST(FakeRuntimeTest, KilledAgentIsExitedAndExecsAreRefused) {
  FakeRuntime rt("fake://a", AGVISOR_AGENT_BINARY);
  auto id = rt.AddInstance("agvisor-a", {});
  ASSERT_TRUE(id.ok());
  rt.KillAgent("agvisor-a", SIGKILL);
  auto info = rt.Inspect("agvisor-a");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state.status, "exited");
  EXPECT_FALSE(info->state.running);
  EXPECT_EQ(info->state.exit_code, 137);
  auto t = rt.OpenExecStream(*id, {std::string(kAgentPath), "connect"}, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), ErrorCode::kConflict);
}

TEST(FakeRuntimeTest, ListFiltersByLabelAndRemoveForgets) {
  FakeRuntime rt("fake://a", AGVISOR_AGENT_BINARY);
  ASSERT_TRUE(rt.AddInstance("agvisor-a", {.labels = {{"agvisor", "1"}, {"x", "1"}}}).ok());
  ASSERT_TRUE(
      rt.AddInstance("agvisor-b", {.labels = {{"agvisor", "1"}}, .status = "created"}).ok());
  ASSERT_TRUE(rt.AddInstance("other", {}).ok());
  auto all = rt.List({"agvisor"});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  auto x = rt.List({"agvisor", "x=1"});
  ASSERT_TRUE(x.ok());
  ASSERT_EQ(x->size(), 1u);
  EXPECT_EQ(x->front().name, "agvisor-a");
  EXPECT_EQ(rt.Remove("agvisor-a").value(), true);
  EXPECT_EQ(rt.Remove("agvisor-a").value(), false);
  auto gone = rt.Inspect("agvisor-a");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(rt.Snapshot(), (std::set<std::string>{"instance agvisor-b", "instance other"}));
}

TEST(FakeRuntimeTest, FailNextFailsThatManyCallsAndIsRecorded) {
  FakeRuntime rt("fake://a", AGVISOR_AGENT_BINARY);
  rt.FailNext("EnsureVolume", Error::Unavailable("injected"), 1);
  auto first = rt.EnsureVolume("agvisor-v", {});
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.error().code(), ErrorCode::kUnavailable);
  EXPECT_FALSE(rt.HasVolume("agvisor-v"));
  EXPECT_EQ(rt.EnsureVolume("agvisor-v", {}).value(), true);
  EXPECT_EQ(rt.EnsureVolume("agvisor-v", {}).value(), false);
  EXPECT_EQ(rt.CallCount("EnsureVolume"), 3);
  EXPECT_EQ(rt.RemoveVolume("agvisor-v").value(), true);
  EXPECT_EQ(rt.RemoveVolume("agvisor-v").value(), false);
}

}  // namespace
}  // namespace agvisor
