#include "agvisor/base/tar_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/base/tar_check.h"
#include "gtest/gtest.h"

namespace agvisor {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tar_stream_test.XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    auto r = RunCommand({"chmod", "-R", "u+rwx", path_});
    auto r2 = RunCommand({"rm", "-rf", path_});
    (void)r;
    (void)r2;
  }
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view s) const { return path_ + "/" + std::string(s); }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& data, mode_t mode = 0644) {
  {
    std::ofstream f(path, std::ios::binary);
    f << data;
  }
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Pattern(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// "relative path" -> "kind mode size [target|content hash] mtime" of every entry under root.
std::map<std::string, std::string> Describe(const std::string& root) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    std::string rel = fs::relative(it->path(), root).string();
    struct stat st;
    EXPECT_EQ(lstat(it->path().c_str(), &st), 0);
    std::string d = std::to_string(st.st_mode & 07777) + " ";
    if (S_ISLNK(st.st_mode)) {
      d += "link " + fs::read_symlink(it->path()).string();
    } else if (S_ISDIR(st.st_mode)) {
      d += "dir";
    } else {
      d += "file " + std::to_string(st.st_size) + " " +
           std::to_string(std::hash<std::string>()(ReadFile(it->path()))) + " " +
           std::to_string(st.st_mtim.tv_sec);
    }
    out[rel] = d;
  }
  return out;
}

// A tree with every kind of entry the writer handles.
void MakeTree(const std::string& root) {
  ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
  WriteFile(root + "/empty", "");
  WriteFile(root + "/small.sh", "#!/bin/sh\necho hi\n", 0750);
  WriteFile(root + "/ten_mb", Pattern(10 * 1024 * 1024 + 7, 1), 0600);
  ASSERT_EQ(mkdir((root + "/empty_dir").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((root + "/sub").c_str(), 0755), 0);
  WriteFile(root + "/sub/x", "x");
  std::string long_dir = root + "/" + std::string(120, 'd');
  ASSERT_EQ(mkdir(long_dir.c_str(), 0755), 0);
  std::string long_file = long_dir + "/" + std::string(150, 'f');
  WriteFile(long_file, "long", 0640);
  ASSERT_EQ(symlink("sub/x", (root + "/link_to_x").c_str()), 0);
  ASSERT_EQ(symlink("sub", (root + "/link_to_dir").c_str()), 0);
  ASSERT_EQ(symlink(("../" + std::string(120, 'd') + "/" + std::string(150, 'f')).c_str(),
                    (root + "/sub/long_link").c_str()),
            0);
  // A read-only directory with contents: its mode must be applied after its children.
  ASSERT_EQ(mkdir((root + "/ro").c_str(), 0755), 0);
  WriteFile(root + "/ro/inside", "ro");
  ASSERT_EQ(chmod((root + "/ro").c_str(), 0555), 0);
  struct timespec times[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, (root + "/small.sh").c_str(), times, 0), 0);
}

Result<std::string> WriteArchive(const std::string& path, std::mt19937& rng, std::size_t max_chunk,
                                 const TarStreamWriter::Options& options = {}) {
  auto w = AGVISOR_TRY(TarStreamWriter::Open(path, options));
  std::string out;
  std::uniform_int_distribution<std::size_t> size(1, max_chunk);
  while (true) {
    std::size_t n = size(rng);
    TarChunk c = AGVISOR_TRY(w->Pull(n));
    EXPECT_LE(c.bytes.size(), n);
    if (!c.end) {
      EXPECT_FALSE(c.bytes.empty());
    }
    out += c.bytes;
    if (c.end) break;
  }
  return out;
}

Result<void> Extract(const std::string& archive, const std::string& dest, std::mt19937& rng,
                     std::size_t max_chunk) {
  auto r = AGVISOR_TRY(TarStreamReader::Open(dest));
  std::uniform_int_distribution<std::size_t> size(1, max_chunk);
  std::size_t pos = 0;
  while (pos < archive.size()) {
    std::size_t n = std::min(size(rng), archive.size() - pos);
    AGVISOR_RETURN_IF_ERROR(r->Push(std::string_view(archive).substr(pos, n)));
    pos += n;
  }
  return r->Finish();
}

