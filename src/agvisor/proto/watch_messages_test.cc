// WATCH and WATCH_EVENTS (docs/protocol.md, "Watch"): round trips, golden bytes, and every way a
// hostile agent's events are refused by the strict decoder the host runs on them.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "agvisor/proto/messages.h"

namespace agvisor::proto {
namespace {

using namespace std::string_literals;

WatchEvent Ev(WatchEventKind kind, std::string path, std::string old_path = "",
              bool is_dir = false) {
  return WatchEvent{kind, is_dir, std::move(path), std::move(old_path)};
}

// A WATCH_EVENTS payload of one event with raw fields (no checks on the way in).
std::string RawEvent(std::uint8_t kind, std::uint8_t flags, std::string_view path,
                     std::string_view old_path) {
  std::string out;
  Writer w(out);
  w.AppendU32(1);
  w.AppendU8(kind);
  w.AppendU8(flags);
  w.AppendStr(path);
  w.AppendStr(old_path);
  return out;
}

TEST(WatchMessagesTest, RequestRoundTripsAndRefusesUnknownFlags) {
  for (std::uint8_t flags : {0, 1}) {
    WatchRequest req{"/workspace/src", flags};
    auto back = WatchRequest::Decode(req.Encode());
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ(*back, req);
  }
  EXPECT_EQ((WatchRequest{"/a", kWatchRecursive}.Encode()), "\0\0\0\x02/a\x01"s);
  auto bad = WatchRequest::Decode("\0\0\0\x02/a\x02"s);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "WATCH.flags: unknown bits 0x02");
  EXPECT_FALSE(WatchRequest::Decode("\0\0\0\x02/a"s).ok());  // no flags byte
}

TEST(WatchMessagesTest, EventsRoundTripWithGoldenBytes) {
  WatchEvents batch{{Ev(WatchEventKind::kCreate, "a", "", true),
                     Ev(WatchEventKind::kModify, "a/b.txt"), Ev(WatchEventKind::kDelete, "a/b.txt"),
                     Ev(WatchEventKind::kMove, "c/d", "a/x", true),
                     Ev(WatchEventKind::kOverflow, "")}};
  auto back = WatchEvents::Decode(batch.Encode());
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, batch);
  // u32 count, then per event: u8 kind, u8 flags (bit 0 = is_dir), str path, str old_path.
  EXPECT_EQ((WatchEvents{{Ev(WatchEventKind::kMove, "b", "a")}}.Encode()),
            "\0\0\0\x01\x04\x00\0\0\0\x01"
            "b\0\0\0\x01"
            "a"s);
  for (const WatchEvent& e : batch.events) {
    std::string one;
    Writer w(one);
    e.AppendTo(w);
    EXPECT_EQ(one.size(), e.EncodedSize());
  }
  EXPECT_EQ(WatchEventKindName(WatchEventKind::kMove), "move");
  EXPECT_EQ(WatchEventKindName(WatchEventKind::kOverflow), "overflow");
}

