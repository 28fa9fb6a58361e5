#include "agvisor/proto/wire.h"

#include <string>

namespace agvisor::proto {
namespace {

// Shifts rather than memcpy + byte swap: portable, and compilers fold them into bswap.
template <typename U>
void AppendBigEndian(std::string& out, U v) {
  for (int shift = static_cast<int>(sizeof(U) * 8) - 8; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(v >> shift)));
  }
}

template <typename U>
U LoadBigEndian(std::string_view bytes) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    v = static_cast<U>((v << 8) | static_cast<std::uint8_t>(bytes[i]));
  }
  return v;
}

}  // namespace

void Writer::AppendU8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
void Writer::AppendU16(std::uint16_t v) { AppendBigEndian(out_, v); }
void Writer::AppendU32(std::uint32_t v) { AppendBigEndian(out_, v); }
void Writer::AppendU64(std::uint64_t v) { AppendBigEndian(out_, v); }
void Writer::AppendI32(std::int32_t v) { AppendBigEndian(out_, static_cast<std::uint32_t>(v)); }
void Writer::AppendI64(std::int64_t v) { AppendBigEndian(out_, static_cast<std::uint64_t>(v)); }

void Writer::AppendStr(std::string_view s) {
  AppendU32(static_cast<std::uint32_t>(s.size()));
  out_.append(s);
}

Error Reader::Invalid(std::string_view field, std::string_view what) const {
  std::string m;
  m.append(message_).append(".").append(field).append(": ").append(what);
  return Error::InvalidArgument(std::move(m));
}

Result<std::string_view> Reader::Take(std::string_view field, std::size_t n) {
  if (rest_.size() < n) {
    return Invalid(field, "truncated: need " + std::to_string(n) + " bytes, " +
                              std::to_string(rest_.size()) + " left");
  }
  std::string_view taken = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return taken;
}

Result<std::uint8_t> Reader::ReadU8(std::string_view field) {
  return LoadBigEndian<std::uint8_t>(AGVISOR_TRY(Take(field, 1)));
}
Result<std::uint16_t> Reader::ReadU16(std::string_view field) {
  return LoadBigEndian<std::uint16_t>(AGVISOR_TRY(Take(field, 2)));
}
Result<std::uint32_t> Reader::ReadU32(std::string_view field) {
  return LoadBigEndian<std::uint32_t>(AGVISOR_TRY(Take(field, 4)));
}
Result<std::uint64_t> Reader::ReadU64(std::string_view field) {
  return LoadBigEndian<std::uint64_t>(AGVISOR_TRY(Take(field, 8)));
}
// The unsigned -> signed conversions are modular since C++20 (two's complement).
Result<std::int32_t> Reader::ReadI32(std::string_view field) {
  return static_cast<std::int32_t>(AGVISOR_TRY(ReadU32(field)));
}
Result<std::int64_t> Reader::ReadI64(std::string_view field) {
  return static_cast<std::int64_t>(AGVISOR_TRY(ReadU64(field)));
}

Result<bool> Reader::ReadBool(std::string_view field) {
  if (!rest_.empty() && static_cast<std::uint8_t>(rest_[0]) > 1) {
    return Invalid(field, "boolean must be 0 or 1, got " +
                              std::to_string(static_cast<std::uint8_t>(rest_[0])));
  }
  return AGVISOR_TRY(ReadU8(field)) == 1;
}

Result<std::string_view> Reader::ReadStrView(std::string_view field) {
  std::string_view saved = rest_;
  std::uint32_t n = AGVISOR_TRY(ReadU32(field));
  if (rest_.size() < n) {
    rest_ = saved;
    return Invalid(field, "truncated: string of " + std::to_string(n) + " bytes, " +
                              std::to_string(rest_.size() - 4) + " left");
  }
  return AGVISOR_TRY(Take(field, n));
}

Result<std::string> Reader::ReadStr(std::string_view field) {
  return std::string(AGVISOR_TRY(ReadStrView(field)));
}

Result<std::uint32_t> Reader::ReadCount(std::string_view field, std::size_t min_item_size) {
  std::string_view saved = rest_;
  std::uint32_t count = AGVISOR_TRY(ReadU32(field));
  // Divide rather than multiply: count * min_item_size could overflow on 32-bit size_t.
  if (count > rest_.size() / (min_item_size == 0 ? 1 : min_item_size)) {
    rest_ = saved;
    return Invalid(field, "count " + std::to_string(count) + " cannot fit in " +
                              std::to_string(saved.size() - 4) + " bytes");
  }
  return count;
}

std::string_view Reader::ReadRest() {
  std::string_view all = rest_;
  rest_ = {};
  return all;
}

Result<void> Reader::ExpectEnd() const {
  if (!rest_.empty()) {
    std::string m;
    m.append(message_).append(": ").append(std::to_string(rest_.size())).append(" trailing bytes");
    return Error::InvalidArgument(std::move(m));
  }
  return Ok();
}

}  // namespace agvisor::proto
