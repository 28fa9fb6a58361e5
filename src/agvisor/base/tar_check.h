// TarStreamChecker: checks a tar stream that a sandbox produced while it passes, untouched, to
// something else that will extract it (a snapshot's stream on its way into the Engine API's
// image import: Sandbox::Snapshot). Nothing is extracted here; the checker decides, header by
// header, whether the bytes may go on. The caller forwards a chunk only after Push accepted it,
// and ends the consumer's input cleanly only after Finish accepted the whole stream; on a
// refusal it must abort the consumer (drop the connection), never end it cleanly.
//
// The accepted format is exactly what TarStreamWriter (tar_stream.h) writes for "/" and nothing
// more, so that this checker and the consumer's reader (Go's archive/tar inside dockerd) cannot
// read the same bytes two ways. Rules (each refusal names the entry and the rule):
//   - headers: POSIX ustar ("ustar\0" "00"), the unsigned checksum, octal numeric fields only
//     (no base-256), no ustar name prefix, bytes 500-511 zero (star's trailer would change how
//     other readers split the prefix); entry types: regular file '0', directory '5', symlink
//     '2', hard link '1', and a pax extended header 'x' for the next entry. Refused: device
//     nodes '3'/'4' (a node made inside names any host device by its numbers: an image carrying
//     one hands it to every container made from it), FIFOs, GNU long names, global headers,
//     sparse files and every other type.
//   - pax records: "path", "linkpath", "size", "mtime", "atime", "ctime", "uid", "gid",
//     "uname", "gname" only (extended attributes, sparse maps and the rest are refused); one pax
//     header per entry; its body at most 1 MiB.
//   - names: the first entry is "./" (a directory); every name is "./" followed by components
//     joined by single slashes: no empty, "." or ".." component, no NUL, no component over 255
//     bytes, no name over 4096 bytes, no component starting with ".wh." (Docker's whiteouts;
//     with TarCheckOptions::whiteouts, a layer's: an empty regular file "DIR/.wh.NAME" is
//     accepted, nowhere else and never the opaque-directory marker ".wh..wh..opq");
//     directories end in "/", nothing else does.
//   - sizes: a directory, symlink or hard link has size 0 (other readers skip no data for them:
//     a size there would hide the next header from one of the two readers); the whole stream,
//     headers and padding included, is at most TarCheckOptions::max_bytes, refused at the header
//     whose declared size would pass it (before any of its data is accepted).
//   - symlinks: kept as entries with any target (a root file system has absolute ones); never
//     followed: an entry whose path goes through a name that this archive made a symlink (or a
//     hard link to one) is refused.
//   - hard links: the target is the name of an earlier regular file or symlink of this archive.
//   - the end: two zero blocks, then only zero bytes; Finish refuses a stream that stopped
//     anywhere else (truncated).
// Memory: one header block, one pax body (1 MiB), and the names of the archive's files and
// symlinks (for the hard-link and symlink rules), bounded by max_bookkeeping_bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "agvisor/base/error.h"

namespace agvisor {

struct TarCheckOptions {
  // The most bytes the whole stream may have (headers, data, padding, end blocks).
  std::uint64_t max_bytes = std::uint64_t{8} << 30;
  // The memory kept for the names of files and symlinks (per name its bytes plus ~64).
  std::size_t max_bookkeeping_bytes = std::size_t{64} << 20;
  // The stream is a layer over an image (a layered snapshot, Sandbox::Snapshot): it may delete
  // the image's entries with whiteouts, empty regular files "DIR/.wh.NAME" (NAME not itself
  // starting with ".wh."). A whiteout only hides what is below it in the image being made; it
  // can delete nothing the sandbox could not have deleted itself.
  bool whiteouts = false;
};

// What a checked stream held.
struct TarCheckStats {
  std::uint64_t bytes = 0;  // accepted so far
  std::uint64_t entries = 0;
  std::uint64_t files = 0;
  std::uint64_t directories = 0;
  std::uint64_t symlinks = 0;
  std::uint64_t hard_links = 0;
  std::uint64_t whiteouts = 0;   // (TarCheckOptions::whiteouts)
  std::uint64_t file_bytes = 0;  // of regular files' data
};

class TarStreamChecker {
 public:
  explicit TarStreamChecker(TarCheckOptions options = {}) : options_(options) {}

  // Checks the next bytes (any split). Ok: they may be forwarded. Errors: kInvalidArgument (a
  // refused or malformed entry: "tar entry './a/../b': ..."), kResourceExhausted (the size cap,
  // the bookkeeping bound). After an error the checker stays failed and returns it again.
  Result<void> Push(std::string_view bytes);
  // The stream is over: kInvalidArgument unless it ended with its end marker (truncated
  // streams: naming where).
  Result<void> Finish();

  const TarCheckStats& stats() const { return stats_; }

 private:
  Result<void> Fail(Error e);
  Result<void> OnHeader();
  Result<void> OnPaxBody();
  Result<void> Remember(const std::string& name, bool symlink);

  enum class State { kHeader, kData, kPaxBody, kPadding, kEnded };
  enum class Kind : char { kFile, kSymlink };

  TarCheckOptions options_;
  TarCheckStats stats_;
  State state_ = State::kHeader;
  std::string block_;
  int zero_blocks_ = 0;
  std::uint64_t data_left_ = 0;
  std::uint64_t pad_left_ = 0;
  std::string pax_body_;
  bool has_pax_ = false;  // a pax header waits for its entry
  // What that pax header sets for its entry.
  std::optional<std::string> pax_path_, pax_link_;
  std::optional<std::uint64_t> pax_size_;
  std::string last_name_;  // for messages
  std::unordered_map<std::string, Kind> names_;
  std::size_t bookkeeping_ = 0;
  bool failed_ = false;
  Error error_{ErrorCode::kInternal, ""};
};

}  // namespace agvisor
