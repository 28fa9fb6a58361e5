#include "agvisor/egress/policy.h"

#include <gtest/gtest.h>

namespace agvisor::egress {
namespace {

EgressPolicy Make(std::vector<std::string> domains, std::vector<std::string> cidrs = {},
                  std::vector<std::uint16_t> ports = {}, std::vector<std::string> deny = {}) {
  auto p = EgressPolicy::Create(domains, cidrs, ports, deny);
  EXPECT_TRUE(p.ok()) << p.error().ToString();
  return std::move(p).value();
}

Target Name(std::string host, std::uint16_t port = 443) { return {std::move(host), {}, port}; }

Target Literal(std::string_view text, std::uint16_t port = 443) {
  return *ParseAuthority(std::string(text) + ":" + std::to_string(port), 0);
}

TEST(PolicyTest, WildcardsMatchSubdomainsOnlyNeverTheApex) {
  auto p = Make({"pypi.org", "*.pythonhosted.org"});
  EXPECT_TRUE(p.Decide(Name("pypi.org")).allowed);
  EXPECT_FALSE(p.Decide(Name("www.pypi.org")).allowed);
  EXPECT_TRUE(p.Decide(Name("files.pythonhosted.org")).allowed);
  EXPECT_TRUE(p.Decide(Name("a.b.pythonhosted.org")).allowed);
  EXPECT_FALSE(p.Decide(Name("pythonhosted.org")).allowed);
  EXPECT_FALSE(p.Decide(Name("evilpythonhosted.org")).allowed);
  EXPECT_FALSE(p.Decide(Name("pythonhosted.org.evil.example")).allowed);
  EXPECT_FALSE(p.Decide(Name("pypi.org.evil.example")).allowed);
  EXPECT_EQ(p.Decide(Name("files.pythonhosted.org")).reason, "allowed by *.pythonhosted.org");
  EXPECT_EQ(p.Decide(Name("evil.example")).reason, "no rule allows evil.example");
}

TEST(PolicyTest, RulesAreNormalisedAndBadRulesRefused) {
  auto p = Make({"PyPI.ORG.", "*.Example.com"});
  EXPECT_TRUE(p.Decide(Name("pypi.org")).allowed);
  EXPECT_TRUE(p.Decide(Name("a.example.com")).allowed);
  for (std::string bad : {"*", "*.com", "a*.example.com", "*b.example.com", "a.*.example.com",
                          "**.example.com", "1.2.3.4", "exa mple.com", "", "*.", "bücher.de"}) {
    auto r = EgressPolicy::Create(std::vector<std::string>{bad}, {}, {});
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(r.error().message().find("domain rule"), std::string::npos);
    }
  }
  EXPECT_FALSE(EgressPolicy::Create({}, std::vector<std::string>{"10.0.0.1/8"}, {}).ok());
  EXPECT_FALSE(EgressPolicy::Create({}, {}, std::vector<std::uint16_t>{0}).ok());
}

TEST(PolicyTest, DenyWinsOverAllow) {
  auto p = Make({"*.example.com"}, {}, {}, {"secret.example.com"});
  EXPECT_TRUE(p.Decide(Name("www.example.com")).allowed);
  Verdict v = p.Decide(Name("secret.example.com"));
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, "denied by secret.example.com");
}

TEST(PolicyTest, PortsDefaultToHttpAndHttps) {
  auto p = Make({"pypi.org"});
  EXPECT_TRUE(p.Decide(Name("pypi.org", 80)).allowed);
  EXPECT_TRUE(p.Decide(Name("pypi.org", 443)).allowed);
  Verdict v = p.Decide(Name("pypi.org", 22));
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, "port 22 is not allowed");
  auto only = Make({"pypi.org"}, {}, {8443});
  EXPECT_FALSE(only.Decide(Name("pypi.org", 443)).allowed);
  EXPECT_TRUE(only.Decide(Name("pypi.org", 8443)).allowed);
}

