// The pure parts of layered snapshots (snapshot_layers.h): the image's file list from a host
// directory, the creation time the agent compares ctimes with, which layers a snapshot goes on,
// and the image archive's configuration and manifest for POST /images/load.
#include "agvisor/sandbox/docker_runtime/snapshot_layers.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "agvisor/docker/codec.h"

namespace agvisor {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Paths(const std::string& tree) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t nul; (nul = tree.find('\0', start)) != std::string::npos; start = nul + 1) {
    out.push_back(tree.substr(start, nul - start));
  }
  return out;
}

// Every entry as a path inside the root; an excluded directory's own names only; a symlink to
// a directory listed and not followed; the list ends with an empty record.
TEST(SnapshotLayersTest, ListsTheImageTreeWithoutFollowingLinksOrDescendingExclusions) {
  std::string tmpl = (fs::temp_directory_path() / "snapshot_layers_test.XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string root = tmpl;
  fs::create_directories(root + "/etc/apt");
  fs::create_directories(root + "/dev/pts");
  fs::create_directories(root + "/elsewhere/deep");
  std::ofstream(root + "/etc/apt/sources.list") << "x";
  std::ofstream(root + "/dev/null") << "";
  fs::create_directory_symlink(root + "/elsewhere", root + "/link");
  std::uint64_t entries = 0;
  auto tree = ListImageTree(root, {"/dev"}, &entries);
  ASSERT_TRUE(tree.ok()) << tree.error().message();
  auto paths = Paths(*tree);
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.back(), "");  // the end marker
  paths.pop_back();
  std::sort(paths.begin(), paths.end());
  EXPECT_EQ(paths, (std::vector<std::string>{"/dev", "/dev/null", "/dev/pts", "/elsewhere",
                                             "/elsewhere/deep", "/etc", "/etc/apt",
                                             "/etc/apt/sources.list", "/link"}));
  EXPECT_EQ(entries, 9u);
  auto capped = ListImageTree(root, {}, nullptr, 3);
  ASSERT_FALSE(capped.ok());
  EXPECT_EQ(capped.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(ListImageTree(root + "/missing", {}, nullptr).error().code(), ErrorCode::kNotFound);
  fs::remove_all(root);
}

TEST(SnapshotLayersTest, CreationTimesAndTheLayersASnapshotGoesOn) {
  // Docker's RFC 3339 (always UTC, 0-9 decimals) -> "SECONDS.NANOS"; anything else: none.
  const std::pair<const char*, const char*> times[] = {
      {"2026-12-06T09:15:04.416530473Z", "1796548504.416530473"},
      {"2026-12-06T09:15:04.4Z", "1796548504.400000000"},
      {"2026-12-06T09:15:04Z", "1796548504.000000000"},
      {"2026-12-06T09:15:04+01:00", ""},
      {"yesterday", ""}};
  for (const auto& [rfc3339, want] : times) {
    EXPECT_EQ(SecondsDotNanos(rfc3339).value_or(""), want) << rfc3339;
  }
  // The agent's layer on top is left out; an image without one is not layered.
  EXPECT_EQ(*SnapshotLayersOf({"sha256:a", "sha256:b", "sha256:agent"}, true),
            (std::vector<std::string>{"sha256:a", "sha256:b"}));
  EXPECT_EQ(SnapshotLayersOf({"sha256:a", "sha256:b"}, false).error().code(),
            ErrorCode::kUnsupported);
  std::vector<std::string> deep(kMaxSnapshotLayers + 1, "sha256:x");
  EXPECT_EQ(SnapshotLayersOf(deep, true).error().code(), ErrorCode::kUnsupported);
}

// The configuration lists the image's layers then the new one; the manifest names the new
// layer's file last and files for the others that the archive leaves out.
TEST(SnapshotLayersTest, TheLoadArchivesConfigurationAndManifest) {
  docker::LayeredImage image;
  image.repo_tag = "agvisor/snapshot:v1";
  image.base_layers = {"sha256:a", "sha256:b"};
  image.layer_diff_id = "sha256:c";
  image.architecture = "amd64";
  image.os = "linux";
  image.created = "2026-12-06T09:15:04Z";
  image.env = {"PATH=/usr/bin"};
  image.labels = {{"agvisor.snapshot.id", "42"}};
  EXPECT_EQ(docker::EncodeLayeredImageConfig(image),
            R"({"architecture":"amd64","os":"linux","created":"2026-12-06T09:15:04Z",)"
            R"("config":{"Env":["PATH=/usr/bin"],"Labels":{"agvisor.snapshot.id":"42"}},)"
            R"("rootfs":{"type":"layers","diff_ids":["sha256:a","sha256:b","sha256:c"]}})");
  EXPECT_EQ(docker::EncodeLayeredImageManifest(image, "abc.json", "layer/layer.tar"),
            R"([{"Config":"abc.json","RepoTags":["agvisor/snapshot:v1"],)"
            R"("Layers":["base-0/layer.tar","base-1/layer.tar","layer/layer.tar"]}])");
}

}  // namespace
}  // namespace agvisor
