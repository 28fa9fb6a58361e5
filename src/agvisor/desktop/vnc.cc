#include "agvisor/desktop/vnc.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "agvisor/desktop/des.h"
#include "agvisor/desktop/rfb.h"

namespace agvisor::vnc {
namespace {

// ---- RFB ----

Result<void> ReadExact(const ByteStream& s, char* p, std::size_t n, std::string_view what) {
  while (n > 0) {
    auto got = s.read(std::span<char>(p, n));
    if (!got.ok()) return got.error().WithContext("VNC: read " + std::string(what));
    if (*got == 0) {
      return Error::Unavailable("VNC: the server closed the connection while sending " +
                                std::string(what));
    }
    p += *got;
    n -= *got;
  }
  return Ok();
}

Result<std::string> ReadBytes(const ByteStream& s, std::size_t n, std::string_view what) {
  std::string out(n, '\0');
  AGVISOR_RETURN_IF_ERROR(ReadExact(s, out.data(), n, what));
  return out;
}

std::uint32_t Be32(std::string_view b, std::size_t at) {
  return (static_cast<std::uint32_t>(static_cast<std::uint8_t>(b[at])) << 24) |
         (static_cast<std::uint32_t>(static_cast<std::uint8_t>(b[at + 1])) << 16) |
         (static_cast<std::uint32_t>(static_cast<std::uint8_t>(b[at + 2])) << 8) |
         static_cast<std::uint8_t>(b[at + 3]);
}
std::uint16_t Be16(std::string_view b, std::size_t at) {
  return static_cast<std::uint16_t>((static_cast<std::uint8_t>(b[at]) << 8) |
                                    static_cast<std::uint8_t>(b[at + 1]));
}
void PutBe16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}
void PutBe32(std::string& out, std::uint32_t v) {
  PutBe16(out, static_cast<std::uint16_t>(v >> 16));
  PutBe16(out, static_cast<std::uint16_t>(v & 0xffff));
}

// ---- PNG ----

void PutChunk(std::string& out, const char type[4], std::string_view data) {
  PutBe32(out, static_cast<std::uint32_t>(data.size()));
  std::string body(type, 4);
  body.append(data);
  out.append(body);
  uLong crc =
      crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  PutBe32(out, static_cast<std::uint32_t>(crc));
}

constexpr std::string_view kPngSignature("\x89PNG\r\n\x1a\n", 8);

}  // namespace

std::array<std::uint8_t, 16> VncAuthResponse(std::string_view password,
                                             std::span<const std::uint8_t, 16> challenge) {
  const auto key = VncKey(password);
  std::array<std::uint8_t, 16> out{};
  for (std::size_t half = 0; half < 2; ++half) {
    auto block = DesEncryptBlock(key, challenge.subspan(half * 8).first<8>());
    std::memcpy(out.data() + half * 8, block.data(), 8);
  }
  return out;
}

Result<ServerInit> Handshake(const ByteStream& s, std::string_view password) {
  // The security handshake is RfbClientHandshake's (rfb.h), the one the gateway uses too.
  RfbClientHandshake rfb{std::string(password)};
  std::array<char, 512> buf;
  for (bool done = false; !done;) {
    auto n = s.read(buf);
    if (!n.ok()) return n.error().WithContext("VNC: read the server's handshake");
    if (*n == 0) {
      return Error::Unavailable("VNC: the server closed the connection during the handshake");
    }
    auto step = rfb.Feed(std::string_view(buf.data(), *n));
    if (!step.ok()) return step.error();
    if (!step->send.empty()) AGVISOR_RETURN_IF_ERROR(s.write(step->send));
    done = step->done;
  }
  // The server speaks next only after ClientInit.
  if (!rfb.leftover().empty()) {
    return Error::Internal("VNC: the server sent " + std::to_string(rfb.leftover().size()) +
                           " bytes before ClientInit");
  }
  ServerInit init;
  init.version = rfb.server_version();
  init.types = rfb.offered_types();
  AGVISOR_RETURN_IF_ERROR(s.write(std::string(1, '\x01')));  // ClientInit: shared
  std::string si = AGVISOR_TRY(ReadBytes(s, 24, "its ServerInit"));
  init.width = Be16(si, 0);
  init.height = Be16(si, 2);
  auto name_len = Be32(si, 20);
  if (name_len > 4096) return Error::Internal("VNC: desktop name of " + std::to_string(name_len));
  init.name = AGVISOR_TRY(ReadBytes(s, name_len, "the desktop name"));
  return init;
}

