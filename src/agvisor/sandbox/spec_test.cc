#include "agvisor/sandbox/spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "agvisor/egress/secrets.h"

namespace agvisor {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Msg(const Result<void>& r) { return r.ok() ? "" : r.error().message(); }

TEST(SpecTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateSpec(SandboxSpec{}).ok());
  EXPECT_TRUE(ValidateLimits(Limits{}).ok());
}

TEST(SpecTest, MemorySizes) {
  EXPECT_EQ(*ParseMemorySize("m", "512m"), 512LL << 20);
  EXPECT_EQ(*ParseMemorySize("m", "1.5g"), 3LL << 29);
  EXPECT_EQ(*ParseMemorySize("m", "4G"), 4LL << 30);
  EXPECT_EQ(*ParseMemorySize("m", "1048576"), 1LL << 20);
  for (const char* bad : {"", "0", "0m", "-1g", "abc", "1.2.3g", "5gb", "1x", ".", "m"}) {
    auto r = ParseMemorySize("limits.memory", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message(), HasSubstr("limits.memory"));
  }
}

TEST(SpecTest, DiskSizesAreWholeNumbers) {
  EXPECT_EQ(*ParseDiskSize("d", "5g"), 5LL << 30);
  EXPECT_EQ(*ParseDiskSize("d", "100M"), 100LL << 20);
  EXPECT_EQ(*ParseDiskSize("d", "4096"), 4096);
  for (const char* bad : {"0", "0g", "1.5g", "2gb", "5b", "-5g", "g", "", "5 g"}) {
    EXPECT_FALSE(ParseDiskSize("limits.disk", bad).ok()) << bad;
  }
}

TEST(SpecTest, LimitsRefuseZeroNegativeMalformed) {
  Limits l;
  l.cpus = 0;
  EXPECT_THAT(Msg(ValidateLimits(l)), HasSubstr("limits.cpus"));
  l.cpus = -1;
  EXPECT_FALSE(ValidateLimits(l).ok());
  l = {};
  l.cpus = 0.5;
  EXPECT_TRUE(ValidateLimits(l).ok());
  l = {};
  l.pids = 0;
  EXPECT_THAT(Msg(ValidateLimits(l)), HasSubstr("limits.pids"));
  l.pids = kMaxPids + 1;  // scaled to the host's tasks it would pass the kernel's PID_MAX_LIMIT
  EXPECT_THAT(Msg(ValidateLimits(l)), HasSubstr("at most 65536"));
  l.pids = kMaxPids;
  EXPECT_TRUE(ValidateLimits(l).ok());
  l = {};
  l.memory = "0";
  EXPECT_THAT(Msg(ValidateLimits(l)), HasSubstr("limits.memory"));
  l = {};
  l.shm = "0m";
  EXPECT_THAT(Msg(ValidateLimits(l)), HasSubstr("limits.shm"));
  l = {};
  l.disk = "1.5g";
  EXPECT_THAT(Msg(ValidateLimits(l)), HasSubstr("limits.disk"));
  l.disk = "none";
  EXPECT_TRUE(ValidateLimits(l).ok());
}

TEST(SpecTest, Names) {
  EXPECT_TRUE(ValidateName("my-project_1.2").ok());
  EXPECT_TRUE(ValidateName(std::string(63, 'a')).ok());
  for (std::string bad : {std::string(64, 'a'), std::string(""), std::string("-x"),
                          std::string("a,b"), std::string("a:b"), std::string("a/b"),
                          std::string("a b"), std::string(".x"), std::string("é")}) {
    EXPECT_THAT(Msg(ValidateName(bad)), HasSubstr("is invalid")) << bad;
  }
}