TEST(TarStreamTest, RoundTripAtRandomChunkSizes) {
  TempDir t;
  MakeTree(t / "root");
  auto want = Describe(t / "root");
  ASSERT_GE(want.size(), 10u);
  std::mt19937 rng(42);
  for (std::size_t max_chunk : {std::size_t{1} << 20, std::size_t{700}, std::size_t{100003}}) {
    auto archive = WriteArchive(t / "root", rng, max_chunk);
    ASSERT_TRUE(archive.ok()) << archive.error().ToString();
    EXPECT_EQ(archive->size() % 512, 0u);
    std::string dest = t / ("out" + std::to_string(max_chunk));
    ASSERT_EQ(mkdir(dest.c_str(), 0755), 0);
    auto r = Extract(*archive, dest, rng, max_chunk);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(Describe(dest + "/root"), want);
  }
}

TEST(TarStreamTest, SingleFileAndSymlinkRoots) {
  TempDir t;
  WriteFile(t / "f", "hello", 0600);
  ASSERT_EQ(symlink("/nonexistent/elsewhere", (t / "l").c_str()), 0);
  std::mt19937 rng(1);
  auto a = WriteArchive(t / "f", rng, 1000);
  ASSERT_TRUE(a.ok());
  auto listing = RunCommand({"tar", "-tvf", "-"}, *a);
  ASSERT_TRUE(listing.ok());
  EXPECT_NE(listing->out.find("-rw------- "), std::string::npos) << listing->out;
  EXPECT_NE(listing->out.find(" f\n"), std::string::npos) << listing->out;
  auto b = WriteArchive(t / "l", rng, 1000);
  ASSERT_TRUE(b.ok());
  listing = RunCommand({"tar", "-tvf", "-"}, *b);
  ASSERT_TRUE(listing.ok());
  EXPECT_NE(listing->out.find("l -> /nonexistent/elsewhere"), std::string::npos) << listing->out;
}

