// Small string helpers without third-party code, for the host and the static agent alike.
//
// Used by base/tar_stream.cc (tar entry names and link targets, split on '/') and the agent's
// spawn (the directories of $PATH, split on ':'); EscapeForTerminal by every line the `agvisor`
// CLI prints for people (src/agvisor/cli); RandomHex by agvisord's token and MCP session ids.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor {

// The fields of `s` between the `sep` characters, empty ones included: "a::b" -> {"a", "", "b"},
// "/a" -> {"", "a"}, "" -> {""}. The views point into `s`.
inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (std::size_t pos = 0;;) {
    const std::size_t end = s.find(sep, pos);
    if (end == std::string_view::npos) {
      out.push_back(s.substr(pos));
      return out;
    }
    out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
}

// `bytes` made safe to print on a terminal: what they say stays readable and nothing in them can
// act on the terminal (move the cursor, clear the screen, set the window title, hide text, ...).
// A sandbox chooses file names, argv, host names in its requests; printed raw, a name such as
// $'\e]0;owned\a\e[2J' would retitle and clear the user's terminal. Escaped, one for one:
//   \\ for a backslash (so the output is unambiguous), \e for ESC, \t \n \r, \xHH for the
//   other C0 controls and DEL, \xHH for each byte that is not part of valid UTF-8 (overlong
//   forms, surrogates and code points past U+10FFFF included), \uHHHH for the C1 controls
//   (U+0080-U+009F: CSI, OSC, ... for terminals that honour them), for the bidirectional
//   formatting characters (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069: they reorder
//   what is shown), for the line and paragraph separators U+2028, U+2029, and for invisible
//   format characters (U+200B-U+200D zero widths, U+2060-U+2064, U+206A-U+206F, U+FEFF,
//   U+FFF9-U+FFFB: two names that differ only by them look the same); \UHHHHHHHH for the tag
//   characters U+E0000-U+E007F (invisible, past U+FFFF).
// Every other character (printable ASCII, the rest of valid UTF-8) is kept as is. Machine output
// (--json) never goes through this: JSON escapes controls itself and keeps the exact bytes.
std::string EscapeForTerminal(std::string_view bytes);

// `bytes` as lower-case hex, two digits a byte: "\x01\xab" -> "01ab".
std::string HexEncode(std::string_view bytes);

// `n` bytes from the kernel's random source (getrandom(2), as OpenSSL seeds from) as 2n
// lower-case hex digits: secrets and ids no one may guess. Errors: those of getrandom
// (Error::FromErrno).
Result<std::string> RandomHex(std::size_t n);

}  // namespace agvisor