namespace {

// Asks for the rectangle (x, y, w, h) in Raw encoding at 32 bits per pixel and reads the updates
// until it is covered; the pixels land in `img` (the whole screen's size).
Result<void> CaptureRect(const ByteStream& s, std::uint16_t x0, std::uint16_t y0, std::uint16_t w0,
                         std::uint16_t h0, RgbImage& img) {
  std::string req;
  // SetPixelFormat: 32 bits per pixel, depth 24, little endian, true colour, 8 bits per
  // channel at shifts 16 (red), 8 (green), 0 (blue): pixels arrive as B, G, R, x bytes.
  req += std::string("\x00\x00\x00\x00", 4);
  req += std::string("\x20\x18\x00\x01", 4);
  PutBe16(req, 255);
  PutBe16(req, 255);
  PutBe16(req, 255);
  req += std::string("\x10\x08\x00\x00\x00\x00", 6);
  // SetEncodings: Raw only.
  req += std::string("\x02\x00", 2);
  PutBe16(req, 1);
  PutBe32(req, 0);
  // FramebufferUpdateRequest: not incremental.
  req += std::string("\x03\x00", 2);
  PutBe16(req, x0);
  PutBe16(req, y0);
  PutBe16(req, w0);
  PutBe16(req, h0);
  AGVISOR_RETURN_IF_ERROR(s.write(req));

  std::uint64_t covered = 0;
  const std::uint64_t total = static_cast<std::uint64_t>(w0) * h0;
  std::string row;
  while (covered < total) {
    auto type = static_cast<std::uint8_t>(AGVISOR_TRY(ReadBytes(s, 1, "a message type"))[0]);
    switch (type) {
      case 0: {  // FramebufferUpdate
        std::string h = AGVISOR_TRY(ReadBytes(s, 3, "an update header"));
        std::uint16_t rects = Be16(h, 1);
        for (std::uint16_t i = 0; i < rects; ++i) {
          std::string r = AGVISOR_TRY(ReadBytes(s, 12, "a rectangle header"));
          std::uint16_t x = Be16(r, 0), y = Be16(r, 2), w = Be16(r, 4), hh = Be16(r, 6);
          auto encoding = static_cast<std::int32_t>(Be32(r, 8));
          if (encoding != 0) {
            return Error::Internal("VNC: the server sent encoding " + std::to_string(encoding) +
                                   " though only Raw (0) was asked for");
          }
          if (x + w > img.width || y + hh > img.height) {
            return Error::Internal("VNC: a rectangle outside the screen");
          }
          for (std::uint16_t line = 0; line < hh; ++line) {
            row = AGVISOR_TRY(ReadBytes(s, static_cast<std::size_t>(w) * 4, "pixels"));
            char* dst = img.rgb.data() + ((static_cast<std::size_t>(y) + line) * img.width + x) * 3;
            for (std::uint16_t px = 0; px < w; ++px) {
              dst[px * 3] = row[px * 4 + 2];
              dst[px * 3 + 1] = row[px * 4 + 1];
              dst[px * 3 + 2] = row[px * 4];
            }
          }
          covered += static_cast<std::uint64_t>(w) * hh;
        }
        break;
      }
      case 1: {  // SetColourMapEntries (not used in true colour; skipped)
        std::string h = AGVISOR_TRY(ReadBytes(s, 5, "a colour map header"));
        (void)AGVISOR_TRY(ReadBytes(s, static_cast<std::size_t>(Be16(h, 3)) * 6, "colours"));
        break;
      }
      case 2:  // Bell
        break;
      case 3: {  // ServerCutText
        std::string h = AGVISOR_TRY(ReadBytes(s, 7, "a clipboard header"));
        std::uint32_t len = Be32(h, 3);
        if (len > (64u << 20))
          return Error::Internal("VNC: clipboard text of " + std::to_string(len));
        (void)AGVISOR_TRY(ReadBytes(s, len, "clipboard text"));
        break;
      }
      default:
        return Error::Internal("VNC: unexpected server message type " + std::to_string(type));
    }
  }
  return Ok();
}

constexpr std::uint32_t kMaxScreenSide = 8192;

// The screen size is the sandbox's word (its VNC server): bounded before it sizes a buffer
// (8192x8192 RGB is 192 MiB; u16 sides would allow 12 GB).
Result<void> CheckScreen(const ServerInit& init) {
  if (init.width == 0 || init.height == 0) {
    return Error::Internal("VNC: the server's screen is empty (0x0)");
  }
  if (init.width > kMaxScreenSide || init.height > kMaxScreenSide) {
    return Error::InvalidArgument("VNC: the server's screen of " + std::to_string(init.width) +
                                  "x" + std::to_string(init.height) + " is larger than " +
                                  std::to_string(kMaxScreenSide) + " on a side");
  }
  return Ok();
}

}  // namespace