TEST(PolicyTest, IpLiteralsPassOnlyThroughCidrRules) {
  auto p = Make({"pypi.org"}, {"203.0.113.0/24", "2001:db8::/32"});
  EXPECT_TRUE(p.Decide(Literal("203.0.113.9")).allowed);
  EXPECT_TRUE(p.Decide(Literal("[2001:db8::5]")).allowed);
  Verdict v = p.Decide(Literal("198.51.100.1"));
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, "IP address 198.51.100.1 is in no CIDR rule");
  EXPECT_FALSE(Make({"pypi.org"}).Decide(Literal("151.101.0.223")).allowed);
}

TEST(PolicyTest, ResolvedAddressesAreCheckedUnlessACidrNamesThem) {
  auto p = Make({"pypi.org"});
  std::vector<IpAddress> host = {*ParseIpAddress("198.51.100.7")};
  auto check = [&](const EgressPolicy& policy, std::string_view a) {
    return policy.CheckResolved(*ParseIpAddress(a), host);
  };
  EXPECT_TRUE(check(p, "151.101.0.223").allowed);
  EXPECT_EQ(check(p, "127.0.0.1").reason, "127.0.0.1 is loopback (no rule opens it)");
  EXPECT_EQ(check(p, "169.254.169.254").reason,
            "169.254.169.254 is link-local (cloud metadata) (no rule opens it)");
  EXPECT_FALSE(check(p, "10.0.0.5").allowed);
  EXPECT_FALSE(check(p, "::ffff:10.0.0.5").allowed);
  EXPECT_EQ(check(p, "198.51.100.7").reason,
            "198.51.100.7 is the host's own address (no rule opens it)");
  EXPECT_EQ(check(p, "::ffff:198.51.100.7").reason,
            "::ffff:198.51.100.7 is the host's own address (no rule opens it)");
  auto opened = Make({"pypi.org"}, {"10.0.0.0/8", "fd12::/16", "fd00::/16"});
  EXPECT_TRUE(check(opened, "10.0.0.5").allowed);
  EXPECT_EQ(check(opened, "10.0.0.5").reason, "allowed by 10.0.0.0/8");
  EXPECT_TRUE(check(opened, "fd12::1").allowed);
  EXPECT_FALSE(check(opened, "fd00:ec2::254").allowed);  // AWS metadata inside the opened ULA
  EXPECT_FALSE(check(opened, "127.0.0.1").allowed);
}

// Issue 32, point 3: a CIDR rule that holds the host's own addresses, loopback or a metadata
// service opens none of them; the enforcer dials from the host.
TEST(PolicyTest, NoCidrRuleOpensTheHostLoopbackOrMetadata) {
  std::vector<IpAddress> host = {*ParseIpAddress("198.51.100.7"), *ParseIpAddress("10.1.0.1")};
  auto wide = Make({"pypi.org"},
                   {"0.0.0.0/8", "10.0.0.0/8", "100.0.0.0/8", "127.0.0.0/8", "151.0.0.0/8",
                    "168.0.0.0/8", "169.0.0.0/8", "192.0.0.0/8", "198.0.0.0/8", "224.0.0.0/8",
                    "255.0.0.0/8", "::/96", "::ffff:127.0.0.0/104", "::ffff:169.0.0.0/104",
                    "::ffff:10.0.0.0/104", "fe80::/16", "fd00::/16", "64:ff9b::/96", "2002::/16"});
  for (std::string_view a : {"127.0.0.1",
                             "127.0.0.2",
                             "0.0.0.0",
                             "169.254.169.254",
                             "168.63.129.16",
                             "100.100.100.200",
                             "192.0.0.192",
                             "224.0.0.1",
                             "255.255.255.255",
                             "::1",
                             "::",
                             "fe80::1",
                             "fd00:ec2::254",
                             "::ffff:127.0.0.2",
                             "::ffff:169.254.169.254",
                             "64:ff9b::a9fe:a9fe",
                             "2002:7f00:1::1",
                             "198.51.100.7",
                             "10.1.0.1",
                             "::ffff:10.1.0.1"}) {
    Verdict v = wide.CheckResolved(*ParseIpAddress(a), host);
    EXPECT_FALSE(v.allowed) << a << ": " << v.reason;
    EXPECT_NE(v.reason.find("(no rule opens it)"), std::string::npos) << a << ": " << v.reason;
  }
  // What the rules are for still opens: a public address, a private service, CGNAT.
  for (std::string_view a : {"151.101.0.223", "10.1.0.2", "100.64.0.1", "192.0.0.8"}) {
    EXPECT_TRUE(wide.CheckResolved(*ParseIpAddress(a), host).allowed) << a;
  }
  // Only a test's own servers, when the proxy is told so, and only through a CIDR rule.
  const std::vector<Cidr> exempt = {*ParseCidr("127.0.0.1/32")};
  EXPECT_TRUE(wide.CheckResolved(*ParseIpAddress("127.0.0.1"), host, exempt).allowed);
  EXPECT_FALSE(wide.CheckResolved(*ParseIpAddress("127.0.0.2"), host, exempt).allowed);
  EXPECT_FALSE(
      Make({"pypi.org"}).CheckResolved(*ParseIpAddress("127.0.0.1"), host, exempt).allowed);
}

