#include "agvisor/desktop/vnc.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>

namespace agvisor::vnc {
namespace {

std::string Hex(std::span<const std::uint8_t> b) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (auto c : b) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 0xf]);
  }
  return out;
}
std::string Hex(std::string_view s) {
  return Hex(
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()));
}

TEST(Des, TextbookVector) {
  // The worked example of FIPS 46 tutorials: key 133457799BBCDFF1, plaintext 0123456789ABCDEF.
  const std::uint8_t key[8] = {0x13, 0x34, 0x57, 0x79, 0x9b, 0xbc, 0xdf, 0xf1};
  const std::uint8_t block[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  EXPECT_EQ(Hex(DesEncryptBlock(key, block)), "85e813540f0ab405");
}

TEST(Des, AllZeroKeyAndBlock) {
  const std::uint8_t zero[8] = {};
  EXPECT_EQ(Hex(DesEncryptBlock(zero, zero)), "8ca64de9c1b123a7");
}

TEST(Vnc, PasswordFileMatchesVncpasswd) {
  // `vncpasswd -f` of "password" (a widely published value).
  EXPECT_EQ(Hex(VncPasswordFile("password")), "dbd83cfd727a1458");
  // Only 8 bytes count.
  EXPECT_EQ(VncPasswordFile("password-longer"), VncPasswordFile("password"));
}

TEST(Vnc, AuthResponse) {
  // Cross-checked with `openssl enc -des-ecb -nopad` (legacy provider) and the key bytes
  // bit-reversed by hand.
  std::array<std::uint8_t, 16> challenge{};
  for (std::size_t i = 0; i < challenge.size(); ++i) challenge[i] = static_cast<std::uint8_t>(i);
  EXPECT_EQ(Hex(VncAuthResponse("secret12", challenge)), "adcd997f8e16fee575e973f93c2b62b4");
  // Short passwords are zero padded.
  EXPECT_EQ(Hex(VncAuthResponse("pw", challenge)), "858600d9af143c9e6541d3dd92a835d0");
  // Only the first 8 bytes count.
  EXPECT_EQ(VncAuthResponse("secret12-and-more", challenge),
            VncAuthResponse("secret12", challenge));
  // Another challenge and key, computed with an independent DES (python3-cryptography) and
  // bit-mirrored key bytes.
  for (std::size_t i = 0; i < challenge.size(); ++i) {
    challenge[i] = static_cast<std::uint8_t>(0xff - i);
  }
  EXPECT_EQ(Hex(VncAuthResponse("ab", challenge)), "2112f9f0ef3e1873961b087ad21d4a1c");
}

// A scripted server: what it sends, queued; what the client writes, collected.
struct FakeServer {
  std::deque<std::string> to_client;
  std::string from_client;
  std::string pending;
  ByteStream Stream() {
    return ByteStream{.read = [this](std::span<char> buf) -> Result<std::size_t> {
                        if (pending.empty()) {
                          if (to_client.empty()) return std::size_t{0};
                          pending = to_client.front();
                          to_client.pop_front();
                        }
                        // One byte at a time: the client must cope with every split point.
                        buf[0] = pending[0];
                        pending.erase(0, 1);
                        return std::size_t{1};
                      },
                      .write = [this](std::string_view d) -> Result<void> {
                        from_client.append(d);
                        return Ok();
                      }};
  }
};

std::string Be16(std::uint16_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v)}; }
std::string Be32(std::uint32_t v) {
  return Be16(static_cast<std::uint16_t>(v >> 16)) + Be16(v & 0xffff);
}

std::string ServerInitBytes(std::uint16_t w, std::uint16_t h, std::string_view name) {
  return Be16(w) + Be16(h) + std::string(16, '\0') + Be32(static_cast<std::uint32_t>(name.size())) +
         std::string(name);
}

TEST(Rfb, HandshakeWithVncAuth) {
  FakeServer srv;
  std::string challenge(16, '\0');
  for (int i = 0; i < 16; ++i) challenge[static_cast<std::size_t>(i)] = static_cast<char>(i);
  srv.to_client = {"RFB 003.008\n", std::string("\x02\x01\x02", 3), challenge, Be32(0),
                   ServerInitBytes(1280, 800, "agvisor")};
  auto init = Handshake(srv.Stream(), "secret12");
  ASSERT_TRUE(init.ok()) << init.error().message();
  EXPECT_EQ(init->version, "RFB 003.008");
  EXPECT_EQ(init->types, (std::vector<std::uint8_t>{1, 2}));
  EXPECT_EQ(init->width, 1280);
  EXPECT_EQ(init->height, 800);
  EXPECT_EQ(init->name, "agvisor");
  // Version, type 2, the DES response, ClientInit shared.
  ASSERT_EQ(srv.from_client.size(), 12u + 1 + 16 + 1);
  EXPECT_EQ(srv.from_client.substr(0, 13), std::string("RFB 003.008\n\x02", 13));
  EXPECT_EQ(Hex(srv.from_client.substr(13, 16)), "adcd997f8e16fee575e973f93c2b62b4");
  EXPECT_EQ(srv.from_client.back(), '\x01');
}

