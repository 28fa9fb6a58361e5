#include "agvisor/base/tar.h"

#include <array>
#include <cstdio>
#include <cstring>

#include "agvisor/base/tar_header.h"

namespace agvisor {
Result<void> TarWriter::AddDirectory(std::string_view path, std::uint32_t mode) {
  std::string p(path);
  if (!p.empty() && p.back() != '/') p += '/';
  return AddEntry(p, '5', {}, mode);
}

Result<void> TarWriter::AddFile(std::string_view path, std::string_view contents,
                                std::uint32_t mode) {
  return AddEntry(path, '0', contents, mode);
}

Result<std::string> TarWriter::Header(std::string_view path, char type, std::uint64_t size,
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
  std::array<char, tar::kBlock> h{};
  std::memcpy(h.data(), name.data(), name.size());
  tar::PutOctal(h.data() + 100, 8, mode);
  tar::PutOctal(h.data() + 108, 8, 0);  // uid root
  tar::PutOctal(h.data() + 116, 8, 0);  // gid root
  tar::PutOctal(h.data() + 124, 12, size);
  tar::PutOctal(h.data() + 136, 12, 0);  // mtime
  h[156] = type;
  std::memcpy(h.data() + 257, "ustar", 6);  // magic "ustar\0"
  std::memcpy(h.data() + 263, "00", 2);     // version
  std::memcpy(h.data() + 345, prefix.data(), prefix.size());
  tar::SetChecksum(h.data());
  return std::string(h.data(), tar::kBlock);
}

Result<std::string> TarWriter::FileHeader(std::string_view path, std::uint64_t size,
                                          std::uint32_t mode) {
  return Header(path, '0', size, mode);
}

std::size_t TarWriter::Padding(std::uint64_t size) {
  return static_cast<std::size_t>(tar::PadOf(size));
}

Result<void> TarWriter::AddEntry(std::string_view path, char type, std::string_view contents,
                                 std::uint32_t mode) {
  out_ += AGVISOR_TRY(Header(path, type, contents.size(), mode));
  out_.append(contents);
  out_.append(tar::PadOf(contents.size()), '\0');
  return Ok();
}

std::string TarWriter::Finish() {
  out_.append(2 * tar::kBlock, '\0');
  return std::exchange(out_, {});
}

}  // namespace agvisor