TEST(PolicyTest, CidrRulesOverEveryAddressAreRefused) {
  for (std::string_view all : {"0.0.0.0/0", "::/0"}) {
    auto p = EgressPolicy::Create(EgressRules{.allow_cidrs = {std::string(all)}});
    ASSERT_FALSE(p.ok()) << all;
    EXPECT_EQ(p.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(p.error().message().find("default bridge network already reaches the open internet"),
              std::string::npos)
        << p.error().message();
  }
}

// Two /1 rules open as much as one /0: every rule wider than /8 (IPv4) or /16 (IPv6) is refused,
// naming it and what to pass instead; an IPv6 rule over IPv4-mapped addresses counts as IPv4.
TEST(PolicyTest, CidrRulesWiderThanAPrivateNetworkAreRefused) {
  for (std::string_view wide :
       {"0.0.0.0/1", "128.0.0.0/1", "10.0.0.0/7", "::/1", "8000::/1", "2000::/15", "fc00::/7",
        "::/16", "::ffff:0:0/96", "::ffff:0:0/103"}) {
    auto p = EgressPolicy::Create(EgressRules{.allow_cidrs = {std::string(wide)}});
    ASSERT_FALSE(p.ok()) << wide;
    EXPECT_EQ(p.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(p.error().message().find("CIDR rule " + std::string(wide) + " is wider than /8"),
              std::string::npos)
        << p.error().message();
    EXPECT_NE(p.error().message().find("pass the names (--allow-domain) or the narrower blocks"),
              std::string::npos)
        << p.error().message();
  }
  for (std::string_view narrow : {"10.0.0.0/8", "2001::/16", "::ffff:10.0.0.0/104", "::/96"}) {
    EXPECT_TRUE(EgressPolicy::Create(EgressRules{.allow_cidrs = {std::string(narrow)}}).ok())
        << narrow;
  }
}

TEST(PolicyTest, DescribeListsEveryRule) {
  auto p = Make({"pypi.org", "*.pythonhosted.org"}, {"203.0.113.0/24"}, {443}, {"x.pypi.org"});
  EXPECT_EQ(p.Describe(),
            "allow *.pythonhosted.org pypi.org; deny x.pypi.org; cidr 203.0.113.0/24; ports 443");
}

TEST(PolicyTest, RulesRoundTripThroughTheLabelEncoding) {
  EgressRules in{.allow_domains = {"PyPI.org", "*.pythonhosted.org", "pypi.org"},
                 .allow_cidrs = {"203.0.113.0/24"},
                 .ports = {443, 8443},
                 .deny_domains = {"evil.pythonhosted.org"}};
  auto p = EgressPolicy::Create(in);
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  const EgressRules canonical = p->Rules();
  EXPECT_EQ(canonical.allow_domains, (std::vector<std::string>{"*.pythonhosted.org", "pypi.org"}));
  EXPECT_EQ(canonical.ports, (std::vector<std::uint16_t>{443, 8443}));
  const std::string label = EncodeEgressRules(canonical);
  EXPECT_EQ(label,
            "allow=*.pythonhosted.org,pypi.org;cidr=203.0.113.0/24;ports=443,8443;"
            "deny=evil.pythonhosted.org");
  auto back = DecodeEgressRules(label);
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(*back, canonical);
  // Empty lists, and the default ports written out by Rules().
  auto none = EgressPolicy::Create(EgressRules{.allow_domains = {"a.example"}});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(EncodeEgressRules(none->Rules()), "allow=a.example;cidr=;ports=80,443;deny=");
  EXPECT_EQ(*DecodeEgressRules("allow=;cidr=;ports=;deny="), EgressRules{});
}

TEST(PolicyTest, RefusalAdviceNamesTheRuleThatWouldAllowIt) {
  const EgressPolicy p = Make({"pypi.org"}, {}, {}, {"evil.pypi.org"});
  auto advice = [&](const Target& t) {
    return RefusalAdvice("agvisor-box", t, p.Decide(t).reason);
  };
  EXPECT_EQ(advice(Name("example.com")),
            "agvisor egress policy of sandbox box refused example.com:443 (no rule allows "
            "example.com); an operator allows it with `agvisor egress box --allow-domain "
            "example.com`");
  EXPECT_NE(advice(Name("pypi.org", 8080)).find("`agvisor egress box --allow-port 8080`"),
            std::string::npos);
  EXPECT_NE(advice(Literal("203.0.113.7")).find("`agvisor egress box --allow-cidr 203.0.113.7/32`"),
            std::string::npos);
  EXPECT_NE(advice(Name("evil.pypi.org"))
                .find("`agvisor egress box --remove-domain evil.pypi.org --allow-domain "
                      "evil.pypi.org`"),
            std::string::npos);
  // A name that resolved to a refused address: no rule opens it, and the line says so.
  const std::string resolved = RefusalAdvice("agvisor-box", Name("pypi.org"),
                                             "resolves to a refused address: 127.0.0.1 is loopback",
                                             /*resolved=*/true);
  EXPECT_NE(resolved.find("no egress rule opens that address"), std::string::npos) << resolved;
  EXPECT_EQ(resolved.find("--allow"), std::string::npos) << resolved;
  // One printable line, fit for a header, whatever the reason carried.
  const std::string odd = RefusalAdvice("x", Name("a.test"), "bad\r\nX-Injected: 1\x80");
  EXPECT_EQ(odd.find_first_of("\r\n\x80"), std::string::npos) << odd;
}

// Learn mode (docs/egress.md, "Learn mode"): what no rule allows goes through, marked learned,
// with the reason enforcing would have given; deny rules and every check of the resolved address
// stay as they are.
TEST(PolicyTest, LearnModeLetsThroughWhatNoRuleAllowsButNotWhatADenyRuleRefuses) {
  auto p = EgressPolicy::Create(EgressRules{
      .allow_domains = {"pypi.org"}, .deny_domains = {"*.evil.example"}, .mode = "learn"});
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_TRUE(p->learn());
  const Verdict allowed = p->Decide(Name("pypi.org"));
  EXPECT_TRUE(allowed.allowed);
  EXPECT_FALSE(allowed.learned);
  const struct {
    Target target;
    std::string reason;
  } learned[] = {{Name("example.com"), "no rule allows example.com"},
                 {Name("pypi.org", 8443), "port 8443 is not allowed"},
                 {Name("example.com", 22), "port 22 is not allowed"},
                 {Literal("203.0.113.7"), "IP address 203.0.113.7 is in no CIDR rule"},
                 {Literal("127.0.0.1"), "IP address 127.0.0.1 is in no CIDR rule"}};
  for (const auto& [target, reason] : learned) {
    const Verdict v = p->Decide(target);
    EXPECT_TRUE(v.allowed) << target.host;
    EXPECT_TRUE(v.learned) << target.host;
    EXPECT_EQ(v.reason, reason);
  }
  // A deny rule refuses in learn mode too, on an allowed port or not.
  for (const Target& t : {Name("a.evil.example"), Name("a.evil.example", 22)}) {
    const Verdict v = p->Decide(t);
    EXPECT_FALSE(v.allowed) << t.port;
    EXPECT_FALSE(v.learned);
    EXPECT_EQ(v.reason, "denied by *.evil.example");
  }
  EXPECT_TRUE(p->DecideName("anything.example").learned);
  EXPECT_FALSE(p->DecideName("b.evil.example").allowed);
  // After resolution nothing changes: loopback, metadata, private ranges and the host itself are
  // refused as they are when enforcing (the same CheckResolved).
  const std::vector<IpAddress> host = {*ParseIpAddress("198.51.100.7")};
  for (std::string_view a :
       {"127.0.0.1", "169.254.169.254", "10.0.0.5", "192.168.1.1", "172.16.0.1", "100.64.0.1",
        "fd12::1", "::ffff:127.0.0.1", "198.51.100.7", "fe80::1"}) {
    const Verdict v = p->CheckResolved(*ParseIpAddress(a), host);
    EXPECT_FALSE(v.allowed) << a;
    EXPECT_FALSE(v.learned) << a;
  }
  EXPECT_TRUE(p->CheckResolved(*ParseIpAddress("151.101.0.223"), host).allowed);
  // Enforcing, the same rules refuse what learning let through.
  EXPECT_FALSE(Make({"pypi.org"}).Decide(Name("example.com")).allowed);
  EXPECT_NE(p->Describe().find("learn mode"), std::string::npos) << p->Describe();
}

TEST(PolicyTest, TheModeIsCheckedAndTravelsInTheLabel) {
  for (const char* ok : {"", "enforce", "learn"}) {
    EXPECT_TRUE(EgressPolicy::Create(EgressRules{.mode = ok}).ok()) << ok;
  }
  for (const char* bad : {"Learn", "learning", "off", "learn;x", " learn"}) {
    auto p = EgressPolicy::Create(EgressRules{.mode = bad});
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(p.error().message().find("expected enforce"), std::string::npos)
        << p.error().message();
  }
  auto learn = EgressPolicy::Create(EgressRules{.allow_domains = {"a.example"}, .mode = "learn"});
  ASSERT_TRUE(learn.ok());
  EXPECT_EQ(learn->Rules().mode, "learn");
  const std::string label = EncodeEgressRules(learn->Rules());
  EXPECT_EQ(label, "allow=a.example;cidr=;ports=80,443;deny=;mode=learn");
  auto back = DecodeEgressRules(label);
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(*back, learn->Rules());
  // Enforcing is the default and writes no mode: labels of before read the same.
  EXPECT_EQ(EgressPolicy::Create(EgressRules{.mode = "enforce"})->Rules().mode, "");
  EXPECT_EQ(DecodeEgressRules("allow=a.example;cidr=;ports=;deny=")->mode, "");
  for (const char* bad : {"allow=;cidr=;ports=;deny=;mode=", "allow=;cidr=;ports=;deny=;mode=x",
                          "allow=;cidr=;ports=;deny=;mode=learn;more"}) {
    EXPECT_FALSE(DecodeEgressRules(bad).ok()) << bad;
  }
}

TEST(PolicyTest, MalformedRuleLabelsAreRefused) {
  for (const char* bad : {"", "allow=a", "allow=a;cidr=;ports=0;deny=", "cidr=;allow=;ports=;deny=",
                          "allow=;cidr=;ports=70000;deny=", "allow=;cidr=;ports=x;deny=",
                          "allow=;cidr=;ports=;deny=;more", "allow=;cidr=;ports=123456;deny="}) {
    auto r = DecodeEgressRules(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    }
  }
  // What decodes is still checked as a policy: a rule with a comma cannot be written at all.
  auto odd = DecodeEgressRules("allow=a.example,,b.example;cidr=;ports=;deny=");
  ASSERT_TRUE(odd.ok());
  EXPECT_FALSE(EgressPolicy::Create(*odd).ok());
  std::vector<std::string> many(kMaxEgressRules + 1, "a.example");
  EXPECT_EQ(EgressPolicy::Create(EgressRules{.allow_domains = many}).error().code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agvisor::egress
