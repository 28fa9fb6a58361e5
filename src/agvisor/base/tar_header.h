// The fields of a 512-byte tar header block, read and written one way for all of base/'s tar
// code: TarWriter (tar.h), TarStreamWriter and TarStreamReader (tar_stream.h), and
// TarStreamChecker (tar_check.h). Private to base/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::tar {

inline constexpr std::size_t kBlock = 512;

// The zero bytes that follow `size` bytes of data up to the next block.
inline std::uint64_t PadOf(std::uint64_t size) { return (kBlock - size % kBlock) % kBlock; }

// Whether `bytes` are all NUL (an end-of-archive block, padding, what may follow the end).
inline bool AllZero(std::string_view bytes) {
  return bytes.find_first_not_of('\0') == std::string_view::npos;
}

// After an archive's two end blocks only NUL bytes may come (writers pad to a record size).
// kInvalidArgument "tar: data after the end of the <what> (refused)" otherwise.
Result<void> ExpectOnlyPaddingAfterEnd(std::string_view bytes, std::string_view what);

// Takes regular files ('0'; with `legacy_files` also '\0' and '7', older spellings of one),
// directories ('5'), symlinks ('2') and hard links ('1'). kInvalidArgument naming `entry` for
// the rest: device nodes ('3', '4': a node names a host device by its numbers), FIFOs ('6') and
// every other type.
Result<void> CheckEntryType(char type, std::string_view entry, bool legacy_files);

// An octal field: optional leading spaces or NULs, octal digits, then only spaces or NULs.
// nullopt for anything else (base-256 included).
std::optional<std::uint64_t> ParseOctal(const char* field, std::size_t width);

// An octal field (ParseOctal) or a GNU base-256 one (the first byte is 0x80); nullopt when
// malformed, negative or too large.
std::optional<std::uint64_t> ParseNumber(const char* field, std::size_t width);

// A text field: its bytes up to the first NUL, or all `width` of them.
std::string Field(const char* field, std::size_t width);

// Writes `value` as zero-padded octal into field[0..width-1) followed by a NUL.
void PutOctal(char* field, std::size_t width, std::uint64_t value);

// The header's checksums, its checksum field (bytes 148-155) counted as spaces: the bytes read
// unsigned (POSIX) and signed (what some old writers stored).
struct Checksums {
  unsigned sum = 0;
  int signed_sum = 0;
};
Checksums HeaderChecksums(const char* header);

// One record of a pax extended header's body: "<len> <key>=<value>\n", where <len> (1 to 8
// decimal digits) counts the whole record, itself included.
struct PaxRecord {
  std::string_view key;
  std::string_view value;
};
// Splits the first record off `body` (the views point into it). Errors: kInvalidArgument saying
// what is malformed (the length, the record's end, a record without '='); `body` is then left
// as it was.
Result<PaxRecord> NextPaxRecord(std::string_view& body);

// Computes the unsigned checksum of `header` and stores it in its checksum field.
void SetChecksum(char* header);

}  // namespace agvisor::tar
