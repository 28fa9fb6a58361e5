// `agvisor mcp`: the MCP stdio transport. Messages are single lines of JSON on `in_fd` (the
// client writes them to our stdin), answers and notifications single lines on `out_fd`; logs go
// to stderr only. Each request runs on a thread of its own, so a long exec does not hold up the
// others; writes are serialised.
//
// When `in_fd` ends (the client exited or went away), the sandboxes this session created are
// removed (Session::EndSandboxes), then the calls still running are waited for (theirs fail as
// their sandbox goes). Sandboxes carry a lifetime too (SessionOptions::default_lifetime), which
// ends them if this process is killed before it can.
#pragma once

#include "agvisor/base/error.h"
#include "agvisor/client/place.h"
#include "agvisor/mcp/session.h"

namespace agvisor::mcp {

// Serves until `in_fd` ends, or `stop_fd` (-1: none) becomes readable (`agvisor mcp` makes it
// readable on SIGTERM, SIGINT and SIGHUP, which some clients send instead of closing stdin):
// either way the session's sandboxes are removed. Returns how many. Errors: kUnavailable
// (reading `in_fd` failed).
Result<std::size_t> ServeStdio(client::Place& place, const SessionOptions& options, int in_fd,
                               int out_fd, int stop_fd = -1);

// The longest message a line may hold (a write_file of a few MB, base64): longer lines are
// answered with a JSON-RPC error and skipped.
inline constexpr std::size_t kMaxLineBytes = 64u << 20;

}  // namespace agvisor::mcp
