#include "agvisor/proto/wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace agvisor::proto {
namespace {

using namespace std::string_literals;

TEST(WriterTest, BigEndianAndTwosComplement) {
  std::string out;
  Writer w(out);
  w.AppendU8(0xAB);
  w.AppendU16(0x0102);
  w.AppendU32(0x03040506);
  w.AppendU64(0x0708090A0B0C0D0EULL);
  w.AppendI32(-1);
  w.AppendI64(std::numeric_limits<std::int64_t>::min());
  w.AppendBool(true);
  w.AppendStr("hi");
  w.AppendBytes("raw");
  EXPECT_EQ(out,
            "\xAB\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0A\x0B\x0C\x0D\x0E"
            "\xFF\xFF\xFF\xFF\x80\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02hiraw"s);
}

TEST(ReaderTest, ReadsWhatWriterWrote) {
  std::string out;
  Writer w(out);
  w.AppendU8(7);
  w.AppendU16(65535);
  w.AppendU32(0xDEADBEEF);
  w.AppendU64(std::numeric_limits<std::uint64_t>::max());
  w.AppendI32(std::numeric_limits<std::int32_t>::min());
  w.AppendI64(-42);
  w.AppendBool(false);
  w.AppendStr("");
  w.AppendStr("a\0b"s);
  w.AppendBytes("tail");

  Reader r(out, "T");
  EXPECT_EQ(*r.ReadU8("a"), 7);
  EXPECT_EQ(*r.ReadU16("b"), 65535);
  EXPECT_EQ(*r.ReadU32("c"), 0xDEADBEEF);
  EXPECT_EQ(*r.ReadU64("d"), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(*r.ReadI32("e"), std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(*r.ReadI64("f"), -42);
  EXPECT_FALSE(*r.ReadBool("g"));
  EXPECT_EQ(*r.ReadStr("h"), "");
  EXPECT_EQ(*r.ReadStrView("i"), "a\0b"s);
  EXPECT_FALSE(r.AtEnd());
  EXPECT_FALSE(r.ExpectEnd().ok());
  EXPECT_EQ(r.ReadRest(), "tail");
  EXPECT_TRUE(r.AtEnd());
  EXPECT_TRUE(r.ExpectEnd().ok());
  EXPECT_EQ(r.ReadRest(), "");
}

TEST(ReaderTest, TruncationFailsWithoutMovingAndNamesTheField) {
  std::string bytes = "\x00\x01\x02"s;
  Reader r(bytes, "HELLO");
  auto v = r.ReadU32("initial_window");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(v.error().message(), "HELLO.initial_window: truncated: need 4 bytes, 3 left");
  EXPECT_EQ(r.remaining(), 3u);
  EXPECT_EQ(*r.ReadU16("x"), 1);
}

TEST(ReaderTest, StringLongerThanInputFailsWithoutMoving) {
  std::string bytes =
      "\x00\x00\x00\x05"
      "abcd"s;
  Reader r(bytes, "M");
  auto s = r.ReadStrView("s");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "M.s: truncated: string of 5 bytes, 4 left");
  EXPECT_EQ(r.remaining(), 8u);

  std::string huge = "\xFF\xFF\xFF\xFF"s;
  Reader r2(huge, "M");
  EXPECT_FALSE(r2.ReadStr("s").ok());
}

TEST(ReaderTest, BoolMustBeZeroOrOne) {
  std::string bytes = "\x01\x02"s;
  Reader r(bytes, "M");
  EXPECT_TRUE(*r.ReadBool("a"));
  auto b = r.ReadBool("b");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message(), "M.b: boolean must be 0 or 1, got 2");
  EXPECT_EQ(r.remaining(), 1u);
  EXPECT_FALSE(Reader("", "M").ReadBool("c").ok());
}

TEST(ReaderTest, CountIsCappedByRemainingBytes) {
  std::string bytes =
      "\x00\x00\x00\x02"
      "12345678"s;
  EXPECT_EQ(*Reader(bytes, "M").ReadCount("n", 4), 2u);
  EXPECT_FALSE(Reader(bytes, "M").ReadCount("n", 5).ok());
  EXPECT_EQ(*Reader(bytes, "M").ReadCount("n", 0), 2u);  // treated as 1

  std::string hostile =
      "\xFF\xFF\xFF\xFF"
      "1234"s;
  Reader r(hostile, "M");
  auto n = r.ReadCount("n", 1);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().message(), "M.n: count 4294967295 cannot fit in 4 bytes");
  EXPECT_EQ(r.remaining(), 8u);
}

TEST(ReaderTest, ExpectEndCountsTrailingBytes) {
  Reader r("xy", "PING");
  auto end = r.ExpectEnd();
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.error().message(), "PING: 2 trailing bytes");
}

}  // namespace
}  // namespace agvisor::proto
