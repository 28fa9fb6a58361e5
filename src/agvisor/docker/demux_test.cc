#include "agvisor/docker/demux.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace agvisor::docker {
namespace {

struct Collected {
  std::string out, err, in;
  std::vector<std::size_t> piece_sizes;
};

Demuxer::Emit Collect(Collected& c) {
  return [&c](StreamKind s, std::string_view b) {
    EXPECT_FALSE(b.empty());
    c.piece_sizes.push_back(b.size());
    (s == StreamKind::kStdout ? c.out : s == StreamKind::kStderr ? c.err : c.in).append(b);
  };
}

// Frames of every shape: empty, one byte, header-sized, large (> 64 KiB, spans several reads).
struct Stream {
  std::string wire, out, err, in;
};

Stream MakeStream() {
  Stream s;
  auto add = [&](StreamKind k, std::string payload) {
    s.wire += EncodeFrame(k, payload);
    (k == StreamKind::kStdout ? s.out : k == StreamKind::kStderr ? s.err : s.in) += payload;
  };
  std::string large(70000, '\0');
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 31 + 7);
  add(StreamKind::kStdout, "hi\n");
  add(StreamKind::kStderr, "");
  add(StreamKind::kStderr, "e");
  add(StreamKind::kStdout, "");
  add(StreamKind::kStdout, std::string(8, '\x01'));  // payload that looks like a header
  add(StreamKind::kStderr, large);
  add(StreamKind::kStdin, "in");
  add(StreamKind::kStdout, std::string("\0\0\0bin\xff", 7));
  add(StreamKind::kStdout, "tail");
  return s;
}

void ExpectMatches(const Stream& s, const Collected& c) {
  EXPECT_EQ(c.out, s.out);
  EXPECT_EQ(c.err, s.err);
  EXPECT_EQ(c.in, s.in);
}

TEST(DemuxTest, WholeStream) {
  const Stream s = MakeStream();
  Demuxer d;
  Collected c;
  ASSERT_TRUE(d.Feed(s.wire, Collect(c)).ok());
  ASSERT_TRUE(d.Finish().ok());
  ExpectMatches(s, c);
}

TEST(DemuxTest, EverySingleSplitPoint) {
  const Stream s = MakeStream();
  for (std::size_t split = 0; split <= s.wire.size(); ++split) {
    Demuxer d;
    Collected c;
    const std::string_view w = s.wire;
    ASSERT_TRUE(d.Feed(w.substr(0, split), Collect(c)).ok()) << split;
    ASSERT_TRUE(d.Feed(w.substr(split), Collect(c)).ok()) << split;
    ASSERT_TRUE(d.Finish().ok()) << split;
    ASSERT_EQ(c.out, s.out) << split;
    ASSERT_EQ(c.err, s.err) << split;
    ASSERT_EQ(c.in, s.in) << split;
  }
}

TEST(DemuxTest, ByteByByte) {
  const Stream s = MakeStream();
  Demuxer d;
  Collected c;
  for (char ch : s.wire) {
    ASSERT_TRUE(d.Feed(std::string_view(&ch, 1), Collect(c)).ok());
  }
  ASSERT_TRUE(d.Finish().ok());
  ExpectMatches(s, c);
}

TEST(DemuxTest, RandomChunkings) {
  const Stream s = MakeStream();
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::uniform_int_distribution<std::size_t> len(0, round % 2 ? 20 : 9000);
    Demuxer d;
    Collected c;
    std::string_view w = s.wire;
    while (!w.empty()) {
      const std::size_t n = std::min(len(rng), w.size());
      ASSERT_TRUE(d.Feed(w.substr(0, n), Collect(c)).ok());
      w.remove_prefix(n);
    }
    ASSERT_TRUE(d.Finish().ok());
    ExpectMatches(s, c);
  }
}

TEST(DemuxTest, EmitsPayloadWithoutWaitingForTheWholeFrame) {
  Demuxer d;
  Collected c;
  const std::string frame = EncodeFrame(StreamKind::kStdout, "abcdef");
  ASSERT_TRUE(d.Feed(std::string_view(frame).substr(0, 10), Collect(c)).ok());
  EXPECT_EQ(c.out, "ab");
  EXPECT_FALSE(d.at_frame_boundary());
  EXPECT_EQ(d.Finish().error().code(), ErrorCode::kInternal);  // truncated
  ASSERT_TRUE(d.Feed(std::string_view(frame).substr(10), Collect(c)).ok());
  EXPECT_EQ(c.out, "abcdef");
  EXPECT_TRUE(d.at_frame_boundary());
}

TEST(DemuxTest, TruncatedHeaderIsAnError) {
  Demuxer d;
  Collected c;
  ASSERT_TRUE(d.Feed(std::string("\x01\0\0", 3), Collect(c)).ok());
  auto r = d.Finish();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("header"), std::string::npos);
}

TEST(DemuxTest, MalformedHeaderIsAnErrorAndSticks) {
  for (const std::string& bad :
       {std::string("\x03\0\0\0\0\0\0\x01x", 9), std::string("\x01\x01\0\0\0\0\0\x01x", 9)}) {
    Demuxer d;
    Collected c;
    ASSERT_TRUE(d.Feed(EncodeFrame(StreamKind::kStdout, "ok"), Collect(c)).ok());
    auto r = d.Feed(bad, Collect(c));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kInternal);
    EXPECT_FALSE(d.Feed(EncodeFrame(StreamKind::kStdout, "more"), Collect(c)).ok());
    EXPECT_FALSE(d.Finish().ok());
    EXPECT_EQ(c.out, "ok");
  }
}

TEST(DemuxTest, TtyTextIsRejectedNotMisread) {
  // A TTY stream starts with text: 'h' (0x68) is no stream type.
  Demuxer d;
  Collected c;
  EXPECT_FALSE(d.Feed("hello world\n", Collect(c)).ok());
}

TEST(DemuxTest, EncodeFrameHeader) {
  const std::string f = EncodeFrame(StreamKind::kStderr, std::string(0x010203, 'x'));
  ASSERT_GE(f.size(), 8u);
  EXPECT_EQ(f.substr(0, 8), std::string("\x02\0\0\0\x00\x01\x02\x03", 8));
}

}  // namespace
}  // namespace agvisor::docker
