#include "agvisor/agent/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "agvisor/agent/activity_socket.h"
#include "agvisor/agent/log.h"
#include "agvisor/base/fs.h"
#include "agvisor/base/strings.h"
#include "agvisor/base/tar_stream.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/proto/exit_codes.h"

namespace agvisor::agent {
namespace {

using proto::Type;

// "<what>: <strerror>" with the errno's code; a full disk says so in words.
Error SysError(const std::string& what, int err) {
  Error e = Error::FromErrno(what, err);
  if (err == ENOSPC || err == EDQUOT) {
    return Error(ErrorCode::kResourceExhausted, e.message() + " (the sandbox's disk is full)")
        .set_errno(err);
  }
  return e;
}

// Writes all of `data` to `fd` (blocking); 0, or the errno of the write that failed.
int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

Result<void> CheckPath(std::string_view op, std::string_view path) {
  if (path.empty()) return Error::InvalidArgument(std::string(op) + ": empty path");
  if (path.find('\0') != std::string_view::npos) {
    return Error::InvalidArgument(std::string(op) + ": path contains a NUL byte");
  }
  if (path.front() != '/') {
    return Error::InvalidArgument(std::string(op) + " " + std::string(path) +
                                  ": path must be absolute");
  }
  return Ok();
}

// "/a/b/" -> {"/a", "b"}; "/" -> {"/", ""}.
std::pair<std::string, std::string> SplitPath(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::size_t slash = path.rfind('/');
  std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  return {dir, path.substr(slash + 1)};
}

proto::Entry EntryFromStat(std::string name, const struct stat& st) {
  proto::Entry e;
  e.name = std::move(name);
  if (S_ISREG(st.st_mode)) {
    e.kind = proto::EntryKind::kFile;
  } else if (S_ISDIR(st.st_mode)) {
    e.kind = proto::EntryKind::kDir;
  } else if (S_ISLNK(st.st_mode)) {
    e.kind = proto::EntryKind::kSymlink;
  } else {
    e.kind = proto::EntryKind::kOther;
  }
  e.mode = st.st_mode;
  e.size = static_cast<std::uint64_t>(st.st_size);
  e.mtime_unix_ms =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
  return e;
}

Result<std::string> ReadLinkAt(int dirfd, const char* name, const std::string& what) {
  std::string buf(256, '\0');
  while (true) {
    ssize_t n = readlinkat(dirfd, name, buf.data(), buf.size());
    if (n < 0) return SysError(what + ": readlink", errno);
    if (static_cast<std::size_t>(n) < buf.size()) {
      buf.resize(static_cast<std::size_t>(n));
      return buf;
    }
    buf.resize(buf.size() * 2);
  }
}

// mkdir -p: creates the missing directories of `path` (symlinks followed, like mkdir -p); the
// last one gets `mode` exactly (no umask), the others 0755. Returns whether the last was created.
Result<bool> MkdirAll(const std::string& op, const std::string& path, std::uint32_t mode) {
  bool created = false;
  std::size_t pos = 1;
  while (pos <= path.size()) {
    std::size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    if (end > pos) {
      std::string prefix = path.substr(0, end);
      bool last = path.find_first_not_of('/', end) == std::string::npos;
      created = false;
      if (mkdir(prefix.c_str(), last ? 0700 : 0755) == 0) {
        created = true;
        if (last && chmod(prefix.c_str(), mode & 07777) != 0) {
          return SysError(op + " " + path + ": chmod " + prefix, errno);
        }
      } else if (errno == EEXIST) {
        struct stat st;
        if (stat(prefix.c_str(), &st) != 0)
          return SysError(op + " " + path + ": stat " + prefix, errno);
        if (!S_ISDIR(st.st_mode)) {
          return Error::Conflict(op + " " + path + ": " + prefix + " exists and is not a directory")
              .set_errno(ENOTDIR);
        }
      } else {
        return SysError(op + " " + path + ": mkdir " + prefix, errno);
      }
    }
    pos = end + 1;
  }
  return created;
}

// ---------------------------------------------------------------------------------------------
// One-shot ops.

Reply Encoded(Type type, std::string payload) { return Reply{type, std::move(payload)}; }

Result<Reply> DoStat(const proto::PathRequest& req) {
  AGVISOR_RETURN_IF_ERROR(CheckPath("STAT", req.path));
  struct stat st;
  if (lstat(req.path.c_str(), &st) != 0) return SysError("STAT " + req.path + ": lstat", errno);
  auto [dir, base] = SplitPath(req.path);
  proto::StatResult r;
  r.entry = EntryFromStat(base.empty() ? "/" : base, st);
  if (S_ISLNK(st.st_mode)) {
    r.entry.link_target = AGVISOR_TRY(ReadLinkAt(AT_FDCWD, req.path.c_str(), "STAT " + req.path));
  }
  return Encoded(Type::kStatResult, r.Encode());
}

Result<Reply> DoList(const proto::PathRequest& req) {
  const std::string what = "LIST " + req.path;
  AGVISOR_RETURN_IF_ERROR(CheckPath("LIST", req.path));
  int fd = open(req.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return SysError(what + ": open directory", errno);
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    int err = errno;
    close(fd);
    return SysError(what + ": fdopendir", err);
  }
  proto::ListResult result;
  int err = 0;
  while (true) {
    errno = 0;
    dirent* e = readdir(d);
    if (e == nullptr) {
      err = errno;
      break;
    }
    std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed since readdir
      err = errno;
      closedir(d);
      return SysError(what + "/" + std::string(name) + ": stat", err);
    }
    proto::Entry entry = EntryFromStat(std::string(name), st);
    if (S_ISLNK(st.st_mode)) {
      auto target = ReadLinkAt(dirfd(d), e->d_name, what + "/" + std::string(name));
      if (target.ok()) entry.link_target = std::move(target).value();
    }
    result.entries.push_back(std::move(entry));
  }
  closedir(d);
  if (err != 0) return SysError(what + ": readdir", err);
  std::sort(result.entries.begin(), result.entries.end(),
            [](const proto::Entry& a, const proto::Entry& b) { return a.name < b.name; });
  std::string payload = result.Encode();
  if (!proto::FitsInFrame(payload.size())) {
    return Error::ResourceExhausted(what + ": " + std::to_string(result.entries.size()) +
                                    " entries do not fit in one frame (" +
                                    std::to_string(payload.size()) + " bytes)");
  }
  return Encoded(Type::kListResult, std::move(payload));
}

Result<Reply> DoMkdir(const proto::Mkdir& req) {
  const std::string what = "MKDIR " + req.path;
  AGVISOR_RETURN_IF_ERROR(CheckPath("MKDIR", req.path));
  if (req.parents) {
    AGVISOR_RETURN_IF_ERROR(MkdirAll("MKDIR", req.path, req.mode));
    return Encoded(Type::kOk, {});
  }
  if (mkdir(req.path.c_str(), 0700) != 0) return SysError(what + ": mkdir", errno);
  if (chmod(req.path.c_str(), req.mode & 07777) != 0) return SysError(what + ": chmod", errno);
  return Encoded(Type::kOk, {});
}

// Removes everything inside directory `fd` (`what` names it), never following a symlink.
Result<void> RemoveContents(int fd, const std::string& what) {
  const std::vector<std::string> names =
      AGVISOR_TRY(ReadDirNames(fd, [&](std::string_view call, int err) {
        return SysError(what + ": " + std::string(call), err);
      }));
  for (const std::string& name : names) {
    std::string child = what + "/" + name;
    struct stat st;
    if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return SysError(child + ": stat", errno);
    }
    if (S_ISDIR(st.st_mode)) {
      int cfd = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cfd < 0) return SysError(child + ": open", errno);
      UniqueFd child_fd(cfd);
      AGVISOR_RETURN_IF_ERROR(RemoveContents(child_fd.get(), child));
      if (unlinkat(fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        return SysError(child + ": rmdir", errno);
      }
    } else if (unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return SysError(child + ": unlink", errno);
    }
  }
  return Ok();
}

