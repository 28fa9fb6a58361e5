#include "agvisor/agent/agent_main.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "agvisor/agent/cli.h"
#include "agvisor/agent/connect.h"
#include "agvisor/agent/exec.h"
#include "agvisor/agent/files.h"
#include "agvisor/agent/init.h"
#include "agvisor/agent/log.h"
#include "agvisor/agent/sudo.h"
#include "agvisor/agent/sudo_shim.h"
#include "agvisor/agent/version.h"
#include "agvisor/proto/exit_codes.h"

namespace agvisor::agent {
namespace {

void WriteStdout(std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(STDOUT_FILENO, text.data(), text.size());
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// One entry per command alternative: the dispatch table of the subcommands.
struct Dispatch {
  int operator()(const InitOptions& o) const { return RunInit(o); }
  int operator()(const ExecOptions& o) const { return RunExec(o); }
  int operator()(const ConnectOptions& o) const { return RunConnect(o); }
  int operator()(const ReadFileOptions& o) const {
    std::optional<timespec> since;
    if (o.layer_since) since = ParseLayerSince(*o.layer_since);
    return RunReadFile(o.path, o.tar, o.socket_path, o.watch_stdin, o.exclude, since,
                       o.layer_whole);
  }
  int operator()(const VersionCommand&) const {
    WriteStdout("agvisor-agent " + std::string(kAgentVersion) + " protocol " +
                std::to_string(kProtocolVersion) + "\n");
    return 0;
  }
  int operator()(const HelpCommand& h) const {
    WriteStdout(h.text);
    return 0;
  }
};

}  // namespace

int AgentMain(int argc, char** argv) {
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  // Run as `sudo` (init's symlink, sudo_broker.h) or as `agvisor-agent sudo`: sudo's own
  // command line, not the agent's.
  const std::string_view program = argc > 0 ? std::string_view(argv[0]) : "";
  if (program.substr(program.find_last_of('/') + 1) == "sudo") {
    return RunSudo(args, std::string(kSudoSocketPath));
  }
  if (!args.empty() && args[0] == "sudo") {
    return RunSudo({args.begin() + 1, args.end()}, std::string(kSudoSocketPath));
  }
  auto command = ParseCommandLine(args);
  if (!command.ok()) {
    LogLine(command.error().message());
    // exec's own failures use 125 so they never look like the command's exit code 2.
    return !args.empty() && args[0] == "exec" ? kExecExitAgent : kExitUsage;
  }
  return std::visit(Dispatch{}, *command);
}

}  // namespace agvisor::agent
