// The RFB handshake state machines against scripted peers, fed whole and byte by byte (the DES
// known answers are in vnc_test.cc).
#include "agvisor/desktop/rfb.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "agvisor/desktop/vnc.h"

namespace agvisor::vnc {
namespace {

using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s += static_cast<char>(b);
  return s;
}

std::string U32(std::uint32_t v) {
  return Bytes({static_cast<int>(v >> 24), static_cast<int>((v >> 16) & 255),
                static_cast<int>((v >> 8) & 255), static_cast<int>(v & 255)});
}

std::array<std::uint8_t, 16> Challenge(int start, int step) {
  std::array<std::uint8_t, 16> c;
  for (int i = 0; i < 16; ++i) c[i] = static_cast<std::uint8_t>(start + step * i);
  return c;
}

// Feeds `input` to `feed` in pieces of `piece` bytes; returns everything sent, and done.
template <typename Machine>
std::pair<std::string, bool> FeedInPieces(Machine& m, const std::string& input, std::size_t piece,
                                          Error* error = nullptr) {
  std::string sent;
  bool done = false;
  for (std::size_t i = 0; i < input.size() && !done; i += piece) {
    auto step = m.Feed(input.substr(i, piece));
    if (!step.ok()) {
      if (error) *error = step.error();
      return {sent, false};
    }
    sent += step->send;
    done = step->done;
  }
  return {sent, done};
}

TEST(RfbTest, ClientDoesVncAuthOn38AtEverySplit) {
  const auto challenge = Challenge(7, 3);
  const auto response = VncAuthResponse("pw", challenge);
  const std::string server = "RFB 003.008\n" + Bytes({2, 19, 2}) +
                             std::string(challenge.begin(), challenge.end()) + U32(0);
  const std::string expected =
      "RFB 003.008\n" + Bytes({2}) + std::string(response.begin(), response.end());
  for (std::size_t piece : {1, 2, 3, 5, 12, 13, 100}) {
    RfbClientHandshake c("pw");
    auto [sent, done] = FeedInPieces(c, server, piece);
    EXPECT_TRUE(done) << piece;
    EXPECT_EQ(sent, expected) << piece;
    EXPECT_EQ(c.security_type(), 2);
    EXPECT_EQ(c.leftover(), "");
  }
}

TEST(RfbTest, ClientRefusedPasswordCarriesTheReason) {
  RfbClientHandshake c("wrong");
  const std::string server = "RFB 003.008\n" + Bytes({1, 2}) + std::string(16, 'c') + U32(1) +
                             U32(19) + "Authentication fail";
  Error e = Error::Internal("");
  auto [sent, done] = FeedInPieces(c, server, 1, &e);
  EXPECT_FALSE(done);
  EXPECT_EQ(e.code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(e.message(), HasSubstr("Authentication fail"));
}

TEST(RfbTest, ClientVersions33And37) {
  const auto challenge = Challenge(1, 1);
  const auto response = VncAuthResponse("x", challenge);
  {
    RfbClientHandshake c("x");
    auto [sent, done] = FeedInPieces(
        c, "RFB 003.003\n" + U32(2) + std::string(challenge.begin(), challenge.end()) + U32(0), 1);
    EXPECT_TRUE(done);
    EXPECT_EQ(sent, "RFB 003.003\n" + std::string(response.begin(), response.end()));
  }
  {
    RfbClientHandshake c("x");
    auto [sent, done] = FeedInPieces(c, "RFB 003.007\n" + Bytes({1, 1}), 1);
    EXPECT_TRUE(done);  // None: no SecurityResult in 3.7
    EXPECT_EQ(sent, "RFB 003.007\n" + Bytes({1}));
  }
  {
    RfbClientHandshake c("x");
    Error e = Error::Internal("");
    FeedInPieces(c, "RFB 003.007\n" + Bytes({1, 2}) + std::string(16, 'c') + U32(1), 4, &e);
    EXPECT_EQ(e.code(), ErrorCode::kPermissionDenied);
  }
}

TEST(RfbTest, ClientErrors) {
  {
    RfbClientHandshake c("x");
    Error e = Error::Internal("");
    FeedInPieces(c, "HTTP/1.1 400 Bad Request\r\n", 100, &e);
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_THAT(e.message(), HasSubstr("HTTP/1.1 400"));
  }
  {
    RfbClientHandshake c("x");
    Error e = Error::Internal("");
    FeedInPieces(c, "RFB 003.008\n" + Bytes({2, 18, 19}), 100, &e);
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_THAT(e.message(), HasSubstr("offered 18, 19"));
  }
  {
    RfbClientHandshake c("x");
    Error e = Error::Internal("");
    FeedInPieces(c, "RFB 003.008\n" + Bytes({0}) + U32(8) + "too many", 1, &e);
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_THAT(e.message(), HasSubstr("too many"));
  }
}

TEST(RfbTest, ServerOffersNoneAndKeepsClientInit) {
  for (std::size_t piece : {1, 2, 12, 13, 14, 100}) {
    RfbServerHandshake s;
    // The viewer's version, its choice, and ClientInit (shared = 1) in one stream.
    auto [sent, done] = FeedInPieces(s, "RFB 003.008\n" + Bytes({1, 1}), piece);
    EXPECT_TRUE(done) << piece;
    EXPECT_EQ(sent, Bytes({1, 1}) + U32(0)) << piece;
    // Bytes past the choice are kept whole or in part depending on the split.
    EXPECT_TRUE(s.leftover() == Bytes({1}) || s.leftover().empty()) << piece;
  }
  RfbServerHandshake s;
  auto step = s.Feed("RFB 003.008\n" + Bytes({1, 1, 9, 9}));
  ASSERT_TRUE(step.ok());
  EXPECT_TRUE(step->done);
  EXPECT_EQ(s.leftover(), Bytes({1, 9, 9}));
}

TEST(RfbTest, ServerOlderViewers) {
  {
    RfbServerHandshake s;
    auto [sent, done] = FeedInPieces(s, "RFB 003.007\n" + Bytes({1}), 1);
    EXPECT_TRUE(done);
    EXPECT_EQ(sent, Bytes({1, 1}));  // no SecurityResult after None in 3.7
  }
  {
    RfbServerHandshake s;
    auto step = s.Feed("RFB 003.003\n");
    ASSERT_TRUE(step.ok());
    EXPECT_TRUE(step->done);
    EXPECT_EQ(step->send, U32(1));
  }
}

TEST(RfbTest, ServerErrors) {
  {
    RfbServerHandshake s;
    auto step = s.Feed("GET / HTTP/1.1\r\n");
    ASSERT_FALSE(step.ok());
    EXPECT_EQ(step.error().code(), ErrorCode::kInvalidArgument);
  }
  {
    RfbServerHandshake s;
    auto step = s.Feed("RFB 003.008\n" + Bytes({2}));
    ASSERT_FALSE(step.ok());
    EXPECT_THAT(step.error().message(), HasSubstr("security type 2"));
  }
}

}  // namespace
}  // namespace agvisor::vnc
