// Downloads from a hostile sandbox, on the real dockerd + runsc (label `integration`): what a
// sandbox can make with its own files (a setuid copy of a binary, an absolute symlink, a link
// planted by one download and used by the next), and archives forged by a sandbox that replaced
// its agent (names with "..", absolute names, a NUL, hard links to the user's files, a 10 GB
// entry against a byte budget). Each must leave the host safe: nothing outside the destination
// changes, nothing special lands in it, and a refused download leaves nothing behind.
// docs/security.md, "Downloads", lists each rule with its test here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// ---- forged archives (what a hostile agent sends) ----

void Octal(char* f, std::size_t w, std::uint64_t v) {
  f[w - 1] = '\0';
  for (std::size_t i = w - 1; i-- > 0; v >>= 3) f[i] = static_cast<char>('0' + (v & 7));
}

std::string Entry(std::string_view name, char type, std::string_view data = {},
                  std::string_view link = {}, std::uint32_t mode = 0644) {
  std::array<char, 512> h{};
  std::memcpy(h.data(), name.data(), std::min<std::size_t>(name.size(), 100));
  Octal(h.data() + 100, 8, mode);
  Octal(h.data() + 108, 8, 0);
  Octal(h.data() + 116, 8, 0);
  Octal(h.data() + 124, 12, data.size());
  Octal(h.data() + 136, 12, 0);
  h[156] = type;
  std::memcpy(h.data() + 157, link.data(), std::min<std::size_t>(link.size(), 100));
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  Octal(h.data() + 148, 7, sum);
  std::string out(h.data(), 512);
  out += data;
  out.append((512 - data.size() % 512) % 512, '\0');
  return out;
}
std::string Pax(std::string_view records) { return Entry("PaxHeader/x", 'x', records); }
std::string End() { return std::string(1024, '\0'); }

// "relative path" -> "mode kind [target|content]" of everything under root ("" if missing).
std::map<std::string, std::string> Describe(const fs::path& root) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(root, ec))) return out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    struct stat st;
    EXPECT_EQ(lstat(it->path().c_str(), &st), 0);
    std::string d = std::to_string(st.st_mode & 07777) + " ";
    if (S_ISLNK(st.st_mode)) {
      d += "link " + fs::read_symlink(it->path()).string();
    } else if (S_ISDIR(st.st_mode)) {
      d += "dir";
    } else {
      d += "file " + testing::ReadAll(it->path().string());
    }
    out[fs::relative(it->path(), root).string()] = d;
  }
  return out;
}

mode_t ModeOf(const fs::path& p) {
  struct stat st;
  EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

class DownloadSafetyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto sb = CreateSandbox(testing::TestSpec());
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    sb_ = sb->release();
  }
  static void TearDownTestSuite() {
    delete sb_;
    testing::CleanupRun();
  }
  void SetUp() override {
    ASSERT_TRUE(sb_);
    local_ = fs::temp_directory_path() /
             ("agvisor-dl-" + testing::RunId() + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(local_);
    fs::create_directories(local_ / "outside");
    std::ofstream(local_ / "outside" / "target") << "original";
  }
  void TearDown() override { fs::remove_all(local_); }

  static void Sh(const std::string& script) {
    auto r = sb_->ExecShell("set -e; " + script);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    ASSERT_EQ(r->exit_code, 0) << script << ": " << r->err;
  }

  // Makes the sandbox hostile: its agent binary on disk becomes a script that answers
  // `read-file` (the bulk download path, taken for a regular file of 32 MiB or more) with
  // `archive` and hands every other subcommand to the real agent. Downloading /tmp/big then
  // delivers the forged archive, exactly as a root process inside could.
  static void ServeForgedArchive(const std::string& archive) {
    ASSERT_TRUE(sb_->WriteFile("/tmp/forged.tar", archive).ok());
    Sh("test -e /.agvisor/real-agent || cp /.agvisor/agvisor-agent /.agvisor/real-agent; "
       "printf '#!/bin/sh\\nif [ \"$1\" = read-file ]; then exec cat /tmp/forged.tar; fi\\n"
       "exec /.agvisor/real-agent \"$@\"\\n' > /tmp/hostile; chmod 755 /tmp/hostile; "
       "mv /tmp/hostile /.agvisor/agvisor-agent; truncate -s 40M /tmp/big");
  }

  // Downloads /tmp/big (the forged archive) into `dest`; expects a refusal with `code` whose
  // message names `entry`, `dest` as it was before, and nothing outside changed.
  void ExpectForgedRefused(const std::string& archive, std::string_view entry, const fs::path& dest,
                           ErrorCode code = ErrorCode::kInvalidArgument,
                           DownloadOptions options = {}) {
    ServeForgedArchive(archive);
    auto before = Describe(local_);
    auto r = sb_->Download("/tmp/big", dest.string(), options);
    ASSERT_FALSE(r.ok()) << "downloaded: " << entry;
    EXPECT_EQ(r.error().code(), code) << r.error().ToString();
    EXPECT_THAT(r.error().message(), HasSubstr(entry));
    EXPECT_EQ(Describe(local_), before) << r.error().ToString();
    EXPECT_EQ(testing::ReadAll((local_ / "outside" / "target").string()), "original");
  }

  static Sandbox* sb_;
  fs::path local_;
};
Sandbox* DownloadSafetyTest::sb_ = nullptr;