TEST(SpecTest, RuntimeAndImageAndNetwork) {
  EXPECT_TRUE(ValidateRuntime("runsc").ok());
  EXPECT_TRUE(ValidateRuntime("runc").ok());  // its name is fine; its binary is refused
  EXPECT_FALSE(ValidateRuntime("runsc --privileged").ok());
  EXPECT_FALSE(ValidateRuntime("").ok());
  EXPECT_TRUE(ValidateImage("ubuntu:24.04").ok());
  EXPECT_TRUE(ValidateImage("reg.example:5000/a/b@sha256:abc").ok());
  EXPECT_THAT(Msg(ValidateImage("--privileged")), HasSubstr("cannot start with '-'"));
  EXPECT_FALSE(ValidateImage("a b").ok());
  EXPECT_TRUE(ValidateNetwork("none").ok());
  EXPECT_THAT(Msg(ValidateNetwork("host")), HasSubstr("refused"));
  EXPECT_FALSE(ValidateNetwork("container:x").ok());
}

TEST(SpecTest, Labels) {
  EXPECT_TRUE(ValidateLabels({{"tenant", "acme-42"}, {"run.id", "x y"}}).ok());
  EXPECT_THAT(Msg(ValidateLabels({{"agvisor", "0"}})), HasSubstr("reserved"));
  EXPECT_THAT(Msg(ValidateLabels({{"agvisor.name", "x"}})), HasSubstr("reserved"));
  EXPECT_FALSE(ValidateLabels({{"Tenant", "x"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"a=b", "x"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"k", "line\nbreak"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"k", std::string(300, 'v')}}).ok());
}

TEST(SpecTest, LifetimeIdleAndExecTimeout) {
  SandboxSpec s;
  s.lifetime = 0;
  EXPECT_THAT(Msg(ValidateSpec(s)), HasSubstr("lifetime must be > 0"));
  s = {};
  s.idle_ttl = -5;
  EXPECT_THAT(Msg(ValidateSpec(s)), HasSubstr("idle_ttl must be > 0"));
  s = {};
  s.warm_shells = 17;
  EXPECT_THAT(Msg(ValidateSpec(s)), HasSubstr("warm_shells must be from 0 (off) to 16, got 17"));
  s.warm_shells = -1;
  EXPECT_THAT(Msg(ValidateSpec(s)), HasSubstr("got -1"));
  s.warm_shells = 0;
  EXPECT_TRUE(ValidateSpec(s).ok());
  for (const char* ok : {"", "systrap", "ptrace"}) {
    s.platform = ok;
    EXPECT_TRUE(ValidateSpec(s).ok()) << ok;
  }
  s.platform = "kvm";  // hangs on these hosts: not offered
  EXPECT_THAT(Msg(ValidateSpec(s)),
              AllOf(HasSubstr("platform 'kvm'"), HasSubstr("\"ptrace\" (the default)"),
                    HasSubstr("\"systrap\"")));
  s.platform = "Ptrace";
  EXPECT_FALSE(ValidateSpec(s).ok());
  s.platform.clear();
  // idle_action: one of three words, needs idle_ttl; stop needs a name to resume.
  s = {};
  s.idle_action = "hibernate";
  EXPECT_THAT(Msg(ValidateSpec(s)),
              HasSubstr("idle_action must be destroy, stop or pause, got 'hibernate'"));
  s.idle_action = "stop";
  EXPECT_THAT(Msg(ValidateSpec(s)), HasSubstr("idle_action stop needs idle_ttl"));
  s.idle_action = "pause";
  EXPECT_THAT(Msg(ValidateSpec(s)), HasSubstr("idle_action pause needs idle_ttl"));
  s.idle_ttl = 60;
  EXPECT_TRUE(ValidateSpec(s).ok());  // anonymous is fine: its handle wakes it
  s.idle_action = "stop";
  EXPECT_THAT(Msg(ValidateSpec(s)), HasSubstr("idle_action stop keeps /workspace"));
  s.name = "proj";
  EXPECT_TRUE(ValidateSpec(s).ok());
  EXPECT_TRUE(ValidateExecTimeout(120, std::nullopt).ok());
  EXPECT_TRUE(ValidateExecTimeout(30, 60).ok());
  EXPECT_THAT(Msg(ValidateExecTimeout(60, 60)), HasSubstr("below idle_ttl"));
  EXPECT_THAT(Msg(ValidateExecTimeout(0, std::nullopt)), HasSubstr("must be > 0 seconds, got 0"));
  EXPECT_FALSE(ValidateExecTimeout(std::numeric_limits<double>::infinity(), std::nullopt).ok());
  // A started process: 0 is none; below 0 is refused saying so; idle_ttl holds as for a run.
  EXPECT_TRUE(ValidateProcessTimeout(0, 60).ok());
  // Deadlines (create, a pool's acquire, SetDeadlines): > 0 or unset.
  EXPECT_TRUE(ValidateDeadlines(std::nullopt, 1).ok());
  EXPECT_THAT(Msg(ValidateDeadlines(0, std::nullopt)),
              HasSubstr("lifetime must be > 0 seconds, got 0 (leave it unset"));
  EXPECT_THAT(Msg(ValidateDeadlines(5, -1)), HasSubstr("idle_ttl must be > 0 seconds, got -1"));
  EXPECT_THAT(Msg(ValidateProcessTimeout(-1, std::nullopt)),
              HasSubstr("must be > 0 seconds (or 0 for none), got -1"));
  EXPECT_THAT(Msg(ValidateProcessTimeout(90, 60)), HasSubstr("below idle_ttl"));
}

