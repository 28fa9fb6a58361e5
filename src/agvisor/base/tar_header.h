// The fields of a 512-byte tar header block, read and written one way for all of base/'s tar
// code: TarWriter (tar.h), TarStreamWriter and TarStreamReader (tar_stream.h), and
// TarStreamChecker (tar_check.h). Private to base/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace agvisor::tar {

inline constexpr std::size_t kBlock = 512;

// The zero bytes that follow `size` bytes of data up to the next block.
inline std::uint64_t PadOf(std::uint64_t size) { return (kBlock - size % kBlock) % kBlock; }

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

// Computes the unsigned checksum of `header` and stores it in its checksum field.
void SetChecksum(char* header);

}  // namespace agvisor::tar