Result<Reply> DoRemove(const proto::Remove& req) {
  const std::string what = "REMOVE " + req.path;
  AGVISOR_RETURN_IF_ERROR(CheckPath("REMOVE", req.path));
  auto [dir, base] = SplitPath(req.path);
  if (base.empty() || base == "." || base == "..") {
    return Error::InvalidArgument(what + ": refusing to remove '/', '.' or '..'");
  }
  int dfd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return SysError(what + ": open " + dir, errno);
  UniqueFd parent(dfd);
  struct stat st;
  if (fstatat(parent.get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return SysError(what + ": lstat", errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(parent.get(), base.c_str(), 0) != 0) return SysError(what + ": unlink", errno);
    return Encoded(Type::kOk, {});
  }
  if (req.recursive) {
    int fd = openat(parent.get(), base.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return SysError(what + ": open", errno);
    UniqueFd self(fd);
    AGVISOR_RETURN_IF_ERROR(RemoveContents(self.get(), "REMOVE " + req.path));
  }
  if (unlinkat(parent.get(), base.c_str(), AT_REMOVEDIR) != 0) {
    int err = errno;
    if (err == ENOTEMPTY || err == EEXIST) {
      return Error::Conflict(what + ": rmdir: directory not empty (set recursive)").set_errno(err);
    }
    return SysError(what + ": rmdir", err);
  }
  return Encoded(Type::kOk, {});
}

class OneShotOp final : public FileOp {
 public:
  explicit OneShotOp(Reply reply) : reply_(std::move(reply)) {}
  std::optional<Reply> Immediate() override { return std::move(reply_); }

 private:
  Reply reply_;
};

std::unique_ptr<FileOp> OneShot(Result<Reply> r) {
  return std::make_unique<OneShotOp>(r.ok() ? std::move(r).value() : ErrorReply(r.error()));
}

// ---------------------------------------------------------------------------------------------
// Streaming ops: Streaming() makes one and starts it on its request; a failed start is the
// request's answer (an ERROR), and the op is dropped.

class FileReadOp final : public FileOp {
 public:
  bool is_streaming_out() const override { return true; }

  Result<Chunk> Pull(std::size_t max_bytes) override {
    Chunk c;
    if (!fd_) {
      c.end = true;
      return c;
    }
    if (max_bytes == 0) return Error::InvalidArgument("FILE_READ " + path_ + ": Pull(0)");
    c.data.resize(max_bytes);
    std::size_t got = 0;
    while (got < max_bytes) {
      ssize_t n = read(fd_.get(), c.data.data() + got, max_bytes - got);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        fd_.reset();
        return SysError("FILE_READ " + path_ + ": read", err);
      }
      if (n == 0) {
        c.end = true;
        fd_.reset();
        break;
      }
      got += static_cast<std::size_t>(n);
    }
    c.data.resize(got);
    return c;
  }

  // Opens the file to read.
  Result<void> Start(const proto::PathRequest& req) {
    path_ = req.path;
    AGVISOR_RETURN_IF_ERROR(CheckPath("FILE_READ", path_));
    // O_NONBLOCK: opening a FIFO must not hang the loop (it is refused below).
    int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return SysError("FILE_READ " + path_ + ": open", errno);
    UniqueFd file(fd);
    struct stat st;
    if (fstat(file.get(), &st) != 0) return SysError("FILE_READ " + path_ + ": fstat", errno);
    if (S_ISDIR(st.st_mode)) {
      return Error::InvalidArgument("FILE_READ " + path_ + ": is a directory (use TAR_READ)")
          .set_errno(EISDIR);
    }
    if (!S_ISREG(st.st_mode)) {
      return Error::InvalidArgument("FILE_READ " + path_ + ": not a regular file");
    }
    fd_ = std::move(file);
    return Ok();
  }

 private:
  std::string path_;
  UniqueFd fd_;
};

class FileWriteOp final : public FileOp {
 public:
  ~FileWriteOp() override { Discard(); }
  bool is_streaming_in() const override { return true; }

  Result<void> Push(std::string_view data) override {
    if (!fd_) return Error::Internal("FILE_WRITE " + path_ + ": Push after failure or Finish");
    if (int err = WriteAll(fd_.get(), data)) {
      Discard();
      return SysError("FILE_WRITE " + path_ + ": write", err);
    }
    return Ok();
  }

  Reply Finish() override {
    auto r = Commit();
    if (!r.ok()) {
      Discard();
      return ErrorReply(r.error());
    }
    return Reply{Type::kOk, {}};
  }

  // Opens a temporary file beside the target (renamed over it by Finish).
  Result<void> Start(const proto::FileWrite& req) {
    path_ = req.path;
    mode_ = req.mode & 07777;
    const std::uint8_t flags = req.flags;
    AGVISOR_RETURN_IF_ERROR(CheckPath("FILE_WRITE", path_));
    const std::string what = "FILE_WRITE " + path_;
    std::string target = path_;
    // Follow a symlink at the last component ourselves (up to 40, like the kernel), so that the
    // rename replaces the file it points to, as `>` would write into it.
    for (int hops = 0;; ++hops) {
      auto [dir, base] = SplitPath(target);
      if (base.empty() || base == "." || base == "..") {
        return Error::InvalidArgument(what + ": names a directory").set_errno(EISDIR);
      }
      if (flags & proto::kFileWriteParents) {
        AGVISOR_RETURN_IF_ERROR(MkdirAll("FILE_WRITE", dir, 0755));
      }
      int dfd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (dfd < 0) {
        int err = errno;
        if (err == ENOENT) {
          return Error::NotFound(what + ": open " + dir +
                                 ": No such file or directory (set the parents flag to create it)")
              .set_errno(err);
        }
        return SysError(what + ": open " + dir, err);
      }
      dir_ = UniqueFd(dfd);
      name_ = base;
      struct stat st;
      if (fstatat(dir_.get(), name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) return SysError(what + ": stat " + target, errno);
        break;
      }
      if (S_ISLNK(st.st_mode)) {
        if (hops == 40) return SysError(what + ": resolve " + target, ELOOP);
        std::string link = AGVISOR_TRY(ReadLinkAt(dir_.get(), name_.c_str(), what));
        target = link.starts_with('/') ? link : dir + "/" + link;
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        return Error::InvalidArgument(what + ": is a directory").set_errno(EISDIR);
      }
      existing_owner_ = std::make_pair(st.st_uid, st.st_gid);
      break;
    }
    // A temporary name next to the target: the rename at Finish is atomic within a directory.
    static unsigned counter = 0;
    for (int attempt = 0;; ++attempt) {
      tmp_name_ = "." + name_.substr(0, 200) + ".agvisor-" + std::to_string(getpid()) + "-" +
                  std::to_string(++counter);
      int fd = openat(dir_.get(), tmp_name_.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd >= 0) {
        fd_ = UniqueFd(fd);
        break;
      }
      if (errno != EEXIST || attempt == 100) {
        int err = errno;
        tmp_name_.clear();
        return SysError(what + ": create a temporary file in its directory", err);
      }
    }
    return Ok();
  }

 private:
  Result<void> Commit() {
    const std::string what = "FILE_WRITE " + path_;
    if (!fd_) return Error::Internal(what + ": Finish after failure");
    if (existing_owner_) {
      // Best effort: a file replaced by root keeps the owner it had (EPERM when not root).
      (void)!fchown(fd_.get(), existing_owner_->first, existing_owner_->second);
    }
    if (fchmod(fd_.get(), mode_) != 0) return SysError(what + ": fchmod", errno);
    if (fdatasync(fd_.get()) != 0) return SysError(what + ": fdatasync", errno);
    // close can report a deferred write error (NFS, some FUSE file systems).
    if (close(fd_.release()) != 0 && errno != EINTR) return SysError(what + ": close", errno);
    if (renameat(dir_.get(), tmp_name_.c_str(), dir_.get(), name_.c_str()) != 0) {
      return SysError(what + ": rename the temporary file over it", errno);
    }
    tmp_name_.clear();
    return Ok();
  }

  // Removes the temporary file, if any.
  void Discard() {
    fd_.reset();
    if (!tmp_name_.empty() && dir_) unlinkat(dir_.get(), tmp_name_.c_str(), 0);
    tmp_name_.clear();
  }

  std::string path_;
  std::uint32_t mode_ = 0;
  UniqueFd dir_;
  std::string name_;
  std::string tmp_name_;
  UniqueFd fd_;
  std::optional<std::pair<uid_t, gid_t>> existing_owner_;
};

class TarReadOp final : public FileOp {
 public:
  // Opens a tar writer over the path.
  Result<void> Start(const proto::PathRequest& req) {
    path_ = req.path;
    AGVISOR_RETURN_IF_ERROR(CheckPath("TAR_READ", path_));
    auto w = TarStreamWriter::Open(path_);
    if (!w.ok()) return w.error().WithContext("TAR_READ " + path_);
    writer_ = std::move(w).value();
    return Ok();
  }
  // read-file --tar --exclude: the tar of `path` without what is below `prune`.
  static Result<std::unique_ptr<FileOp>> Pruned(
      const std::string& path, const std::vector<std::string>& prune,
      const std::optional<TarStreamWriter::Options::Layer>& layer = std::nullopt) {
    AGVISOR_RETURN_IF_ERROR(CheckPath("read-file", path));
    auto op = std::make_unique<TarReadOp>();
    op->path_ = path;
    TarStreamWriter::Options o;
    o.prune = prune;
    o.layer = layer;
    auto w = TarStreamWriter::Open(path, o);
    if (!w.ok()) return w.error().WithContext("read-file --tar " + path);
    op->writer_ = std::move(w).value();
    return std::unique_ptr<FileOp>(std::move(op));
  }
  bool is_streaming_out() const override { return true; }

  Result<Chunk> Pull(std::size_t max_bytes) override {
    if (!writer_) return Chunk{{}, true};
    auto c = writer_->Pull(max_bytes);
    if (!c.ok()) {
      writer_.reset();
      return c.error().WithContext("TAR_READ " + path_);
    }
    if (c->end) writer_.reset();
    return Chunk{std::move(c->bytes), c->end};
  }

 private:
  std::string path_;
  std::unique_ptr<TarStreamWriter> writer_;
};

class TarWriteOp final : public FileOp {
 public:
  bool is_streaming_in() const override { return true; }

  Result<void> Push(std::string_view data) override {
    if (!reader_) return Error::Internal("TAR_WRITE " + path_ + ": Push after failure");
    auto r = reader_->Push(data);
    if (!r.ok()) {
      reader_.reset();
      return r.error().WithContext("TAR_WRITE " + path_);
    }
    return Ok();
  }

  Reply Finish() override {
    if (!reader_)
      return ErrorReply(Error::Internal("TAR_WRITE " + path_ + ": Finish after failure"));
    auto r = reader_->Finish();
    reader_.reset();
    if (!r.ok()) return ErrorReply(r.error().WithContext("TAR_WRITE " + path_));
    return Reply{Type::kOk, {}};
  }

  // Makes the directory and a tar reader extracting under it.
  Result<void> Start(const proto::PathRequest& req) {
    path_ = req.path;
    AGVISOR_RETURN_IF_ERROR(CheckPath("TAR_WRITE", path_));
    AGVISOR_RETURN_IF_ERROR(MkdirAll("TAR_WRITE", path_, 0755));
    auto r = TarStreamReader::Open(path_);
    if (!r.ok()) return r.error().WithContext("TAR_WRITE " + path_);
    reader_ = std::move(r).value();
    return Ok();
  }

 private:
  std::string path_;
  std::unique_ptr<TarStreamReader> reader_;
};

template <typename Op, typename Payload>
std::unique_ptr<FileOp> Streaming(std::string_view payload) {
  auto req = Payload::Decode(payload);
  if (!req.ok()) return OneShot(req.error());
  auto op = std::make_unique<Op>();
  if (auto r = op->Start(*req); !r.ok()) return OneShot(r.error());
  return op;
}

}  // namespace

