// Small string helpers without third-party code, for the host and the static agent alike.
//
// Used by base/tar_stream.cc (tar entry names and link targets, split on '/') and the agent's
// spawn (the directories of $PATH, split on ':').
#pragma once

#include <string_view>
#include <vector>

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

}  // namespace agvisor
