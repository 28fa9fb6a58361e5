#include "agvisor/base/strings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace agvisor {
namespace {

using ::testing::ElementsAre;

TEST(SplitTest, KeepsEveryFieldEmptyOnesIncluded) {
  EXPECT_THAT(Split("a:b:c", ':'), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Split("a::b", ':'), ElementsAre("a", "", "b"));
  EXPECT_THAT(Split(":a:", ':'), ElementsAre("", "a", ""));
  EXPECT_THAT(Split("/a/b", '/'), ElementsAre("", "a", "b"));
}

TEST(SplitTest, AStringWithoutTheSeparatorIsOneField) {
  EXPECT_THAT(Split("abc", '/'), ElementsAre("abc"));
  EXPECT_THAT(Split("", '/'), ElementsAre(""));
}

}  // namespace
}  // namespace agvisor
