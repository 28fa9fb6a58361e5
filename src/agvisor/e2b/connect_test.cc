#include "agvisor/e2b/connect.h"

#include <gtest/gtest.h>

#include <random>

namespace agvisor::e2b::connect {
namespace {

std::string Header(std::uint8_t flags, std::uint32_t n) {
  std::string h(1, static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8) h.push_back(static_cast<char>((n >> shift) & 0xff));
  return h;
}

TEST(ConnectTest, CodesHaveConnectNamesAndStatuses) {
  EXPECT_EQ(CodeName(Code::kNotFound), "not_found");
  EXPECT_EQ(CodeName(Code::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_EQ(HttpStatusFor(Code::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(Code::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(Code::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(Code::kCanceled), 499);
  EXPECT_EQ(HttpStatusFor(Code::kResourceExhausted), 429);
}

TEST(ConnectTest, AgvisorErrorsMapToTheCodesTheSdkReads) {
  EXPECT_EQ(FromError(Error::NotFound("x")).code, Code::kNotFound);
  EXPECT_EQ(FromError(Error::Conflict("x")).code, Code::kAlreadyExists);
  EXPECT_EQ(FromError(Error::SandboxDied("x")).code, Code::kUnavailable);
  EXPECT_EQ(FromError(Error::Timeout("x")).code, Code::kDeadlineExceeded);
  EXPECT_EQ(FromError(Error::Unsupported("x")).code, Code::kUnimplemented);
  EXPECT_EQ(FromError(Error::InvalidArgument("bad")).message, "bad");
}

TEST(ConnectTest, ErrorBodyIsEscapedJson) {
  EXPECT_EQ(ErrorBody({Code::kNotFound, "no \"x\"\n"}),
            R"({"code":"not_found","message":"no \"x\"\n"})");
}

TEST(ConnectTest, RequestHeadersAreChecked) {
  EXPECT_TRUE(CheckRequestHeaders(CallKind::kUnary, "application/json", "", "1").ok());
  EXPECT_TRUE(
      CheckRequestHeaders(CallKind::kUnary, "Application/JSON; charset=utf-8", "", "").ok());
  EXPECT_TRUE(
      CheckRequestHeaders(CallKind::kServerStream, "application/connect+json", "identity", "1")
          .ok());
  auto wrong = CheckRequestHeaders(CallKind::kServerStream, "application/json", "", "1");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message().find("application/connect+json"), std::string::npos);
  EXPECT_FALSE(CheckRequestHeaders(CallKind::kUnary, "application/proto", "", "").ok());
  EXPECT_EQ(CheckRequestHeaders(CallKind::kUnary, "application/json", "gzip", "").error().code(),
            ErrorCode::kUnsupported);
  EXPECT_FALSE(CheckRequestHeaders(CallKind::kUnary, "application/json", "", "2").ok());
}

TEST(ConnectTest, TimeoutAndKeepaliveHeaders) {
  EXPECT_FALSE(ParseTimeoutHeader("")->has_value());
  EXPECT_EQ(**ParseTimeoutHeader("60000"), std::chrono::milliseconds(60000));
  EXPECT_FALSE(ParseTimeoutHeader("12345678901").ok());
  EXPECT_FALSE(ParseTimeoutHeader("-1").ok());
  EXPECT_FALSE(ParseTimeoutHeader("1e3").ok());
  EXPECT_EQ(**ParseKeepaliveHeader("50"), std::chrono::seconds(50));
  EXPECT_EQ(**ParseKeepaliveHeader("0"), kMinKeepalive);
  EXPECT_EQ(**ParseKeepaliveHeader("9999999999"), kMaxKeepalive);
  EXPECT_FALSE(ParseKeepaliveHeader("x").ok());
}

TEST(ConnectTest, EnvelopesAreFlagLengthJson) {
  EXPECT_EQ(Envelope("{}"), Header(0, 2) + "{}");
  EXPECT_EQ(EndStream(std::nullopt), Header(kFlagEndStream, 2) + "{}");
  std::string end = EndStream(RpcError{Code::kNotFound, "gone"});
  EXPECT_EQ(end.substr(5), R"({"error":{"code":"not_found","message":"gone"}})");
  EXPECT_EQ(end.substr(0, 5), Header(kFlagEndStream, end.size() - 5));
}

TEST(ConnectTest, SingleEnvelopeTakesExactlyOneMessage) {
  auto ok = SingleEnvelope(Envelope(R"({"a":1})"), 100);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, R"({"a":1})");
  EXPECT_TRUE(SingleEnvelope(Envelope(""), 100).ok());
}

// Hostile request bodies: each refused with its own reason, none read past the buffer.
TEST(ConnectTest, SingleEnvelopeRefusesForgedBodies) {
  EXPECT_EQ(SingleEnvelope("", 100).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(SingleEnvelope(std::string("\0\0\0", 3), 100).error().code(),
            ErrorCode::kInvalidArgument);
  // A length larger than the body.
  EXPECT_EQ(SingleEnvelope(Header(0, 10) + "{}", 100).error().code(), ErrorCode::kInvalidArgument);
  // Trailing bytes (a second envelope).
  EXPECT_EQ(SingleEnvelope(Envelope("{}") + Envelope("{}"), 100).error().code(),
            ErrorCode::kInvalidArgument);
  // A huge declared length: refused by the bound before anything else.
  auto huge = SingleEnvelope(Header(0, 0xffffffffu) + "{}", 1 << 20);
  EXPECT_EQ(huge.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(huge.error().message().find("4294967295"), std::string::npos);
  EXPECT_EQ(SingleEnvelope(Header(kFlagCompressed, 2) + "{}", 100).error().code(),
            ErrorCode::kUnsupported);
  EXPECT_EQ(SingleEnvelope(Header(kFlagEndStream, 2) + "{}", 100).error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(SingleEnvelope(Header(0x80, 2) + "{}", 100).error().code(),
            ErrorCode::kInvalidArgument);
}

// The reader yields the same messages whatever the split points of its input.
TEST(ConnectTest, ReaderAtEverySplitPoint) {
  std::string wire = Envelope(R"({"x":1})") + Envelope("") + EndStream(std::nullopt);
  for (std::size_t a = 0; a <= wire.size(); ++a) {
    for (std::size_t b = a; b <= wire.size(); ++b) {
      EnvelopeReader r(64);
      std::vector<EnvelopeReader::Message> got;
      for (auto piece : {wire.substr(0, a), wire.substr(a, b - a), wire.substr(b)}) {
        r.Feed(piece);
        while (true) {
          auto m = r.Next();
          ASSERT_TRUE(m.ok());
          if (!*m) break;
          got.push_back(std::move(**m));
        }
      }
      ASSERT_EQ(got.size(), 3u) << a << " " << b;
      EXPECT_EQ(got[0].data, R"({"x":1})");
      EXPECT_EQ(got[1].data, "");
      EXPECT_EQ(got[2].flags, kFlagEndStream);
      EXPECT_EQ(r.pending(), 0u);
    }
  }
}

TEST(ConnectTest, ReaderRefusesAHugeLengthBeforeItsBytes) {
  EnvelopeReader r(1024);
  r.Feed(Header(0, 1u << 31));
  auto m = r.Next();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ErrorCode::kResourceExhausted);
  r.Feed(Envelope("{}"));
  EXPECT_FALSE(r.Next().ok());  // stays failed
}

// Random bytes never crash the decoders and never yield a message over the bound.
TEST(ConnectTest, RandomBytesAreRefusedOrBounded) {
  std::mt19937 rng(38);
  for (int round = 0; round < 20000; ++round) {
    std::string bytes(rng() % 24, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    if (round % 3 == 0 && bytes.size() >= 5) bytes[1] = bytes[2] = bytes[3] = 0;
    auto one = SingleEnvelope(bytes, 16);
    if (one.ok()) {
      EXPECT_LE(one->size(), 16u);
    }
    EnvelopeReader r(16);
    r.Feed(bytes);
    for (int i = 0; i < 8; ++i) {
      auto m = r.Next();
      if (!m.ok() || !*m) break;
      EXPECT_LE((*m)->data.size(), 16u);
    }
  }
}

}  // namespace
}  // namespace agvisor::e2b::connect
