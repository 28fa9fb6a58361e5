#include "agvisor/base/tar.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "agvisor/base/subprocess.h"

namespace agvisor {
namespace {

// The system's tar must read what we write: list and extract it.
TEST(TarWriterTest, SystemTarExtractsIt) {
  TarWriter w;
  ASSERT_TRUE(w.AddDirectory(".agvisor", 0700).ok());
  std::string big(70000, 'x');
  big[12345] = '\0';
  ASSERT_TRUE(w.AddFile(".agvisor/agent", big, 0755).ok());
  std::string long_dir(120, 'd');
  ASSERT_TRUE(w.AddFile(long_dir + "/f.txt", "hi\n").ok());
  std::string archive = w.Finish();
  EXPECT_EQ(archive.size() % 512, 0u);

  char tmpl[] = "/tmp/agvisor-tar-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  auto r = RunCommand({"tar", "-C", dir, "-xf", "-"}, archive);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->status.success()) << r->err;
  std::ifstream f(dir + "/.agvisor/agent", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), big);
  EXPECT_EQ(::access((dir + "/.agvisor/agent").c_str(), X_OK), 0);
  std::ifstream g(dir + "/" + long_dir + "/f.txt");
  std::string line;
  std::getline(g, line);
  EXPECT_EQ(line, "hi");
  (void)RunCommand({"rm", "-rf", dir});
}

TEST(TarWriterTest, RefusesEscapingNames) {
  TarWriter w;
  EXPECT_EQ(w.AddFile("/etc/passwd", "x").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.AddFile("a/../../x", "x").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(w.AddFile(std::string(300, 'a'), "x").ok());
}

}  // namespace
}  // namespace agvisor