Reply ErrorReply(const Error& error) {
  return Reply{Type::kError, proto::ErrorPayload::FromError(error).Encode()};
}

Result<Chunk> FileOp::Pull(std::size_t /*max_bytes*/) {
  return Error::Internal("Pull on a file operation that does not stream out");
}
Result<void> FileOp::Push(std::string_view /*data*/) {
  return Error::Internal("Push on a file operation that does not stream in");
}
Reply FileOp::Finish() {
  return ErrorReply(Error::Internal("Finish on a file operation that does not stream in"));
}

std::unique_ptr<FileOp> StartFileOp(proto::Type type, std::string_view payload) {
  switch (type) {
    case Type::kStat:
    case Type::kList: {
      auto req = proto::PathRequest::Decode(payload);
      if (!req.ok()) return OneShot(req.error());
      return OneShot(type == Type::kStat ? DoStat(*req) : DoList(*req));
    }
    case Type::kMkdir: {
      auto req = proto::Mkdir::Decode(payload);
      if (!req.ok()) return OneShot(req.error());
      return OneShot(DoMkdir(*req));
    }
    case Type::kRemove: {
      auto req = proto::Remove::Decode(payload);
      if (!req.ok()) return OneShot(req.error());
      return OneShot(DoRemove(*req));
    }
    case Type::kFileRead:
      return Streaming<FileReadOp, proto::PathRequest>(payload);
    case Type::kFileWrite:
      return Streaming<FileWriteOp, proto::FileWrite>(payload);
    case Type::kTarRead:
      return Streaming<TarReadOp, proto::PathRequest>(payload);
    case Type::kTarWrite:
      return Streaming<TarWriteOp, proto::PathRequest>(payload);
    default:
      return OneShot(
          Error::InvalidArgument("not a file operation: " + std::string(proto::TypeName(type))));
  }
}

