// The `agvisor` command line: one function per subcommand, registered on a CLI11 app by
// RunCli (the dispatch table). apps/agvisor/main.cc only calls RunCli.
//
// Exit codes (docs/cli.md):
//   0    success
//   1    the operation failed (the message says why and what to do)
//   2    bad usage or an invalid argument (bad name, limit, image, ...)
//   3    the sandbox died (out of memory, pids, lifetime, idle) under the operation
//   exec and run: the command's own exit code; 124 when it timed out; 125 when agvisor itself
//   failed before the command's outcome was known.
#pragma once

namespace agvisor::cli {

int RunCli(int argc, char** argv);

}  // namespace agvisor::cli
