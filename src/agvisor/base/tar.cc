#include "agvisor/base/tar.h"

#include <array>
#include <cstdio>
#include <cstring>

namespace agvisor {
namespace {

constexpr std::size_t kBlock = 512;

// Writes `value` as zero-padded octal into field[0..width-1) followed by NUL.
void Octal(char* field, std::size_t width, std::uint64_t value) {
  field[width - 1] = '\0';
  for (std::size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
}

}  // namespace

Result<void> TarWriter::AddDirectory(std::string_view path, std::uint32_t mode) {
  std::string p(path);
  if (!p.empty() && p.back() != '/') p += '/';
  return AddEntry(p, '5', {}, mode);
}

Result<void> TarWriter::AddFile(std::string_view path, std::string_view contents,
                                std::uint32_t mode) {
  return AddEntry(path, '0', contents, mode);
}

Result<void> TarWriter::AddEntry(std::string_view path, char type, std::string_view contents,
                                 std::uint32_t mode) {
  if (path.empty() || path.front() == '/' || path.find("..") != std::string_view::npos) {
    return Error::InvalidArgument("tar: entry name must be relative without '..', got '" +
                                  std::string(path) + "'");
  }
  std::string_view name = path, prefix;
  if (name.size() > 100) {
    // ustar splits a long name at a '/' into prefix (<= 155) and name (<= 100).
    std::size_t cut = path.rfind('/', path.size() - 2);
    while (cut != std::string_view::npos && path.size() - cut - 1 > 100)
      cut = std::string_view::npos;
    if (cut == std::string_view::npos || cut > 155) {
      return Error::InvalidArgument("tar: name too long for ustar: '" + std::string(path) + "'");
    }
    prefix = path.substr(0, cut);
    name = path.substr(cut + 1);
  }
  std::array<char, kBlock> h{};
  std::memcpy(h.data(), name.data(), name.size());
  Octal(h.data() + 100, 8, mode);
  Octal(h.data() + 108, 8, 0);  // uid root
  Octal(h.data() + 116, 8, 0);  // gid root
  Octal(h.data() + 124, 12, contents.size());
  Octal(h.data() + 136, 12, 0);  // mtime
  h[156] = type;
  std::memcpy(h.data() + 257, "ustar", 6);  // magic "ustar\0"
  std::memcpy(h.data() + 263, "00", 2);     // version
  std::memcpy(h.data() + 345, prefix.data(), prefix.size());
  // The checksum is computed with its own field read as spaces.
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  Octal(h.data() + 148, 7, sum);  // six digits, NUL, and the space already there
  out_.append(h.data(), kBlock);
  out_.append(contents);
  out_.append((kBlock - contents.size() % kBlock) % kBlock, '\0');
  return Ok();
}

std::string TarWriter::Finish() {
  out_.append(2 * kBlock, '\0');
  return std::exchange(out_, {});
}

}  // namespace agvisor
