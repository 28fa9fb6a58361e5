#include "agvisor/egress/decision_log.h"

#include <gtest/gtest.h>

namespace agvisor::egress {
namespace {

Decision Make(std::string sandbox, std::string name, bool allowed) {
  Decision d;
  d.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1764601445123));
  d.sandbox = std::move(sandbox);
  d.via = "tls";
  d.name = std::move(name);
  d.port = 443;
  d.allowed = allowed;
  d.reason = allowed ? "allowed by pypi.org" : "no rule allows x";
  return d;
}

TEST(DecisionLogTest, RingIsBoundedPerSandboxAndCountersKeepCounting) {
  DecisionLog log(3);
  for (int i = 0; i < 5; ++i) log.Record(Make("a", "n" + std::to_string(i), i % 2 == 0));
  log.Record(Make("b", "other", false));
  auto recent = log.Recent("a");
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent.front().name, "n2");
  EXPECT_EQ(recent.back().name, "n4");
  EXPECT_EQ(log.Counters("a"), (DecisionCounters{3, 2}));
  EXPECT_EQ(log.Counters("b"), (DecisionCounters{0, 1}));
  EXPECT_EQ(log.Totals(), (DecisionCounters{3, 3}));
  EXPECT_TRUE(log.Recent("nobody").empty());
  log.Forget("a");
  EXPECT_TRUE(log.Recent("a").empty());
  EXPECT_EQ(log.Totals(), (DecisionCounters{3, 3}));
}

TEST(DecisionLogTest, OldestWrittenSandboxIsDroppedPastTheLimit) {
  DecisionLog log(4, 2);
  log.Record(Make("a", "x", true));
  log.Record(Make("b", "x", true));
  log.Record(Make("a", "y", true));  // a is now the most recently written
  log.Record(Make("c", "x", true));  // evicts b
  EXPECT_TRUE(log.Recent("b").empty());
  EXPECT_EQ(log.Recent("a").size(), 2u);
  EXPECT_EQ(log.Recent("c").size(), 1u);
}

TEST(DecisionLogTest, LearnedDecisionsAreAVerdictOfTheirOwnAndKeepTheirDestinations) {
  DecisionLog log(2);
  Decision learned = Make("a", "example.com", true);
  learned.learned = true;
  learned.reason = "no rule allows example.com";
  EXPECT_EQ(FormatDecision(learned),
            "2025-12-01T15:04:05.123Z sandbox=a tls example.com:443 learned (no rule allows "
            "example.com)");
  log.Record(learned);
  log.Record(learned);  // the same destination again: kept once
  Decision port = learned;
  port.port = 8443;
  log.Record(port);
  Decision dns = learned;  // an answer is not a destination reached
  dns.via = "dns";
  dns.name = "asked.example";
  log.Record(dns);
  Decision request = learned;  // nor is a request on a connection counted already
  request.method = "GET";
  request.name = "req.example";
  log.Record(request);
  log.Record(Make("a", "pypi.org", true));
  log.Record(Make("a", "x", false));
  EXPECT_EQ(log.Counters("a"), (DecisionCounters{.allowed = 1, .denied = 1, .learned = 5}));
  EXPECT_EQ(log.Totals().learned, 5u);
  const LearnedDestinations kept = log.Learned("a");
  EXPECT_EQ(kept.kept,
            (std::vector<LearnedDestination>{{"example.com", 443}, {"example.com", 8443}}));
  EXPECT_EQ(kept.dropped, 0u);
  // The ring (2 here) has long dropped them; the destinations stay while the sandbox does.
  EXPECT_EQ(log.Recent("a").size(), 2u);
  EXPECT_TRUE(log.Learned("nobody").kept.empty());
}

TEST(DecisionLogTest, LearnedDestinationsAreBounded) {
  DecisionLog log;
  for (std::size_t i = 0; i < kMaxLearnedDestinations + 10; ++i) {
    Decision d = Make("a", "n" + std::to_string(i) + ".example", true);
    d.learned = true;
    log.Record(d);
  }
  const LearnedDestinations kept = log.Learned("a");
  EXPECT_EQ(kept.kept.size(), kMaxLearnedDestinations);
  EXPECT_EQ(kept.dropped, 10u);
  log.Forget("a");
  EXPECT_TRUE(log.Learned("a").kept.empty());
}

TEST(DecisionLogTest, FormatsOneLine) {
  Decision d = Make("sb1", "pypi.org", true);
  d.address = "151.101.0.223";
  EXPECT_EQ(FormatDecision(d),
            "2025-12-01T15:04:05.123Z sandbox=sb1 tls pypi.org:443 allowed (allowed by pypi.org) "
            "-> 151.101.0.223");
  Decision r = Make("sb1", "x", false);
  EXPECT_EQ(FormatDecision(r),
            "2025-12-01T15:04:05.123Z sandbox=sb1 tls x:443 denied (no rule allows x)");
}

}  // namespace
}  // namespace agvisor::egress
