// `sudo` inside a sandbox with the sudo broker: the agent binary run as `sudo` (the symlink
// kSudoShimPath) or as `agvisor-agent sudo`. Parses sudo's options (sudo.h), sends the request
// with its stdio to the broker, passes SIGINT / SIGTERM / SIGHUP on, and exits as the command did.
//
// Used by agent_main.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::agent {

// `args` are the arguments after the program name; `socket_path` the broker's. Returns the exit
// code: the command's, 128+N for its signal N, 1 when it could not be run (the reason on stderr,
// e.g. no broker in this sandbox), 0 for -h.
int RunSudo(const std::vector<std::string>& args, const std::string& socket_path);

// Sends the request `payload` (EncodeSudoRequest) on the connection `fd`, framed as sudo.h says,
// with this process's fds 0, 1 and 2 attached to its first bytes. Errors: sendmsg's.
Result<void> SendSudoRequest(int fd, const std::string& payload);

// Sends `bytes` on `fd` with `fds` (at most 8) attached to the first of them: SendSudoRequest's
// means, and the unit tests' for requests no shim sends. Errors: sendmsg's.
Result<void> SendWithFds(int fd, std::string_view bytes, const std::vector<int>& fds);

}  // namespace agvisor::agent
