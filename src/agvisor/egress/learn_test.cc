#include "agvisor/egress/learn.h"

#include <gtest/gtest.h>

namespace agvisor::egress {
namespace {

LearnedDestinations Seen(std::vector<LearnedDestination> kept) { return {.kept = std::move(kept)}; }

TEST(LearnTest, SuggestsEachLearnedNameExactlyOnTopOfTheRules) {
  const EgressRules current{.allow_domains = {"pypi.org", "*.pythonhosted.org"},
                            .deny_domains = {"evil.example"},
                            .mode = "learn"};
  auto r = SuggestRules(current, Seen({{"files.pythonhosted.org", 443},  // allowed already
                                       {"github.com", 443},
                                       {"codeload.github.com", 443},
                                       {"github.com", 80},
                                       {"evil.example", 443}}));  // a deny rule: never suggested
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->allow_domains, (std::vector<std::string>{"*.pythonhosted.org", "codeload.github.com",
                                                        "github.com", "pypi.org"}));
  EXPECT_TRUE(r->ports.empty());  // 80 and 443: the default, unwritten
  EXPECT_EQ(r->deny_domains, (std::vector<std::string>{"evil.example"}));
  EXPECT_EQ(r->mode, "");  // to be enforced
  EXPECT_EQ(FormatEgressFlags(*r),
            "--allow-domain '*.pythonhosted.org' --allow-domain codeload.github.com "
            "--allow-domain github.com --allow-domain pypi.org --deny-domain evil.example");
  // What it suggests allows everything that was seen, enforcing.
  auto policy = EgressPolicy::Create(*r);
  ASSERT_TRUE(policy.ok());
  EXPECT_TRUE(policy->Decide({.host = "codeload.github.com", .port = 443}).allowed);
  EXPECT_FALSE(policy->Decide({.host = "api.github.com", .port = 443}).allowed);
}

TEST(LearnTest, APortOutsideThePolicyWritesThePortsOut) {
  // The default ports, written out or not, then one more: naming a port replaces the default,
  // so 80 and 443 are written with it.
  for (const std::vector<std::uint16_t>& ports :
       {std::vector<std::uint16_t>{}, std::vector<std::uint16_t>{443, 80}}) {
    auto r = SuggestRules(EgressRules{.allow_domains = {"a.example"}, .ports = ports},
                          Seen({{"a.example", 8443}, {"a.example", 443}}));
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r->ports, (std::vector<std::uint16_t>{80, 443, 8443}));
    EXPECT_EQ(r->allow_domains, std::vector<std::string>{"a.example"});
  }
  // Ports of the operator's own stay written, nothing added.
  auto kept = SuggestRules(EgressRules{.allow_domains = {"a.example"}, .ports = {443}},
                           Seen({{"b.example", 443}}));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->ports, std::vector<std::uint16_t>{443});
  EXPECT_EQ(FormatEgressFlags(*kept),
            "--allow-domain a.example --allow-domain b.example --allow-port 443");
}

TEST(LearnTest, AnAddressLiteralBecomesItsOwnBlock) {
  auto r = SuggestRules(EgressRules{.allow_cidrs = {"203.0.113.0/24"}},
                        Seen({{"203.0.113.9", 443},  // in a rule already
                              {"198.51.100.20", 443},
                              {"2001:db8::5", 443},
                              {"198.51.100.20", 80}}));  // the same address again
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->allow_cidrs,
            (std::vector<std::string>{"203.0.113.0/24", "198.51.100.20/32", "2001:db8::5/128"}));
  EXPECT_TRUE(r->allow_domains.empty());
}

TEST(LearnTest, NothingLearnedIsThePolicyAsItIs) {
  const EgressRules current{.allow_domains = {"b.example", "a.example"}, .mode = "learn"};
  auto r = SuggestRules(current, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->allow_domains, (std::vector<std::string>{"a.example", "b.example"}));
  EXPECT_EQ(FormatEgressFlags(*r), "--allow-domain a.example --allow-domain b.example");
  EXPECT_EQ(FormatEgressFlags(EgressRules{}), "");
  EXPECT_EQ(FormatEgressFlags(EgressRules{.mode = "learn"}), "--egress learn");
  // Not a policy: refused as one.
  EXPECT_FALSE(SuggestRules(EgressRules{.allow_domains = {"*.com"}}, {}).ok());
  // Entries the log could not have written are skipped, not suggested.
  auto odd = SuggestRules(EgressRules{}, Seen({{"", 443}, {"a b", 443}, {"a.example", 0}}));
  ASSERT_TRUE(odd.ok());
  EXPECT_TRUE(odd->allow_domains.empty());
}

}  // namespace
}  // namespace agvisor::egress