Result<RgbImage> CaptureFramebuffer(const ByteStream& s, const ServerInit& init) {
  AGVISOR_RETURN_IF_ERROR(CheckScreen(init));
  RgbImage img;
  img.width = init.width;
  img.height = init.height;
  img.rgb.assign(static_cast<std::size_t>(img.width) * img.height * 3, '\0');
  AGVISOR_RETURN_IF_ERROR(CaptureRect(s, 0, 0, init.width, init.height, img));
  return img;
}

Result<std::vector<std::uint32_t>> KeysymsForText(std::string_view text) {
  std::vector<std::uint32_t> out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    std::size_t len = b0 < 0x80         ? 1
                      : (b0 >> 5) == 6  ? 2
                      : (b0 >> 4) == 14 ? 3
                      : (b0 >> 3) == 30 ? 4
                                        : 0;
    auto bad = [&] {
      return Error::InvalidArgument("type: the text is not valid UTF-8 (at byte " +
                                    std::to_string(i) + ")");
    };
    if (len == 0 || i + len > text.size()) return bad();
    std::uint32_t cp = len == 1 ? b0 : b0 & (0x7f >> len);
    for (std::size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xc0) != 0x80) return bad();
      cp = (cp << 6) | (b & 0x3f);
    }
    // Overlong forms, surrogates and values past Unicode are not characters.
    static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return bad();
    if (cp == '\n' || cp == '\r') {
      out.push_back(0xff0d);  // Return
    } else if (cp == '\t') {
      out.push_back(0xff09);  // Tab
    } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
      char name[8];
      std::snprintf(name, sizeof name, "U+%04X", static_cast<unsigned>(cp));
      return Error::InvalidArgument("type: control character " + std::string(name) + " at byte " +
                                    std::to_string(i) +
                                    " cannot be typed (use a key combination for it)");
    } else if (cp < 0x100) {
      out.push_back(cp);  // ASCII and Latin-1 keysyms are their code points
    } else {
      out.push_back(0x01000000 | cp);  // X's Unicode keysyms
    }
    i += len;
  }
  return out;
}

std::string KeyEventMessage(std::uint32_t keysym, bool down) {
  std::string m;
  m.push_back('\x04');
  m.push_back(down ? '\x01' : '\x00');
  m.append(2, '\0');
  PutBe32(m, keysym);
  return m;
}

Result<void> TypeKeysyms(const ByteStream& s, const ServerInit& init,
                         std::span<const std::uint32_t> keysyms) {
  AGVISOR_RETURN_IF_ERROR(CheckScreen(init));
  std::string msgs;
  msgs.reserve(keysyms.size() * 16);
  for (std::uint32_t k : keysyms) {
    msgs += KeyEventMessage(k, true);
    msgs += KeyEventMessage(k, false);
  }
  AGVISOR_RETURN_IF_ERROR(s.write(msgs));
  // The server handles a client's messages in order: once a one-pixel update asked for after
  // the keys arrives, the keys have been put into the X server.
  RgbImage pixel;
  pixel.width = init.width;
  pixel.height = init.height;
  pixel.rgb.assign(static_cast<std::size_t>(pixel.width) * pixel.height * 3, '\0');
  return CaptureRect(s, 0, 0, 1, 1, pixel);
}

