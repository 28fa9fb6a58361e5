// Passwordless sudo without setuid bits: the wire format between the `sudo` shim and the agent's
// broker, and the shim's command line. Pure functions only, unit-tested in sudo_test.cc.
//
// gVisor (runsc 20240729, gVisor issue 212) ignores setuid bits, so a setuid `sudo` cannot make
// a user root. A sandbox created with SandboxSpec::allow_setuid runs `init --sudo-broker`: the
// agent (root, PID 1) listens on kSudoSocketPath (mode 0666) and runs, as root, what a client
// asks for (sudo_broker.h); `sudo` is the agent binary under that name (sudo_shim.h).
//
// One request per connection. The client sends a 4-byte big-endian length, then that many bytes
// of payload (EncodeSudoRequest), with its stdin, stdout and stderr attached to the first bytes
// by SCM_RIGHTS. While the command runs, each byte the client sends is a signal number for the
// command (SIGINT, SIGTERM or SIGHUP; others are ignored). At the end the broker sends two bytes
// (EncodeSudoOutcome): 'x' and the exit code, or 's' and the signal that ended the command.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::agent {

// Its directory is 0755 (unlike /run/agvisor's 0700): every user of the sandbox may connect.
inline constexpr std::string_view kSudoSocketPath = "/run/agvisor-sudo/sudo.sock";
// Where init installs the shim (a symlink to the agent), ahead of /usr/bin in the default PATH.
inline constexpr std::string_view kSudoShimPath = "/usr/local/bin/sudo";
// Bounds of one request: whatever a client sends beyond them is refused, never buffered.
inline constexpr std::size_t kSudoMaxPayloadBytes = 1 << 20;
inline constexpr std::size_t kSudoMaxStrings = 16384;  // argv and env entries together

// What the command runs as root with: the complete argv and environment, and the directory.
struct SudoRequest {
  std::vector<std::string> argv;  // non-empty; argv[0] looked up in env's PATH
  std::vector<std::string> env;   // "K=V", complete
  std::string cwd;                // absolute
};

// The payload: the cwd, then one entry per argv element ('a' + text) and per env entry ('e' +
// text), each ending in a NUL byte.
std::string EncodeSudoRequest(const SudoRequest& request);

// Errors: kInvalidArgument naming what is wrong (not NUL-terminated, unknown entry kind, no
// command, a relative cwd, an env entry without '=', too many entries, too large).
Result<SudoRequest> DecodeSudoRequest(std::string_view payload);

// The 4-byte length before a payload, and its reading (kInvalidArgument beyond the bound).
std::array<char, 4> EncodeSudoLength(std::uint32_t length);
Result<std::uint32_t> DecodeSudoLength(const std::array<char, 4>& bytes);

// How the command ended.
struct SudoOutcome {
  bool signaled = false;
  int value = 0;  // the exit code (0-255), or the signal number
};
std::array<char, 2> EncodeSudoOutcome(SudoOutcome outcome);
// nullopt for bytes no broker sends.
std::optional<SudoOutcome> DecodeSudoOutcome(const std::array<char, 2>& bytes);
// The shim's exit code for `outcome`: the command's, or 128 + the signal, as a shell reports it.
int SudoExitCode(SudoOutcome outcome);

// The shim's command line, as agents call sudo: `sudo [-nEHis] [-u root|-u 0|-u #0] [--]
// [VAR=value]... [COMMAND [ARG]...]`.
struct SudoOptions {
  bool preserve_env = false;             // -E, --preserve-env
  bool login = false;                    // -i, --login: root's login shell, cwd /root
  bool shell = false;                    // -s, --shell: $SHELL (or root's shell)
  bool help = false;                     // -h, --help
  std::vector<std::string> assignments;  // VAR=value before the command
  std::vector<std::string> command;      // may be empty with -i / -s
};

// Errors: kInvalidArgument, ready to print after "sudo: " (an option this sudo does not have,
// -u other than root, -i with -s, no command).
Result<SudoOptions> ParseSudoCommandLine(const std::vector<std::string>& args);

// The argv to run as root for `options`: the command itself, or for -i / -s the shell (`shell`,
// login with -i), given the command as `-c` with each character a shell would treat specially
// escaped by a backslash, as sudo does.
std::vector<std::string> SudoCommandArgv(const SudoOptions& options, const std::string& shell);

// The environment the command gets: all of `caller_env` with -E (HOME replaced with -i), else
// a safe set of it (TERM, LANG, LC_*, TZ, DISPLAY, COLORTERM, COLUMNS, LINES) plus PATH (a
// secure path), HOME=/root, USER=LOGNAME=root, SHELL=`shell`, and SUDO_USER / SUDO_UID /
// SUDO_GID / SUDO_COMMAND describing the caller; then the assignments.
std::vector<std::string> SudoEnvironment(const SudoOptions& options,
                                         const std::vector<std::string>& caller_env,
                                         const std::string& shell, const std::string& caller_name,
                                         unsigned caller_uid, unsigned caller_gid);

// Root's login shell from the text of /etc/passwd; "/bin/sh" when none is recorded.
std::string RootShell(std::string_view passwd);

std::string_view SudoHelp();

}  // namespace agvisor::agent
