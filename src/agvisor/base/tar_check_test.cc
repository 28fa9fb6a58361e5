// TarStreamChecker against what TarStreamWriter makes (accepted at every split) and against
// crafted hostile streams (each refused, naming why).
#include "agvisor/base/tar_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "agvisor/base/subprocess.h"
#include "agvisor/base/tar_stream.h"
#include "gtest/gtest.h"

namespace agvisor {
namespace {

namespace fs = std::filesystem;

// One ustar header block, as the writer makes them (fields octal, magic "ustar\0" "00").
std::string Header(std::string_view name, char type, std::uint64_t size, std::string_view link = "",
                   std::string_view magic = std::string_view("ustar\0"
                                                             "00",
                                                             8)) {
  std::array<char, 512> h{};
  std::memcpy(h.data(), name.data(), std::min<std::size_t>(name.size(), 100));
  std::snprintf(h.data() + 100, 8, "%07o", 0644);
  std::snprintf(h.data() + 108, 8, "%07o", 0);
  std::snprintf(h.data() + 116, 8, "%07o", 0);
  std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(h.data() + 136, 12, "%011o", 0);
  h[156] = type;
  std::memcpy(h.data() + 157, link.data(), std::min<std::size_t>(link.size(), 100));
  std::memcpy(h.data() + 257, magic.data(), magic.size());
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  return std::string(h.data(), h.size());
}

std::string Data(std::string_view bytes) {
  std::string s(bytes);
  s.append((512 - s.size() % 512) % 512, '\0');
  return s;
}

std::string End() { return std::string(1024, '\0'); }

std::string Pax(std::string_view key, std::string_view value) {
  std::string body = " " + std::string(key) + "=" + std::string(value) + "\n";
  std::size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) {
    len = std::to_string(len).size() + body.size();
  }
  body = std::to_string(len) + body;
  return Header("./PaxHeader", 'x', body.size()) + Data(body);
}

// The stream's verdict: Push of all bytes, then Finish.
Result<void> Check(const std::string& stream, TarCheckOptions options = {}) {
  TarStreamChecker c(options);
  AGVISOR_RETURN_IF_ERROR(c.Push(stream));
  return c.Finish();
}

void ExpectRefused(const std::string& stream, std::string_view why,
                   ErrorCode code = ErrorCode::kInvalidArgument, TarCheckOptions options = {}) {
  auto r = Check(stream, options);
  ASSERT_FALSE(r.ok()) << "accepted; expected a refusal naming: " << why;
  EXPECT_EQ(r.error().code(), code) << r.error().message();
  EXPECT_NE(r.error().message().find(why), std::string::npos) << r.error().message();
}

std::string Root() { return Header("./", '5', 0); }

TEST(TarCheckTest, AcceptsAPlainStream) {
  std::string s = Root() + Header("./etc/", '5', 0) + Header("./etc/a", '0', 5) + Data("hello") +
                  Header("./bin", '2', 0, "usr/bin") + Header("./etc/b", '1', 0, "./etc/a") + End();
  TarStreamChecker c;
  ASSERT_TRUE(c.Push(s).ok());
  ASSERT_TRUE(c.Finish().ok());
  EXPECT_EQ(c.stats().entries, 5u);
  EXPECT_EQ(c.stats().files, 1u);
  EXPECT_EQ(c.stats().symlinks, 1u);
  EXPECT_EQ(c.stats().hard_links, 1u);
  EXPECT_EQ(c.stats().file_bytes, 5u);
  EXPECT_EQ(c.stats().bytes, s.size());
}

TEST(TarCheckTest, AcceptsWhatTheWriterMakesOfARootAtRandomSplits) {
  char tmpl[] = "/tmp/tar_check_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  fs::create_directories(dir + "/opt/deep/er");
  fs::create_directories(dir + "/proc/1");
  std::ofstream(dir + "/opt/x") << std::string(70000, 'x');
  std::ofstream(dir + "/proc/1/status") << "PRUNED-CONTENT";
  std::ofstream(dir + "/opt/deep/er/" + std::string(150, 'n')) << "long name (a pax header)";
  fs::create_symlink("/etc/passwd", dir + "/opt/abs-link");
  fs::create_symlink(std::string(200, 'l'), dir + "/opt/long-link");
  ::chmod((dir + "/opt/x").c_str(), 04755);  // setuid kept: a root file system has such files
  // As a snapshot archives "/": names "./...", /proc pruned to an empty directory.
  TarStreamWriter::Options wo;
  wo.prune = {dir + "/proc"};
  wo.name_as_root = true;
  auto w = TarStreamWriter::Open(dir, wo);
  ASSERT_TRUE(w.ok()) << w.error().message();
  std::string stream;
  for (;;) {
    auto c = (*w)->Pull(4096);
    ASSERT_TRUE(c.ok()) << c.error().message();
    stream += c->bytes;
    if (c->end) break;
  }
  (void)RunCommand({"rm", "-rf", dir});
  EXPECT_EQ(stream.find("PRUNED-CONTENT"), std::string::npos);
  EXPECT_NE(stream.find("./proc/"), std::string::npos);  // the mount point stays
  EXPECT_EQ(stream.find("./proc/1"), std::string::npos);
  std::mt19937 rng(7);
  for (int round = 0; round < 30; ++round) {
    TarStreamChecker c;
    std::size_t pos = 0;
    while (pos < stream.size()) {
      std::size_t n = std::min<std::size_t>(stream.size() - pos, 1 + rng() % 9000);
      auto r = c.Push(std::string_view(stream).substr(pos, n));
      ASSERT_TRUE(r.ok()) << r.error().message();
      pos += n;
    }
    auto f = c.Finish();
    ASSERT_TRUE(f.ok()) << f.error().message();
    EXPECT_EQ(c.stats().files, 2u);
    EXPECT_EQ(c.stats().symlinks, 2u);
    EXPECT_EQ(c.stats().directories, 5u);  // ./ ./opt ./opt/deep ./opt/deep/er ./proc
    EXPECT_EQ(c.stats().bytes, stream.size());
  }
}

TEST(TarCheckTest, RefusesDotDotAndAbsoluteNames) {
  ExpectRefused(Root() + Header("./a/../../etc/passwd", '0', 0) + End(), "'..' component");
  ExpectRefused(Root() + Header("/etc/passwd", '0', 0) + End(), "is absolute");
  ExpectRefused(Root() + Header("etc/passwd", '0', 0) + End(), "does not start with './'");
  ExpectRefused(Root() + Header(".//etc", '0', 0) + End(), "empty component");
  ExpectRefused(Root() + Header("./a/./b", '0', 0) + End(), "'.' component");
  // In a pax path too (it overrides the header's harmless name).
  ExpectRefused(Root() + Pax("path", "./../../x") + Header("./x", '0', 0) + End(),
                "'..' component");
}

TEST(TarCheckTest, RefusesAStreamNotStartingAtTheRoot) {
  ExpectRefused(Header("./etc/", '5', 0) + End(), "first entry must be the root");
  // A stream that starts like a compressed one (dockerd sniffs gzip, bzip2, xz, zstd) cannot
  // start with "./".
  ExpectRefused(Header("BZh91AY&SY", '5', 0) + End(), "does not start with './'");
}

TEST(TarCheckTest, RefusesDevicesFifosAndOtherTypes) {
  ExpectRefused(Root() + Header("./dev/sda", '4', 0) + End(), "device nodes are refused");
  ExpectRefused(Root() + Header("./dev/mem", '3', 0) + End(), "device nodes are refused");
  ExpectRefused(Root() + Header("./p", '6', 0) + End(), "FIFOs are refused");
  ExpectRefused(Root() + Header("./g", 'g', 0) + End(), "is refused");
  ExpectRefused(Root() + Header("./L", 'L', 0) + End(), "is refused");
  ExpectRefused(Root() + Header("./S", 'S', 0) + End(), "is refused");
}

TEST(TarCheckTest, RefusesASymlinkThenAnEntryThroughIt) {
  ExpectRefused(Root() + Header("./etc", '2', 0, "/etc") + Header("./etc/passwd", '0', 4) +
                    Data("root") + End(),
                "goes through the symlink './etc'");
  // A hard link to that symlink is a symlink too.
  ExpectRefused(Root() + Header("./s", '2', 0, "/") + Header("./h", '1', 0, "./s") +
                    Header("./h/x", '0', 0) + End(),
                "goes through the symlink './h'");
  // Relative targets too, at any depth.
  ExpectRefused(Root() + Header("./a/", '5', 0) + Header("./a/up", '2', 0, "../..") +
                    Header("./a/up/b/", '5', 0) + End(),
                "goes through the symlink");
}

TEST(TarCheckTest, HardLinksOnlyToEarlierFilesOfTheArchive) {
  ExpectRefused(Root() + Header("./h", '1', 0, "/etc/shadow") + End(), "is absolute");
  ExpectRefused(Root() + Header("./h", '1', 0, "./etc/shadow") + End(),
                "is not an earlier file of this archive");
  ExpectRefused(Root() + Header("./d/", '5', 0) + Header("./h", '1', 0, "./d") + End(),
                "is not an earlier file of this archive");
}

TEST(TarCheckTest, RefusesSizesOtherReadersWouldNotSkip) {
  // Go's reader skips no data for a directory: a size there would hide the next header from
  // one reader and not the other.
  std::string hidden = Header("./x", '3', 0);
  ExpectRefused(Root() + Header("./d/", '5', 512) + hidden + End(), "with a size of 512");
  ExpectRefused(Root() + Header("./l", '2', 512, "t") + hidden + End(), "with a size of 512");
}

TEST(TarCheckTest, RefusesOversizeStreamsAndHugeSizeFields) {
  TarCheckOptions small;
  small.max_bytes = 64 * 1024;
  // A header claiming 8 GiB - 1: refused at the header, before any data.
  ExpectRefused(Root() + Header("./big", '0', (std::uint64_t{1} << 33) - 1), "size cap",
                ErrorCode::kResourceExhausted, small);
  // Through a pax size far above the octal field's range.
  ExpectRefused(Root() + Pax("size", "18446744073709551615") + Header("./big", '0', 0), "size",
                ErrorCode::kInvalidArgument, small);
  ExpectRefused(Root() + Pax("size", "1000000000000") + Header("./big", '0', 0), "size cap",
                ErrorCode::kResourceExhausted, small);
  // Honest entries that add up past the cap.
  std::string s = Root();
  for (int i = 0; i < 20; ++i) {
    s += Header("./f" + std::to_string(i), '0', 4096) + Data(std::string(4096, 'a'));
  }
  ExpectRefused(s + End(), "size cap", ErrorCode::kResourceExhausted, small);
  // Endless zeros after the end marker count too.
  ExpectRefused(Root() + End() + std::string(70000, '\0'), "size cap",
                ErrorCode::kResourceExhausted, small);
}

TEST(TarCheckTest, RefusesTruncatedStreams) {
  std::string full = Root() + Header("./a", '0', 1000) + Data(std::string(1000, 'z')) + End();
  for (std::size_t cut : {std::size_t{0}, std::size_t{100}, std::size_t{512}, std::size_t{700},
                          std::size_t{1536}, full.size() - 1024, full.size() - 512}) {
    auto r = Check(full.substr(0, cut));
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_TRUE(Check(full).ok());
}

TEST(TarCheckTest, RefusesMalformedHeaders) {
  std::string bad_sum = Header("./a", '0', 0);
  bad_sum[0] = 'X';
  ExpectRefused(Root() + bad_sum + End(), "bad header checksum");
  ExpectRefused(Root() + Header("./a", '0', 0, "", std::string_view("ustar  \0", 8)) + End(),
                "not POSIX ustar");
  // Base-256 size (GNU): refused, the writer never makes it.
  std::string b256 = Header("./a", '0', 0);
  b256[124] = static_cast<char>(0x80);
  std::memset(b256.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : b256) sum += static_cast<unsigned char>(c);
  std::snprintf(b256.data() + 148, 8, "%06o", sum);
  ExpectRefused(Root() + b256 + End(), "malformed numeric field");
  ExpectRefused(Root() + Header("./.wh.etc", '0', 0) + End(), "whiteouts");
  ExpectRefused(
      Root() + Header("./a", '0', 0) + std::string(512, '\0') + Header("./b", '0', 0) + End(),
      "lone zero block");
  ExpectRefused(Root() + End() + "x", "data after the end");
}

TEST(TarCheckTest, RefusesPaxExtensions) {
  ExpectRefused(
      Root() + Pax("SCHILY.xattr.security.capability", "x") + Header("./a", '0', 0) + End(),
      "is not one the snapshot format uses");
  ExpectRefused(Root() + Pax("GNU.sparse.map", "0,1") + Header("./a", '0', 0) + End(),
                "is not one the snapshot format uses");
  ExpectRefused(Root() + Pax("path", "./a") + Pax("path", "./b") + Header("./c", '0', 0) + End(),
                "two pax headers in a row");
  ExpectRefused(Root() + Pax("path", "./a") + End(), "followed by the end");
}

TEST(TarCheckTest, AFailedCheckerStaysFailed) {
  TarStreamChecker c;
  ASSERT_FALSE(c.Push(Root() + Header("/x", '0', 0)).ok());
  EXPECT_FALSE(c.Push(End()).ok());
  EXPECT_FALSE(c.Finish().ok());
}

// A layer (TarCheckOptions::whiteouts) may delete the image's entries with empty ".wh.NAME"
// files, and nothing else spelled with ".wh.": not in a middle component, not with data, not as
// a directory or link, not the opaque-directory marker; without the option none passes.
TEST(TarCheckTest, ALayerTakesEmptyWhiteoutFilesOnly) {
  TarCheckOptions layer;
  layer.whiteouts = true;
  const std::string ok = Root() + Header("./etc/", '5', 0) + Header("./etc/.wh.issue", '0', 0) +
                         Header("./.wh.opt", '0', 0) + End();
  TarStreamChecker c(layer);
  ASSERT_TRUE(c.Push(ok).ok());
  ASSERT_TRUE(c.Finish().ok());
  EXPECT_EQ(c.stats().whiteouts, 2u);
  ExpectRefused(ok, "whiteouts");
  ExpectRefused(Root() + Header("./.wh.etc/x", '0', 0) + End(), "whiteouts",
                ErrorCode::kInvalidArgument, layer);
  ExpectRefused(Root() + Header("./.wh.x", '0', 1) + Data("x") + End(), "whiteouts",
                ErrorCode::kInvalidArgument, layer);
  ExpectRefused(Root() + Header("./.wh.d/", '5', 0) + End(), "whiteouts",
                ErrorCode::kInvalidArgument, layer);
  ExpectRefused(Root() + Header("./.wh.s", '2', 0, "/etc") + End(), "whiteouts",
                ErrorCode::kInvalidArgument, layer);
  ExpectRefused(Root() + Header("./d/", '5', 0) + Header("./d/.wh..wh..opq", '0', 0) + End(),
                "whiteouts", ErrorCode::kInvalidArgument, layer);
  ExpectRefused(Root() + Header("./.wh.", '0', 0) + End(), "whiteouts", ErrorCode::kInvalidArgument,
                layer);
}

}  // namespace
}  // namespace agvisor
