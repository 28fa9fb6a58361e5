#include "agvisor/sandbox/docker_runtime/agent_image.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agvisor/docker/types.h"

namespace agvisor {
namespace {

TEST(AgentImageTest, PrunesOnlyOtherImagesOlderThanADay) {
  const std::int64_t now = 1'800'000'000;
  std::vector<docker::ImageSummary> images = {
      {.id = "keep", .repo_tags = {"agvisor/with-agent:aaa-1"}, .created = now - 90'000},
      {.id = "old", .repo_tags = {"agvisor/with-agent:aaa-0"}, .created = now - 90'000},
      {.id = "dangling", .repo_tags = {}, .created = now - 100'000},
      {.id = "young", .repo_tags = {"agvisor/with-agent:bbb-2"}, .created = now - 3'600},
  };
  EXPECT_EQ(AgentImagesToPrune(images, "agvisor/with-agent:aaa-1", now),
            (std::vector<std::string>{"old", "dangling"}));
  EXPECT_TRUE(AgentImagesToPrune({}, "x", now).empty());
  EXPECT_EQ(AgentImageRef("sha256:0123456789abcdef", "agent").substr(0, 32),
            "agvisor/with-agent:0123456789ab-");
  // Every agent build's derived image of one image shares the prefix snapshot removal looks for.
  EXPECT_EQ(AgentImageRefPrefix("sha256:0123456789abcdef"), "agvisor/with-agent:0123456789ab-");
  EXPECT_TRUE(AgentImageRef("sha256:0123456789abcdef", "another agent")
                  .starts_with(AgentImageRefPrefix("0123456789abcdef")));
}

}  // namespace
}  // namespace agvisor