// Issue 32, point 3: a policy over every address is refused before anything is made, at every
// door (CLI, Python, agvisord, MCP and pools all validate the spec).
TEST(SpecTest, EgressCidrOverEveryAddressIsRefused) {
  SandboxSpec s;
  for (const char* all : {"0.0.0.0/0", "::/0", "0.0.0.0/1", "128.0.0.0/1", "::/1"}) {
    s.egress = egress::EgressRules{.allow_domains = {"pypi.org"}, .allow_cidrs = {all}};
    EXPECT_THAT(Msg(ValidateSpec(s)),
                HasSubstr("default bridge network already reaches the open internet"))
        << all;
  }
  s.egress = egress::EgressRules{.allow_domains = {"pypi.org"}, .allow_cidrs = {"10.0.0.0/8"}};
  EXPECT_TRUE(ValidateSpec(s).ok());
}

SandboxSpec WithSecret(SecretSpec secret) {
  SandboxSpec s;
  s.egress = egress::EgressRules{.allow_domains = {"api.example.com", "*.git.example"}};
  s.secrets = {std::move(secret)};
  return s;
}

TEST(SpecTest, SecretsNeedAPolicyThatAllowsTheirHosts) {
  SecretSpec ok{.name = "API_KEY", .hosts = {"api.example.com"}, .value = "v"};
  EXPECT_TRUE(ValidateSpec(WithSecret(ok)).ok());
  // By name (the operator's file): no value.
  EXPECT_TRUE(ValidateSpec(WithSecret({.name = "TOKEN", .hosts = {"x.git.example"}})).ok());
  auto refused = [](SandboxSpec s, std::string_view words) {
    auto r = ValidateSpec(s);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find(words), std::string::npos) << r.error().message();
  };
  SandboxSpec no_policy = WithSecret(ok);
  no_policy.egress.reset();
  refused(no_policy, "secrets need an egress policy");
  refused(WithSecret({.name = "K", .hosts = {"other.example"}, .value = "v"}),
          "host other.example is not allowed by the egress policy (no rule allows "
          "other.example): allow it too (--allow-domain other.example)");
  refused(WithSecret({.name = "K", .hosts = {"*.git.example"}, .value = "v"}), "exact names");
  refused(WithSecret({.name = "K", .hosts = {"API.example.com"}, .value = "v"}), "canonical");
  refused(WithSecret({.name = "K", .hosts = {}, .value = "v"}), "bind it to 1..");
  refused(WithSecret({.name = "A-B", .hosts = {"api.example.com"}}), "letters, digits and '_'");
  refused(WithSecret({.name = "1K", .hosts = {"api.example.com"}}), "not starting with a digit");
  refused(WithSecret({.name = "SSL_CERT_FILE", .hosts = {"api.example.com"}}), "agvisor's");
  refused(WithSecret({.name = "AGVISOR_X", .hosts = {"api.example.com"}}), "agvisor's");
  refused(WithSecret({.name = "LD_PRELOAD", .hosts = {"api.example.com"}}), "agvisor's");
  refused(WithSecret({.name = "K", .hosts = {"api.example.com"}, .header = "Host"}),
          "frames or routes");
  refused(WithSecret({.name = "K", .hosts = {"api.example.com"}, .header = "x key"}),
          "not an HTTP header name");
  // A value that would break out of its header; the message never quotes it.
  auto r = ValidateSpec(
      WithSecret({.name = "K", .hosts = {"api.example.com"}, .value = "sk-1\r\nX-Evil: 1"}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message().find("sk-1"), std::string::npos) << r.error().message();
  refused(WithSecret({.name = "K", .hosts = {"api.example.com"}, .value = ""}), "1..8192 bytes");
  refused(WithSecret({.name = "K",
                      .hosts = {"api.example.com"},
                      .value = std::string(egress::kMaxSecretValueBytes + 1, 'a')}),
          "1..8192 bytes");
  SandboxSpec twice = WithSecret(ok);
  twice.secrets.push_back(ok);
  refused(twice, "secret API_KEY is given twice");
  // An address is never a secret's host, even one a CIDR rule allows.
  SandboxSpec literal = WithSecret({.name = "K", .hosts = {"203.0.113.7"}});
  literal.egress->allow_cidrs = {"203.0.113.0/24"};
  refused(literal, "IP address");
  // A broker's answer must match the spec's secrets.
  SandboxSpec brokered = WithSecret(ok);
  brokered.brokered = BrokeredSecrets{.env = {{"OTHER", "agvsec_0"}}};
  refused(brokered, "do not match");
}

