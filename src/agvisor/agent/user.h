// Resolving the `user` of an EXEC ("name", "uid", "uid:gid", "name:group") to numeric ids.
//
// Used by the channel's exec (session.cc -> spawn.cc). The agent is a static binary, so glibc's
// NSS (getpwnam) is not usable: /etc/passwd and /etc/group are parsed here, the way Docker
// resolves `docker exec -u`. The parsing is pure and unit-tested (user_test.cc).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::agent {

struct UserIds {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (setgroups), the primary gid included
  std::string name;           // "" when the uid has no /etc/passwd entry
  std::string home;           // "" when unknown
};

// Pure. `spec` is USER[:GROUP]; USER is a name or a number, GROUP a name or a number. A numeric
// USER need not exist in `passwd` (gid 0 then, as Docker does). Errors: kInvalidArgument for an
// empty or malformed spec, kNotFound "user 'x': no such user in /etc/passwd" (or group).
Result<UserIds> ResolveUser(std::string_view spec, std::string_view passwd, std::string_view group);

// ResolveUser on the sandbox's /etc/passwd and /etc/group (a missing file reads as empty).
Result<UserIds> LookupUser(std::string_view spec);

}  // namespace agvisor::agent
