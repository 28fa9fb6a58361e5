// Tokens minted live by the seed's own make_token (its Python package) verify here. The seed's
// import root comes from $AGVISOR_SEED_PATH (the directory holding its `agvisor` package, as for
// bench/); python3 and python3-cryptography run it. Without the variable the test is skipped
// with a message (token_test checks a captured seed token either way).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdlib>

#include "agvisor/base/subprocess.h"
#include "agvisor/desktop/token.h"

namespace agvisor::desktop {
namespace {

constexpr std::string_view kKeyHex =
    "5f0e7c1a9b2d4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5";

// The seed's make_token(key, port, password, ttl) run in python3; returns the token.
std::string SeedMakeToken(const std::string& seed, int port, const std::string& password, int ttl) {
  const std::string script =
      "import sys; from agvisor.desktop import make_token; "
      "print(make_token(bytes.fromhex(sys.argv[1]), int(sys.argv[2]), sys.argv[3], "
      "int(sys.argv[4])))";
  auto out = RunCommand({"env", "PYTHONPATH=" + seed, "python3", "-c", script, std::string(kKeyHex),
                         std::to_string(port), password, std::to_string(ttl)});
  EXPECT_TRUE(out.ok()) << out.error().ToString();
  if (!out.ok()) return "";
  EXPECT_TRUE(out->status.success()) << out->err;
  std::string t = out->out;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t;
}

TEST(TokenSeedTest, SeedMintedTokensVerify) {
  const char* seed = std::getenv("AGVISOR_SEED_PATH");
  if (!seed || !*seed) {
    FAIL() << "AGVISOR_SEED_PATH is not set: point it at the seed's import root to check "
              "tokens its make_token mints (CTest label `seed`, not part of scripts/test; "
              "token_test.cc checks a captured seed token on every run)";
  }
  auto key = ParseTokenKey(kKeyHex);
  ASSERT_TRUE(key.ok());
  for (const auto& [port, password, ttl] : std::vector<std::tuple<int, std::string, int>>{
           {3389, "p", 60}, {49152, "päss wörd \"'\\", 300}, {1, std::string(200, 'x'), 5}}) {
    const auto before = std::chrono::system_clock::now();
    std::string token = SeedMakeToken(seed, port, password, ttl);
    ASSERT_FALSE(token.empty());
    auto p = VerifyToken(*key, token);
    ASSERT_TRUE(p.ok()) << p.error().ToString() << " token " << token;
    EXPECT_EQ(p->type, "rdp");
    auto settings = boost::json::parse(p->settings_json).as_object();
    EXPECT_EQ(settings["port"], boost::json::value(std::to_string(port)));
    EXPECT_EQ(settings["password"], boost::json::value(password));
    const auto exp =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(p->expiration_ms));
    EXPECT_GE(exp, before + std::chrono::seconds(ttl) - std::chrono::seconds(1));
    // The same token, after its ttl, and under another key: the one generic error.
    auto late = VerifyToken(*key, token, exp + std::chrono::milliseconds(1));
    ASSERT_FALSE(late.ok());
    EXPECT_EQ(late.error().message(), kTokenRejected);
    TokenKey other = *key;
    other.bytes[0] = static_cast<char>(other.bytes[0] ^ 1);
    auto wrong = VerifyToken(other, token);
    ASSERT_FALSE(wrong.ok());
    EXPECT_EQ(wrong.error().message(), kTokenRejected);
  }
}

}  // namespace
}  // namespace agvisor::desktop
