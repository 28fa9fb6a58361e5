// Helpers shared by the subcommands of the agvisor CLI (internal to src/agvisor/cli).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/client/place.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor::cli {

// Subcommands are written once against the client layer (client/place.h).
using client::ByteStream;
using client::Command;
using client::Created;
using client::Place;
using client::SandboxHandle;

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitSandboxDied = 3;
inline constexpr int kExitExecFailure = 125;

struct GlobalOptions {
  std::string host;        // --host / $AGVISOR_HOST
  bool host_flag = false;  // --host was given on the command line
  std::string server;      // --server / $AGVISOR_SERVER: drive sandboxes through agvisord
  std::string token_file;  // --token-file (agvisord's token, with --server)
  bool json = false;       // --json

  // Where this run's sandboxes live, made on first use: agvisord when `server` is set, else the
  // Docker host in process. Errors: those of client::Agvisord; kInvalidArgument for --host with
  // --server.
  Result<Place*> GetPlace();
  // Opens sandbox `name` (or its agvisor-... container name) there.
  Result<std::unique_ptr<SandboxHandle>> OpenSandbox(std::string_view name);

 private:
  std::unique_ptr<Place> place_;
};

// Prints "agvisor: <message>" to stderr and returns the exit code for the error's code.
int ReportError(const Error& e);
// The exit code for an error (kInvalidArgument -> 2, kSandboxDied -> 3, else 1).
int ExitCodeFor(const Error& e);

// Options that make a SandboxSpec: shared by create and run.
struct SpecOptions {
  SandboxSpec spec;
  std::optional<std::string> disk;
  std::vector<std::string> labels;  // "key=value"
  // --allow-domain, --allow-cidr, --allow-port, --deny-domain: any of them makes an egress policy.
  egress::EgressRules egress;
  void Add(CLI::App& cmd);
  // The spec, with --disk and --label applied. Errors: kInvalidArgument (a label without '=').
  Result<SandboxSpec> Build(const GlobalOptions& g) const;
};

// "x" -> "agvisor-x"; a name that already has the prefix (anonymous sandboxes) is kept as is.
std::string ResolveContainerName(std::string_view name_or_container);

// Writes all bytes to fd, ignoring EINTR; broken pipes end quietly.
void WriteAll(int fd, std::string_view bytes);

// The size of the terminal on stdout as (rows, cols); 24 x 80 when stdout is not a terminal.
std::pair<std::uint16_t, std::uint16_t> TerminalSize();

// Runs a started command to its end (exec -i, shell): this process's stdin (fd 0) is streamed to
// it from a thread of its own as it comes, and at its end the command's stdin is closed (for a
// `pty`, the terminal's EOF is typed too); its output goes to `callbacks` as it comes. A byte on
// `winch_fd` (-1: none) means our terminal was resized: the command's is resized to match.
// Returns when the command exits, whether or not stdin has ended.
Result<ProcessExit> RunFeedingStdin(Command& proc, const channel::ExecCallbacks& callbacks,
                                    bool pty, int winch_fd = -1);

// A listening TCP socket on 127.0.0.1:port (0 = a free port) and the port it got. `what` names
// the command in the error. Errors: kInvalidArgument/kUnavailable etc. from errno.
struct Listening {
  int fd = -1;
  int port = 0;
};
Result<Listening> ListenLoopback(std::string_view what, int port, int backlog);

// Relays the local connection `fd` and a port stream into the sandbox both ways until either
// side ends, then closes both (port-forward, desktop viewers). Blocks: run it on a thread.
void RelayPortConnection(std::shared_ptr<ByteStream> port, int fd);

// The subcommands; each registers itself and sets its callback's exit code in `*exit_code`.
void AddCreate(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddRun(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddExec(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddList(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddTop(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddEgress(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddStop(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddRemove(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddImage(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddDoctor(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddCopy(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddShell(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddPortForward(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddDesktop(CLI::App& app, GlobalOptions& g, int* exit_code);  // desktop_cmds.cc
void AddPs(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddKill(CLI::App& app, GlobalOptions& g, int* exit_code);
void AddAttach(CLI::App& app, GlobalOptions& g, int* exit_code);

}  // namespace agvisor::cli
