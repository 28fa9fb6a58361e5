// The egress log on disk (docs/egress.md, "Log"): one JSON line per record (api::DecisionJson),
// per sandbox, in a directory of agvisord's state (`<egress state dir>/log`), rotated by size.
//
// Used by EgressHost (egress_host.h): it appends each decision of a sandbox's enforcer under the
// id of the sandbox's egress network (unique per sandbox: a sandbox made again under the same
// name starts a log of its own), reads the last records back for the log routes, and deletes a
// sandbox's files with its network.
//
// Bounded on disk: a sandbox's log is its current file `<id>.jsonl` and at most `files - 1`
// older ones (`<id>.jsonl.1` newest ... ), each rotated out once it would pass `file_bytes`, so
// a sandbox that sprays requests only rotates its own files (`files * file_bytes` at most).
// Bounded in memory: an open descriptor per sandbox written recently (at most kMaxOpenLogFiles)
// and a file's worth of bytes while reading. The directory is 0700, the files 0600 (a record
// names what a sandbox reached, and brokered secrets by name), opened with O_NOFOLLOW.
// Thread-safe (one mutex for the appends of the enforcers' threads; API threads read the files
// without it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor::server {

struct EgressLogLimits {
  std::size_t file_bytes = 1 << 20;  // rotated before a line would take a file past this
  std::size_t files = 5;             // the current file and the older ones, per sandbox
};

// Descriptors kept open for appending, over every sandbox (the least recently written is closed
// past it; it is opened again on its next record).
inline constexpr std::size_t kMaxOpenLogFiles = 256;

class EgressLogFiles {
 public:
  // Makes `dir` (and its parents) if needed and sets it to 0700. Limits below 4 KiB per file or
  // 1 file are raised to those. Errors: kUnavailable (the directory cannot be made), chmod's.
  static Result<std::unique_ptr<EgressLogFiles>> Open(std::string dir, EgressLogLimits limits = {});

  // Appends `line` and a newline to `key`'s current file, after rotating when the file would
  // pass file_bytes. `key`: 1-64 of [0-9a-f] (a network id). Errors: kInvalidArgument (key);
  // an open, write or rename that failed, as Error::FromErrno (ENOSPC: kResourceExhausted).
  Result<void> Append(const std::string& key, std::string_view line);
  // The last `n` lines of `key`'s files, oldest first (newest file first, then older ones while
  // fewer than `n` were found). A last line without its newline (torn by a crash) is left out.
  // Empty for a key without files. Appends go on meanwhile: a rotation during the read can
  // repeat or skip one file's lines at the seam.
  std::vector<std::string> Last(const std::string& key, std::size_t n) const;
  // Closes `key`'s descriptor (its files stay).
  void Close(const std::string& key);
  // Closes and deletes `key`'s files.
  void Remove(const std::string& key);
  // The keys that have a current file (to find those of networks that are gone).
  std::vector<std::string> Keys() const;

  const std::string& dir() const { return dir_; }
  const EgressLogLimits& limits() const { return limits_; }

 private:
  EgressLogFiles(std::string dir, EgressLogLimits limits) : dir_(std::move(dir)), limits_(limits) {}
  std::string PathOf(const std::string& key, std::size_t generation) const;
  // Under mu_: renames `<key>.jsonl` to `.1`, `.1` to `.2`, ..., the oldest dropped.
  Result<void> Rotate(const std::string& key);

  struct Writer {
    UniqueFd fd;
    std::uint64_t size = 0;
    std::uint64_t last_write = 0;
  };
  const std::string dir_;
  const EgressLogLimits limits_;
  mutable std::mutex mu_;
  std::map<std::string, Writer> open_;
  std::uint64_t writes_ = 0;
};

// Whether `key` is 1-64 of [0-9a-f] (a Docker network id): the only names that become paths.
bool IsLogKey(std::string_view key);

}  // namespace agvisor::server
