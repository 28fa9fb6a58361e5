// A minimal ustar writer: builds the small archives the host uploads into containers before they
// start (the agent binary, files for a sandbox). Used by sandbox/ and tests. Whole root file
// systems are streamed by the system's tar instead (images/): hard links, devices and xattrs are
// out of scope here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor {

class TarWriter {
 public:
  // Adds a directory entry ("a/b", no trailing slash needed). Errors: kInvalidArgument for
  // names that are absolute, contain "..", or do not fit ustar's 100+155 byte name fields.
  Result<void> AddDirectory(std::string_view path, std::uint32_t mode = 0755);
  // Adds a regular file with the given contents.
  Result<void> AddFile(std::string_view path, std::string_view contents, std::uint32_t mode = 0644);
  // The header block of a regular file of `size` bytes whose data the caller sends after it,
  // followed by Padding(size) zero bytes: for an archive too big to build in memory (a layered
  // snapshot's image archive). Errors: as AddFile.
  static Result<std::string> FileHeader(std::string_view path, std::uint64_t size,
                                        std::uint32_t mode = 0644);
  static std::size_t Padding(std::uint64_t size);
  // Appends the two zero blocks that end an archive and returns it. The writer is then empty.
  std::string Finish();

 private:
  static Result<std::string> Header(std::string_view path, char type, std::uint64_t size,
                                    std::uint32_t mode);
  Result<void> AddEntry(std::string_view path, char type, std::string_view contents,
                        std::uint32_t mode);
  std::string out_;
};

}  // namespace agvisor