TEST(TarStreamTest, MissingRootIsNotFound) {
  TempDir t;
  auto w = TarStreamWriter::Open(t / "missing");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(w.error().message().find("missing"), std::string::npos);
  EXPECT_EQ(TarStreamWriter::Open("").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(TarStreamReader::Open(t / "missing").error().code(), ErrorCode::kNotFound);
}

TEST(TarStreamTest, SystemTarReadsWhatTheWriterMakes) {
  TempDir t;
  MakeTree(t / "root");
  std::mt19937 rng(7);
  auto archive = WriteArchive(t / "root", rng, 65536);
  ASSERT_TRUE(archive.ok());
  ASSERT_EQ(mkdir((t / "sys").c_str(), 0755), 0);
  auto out = RunCommand({"tar", "-x", "-p", "-C", t / "sys", "-f", "-"}, *archive);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(out->status.success()) << out->err;
  EXPECT_EQ(out->err, "");
  EXPECT_EQ(Describe(t / "sys/root"), Describe(t / "root"));
}

TEST(TarStreamTest, ReaderExtractsWhatSystemTarMakes) {
  TempDir t;
  MakeTree(t / "root");
  auto want = Describe(t / "root");
  std::mt19937 rng(9);
  for (std::string format : {"gnu", "pax", "ustar"}) {
    SCOPED_TRACE(format);
    // ustar cannot hold the 150-byte file name under a 120-byte directory: leave it out.
    std::vector<std::string> argv = {"tar", "-c", "--format=" + format, "-C", t.path(), "root"};
    if (format == "ustar") {
      argv.insert(argv.begin() + 2, "--exclude=" + std::string(120, 'd'));
      argv.insert(argv.begin() + 2, "--exclude=long_link");
    }
    auto out = RunCommand(argv);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(out->status.success()) << out->err;
    std::string dest = t / ("x_" + format);
    ASSERT_EQ(mkdir(dest.c_str(), 0755), 0);
    auto r = Extract(out->out, dest, rng, 5000);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    auto got = Describe(dest + "/root");
    if (format == "ustar") {
      auto w = want;
      std::erase_if(w, [](const auto& kv) {
        return kv.first.find("ddd") != std::string::npos || kv.first == "sub/long_link";
      });
      EXPECT_EQ(got, w);
    } else {
      EXPECT_EQ(got, want);
    }
  }
}

TEST(TarStreamTest, ExtractsHardLinksInside) {
  TempDir t;
  ASSERT_EQ(mkdir((t / "src").c_str(), 0755), 0);
  WriteFile(t / "src/a", "shared");
  ASSERT_EQ(link((t / "src/a").c_str(), (t / "src/b").c_str()), 0);
  auto out = RunCommand({"tar", "-c", "-C", t / "src", "."});
  ASSERT_TRUE(out.ok() && out->status.success());
  ASSERT_EQ(mkdir((t / "dst").c_str(), 0755), 0);
  std::mt19937 rng(3);
  auto r = Extract(out->out, t / "dst", rng, 100);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  struct stat a, b;
  ASSERT_EQ(stat((t / "dst/a").c_str(), &a), 0);
  ASSERT_EQ(stat((t / "dst/b").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(ReadFile(t / "dst/b"), "shared");
}

// ---------------------------------------------------------------------------------------------
// Hostile archives, built by hand.

void Octal(char* f, std::size_t w, std::uint64_t v) {
  f[w - 1] = '\0';
  for (std::size_t i = w - 1; i-- > 0; v >>= 3) f[i] = static_cast<char>('0' + (v & 7));
}

std::string Entry(std::string_view name, char type, std::string_view data = {},
                  std::string_view link = {}, bool gnu = false, std::uint32_t mode = 0644) {
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
              gnu ? "ustar  "
                  : "ustar\0"
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
std::string End() { return std::string(1024, '\0'); }

class TarEscapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(mkdir((t_ / "dest").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((t_ / "outside").c_str(), 0755), 0);
    WriteFile(t_ / "outside/target", "original");
  }
  // Extracts `archive`; expects a refusal that names `entry`, and nothing changed outside.
  void ExpectRefused(const std::string& archive, const std::string& entry) {
    auto before = Describe(t_ / "outside");
    std::mt19937 rng(5);
    auto r = Extract(archive, t_ / "dest", rng, 300);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find(entry), std::string::npos) << r.error().ToString();
    EXPECT_EQ(Describe(t_ / "outside"), before);
    EXPECT_EQ(ReadFile(t_ / "outside/target"), "original");
    EXPECT_FALSE(fs::exists(t_ / "x"));
  }
  TempDir t_;
};

TEST_F(TarEscapeTest, DotDot) {
  ExpectRefused(Entry("../x", '0', "evil") + End(), "'../x'");
  ExpectRefused(Entry("a/../../x", '0', "evil") + End(), "'a/../../x'");
  ExpectRefused(Entry("../outside/target", '0', "evil") + End(), "'../outside/target'");
  ExpectRefused(Entry("..", '5') + End(), "'..'");
}

TEST_F(TarEscapeTest, Absolute) {
  ExpectRefused(Entry(t_ / "outside/target", '0', "evil") + End(), "absolute");
  ExpectRefused(Entry("/etc/x", '0', "evil") + End(), "'/etc/x'");
  EXPECT_FALSE(fs::exists("/etc/x"));
}

TEST_F(TarEscapeTest, LongNameHeadersAreCheckedToo) {
  std::string name = "../x";
  ExpectRefused(
      Entry("././@LongLink", 'L', name + '\0', {}, true) + Entry("short", '0', "e") + End(),
      "'../x'");
  std::string rec = "13 path=../x\n";
  ExpectRefused(Entry("PaxHeader/x", 'x', rec) + Entry("short", '0', "e") + End(), "'../x'");
}

TEST_F(TarEscapeTest, SymlinkThenFileThroughIt) {
  // The link itself is inside, but nothing is ever extracted through a symlink.
  ASSERT_EQ(mkdir((t_ / "dest/real").c_str(), 0755), 0);
  ExpectRefused(Entry("d", '2', {}, "real") + Entry("d/file", '0', "evil") + End(), "'d/file'");
  EXPECT_FALSE(fs::exists(t_ / "dest/real/file"));
  // A symlink to outside is refused outright.
  ExpectRefused(Entry("o", '2', {}, t_ / "outside") + Entry("o/target", '0', "evil") + End(),
                "'o'");
  ExpectRefused(Entry("o2", '2', {}, "../outside") + End(), "'o2'");
  ExpectRefused(
      Entry("a/", '5') + Entry("a/up", '2', {}, "..") + Entry("b", '2', {}, "a/up/..") + End(),
      "'b'");
  // One that was there before is not followed either.
  ASSERT_EQ(symlink((t_ / "outside").c_str(), (t_ / "dest/pre").c_str()), 0);
  ExpectRefused(Entry("pre/target", '0', "evil") + End(), "'pre/target'");
}

TEST_F(TarEscapeTest, ContainedSymlinksAreCreated) {
  std::mt19937 rng(1);
  auto r = Extract(Entry("a/b/", '5') + Entry("a/b/up", '2', {}, "../../c") + End(), t_ / "dest",
                   rng, 512);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(fs::read_symlink(t_ / "dest/a/b/up"), "../../c");
}

TEST_F(TarEscapeTest, FileReplacesAPlantedSymlinkWithoutWritingThroughIt) {
  ASSERT_EQ(symlink((t_ / "outside/target").c_str(), (t_ / "dest/f").c_str()), 0);
  ASSERT_EQ(link((t_ / "outside/target").c_str(), (t_ / "dest/h").c_str()), 0);
  std::mt19937 rng(1);
  auto r = Extract(Entry("f", '0', "new") + Entry("h", '0', "new") + End(), t_ / "dest", rng, 512);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(ReadFile(t_ / "outside/target"), "original");
  EXPECT_EQ(ReadFile(t_ / "dest/f"), "new");
  EXPECT_FALSE(fs::is_symlink(t_ / "dest/f"));
}

TEST_F(TarEscapeTest, HardLinks) {
  ExpectRefused(Entry("p", '1', {}, "/etc/passwd") + End(), "'p'");
  ExpectRefused(Entry("p", '1', {}, "../outside/target") + End(), "'p'");
  ASSERT_EQ(symlink((t_ / "outside").c_str(), (t_ / "dest/pre").c_str()), 0);
  ExpectRefused(Entry("p", '1', {}, "pre/target") + End(), "'p'");
}

TEST_F(TarEscapeTest, AHardLinkToASymlinkIsCheckedFromWhereItGoes) {
  // "d/e/l -> ../../x" stays inside from d/e, but a second name for it at the top would read
  // "../../x" from the destination itself: two levels above it.
  ExpectRefused(Entry("d/e/", '5') + Entry("d/e/l", '2', {}, "../../x") +
                    Entry("top", '1', {}, "d/e/l") + End(),
                "'top'");
  EXPECT_FALSE(fs::exists(fs::symlink_status(t_ / "dest/top")));
  // At the same depth the target means the same: allowed.
  std::mt19937 rng(1);
  auto r = Extract(Entry("f/", '5') + Entry("f/g/", '5') + Entry("f/g/l", '2', {}, "../x") +
                       Entry("f/h/", '5') + Entry("f/h/m", '1', {}, "f/g/l") + End(),
                   t_ / "dest", rng, 512);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(fs::read_symlink(t_ / "dest/f/h/m"), "../x");
}

TEST_F(TarEscapeTest, SpecialFiles) {
  ExpectRefused(Entry("dev", '3') + End(), "'dev': device");
  ExpectRefused(Entry("blk", '4') + End(), "'blk': device");
  ExpectRefused(Entry("fifo", '6') + End(), "'fifo'");
  ExpectRefused(Entry("sparse", 'S') + End(), "'sparse'");
}

TEST(TarStreamReaderTest, EndsCleanlyOrSaysWhy) {
  TempDir t;
  auto finish = [&](const std::string& archive) -> Result<void> {
    auto r = AGVISOR_TRY(TarStreamReader::Open(t.path()));
    AGVISOR_RETURN_IF_ERROR(r->Push(archive));
    return r->Finish();
  };
  std::string good = Entry("f", '0', "data") + End();
  EXPECT_TRUE(finish(good).ok());
  EXPECT_TRUE(finish(good + std::string(8192, '\0')).ok());  // record padding
  auto r = finish(good.substr(0, 520));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("truncated in entry 'f'"), std::string::npos);
  r = finish(Entry("f", '0', "data"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("end marker"), std::string::npos);
  std::string corrupt = good;
  corrupt[10] = 'x';
  r = finish(corrupt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("checksum"), std::string::npos);
  r = finish(good + "junk");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("after the end"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Host rules (TarReaderOptions::host_rules): archives a sandbox made, extracted on the host.

std::string WithMode(std::string_view name, char type, std::uint32_t mode,
                     std::string_view data = {}) {
  return Entry(name, type, data, {}, false, mode);
}

// A pax header whose records are `records` ("<len> key=value\n" each), for the next entry.
std::string Pax(std::string_view records) { return Entry("PaxHeader/x", 'x', records); }

class TarHostRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(mkdir((t_ / "dest").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((t_ / "outside").c_str(), 0755), 0);
    WriteFile(t_ / "outside/target", "original");
    // What the user had in the destination before: never removed, never linked to.
    ASSERT_EQ(mkdir((t_ / "dest/keep").c_str(), 0700), 0);
    WriteFile(t_ / "dest/keep/old", "mine");
    WriteFile(t_ / "dest/secret", "password", 0600);
  }
  Result<void> Run(const std::string& archive, TarReaderOptions o = {},
                   std::size_t max_chunk = 300) {
    o.host_rules = true;
    auto r = AGVISOR_TRY(TarStreamReader::Open(t_ / "dest", o));
    std::mt19937 rng(11);
    std::uniform_int_distribution<std::size_t> size(1, max_chunk);
    for (std::size_t pos = 0; pos < archive.size();) {
      std::size_t n = std::min(size(rng), archive.size() - pos);
      AGVISOR_RETURN_IF_ERROR(r->Push(std::string_view(archive).substr(pos, n)));
      pos += n;
    }
    return r->Finish();
  }
  // Refused with `code`, the message naming `entry`; the destination is as it was before (what
  // the archive created is gone, the user's files are intact) and nothing outside changed.
  void ExpectRefusedAndUndone(const std::string& archive, std::string_view entry,
                              ErrorCode code = ErrorCode::kInvalidArgument,
                              TarReaderOptions o = {}) {
    auto dest_before = Describe(t_ / "dest");
    auto outside_before = Describe(t_ / "outside");
    auto r = Run(archive, o);
    ASSERT_FALSE(r.ok()) << "not refused";
    EXPECT_EQ(r.error().code(), code) << r.error().ToString();
    EXPECT_NE(r.error().message().find(entry), std::string::npos) << r.error().ToString();
    EXPECT_EQ(Describe(t_ / "dest"), dest_before) << r.error().ToString();
    EXPECT_EQ(Describe(t_ / "outside"), outside_before);
    EXPECT_EQ(ReadFile(t_ / "outside/target"), "original");
  }
  mode_t ModeOf(const std::string& rel) {
    struct stat st;
    EXPECT_EQ(lstat((t_ / rel).c_str(), &st), 0) << rel;
    return st.st_mode & 07777;
  }
  TempDir t_;
};

TEST_F(TarHostRulesTest, SetuidSetgidAndStickyBitsAreDropped) {
  std::string archive = WithMode("d/", '5', 02775) + WithMode("d/suid", '0', 04755, "#!/bin/sh\n") +
                        WithMode("d/sgid", '0', 02711, "x") + WithMode("tmp/", '5', 01777) + End();
  auto r = Run(archive);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(ModeOf("dest/d"), 0775u);
  EXPECT_EQ(ModeOf("dest/d/suid"), 0755u);
  EXPECT_EQ(ModeOf("dest/d/sgid"), 0711u);
  EXPECT_EQ(ModeOf("dest/tmp"), 0777u);
  // The agent's rules (uploads into a sandbox) keep them, as before.
  ASSERT_EQ(mkdir((t_ / "agent").c_str(), 0755), 0);
  std::mt19937 rng(2);
  ASSERT_TRUE(Extract(archive, t_ / "agent", rng, 512).ok());
  EXPECT_EQ(ModeOf("agent/d/suid"), 04755u);
  EXPECT_EQ(ModeOf("agent/tmp"), 01777u);
}

TEST_F(TarHostRulesTest, ADirectoryThatWasThereKeepsItsMode) {
  auto r = Run(WithMode("keep/", '5', 0777) + WithMode("keep/new", '0', 0644, "n") + End());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(ModeOf("dest/keep"), 0700u);
  EXPECT_EQ(ReadFile(t_ / "dest/keep/new"), "n");
  // One the archive made (as a parent, before its own entry) gets the entry's mode.
  r = Run(Entry("made/f", '0', "f") + WithMode("made/", '5', 0750) + End());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(ModeOf("dest/made"), 0750u);
}

TEST_F(TarHostRulesTest, BadNamesAreRefusedNamingTheEntryAndUndone) {
  std::string first = Entry("new/", '5') + Entry("new/a", '0', "a");
  ExpectRefusedAndUndone(first + Entry("../outside/target", '0', "evil") + End(),
                         "'../outside/target'");
  ExpectRefusedAndUndone(first + Entry("new/../../x", '0', "evil") + End(), "'new/../../x'");
  ExpectRefusedAndUndone(first + Entry(t_ / "outside/target", '0', "evil") + End(), "absolute");
  // A NUL inside a name can only come through a pax or GNU long-name header.
  std::string nul_name = std::string("a") + '\0' + "/../../x";
  ExpectRefusedAndUndone(
      first + Pax("19 path=" + nul_name + "\n") + Entry("short", '0', "e") + End(), "NUL");
  ExpectRefusedAndUndone(
      first + Entry("././@LongLink", 'L', nul_name + '\0', {}, true) + Entry("s", '0', "e") + End(),
      "NUL");
  EXPECT_FALSE(fs::exists(t_ / "x"));
}

// top_name (`agvisor cp` to a new name): the top entry lands under the new name, hard links
// follow it, and an entry outside the top one, or a name that is not one component, is refused.
TEST_F(TarHostRulesTest, TopNameRenamesTheArchivesTopEntry) {
  TarReaderOptions o;
  o.top_name = "renamed";
  auto r = Run(Entry("src/", '5') + Entry("src/a", '0', "a") +
                   Entry("./src/sub/b", '1', {}, "src/a") + End(),
               o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(ReadFile(t_ / "dest/renamed/a"), "a");
  EXPECT_EQ(ReadFile(t_ / "dest/renamed/sub/b"), "a");
  EXPECT_FALSE(fs::exists(t_ / "dest/src"));
  o.top_name = "file.txt";
  r = Run(Entry("hostname", '0', "one") + End(), o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(ReadFile(t_ / "dest/file.txt"), "one");
  o.top_name = "x";
  ExpectRefusedAndUndone(Entry("f", '0', "f") + Entry("other", '0', "evil") + End(), "'other'",
                         ErrorCode::kInvalidArgument, o);
  ExpectRefusedAndUndone(Entry("f", '0', "f") + Entry("g", '1', {}, "secret") + End(), "'g'",
                         ErrorCode::kInvalidArgument, o);
  for (const char* bad : {"..", ".", "a/b"}) {
    o.top_name = bad;
    auto open = TarStreamReader::Open(t_ / "dest", o);
    ASSERT_FALSE(open.ok()) << bad;
    EXPECT_EQ(open.error().code(), ErrorCode::kInvalidArgument);
  }
}

TEST_F(TarHostRulesTest, NothingIsWrittenThroughASymlink) {
  // One the archive made a moment ago...
  ExpectRefusedAndUndone(Entry("keep/l", '2', {}, "old") + Entry("d", '2', {}, "keep") +
                             Entry("d/file", '0', "evil") + End(),
                         "'d/file'");
  EXPECT_FALSE(fs::exists(t_ / "dest/keep/file"));
  // ...and one that was there before (a first download planted it).
  ASSERT_EQ(symlink((t_ / "outside").c_str(), (t_ / "dest/planted").c_str()), 0);
  ExpectRefusedAndUndone(Entry("new", '0', "n") + Entry("planted/target", '0', "evil") + End(),
                         "'planted/target'");
  EXPECT_TRUE(fs::is_symlink(t_ / "dest/planted"));
  // Links that leave the destination are refused, not created.
  ExpectRefusedAndUndone(Entry("new", '0', "n") + Entry("etc", '2', {}, "/etc") + End(), "'etc'");
  ExpectRefusedAndUndone(Entry("up", '2', {}, "../outside") + End(), "'up'");
}

TEST_F(TarHostRulesTest, HardLinksOnlyToEntriesOfTheSameArchive) {
  // A file that was in the destination before: refused (the sandbox would get a second name
  // for it, and a later write through that name would change the user's file).
  ExpectRefusedAndUndone(Entry("new", '0', "n") + Entry("h", '1', {}, "secret") + End(), "'h'");
  ExpectRefusedAndUndone(Entry("h", '1', {}, "keep/old") + End(), "'h'");
  // One the archive made itself: allowed.
  auto r = Run(Entry("a", '0', "shared") + Entry("sub/b", '1', {}, "a") + End());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  struct stat a, b;
  ASSERT_EQ(stat((t_ / "dest/a").c_str(), &a), 0);
  ASSERT_EQ(stat((t_ / "dest/sub/b").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  // An earlier extraction's file is "there before" for the next one.
  ExpectRefusedAndUndone(Entry("c", '1', {}, "a") + End(), "'c'");
}

TEST_F(TarHostRulesTest, AFailedDownloadPutsBackTheFilesItReplaced) {
  // The archive replaces two of the user's files (one twice), then is refused: both come back
  // as they were, and no set-aside name is left.
  ExpectRefusedAndUndone(Entry("keep/old", '0', "evil") + Entry("secret", '0', "x") +
                             Entry("secret", '0', "y") + Entry("../x", '0', "z") + End(),
                         "'../x'");
  EXPECT_EQ(ReadFile(t_ / "dest/keep/old"), "mine");
  EXPECT_EQ(ReadFile(t_ / "dest/secret"), "password");
  EXPECT_EQ(ModeOf("dest/secret"), 0600u);
  // A download that succeeds replaces them and leaves nothing else behind.
  auto r = Run(Entry("keep/old", '0', "new") + Entry("secret", '0', "a") +
               Entry("secret", '0', "b") + End());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(ReadFile(t_ / "dest/keep/old"), "new");
  EXPECT_EQ(ReadFile(t_ / "dest/secret"), "b");
  for (const auto& e : fs::recursive_directory_iterator(t_ / "dest")) {
    EXPECT_EQ(e.path().filename().string().find(".agvisor-replaced"), std::string::npos)
        << e.path();
  }
}

TEST_F(TarHostRulesTest, AHardLinkToASymlinkCannotClimbOutOfTheDestination) {
  // The symlink is the archive's own, so the same-archive rule lets the hard link through; its
  // target must still stay inside when read from the hard link's directory.
  ExpectRefusedAndUndone(Entry("d/e/", '5') + Entry("d/e/l", '2', {}, "../../.ssh/keys") +
                             Entry("top", '1', {}, "d/e/l") + End(),
                         "'top'");
}

TEST_F(TarHostRulesTest, AFailureMidwayRemovesExactlyWhatItCreated) {
  // Files, links, hard links and directories (explicit and implied), then a refused entry.
  std::string made = Entry("n1/", '5') + Entry("n1/n2/f", '0', Pattern(5000, 3)) +
                     Entry("n1/l", '2', {}, "n2/f") + Entry("n1/h", '1', {}, "n1/n2/f") +
                     Entry("keep/added", '0', "x") + WithMode("ro/", '5', 0555) +
                     Entry("ro/inside", '0', "y");
  ExpectRefusedAndUndone(made + Entry("dev", '3') + End(), "'dev'");
  // The archive ends early, in the middle of a file.
  std::string cut = made + Entry("big", '0', Pattern(4000, 4));
  ExpectRefusedAndUndone(cut.substr(0, cut.size() - 2000), "truncated");
  // The caller gives up (its transport broke) and destroys the reader before Finish.
  {
    TarReaderOptions o;
    o.host_rules = true;
    auto r = TarStreamReader::Open(t_ / "dest", o);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE((*r)->Push(made).ok());
    EXPECT_TRUE(fs::exists(t_ / "dest/n1/n2/f"));
    // n1, n1/n2 (implied), n1/n2/f, n1/l, n1/h, keep/added (keep was there), ro, ro/inside.
    EXPECT_EQ((*r)->created_count(), 8u);
  }
  EXPECT_FALSE(fs::exists(t_ / "dest/n1"));
  EXPECT_FALSE(fs::exists(t_ / "dest/keep/added"));
  EXPECT_EQ(ReadFile(t_ / "dest/keep/old"), "mine");
}

TEST_F(TarHostRulesTest, ByteBudgetRefusesAForgedHugeEntryAtItsHeader) {
  TarReaderOptions o;
  o.max_bytes = 1000;
  // A 10 GB entry (size in a pax header) with no data behind it: refused at once.
  ExpectRefusedAndUndone(Entry("small", '0', std::string(600, 's')) + Pax("20 size=10737418240\n") +
                             Entry("huge", '0') + End(),
                         "'huge'", ErrorCode::kResourceExhausted, o);
  // Two entries within the budget each, but not together.
  ExpectRefusedAndUndone(
      Entry("a", '0', std::string(600, 'a')) + Entry("b", '0', std::string(600, 'b')) + End(),
      "'b'", ErrorCode::kResourceExhausted, o);
  auto r = Run(Entry("a", '0', std::string(1000, 'a')) + End(), o);
  EXPECT_TRUE(r.ok()) << r.error().ToString();
}

TEST_F(TarHostRulesTest, BookkeepingIsBounded) {
  TarReaderOptions o;
  o.max_bookkeeping_bytes = 4096;
  std::string archive;
  for (int i = 0; i < 200; ++i) archive += Entry("f" + std::to_string(i), '0', "x");
  archive += End();
  ExpectRefusedAndUndone(archive, "keeps track", ErrorCode::kResourceExhausted, o);
  // The default bound takes these easily.
  auto r = Run(archive);
  EXPECT_TRUE(r.ok()) << r.error().ToString();
}

}  // namespace
}  // namespace agvisor

namespace agvisor {
namespace {

// The entry names of a plain ustar archive (names under 100 bytes), in order.
std::vector<std::string> EntryNames(const std::string& archive) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos + 512 <= archive.size() && archive[pos] != '\0') {
    out.emplace_back(archive.data() + pos, strnlen(archive.data() + pos, 100));
    const std::uint64_t size = std::strtoull(archive.substr(pos + 124, 12).c_str(), nullptr, 8);
    pos += 512 + (size + 511) / 512 * 512;
  }
  return out;
}

// Layer mode: what changed after `since` (a write, a chmod, a new file, a new directory), a
// name the image did not have even with an old ctime, the directories above each (header
// only), whiteouts for the image's names that are gone, and a whole subtree; nothing else.
TEST(TarStreamTest, ALayerHoldsWhatChangedTheDirectoriesAboveAndWhiteouts) {
  TempDir t;
  const std::string root = t / "root";
  ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
  for (const char* d : {"/d", "/e", "/p", "/p/q", "/w"}) {
    ASSERT_EQ(mkdir((root + d).c_str(), 0755), 0);
  }
  for (const char* f : {"/a", "/b", "/c", "/d/x", "/d/y", "/e/f", "/p/q/r", "/p/q/s", "/w/old"}) {
    WriteFile(root + f, "old");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  TarStreamWriter::Options::Layer layer;
  ASSERT_EQ(clock_gettime(CLOCK_REALTIME, &layer.since), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(chmod((root + "/a").c_str(), 0600), 0);
  WriteFile(root + "/b", "new");
  WriteFile(root + "/d/z", "new");
  ASSERT_EQ(unlink((root + "/d/y").c_str()), 0);
  WriteFile(root + "/p/q/r", "changed");
  ASSERT_EQ(mkdir((root + "/n").c_str(), 0700), 0);
  WriteFile(root + "/n/m", "new");
  // The image's tree as the host lists it (sorted names per directory); "c" is not in it.
  layer.baseline = {{".", {"a", "b", "d", "e", "gone", "p", "w"}},
                    {"./d", {"x", "y"}},
                    {"./e", {"f"}},
                    {"./p", {"q"}},
                    {"./p/q", {"r", "s"}},
                    {"./w", {"old"}}};
  layer.whole = {root + "/w"};
  TarStreamWriter::Options o;
  o.name_as_root = true;
  o.layer = layer;
  std::mt19937 rng(7);
  auto written = WriteArchive(root, rng, 4096, o);
  ASSERT_TRUE(written.ok()) << written.error().message();
  const std::string& archive = *written;
  EXPECT_EQ(EntryNames(archive),
            (std::vector<std::string>{"./", "./.wh.gone", "./a", "./b", "./c", "./d/", "./d/.wh.y",
                                      "./d/z", "./n/", "./n/m", "./p/", "./p/q/", "./p/q/r", "./w/",
                                      "./w/old"}));
  TarCheckOptions co;
  co.whiteouts = true;
  TarStreamChecker checker(co);
  ASSERT_TRUE(checker.Push(archive).ok());
  ASSERT_TRUE(checker.Finish().ok());
  EXPECT_EQ(checker.stats().whiteouts, 2u);
  // Not "/" (nor named as it): refused.
  TarStreamWriter::Options bad;
  bad.layer = layer;
  EXPECT_EQ(TarStreamWriter::Open(root, bad).error().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agvisor
