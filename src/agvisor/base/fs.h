// Small file-system reads without third-party code: the names in an open directory (for code
// that walks a tree by fd, openat and friends, so that no path is resolved twice) and the bytes
// of a small file.
//
// Used by base/tar_stream.cc (packing a directory) and the agent: agent/files.cc (removing a
// directory's contents), agent/process_tree.cc (/proc/PID/stat), agent/user.cc (/etc/passwd).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor {

// The names in directory `fd` but "." and "..", in the order readdir returns them. `fd` stays
// open; the duplicate that is read shares its offset, so pass a directory opened for this.
// When a call fails, the result is `fail(call, errno)` with `call` one of "dup", "fdopendir"
// and "readdir": each caller words its own message.
Result<std::vector<std::string>> ReadDirNames(
    int fd, const std::function<Error(std::string_view call, int err)>& fail);

// The bytes of the file at `path`, read until end of file or a read error, or until more than
// `max_bytes` have come (then what came: enough for a caller that only needs the start);
// nullopt when it cannot be opened.
std::optional<std::string> ReadSmallFile(const std::string& path, std::size_t max_bytes);

}  // namespace agvisor