namespace {

// Whether stdin reached its end (or broke): checked without blocking. Bytes on it are ignored.
bool StdinClosed() {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char buf[256];
  ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
  return n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN);
}

}  // namespace

Result<std::size_t> ParseLayerBaseline(
    std::string_view bytes,
    std::map<std::string, std::vector<std::string>, std::less<>>* baseline) {
  const std::size_t end = bytes.find(std::string_view("\0\0", 2));
  if (end == std::string_view::npos) return std::size_t{0};
  baseline->clear();
  std::string_view list = bytes.substr(0, end + 1);  // every path with its NUL
  while (!list.empty()) {
    const std::size_t nul = list.find('\0');
    const std::string_view p = list.substr(0, nul);
    list.remove_prefix(nul + 1);
    const std::size_t slash = p.rfind('/');
    const std::string_view name = slash == std::string_view::npos ? p : p.substr(slash + 1);
    bool ok = p.starts_with("/") && p.size() > 1;
    for (std::string_view c : Split(p.substr(ok ? 1 : 0), '/')) {
      ok = ok && !c.empty() && c != "." && c != "..";
    }
    if (!ok) {
      return Error::InvalidArgument("read-file --layer-since: the image's tree names '" +
                                    std::string(p.substr(0, 200)) +
                                    "', not an absolute path of an entry");
    }
    const std::string dir = slash == 0 ? "." : "." + std::string(p.substr(0, slash));
    (*baseline)[dir].emplace_back(name);
  }
  for (auto& [dir, names] : *baseline) std::sort(names.begin(), names.end());
  return end + 2;
}

