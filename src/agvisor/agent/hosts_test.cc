#include "agvisor/agent/hosts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace agvisor::agent {
namespace {

class HostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/agvisor-hosts-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::string Write(const std::string& content) {
    std::string p = dir_ + "/hosts";
    std::ofstream(p) << content;
    return p;
  }
  static std::string Read(const std::string& p) {
    std::ostringstream s;
    s << std::ifstream(p).rdbuf();
    return s.str();
  }
  std::string dir_;
};

TEST_F(HostsTest, EmptyFileGetsTheLocalhostLines) {
  std::string p = Write("");
  auto r = FillEmptyHostsFile(p);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_TRUE(*r);
  EXPECT_EQ(Read(p), kLocalhostLines);
  // A second call finds it filled and leaves it.
  EXPECT_FALSE(*FillEmptyHostsFile(p));
  EXPECT_EQ(Read(p), kLocalhostLines);
}

TEST_F(HostsTest, FileWithContentIsLeftAlone) {
  std::string p = Write("10.0.0.1 db\n");
  auto r = FillEmptyHostsFile(p);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(Read(p), "10.0.0.1 db\n");
}

TEST_F(HostsTest, MissingFileIsNotCreated) {
  auto r = FillEmptyHostsFile(dir_ + "/absent");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_NE(::access((dir_ + "/absent").c_str(), F_OK), 0);
}

TEST_F(HostsTest, SymlinkIsNotFollowed) {
  std::string target = Write("");
  std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  auto r = FillEmptyHostsFile(link);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(Read(target), "");
}

}  // namespace
}  // namespace agvisor::agent
