// ReadPrivateFile: reads a small secret file (agvisord's bearer token, the desktop key) only if
// no other user could have read or replaced it.
//
// Used by server/daemon.cc (--token-file) and gateway/token.cc (--desktop-key-file). A secret in
// a file that group or others may read is as good as published, and one owned by another user
// can be swapped for a key that user knows; both are refused, with the command that fixes it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor {

// The file's bytes (at most max_bytes), after fstat of the opened file shows it owned by this
// process's effective user with no group/other permission bits (mode & 077 == 0). `what` names
// the file in messages ("token file"). Errors: kNotFound (no such file), kPermissionDenied (open
// failed; or mode/owner: the message gives `chmod 600 PATH` / `chown UID PATH`), kInvalidArgument
// (not a regular file, or larger than max_bytes), kInternal (read).
Result<std::string> ReadPrivateFile(const std::string& path, std::string_view what,
                                    std::size_t max_bytes = 64 * 1024);

}  // namespace agvisor
