// Streaming tar: archive a file or directory tree from the file system in bounded chunks, and
// extract an archive arriving in arbitrary chunks under a directory without ever writing outside
// it. Used by the agent's TAR_READ / TAR_WRITE (agent/files.h), and on the host by every
// download from a sandbox (sandbox.h, UnpackIntoLocalDir, under TarReaderOptions::host_rules).
// Standard library only (the agent is a static binary). The in-memory base/tar.h stays for small
// uploads.
//
// Format. Written: POSIX ustar; a name or link target longer than ustar's fields, a size of 8 GiB
// or more, or an out-of-range uid/gid/mtime is carried by a pax extended header ('x') before the
// entry, as POSIX.1-2001 specifies (GNU tar, bsdtar and Python's tarfile read it). Read: ustar,
// GNU tar's (old "ustar  " magic, 'L'/'K' long names and links, base-256 numbers) and pax 'x'
// headers (path, linkpath, size, mtime; other keys ignored); 'g' global headers are skipped.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor {

struct TarChunk {
  std::string bytes;
  bool end = false;  // the archive is complete after these bytes
};

// Archives the file or directory `path` incrementally. Entries are named relative to the parent
// of `path` ("/a/b" -> "b", "b/c", ...; "/" -> "./", "./etc", ...), directories before their
// contents, names in byte order. Regular files, directories and symlinks are stored with their
// permission bits, uid/gid and mtime (seconds); symlinks are stored as symlinks, never followed
// (including `path` itself when it is one); sockets, FIFOs and device nodes are skipped.
//
// Every file and directory is opened with openat(dirfd, name, O_NOFOLLOW) relative to its
// already-open parent, so a symlink swapped in during the walk cannot make it read outside the
// tree. Memory: one read of at most max_bytes, the names of one directory per level of depth.
class TarStreamWriter {
 public:
  struct Options {
    // Absolute paths below the archived path whose contents are left out: a directory there is
    // archived empty (a mount point stays), anything else is left out. A snapshot of "/" prunes
    // /proc, /sys, /dev and the agent's own files this way (Sandbox::Snapshot). Paths that are
    // not below the archived path are ignored.
    std::vector<std::string> prune;
    // Name the entries as an archive of "/" names them ("./", "./a", ...) whatever `path` is:
    // for tests of what a snapshot's stream looks like.
    bool name_as_root = false;
    // A layer over the image the tree started from (a layered snapshot of "/",
    // Sandbox::Snapshot) instead of the whole tree: an entry is archived when its status
    // changed at or after `since` (ctime: a write, chmod, chown, link or copy-up sets it, and
    // nothing inside can set it back), when it is not among `baseline`'s names of its
    // directory (a new name, whatever its ctime), or below a path of `whole`. The directories
    // above an archived entry are archived too (their header only), so that the layer keeps
    // their modes and owners. A name of `baseline` that is gone becomes a whiteout, an empty
    // file "DIR/.wh.NAME" (Docker's), after its directory; in a pruned directory every name of
    // `baseline` is gone (it is archived empty, as without a layer).
    struct Layer {
      timespec since{};
      // The image's tree: archive name of a directory ("." for "/", "./etc") -> the names in
      // it. A directory not listed is new: everything below it is archived.
      std::map<std::string, std::vector<std::string>, std::less<>> baseline;
      // Absolute paths archived whole, whatever their ctime: volumes (their files were not
      // made by this sandbox's copy-ups, their ctimes say nothing of the image).
      std::vector<std::string> whole;
    };
    std::optional<Layer> layer;
  };
  // Opens `path` (symlinks in its parent directories are followed). Errors: kInvalidArgument
  // (empty path, a prune path that is not absolute), those of open/fstatat naming the path
  // (kNotFound, kPermissionDenied, ...).
  static Result<std::unique_ptr<TarStreamWriter>> Open(std::string_view path);
  static Result<std::unique_ptr<TarStreamWriter>> Open(std::string_view path,
                                                       const Options& options);
  ~TarStreamWriter();

  // The next at most `max_bytes` (> 0) bytes of the archive; `end` with the last ones (the data
  // may then be empty). Never empty with end == false. Errors name the file: those of reading it,
  // opening a directory; kConflict for a regular file that shrank while it was being read (the
  // header already promised its size). After an error or the end the writer is spent.
  Result<TarChunk> Pull(std::size_t max_bytes);

 private:
  struct DirLevel;
  TarStreamWriter() = default;
  Result<void> AddEntry(int dirfd, const std::string& name, const std::string& archive_name);
  Result<void> Advance();
  // Layer mode: whether the entry `name` of the directory on top of the stack (none: the root)
  // with status `st` is archived; queues the headers of the directories above it first.
  bool LayerWants(const std::string& name, const std::string& archive_name, const struct stat& st);
  void FlushDirectoryHeaders();