TEST(Rfb, WrongPasswordIsPermissionDenied) {
  FakeServer srv;
  srv.to_client = {"RFB 003.008\n", std::string("\x01\x02", 2), std::string(16, 'c'), Be32(1),
                   Be32(19) + "Authentication fail"};
  auto init = Handshake(srv.Stream(), "nope");
  ASSERT_FALSE(init.ok());
  EXPECT_EQ(init.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(init.error().message().find("Authentication fail"), std::string::npos);
}

TEST(Rfb, NoSecurityTypeItCanAnswerIsUnsupported) {
  FakeServer srv;
  srv.to_client = {"RFB 003.008\n", std::string("\x02\x12\x13", 3)};
  auto init = Handshake(srv.Stream(), "pw");
  ASSERT_FALSE(init.ok());
  EXPECT_EQ(init.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(init.error().message().find("offered 18, 19"), std::string::npos);
}

TEST(Rfb, HandshakeWithoutSecurityOnAnOlderServer) {
  // RFB 3.7 with None only: no challenge, no SecurityResult.
  FakeServer srv;
  srv.to_client = {"RFB 003.007\n", std::string("\x01\x01", 2), ServerInitBytes(640, 480, "x")};
  auto init = Handshake(srv.Stream(), "pw");
  ASSERT_TRUE(init.ok()) << init.error().message();
  EXPECT_EQ(init->version, "RFB 003.007");
  EXPECT_EQ(init->types, std::vector<std::uint8_t>{1});
  EXPECT_EQ(init->width, 640);
  EXPECT_EQ(srv.from_client, std::string("RFB 003.007\n\x01\x01", 14));
}

TEST(Rfb, BytesBeforeClientInitAreRefused) {
  FakeServer srv;
  // A server that does not wait for ClientInit; the fake hands the client a whole chunk.
  srv.to_client = {"RFB 003.008\n", std::string("\x01\x02", 2), std::string(16, 'c'),
                   Be32(0) + ServerInitBytes(1, 1, "")};
  ByteStream whole = srv.Stream();
  whole.read = [&srv](std::span<char> buf) -> Result<std::size_t> {
    if (srv.to_client.empty()) return std::size_t{0};
    std::string chunk = srv.to_client.front();
    srv.to_client.pop_front();
    std::memcpy(buf.data(), chunk.data(), chunk.size());
    return chunk.size();
  };
  auto init = Handshake(whole, "pw");
  ASSERT_FALSE(init.ok());
  EXPECT_EQ(init.error().code(), ErrorCode::kInternal);
  EXPECT_NE(init.error().message().find("before ClientInit"), std::string::npos);
}

TEST(Rfb, NotVnc) {
  FakeServer srv;
  srv.to_client = {"HTTP/1.1 400 "};
  auto init = Handshake(srv.Stream(), "pw");
  ASSERT_FALSE(init.ok());
  EXPECT_EQ(init.error().code(), ErrorCode::kUnsupported);
}

TEST(Rfb, ClosedMidwayIsUnavailable) {
  FakeServer srv;
  srv.to_client = {"RFB 003.008\n", std::string("\x01", 1)};
  auto init = Handshake(srv.Stream(), "pw");
  ASSERT_FALSE(init.ok());
  EXPECT_EQ(init.error().code(), ErrorCode::kUnavailable);
}

// Pixels as the server sends them (B, G, R, x).
std::string Pixel(std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  return {static_cast<char>(b), static_cast<char>(g), static_cast<char>(r), '\0'};
}
std::string RectHeader(std::uint16_t x, std::uint16_t y, std::uint16_t w, std::uint16_t h) {
  return Be16(x) + Be16(y) + Be16(w) + Be16(h) + Be32(0);
}

TEST(Rfb, CaptureAssemblesRectanglesAndSkipsOtherMessages) {
  FakeServer srv;
  // A 2x2 screen sent as a bell, then one update of two 2x1 rows.
  srv.to_client = {std::string("\x02", 1), std::string("\x00\x00", 2) + Be16(2) +
                                               RectHeader(0, 1, 2, 1) + Pixel(1, 2, 3) +
                                               Pixel(4, 5, 6) + RectHeader(0, 0, 2, 1) +
                                               Pixel(7, 8, 9) + Pixel(10, 11, 12)};
  ServerInit init;
  init.width = 2;
  init.height = 2;
  auto img = CaptureFramebuffer(srv.Stream(), init);
  ASSERT_TRUE(img.ok()) << img.error().message();
  EXPECT_EQ(img->rgb, std::string("\x07\x08\x09\x0a\x0b\x0c\x01\x02\x03\x04\x05\x06", 12));
  // SetPixelFormat (20) + SetEncodings (8) + FramebufferUpdateRequest (10).
  ASSERT_EQ(srv.from_client.size(), 38u);
  EXPECT_EQ(srv.from_client[0], '\x00');
  EXPECT_EQ(srv.from_client[4], '\x20');  // 32 bits per pixel
  EXPECT_EQ(srv.from_client[20], '\x02');
  EXPECT_EQ(srv.from_client[28], '\x03');
  EXPECT_EQ(srv.from_client[29], '\x00');  // not incremental
}

TEST(Rfb, CaptureRefusesEncodingsNotAskedFor) {
  FakeServer srv;
  srv.to_client = {std::string("\x00\x00", 2) + Be16(1) + Be16(0) + Be16(0) + Be16(1) + Be16(1) +
                   Be32(16)};
  ServerInit init;
  init.width = init.height = 1;
  auto img = CaptureFramebuffer(srv.Stream(), init);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kInternal);
}

TEST(Keys, TextBecomesKeysyms) {
  auto k = KeysymsForText("aZ 9~\n\t\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80");  // é ✓ 😀
  ASSERT_TRUE(k.ok()) << k.error().message();
  EXPECT_EQ(*k, (std::vector<std::uint32_t>{'a', 'Z', ' ', '9', '~', 0xff0d, 0xff09, 0xe9,
                                            0x1002713, 0x101f600}));
  EXPECT_TRUE(KeysymsForText("")->empty());
  EXPECT_EQ(*KeysymsForText("\r"), std::vector<std::uint32_t>{0xff0d});
}

TEST(Keys, BadTextIsRefusedWithWhere) {
  for (std::string_view bad : {std::string_view("ab\xc3"), std::string_view("\xff"),
                               std::string_view("\xc0\xaf"),          // overlong '/'
                               std::string_view("\xed\xa0\x80"),      // a surrogate
                               std::string_view("\xf4\x90\x80\x80"),  // past U+10FFFF
                               std::string_view("\xe2\x28\xa1")}) {
    auto k = KeysymsForText(bad);
    ASSERT_FALSE(k.ok()) << Hex(bad);
    EXPECT_EQ(k.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(k.error().message().find("not valid UTF-8"), std::string::npos);
  }
  auto esc = KeysymsForText("a\x1b");
  ASSERT_FALSE(esc.ok());
  EXPECT_NE(esc.error().message().find("U+001B at byte 1"), std::string::npos)
      << esc.error().message();
}

TEST(Keys, TypingSendsPressAndReleaseThenWaitsForAnUpdate) {
  EXPECT_EQ(Hex(KeyEventMessage(0x1002713, true)), "0401000001002713");
  EXPECT_EQ(Hex(KeyEventMessage('a', false)), "0400000000000061");
  FakeServer srv;
  srv.to_client = {std::string("\x00\x00", 2) + Be16(1) + RectHeader(0, 0, 1, 1) + Pixel(1, 2, 3)};
  ServerInit init;
  init.width = init.height = 4;
  const std::uint32_t keys[] = {'h', 0xe9};
  ASSERT_TRUE(TypeKeysyms(srv.Stream(), init, keys).ok());
  // Four key events, then SetPixelFormat, SetEncodings and a request for one pixel.
  ASSERT_EQ(srv.from_client.size(), 4 * 8 + 38u);
  EXPECT_EQ(Hex(srv.from_client.substr(0, 32)),
            "0401000000000068"
            "0400000000000068"
            "04010000000000e9"
            "04000000000000e9");
  EXPECT_EQ(Hex(srv.from_client.substr(32 + 28)), "03000000000000010001");
  // No answer: the stream's end is an error, not a silent success.
  FakeServer gone;
  EXPECT_EQ(TypeKeysyms(gone.Stream(), init, keys).error().code(), ErrorCode::kUnavailable);
}

TEST(Png, RoundTrip) {
  RgbImage img;
  img.width = 3;
  img.height = 2;
  for (int i = 0; i < 18; ++i) img.rgb.push_back(static_cast<char>(i * 13));
  auto png = EncodePng(img);
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(png->substr(1, 3), "PNG");
  auto back = DecodePng(*png);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->width, 3u);
  EXPECT_EQ(back->height, 2u);
  EXPECT_EQ(back->rgb, img.rgb);
}

TEST(Png, RejectsBadInput) {
  RgbImage img;
  img.width = 2;
  img.height = 2;
  img.rgb = "short";
  EXPECT_EQ(EncodePng(img).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(DecodePng("not a png").error().code(), ErrorCode::kInvalidArgument);
  img.rgb.assign(12, 'x');
  auto png = *EncodePng(img);
  png[png.size() - 20] ^= 1;  // inside IDAT: its CRC no longer matches
  EXPECT_EQ(DecodePng(png).error().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agvisor::vnc
