#include "agvisor/agent/files.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "agvisor/base/subprocess.h"
#include "gtest/gtest.h"

namespace agvisor::agent {
namespace {

namespace fs = std::filesystem;
using proto::Type;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "files_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    auto r = RunCommand({"chmod", "-R", "u+rwx", dir_});
    auto r2 = RunCommand({"rm", "-rf", dir_});
    (void)r;
    (void)r2;
  }
  std::string P(std::string_view rel) const { return dir_ + "/" + std::string(rel); }

  static void Write(const std::string& path, const std::string& data, mode_t mode = 0644) {
    {
      std::ofstream f(path, std::ios::binary);
      f << data;
    }
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
  }
  static std::string Read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  static std::vector<std::string> Names(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }

  // Runs a one-shot op and returns its reply.
  static Reply OneShot(Type type, const std::string& payload) {
    auto op = StartFileOp(type, payload);
    EXPECT_FALSE(op->is_streaming_in());
    EXPECT_FALSE(op->is_streaming_out());
    auto reply = op->Immediate();
    EXPECT_TRUE(reply.has_value());
    return reply ? *reply : Reply{};
  }
  static proto::ErrorPayload ErrorOf(const Reply& r) {
    EXPECT_EQ(r.type, Type::kError);
    auto e = proto::ErrorPayload::Decode(r.payload);
    EXPECT_TRUE(e.ok());
    return e.ok() ? *e : proto::ErrorPayload{};
  }
  static proto::ErrorPayload ErrorOf(std::optional<Reply> r) {
    EXPECT_TRUE(r.has_value());
    return r ? ErrorOf(*r) : proto::ErrorPayload{};
  }
  static Reply Stat(const std::string& path) {
    return OneShot(Type::kStat, proto::PathRequest{path}.Encode());
  }
  // Writes `data` with FILE_WRITE in `chunk`-byte DATA frames and returns the Finish reply.
  static Reply WriteFile(const std::string& path, const std::string& data, std::uint32_t mode,
                         std::uint8_t flags = 0, std::size_t chunk = 1000) {
    auto op = StartFileOp(Type::kFileWrite, proto::FileWrite{path, mode, flags}.Encode());
    if (auto r = op->Immediate()) return *r;
    EXPECT_TRUE(op->is_streaming_in());
    for (std::size_t pos = 0; pos < data.size(); pos += chunk) {
      auto r = op->Push(std::string_view(data).substr(pos, chunk));
      if (!r.ok()) return ErrorReply(r.error());
    }
    return op->Finish();
  }
  // Pulls a streaming-out op to its end.
  static Result<std::string> PullAll(FileOp& op, std::size_t max) {
    std::string out;
    while (true) {
      Chunk c = AGVISOR_TRY(op.Pull(max));
      EXPECT_LE(c.data.size(), max);
      if (!c.end) {
        EXPECT_FALSE(c.data.empty());
      }
      out += c.data;
      if (c.end) return out;
    }
  }

  std::string dir_;
};

TEST_F(FilesTest, StatFileDirSymlinkAndMissing) {
  Write(P("f"), "hello", 0640);
  ASSERT_EQ(symlink("f", P("l").c_str()), 0);
  auto r = Stat(P("f"));
  ASSERT_EQ(r.type, Type::kStatResult);
  auto s = proto::StatResult::Decode(r.payload);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->entry.name, "f");
  EXPECT_EQ(s->entry.kind, proto::EntryKind::kFile);
  EXPECT_EQ(s->entry.mode, S_IFREG | 0640u);
  EXPECT_EQ(s->entry.size, 5u);
  EXPECT_GT(s->entry.mtime_unix_ms, 1600000000000);

  s = proto::StatResult::Decode(Stat(P("l")).payload);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->entry.kind, proto::EntryKind::kSymlink);
  EXPECT_EQ(s->entry.link_target, "f");

  s = proto::StatResult::Decode(Stat(dir_ + "/").payload);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->entry.kind, proto::EntryKind::kDir);

  auto e = ErrorOf(Stat(P("missing")));
  EXPECT_EQ(e.code, proto::WireError::kNotFound);
  EXPECT_NE(e.message.find(P("missing")), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("No such file"), std::string::npos) << e.message;
}

