#include "agvisor/docker/api_version.h"

#include <gtest/gtest.h>

namespace agvisor::docker {
namespace {

TEST(ApiVersionTest, ParsesAndPrints) {
  auto v = ApiVersion::Parse("1.41");
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_EQ(v->major, 1);
  EXPECT_EQ(v->minor, 41);
  EXPECT_EQ(v->ToString(), "1.41");
  EXPECT_LT(*ApiVersion::Parse("1.9"), *ApiVersion::Parse("1.10"));
}

TEST(ApiVersionTest, RejectsMalformed) {
  for (const char* bad : {"", "1", "1.", ".41", "1.41.2", "v1.41", "1.-4", "a.b", "1.4x"}) {
    auto v = ApiVersion::Parse(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.error().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(ApiVersionTest, NegotiatesDebianDaemonTo141) {
  auto v = NegotiateApiVersion("1.41", "1.12");
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_EQ(v->ToString(), "1.41");
}

TEST(ApiVersionTest, NegotiatesInsideOurRange) {
  auto v = NegotiateApiVersion("1.43", "1.12");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->ToString(), "1.43");
}

TEST(ApiVersionTest, NewerDaemonGetsOurMax) {
  auto v = NegotiateApiVersion("1.47", "1.24");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, kMaxApiVersion);
  v = NegotiateApiVersion("1.47", "");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, kMaxApiVersion);
}

TEST(ApiVersionTest, RefusesOldDaemonNamingBothVersions) {
  auto v = NegotiateApiVersion("1.40", "1.12");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(v.error().message().find("1.40"), std::string::npos) << v.error().message();
  EXPECT_NE(v.error().message().find("1.41"), std::string::npos) << v.error().message();
}

TEST(ApiVersionTest, RefusesDaemonThatDroppedOurVersions) {
  auto v = NegotiateApiVersion("2.3", "1.50");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(v.error().message().find("1.50"), std::string::npos);
}

TEST(ApiVersionTest, GarbageFromDaemonIsInvalidArgument) {
  auto v = NegotiateApiVersion("x", "");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agvisor::docker
