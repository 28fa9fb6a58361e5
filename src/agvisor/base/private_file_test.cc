#include "agvisor/base/private_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace agvisor {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class PrivateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (std::filesystem::temp_directory_path() / "agvisor-private-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, mode_t mode) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p) << "secret\n";
    EXPECT_EQ(::chmod(p.c_str(), mode), 0);
    return p;
  }
  std::string dir_;
};

TEST_F(PrivateFileTest, OwnersOnlyFileIsRead) {
  auto r = ReadPrivateFile(Write("k", 0600), "key file");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(*r, "secret\n");
  EXPECT_TRUE(ReadPrivateFile(Write("r", 0400), "key file").ok());
}

TEST_F(PrivateFileTest, AnyGroupOrOtherBitIsRefusedWithTheChmod) {
  for (mode_t mode : {0640, 0604, 0644, 0620, 0602, 0610}) {
    const std::string p = Write("m" + std::to_string(mode), mode);
    auto r = ReadPrivateFile(p, "key file");
    ASSERT_FALSE(r.ok()) << std::oct << mode;
    EXPECT_EQ(r.error().code(), ErrorCode::kPermissionDenied);
    EXPECT_THAT(r.error().message(),
                AllOf(HasSubstr("key file " + p), HasSubstr("open to group or others"),
                      HasSubstr("run `chmod 600 " + p + "`")));
  }
}

TEST_F(PrivateFileTest, AnotherUsersFileIsRefusedWithTheChown) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file away needs root";
  const std::string p = Write("owned", 0600);
  ASSERT_EQ(::chown(p.c_str(), 65534, 65534), 0);
  auto r = ReadPrivateFile(p, "token file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(r.error().message(),
              AllOf(HasSubstr("owned by uid 65534"), HasSubstr("run `chown 0 " + p + "`")));
}

TEST_F(PrivateFileTest, MissingDirectoryAndHugeAreClearErrors) {
  EXPECT_EQ(ReadPrivateFile(dir_ + "/none", "key file").error().code(), ErrorCode::kNotFound);
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  EXPECT_EQ(ReadPrivateFile(dir_, "key file").error().code(), ErrorCode::kInvalidArgument);
  const std::string big = Write("big", 0600);
  std::ofstream(big) << std::string(100, 'x');
  EXPECT_EQ(ReadPrivateFile(big, "key file", 64).error().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agvisor
