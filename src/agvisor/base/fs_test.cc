#include "agvisor/base/fs.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "agvisor/base/unique_fd.h"

namespace agvisor {
namespace {

using ::testing::UnorderedElementsAre;

Error Fail(std::string_view call, int err) {
  return Error::FromErrno("list " + std::string(call), err);
}

TEST(ReadDirNamesTest, NamesAllButDotsAndLeavesTheFdOpen) {
  std::string t = (std::filesystem::temp_directory_path() / "agvisor-dir-XXXXXX").string();
  ASSERT_NE(::mkdtemp(t.data()), nullptr);
  std::ofstream(t + "/a") << "x";
  std::filesystem::create_directory(t + "/sub");
  std::filesystem::create_symlink("a", t + "/link");
  UniqueFd fd(::open(t.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  auto names = ReadDirNames(fd.get(), Fail);
  ASSERT_TRUE(names.ok()) << names.error().ToString();
  EXPECT_THAT(*names, UnorderedElementsAre("a", "sub", "link"));
  EXPECT_EQ(::fcntl(fd.get(), F_GETFD), FD_CLOEXEC);  // still open
  std::filesystem::remove_all(t);
}

TEST(ReadDirNamesTest, FailureNamesTheCallThatFailed) {
  auto bad_fd = ReadDirNames(-1, Fail);
  ASSERT_FALSE(bad_fd.ok());
  EXPECT_EQ(bad_fd.error().message().rfind("list dup", 0), 0u) << bad_fd.error().message();

  UniqueFd file(::open("/proc/self/status", O_RDONLY | O_CLOEXEC));  // not a directory
  ASSERT_TRUE(file.valid());
  auto not_dir = ReadDirNames(file.get(), Fail);
  ASSERT_FALSE(not_dir.ok());
  EXPECT_EQ(not_dir.error().message().rfind("list fdopendir", 0), 0u) << not_dir.error().message();
}

TEST(ReadSmallFileTest, ReadsToTheEndOrJustPastTheBound) {
  std::string t = (std::filesystem::temp_directory_path() / "agvisor-small-XXXXXX").string();
  ASSERT_NE(::mkdtemp(t.data()), nullptr);
  const std::string big(10000, 'x');
  std::ofstream(t + "/f") << big;
  EXPECT_EQ(ReadSmallFile(t + "/f", 1 << 20), big);
  auto bounded = ReadSmallFile(t + "/f", 100);  // stops after the read that passed 100 bytes
  ASSERT_TRUE(bounded.has_value());
  EXPECT_GT(bounded->size(), 100u);
  EXPECT_LT(bounded->size(), big.size());
  EXPECT_EQ(ReadSmallFile(t + "/missing", 100), std::nullopt);
  std::filesystem::remove_all(t);
}

}  // namespace
}  // namespace agvisor
