#include "agvisor/kube/websocket.h"

#include <gtest/gtest.h>

#include <vector>

namespace agvisor::kube {
namespace {

// A server frame (never masked), FIN as given.
std::string ServerFrame(std::uint8_t opcode, std::string_view payload, bool fin = true) {
  std::string out;
  out.push_back(static_cast<char>((fin ? 0x80 : 0) | opcode));
  const std::size_t n = payload.size();
  if (n < 126) {
    out.push_back(static_cast<char>(n));
  } else if (n <= 0xffff) {
    out.push_back(static_cast<char>(126));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(n & 0xff));
  } else {
    out.push_back(static_cast<char>(127));
    for (int shift = 56; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((static_cast<std::uint64_t>(n) >> shift) & 0xff));
    }
  }
  out.append(payload);
  return out;
}

// Every message the decoder gives for `bytes` fed in two pieces split at `split`.
std::vector<WsMessage> DecodeSplit(const std::string& bytes, std::size_t split) {
  WsDecoder d(1 << 20);
  std::vector<WsMessage> out;
  auto drain = [&] {
    for (;;) {
      auto m = d.Next();
      EXPECT_TRUE(m.ok()) << m.error().ToString();
      if (!m.ok() || !m->has_value()) return;
      out.push_back(std::move(**m));
    }
  };
  d.Feed(std::string_view(bytes).substr(0, split));
  drain();
  d.Feed(std::string_view(bytes).substr(split));
  drain();
  return out;
}

TEST(WebSocketTest, ClientFrameIsMaskedAndSized) {
  const std::array<std::uint8_t, 4> mask{1, 2, 3, 4};
  std::string f = EncodeClientFrame(WsOpcode::kBinary, "abc", mask);
  ASSERT_EQ(f.size(), 2u + 4u + 3u);
  EXPECT_EQ(static_cast<std::uint8_t>(f[0]), 0x82);
  EXPECT_EQ(static_cast<std::uint8_t>(f[1]), 0x80 | 3);
  EXPECT_EQ(f[6], 'a' ^ 1);
  EXPECT_EQ(f[7], 'b' ^ 2);
  EXPECT_EQ(f[8], 'c' ^ 3);
  std::string mid = EncodeClientFrame(WsOpcode::kBinary, std::string(300, 'x'), mask);
  EXPECT_EQ(static_cast<std::uint8_t>(mid[1]), 0x80 | 126);
  EXPECT_EQ(static_cast<std::uint8_t>(mid[2]), 1);
  EXPECT_EQ(static_cast<std::uint8_t>(mid[3]), 300 - 256);
  std::string big = EncodeClientFrame(WsOpcode::kBinary, std::string(70000, 'x'), mask);
  EXPECT_EQ(static_cast<std::uint8_t>(big[1]), 0x80 | 127);
  EXPECT_EQ(big.size(), 2u + 8u + 4u + 70000u);
}

TEST(WebSocketTest, DecodesAtEverySplitPoint) {
  std::string stream =
      ServerFrame(2, EncodeChannelMessage(KubeStream::kStdout, "hello")) + ServerFrame(9, "p") +
      ServerFrame(2, std::string("\x02") + std::string(200, 'e'), false) +
      ServerFrame(0, std::string(70000, 'f')) + ServerFrame(8, std::string("\x03\xe8", 2));
  for (std::size_t split = 0; split <= stream.size(); split += (split < 300 ? 1 : 997)) {
    auto msgs = DecodeSplit(stream, split);
    ASSERT_EQ(msgs.size(), 4u) << "split " << split;
    EXPECT_EQ(msgs[0].opcode, WsOpcode::kBinary);
    EXPECT_EQ(msgs[0].payload, std::string("\x01hello"));
    EXPECT_EQ(msgs[1].opcode, WsOpcode::kPing);
    EXPECT_EQ(msgs[2].opcode, WsOpcode::kBinary);
    EXPECT_EQ(msgs[2].payload.size(), 1u + 200u + 70000u);
    EXPECT_EQ(msgs[3].opcode, WsOpcode::kClose);
  }
}

TEST(WebSocketTest, RefusesWhatAServerMustNotSend) {
  auto fails = [](const std::string& bytes, std::size_t max = 1 << 20) {
    WsDecoder d(max);
    d.Feed(bytes);
    for (int i = 0; i < 4; ++i) {
      auto m = d.Next();
      if (!m.ok()) return m.error().code() == ErrorCode::kUnavailable;
      if (!m->has_value()) return false;
    }
    return false;
  };
  std::string masked = ServerFrame(2, "x");
  masked[1] = static_cast<char>(masked[1] | 0x80);
  EXPECT_TRUE(fails(masked + "abcd"));
  std::string reserved = ServerFrame(2, "x");
  reserved[0] = static_cast<char>(reserved[0] | 0x40);
  EXPECT_TRUE(fails(reserved));
  EXPECT_TRUE(fails(ServerFrame(3, "x")));                    // unknown opcode
  EXPECT_TRUE(fails(ServerFrame(9, "x", /*fin=*/false)));     // fragmented control
  EXPECT_TRUE(fails(ServerFrame(9, std::string(126, 'x'))));  // long control
  EXPECT_TRUE(fails(ServerFrame(0, "x")));                    // continuation first
  EXPECT_TRUE(fails(ServerFrame(2, "a", false) + ServerFrame(2, "b")));
  EXPECT_TRUE(fails(ServerFrame(2, std::string(101, 'x')), 100));
  EXPECT_TRUE(fails(
      ServerFrame(2, std::string(60, 'x'), false) + ServerFrame(0, std::string(60, 'x')), 100));
  // A header announcing 2^63 bytes is refused before any of them is awaited.
  std::string huge("\x82\x7f\x7f\xff\xff\xff\xff\xff\xff\xff", 10);
  EXPECT_TRUE(fails(huge));
}

TEST(WebSocketTest, HandshakeValues) {
  // RFC 6455 section 1.3's example.
  EXPECT_EQ(WebSocketAccept("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  std::string key = NewWebSocketKey();
  EXPECT_EQ(key.size(), 24u);
  EXPECT_NE(key, NewWebSocketKey());
  EXPECT_EQ(EncodeBase64("hello"), "aGVsbG8=");
}

TEST(ChannelTest, Messages) {
  EXPECT_EQ(EncodeChannelMessage(KubeStream::kStdin, "ab"), std::string("\x00"
                                                                        "ab",
                                                                        3));
  EXPECT_EQ(EncodeCloseStdin(), std::string("\xff\x00", 2));
  auto m = DecodeChannelMessage(std::string("\x01out"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->stream, KubeStream::kStdout);
  EXPECT_EQ(m->data, "out");
  m = DecodeChannelMessage(std::string("\x03{}"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->stream, KubeStream::kError);
  // A stream's opening message (the stream byte alone) is fine on any stream.
  EXPECT_TRUE(DecodeChannelMessage(std::string("\x00", 1)).ok());
  EXPECT_FALSE(DecodeChannelMessage("").ok());
  EXPECT_FALSE(DecodeChannelMessage(std::string("\x00x", 2)).ok());
  EXPECT_FALSE(DecodeChannelMessage(std::string("\x04x", 2)).ok());
  EXPECT_FALSE(DecodeChannelMessage(std::string("\xffx", 2)).ok());
}

}  // namespace
}  // namespace agvisor::kube