// A sandbox's own setuid/setgid/sticky bits never reach the host.
TEST_F(DownloadSafetyTest, SetuidSetgidAndStickyBitsAreDropped) {
  Sh("rm -rf /tmp/t; mkdir -p /tmp/t/sgid /tmp/t/sticky; cp /bin/sh /tmp/t/suid; "
     "chmod 4755 /tmp/t/suid; cp /bin/sh /tmp/t/sgidfile; chmod 2711 /tmp/t/sgidfile; "
     "chmod 2775 /tmp/t/sgid; chmod 1777 /tmp/t/sticky; echo hi > /tmp/t/sgid/f");
  auto r = sb_->Download("/tmp/t", (local_ / "out").string());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(ModeOf(local_ / "out/t/suid"), 0755u);
  EXPECT_EQ(ModeOf(local_ / "out/t/sgidfile"), 0711u);
  EXPECT_EQ(ModeOf(local_ / "out/t/sgid"), 0775u);
  EXPECT_EQ(ModeOf(local_ / "out/t/sticky"), 0777u);
  EXPECT_EQ(testing::ReadAll((local_ / "out/t/sgid/f").string()), "hi\n");
}

// `ln -s /etc link` inside: the download is refused naming the link, and undone.
TEST_F(DownloadSafetyTest, AnAbsoluteSymlinkIsRefusedAndTheDownloadUndone) {
  Sh("rm -rf /tmp/l; mkdir -p /tmp/l/a; echo a > /tmp/l/a/f; ln -s /etc /tmp/l/etc; "
     "echo z > /tmp/l/z");
  auto r = sb_->Download("/tmp/l", (local_ / "out").string());
  ASSERT_FALSE(r.ok()) << "an absolute symlink was downloaded";
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), HasSubstr("'l/etc'"));
  EXPECT_THAT(r.error().message(), HasSubstr("absolute"));
  EXPECT_THAT(r.error().message(), HasSubstr("download into " + (local_ / "out").string()));
  // The download made `out` and everything in it: all gone, the neighbour untouched.
  EXPECT_FALSE(fs::exists(fs::symlink_status(local_ / "out"))) << "left behind after a refusal";
  EXPECT_EQ(testing::ReadAll((local_ / "outside" / "target").string()), "original");
  // Links that stay inside arrive as links.
  Sh("rm /tmp/l/etc; ln -s a/f /tmp/l/in");
  r = sb_->Download("/tmp/l", (local_ / "out").string());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(fs::read_symlink(local_ / "out/l/in"), "a/f");
}

// One download plants a link (inside its destination, so allowed); the next, into a directory
// below it, has an entry under the link's name: never written through it.
TEST_F(DownloadSafetyTest, ALinkPlantedByOneDownloadIsNotWrittenThroughByTheNext) {
  Sh("rm -rf /tmp/p; mkdir -p /tmp/p; ln -s .. /tmp/p/up; echo p > /tmp/p/f");
  const fs::path res = local_ / "res";
  auto first = sb_->Download("/tmp/p", res.string());
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  ASSERT_EQ(fs::read_symlink(res / "p/up"), "..");  // res/p/up -> res
  ExpectForgedRefused(Entry("up/escaped", '0', "evil") + End(), "'up/escaped'", res / "p");
  EXPECT_FALSE(fs::exists(res / "escaped")) << "written through the planted link";
}

TEST_F(DownloadSafetyTest, ForgedNamesAreRefusedNamingTheEntry) {
  const fs::path dest = local_ / "dest";
  fs::create_directories(dest);
  std::ofstream(dest / "mine") << "the user's";
  const std::string ok = Entry("new/", '5') + Entry("new/a", '0', "a");
  ExpectForgedRefused(ok + Entry("../outside/target", '0', "evil") + End(), "'../outside/target'",
                      dest);
  ExpectForgedRefused(ok + Entry("new/../../x", '0', "evil") + End(), "'new/../../x'", dest);
  ExpectForgedRefused(ok + Entry((local_ / "outside/target").string(), '0', "evil") + End(),
                      "absolute", dest);
  const std::string nul_name = std::string("a") + '\0' + "/../../x";
  ExpectForgedRefused(ok + Pax("19 path=" + nul_name + "\n") + Entry("s", '0', "e") + End(), "NUL",
                      dest);
  // A hard link to a file that was in the destination before.
  ExpectForgedRefused(ok + Entry("h", '1', {}, "mine") + End(), "'h'", dest);
  // Devices are refused; the setuid bit of a forged entry is dropped.
  ExpectForgedRefused(ok + Entry("dev", '3') + End(), "'dev'", dest);
  ServeForgedArchive(Entry("s", '0', "x", {}, 06755) + End());
  auto r = sb_->Download("/tmp/big", dest.string());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(ModeOf(dest / "s"), 0755u);
  EXPECT_EQ(testing::ReadAll((dest / "mine").string()), "the user's");
}

// A forged 10 GB entry against a 1 MiB budget: refused at its header, within seconds, with
// nothing written.
TEST_F(DownloadSafetyTest, AByteBudgetRefusesAForgedHugeEntryAtOnce) {
  DownloadOptions budget;
  budget.max_bytes = 1 << 20;
  const auto start = std::chrono::steady_clock::now();
  ExpectForgedRefused(Entry("small", '0', std::string(1000, 's')) + Pax("20 size=10737418240\n") +
                          Entry("huge", '0') + End(),
                      "'huge'", local_ / "dest", ErrorCode::kResourceExhausted, budget);
  // The bound proves the refusal came at the header, not after streaming or waiting: the whole
  // round trip (an exec in the sandbox, ~0.2 s here) with more than 3x headroom.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace agvisor