TEST_F(FilesTest, BadPathsAreInvalidArguments) {
  for (std::string path : {std::string(""), std::string("relative/x"), std::string("/a\0b", 4)}) {
    for (Type t : {Type::kStat, Type::kList, Type::kFileRead, Type::kTarRead, Type::kTarWrite}) {
      auto op = StartFileOp(t, proto::PathRequest{path}.Encode());
      EXPECT_EQ(ErrorOf(op->Immediate()).code, proto::WireError::kInvalidArgument);
    }
    EXPECT_EQ(ErrorOf(WriteFile(path, "x", 0644)).code, proto::WireError::kInvalidArgument);
    EXPECT_EQ(ErrorOf(OneShot(Type::kMkdir, proto::Mkdir{path, 0755, true}.Encode())).code,
              proto::WireError::kInvalidArgument);
    EXPECT_EQ(ErrorOf(OneShot(Type::kRemove, proto::Remove{path, true}.Encode())).code,
              proto::WireError::kInvalidArgument);
  }
  // Undecodable payloads and non-file types.
  EXPECT_EQ(ErrorOf(OneShot(Type::kStat, "\x01")).code, proto::WireError::kInvalidArgument);
  EXPECT_EQ(ErrorOf(OneShot(Type::kPing, "")).code, proto::WireError::kInvalidArgument);
}

TEST_F(FilesTest, List) {
  Write(P("b"), "12");
  ASSERT_EQ(mkdir(P("a").c_str(), 0700), 0);
  ASSERT_EQ(symlink("/nowhere", P("c").c_str()), 0);
  auto r = OneShot(Type::kList, proto::PathRequest{dir_}.Encode());
  ASSERT_EQ(r.type, Type::kListResult);
  auto l = proto::ListResult::Decode(r.payload);
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->entries.size(), 3u);
  EXPECT_EQ(l->entries[0].name, "a");
  EXPECT_EQ(l->entries[0].kind, proto::EntryKind::kDir);
  EXPECT_EQ(l->entries[1].name, "b");
  EXPECT_EQ(l->entries[1].size, 2u);
  EXPECT_EQ(l->entries[2].name, "c");
  EXPECT_EQ(l->entries[2].kind, proto::EntryKind::kSymlink);
  EXPECT_EQ(l->entries[2].link_target, "/nowhere");

  EXPECT_EQ(ErrorOf(OneShot(Type::kList, proto::PathRequest{P("b")}.Encode())).code,
            proto::WireError::kInvalidArgument);  // not a directory
  EXPECT_EQ(ErrorOf(OneShot(Type::kList, proto::PathRequest{P("zz")}.Encode())).code,
            proto::WireError::kNotFound);
}

