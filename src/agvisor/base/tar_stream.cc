#include "agvisor/base/tar_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <optional>
#include <utility>

#include "agvisor/base/fs.h"
#include "agvisor/base/strings.h"
#include "agvisor/base/tar_header.h"

namespace agvisor {
namespace {

using tar::Field;
using tar::kBlock;
using tar::PadOf;
using tar::ParseNumber;
using tar::PutOctal;
// Largest pax / GNU long-name body the reader buffers.
constexpr std::uint64_t kMaxMetaBody = 1024 * 1024;
// Bounds of ustar's octal fields: 7 digits (mode, uid, gid), 11 digits (size, mtime).
constexpr std::uint64_t kMax7 = (std::uint64_t{1} << 21) - 1;
constexpr std::uint64_t kMax11 = (std::uint64_t{1} << 33) - 1;

// "what: strerror" with errno kept; ENOSPC / EDQUOT say plainly that the disk is full.
Error SysError(const std::string& what, int err) {
  Error e = Error::FromErrno(what, err);
  if (err == ENOSPC || err == EDQUOT) {
    return Error(ErrorCode::kResourceExhausted, e.message() + " (the disk is full)").set_errno(err);
  }
  return e;
}

// A pax record "<len> key=value\n", where <len> counts the whole record including itself.
void AppendPaxRecord(std::string& out, std::string_view key, std::string_view value) {
  std::size_t body = 1 + key.size() + 1 + value.size() + 1;  // " key=value\n"
  std::size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  out += std::to_string(len);
  out += ' ';
  out += key;
  out += '=';
  out += value;
  out += '\n';
}

struct EntryMeta {
  std::string name;  // archive name ("a/b", directories end with '/')
  char type = '0';
  std::uint32_t mode = 0;
  std::uint64_t uid = 0, gid = 0;
  std::uint64_t size = 0;
  std::int64_t mtime = 0;
  std::string link;
};

std::array<char, kBlock> UstarBlock(std::string_view name, char type, std::uint32_t mode,
                                    std::uint64_t uid, std::uint64_t gid, std::uint64_t size,
                                    std::uint64_t mtime, std::string_view link) {
  std::array<char, kBlock> h{};
  std::memcpy(h.data(), name.data(), std::min<std::size_t>(name.size(), 100));
  PutOctal(h.data() + 100, 8, mode);
  PutOctal(h.data() + 108, 8, uid);
  PutOctal(h.data() + 116, 8, gid);
  PutOctal(h.data() + 124, 12, size);
  PutOctal(h.data() + 136, 12, mtime);
  h[156] = type;
  std::memcpy(h.data() + 157, link.data(), std::min<std::size_t>(link.size(), 100));
  std::memcpy(h.data() + 257, "ustar", 6);  // magic "ustar\0"
  std::memcpy(h.data() + 263, "00", 2);     // version
  tar::SetChecksum(h.data());
  return h;
}

// The header block(s) of one entry: a pax 'x' header first when a value does not fit ustar.
void AppendHeader(std::string& out, const EntryMeta& m) {
  std::string pax;
  if (m.name.size() > 100) AppendPaxRecord(pax, "path", m.name);
  if (m.link.size() > 100) AppendPaxRecord(pax, "linkpath", m.link);
  if (m.uid > kMax7) AppendPaxRecord(pax, "uid", std::to_string(m.uid));
  if (m.gid > kMax7) AppendPaxRecord(pax, "gid", std::to_string(m.gid));
  if (m.size > kMax11) AppendPaxRecord(pax, "size", std::to_string(m.size));
  bool mtime_fits = m.mtime >= 0 && static_cast<std::uint64_t>(m.mtime) <= kMax11;
  if (!mtime_fits) AppendPaxRecord(pax, "mtime", std::to_string(m.mtime));
  std::uint64_t mtime = mtime_fits ? static_cast<std::uint64_t>(m.mtime) : 0;
  if (!pax.empty()) {
    // The pax header's own name is informative only; keep it short and relative.
    std::string base = m.name;
    while (!base.empty() && base.back() == '/') base.pop_back();
    base = base.substr(base.rfind('/') == std::string::npos ? 0 : base.rfind('/') + 1);
    std::string pax_name = "PaxHeader/" + base.substr(0, 80);
    auto ph = UstarBlock(pax_name, 'x', 0644, 0, 0, pax.size(), mtime, {});
    out.append(ph.data(), kBlock);
    out += pax;
    out.append(PadOf(pax.size()), '\0');
  }
  auto h = UstarBlock(m.name, m.type, m.mode & 07777, m.uid > kMax7 ? 0 : m.uid,
                      m.gid > kMax7 ? 0 : m.gid, m.size > kMax11 ? 0 : m.size, mtime, m.link);
  out.append(h.data(), kBlock);
}

// All entry names of directory `fd` but "." and "..", in byte order.
Result<std::vector<std::string>> SortedDirNames(int fd, const std::string& what) {
  std::vector<std::string> names =
      AGVISOR_TRY(ReadDirNames(fd, [&](std::string_view call, int err) {
        return SysError("tar: " + std::string(call) + " " + what, err);
      }));
  std::sort(names.begin(), names.end());
  return names;
}

// readlinkat of any length.
Result<std::string> ReadLinkAt(int dirfd, const std::string& name, const std::string& what) {
  std::string buf(256, '\0');
  while (true) {
    ssize_t n = readlinkat(dirfd, name.c_str(), buf.data(), buf.size());
    if (n < 0) return SysError("tar: readlink " + what, errno);
    if (static_cast<std::size_t>(n) < buf.size()) {
      buf.resize(static_cast<std::size_t>(n));
      return buf;
    }
    buf.resize(buf.size() * 2);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TarStreamWriter

struct TarStreamWriter::DirLevel {
  UniqueFd fd;
  std::string archive_name;  // of the directory, no trailing '/'
  std::vector<std::string> names;
  std::size_t next = 0;
  // Layer mode: the directory's header while it waits for an entry below it to be archived,
  // whether everything below is archived (Layer::whole), and the image's names in it (null:
  // a directory the image does not have).
  std::string header;
  bool emitted = true;
  bool whole = false;
  const std::vector<std::string>* baseline = nullptr;
};

TarStreamWriter::~TarStreamWriter() = default;

Result<std::unique_ptr<TarStreamWriter>> TarStreamWriter::Open(std::string_view path_in) {
  return Open(path_in, Options{});
}

Result<std::unique_ptr<TarStreamWriter>> TarStreamWriter::Open(std::string_view path_in,
                                                               const Options& options) {
  if (path_in.empty()) return Error::InvalidArgument("tar: empty path");
  std::string path(path_in);
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::unique_ptr<TarStreamWriter> w(new TarStreamWriter());
  // Each prune (and layer) path as the archive name its entry will have: "/" is archived as
  // "." ("/a" is "./a"); "/x/b" as "b" ("/x/b/c" is "b/c"). nullopt: not below `path`.
  const bool as_root = path == "/" || options.name_as_root;
  auto archive_name_of = [&](std::string q) -> Result<std::optional<std::string>> {
    if (q.empty() || q.front() != '/') {
      return Error::InvalidArgument("tar: prune path '" + q + "' must be absolute");
    }
    while (q.size() > 1 && q.back() == '/') q.pop_back();
    if (path == "/") return std::optional<std::string>(q == "/" ? "." : "." + q);
    if (q != path && !q.starts_with(path + "/")) return std::optional<std::string>();
    const std::size_t slash = path.rfind('/');
    return std::optional<std::string>((as_root ? std::string(".") : path.substr(slash + 1)) +
                                      q.substr(path.size()));
  };
  for (const std::string& q : options.prune) {
    auto a = AGVISOR_TRY(archive_name_of(q));
    if (a && !(path == "/" && *a == ".")) w->prune_.insert(*a);
  }
  if (options.layer) {
    if (!as_root) return Error::InvalidArgument("tar: a layer is made of \"/\" only");
    w->layer_ = options.layer;
    for (const std::string& q : options.layer->whole) {
      if (auto a = AGVISOR_TRY(archive_name_of(q))) w->whole_.insert(*a);
    }
  }
  if (path == "/") {
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return SysError("tar: open /", errno);
    UniqueFd root(fd);
    AGVISOR_RETURN_IF_ERROR(w->AddEntry(root.get(), ".", "."));
    return w;
  }
  std::size_t slash = path.rfind('/');
  std::string parent =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base == "." || base == "..") {
    return Error::InvalidArgument("tar: path must not end in '.' or '..': '" + path + "'");
  }
  int fd = open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return SysError("tar: open " + parent, errno);
  UniqueFd parent_fd(fd);
  struct stat st;
  if (fstatat(parent_fd.get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return SysError("tar: stat " + path, errno);
  }
  AGVISOR_RETURN_IF_ERROR(w->AddEntry(parent_fd.get(), base, as_root ? "." : base));
  return w;
}

void TarStreamWriter::FlushDirectoryHeaders() {
  for (DirLevel& level : stack_) {
    if (level.emitted) continue;
    pending_ += level.header;
    level.header.clear();
    level.emitted = true;
  }
}

bool TarStreamWriter::LayerWants(const std::string& name, const std::string& archive_name,
                                 const struct stat& st) {
  const DirLevel* parent = stack_.empty() ? nullptr : &stack_.back();
  bool wanted = parent == nullptr || parent->whole || whole_.contains(archive_name);
  if (!wanted) {
    const timespec& since = layer_->since;
    wanted = st.st_ctim.tv_sec > since.tv_sec ||
             (st.st_ctim.tv_sec == since.tv_sec && st.st_ctim.tv_nsec >= since.tv_nsec);
  }
  if (!wanted) {
    wanted = parent->baseline == nullptr ||
             !std::binary_search(parent->baseline->begin(), parent->baseline->end(), name);
  }
  if (wanted) FlushDirectoryHeaders();
  return wanted;
}

// Queues the header of `name` (in directory `dirfd`) and makes it the current file or pushes it
// as a directory level. An entry that vanished since it was listed is skipped, like tar does.
Result<void> TarStreamWriter::AddEntry(int dirfd, const std::string& name,
                                       const std::string& archive_name) {
  struct stat st;
  if (fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Ok();
    return SysError("tar: stat '" + archive_name + "'", errno);
  }
  if (!S_ISDIR(st.st_mode) && prune_.contains(archive_name)) return Ok();
  // Layer mode: a file or symlink that did not change is left out before it is opened.
  const bool layer = layer_.has_value();
  if (layer && !S_ISDIR(st.st_mode) && !LayerWants(name, archive_name, st)) return Ok();
  EntryMeta m;
  m.name = archive_name;
  if (S_ISREG(st.st_mode)) {
    // O_NONBLOCK: should a FIFO be swapped in after fstatat, open must not block on it.
    int fd = openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT) return Ok();
      return SysError("tar: open '" + archive_name + "'", errno);
    }
    UniqueFd file(fd);
    if (fstat(file.get(), &st) != 0) return SysError("tar: fstat '" + archive_name + "'", errno);
    if (!S_ISREG(st.st_mode)) return Ok();  // replaced by something else meanwhile
    m.type = '0';
    m.size = static_cast<std::uint64_t>(st.st_size);
    file_ = std::move(file);
    file_name_ = archive_name;
    file_left_ = m.size;
    file_pad_ = PadOf(m.size);
  } else if (S_ISDIR(st.st_mode)) {
    int fd = openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return Ok();
      return SysError("tar: open directory '" + archive_name + "'", errno);
    }
    DirLevel level;
    level.fd = UniqueFd(fd);
    if (fstat(level.fd.get(), &st) != 0) {
      return SysError("tar: fstat '" + archive_name + "'", errno);
    }
    // A pruned directory is archived empty (its names are not listed).
    if (!prune_.contains(archive_name)) {
      level.names = AGVISOR_TRY(SortedDirNames(level.fd.get(), "'" + archive_name + "'"));
    }
    level.archive_name = archive_name;
    m.type = '5';
    m.name += '/';
    m.mode = st.st_mode & 07777;
    m.uid = st.st_uid;
    m.gid = st.st_gid;
    m.mtime = st.st_mtim.tv_sec;
    if (!layer) {
      AppendHeader(pending_, m);
      stack_.push_back(std::move(level));
      return Ok();
    }
    // The image's names that are gone, as whiteouts: a pruned directory lists none of its own,
    // so the image's are all gone there (it is empty in the layered image, as in a whole one).
    std::vector<std::string> gone;
    if (auto it = layer_->baseline.find(archive_name); it != layer_->baseline.end()) {
      level.baseline = &it->second;
      std::set_difference(it->second.begin(), it->second.end(), level.names.begin(),
                          level.names.end(), std::back_inserter(gone));
    }
    const bool wanted = LayerWants(name, archive_name, st) || !gone.empty();
    level.whole = (!stack_.empty() && stack_.back().whole) || whole_.contains(archive_name);
    AppendHeader(level.header, m);
    level.emitted = false;
    stack_.push_back(std::move(level));
    if (wanted) FlushDirectoryHeaders();
    for (const std::string& g : gone) {
      EntryMeta w;
      w.name = archive_name + "/.wh." + g;
      w.mode = 0644;
      w.mtime = m.mtime;
      AppendHeader(pending_, w);
    }
    return Ok();
  } else if (S_ISLNK(st.st_mode)) {
    m.type = '2';
    m.link = AGVISOR_TRY(ReadLinkAt(dirfd, name, "'" + archive_name + "'"));
  } else {
    return Ok();  // sockets, FIFOs, devices
  }
  m.mode = st.st_mode & 07777;
  m.uid = st.st_uid;
  m.gid = st.st_gid;
  m.mtime = st.st_mtim.tv_sec;
  AppendHeader(pending_, m);
  return Ok();
}

// Queues the next entry's header, or the end-of-archive blocks.
Result<void> TarStreamWriter::Advance() {
  while (!stack_.empty() && pending_.empty() && !file_) {
    DirLevel& top = stack_.back();
    if (top.next == top.names.size()) {
      stack_.pop_back();
      continue;
    }
    std::string name = top.names[top.next++];
    std::string archive_name = top.archive_name + "/" + name;
    int dirfd = top.fd.get();  // stays open: AddEntry only pushes
    AGVISOR_RETURN_IF_ERROR(AddEntry(dirfd, name, archive_name));
  }
  if (stack_.empty() && pending_.empty() && !file_) {
    pending_.assign(2 * kBlock, '\0');
    walked_ = true;
  }
  return Ok();
}

Result<TarChunk> TarStreamWriter::Pull(std::size_t max_bytes) {
  TarChunk chunk;
  if (done_) {
    chunk.end = true;
    return chunk;
  }
  if (max_bytes == 0) return Error::InvalidArgument("tar: Pull(0)");
  std::string& out = chunk.bytes;
  while (out.size() < max_bytes) {
    if (pending_pos_ < pending_.size()) {
      std::size_t n = std::min(max_bytes - out.size(), pending_.size() - pending_pos_);
      out.append(pending_, pending_pos_, n);
      pending_pos_ += n;
      if (pending_pos_ == pending_.size()) {
        pending_.clear();
        pending_pos_ = 0;
      }
      continue;
    }
    if (file_) {
      if (file_left_ == 0) {
        file_.reset();
        pending_.assign(file_pad_, '\0');
        continue;
      }
      std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(max_bytes - out.size(), file_left_));
      std::size_t old = out.size();
      out.resize(old + n);
      ssize_t r = read(file_.get(), out.data() + old, n);
      if (r < 0 && errno == EINTR) {
        out.resize(old);
        continue;
      }
      if (r <= 0) {
        done_ = true;
        if (r == 0) {
          return Error::Conflict("tar: '" + file_name_ + "' shrank by " +
                                 std::to_string(file_left_) + " bytes while being archived");
        }
        return SysError("tar: read '" + file_name_ + "'", errno);
      }
      out.resize(old + static_cast<std::size_t>(r));
      file_left_ -= static_cast<std::uint64_t>(r);
      continue;
    }
    if (walked_) {
      done_ = true;
      chunk.end = true;
      return chunk;
    }
    auto advanced = Advance();
    if (!advanced.ok()) {
      done_ = true;
      return std::move(advanced).error();
    }
  }
  return chunk;
}

