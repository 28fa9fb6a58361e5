// agvisor mcp: the Model Context Protocol server on stdin/stdout (docs/mcp.md), over the same
// place as every other subcommand (in process, or agvisord with --server).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <thread>

#include "agvisor/cli/common.h"
#include "agvisor/client/agvisord.h"
#include "agvisor/mcp/stdio.h"

namespace agvisor::cli {

void AddMcp(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "mcp");
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
    // SIGTERM, SIGINT, SIGHUP end the session like the end of stdin (its sandboxes removed):
    // blocked here, before any thread starts, and awaited by a thread of their own.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop_signals, s);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    int stop[2];
    if (::pipe2(stop, O_CLOEXEC) != 0) {
      *exit_code = ReportError(Error::FromErrno("mcp: pipe", errno));
      return;
    }
    std::thread([stop_signals, fd = stop[1]] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      (void)!::write(fd, "x", 1);
    }).detach();
    // Through agvisord (--server), the egress_log tool reads agvisord's egress log.
    if (auto* agvisord = dynamic_cast<client::AgvisordPlace*>(*place)) {
      options->egress_log = [agvisord](const std::string& container,
                                       std::size_t last) -> Result<std::string> {
        return api::EgressLogJson(api::SandboxIdFor(container),
                                  AGVISOR_TRY(agvisord->EgressLog(container, last)));
      };
    }
    auto r = mcp::ServeStdio(**place, *options, STDIN_FILENO, STDOUT_FILENO, stop[0]);
    *exit_code = r.ok() ? kExitOk : ReportError(r.error());
  });
}

}  // namespace agvisor::cli