TEST_F(FilesTest, Mkdir) {
  auto mk = [&](const std::string& p, std::uint32_t mode, bool parents) {
    return OneShot(Type::kMkdir, proto::Mkdir{p, mode, parents}.Encode());
  };
  mode_t old = umask(077);
  EXPECT_EQ(mk(P("d"), 0751, false).type, Type::kOk);
  umask(old);
  struct stat st;
  ASSERT_EQ(stat(P("d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0751u);  // exact, whatever the umask
  EXPECT_EQ(ErrorOf(mk(P("d"), 0755, false)).code, proto::WireError::kConflict);
  EXPECT_EQ(ErrorOf(mk(P("x/y/z"), 0755, false)).code, proto::WireError::kNotFound);
  EXPECT_EQ(mk(P("x/y/z"), 0700, true).type, Type::kOk);
  ASSERT_EQ(stat(P("x/y/z").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(mk(P("x/y/z"), 0700, true).type, Type::kOk);  // -p: existing is fine
  Write(P("file"), "");
  EXPECT_EQ(ErrorOf(mk(P("file/sub"), 0755, true)).code, proto::WireError::kConflict);
  EXPECT_EQ(ErrorOf(mk(P("file"), 0755, true)).code, proto::WireError::kConflict);
}

TEST_F(FilesTest, Remove) {
  auto rm = [&](const std::string& p, bool recursive) {
    return OneShot(Type::kRemove, proto::Remove{p, recursive}.Encode());
  };
  Write(P("f"), "x");
  EXPECT_EQ(rm(P("f"), false).type, Type::kOk);
  EXPECT_FALSE(fs::exists(P("f")));
  EXPECT_EQ(ErrorOf(rm(P("f"), false)).code, proto::WireError::kNotFound);
  ASSERT_EQ(mkdir(P("empty").c_str(), 0755), 0);
  EXPECT_EQ(rm(P("empty"), false).type, Type::kOk);

  // A tree with a symlink to a directory outside it: the link goes, the outside stays.
  ASSERT_EQ(mkdir(P("outside").c_str(), 0755), 0);
  Write(P("outside/keep"), "keep");
  ASSERT_EQ(mkdir(P("t").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(P("t/sub").c_str(), 0555), 0);
  Write(P("t/sub/f"), "x");
  ASSERT_EQ(symlink(P("outside").c_str(), P("t/sub/out").c_str()), 0);
  auto e = ErrorOf(rm(P("t"), false));
  EXPECT_EQ(e.code, proto::WireError::kConflict);
  EXPECT_NE(e.message.find("not empty"), std::string::npos);
  EXPECT_EQ(rm(P("t"), true).type, Type::kOk);
  EXPECT_FALSE(fs::exists(P("t")));
  EXPECT_EQ(Read(P("outside/keep")), "keep");

  // A symlink itself is removed, not its target.
  ASSERT_EQ(symlink(P("outside").c_str(), P("link").c_str()), 0);
  EXPECT_EQ(rm(P("link"), true).type, Type::kOk);
  EXPECT_EQ(Read(P("outside/keep")), "keep");

  EXPECT_EQ(ErrorOf(rm("/", true)).code, proto::WireError::kInvalidArgument);
}

TEST_F(FilesTest, FileReadSmallAndErrors) {
  Write(P("f"), "contents");
  auto op = StartFileOp(Type::kFileRead, proto::PathRequest{P("f")}.Encode());
  ASSERT_FALSE(op->Immediate().has_value());
  ASSERT_TRUE(op->is_streaming_out());
  auto data = PullAll(*op, 3);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, "contents");

  Write(P("empty"), "");
  op = StartFileOp(Type::kFileRead, proto::PathRequest{P("empty")}.Encode());
  ASSERT_FALSE(op->Immediate().has_value());
  data = PullAll(*op, 100);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, "");

  op = StartFileOp(Type::kFileRead, proto::PathRequest{P("missing")}.Encode());
  auto e = ErrorOf(op->Immediate());
  EXPECT_EQ(e.code, proto::WireError::kNotFound);
  EXPECT_NE(e.message.find(P("missing")), std::string::npos);
  op = StartFileOp(Type::kFileRead, proto::PathRequest{dir_}.Encode());
  e = ErrorOf(op->Immediate());
  EXPECT_EQ(e.code, proto::WireError::kInvalidArgument);
  EXPECT_NE(e.message.find("is a directory"), std::string::npos);
  ASSERT_EQ(mkfifo(P("fifo").c_str(), 0644), 0);
  op = StartFileOp(Type::kFileRead, proto::PathRequest{P("fifo")}.Encode());
  EXPECT_EQ(ErrorOf(op->Immediate()).code, proto::WireError::kInvalidArgument);
}

long RssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TEST_F(FilesTest, FiftyMegabyteReadInBoundedChunks) {
  constexpr std::size_t kSize = 50 * 1024 * 1024 + 123;
  constexpr std::size_t kChunk = 64 * 1024;
  {
    std::ofstream f(P("big"), std::ios::binary);
    std::string block(1 << 20, '\0');
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 7 + i / 251);
    for (std::size_t written = 0; written < kSize; written += block.size()) {
      f.write(block.data(), static_cast<std::streamsize>(std::min(block.size(), kSize - written)));
    }
  }
  std::string expect_first_mb = Read(P("big")).substr(0, 1 << 20);
  long rss_before = RssKiB();
  auto op = StartFileOp(Type::kFileRead, proto::PathRequest{P("big")}.Encode());
  ASSERT_FALSE(op->Immediate().has_value());
  std::size_t total = 0, chunks = 0;
  bool same = true;
  while (true) {
    auto c = op->Pull(kChunk);
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    ASSERT_LE(c->data.size(), kChunk);
    for (std::size_t i = 0; i < c->data.size(); ++i) {
      std::size_t off = (total + i) % (1 << 20);
      if (c->data[i] != expect_first_mb[off]) same = false;
    }
    total += c->data.size();
    ++chunks;
    if (c->end) break;
  }
  EXPECT_TRUE(same);
  EXPECT_EQ(total, kSize);
  EXPECT_GE(chunks, kSize / kChunk);
  EXPECT_LT(RssKiB() - rss_before, 8 * 1024) << "reading grew the process by more than 8 MiB";
}

TEST_F(FilesTest, FileWriteCreatesReplacesAndAppliesMode) {
  std::string data(300000, 'z');
  EXPECT_EQ(WriteFile(P("new"), data, 0640).type, Type::kOk);
  EXPECT_EQ(Read(P("new")), data);
  struct stat st;
  ASSERT_EQ(stat(P("new").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(WriteFile(P("new"), "short", 0600).type, Type::kOk);
  EXPECT_EQ(Read(P("new")), "short");
  EXPECT_EQ(WriteFile(P("empty"), "", 0644).type, Type::kOk);
  EXPECT_EQ(Read(P("empty")), "");
  EXPECT_EQ(Names(dir_), (std::vector<std::string>{"empty", "new"}));  // no temporary left

  // Parents.
  auto e = ErrorOf(WriteFile(P("a/b/c"), "x", 0644));
  EXPECT_EQ(e.code, proto::WireError::kNotFound);
  EXPECT_NE(e.message.find("parents"), std::string::npos);
  EXPECT_EQ(WriteFile(P("a/b/c"), "x", 0644, proto::kFileWriteParents).type, Type::kOk);
  EXPECT_EQ(Read(P("a/b/c")), "x");

  // A directory is not a file.
  EXPECT_EQ(ErrorOf(WriteFile(P("a"), "x", 0644)).code, proto::WireError::kInvalidArgument);
  EXPECT_EQ(ErrorOf(WriteFile(dir_ + "/", "x", 0644)).code, proto::WireError::kInvalidArgument);

  // Through a symlink: the file it points to is replaced, the link stays.
  ASSERT_EQ(symlink("a/b/c", P("link").c_str()), 0);
  EXPECT_EQ(WriteFile(P("link"), "via link", 0644).type, Type::kOk);
  EXPECT_EQ(Read(P("a/b/c")), "via link");
  EXPECT_TRUE(fs::is_symlink(P("link")));
}

TEST_F(FilesTest, FileWriteIsAtomic) {
  Write(P("target"), "old contents");
  // Abandoned mid-way (CLOSE, session gone): the target is untouched, nothing is left behind.
  {
    auto op = StartFileOp(Type::kFileWrite, proto::FileWrite{P("target"), 0644, 0}.Encode());
    ASSERT_FALSE(op->Immediate().has_value());
    ASSERT_TRUE(op->Push("new partial").ok());
    EXPECT_EQ(Read(P("target")), "old contents");
  }
  EXPECT_EQ(Read(P("target")), "old contents");
  EXPECT_EQ(Names(dir_), std::vector<std::string>{"target"});

  // A write that fails (file size limit: EFBIG) leaves the old file and no temporary.
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = {4096, old_limit.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  Reply r = WriteFile(P("target"), std::string(100000, 'n'), 0644);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, old_handler);
  auto e = ErrorOf(r);
  EXPECT_NE(e.message.find("write"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find(P("target")), std::string::npos) << e.message;
  EXPECT_EQ(Read(P("target")), "old contents");
  EXPECT_EQ(Names(dir_), std::vector<std::string>{"target"});
}

// Runs `body` in a forked child; returns its exit code (77: could not set up, skip).
int InChild(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(FilesTest, FullDiskIsResourceExhaustedAndSaysSo) {
  ASSERT_EQ(mkdir(P("mnt").c_str(), 0755), 0);
  std::string mnt = P("mnt");
  int rc = InChild([&] {
    if (unshare(CLONE_NEWNS) != 0) return 77;
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) return 77;
    Reply r = WriteFile(mnt + "/f", std::string(1 << 20, 'x'), 0644);
    auto e = proto::ErrorPayload::Decode(r.payload);
    if (r.type != Type::kError || !e.ok()) return 1;
    if (e->code != proto::WireError::kResourceExhausted) return 2;
    if (e->message.find("disk is full") == std::string::npos) return 3;
    if (!fs::is_empty(mnt)) return 4;  // the temporary file is gone
    return 0;
  });
  // scripts/test runs as root: not being able to mount is a failure, not a reason to skip.
  ASSERT_NE(rc, 77) << "cannot mount a small tmpfs in a private mount namespace (run as root)";
  EXPECT_EQ(rc, 0);
}

TEST_F(FilesTest, PermissionDenied) {
  Write(P("secret"), "s", 0600);
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  std::string secret = P("secret"), dir = dir_;
  int rc = InChild([&] {
    if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0) return 77;
    auto op = StartFileOp(Type::kFileRead, proto::PathRequest{secret}.Encode());
    auto r = op->Immediate();
    if (!r) return 1;
    auto e = proto::ErrorPayload::Decode(r->payload);
    if (!e.ok() || e->code != proto::WireError::kPermissionDenied) return 2;
    if (e->message.find("Permission denied") == std::string::npos) return 3;
    Reply w = WriteFile(dir + "/new", "x", 0644);
    e = proto::ErrorPayload::Decode(w.payload);
    if (!e.ok() || e->code != proto::WireError::kPermissionDenied) return 4;
    return 0;
  });
  ASSERT_NE(rc, 77) << "cannot drop privileges to uid 65534 (run as root)";
  EXPECT_EQ(rc, 0);
}

TEST_F(FilesTest, TarReadTarWriteRoundTrip) {
  ASSERT_EQ(mkdir(P("src").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(P("src/tree").c_str(), 0750), 0);
  ASSERT_EQ(mkdir(P("src/tree/empty").c_str(), 0700), 0);
  Write(P("src/tree/a"), std::string(200000, 'a'), 0600);
  Write(P("src/tree/" + std::string(130, 'n')), "long name", 0644);
  ASSERT_EQ(symlink("a", P("src/tree/l").c_str()), 0);

  auto reader = StartFileOp(Type::kTarRead, proto::PathRequest{P("src/tree")}.Encode());
  ASSERT_FALSE(reader->Immediate().has_value());
  ASSERT_TRUE(reader->is_streaming_out());
  auto writer = StartFileOp(Type::kTarWrite, proto::PathRequest{P("dst/sub")}.Encode());
  ASSERT_FALSE(writer->Immediate().has_value());  // creates the missing destination
  ASSERT_TRUE(writer->is_streaming_in());
  std::mt19937 rng(11);
  while (true) {
    auto c = reader->Pull(std::uniform_int_distribution<std::size_t>(1, 70000)(rng));
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    ASSERT_TRUE(writer->Push(c->data).ok());
    if (c->end) break;
  }
  EXPECT_EQ(writer->Finish().type, Type::kOk);

  EXPECT_EQ(Read(P("dst/sub/tree/a")), std::string(200000, 'a'));
  EXPECT_EQ(Read(P("dst/sub/tree/" + std::string(130, 'n'))), "long name");
  EXPECT_EQ(fs::read_symlink(P("dst/sub/tree/l")), "a");
  EXPECT_TRUE(fs::is_directory(P("dst/sub/tree/empty")));
  struct stat st;
  ASSERT_EQ(stat(P("dst/sub/tree").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  ASSERT_EQ(stat(P("dst/sub/tree/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  auto missing = StartFileOp(Type::kTarRead, proto::PathRequest{P("nope")}.Encode());
  auto e = ErrorOf(missing->Immediate());
  EXPECT_EQ(e.code, proto::WireError::kNotFound);
  EXPECT_NE(e.message.find("TAR_READ " + P("nope")), std::string::npos) << e.message;
}

TEST_F(FilesTest, TarWriteRefusesEscapes) {
  // `tar` can make an archive with a ".." name when asked to keep it verbatim.
  ASSERT_EQ(mkdir(P("in").c_str(), 0755), 0);
  Write(P("x"), "outside");
  auto out = RunCommand({"tar", "-c", "-P", "-C", P("in"), "../x"});
  ASSERT_TRUE(out.ok() && out->status.success());
  auto op = StartFileOp(Type::kTarWrite, proto::PathRequest{P("in")}.Encode());
  ASSERT_FALSE(op->Immediate().has_value());
  auto r = op->Push(out->out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message().find("../x"), std::string::npos) << r.error().ToString();
  EXPECT_EQ(Read(P("x")), "outside");
}

// The image's tree as the host sends it for a layer: NUL-ended absolute paths, then a NUL.
TEST(LayerBaselineTest, ParsesPathsIntoDirectoriesAndRefusesBadOnes) {
  auto list = [](std::initializer_list<std::string_view> paths) {
    std::string s;
    for (std::string_view p : paths) (s += p) += '\0';
    return s + '\0';
  };
  std::map<std::string, std::vector<std::string>, std::less<>> b;
  const std::string in = list({"/etc", "/etc/passwd", "/bin", "/etc/hosts"});
  EXPECT_EQ(*ParseLayerBaseline(in.substr(0, 20), &b), 0u);  // not complete yet
  ASSERT_EQ(*ParseLayerBaseline(in, &b), in.size());
  EXPECT_EQ(b["."], (std::vector<std::string>{"bin", "etc"}));
  EXPECT_EQ(b["./etc"], (std::vector<std::string>{"hosts", "passwd"}));
  for (const std::string& bad :
       {list({"etc"}), list({"/"}), list({"/a/../b"}), list({"/a//b"}), list({"/a/./b"})}) {
    auto r = ParseLayerBaseline(bad, &b);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace agvisor::agent
