// Helpers shared by the subcommands of the agvisor CLI (internal to src/agvisor/cli).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/base/strings.h"
#include "agvisor/cli/help.h"
#include "agvisor/client/place.h"
#include "agvisor/client/relay.h"
#include "agvisor/sandbox/spec.h"
#include "agvisor/sandbox/types.h"

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
  bool no_resume = false;  // --no-resume: a call on a paused sandbox fails instead of resuming it

  // Where this run's sandboxes live, made on first use: agvisord when `server` is set, else the
  // Docker host in process. Errors: those of client::Agvisord; kInvalidArgument for --host with
  // --server.
  Result<Place*> GetPlace();
  // Opens sandbox `name` (or its agvisor-... container name) there.
  Result<std::unique_ptr<SandboxHandle>> OpenSandbox(std::string_view name);

 private:
  std::unique_ptr<Place> place_;
};

// Every line printed for people passes what a sandbox or a caller chose (names, paths, argv,
// image names, error messages quoting them) through EscapeForTerminal (base/strings.h): no byte
// of it can act on the user's terminal. --json output is exact (JSON escapes controls itself).

// Prints "agvisor: <message>" to stderr on one line, the message through EscapeForTerminal (its
// line breaks shown as \n: a sandbox-quoted one cannot start a line that looks like agvisor's),
// and returns the exit code for the error's code.
int ReportError(const Error& e);
// The exit code for an error (kInvalidArgument -> 2, kSandboxDied -> 3, else 1).
int ExitCodeFor(const Error& e);

// Options that make a SandboxSpec: shared by create and run.
struct SpecOptions {
  SandboxSpec spec;
  std::optional<std::string> disk;
  std::vector<std::string> labels;  // "key=value"
  // --allow-domain, --allow-cidr, --allow-port, --deny-domain, --egress: any of them makes an
  // egress policy.
  egress::EgressRules egress;
  // --secret NAME=@FILE:HOST[,HOST...][:header=NAME] or NAME:HOST[,...][:header=NAME].
  std::vector<std::string> secrets;
  void Add(CLI::App& cmd);
  // The spec, with --disk, --label and --secret applied (a secret's FILE read here, by this
  // process). Errors: kInvalidArgument (a label without '=', a malformed --secret), kNotFound /
  // kPermissionDenied (a secret's FILE).
  Result<SandboxSpec> Build(const GlobalOptions& g) const;
};

// One --secret as written (docs/cli.md, "Secrets"): NAME=@FILE:HOSTS[:header=H] (the value is
// FILE's bytes, which the caller reads, less one trailing line break) or NAME:HOSTS[:header=H]
// (the value is agvisord's operator's, by name). HOSTS is comma-separated; FILE may hold ':'.
// Returns the secret without its value and FILE ("" for by name). kInvalidArgument naming what
// is missing; a value written in the option itself is refused (it would show in `ps`).
Result<std::pair<SecretSpec, std::string>> ParseSecretOption(std::string_view text);

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

using client::RelayPortConnection;  // client/relay.h

// The exit code of a command run in a sandbox that could not run or finish (exec, attach), after
// reporting `e`: 3 when the sandbox died, 2 for a refused argument, else 125.
int ReportExecError(const Error& e);

// Adds the positional argument that names the sandbox a subcommand works on.
std::shared_ptr<std::string> AddSandboxArg(CLI::App& cmd);
// Opens sandbox `name` and returns what `run` returns on it: an exit code. A failure to open is
// reported, and its exit code returned.
int OnSandbox(GlobalOptions& g, const std::string& name,
              const std::function<int(SandboxHandle&)>& run);
// Adds subcommand `name` (its help from cli/help.cc) of one sandbox: its first positional argument
// names the sandbox, which is opened when the subcommand runs and handed to `run` (as OnSandbox,
// `run`'s result in `*exit_code`). The caller adds the subcommand's other options and arguments.
CLI::App* AddSandboxCommand(CLI::App& app, GlobalOptions& g, int* exit_code, std::string_view name,
                            std::function<int(SandboxHandle&)> run);

// A subcommand: registers itself on `app` and sets its callback's exit code in `*exit_code`.
using Subcommand = void(CLI::App& app, GlobalOptions& g, int* exit_code);
// The subcommands (desktop: desktop_cmds.cc).
Subcommand AddCreate, AddRun, AddExec, AddList, AddTop, AddEgress, AddStop, AddRemove, AddImage,
    AddDoctor, AddCopy, AddShell, AddPortForward, AddDesktop, AddPs, AddKill, AddAttach;
// mcp (mcp_cmd.cc): the MCP server on stdio.
Subcommand AddMcp;
// pause, resume, update (sandbox_cmds.cc).
Subcommand AddPause, AddResume, AddUpdate;
// snapshot, fork (snapshot_cmd.cc).
Subcommand AddSnapshot, AddFork;
// watch (watch_cmd.cc).
Subcommand AddWatch;
// network create (network_cmd.cc).
Subcommand AddNetwork;

}  // namespace agvisor::cli