Result<std::string> EncodePng(const RgbImage& image) {
  if (image.width == 0 || image.height == 0 ||
      image.rgb.size() != static_cast<std::size_t>(image.width) * image.height * 3) {
    return Error::InvalidArgument("PNG: image of " + std::to_string(image.width) + "x" +
                                  std::to_string(image.height) + " with " +
                                  std::to_string(image.rgb.size()) + " bytes of RGB");
  }
  // Each row starts with its filter type: 0 (none).
  const std::size_t stride = static_cast<std::size_t>(image.width) * 3;
  std::string raw;
  raw.reserve((stride + 1) * image.height);
  for (std::uint32_t y = 0; y < image.height; ++y) {
    raw.push_back('\0');
    raw.append(image.rgb, y * stride, stride);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::string z(zlen, '\0');
  int rc = compress2(reinterpret_cast<Bytef*>(z.data()), &zlen,
                     reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()), 6);
  if (rc != Z_OK) return Error::Internal("PNG: zlib compress2 failed (" + std::to_string(rc) + ")");
  z.resize(zlen);

  std::string out(kPngSignature);
  std::string ihdr;
  PutBe32(ihdr, image.width);
  PutBe32(ihdr, image.height);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bits, RGB, deflate, filter 0, no interlace
  PutChunk(out, "IHDR", ihdr);
  PutChunk(out, "IDAT", z);
  PutChunk(out, "IEND", "");
  return out;
}

Result<RgbImage> DecodePng(std::string_view png) {
  if (!png.starts_with(kPngSignature)) return Error::InvalidArgument("PNG: no PNG signature");
  RgbImage img;
  std::string z;
  bool end = false;
  for (std::size_t at = 8; !end;) {
    if (at + 12 > png.size()) return Error::InvalidArgument("PNG: truncated chunk");
    std::uint32_t len = Be32(png, at);
    if (len > png.size() - at - 12) return Error::InvalidArgument("PNG: chunk past the end");
    std::string_view type = png.substr(at + 4, 4);
    std::string_view data = png.substr(at + 8, len);
    uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(png.data() + at + 4), len + 4);
    if (crc != Be32(png, at + 8 + len)) {
      return Error::InvalidArgument("PNG: bad CRC in chunk " + std::string(type));
    }
    if (type == "IHDR") {
      if (len != 13) return Error::InvalidArgument("PNG: IHDR of " + std::to_string(len));
      img.width = Be32(data, 0);
      img.height = Be32(data, 4);
      if (data[8] != 8 || data[9] != 2 || data[12] != 0) {
        return Error::InvalidArgument("PNG: only 8-bit RGB non-interlaced images are decoded");
      }
      if (img.width == 0 || img.height == 0 || img.width > 16384 || img.height > 16384) {
        return Error::InvalidArgument("PNG: size " + std::to_string(img.width) + "x" +
                                      std::to_string(img.height));
      }
    } else if (type == "IDAT") {
      z.append(data);
    } else if (type == "IEND") {
      end = true;
    }
    at += 12 + len;
  }
  if (img.width == 0) return Error::InvalidArgument("PNG: no IHDR");
  const std::size_t stride = static_cast<std::size_t>(img.width) * 3;
  std::string raw((stride + 1) * img.height, '\0');
  uLongf rawlen = static_cast<uLongf>(raw.size());
  if (uncompress(reinterpret_cast<Bytef*>(raw.data()), &rawlen,
                 reinterpret_cast<const Bytef*>(z.data()), static_cast<uLong>(z.size())) != Z_OK ||
      rawlen != raw.size()) {
    return Error::InvalidArgument("PNG: image data does not inflate to the IHDR's size");
  }
  img.rgb.assign(stride * img.height, '\0');
  auto out = reinterpret_cast<std::uint8_t*>(img.rgb.data());
  auto in = reinterpret_cast<const std::uint8_t*>(raw.data());
  for (std::size_t y = 0; y < img.height; ++y) {
    const std::uint8_t filter = in[y * (stride + 1)];
    const std::uint8_t* src = in + y * (stride + 1) + 1;
    std::uint8_t* cur = out + y * stride;
    const std::uint8_t* prev = y > 0 ? out + (y - 1) * stride : nullptr;
    for (std::size_t i = 0; i < stride; ++i) {
      int a = i >= 3 ? cur[i - 3] : 0;
      int b = prev ? prev[i] : 0;
      int c = prev && i >= 3 ? prev[i - 3] : 0;
      int pred = 0;
      switch (filter) {
        case 0:
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4: {
          int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default:
          return Error::InvalidArgument("PNG: unknown filter type " + std::to_string(filter));
      }
      cur[i] = static_cast<std::uint8_t>(src[i] + pred);
    }
  }
  return img;
}

}  // namespace agvisor::vnc