// ---------------------------------------------------------------------------------------------
// TarStreamReader

struct TarStreamReader::Header {
  std::string name;
  std::string link;
  char type = '0';
  std::uint32_t mode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime = 0;
};

namespace {

// The components of an archive name: "." and empty ones dropped; absolute names and ".." refused.
// `entry` names the entry in errors, `what` the value checked ("name", "hard link target 'x'").
Result<std::vector<std::string>> SplitName(std::string_view name, const std::string& entry,
                                           std::string_view what) {
  auto refuse = [&](std::string why) {
    return Error::InvalidArgument("tar entry '" + entry + "': " + std::string(what) + " " + why);
  };
  if (name.empty()) return refuse("is empty");
  if (name.find('\0') != std::string_view::npos) return refuse("contains a NUL byte");
  if (name.front() == '/') return refuse("is absolute (refused)");
  std::vector<std::string> out;
  for (std::string_view c : Split(name, '/')) {
    if (c == "..") return refuse("has a '..' component (refused)");
    if (!c.empty() && c != ".") out.emplace_back(c);
  }
  return out;
}

// "a/b/c" -> {"a", "b", "c"}: the inverse of Join for the names this reader records.
std::vector<std::string> SplitOnSlash(const std::string& name) {
  std::vector<std::string> comps;
  for (std::string_view c : Split(name, '/')) comps.emplace_back(c);
  return comps;
}

std::string Join(const std::vector<std::string>& comps, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += '/';
    s += comps[i];
  }
  return s.empty() ? "." : s;
}

}  // namespace

