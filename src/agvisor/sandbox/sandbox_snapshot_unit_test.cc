// Snapshots and forks without Docker: the pure pieces (image names, the paths left out, fork
// names, the import's quoted `changes`) and the refusals on the fake runtime, which makes no
// images (kUnsupported) and whose anonymous sandboxes cannot be forked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/fake_runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/snapshot.h"

namespace agvisor {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SnapshotUnitTest, ImageNamesGetATagAndBadOnesAreRefused) {
  EXPECT_EQ(NormalizeSnapshotImage("snap/app").value(), "snap/app:latest");
  EXPECT_EQ(NormalizeSnapshotImage("snap/app:v1").value(), "snap/app:v1");
  EXPECT_EQ(NormalizeSnapshotImage("localhost:5000/app").value(), "localhost:5000/app:latest");
  for (const char* bad : {"", "-rm", "app@sha256:00", "a b", "app;rm", "agvisor/with-agent:x",
                          "agvisor/with-agent"}) {
    auto r = NormalizeSnapshotImage(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
}

TEST(SnapshotUnitTest, TheExcludedPaths) {
  auto without = SnapshotExcludes(false);
  EXPECT_THAT(without, ::testing::Contains("/proc"));
  EXPECT_THAT(without, ::testing::Contains("/sys"));
  EXPECT_THAT(without, ::testing::Contains("/dev"));
  EXPECT_THAT(without, ::testing::Contains(std::string(kAgentDir)));
  EXPECT_THAT(without, ::testing::Contains("/workspace"));
  EXPECT_THAT(SnapshotExcludes(true), ::testing::Not(::testing::Contains("/workspace")));
}

TEST(SnapshotUnitTest, ForkNamesAreValidatedAndCounted) {
  ForkOptions o;
  o.count = 3;
  EXPECT_THAT(ForkNames("app", o).value(), ElementsAre("app-fork-1", "app-fork-2", "app-fork-3"));
  o.prefix = "try";
  EXPECT_THAT(ForkNames("app", o).value(), ElementsAre("try-1", "try-2", "try-3"));
  for (int bad : {0, -1, kMaxForkCount + 1}) {
    o.count = bad;
    EXPECT_EQ(ForkNames("app", o).error().code(), ErrorCode::kInvalidArgument) << bad;
  }
  o.count = 1;
  o.prefix = std::string(62, 'a');  // "-1" makes 64 characters
  EXPECT_EQ(ForkNames("app", o).error().code(), ErrorCode::kInvalidArgument);
  o.prefix = "../x";
  EXPECT_EQ(ForkNames("app", o).error().code(), ErrorCode::kInvalidArgument);
}

TEST(SnapshotUnitTest, ImportChangesAreQuotedSoNothingExpandsOrSplits) {
  ImageConfig c;
  c.env = {"PATH=/usr/bin:/bin", "MSG=a \"quoted\" $HOME \\ value"};
  c.working_dir = "/srv/my app";
  c.user = "1000:1000";
  c.labels = {{"org.example.team", "core"}};
  auto changes = ImportChanges(c);
  ASSERT_TRUE(changes.ok()) << changes.error().ToString();
  EXPECT_THAT(*changes, ElementsAre("ENV PATH=\"/usr/bin:/bin\"",
                                    "ENV MSG=\"a \\\"quoted\\\" \\$HOME \\\\ value\"",
                                    "WORKDIR \"/srv/my app\"", "USER \"1000:1000\"",
                                    "LABEL org.example.team=\"core\""));
  // A newline would add a Dockerfile line of its own: refused, as are odd names.
  ImageConfig nl;
  nl.env = {"X=a\nUSER root"};
  EXPECT_EQ(ImportChanges(nl).error().code(), ErrorCode::kInvalidArgument);
  ImageConfig key;
  key.env = {"A B=c"};
  EXPECT_EQ(ImportChanges(key).error().code(), ErrorCode::kInvalidArgument);
  ImageConfig label;
  label.labels = {{"a=b", "c"}};
  EXPECT_EQ(ImportChanges(label).error().code(), ErrorCode::kInvalidArgument);
}

constexpr const char* kHost = "";

TEST(SnapshotUnitTest, TheFakeRuntimeRefusesSnapshotsAndAnonymousSandboxesCannotFork) {
  auto rt = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
  ScopedRuntimeOverride guard{kHost, rt};
  auto sb = Sandbox::Create(SandboxSpec{});
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  SnapshotOptions o;
  o.image = "snap/x:1";
  auto r = (*sb)->Snapshot(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnsupported) << r.error().ToString();
  EXPECT_THAT(r.error().message(), HasSubstr("makes no images"));
  o.image = "-x";
  EXPECT_EQ((*sb)->Snapshot(o).error().code(), ErrorCode::kInvalidArgument);
  auto f = Fork(**sb, ForkOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(f.error().message(), HasSubstr("only a named sandbox"));
  (void)(*sb)->Stop();
}

}  // namespace
}  // namespace agvisor