TEST(WatchMessagesTest, HostileEventsAreRefusedWithTheField) {
  struct Case {
    std::string payload;
    std::string error;
  };
  const std::string too_long(kMaxWatchPath + 1, 'a');
  const std::vector<Case> cases = {
      {"\0\0\0\0"s, "WATCH_EVENTS.events: empty list"},
      {RawEvent(0, 0, "a", ""), "WATCH_EVENTS.event.kind: unknown value 0x00"},
      {RawEvent(6, 0, "a", ""), "WATCH_EVENTS.event.kind: unknown value 0x06"},
      {RawEvent(1, 2, "a", ""), "WATCH_EVENTS.event.flags: unknown bits 0x02"},
      {RawEvent(1, 0, "", ""), "WATCH_EVENTS.event.path: empty path"},
      {RawEvent(1, 0, "a\0b"s, ""), "WATCH_EVENTS.event.path: path contains a NUL byte"},
      {RawEvent(1, 0, "/etc/passwd", ""),
       "WATCH_EVENTS.event.path: path is absolute, expected one relative to the watched root"},
      {RawEvent(1, 0, "../x", ""),
       "WATCH_EVENTS.event.path: path has an empty, '.' or '..' component"},
      {RawEvent(1, 0, "a//b", ""),
       "WATCH_EVENTS.event.path: path has an empty, '.' or '..' component"},
      {RawEvent(1, 0, "a/./b", ""),
       "WATCH_EVENTS.event.path: path has an empty, '.' or '..' component"},
      {RawEvent(1, 0, "a/", ""),
       "WATCH_EVENTS.event.path: path has an empty, '.' or '..' component"},
      {RawEvent(1, 0, too_long, ""), "WATCH_EVENTS.event.path: path of 4097 bytes exceeds 4096"},
      {RawEvent(2, 0, "a", "b"), "WATCH_EVENTS.event.old_path: set on a modify event (moves only)"},
      {RawEvent(4, 0, "a", ""), "WATCH_EVENTS.event.old_path: empty path"},
      {RawEvent(4, 0, "a", "x/.."),
       "WATCH_EVENTS.event.old_path: path has an empty, '.' or '..' component"},
      {RawEvent(5, 0, "a", ""),
       "WATCH_EVENTS.event: an overflow event carries no path and no is_dir"},
      {RawEvent(5, 1, "", ""),
       "WATCH_EVENTS.event: an overflow event carries no path and no is_dir"},
      {RawEvent(1, 0, "a", "") + "!", "WATCH_EVENTS: 1 trailing bytes"},
      // A count the bytes cannot hold is refused before anything is reserved.
      {"\xff\xff\xff\xff"s + RawEvent(1, 0, "a", "").substr(4),
       "WATCH_EVENTS.events: count 4294967295 cannot fit in 11 bytes"},
  };
  for (const Case& c : cases) {
    auto r = WatchEvents::Decode(c.payload);
    ASSERT_FALSE(r.ok()) << c.error;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message().substr(0, c.error.size()), c.error) << r.error().message();
    EXPECT_FALSE(CheckPayload(Type::kWatchEvents, c.payload).ok()) << c.error;
  }
  // The longest path that passes.
  EXPECT_TRUE(WatchEvents::Decode(RawEvent(1, 0, std::string(kMaxWatchPath, 'a'), "")).ok());
  EXPECT_TRUE(CheckWatchPath("a/b/c", "x").ok());
  EXPECT_FALSE(CheckWatchPath(".", "x").ok());
}

// Every truncation of a valid payload fails, and random bytes either fail or re-encode to
// themselves (the decoder is canonical).
TEST(WatchMessagesTest, TruncationsFailAndRandomInputIsCanonicalOrRefused) {
  const std::string good = WatchEvents{
      {Ev(WatchEventKind::kMove, "new/x", "old/x", true),
       Ev(WatchEventKind::kCreate,
          "f")}}.Encode();
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(WatchEvents::Decode(good.substr(0, n)).ok()) << n;
  }
  std::mt19937 rng(19);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string p = good;
    // Flip a few bytes, or cut/extend: mostly mutations close to a valid payload.
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) p[rng() % p.size()] = static_cast<char>(rng() % 256);
    if (rng() % 4 == 0) p.resize(rng() % (p.size() + 8), 'a');
    auto r = WatchEvents::Decode(p);
    if (r.ok()) {
      ++accepted;
      EXPECT_EQ(r->Encode(), p);
      for (const auto& e : r->events) {
        if (e.kind != WatchEventKind::kOverflow) {
          EXPECT_TRUE(CheckWatchPath(e.path, "p").ok());
        }
      }
    }
  }
  EXPECT_GT(accepted, 0);  // the mutations reach the accepting paths too
}

}  // namespace
}  // namespace agvisor::proto
