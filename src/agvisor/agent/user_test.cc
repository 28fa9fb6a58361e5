#include "agvisor/agent/user.h"

#include <gtest/gtest.h>

namespace agvisor::agent {
namespace {

constexpr std::string_view kPasswd =
    "root:x:0:0:root:/root:/bin/bash\n"
    "# comment\n"
    "broken line\n"
    "alice:x:1000:1000:Alice,,,:/home/alice:/bin/sh\n"
    "bob:x:1001:100::/home/bob:/bin/sh";
constexpr std::string_view kGroup =
    "root:x:0:\n"
    "users:x:100:\n"
    "alice:x:1000:\n"
    "docker:x:999:alice,bob\n"
    "audio:x:29:bob\n";

TEST(ResolveUserTest, NameGivesIdsHomeAndSupplementaryGroups) {
  auto u = ResolveUser("alice", kPasswd, kGroup);
  ASSERT_TRUE(u.ok()) << u.error().ToString();
  EXPECT_EQ(u->uid, 1000u);
  EXPECT_EQ(u->gid, 1000u);
  EXPECT_EQ(u->home, "/home/alice");
  EXPECT_EQ(u->groups, (std::vector<gid_t>{1000, 999}));
  auto b = ResolveUser("bob", kPasswd, kGroup);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->groups, (std::vector<gid_t>{100, 999, 29}));
}

TEST(ResolveUserTest, NumericForms) {
  auto u = ResolveUser("1000", kPasswd, kGroup);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->name, "alice");
  EXPECT_EQ(u->gid, 1000u);
  auto unknown = ResolveUser("4242", kPasswd, kGroup);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->uid, 4242u);
  EXPECT_EQ(unknown->gid, 0u);
  EXPECT_EQ(unknown->name, "");
  auto pair = ResolveUser("4242:77", kPasswd, kGroup);
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ(pair->gid, 77u);
  auto named_group = ResolveUser("alice:docker", kPasswd, kGroup);
  ASSERT_TRUE(named_group.ok());
  EXPECT_EQ(named_group->gid, 999u);
}

TEST(ResolveUserTest, Errors) {
  EXPECT_EQ(ResolveUser("", kPasswd, kGroup).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ResolveUser(":1", kPasswd, kGroup).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ResolveUser("1:", kPasswd, kGroup).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ResolveUser("1:2:3", kPasswd, kGroup).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ResolveUser("nobody", kPasswd, kGroup).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(ResolveUser("alice:nogroup", kPasswd, kGroup).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(ResolveUser("4294967295", kPasswd, kGroup).error().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace agvisor::agent
