#include "agvisor/base/tar_header.h"

#include <cstring>

namespace agvisor::tar {

std::optional<std::uint64_t> ParseOctal(const char* f, std::size_t width) {
  std::size_t i = 0;
  while (i < width && (f[i] == ' ' || f[i] == '\0')) ++i;
  std::uint64_t v = 0;
  for (; i < width && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (v >> 61) return std::nullopt;  // one more digit would overflow
    v = v * 8 + static_cast<std::uint64_t>(f[i] - '0');
  }
  for (; i < width; ++i) {
    if (f[i] != ' ' && f[i] != '\0') return std::nullopt;
  }
  return v;
}

std::optional<std::uint64_t> ParseNumber(const char* f, std::size_t width) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(f[i]); };
  if (!(b(0) & 0x80)) return ParseOctal(f, width);
  if (b(0) != 0x80) return std::nullopt;  // negative or > 2^64: not for us
  std::uint64_t v = 0;
  for (std::size_t i = 1; i < width; ++i) {
    if (v >> 56) return std::nullopt;
    v = (v << 8) | b(i);
  }
  return v;
}

std::string Field(const char* f, std::size_t width) { return std::string(f, strnlen(f, width)); }

void PutOctal(char* field, std::size_t width, std::uint64_t value) {
  field[width - 1] = '\0';
  for (std::size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
}

Checksums HeaderChecksums(const char* h) {
  Checksums c;
  for (std::size_t i = 0; i < kBlock; ++i) {
    const char byte = (i >= 148 && i < 156) ? ' ' : h[i];
    c.sum += static_cast<unsigned char>(byte);
    c.signed_sum += static_cast<signed char>(byte);
  }
  return c;
}

void SetChecksum(char* h) {
  std::memset(h + 148, ' ', 8);
  PutOctal(h + 148, 7, HeaderChecksums(h).sum);  // six digits, NUL, and the space already there
}

}  // namespace agvisor::tar
