// Desktop tokens: round trips, every kind of bad token, and a token the seed's make_token minted.
#include "agvisor/desktop/token.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace agvisor::desktop {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::system_clock;

TokenKey TestKey(char first = 0) {
  TokenKey k;
  for (int i = 0; i < 32; ++i) k.bytes += static_cast<char>(first + i);
  return k;
}

system_clock::time_point AtMs(std::int64_t ms) {
  return system_clock::time_point(milliseconds(ms));
}

void ExpectRejected(const Result<TokenPayload>& r, const std::string& what) {
  ASSERT_FALSE(r.ok()) << what << " verified";
  EXPECT_EQ(r.error().code(), ErrorCode::kPermissionDenied) << what;
  EXPECT_EQ(r.error().message(), kTokenRejected) << what;
}

VncTarget Target() {
  return {.container = "agvisor-desk1",
          .docker_host = "ssh://me@vm",
          .port = 5901,
          .password = "s3cret\"pw"};
}

TEST(TokenTest, VncRoundTrip) {
  const auto now = AtMs(1'700'000'000'000);
  auto token = MintVncToken(TestKey(), Target(), seconds(60), now);
  ASSERT_TRUE(token.ok()) << token.error().ToString();
  auto p = VerifyToken(TestKey(), *token, now + seconds(59));
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->type, "vnc");
  EXPECT_EQ(p->expiration_ms, 1'700'000'060'000);
  EXPECT_EQ(p->vnc.container, "agvisor-desk1");
  EXPECT_EQ(p->vnc.docker_host, "ssh://me@vm");
  EXPECT_EQ(p->vnc.port, 5901);
  EXPECT_EQ(p->vnc.password, "s3cret\"pw");
  // The password is not readable in the token: it is encrypted.
  auto outer = Base64Decode(*token);
  ASSERT_TRUE(outer.ok());
  EXPECT_THAT(*outer, ::testing::Not(::testing::HasSubstr("s3cret")));
  EXPECT_THAT(*outer, ::testing::Not(::testing::HasSubstr("desk1")));
}

TEST(TokenTest, TwoMintsDiffer) {
  auto a = MintVncToken(TestKey(), Target(), seconds(60));
  auto b = MintVncToken(TestKey(), Target(), seconds(60));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);  // a fresh IV each time
}

TEST(TokenTest, RdpPayloadVerifies) {
  TokenPayload p;
  p.type = "rdp";
  p.settings_json = R"({"hostname":"127.0.0.1","port":"3389","ignore-cert":true})";
  p.expiration_ms = 2'000'000'000'000;
  auto token = MintToken(TestKey(), p);
  ASSERT_TRUE(token.ok());
  auto back = VerifyToken(TestKey(), *token, AtMs(1'999'999'999'999));
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(back->type, "rdp");
  EXPECT_EQ(boost::json::parse(back->settings_json), boost::json::parse(p.settings_json));
}

TEST(TokenTest, ExpiredIsRejected) {
  const auto now = AtMs(1'700'000'000'000);
  auto token = MintVncToken(TestKey(), Target(), seconds(60), now);
  ASSERT_TRUE(token.ok());
  ExpectRejected(VerifyToken(TestKey(), *token, now + seconds(60)), "at expiry");
  ExpectRejected(VerifyToken(TestKey(), *token, now + seconds(3600)), "an hour later");
}

TEST(TokenTest, WrongKeyIsRejected) {
  const auto now = AtMs(1'700'000'000'000);
  auto token = MintVncToken(TestKey(), Target(), seconds(60), now);
  ASSERT_TRUE(token.ok());
  ExpectRejected(VerifyToken(TestKey(1), *token, now), "other key");
}

TEST(TokenTest, EveryTruncationIsRejected) {
  const auto now = AtMs(1'700'000'000'000);
  auto token = MintVncToken(TestKey(), Target(), seconds(60), now);
  ASSERT_TRUE(token.ok());
  for (std::size_t n = 0; n < token->size(); ++n) {
    ExpectRejected(VerifyToken(TestKey(), token->substr(0, n), now), "prefix " + std::to_string(n));
  }
}

// Flips one bit in each byte of iv, ciphertext and mac (re-encoded validly, so only the MAC
// can catch it), and in each character of the token text.
TEST(TokenTest, EveryTamperIsRejected) {
  const auto now = AtMs(1'700'000'000'000);
  auto token = MintVncToken(TestKey(), Target(), seconds(60), now);
  ASSERT_TRUE(token.ok());
  auto env = boost::json::parse(*Base64Decode(*token)).as_object();
  for (const char* field : {"iv", "value", "mac"}) {
    const std::string raw = *Base64Decode(env[field].as_string());
    for (std::size_t i = 0; i < raw.size(); ++i) {
      std::string bad = raw;
      bad[i] = static_cast<char>(bad[i] ^ 0x01);
      auto e2 = env;
      e2[field] = Base64Encode(bad);
      ExpectRejected(VerifyToken(TestKey(), Base64Encode(boost::json::serialize(e2)), now),
                     std::string(field) + " byte " + std::to_string(i));
    }
  }
  for (std::size_t i = 0; i < token->size(); ++i) {
    std::string bad = *token;
    bad[i] = bad[i] == 'A' ? 'B' : 'A';
    auto r = VerifyToken(TestKey(), bad, now);
    // A change in the last character may only touch padding bits that decode the same.
    if (r.ok()) {
      EXPECT_GE(i, token->size() - 3) << "char " << i;
      continue;
    }
    ExpectRejected(r, "char " + std::to_string(i));
  }
}

