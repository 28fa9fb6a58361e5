// Streaming tar: archive a file or directory tree from the file system in bounded chunks, and
// extract an archive arriving in arbitrary chunks under a directory without ever writing outside
// it. Used by the agent's TAR_READ / TAR_WRITE (agent/files.h) and their tests. Standard library
// only (the agent is a static binary). The in-memory base/tar.h stays for small uploads.
//
// Format. Written: POSIX ustar; a name or link target longer than ustar's fields, a size of 8 GiB
// or more, or an out-of-range uid/gid/mtime is carried by a pax extended header ('x') before the
// entry, as POSIX.1-2001 specifies (GNU tar, bsdtar and Python's tarfile read it). Read: ustar,
// GNU tar's (old "ustar  " magic, 'L'/'K' long names and links, base-256 numbers) and pax 'x'
// headers (path, linkpath, size, mtime; other keys ignored); 'g' global headers are skipped.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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
  // Opens `path` (symlinks in its parent directories are followed). Errors: kInvalidArgument
  // (empty path), those of open/fstatat naming the path (kNotFound, kPermissionDenied, ...).
  static Result<std::unique_ptr<TarStreamWriter>> Open(std::string_view path);
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

  std::vector<DirLevel> stack_;
  std::string pending_;  // header / padding bytes ready to go out
  std::size_t pending_pos_ = 0;
  UniqueFd file_;          // the regular file whose data is being sent
  std::string file_name_;  // its archive name, for errors
  std::uint64_t file_left_ = 0;
  std::size_t file_pad_ = 0;  // zero bytes after the file's data
  bool walked_ = false;       // the end-of-archive blocks are queued
  bool done_ = false;
};

// Extracts an archive under a directory. Rules (each refusal is kInvalidArgument naming the
// entry, and ends the extraction: entries before it stay, nothing is rolled back):
//   - names: absolute names and names with a ".." component are refused; "." and empty
//     components are dropped ("./a//b" is "a/b"; "./" is the destination itself).
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
//   - an existing non-directory where an entry goes is replaced (unlinked first: a file is never
//     written through an existing hard link or symlink); an existing directory is kept (a file,
//     link or symlink entry for it is kConflict).
//   - modes: the entry's permission bits (07777), exactly (no umask); ownership is not restored
//     (files belong to this process's user). Directory modes and times are applied in Finish, so
//     a read-only directory can still receive its contents. Regular files get their mtime.
// Memory: one header block, and a pax / GNU long-name body of at most 1 MiB.
class TarStreamReader {
 public:
  // Extracts under `dest`, an existing directory (symlinks in `dest` itself are followed).
  // Errors: those of open, naming dest (kNotFound, kInvalidArgument if not a directory, ...).
  static Result<std::unique_ptr<TarStreamReader>> Open(std::string_view dest);
  ~TarStreamReader();

  // Consumes the next bytes of the archive (any split). Errors: refused or malformed entries
  // (kInvalidArgument, "tar entry 'a/../b': ..."), those of the file system calls naming the
  // entry (ENOSPC: kResourceExhausted). After an error the reader stays failed.
  Result<void> Push(std::string_view bytes);

  // The archive is over: kInvalidArgument unless it ended cleanly (at an entry boundary, with the
  // two zero blocks of the end marker; zero padding after them is fine). Applies the directory
  // modes and times.
  Result<void> Finish();

 private:
  struct Header;
  TarStreamReader() = default;
  Result<void> Fail(Error error);
  Result<void> OnHeaderBlock();
  Result<void> StartEntry(const Header& h);
  Result<void> FinishFile();
  Result<void> OnMetaBody();

  enum class State { kHeader, kFileData, kSkipData, kMetaBody, kPadding, kEnded };

  UniqueFd dest_;
  std::string dest_name_;
  State state_ = State::kHeader;
  std::string block_;  // partial 512-byte block
  int zero_blocks_ = 0;
  std::uint64_t data_left_ = 0;
  std::size_t pad_left_ = 0;
  char meta_type_ = 0;     // 'x', 'g', 'L', 'K' while reading its body
  std::string meta_body_;  // its bytes
  // Overrides for the next entry, from 'x' / 'L' / 'K'.
  std::string next_path_, next_link_;
  bool has_next_path_ = false, has_next_link_ = false, has_next_size_ = false,
       has_next_mtime_ = false;
  std::uint64_t next_size_ = 0;
  std::int64_t next_mtime_ = 0;
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
  bool failed_ = false;
  Error error_{ErrorCode::kInternal, ""};
};

}  // namespace agvisor
