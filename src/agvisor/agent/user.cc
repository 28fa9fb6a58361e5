#include "agvisor/agent/user.h"

#include <optional>

#include "agvisor/base/fs.h"

namespace agvisor::agent {
namespace {

std::optional<std::uint32_t> ParseId(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > 0xFFFFFFFEu) return std::nullopt;  // (uid_t)-1 means "no change" to setuid
  return static_cast<std::uint32_t>(v);
}

std::vector<std::string_view> Split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    auto p = line.find(sep);
    out.push_back(line.substr(0, p));
    if (p == std::string_view::npos) return out;
    line.remove_prefix(p + 1);
  }
}

// Calls fn(fields) for each non-comment line of a colon-separated database.
template <typename F>
void ForEachEntry(std::string_view db, F fn) {
  for (std::string_view line : Split(db, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    if (!fn(Split(line, ':'))) return;
  }
}

std::string ReadFileOrEmpty(const char* path) {
  // A hostile database stops at 16 MiB: what came by then is enough.
  return ReadSmallFile(path, 16u << 20).value_or(std::string());
}

}  // namespace

Result<UserIds> ResolveUser(std::string_view spec, std::string_view passwd,
                            std::string_view group) {
  if (spec.empty()) return Error::InvalidArgument("user: empty");
  auto colon = spec.find(':');
  std::string_view user = spec.substr(0, colon);
  std::optional<std::string_view> grp;
  if (colon != std::string_view::npos) grp = spec.substr(colon + 1);
  if (user.empty() || (grp && grp->empty()) || (grp && grp->find(':') != std::string_view::npos)) {
    return Error::InvalidArgument("user '" + std::string(spec) +
                                  "': expected USER[:GROUP] (names or numbers)");
  }
  UserIds ids;
  bool found = false;
  auto uid_number = ParseId(user);
  ForEachEntry(passwd, [&](const std::vector<std::string_view>& f) {
    if (f.size() < 7) return true;
    auto uid = ParseId(f[2]);
    auto gid = ParseId(f[3]);
    if (!uid || !gid) return true;
    if (uid_number ? *uid == *uid_number : f[0] == user) {
      ids.uid = *uid;
      ids.gid = *gid;
      ids.name = std::string(f[0]);
      ids.home = std::string(f[5]);
      found = true;
      return false;
    }
    return true;
  });
  if (!found) {
    if (!uid_number) {
      return Error::NotFound("user '" + std::string(user) + "': no such user in /etc/passwd");
    }
    ids.uid = *uid_number;
    ids.gid = 0;
  }
  if (grp) {
    auto gid_number = ParseId(*grp);
    bool gfound = false;
    ForEachEntry(group, [&](const std::vector<std::string_view>& f) {
      if (f.size() < 3) return true;
      auto gid = ParseId(f[2]);
      if (!gid) return true;
      if (gid_number ? *gid == *gid_number : f[0] == *grp) {
        ids.gid = *gid;
        gfound = true;
        return false;
      }
      return true;
    });
    if (!gfound) {
      if (!gid_number) {
        return Error::NotFound("group '" + std::string(*grp) + "': no such group in /etc/group");
      }
      ids.gid = *gid_number;
    }
  }
  ids.groups.push_back(ids.gid);
  if (!ids.name.empty()) {
    ForEachEntry(group, [&](const std::vector<std::string_view>& f) {
      if (f.size() < 4) return true;
      auto gid = ParseId(f[2]);
      if (!gid || *gid == ids.gid) return true;
      for (std::string_view member : Split(f[3], ',')) {
        if (member == ids.name) {
          ids.groups.push_back(*gid);
          break;
        }
      }
      return true;
    });
  }
  return ids;
}

Result<UserIds> LookupUser(std::string_view spec) {
  return ResolveUser(spec, ReadFileOrEmpty("/etc/passwd"), ReadFileOrEmpty("/etc/group"));
}

}  // namespace agvisor::agent
