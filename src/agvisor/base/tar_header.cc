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

Result<void> ExpectOnlyPaddingAfterEnd(std::string_view bytes, std::string_view what) {
  if (AllZero(bytes)) return Ok();
  return Error::InvalidArgument("tar: data after the end of the " + std::string(what) +
                                " (refused)");
}

Result<void> CheckEntryType(char type, std::string_view entry, bool legacy_files) {
  const std::string prefix = "tar entry '" + std::string(entry) + "': ";
  switch (type) {
    case '\0':
    case '7':
      if (legacy_files) return Ok();
      break;
    case '0':
    case '5':
    case '2':
    case '1':
      return Ok();
    case '3':
    case '4':
      return Error::InvalidArgument(prefix +
                                    "device nodes are refused (a node names a host device by its "
                                    "numbers; the image would hand it to every container)");
    case '6':
      return Error::InvalidArgument(prefix + "FIFOs are refused");
    default:
      break;
  }
  return Error::InvalidArgument(
      prefix + "entry type " + std::to_string(static_cast<unsigned char>(type)) + " ('" +
      (type >= 0x20 && type < 0x7f ? std::string(1, type) : std::string("?")) +
      "') is refused (regular files, directories, symlinks and hard links only)");
}

Result<PaxRecord> NextPaxRecord(std::string_view& body) {
  const std::size_t sp = body.find(' ');
  if (sp == std::string_view::npos || sp == 0 || sp > 8) {
    return Error::InvalidArgument("malformed record length");
  }
  std::uint64_t len = 0;
  for (char c : body.substr(0, sp)) {
    if (c < '0' || c > '9') return Error::InvalidArgument("malformed record length");
    len = len * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (len <= sp + 1 || len > body.size() || body[len - 1] != '\n') {
    return Error::InvalidArgument("malformed record");
  }
  const std::string_view rec = body.substr(sp + 1, len - sp - 2);
  const std::size_t eq = rec.find('=');
  if (eq == std::string_view::npos) return Error::InvalidArgument("a record without '='");
  body.remove_prefix(len);
  return PaxRecord{rec.substr(0, eq), rec.substr(eq + 1)};
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