  std::vector<DirLevel> stack_;
  std::unordered_set<std::string> prune_;  // archive names of Options::prune
  std::optional<Options::Layer> layer_;
  std::unordered_set<std::string> whole_;  // archive names of Layer::whole
  std::string pending_;                    // header / padding bytes ready to go out
  std::size_t pending_pos_ = 0;
  UniqueFd file_;          // the regular file whose data is being sent
  std::string file_name_;  // its archive name, for errors
  std::uint64_t file_left_ = 0;
  std::size_t file_pad_ = 0;  // zero bytes after the file's data
  bool walked_ = false;       // the end-of-archive blocks are queued
  bool done_ = false;
};

// How TarStreamReader treats what it extracts. The defaults are the agent's rules for uploads
// into a sandbox; `host_rules` adds the rules for archives a sandbox produced, extracted on the
// host (Sandbox::Download and everything else that turns sandbox bytes into host files: see
// docs/security.md, "Downloads").
struct TarReaderOptions {
  // Host rules, on top of the common ones below:
  //   - modes: permission bits & 0777 (setuid, setgid and sticky bits dropped), on files and on
  //     the directories this extraction made; a directory that was there before keeps its mode;
  //   - hard links: only to a file or symlink this same extraction created (checked by inode),
  //     never to one that was in the destination before;
  //   - all or nothing: an extraction that fails, or is destroyed before Finish succeeded (the
  //     caller's transport broke), removes every file, link and directory it created, deepest
  //     first, each only while it is still the inode it made (nothing that was there before is
  //     removed), and puts back what it replaced: an existing non-directory is renamed aside
  //     (".agvisor-replaced-PID-N-NAME" in its directory) rather than unlinked, renamed back on
  //     failure, and deleted when Finish succeeds;
  //   - bookkeeping is bounded by `max_bookkeeping_bytes`; an archive with more entries than
  //     that records is refused (kResourceExhausted) and rolled back.
  bool host_rules = false;
  // The most bytes of regular-file data the archive may write in all; an entry whose declared
  // size would pass it is refused at its header (kResourceExhausted), before any of its data is
  // written. 0: no budget.
  std::uint64_t max_bytes = 0;
  // Host rules: the memory kept to undo the extraction (per entry its relative name plus about
  // 100 bytes: 64 MiB holds ~400,000 entries of 60-byte names).
  std::size_t max_bookkeeping_bytes = std::size_t{64} << 20;
  // Non-empty: the archive's top entry is extracted under this name instead (a file or directory
  // copied to a new name: `agvisor cp NAME:/a/f ./g`). Every entry's first name component, and
  // a hard link target's, must then be the first entry's (else kInvalidArgument); it is replaced
  // by `top_name`, one component (no '/', not "." or "..": Open refuses it).
  std::string top_name;
};

// Extracts an archive under a directory. Rules (each refusal is kInvalidArgument naming the
// entry, and ends the extraction; without host_rules entries before it stay):
//   - names: absolute names, names with a ".." component and names with a NUL byte are refused;
//     "." and empty components are dropped ("./a//b" is "a/b"; "./" is the destination itself).
//   - every component of an entry's parent is opened with openat(O_NOFOLLOW) from the
//     destination's fd, so an entry can never go through a symlink, whether the archive made it
//     or it was there before; missing parents are created (0755).
//   - symlinks ('2'): the target must stay inside the destination read lexically from the link's
//     directory: absolute targets and targets that climb above the destination with ".." are
//     refused. A link is never followed by the extraction itself (see above), so a link created
//     now cannot redirect a later entry.
//   - hard links ('1'): the target is an archive name, held to the same rules as names and
//     looked up the same way (inside the destination, through no symlink).
//   - device nodes, FIFOs, GNU sparse files, volume headers and unknown types are refused.
//   - an existing non-directory where an entry goes is replaced (unlinked, or under host_rules
//     renamed aside, first: a file is never
//     written through an existing hard link or symlink); an existing directory is kept (a file,
//     link or symlink entry for it is kConflict).
//   - modes: the entry's permission bits (07777; 0777 under host_rules), exactly (no umask);
//     ownership is not restored (files belong to this process's user). Directory modes and
//     times are applied in Finish, so a read-only directory can still receive its contents.
//     Regular files get their mtime.
// Memory: one header block, a pax / GNU long-name body of at most 1 MiB, one record per
// directory entry (its mode is applied at the end), and under host_rules the bounded undo
// records above.
class TarStreamReader {
 public:
  // Extracts under `dest`, an existing directory (symlinks in `dest` itself are followed).
  // Errors: those of open, naming dest (kNotFound, kInvalidArgument if not a directory, ...).
  static Result<std::unique_ptr<TarStreamReader>> Open(std::string_view dest,
                                                       const TarReaderOptions& options = {});
  // Under host_rules, before a successful Finish: removes what the extraction created.
  ~TarStreamReader();

