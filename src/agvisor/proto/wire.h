// Big-endian primitives of the agent channel protocol: Writer appends fields to a std::string,
// Reader takes them off a byte view with bounds checks.
//
// Used by proto/messages.cc to build every payload of docs/protocol.md, and by anyone who needs a
// field layout the message structs do not cover (tests, fakes). Pure, no allocation in Reader
// except for error messages and ReadStr's copy. Strings are `u32 length + bytes`; lists are
// `u32 count + items`, where ReadCount refuses a count the remaining bytes cannot hold, so a
// hostile count never makes a decoder reserve memory it will not fill.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::proto {

// Appends big-endian fields to a caller-owned string (which must outlive the Writer).
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void AppendU8(std::uint8_t v);
  void AppendU16(std::uint16_t v);
  void AppendU32(std::uint32_t v);
  void AppendU64(std::uint64_t v);
  void AppendI32(std::int32_t v);  // two's complement, as the u32 of the same bits
  void AppendI64(std::int64_t v);
  void AppendBool(bool v) { AppendU8(v ? 1 : 0); }
  // `str`: u32 length + bytes. Precondition: s.size() <= UINT32_MAX (a frame holds 1 MiB anyway).
  void AppendStr(std::string_view s);
  // Raw bytes, no length prefix (the rest of a DATA / STDIN / OUTPUT payload).
  void AppendBytes(std::string_view s) { out_.append(s); }

 private:
  std::string& out_;
};

// Reads big-endian fields off a view. Every getter fails with kInvalidArgument naming the
// message and the field ("HELLO.initial_window: truncated: need 4 bytes, 1 left") and leaves the
// position unchanged on failure. `message` is used only in error texts; it must outlive the
// Reader (pass a literal).
class Reader {
 public:
  Reader(std::string_view bytes, std::string_view message) : rest_(bytes), message_(message) {}

  Result<std::uint8_t> ReadU8(std::string_view field);
  Result<std::uint16_t> ReadU16(std::string_view field);
  Result<std::uint32_t> ReadU32(std::string_view field);
  Result<std::uint64_t> ReadU64(std::string_view field);
  Result<std::int32_t> ReadI32(std::string_view field);
  Result<std::int64_t> ReadI64(std::string_view field);
  // A u8 that must be 0 or 1 (anything else is kInvalidArgument: encodings are canonical).
  Result<bool> ReadBool(std::string_view field);
  // `str`: the returned view points into the Reader's input.
  Result<std::string_view> ReadStrView(std::string_view field);
  Result<std::string> ReadStr(std::string_view field);
  // A list count; kInvalidArgument if count * min_item_size exceeds the bytes left (so callers
  // may reserve(count) safely). min_item_size must be >= 1.
  Result<std::uint32_t> ReadCount(std::string_view field, std::size_t min_item_size);
  // All remaining bytes (possibly empty); the Reader is then at its end.
  std::string_view ReadRest();

  bool AtEnd() const { return rest_.empty(); }
  std::size_t remaining() const { return rest_.size(); }
  // kInvalidArgument "<message>: N trailing bytes" unless AtEnd().
  Result<void> ExpectEnd() const;

  // kInvalidArgument "<message>.<field>: <what>" - for checks on decoded values.
  Error Invalid(std::string_view field, std::string_view what) const;

 private:
  Result<std::string_view> Take(std::string_view field, std::size_t n);

  std::string_view rest_;
  std::string_view message_;
};

}  // namespace agvisor::proto
