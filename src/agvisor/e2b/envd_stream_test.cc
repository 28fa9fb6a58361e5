#include "agvisor/e2b/envd_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "agvisor/e2b/envd_service.h"

namespace agvisor::e2b::envd {
namespace {

// The messages of a written stream (envelopes) with their flags.
std::vector<std::pair<int, std::string>> Messages(const std::string& wire) {
  connect::EnvelopeReader r(1 << 20);
  r.Feed(wire);
  std::vector<std::pair<int, std::string>> out;
  while (true) {
    auto m = r.Next();
    if (!m.ok() || !*m) break;
    out.emplace_back((*m)->flags, (*m)->data);
  }
  return out;
}

TEST(EnvdStreamTest, WritesMessagesThenEndStream) {
  std::string wire;
  PumpStream(
      [&](std::string_view b) -> Result<void> {
        wire.append(b);
        return Ok();
      },
      {}, "{\"keepalive\":{}}",
      [](EventQueue& q) {
        q.Push("{\"a\":1}");
        q.Push("{\"a\":2}");
        q.Finish(std::nullopt);
      },
      [](bool) { FAIL() << "nothing to cancel"; });
  auto m = Messages(wire);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].second, "{\"a\":1}");
  EXPECT_EQ(m[2].first, connect::kFlagEndStream);
  EXPECT_EQ(m[2].second, "{}");
}

TEST(EnvdStreamTest, KeepalivesWhileIdleAndTheDeadlineEndsIt) {
  std::string wire;
  std::atomic<bool> cancelled_by_deadline{false};
  std::atomic<bool> stop{false};
  StreamOptions o;
  o.keepalive = std::chrono::milliseconds(20);
  o.deadline = std::chrono::milliseconds(150);
  PumpStream(
      [&](std::string_view b) -> Result<void> {
        wire.append(b);
        return Ok();
      },
      o, "{\"keepalive\":{}}",
      [&](EventQueue& q) {
        while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        q.Finish(std::nullopt);
      },
      [&](bool deadline) {
        cancelled_by_deadline = deadline;
        stop = true;
      });
  EXPECT_TRUE(cancelled_by_deadline);
  auto m = Messages(wire);
  ASSERT_GE(m.size(), 3u);
  EXPECT_EQ(m[0].second, "{\"keepalive\":{}}");
  EXPECT_EQ(m.back().first, connect::kFlagEndStream);
  EXPECT_NE(m.back().second.find("deadline_exceeded"), std::string::npos);
}

// A client that went away cancels the producer, even one blocked on a full queue.
TEST(EnvdStreamTest, AGoneClientCancelsABlockedProducer) {
  std::atomic<bool> cancelled{false};
  int writes = 0;
  PumpStream(
      [&](std::string_view) -> Result<void> {
        if (++writes > 2) return Error::Unavailable("client gone");
        return Ok();
      },
      {}, "{}",
      [&](EventQueue& q) {
        std::string big(1 << 20, 'x');
        while (q.Push(big)) {
        }
      },
      [&](bool deadline) {
        EXPECT_FALSE(deadline);
        cancelled = true;
      });
  EXPECT_TRUE(cancelled);
}

TEST(EnvdStreamTest, PathsResolveAgainstTheUsersHome) {
  EXPECT_EQ(*ResolvePath("/etc/x", "user"), "/etc/x");
  EXPECT_EQ(*ResolvePath("a/b", "user"), "/home/user/a/b");
  EXPECT_EQ(*ResolvePath("~", "root"), "/root");
  EXPECT_EQ(*ResolvePath("~/x", "root"), "/root/x");
  EXPECT_FALSE(ResolvePath("", "user").ok());
  EXPECT_FALSE(ResolvePath(std::string("a\0b", 3), "user").ok());
}

TEST(EnvdStreamTest, MethodKinds) {
  EXPECT_EQ(KindOf("/process.Process/Start"), MethodKind::kServerStream);
  EXPECT_EQ(KindOf("/process.Process/List"), MethodKind::kUnary);
  EXPECT_EQ(KindOf("/filesystem.Filesystem/WatchDir"), MethodKind::kServerStream);
  EXPECT_EQ(KindOf("/filesystem.Filesystem/Stat"), MethodKind::kUnary);
  EXPECT_EQ(KindOf("/process.Process/Nope"), MethodKind::kUnknown);
  EXPECT_EQ(KindOf("/other.Service/Stat"), MethodKind::kUnknown);
}

}  // namespace
}  // namespace agvisor::e2b::envd
