// agvisor mcp: the Model Context Protocol server on stdin/stdout (docs/mcp.md), over the same
// place as every other subcommand (in process, or agvisord with --server).
#include <unistd.h>

#include <iostream>

#include "agvisor/cli/common.h"
#include "agvisor/mcp/stdio.h"

namespace agvisor::cli {

void AddMcp(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "mcp",
      "serve the Model Context Protocol on stdin/stdout for a coding agent (register the "
      "command `agvisor mcp`; docs/mcp.md). Sandboxes it creates are removed when the client "
      "goes away and end themselves at their lifetime");
  auto options = std::make_shared<mcp::SessionOptions>();
  cmd->add_option("--lifetime", options->default_lifetime,
                  "seconds of life for sandboxes created without a lifetime (they end then even "
                  "if this server is killed)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([&g, exit_code, options] {
    auto place = g.GetPlace();
    if (!place.ok()) {
      *exit_code = ReportError(place.error());
      return;
    }
    auto r = mcp::ServeStdio(**place, *options, STDIN_FILENO, STDOUT_FILENO);
    *exit_code = r.ok() ? kExitOk : ReportError(r.error());
  });
}

}  // namespace agvisor::cli
