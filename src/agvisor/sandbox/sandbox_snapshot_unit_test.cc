// Snapshots and forks without Docker: the pure pieces (image names, the paths left out, fork
// names, the import's quoted `changes`) and the refusals on the fake runtime, which makes no
// images (kUnsupported), for forks of anonymous sandboxes too, and refuses to remove any other
// image.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/snapshot.h"
#include "agvisor/sandbox/testing/fake_runtime.h"

namespace agvisor {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Issue 32 point 1: a snapshot is a tag in agvisor's snapshot repository, never another
// repository's image (the default image, a host container's image).
TEST(SnapshotUnitTest, SnapshotsGoOnlyToTheSnapshotRepository) {
  EXPECT_EQ(NormalizeSnapshotImage("v1").value(), "agvisor/snapshot:v1");
  EXPECT_EQ(NormalizeSnapshotImage("snapshot:app-v1").value(), "agvisor/snapshot:app-v1");
  EXPECT_EQ(NormalizeSnapshotImage("agvisor/snapshot:App_1.2").value(), "agvisor/snapshot:App_1.2");
  EXPECT_EQ(NormalizeSnapshotImage("debian").value(), "agvisor/snapshot:debian");
  for (const char* bad : {"agvisor/base:latest",
                          "agvisor/base",
                          "debian:bookworm",
                          "agvisor/desktop:latest",
                          "agvisor/with-agent:x",
                          "agvisor/with-agent",
                          "localhost:5000/app",
                          "snap/app:v1",
                          "agvisor/snapshot",
                          "agvisor/snapshot:",
                          "agvisor/snapshot/x:v1",
                          "snapshot:",
                          "snapshot:a:b",
                          "",
                          "-rm",
                          ".x",
                          "app@sha256:00",
                          "a b",
                          "app;rm",
                          "a\nb"}) {
    auto r = NormalizeSnapshotImage(bad);
    ASSERT_FALSE(r.ok()) << bad << " -> " << r.value();
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_FALSE(NormalizeSnapshotImage(std::string(129, 'a')).ok());
  EXPECT_TRUE(NormalizeSnapshotImage(std::string(128, 'a')).ok());
  EXPECT_THAT(NormalizeSnapshotImage("debian:bookworm").error().message(),
              HasSubstr("made only as agvisor/snapshot:TAG"));
}

TEST(SnapshotUnitTest, TheRepositoryIsConfigurableButNeverOneOfAgvisorsOwn) {
  EXPECT_EQ(NormalizeSnapshotImage("v1", "registry.local:5000/team/snaps").value(),
            "registry.local:5000/team/snaps:v1");
  EXPECT_EQ(
      NormalizeSnapshotImage("registry.local:5000/team/snaps:v1", "registry.local:5000/team/snaps")
          .value(),
      "registry.local:5000/team/snaps:v1");
  EXPECT_FALSE(NormalizeSnapshotImage("agvisor/snapshot:v1", "team/snaps").ok());
  for (const char* ok :
       {"agvisor/snapshot", "snaps", "team/my_snaps", "a.b-c/d__e", "localhost/snaps",
        "localhost:5000/snaps", "Reg.Example:443/x", "agvisor/snapshot/team", "agvisor-snaps",
        "reg.example/agvisor/snapshot"}) {
    EXPECT_TRUE(ValidateSnapshotRepository(ok).ok()) << ok;
  }
  for (const char* bad : {"",
                          "agvisor/with-agent",
                          "agvisor/base",
                          "agvisor/desktop",
                          "agvisor",
                          "agvisor/agent",
                          "agvisor/snapshots",
                          "agvisor/snapshot-x",
                          "Agvisor/snapshot",
                          "snaps:v1",
                          "snaps@sha256:00",
                          "/snaps",
                          "snaps/",
                          "a//b",
                          "-x/y",
                          "x-/y",
                          "reg:port/x",
                          "a b",
                          "x_-y",
                          "reg.example/agvisor/base",
                          "localhost:5000/agvisor/with-agent"}) {
    auto r = ValidateSnapshotRepository(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
  // The process's repository (agvisord's --snapshot-repository), put back at the end.
  struct Restore {
    ~Restore() { (void)SetSnapshotRepository(kDefaultSnapshotRepository); }
  } restore;
  EXPECT_EQ(SnapshotRepository(), kDefaultSnapshotRepository);
  EXPECT_FALSE(SetSnapshotRepository("agvisor/base").ok());
  EXPECT_EQ(SnapshotRepository(), kDefaultSnapshotRepository);
  ASSERT_TRUE(SetSnapshotRepository("team/snaps").ok());
  EXPECT_EQ(NormalizeSnapshotImage("v1").value(), "team/snaps:v1");
  EXPECT_EQ(ResolveSnapshotImage("snapshot:v1").value(), "team/snaps:v1");
}

TEST(SnapshotUnitTest, CreateResolvesSnapshotTagsAndLeavesOtherImagesAlone) {
  EXPECT_EQ(ResolveSnapshotImage("snapshot:v1").value(), "agvisor/snapshot:v1");
  EXPECT_EQ(ResolveSnapshotImage("debian:bookworm").value(), "debian:bookworm");
  EXPECT_EQ(ResolveSnapshotImage("agvisor/snapshot:v1").value(), "agvisor/snapshot:v1");
  EXPECT_EQ(ResolveSnapshotImage("snapshot:a/b").error().code(), ErrorCode::kInvalidArgument);
  // The spec's check refuses a bad snapshot tag before any request.
  EXPECT_TRUE(ValidateImage("snapshot:v1").ok());
  EXPECT_EQ(ValidateImage("snapshot:-x").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ValidateImage("snapshot:").error().code(), ErrorCode::kInvalidArgument);
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

// `create --image snapshot:TAG` starts from the snapshot: what the runtime is asked to prepare.
TEST(SnapshotUnitTest, CreateFromSnapshotTagPreparesTheSnapshotImage) {
  auto rt = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
  SandboxSpec spec;
  spec.image = "snapshot:v1";
  auto sb = Sandbox::Create(rt, spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto made = rt->CreatedSpec((*sb)->container_name());
  ASSERT_TRUE(made);
  EXPECT_EQ(made->source_image, "agvisor/snapshot:v1");
  EXPECT_EQ(made->image, "fake/with-agent:agvisor/snapshot:v1");
  (void)(*sb)->Stop();
}

// A tag in the snapshot repository that exists but was not made as a snapshot (no
// agvisor.snapshot.id: someone tagged an image there) is never replaced; one that is a snapshot
// may be (the fake then refuses the import itself).
TEST(SnapshotUnitTest, AnExistingTagThatIsNoSnapshotIsNeverReplaced) {
  auto rt = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
  ImageConfig tagged;
  tagged.labels = {{"org.example", "x"}, {"agvisor.snapshot.of", "forged"}};
  rt->AddImage("agvisor/snapshot:taken", tagged);
  ImageConfig snapshot;
  snapshot.labels = {{std::string(kLabelSnapshotId), "0123456789abcdef"}};
  rt->AddImage("agvisor/snapshot:mine", snapshot);
  auto sb = Sandbox::Create(rt, SandboxSpec{});
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  for (const char* name : {"taken", "snapshot:taken", "agvisor/snapshot:taken"}) {
    SnapshotOptions o;
    o.image = name;
    auto r = (*sb)->Snapshot(o);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.error().code(), ErrorCode::kConflict) << r.error().ToString();
    EXPECT_THAT(r.error().message(), HasSubstr("was not made as a snapshot"));
  }
  EXPECT_EQ(rt->CallCount("ImportImage"), 0);
  EXPECT_EQ(rt->ImageConfigOf("agvisor/snapshot:taken").value().labels, tagged.labels);
  // A snapshot's tag passes the check; the fake makes no images.
  SnapshotOptions o;
  o.image = "mine";
  auto r = (*sb)->Snapshot(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnsupported) << r.error().ToString();
  // A runtime error while looking is returned as it is, before anything else.
  rt->FailNext("ImageConfigOf", Error::Unavailable("inspect image: connection reset"));
  EXPECT_EQ((*sb)->Snapshot(o).error().code(), ErrorCode::kUnavailable);
  (void)(*sb)->Stop();
}

TEST(SnapshotUnitTest, TheFakeRuntimeRefusesSnapshotsAndForksOfAnonymousSandboxesToo) {
  auto rt = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
  auto sb = Sandbox::Create(rt, SandboxSpec{});
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  SnapshotOptions o;
  o.image = "x-1";
  auto r = (*sb)->Snapshot(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnsupported) << r.error().ToString();
  EXPECT_THAT(r.error().message(), HasSubstr("makes no images"));
  o.image = "-x";
  EXPECT_EQ((*sb)->Snapshot(o).error().code(), ErrorCode::kInvalidArgument);
  // An anonymous sandbox forks as a named one does (E2B's are anonymous): as far as the
  // snapshot, which this runtime refuses.
  auto f = Fork(**sb, ForkOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), ErrorCode::kUnsupported) << f.error().ToString();
  EXPECT_THAT(f.error().message(), HasSubstr("makes no images"));
  // Removal and listing: any other image is refused before the runtime is asked; this runtime
  // lists no snapshots.
  for (const char* other : {"agvisor/base:latest", "debian:bookworm", "../x", "snapshot:a/b"}) {
    auto rm = RemoveSnapshot(*rt, other);
    ASSERT_FALSE(rm.ok()) << other;
    EXPECT_EQ(rm.error().code(), ErrorCode::kInvalidArgument) << other;
  }
  EXPECT_EQ(RemoveSnapshot(*rt, "x-1").error().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(ListSnapshots(*rt).error().code(), ErrorCode::kUnsupported);
  (void)(*sb)->Stop();
}

}  // namespace
}  // namespace agvisor