TEST(TokenTest, GarbageIsRejected) {
  const auto now = AtMs(1'700'000'000'000);
  for (const std::string& bad : std::vector<std::string>{
           "", "x", "!!!!", "e30=" /* {} */, "bnVsbA==" /* null */, "eyJpdiI6MX0=" /* {"iv":1} */,
           std::string(kMaxTokenBytes + 4, 'A')}) {
    ExpectRejected(VerifyToken(TestKey(), bad, now), "garbage '" + bad.substr(0, 20) + "'");
  }
}

TEST(TokenTest, UrlSafeAlphabetVerifies) {
  const auto now = AtMs(1'700'000'000'000);
  auto token = MintVncToken(TestKey(), Target(), seconds(60), now);
  ASSERT_TRUE(token.ok());
  std::string url = *token;
  for (char& c : url) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!url.empty() && url.back() == '=') url.pop_back();
  EXPECT_TRUE(VerifyToken(TestKey(), url, now).ok());
}

TEST(TokenTest, KeyOfWrongSizeIsACallerError) {
  TokenKey short_key{"abc"};
  EXPECT_EQ(VerifyToken(short_key, "x").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(MintVncToken(short_key, Target(), seconds(1)).error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(MintVncToken(TestKey(), Target(), seconds(0)).error().code(),
            ErrorCode::kInvalidArgument);
}

TEST(TokenTest, ParseTokenKey) {
  auto k = ParseTokenKey("  000102030405060708090a0B0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
  ASSERT_TRUE(k.ok()) << k.error().ToString();
  EXPECT_EQ(k->bytes, TestKey().bytes);
  auto short_key = ParseTokenKey("abcd");
  ASSERT_FALSE(short_key.ok());
  EXPECT_THAT(short_key.error().message(), ::testing::HasSubstr("64 hex digits"));
  auto not_hex = ParseTokenKey(std::string(63, '0') + "g");
  ASSERT_FALSE(not_hex.ok());
  EXPECT_THAT(not_hex.error().message(), ::testing::HasSubstr("position 63"));
  EXPECT_EQ(ReadTokenKeyFile("/nonexistent/agvisor.key").error().code(), ErrorCode::kNotFound);
}

TEST(TokenTest, Base64RoundTrip) {
  std::string bytes;
  for (int n = 0; n < 40; ++n) {
    auto back = Base64Decode(Base64Encode(bytes));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, bytes);
    bytes += static_cast<char>(n * 37 + 200);
  }
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_FALSE(Base64Decode("Zm9vY").ok());
  EXPECT_FALSE(Base64Decode("Zm9v*mFy").ok());
}

// Minted by the seed's make_token(bytes(range(32)), 3390, "pw-seed-123", ttl=300) at unix ms
// 1796018679566 (data captured once; the live check is token_seed_test).
constexpr std::string_view kSeedToken =
    "eyJpdiI6ICIvODlvUDdQVXdJaUg1Rm9HdkdLM3hBPT0iLCAidmFsdWUiOiAicE5NYkorQmE2V3BjejZMdU1kSlY3SHY4"
    "V1JXT2JJR2l4QzBuU0JhdVVoMFZKYkVFWUVtU2VqUUVNa0N0RXB0L1dndWwzZkMrSjRjaHdSMmxQSldjWlpndXB1Q284"
    "QlkrVXMyQTZDZFFXbmJaSVFoR3VmdjN4YXVUZzBmRndPdUlLYUhMTmFkSnhrcHBzL1ZxU0YySWo0N0xXdEJUUEFSd05n"
    "TmxHOVFvS01TUml4WXBWTWh3QkJ2ZHM4djBHd2pMYjY5MTMxdXVZZE5OWXpzbmJCZUdnbThHc2h3NmtOZlkwWDFiQS80"
    "YnIrdCtmbGZEcERpdCtWenpVTnRwUjN1WjZjQzVRNWp1ZG9Ibm96SjBFd1hLSk5WWDlKblIyNTFXZlZFMkM0V2FVMjcy"
    "SnZWc0lweW5DN285S3Uxa1FMWWgiLCAibWFjIjogImcvcnJuZDZyQXBWc2NteHpTLzF5U0cxaHJZZVN1Z0Rlck5vUmhC"
    "YzhTbUU9In0=";

TEST(TokenTest, SeedTokenVerifies) {
  const std::int64_t minted = 1796018679566;
  auto p = VerifyToken(TestKey(), kSeedToken, AtMs(minted + 1000));
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->type, "rdp");
  EXPECT_NEAR(static_cast<double>(p->expiration_ms), static_cast<double>(minted + 300'000), 2000);
  auto settings = boost::json::parse(p->settings_json).as_object();
  EXPECT_EQ(settings["port"], "3390");
  EXPECT_EQ(settings["password"], "pw-seed-123");
  ExpectRejected(VerifyToken(TestKey(), kSeedToken, AtMs(minted + 302'000)), "seed, expired");
  ExpectRejected(VerifyToken(TestKey(5), kSeedToken, AtMs(minted)), "seed, other key");
}

}  // namespace
}  // namespace agvisor::desktop