TarStreamReader::~TarStreamReader() {
  // A caller whose transport broke never calls Finish: what the archive made so far goes.
  if (options_.host_rules && !finished_) RollBack();
}

Result<std::unique_ptr<TarStreamReader>> TarStreamReader::Open(std::string_view dest,
                                                               const TarReaderOptions& options) {
  if (dest.empty()) return Error::InvalidArgument("tar: empty destination");
  const std::string& top = options.top_name;
  if (!top.empty() && (top == "." || top == ".." || top.find('/') != std::string::npos ||
                       top.find('\0') != std::string::npos)) {
    return Error::InvalidArgument("tar: the name to extract as, '" + top +
                                  "', must be one path component");
  }
  std::string d(dest);
  int fd = open(d.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return SysError("tar: open destination " + d, errno);
  std::unique_ptr<TarStreamReader> r(new TarStreamReader());
  r->options_ = options;
  r->dest_ = UniqueFd(fd);
  r->dest_name_ = d;
  return r;
}

Result<void> TarStreamReader::Fail(Error error) {
  failed_ = true;
  file_.reset();
  if (options_.host_rules) {
    std::size_t removed = RollBack();
    if (removed != 0) {
      error = Error(error.code(), error.message() + " (the " + std::to_string(removed) +
                                      " entries already extracted were removed)")
                  .set_errno(error.sys_errno());
    }
  }
  error_ = error;
  return error;
}

namespace {

// Called with the depth (comps[0..depth]) and stat of each directory OpenDirBeneath created.
using OnMadeDir = std::function<Result<void>(std::size_t depth, const struct stat& st)>;

// Opens comps[0..n) below `root` as directories, one openat(O_NOFOLLOW) per component, so no
// symlink is ever followed; creates missing ones when `create`. `entry` names the archive entry.
Result<UniqueFd> OpenDirBeneath(int root, const std::vector<std::string>& comps, std::size_t n,
                                bool create, const std::string& entry,
                                const OnMadeDir& on_made = nullptr) {
  int dup_fd = fcntl(root, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return SysError("tar entry '" + entry + "': dup", errno);
  UniqueFd cur(dup_fd);
  for (std::size_t i = 0; i < n; ++i) {
    const char* c = comps[i].c_str();
    int fd = openat(cur.get(), c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    bool made = false;
    if (fd < 0 && errno == ENOENT && create) {
      if (mkdirat(cur.get(), c, 0755) == 0) {
        made = true;
      } else if (errno != EEXIST) {
        return SysError("tar entry '" + entry + "': mkdir " + Join(comps, i + 1), errno);
      }
      fd = openat(cur.get(), c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    struct stat st;
    if (fd < 0) {
      int err = errno;
      if ((err == ELOOP || err == ENOTDIR) &&
          fstatat(cur.get(), c, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode)) {
          return Error::InvalidArgument("tar entry '" + entry + "': '" + Join(comps, i + 1) +
                                        "' is a symlink; entries are never extracted through "
                                        "symlinks (refused)");
        }
        return Error::Conflict("tar entry '" + entry + "': '" + Join(comps, i + 1) +
                               "' exists and is not a directory");
      }
      return SysError("tar entry '" + entry + "': open " + Join(comps, i + 1), err);
    }
    UniqueFd next(fd);
    // O_PATH | O_NOFOLLOW may hand back the symlink itself instead of failing: check.
    if (fstat(next.get(), &st) != 0) {
      return SysError("tar entry '" + entry + "': fstat " + Join(comps, i + 1), errno);
    }
    if (!S_ISDIR(st.st_mode)) {
      return Error::InvalidArgument("tar entry '" + entry + "': '" + Join(comps, i + 1) +
                                    "' is not a directory (refused)");
    }
    if (made && on_made) AGVISOR_RETURN_IF_ERROR(on_made(i, st));
    cur = std::move(next);
  }
  return cur;
}

// Symlink rule: read lexically from the link's directory (depth `depth` below the destination),
// the target must stay inside the destination. Leading ".." components climb real directories
// (the link's parents, opened without following symlinks); a ".." after a normal component is
// refused too, since that component could itself be a symlink elsewhere.
Result<void> CheckSymlinkTarget(std::string_view target, std::size_t depth,
                                const std::string& entry) {
  auto refuse = [&](const std::string& why) {
    return Error::InvalidArgument("tar entry '" + entry + "': symlink target '" +
                                  std::string(target) + "' " + why + " (refused)");
  };
  if (target.empty()) return refuse("is empty");
  if (target.find('\0') != std::string_view::npos) return refuse("contains a NUL byte");
  if (target.front() == '/') return refuse("is absolute");
  bool seen_normal = false;
  for (std::string_view c : Split(target, '/')) {
    if (c == "..") {
      if (seen_normal) return refuse("has '..' after a normal component");
      if (depth == 0) return refuse("points outside the destination");
      --depth;
    } else if (!c.empty() && c != ".") {
      seen_normal = true;
    }
  }
  return Ok();
}

}  // namespace

Result<void> TarStreamReader::RenameTop(std::vector<std::string>& comps, const std::string& entry) {
  if (options_.top_name.empty() || comps.empty()) return Ok();
  if (top_seen_.empty()) top_seen_ = comps.front();
  if (comps.front() != top_seen_) {
    return Error::InvalidArgument("tar entry '" + entry + "': outside the archive's top entry '" +
                                  top_seen_ + "' (refused)");
  }
  comps.front() = options_.top_name;
  return Ok();
}

Result<void> TarStreamReader::StartEntry(const Header& h) {
  entry_name_ = h.name;
  auto comps_r = SplitName(h.name, h.name, "name");
  if (!comps_r.ok()) return comps_r.error();
  std::vector<std::string> comps = std::move(comps_r).value();
  AGVISOR_RETURN_IF_ERROR(RenameTop(comps, h.name));
  char type = h.type;
  if ((type == '0' || type == '\0') && !h.name.empty() && h.name.back() == '/') type = '5';
  bool has_data = type == '0' || type == '\0' || type == '7';
  data_left_ = h.size;
  pad_left_ = PadOf(h.size);
  state_ = State::kSkipData;

  AGVISOR_RETURN_IF_ERROR(tar::CheckEntryType(type, h.name, /*legacy_files=*/true));
  if (comps.empty()) {
    if (type == '5') return Ok();  // "./": the destination itself, kept as it is
    return Error::InvalidArgument("tar entry '" + h.name + "': names the destination itself");
  }
  const std::string& leaf = comps.back();
  const bool host = options_.host_rules;
  const std::uint32_t mode_mask = host ? 0777 : 07777;
  if (has_data && options_.max_bytes != 0 && h.size > options_.max_bytes - written_) {
    return Error::ResourceExhausted(
        "tar entry '" + h.name + "': its " + std::to_string(h.size) + " bytes would pass the " +
        "extraction's budget of " + std::to_string(options_.max_bytes) + " bytes (" +
        std::to_string(options_.max_bytes - written_) + " left; refused before writing it)");
  }
  // Host rules: every directory made on the way is recorded, to be removed on failure.
  OnMadeDir on_made = nullptr;
  if (host) {
    on_made = [&](std::size_t depth, const struct stat& st) {
      return Record(Join(comps, depth + 1), st);
    };
  }
  UniqueFd parent =
      AGVISOR_TRY(OpenDirBeneath(dest_.get(), comps, comps.size() - 1, true, h.name, on_made));
  const std::string rel = Join(comps, comps.size());
  auto record_leaf = [&]() -> Result<void> {
    if (!host) return Ok();
    struct stat st;
    if (fstatat(parent.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return SysError("tar entry '" + h.name + "': stat what was created", errno);
    }
    return Record(rel, st);
  };

  if (has_data) {
    AGVISOR_RETURN_IF_ERROR(MakeRoom(parent.get(), comps, h.name));
    int fd = openat(parent.get(), leaf.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0) return SysError("tar entry '" + h.name + "': create", errno);
    file_ = UniqueFd(fd);
    written_ += h.size;
    AGVISOR_RETURN_IF_ERROR(record_leaf());
    file_mode_ = h.mode & mode_mask;
    file_mtime_ = h.mtime;
    state_ = State::kFileData;
    if (data_left_ == 0) return FinishFile();
    return Ok();
  }
  if (type == '5') {
    bool made = true;
    if (mkdirat(parent.get(), leaf.c_str(), 0700) != 0) {
      int err = errno;
      struct stat st;
      if (err != EEXIST) return SysError("tar entry '" + h.name + "': mkdir", err);
      if (fstatat(parent.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return SysError("tar entry '" + h.name + "': stat", errno);
      }
      made = false;
      // Host rules: a directory this extraction made earlier (e.g. as a parent) is its own.
      bool ours = own_inodes_.contains(Inode{st.st_dev, st.st_ino});
      if (!S_ISDIR(st.st_mode)) {
        AGVISOR_RETURN_IF_ERROR(MakeRoom(parent.get(), comps, h.name));
        if (mkdirat(parent.get(), leaf.c_str(), 0700) != 0) {
          return SysError("tar entry '" + h.name + "': mkdir", errno);
        }
        made = true;
      } else if (host && !ours) {
        return Ok();  // a directory that was there before keeps its mode and times
      }
    }
    if (made) AGVISOR_RETURN_IF_ERROR(record_leaf());
    if (host) {
      std::size_t charge = sizeof(DirFixup);
      for (const auto& c : comps) charge += sizeof(std::string) + c.size();
      AGVISOR_RETURN_IF_ERROR(Charge(charge, h.name));
    }
    dirs_.push_back(DirFixup{comps, h.mode & mode_mask, h.mtime});
    return Ok();
  }
  if (type == '2') {
    AGVISOR_RETURN_IF_ERROR(CheckSymlinkTarget(h.link, comps.size() - 1, h.name));
    AGVISOR_RETURN_IF_ERROR(MakeRoom(parent.get(), comps, h.name));
    if (symlinkat(h.link.c_str(), parent.get(), leaf.c_str()) != 0) {
      return SysError("tar entry '" + h.name + "': symlink to '" + h.link + "'", errno);
    }
    return record_leaf();
  }
  // Hard link: the target is an archive name, looked up beneath the destination.
  auto target_r = SplitName(h.link, h.name, "hard link target '" + h.link + "'");
  if (!target_r.ok()) return target_r.error();
  std::vector<std::string> target = std::move(target_r).value();
  AGVISOR_RETURN_IF_ERROR(RenameTop(target, h.name));
  if (target.empty()) {
    return Error::InvalidArgument("tar entry '" + h.name + "': hard link to the destination");
  }
  if (target == comps) return Ok();  // a link to itself: already there
  UniqueFd target_parent =
      AGVISOR_TRY(OpenDirBeneath(dest_.get(), target, target.size() - 1, false, h.name));
  struct stat st;
  if (fstatat(target_parent.get(), target.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return SysError("tar entry '" + h.name + "': hard link target '" + h.link + "'", errno);
  }
  if (S_ISLNK(st.st_mode)) {
    // A hard link to a symlink is a second symlink with the same (relative) target, read from
    // another directory: "d/e/l -> ../../x" stays inside, but a link to it at the top would
    // climb two levels above the destination. Check the target again from the new place.
    std::string link_target(PATH_MAX, '\0');
    ssize_t n = readlinkat(target_parent.get(), target.back().c_str(), link_target.data(),
                           link_target.size());
    if (n < 0) {
      return SysError("tar entry '" + h.name + "': hard link target '" + h.link + "'", errno);
    }
    link_target.resize(static_cast<std::size_t>(n));
    AGVISOR_RETURN_IF_ERROR(CheckSymlinkTarget(link_target, comps.size() - 1, h.name));
  }
  if (host) {
    // Only a file or symlink this extraction made, never one that was there before: a hard
    // link to it would hand the archive a second name for the user's own file.
    if (!own_inodes_.contains(Inode{st.st_dev, st.st_ino})) {
      return Error::InvalidArgument("tar entry '" + h.name + "': hard link target '" + h.link +
                                    "' was not extracted from this archive (refused: hard "
                                    "links may only name entries of the same archive)");
    }
  }
  AGVISOR_RETURN_IF_ERROR(MakeRoom(parent.get(), comps, h.name));
  // Flags 0: a symlink target is linked itself, never followed.
  if (linkat(target_parent.get(), target.back().c_str(), parent.get(), leaf.c_str(), 0) != 0) {
    return SysError("tar entry '" + h.name + "': hard link to '" + h.link + "'", errno);
  }
  return record_leaf();
}

Result<void> TarStreamReader::Charge(std::size_t bytes, const std::string& entry) {
  bookkeeping_ += bytes;
  if (bookkeeping_ > options_.max_bookkeeping_bytes) {
    return Error::ResourceExhausted(
        "tar entry '" + entry +
        "': the archive has more entries than this extraction keeps "
        "track of (" +
        std::to_string(created_.size()) + " created so far; the bound is " +
        std::to_string(options_.max_bookkeeping_bytes) + " bytes of records to undo it); " +
        "extract a smaller tree at a time, e.g. one subdirectory");
  }
  return Ok();
}

Result<void> TarStreamReader::Record(const std::string& name, const struct stat& st) {
  // Kept first, so that a refusal below still undoes this entry too. Charged: the name's bytes,
  // the record, and a hash-set node. Directories' inodes are kept too (linkat refuses them as
  // hard-link targets anyway).
  const std::size_t charge = name.size() + sizeof(Created) + 48;
  const bool dir = S_ISDIR(st.st_mode);
  created_.push_back(Created{name, st.st_dev, st.st_ino, dir});
  own_inodes_.insert(Inode{st.st_dev, st.st_ino});
  return Charge(charge, name);
}

Result<void> TarStreamReader::MakeRoom(int dirfd, const std::vector<std::string>& comps,
                                       const std::string& entry) {
  const std::string& leaf = comps.back();
  struct stat st;
  if (fstatat(dirfd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Ok();
    return SysError("tar entry '" + entry + "': stat", errno);
  }
  if (S_ISDIR(st.st_mode)) {
    return Error::Conflict("tar entry '" + entry + "': a directory exists there");
  }
  if (!options_.host_rules) {
    if (unlinkat(dirfd, leaf.c_str(), 0) != 0) {
      return SysError("tar entry '" + entry + "': unlink the existing file", errno);
    }
    return Ok();
  }
  // A name of our own in the same directory (a rename never crosses file systems there);
  // RENAME_NOREPLACE: never over anything that exists.
  for (int attempt = 0;; ++attempt) {
    std::string aside = ".agvisor-replaced-" + std::to_string(getpid()) + "-" +
                        std::to_string(++aside_count_) + "-" + leaf.substr(0, 64);
    if (renameat2(dirfd, leaf.c_str(), dirfd, aside.c_str(), RENAME_NOREPLACE) == 0) {
      created_.push_back(Created{Join(comps, comps.size()), st.st_dev, st.st_ino, false, aside});
      return Charge(comps.size() * 16 + aside.size() + sizeof(Created), entry);
    }
    if (errno != EEXIST || attempt >= 16) {
      return SysError("tar entry '" + entry + "': set the existing file aside", errno);
    }
  }
}

void TarStreamReader::DropSetAside() {
  for (const Created& c : created_) {
    if (c.aside.empty()) continue;
    std::vector<std::string> comps = SplitOnSlash(c.name);
    auto parent = OpenDirBeneath(dest_.get(), comps, comps.size() - 1, false, c.name);
    if (!parent.ok()) continue;
    struct stat st;
    if (fstatat(parent->get(), c.aside.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_dev != c.dev || st.st_ino != c.ino) continue;
    (void)unlinkat(parent->get(), c.aside.c_str(), 0);
  }
}

std::size_t TarStreamReader::RollBack() {
  file_.reset();
  std::size_t removed = 0;
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    if (!it->aside.empty()) {
      // Put back what was there: the entry made at its name was undone before (later record).
      std::vector<std::string> comps = SplitOnSlash(it->name);
      auto parent = OpenDirBeneath(dest_.get(), comps, comps.size() - 1, false, it->name);
      if (!parent.ok()) continue;
      struct stat st;
      if (fstatat(parent->get(), it->aside.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (st.st_dev != it->dev || st.st_ino != it->ino) continue;
      (void)renameat2(parent->get(), it->aside.c_str(), parent->get(), comps.back().c_str(),
                      RENAME_NOREPLACE);
      continue;
    }
    std::vector<std::string> comps = SplitOnSlash(it->name);
    // Through no symlink, and only while the name still holds the inode this extraction made.
    auto parent = OpenDirBeneath(dest_.get(), comps, comps.size() - 1, false, it->name);
    if (!parent.ok()) continue;
    struct stat st;
    if (fstatat(parent->get(), comps.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_dev != it->dev || st.st_ino != it->ino) continue;
    if (unlinkat(parent->get(), comps.back().c_str(), it->dir ? AT_REMOVEDIR : 0) == 0) {
      ++removed;
    }
  }
  created_.clear();
  own_inodes_.clear();
  dirs_.clear();
  bookkeeping_ = 0;
  return removed;
}

Result<void> TarStreamReader::FinishFile() {
  if (fchmod(file_.get(), file_mode_) != 0) {
    return SysError("tar entry '" + entry_name_ + "': fchmod", errno);
  }
  struct timespec times[2] = {{0, UTIME_OMIT}, {file_mtime_, 0}};
  if (futimens(file_.get(), times) != 0) {
    return SysError("tar entry '" + entry_name_ + "': futimens", errno);
  }
  file_.reset();
  return Ok();
}

Result<void> TarStreamReader::OnMetaBody() {
  // A GNU long name ends at its NUL; bytes other than NUL after it would be a name with a NUL
  // inside, which no file system name can hold: refused.
  auto until_nul = [&](const std::string& s) -> Result<std::string> {
    std::size_t nul = s.find('\0');
    if (nul != std::string::npos && s.find_first_not_of('\0', nul) != std::string::npos) {
      return Error::InvalidArgument("tar: GNU long name or link after entry '" + entry_name_ +
                                    "' contains a NUL byte (refused)");
    }
    return s.substr(0, nul);
  };
  if (meta_type_ == 'L') {
    next_path_ = AGVISOR_TRY(until_nul(meta_body_));
  } else if (meta_type_ == 'K') {
    next_link_ = AGVISOR_TRY(until_nul(meta_body_));
  } else if (meta_type_ == 'x') {
    std::string_view b = meta_body_;
    auto bad = [&]() {
      return Error::InvalidArgument("tar: malformed pax header before the entry after '" +
                                    entry_name_ + "'");
    };
    while (!b.empty()) {
      if (b.front() == '\0') break;  // some writers pad the body with NULs
      auto record = tar::NextPaxRecord(b);
      if (!record.ok()) return bad();
      const auto [key, value] = *record;
      auto parse_int = [&](std::string_view v, bool allow_sign) -> std::optional<std::int64_t> {
        bool neg = false;
        if (allow_sign && !v.empty() && v.front() == '-') {
          neg = true;
          v.remove_prefix(1);
        }
        std::size_t dot = v.find('.');
        if (allow_sign && dot != std::string_view::npos) v = v.substr(0, dot);  // drop fraction
        if (v.empty() || v.size() > 18) return std::nullopt;
        std::int64_t n = 0;
        for (char c : v) {
          if (c < '0' || c > '9') return std::nullopt;
          n = n * 10 + (c - '0');
        }
        return neg ? -n : n;
      };
      if (key == "path") {
        next_path_.emplace(value);
      } else if (key == "linkpath") {
        next_link_.emplace(value);
      } else if (key == "size") {
        auto n = parse_int(value, false);
        if (!n) return bad();
        next_size_ = static_cast<std::uint64_t>(*n);
      } else if (key == "mtime") {
        auto n = parse_int(value, true);
        if (!n) return bad();
        next_mtime_ = *n;
      }
    }
  }
  meta_body_.clear();
  return Ok();
}

Result<void> TarStreamReader::OnHeaderBlock() {
  const char* h = block_.data();
  if (tar::AllZero(block_)) {
    if (++zero_blocks_ == 2) state_ = State::kEnded;
    return Ok();
  }
  std::string after =
      entry_name_.empty() ? "at the start of the archive" : "after entry '" + entry_name_ + "'";
  if (zero_blocks_ != 0) {
    return Error::InvalidArgument("tar: a lone zero block " + after);
  }
  auto stored = ParseNumber(h + 148, 8);
  const tar::Checksums sums = tar::HeaderChecksums(h);
  if (!stored || (*stored != sums.sum && static_cast<std::int64_t>(*stored) != sums.signed_sum)) {
    return Error::InvalidArgument("tar: bad header checksum " + after +
                                  " (not a tar archive, or corrupt)");
  }
  Header hd;
  hd.type = h[156];
  auto mode = ParseNumber(h + 100, 8);
  auto size = ParseNumber(h + 124, 12);
  auto mtime = ParseNumber(h + 136, 12);
  hd.name = Field(h, 100);
  if (std::memcmp(h + 257, "ustar\0", 6) == 0 && h[345] != '\0') {
    hd.name = Field(h + 345, 155) + "/" + hd.name;  // POSIX ustar prefix (GNU's magic has none)
  }
  if (!mode || !size || !mtime) {
    return Error::InvalidArgument("tar entry '" + hd.name + "': malformed numeric field");
  }
  hd.mode = static_cast<std::uint32_t>(*mode & 07777);
  hd.size = *size;
  hd.mtime = static_cast<std::int64_t>(std::min<std::uint64_t>(*mtime, INT64_MAX));
  hd.link = Field(h + 157, 100);

  if (hd.type == 'x' || hd.type == 'g' || hd.type == 'L' || hd.type == 'K') {
    if (hd.size > kMaxMetaBody) {
      return Error::InvalidArgument("tar: extended header of " + std::to_string(hd.size) +
                                    " bytes " + after + " exceeds " + std::to_string(kMaxMetaBody));
    }
    meta_type_ = hd.type;
    meta_body_.clear();
    data_left_ = hd.size;
    pad_left_ = PadOf(hd.size);
    state_ = State::kMetaBody;
    if (data_left_ == 0) {
      AGVISOR_RETURN_IF_ERROR(OnMetaBody());
      state_ = pad_left_ ? State::kPadding : State::kHeader;
    }
    return Ok();
  }
  hd.name = std::exchange(next_path_, std::nullopt).value_or(hd.name);
  hd.link = std::exchange(next_link_, std::nullopt).value_or(hd.link);
  hd.size = std::exchange(next_size_, std::nullopt).value_or(hd.size);
  hd.mtime = std::exchange(next_mtime_, std::nullopt).value_or(hd.mtime);
  AGVISOR_RETURN_IF_ERROR(StartEntry(hd));
  if (state_ == State::kFileData && data_left_ == 0) {
    state_ = State::kHeader;  // empty file, already finished
  } else if (state_ == State::kSkipData && data_left_ == 0) {
    state_ = State::kHeader;
  }
  return Ok();
}

Result<void> TarStreamReader::Push(std::string_view bytes) {
  if (failed_) return error_;
  auto fail = [&](Result<void> r) -> Result<void> {
    if (!r.ok()) return Fail(r.error());
    return Ok();
  };
  while (!bytes.empty()) {
    switch (state_) {
      case State::kHeader: {
        std::size_t n = std::min(kBlock - block_.size(), bytes.size());
        block_.append(bytes.substr(0, n));
        bytes.remove_prefix(n);
        if (block_.size() == kBlock) {
          auto r = OnHeaderBlock();
          block_.clear();
          if (!r.ok()) return fail(std::move(r));
        }
        break;
      }
      case State::kFileData:
      case State::kSkipData:
      case State::kMetaBody: {
        std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(data_left_, bytes.size()));
        std::string_view part = bytes.substr(0, n);
        bytes.remove_prefix(n);
        data_left_ -= n;
        if (state_ == State::kFileData) {
          while (!part.empty()) {
            ssize_t w = write(file_.get(), part.data(), part.size());
            if (w < 0) {
              if (errno == EINTR) continue;
              return Fail(SysError("tar entry '" + entry_name_ + "': write", errno));
            }
            part.remove_prefix(static_cast<std::size_t>(w));
          }
        } else if (state_ == State::kMetaBody) {
          meta_body_.append(part);
        }
        if (data_left_ == 0) {
          if (state_ == State::kFileData) {
            if (auto r = FinishFile(); !r.ok()) return fail(std::move(r));
          } else if (state_ == State::kMetaBody) {
            if (auto r = OnMetaBody(); !r.ok()) return fail(std::move(r));
          }
          state_ = pad_left_ ? State::kPadding : State::kHeader;
        }
        break;
      }
      case State::kPadding: {
        std::size_t n = std::min(pad_left_, bytes.size());
        bytes.remove_prefix(n);
        pad_left_ -= n;
        if (pad_left_ == 0) state_ = State::kHeader;
        break;
      }
      case State::kEnded:
        if (auto r = tar::ExpectOnlyPaddingAfterEnd(bytes, "archive"); !r.ok()) return fail(r);
        bytes = {};
        break;
    }
  }
  return Ok();
}

Result<void> TarStreamReader::Finish() {
  if (failed_) return error_;
  if (state_ != State::kEnded) {
    std::string where = entry_name_.empty() ? std::string("before any entry")
                                            : "in or after entry '" + entry_name_ + "'";
    if (state_ == State::kFileData || state_ == State::kSkipData || state_ == State::kPadding) {
      return Fail(Error::InvalidArgument("tar: archive truncated in entry '" + entry_name_ + "' (" +
                                         std::to_string(data_left_ + pad_left_) +
                                         " bytes of data and padding missing)"));
    }
    if (state_ == State::kMetaBody) {
      return Fail(Error::InvalidArgument("tar: archive truncated in an extended header " + where));
    }
    return Fail(Error::InvalidArgument("tar: archive ended without its end marker " + where));
  }
  // Directories last, deepest first, so that a read-only one could still be filled.
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    std::string name = Join(it->components, it->components.size());
    auto parent_r =
        OpenDirBeneath(dest_.get(), it->components, it->components.size() - 1, false, name);
    if (!parent_r.ok()) return Fail(parent_r.error());
    UniqueFd parent = std::move(parent_r).value();
    int fd = openat(parent.get(), it->components.back().c_str(),
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Fail(SysError("tar entry '" + name + "/': open to set its mode", errno));
    UniqueFd dir(fd);
    if (fchmod(dir.get(), it->mode) != 0) {
      return Fail(SysError("tar entry '" + name + "/': fchmod", errno));
    }
    struct timespec times[2] = {{0, UTIME_OMIT}, {it->mtime, 0}};
    if (futimens(dir.get(), times) != 0) {
      return Fail(SysError("tar entry '" + name + "/': futimens", errno));
    }
  }
  dirs_.clear();
  if (options_.host_rules) DropSetAside();
  finished_ = true;
  return Ok();
}

}  // namespace agvisor
