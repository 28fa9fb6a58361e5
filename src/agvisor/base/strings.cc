#include "agvisor/base/strings.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>

namespace agvisor {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void AppendHex(std::string& out, unsigned char c) {
  out += kHex[c >> 4];
  out += kHex[c & 15];
}

void AppendHexByte(std::string& out, unsigned char c) {
  out += "\\x";
  AppendHex(out, c);
}

// "\uXXXX", or "\UXXXXXXXX" past U+FFFF.
void AppendCodePoint(std::string& out, std::uint32_t cp) {
  const bool wide = cp > 0xFFFF;
  out += wide ? "\\U" : "\\u";
  for (int shift = wide ? 28 : 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
}

// The code point of the UTF-8 sequence at the start of `s` and its length; length 0 when it is
// not a valid sequence (truncated, a stray continuation byte, overlong, a surrogate, > U+10FFFF).
std::pair<std::uint32_t, std::size_t> DecodeUtf8(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  std::size_t len;
  std::uint32_t cp;
  std::uint32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {0, 0};  // ASCII is handled by the caller; 0x80-0xC1 and 0xF5-0xFF never start one
  }
  if (s.size() < len) return {0, 0};
  for (std::size_t i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) != 0x80) return {0, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0, 0};
  return {cp, len};
}

// Characters that are valid but act on the terminal or on how the line is shown: C1 controls,
// bidirectional controls, line and paragraph separators, and invisible format characters (zero
// widths, invisible operators, deprecated format controls, the BOM, interlinear annotation
// marks, tag characters), which would make two different names look the same.
bool IsHiddenControl(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || (cp >= 0x200B && cp <= 0x200F) ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x2064) ||
         (cp >= 0x2066 && cp <= 0x206F) || cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF ||
         (cp >= 0xFFF9 && cp <= 0xFFFB) || (cp >= 0xE0000 && cp <= 0xE007F);
}

}  // namespace

std::string EscapeForTerminal(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const auto c = static_cast<unsigned char>(bytes[0]);
    if (c < 0x80) {
      switch (c) {
        case '\\':
          out += "\\\\";
          break;
        case 0x1B:
          out += "\\e";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        default:
          if (c < 0x20 || c == 0x7F) {
            AppendHexByte(out, c);
          } else {
            out += static_cast<char>(c);
          }
      }
      bytes.remove_prefix(1);
      continue;
    }
    const auto [cp, len] = DecodeUtf8(bytes);
    if (len == 0) {
      AppendHexByte(out, c);  // one invalid byte; decoding starts again at the next
      bytes.remove_prefix(1);
    } else {
      if (IsHiddenControl(cp)) {
        AppendCodePoint(out, cp);
      } else {
        out.append(bytes.substr(0, len));
      }
      bytes.remove_prefix(len);
    }
  }
  return out;
}

std::string HexEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char b : bytes) AppendHex(out, static_cast<unsigned char>(b));
  return out;
}

Result<std::string> RandomHex(std::size_t n) {
  std::string raw(n, '\0');
  for (std::size_t got = 0; got < n;) {
    const ssize_t r = ::getrandom(raw.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Error::FromErrno("getrandom", errno);
    }
    got += static_cast<std::size_t>(r);
  }
  return HexEncode(raw);
}

}  // namespace agvisor
