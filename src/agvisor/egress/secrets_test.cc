#include "agvisor/egress/secrets.h"

#include <gtest/gtest.h>

namespace agvisor::egress {
namespace {

BrokeredSecret Good() {
  return {.name = "GITHUB_TOKEN",
          .value = "ghp_realvalue",
          .placeholder = "agvsec_0123456789abcdef0123456789abcdef",
          .hosts = {"API.GitHub.com.", "github.com"},
          .header = ""};
}

TEST(SecretsTest, PlaceholderShape) {
  auto a = MakePlaceholder();
  auto b = MakePlaceholder();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  BrokeredSecret s = Good();
  s.placeholder = *a;
  EXPECT_TRUE(ValidateSecret(s).ok());
}

TEST(SecretsTest, NormalisesHosts) {
  BrokeredSecret s = Good();
  ASSERT_TRUE(ValidateSecret(s).ok());
  EXPECT_EQ(s.hosts, (std::vector<std::string>{"api.github.com", "github.com"}));
  EXPECT_TRUE(IsBoundHost(std::span(&s, 1), "github.com"));
  EXPECT_FALSE(IsBoundHost(std::span(&s, 1), "gist.github.com"));
}

TEST(SecretsTest, RefusesWithClearErrorsAndNeverTheValue) {
  struct Case {
    std::function<void(BrokeredSecret&)> change;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](BrokeredSecret& s) { s.name = "1TOKEN"; }, "secret name"},
      {[](BrokeredSecret& s) { s.name = "A-B"; }, "secret name"},
      {[](BrokeredSecret& s) { s.value = ""; }, "the value must be"},
      {[](BrokeredSecret& s) { s.value = "ghp_realvalue\r\nX-Injected: 1"; }, "control character"},
      {[](BrokeredSecret& s) { s.value = std::string(kMaxSecretValueBytes + 1, 'v'); },
       "the value must be"},
      {[](BrokeredSecret& s) { s.placeholder = "agvsec_short"; }, "placeholder"},
      {[](BrokeredSecret& s) { s.placeholder = "agvsec_0123456789ABCDEF0123456789abcdef"; },
       "placeholder"},
      {[](BrokeredSecret& s) { s.hosts = {}; }, "bind it to"},
      {[](BrokeredSecret& s) { s.hosts = {"*.github.com"}; }, "not wildcards"},
      {[](BrokeredSecret& s) { s.hosts = {"192.0.2.1"}; }, "IP address"},
      {[](BrokeredSecret& s) { s.hosts = {"github.com:443"}; }, "github.com:443"},
      {[](BrokeredSecret& s) { s.header = "X Api Key"; }, "not an HTTP header name"},
      {[](BrokeredSecret& s) { s.header = "Host"; }, "frames or routes"},
      {[](BrokeredSecret& s) { s.header = "transfer-encoding"; }, "frames or routes"},
  };
  for (const Case& c : cases) {
    BrokeredSecret s = Good();
    c.change(s);
    auto r = ValidateSecret(s);
    ASSERT_FALSE(r.ok()) << c.expected;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find(c.expected), std::string::npos) << r.error().message();
    EXPECT_EQ(r.error().message().find("ghp_realvalue"), std::string::npos) << r.error().message();
  }
}

TEST(SecretsTest, NamesAndPlaceholdersAreUnique) {
  std::vector<BrokeredSecret> two = {Good(), Good()};
  two[1].placeholder = "agvsec_ffffffffffffffffffffffffffffffff";
  auto r = ValidateSecrets(two);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("given twice"), std::string::npos);
  two[1].name = "OTHER";
  two[1].placeholder = two[0].placeholder;
  r = ValidateSecrets(two);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("placeholder"), std::string::npos);
  two[1].placeholder = "agvsec_ffffffffffffffffffffffffffffffff";
  EXPECT_TRUE(ValidateSecrets(two).ok());
}

}  // namespace
}  // namespace agvisor::egress