// Learn mode is one spec value, checked here for every door (CLI --egress, Python
// Egress(mode=), the API's and MCP's egress.mode).
TEST(SpecTest, EgressModeIsCheckedWithThePolicy) {
  SandboxSpec s;
  s.egress = egress::EgressRules{.mode = "learn"};  // no rule at all: everything is learned
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.egress->mode = "enforce";
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.egress->mode = "learning";
  EXPECT_THAT(Msg(ValidateSpec(s)),
              HasSubstr("egress policy: egress mode 'learning': expected enforce"));
  s.egress->mode = "learn";
  s.network = "none";
  EXPECT_THAT(Msg(ValidateSpec(s)), HasSubstr("an egress policy needs a network"));
  // A secret's host must be named by a rule: learn mode does not stand in for one.
  SandboxSpec secret = WithSecret({.name = "K", .hosts = {"other.example"}, .value = "v"});
  secret.egress->mode = "learn";
  EXPECT_THAT(Msg(ValidateSpec(secret)), HasSubstr("host other.example is not allowed"));
  secret.secrets[0].hosts = {"api.example.com"};
  EXPECT_TRUE(ValidateSpec(secret).ok());
}

TEST(SpecTest, SecretBindingsRoundTripThroughTheirLabelWithoutValues) {
  const std::vector<SecretBinding> b = {
      {.name = "A", .placeholder = "agvsec_01", .hosts = {"a.example", "b.example"}},
      {.name = "B",
       .placeholder = "agvsec_02",
       .hosts = {"c.example"},
       .header = "x-api-key",
       .from_operator = true}};
  const std::string label = EncodeSecretBindings(b);
  EXPECT_EQ(label,
            "A|agvsec_01|a.example,b.example||caller;B|agvsec_02|c.example|x-api-key|operator");
  EXPECT_EQ(*DecodeSecretBindings(label), b);
  EXPECT_TRUE(DecodeSecretBindings("").ok());
  for (const char* bad :
       {"A|p|h||x", "A|p|h|", "A||h||caller", "A|p|a,,b||caller", "A|p|||caller"}) {
    EXPECT_FALSE(DecodeSecretBindings(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace agvisor
