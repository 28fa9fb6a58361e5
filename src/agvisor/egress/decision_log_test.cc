#include "agvisor/egress/decision_log.h"

#include <gmock/gmock.h>
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
  Decision request = learned;  // nor is a request on an intercepted connection
  request.via = "https";
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

// A sandbox picks its paths (most of a 16 KiB head) and what a reason quotes: the log keeps a
// bounded part of each, so 256 records of the biggest requests stay small. Before, the ring kept
// every byte (a 16 KiB path per record).
TEST(DecisionLogTest, HostileStringsAreCutToBoundsAtACharacterBoundary) {
  DecisionLog log(4);
  Decision d = Make("a", std::string(300, 'n'), true);
  d.method = std::string(100, 'M');
  d.path = "/" + std::string(16 * 1024, 'p');
  d.reason = std::string(5000, 'r');
  d.secret = std::string(700, 's');
  log.Record(d);
  auto recent = log.Recent("a");
  ASSERT_EQ(recent.size(), 1u);
  const Decision& kept = recent.front();
  EXPECT_EQ(kept.path.size(), 1024u);
  EXPECT_TRUE(kept.path.ends_with("..."));
  EXPECT_LE(kept.method.size(), 32u);
  EXPECT_LE(kept.reason.size(), 512u);
  EXPECT_LE(kept.secret.size(), 512u);
  EXPECT_EQ(kept.name, d.name);  // under the bound: as it was
  // A cut never splits a UTF-8 sequence: "é" is 2 bytes, placed across the cut.
  Decision u = Make("a", "x", true);
  u.path = std::string(1020, '/') + "\xc3\xa9\xc3\xa9\xc3\xa9";
  log.Record(u);
  EXPECT_EQ(log.Recent("a").back().path, std::string(1020, '/') + "...");
}

TEST(DecisionLogTest, RecordsAreNumberedPerSandboxAndFollowedBySeq) {
  DecisionLog log(3);
  EXPECT_EQ(log.LastSeq("a"), 0u);
  EXPECT_EQ(log.Record(Make("a", "x", true)).seq, 1u);
  EXPECT_EQ(log.Record(Make("b", "x", true)).seq, 1u);
  EXPECT_EQ(log.Record(Make("a", "y", false)).seq, 2u);
  EXPECT_EQ(log.LastSeq("a"), 2u);
  auto since = log.Since("a", 1);
  ASSERT_EQ(since.size(), 1u);
  EXPECT_EQ(since[0].name, "y");
  // More than the ring holds came since: the oldest are gone, the numbers show the gap.
  for (int i = 0; i < 5; ++i) log.Record(Make("a", "z" + std::to_string(i), true));
  since = log.Since("a", 2);
  ASSERT_EQ(since.size(), 3u);
  EXPECT_EQ(since.front().seq, 5u);
  EXPECT_TRUE(log.Since("nobody", 0).empty());
}

TEST(DecisionLogTest, FormatsARequestsFields) {
  Decision d = Make("", "api.test", true);
  d.via = "https";
  d.reason = "bound host api.test";
  d.method = "GET";
  d.path = "/v1/models";
  d.status = 200;
  d.bytes_up = 310;
  d.bytes_down = 5120;
  d.duration = std::chrono::milliseconds(12);
  d.secret = "API_KEY";
  EXPECT_EQ(FormatDecision(d),
            "2025-12-01T15:04:05.123Z https api.test:443 allowed (bound host api.test) GET "
            "/v1/models 200 up=310 down=5120 12ms secret=API_KEY");
  d.status = 0;  // never answered
  d.secret.clear();
  EXPECT_THAT(FormatDecision(d), ::testing::EndsWith("GET /v1/models - up=310 down=5120 12ms"));
}

// A connection's close record: numbered like any record, not counted (it is not a decision),
// printed with the seq it closes, its bytes (even 0) and its duration.
TEST(DecisionLogTest, CloseRecordsAreNumberedButNotCounted) {
  DecisionLog log;
  const Decision opened = log.Record(Make("a", "pypi.org", true));
  Decision close = Make("a", "pypi.org", true);
  close.reason.clear();
  close.address = "151.101.0.223";
  close.closes = opened.seq;
  close.bytes_up = 517;
  close.bytes_down = 48213;
  close.duration = std::chrono::milliseconds(1480);
  const Decision kept = log.Record(close);
  EXPECT_EQ(kept.seq, opened.seq + 1);
  EXPECT_EQ(kept.closes, opened.seq);
  EXPECT_EQ(log.Counters("a"), (DecisionCounters{1, 0}));
  EXPECT_EQ(log.Totals(), (DecisionCounters{1, 0}));
  EXPECT_EQ(FormatDecision(kept),
            "2025-12-01T15:04:05.123Z sandbox=a tls pypi.org:443 closed #1 -> 151.101.0.223 "
            "up=517 down=48213 1480ms");
  close.bytes_up = close.bytes_down = 0;
  close.duration = std::chrono::milliseconds(0);
  close.reason = "idle for 300000 ms";
  EXPECT_THAT(
      FormatDecision(close),
      ::testing::EndsWith("closed #1 (idle for 300000 ms) -> 151.101.0.223 up=0 down=0 0ms"));
}

TEST(DecisionLogTest, TimeParsesBackExactly) {
  const auto t = std::chrono::system_clock::time_point(std::chrono::milliseconds(1764601445123));
  EXPECT_TRUE(ParseDecisionTime(FormatDecisionTime(t)) == t);
  EXPECT_FALSE(ParseDecisionTime("2025-12-01T15:04:05Z").has_value());
  EXPECT_FALSE(ParseDecisionTime("2025-12-01T15:04:05.12xZ").has_value());
  EXPECT_FALSE(ParseDecisionTime("2025-13-01T15:04:05.123Z").has_value());
}

}  // namespace
}  // namespace agvisor::egress