namespace {

// Reads the image's tree from stdin (ParseLayerBaseline) up to its end marker, at most 256 MiB.
Result<std::map<std::string, std::vector<std::string>, std::less<>>> ReadLayerBaseline() {
  constexpr std::size_t kMax = std::size_t{256} << 20;
  std::string in;
  std::map<std::string, std::vector<std::string>, std::less<>> baseline;
  char buf[65536];
  for (;;) {
    if (AGVISOR_TRY(ParseLayerBaseline(in, &baseline)) != 0) return baseline;
    if (in.size() > kMax) {
      return Error::ResourceExhausted("read-file --layer-since: the image's tree passed 256 MiB");
    }
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Error::InvalidArgument(
          "read-file --layer-since: stdin ended before the image's tree did (a NUL after the "
          "last path)");
    }
    in.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

int RunReadFile(const std::string& path, bool tar, const std::string& socket_path, bool watch_stdin,
                const std::vector<std::string>& exclude, const std::optional<timespec>& layer_since,
                const std::vector<std::string>& layer_whole) {
  auto fail = [](const Error& e) {
    LogLine("read-file: " + e.message());
    return kReadFileExitErrorBase + static_cast<int>(proto::ToWireError(e.code()));
  };
  // Activity: held until this process exits (the kernel closes the fd). Missing socket: read
  // anyway (an agent run outside a sandbox).
  auto activity = ConnectActivitySocket(socket_path);
  std::unique_ptr<FileOp> op;
  std::optional<TarStreamWriter::Options::Layer> layer;
  if (layer_since) {
    auto baseline = ReadLayerBaseline();
    if (!baseline.ok()) return fail(baseline.error());
    layer.emplace();
    layer->since = *layer_since;
    layer->baseline = std::move(baseline).value();
    layer->whole = layer_whole;
  }
  if (!exclude.empty() || layer) {
    auto pruned = TarReadOp::Pruned(path, exclude, layer);
    if (!pruned.ok()) return fail(pruned.error());
    op = std::move(pruned).value();
  } else {
    op = StartFileOp(tar ? Type::kTarRead : Type::kFileRead, proto::PathRequest{path}.Encode());
  }
  if (auto reply = op->Immediate()) {
    auto e = proto::ErrorPayload::Decode(reply->payload);
    return fail(e.ok() ? e->ToError() : Error::Internal("read-file " + path + ": bad reply"));
  }
  for (;;) {
    if (watch_stdin && StdinClosed()) {
      LogLine("read-file " + path + ": the reader went away (stdin closed); stopped");
      return 0;
    }
    auto chunk = op->Pull(proto::kMaxPayload);
    if (!chunk.ok()) return fail(chunk.error());
    if (int err = WriteAll(STDOUT_FILENO, chunk->data)) {
      return fail(SysError("read-file " + path + ": write to stdout", err));
    }
    if (chunk->end) return 0;
  }
}

}  // namespace agvisor::agent