  // Consumes the next bytes of the archive (any split). Errors: refused or malformed entries
  // (kInvalidArgument, "tar entry 'a/../b': ..."), the byte budget or the bookkeeping bound
  // (kResourceExhausted), those of the file system calls naming the entry (ENOSPC:
  // kResourceExhausted). After an error the reader stays failed; under host_rules it has
  // already removed what it created (the message says how many entries).
  Result<void> Push(std::string_view bytes);

  // The archive is over: kInvalidArgument unless it ended cleanly (at an entry boundary, with the
  // two zero blocks of the end marker; zero padding after them is fine). Applies the directory
  // modes and times.
  Result<void> Finish();

  // Under host_rules: how many entries this extraction created (files, links, directories).
  std::size_t created_count() const { return created_.size(); }

 private:
  struct Header;
  TarStreamReader() = default;
  Result<void> Fail(Error error);
  Result<void> OnHeaderBlock();
  Result<void> StartEntry(const Header& h);
  // With options_.top_name: `comps` (of entry `entry`) renamed under it.
  Result<void> RenameTop(std::vector<std::string>& comps, const std::string& entry);
  Result<void> FinishFile();
  Result<void> OnMetaBody();
  // Host rules: records an entry this extraction created at `name` (`st` of what it made).
  Result<void> Record(const std::string& name, const struct stat& st);
  Result<void> Charge(std::size_t bytes, const std::string& entry);
  std::size_t RollBack();
  // Makes room for a non-directory entry at comps in `dirfd` (comps' parent): refuses to replace
  // a directory and never writes through what is there. Host rules rename it aside, so that a
  // failed extraction can put it back; otherwise it is unlinked.
  Result<void> MakeRoom(int dirfd, const std::vector<std::string>& comps, const std::string& entry);
  // Deletes what MakeRoom set aside, once the extraction has succeeded.
  void DropSetAside();

  enum class State { kHeader, kFileData, kSkipData, kMetaBody, kPadding, kEnded };

  TarReaderOptions options_;
  UniqueFd dest_;
  std::string dest_name_;
  std::string top_seen_;  // with options_.top_name: the archive's own first component
  State state_ = State::kHeader;
  std::string block_;  // partial 512-byte block
  int zero_blocks_ = 0;
  std::uint64_t data_left_ = 0;
  std::size_t pad_left_ = 0;
  char meta_type_ = 0;     // 'x', 'g', 'L', 'K' while reading its body
  std::string meta_body_;  // its bytes
  // Overrides for the next entry, from 'x' / 'L' / 'K'.
  std::optional<std::string> next_path_, next_link_;
  std::optional<std::uint64_t> next_size_;
  std::optional<std::int64_t> next_mtime_;
  // The regular file being written.
  UniqueFd file_;
  std::string entry_name_;
  std::uint32_t file_mode_ = 0;
  std::int64_t file_mtime_ = 0;
  struct DirFixup {
    std::vector<std::string> components;
    std::uint32_t mode;
    std::int64_t mtime;
  };
  std::vector<DirFixup> dirs_;
  // Host rules: what this extraction created, in order (undone in reverse), and its inodes
  // (those of files and symlinks are the only allowed hard-link targets).
  struct Created {
    std::string name;  // relative to dest, components joined by '/'
    dev_t dev;
    ino_t ino;
    bool dir;
    // Not made but set aside: what was at `name` before (dev/ino are its own) was renamed to
    // this name in the same directory. Undone by renaming it back; Finish deletes it.
    std::string aside;
  };
  std::vector<Created> created_;
  struct Inode {
    dev_t dev;
    ino_t ino;
    bool operator==(const Inode&) const = default;
  };
  struct InodeHash {
    std::size_t operator()(const Inode& i) const {
      return std::hash<std::uint64_t>()(static_cast<std::uint64_t>(i.ino) * 31 +
                                        static_cast<std::uint64_t>(i.dev));
    }
  };
  std::unordered_set<Inode, InodeHash> own_inodes_;
  std::size_t bookkeeping_ = 0;
  std::uint64_t aside_count_ = 0;  // names MakeRoom set aside
  std::uint64_t written_ = 0;      // bytes of file data declared so far (the budget)
  bool finished_ = false;
  bool failed_ = false;
  Error error_{ErrorCode::kInternal, ""};
};

}  // namespace agvisor
