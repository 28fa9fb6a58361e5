// Command line of agvisor-agent: pure parsing of argv into a typed command, plus help texts.
//
// Used by agent_main.cc (the dispatch table) and unit-tested in cli_test.cc. Nothing here touches
// the system, so every subcommand's flags, defaults and error messages are checked without
// processes. Subcommands:
//   init    PID 1 of a sandbox: reaps zombies, tracks activity, enforces lifetime / idle-ttl.
//   exec    runs one command with a timeout that kills its whole process tree.
//   connect relays its stdin/stdout to init's channel socket.
//   read-file writes one file of the sandbox, or a tar of it, to stdout (the host's bulk
//             download path).
//   version prints the agent and protocol versions.
//   sudo    runs a command as root through init's sudo broker (sudo_shim.h; parsed there).
#pragma once

#include <chrono>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::agent {

// Where `init` listens and `exec` connects. Its directory also holds `exit-reason`.
inline constexpr std::string_view kDefaultSocketPath = "/run/agvisor/agent.sock";

struct InitOptions {
  std::optional<std::chrono::milliseconds> lifetime;  // unset: no lifetime
  std::optional<std::chrono::milliseconds> idle_ttl;  // unset: never idle-expires
  std::string socket_path{kDefaultSocketPath};
  // Serve one channel session on fd 0/1 (the host attached to PID 1's stdio before start).
  bool channel_stdio = false;
  // --track-idle: wake every ActivityTracker::kFreezeTick while idle, as with an idle-ttl, so
  // that a freeze is not counted as idle time, for a host that asks how long the sandbox has been
  // idle (IDLE_QUERY) and freezes it itself (idle_action pause) instead of the agent stopping.
  bool track_idle = false;
  // Start the desktop (agent/desktop.h): Xvnc on :0 and an xfce session of the desktop user.
  bool desktop = false;
  std::string desktop_geometry = "1280x800";  // --desktop-size WxH
  // --warm-shells N: shells kept started and waiting for an exec's script (ready_shells.h).
  std::size_t warm_shells = 0;
  // --sudo-broker: serve sudo's requests (sudo_broker.h) and install the `sudo` shim: a sandbox
  // created with allow_setuid.
  bool sudo_broker = false;
  static constexpr std::size_t kMaxWarmShells = 16;
};

// `agvisor-agent connect`: relays stdin/stdout to init's socket (run by the host through
// `docker exec -i`).
struct ConnectOptions {
  std::string socket_path{kDefaultSocketPath};
  // --wait: keep trying to reach a socket that is not there yet (init still starting) this long.
  // The Kubernetes runtime opens the creating client's channel this way right after the pod
  // starts (docs/kubernetes.md).
  std::optional<std::chrono::milliseconds> wait;
};

struct ExecOptions {
  std::optional<std::chrono::milliseconds> timeout;  // unset: no timeout
  std::chrono::milliseconds grace{2000};  // SIGTERM -> SIGKILL delay on timeout (0 allowed)
  std::optional<std::string> cwd;
  std::vector<std::string> env;  // "K=V", added to (or replacing) the inherited environment
  std::string socket_path{kDefaultSocketPath};
  std::vector<std::string> argv;  // everything after `--`; never empty
};

// `agvisor-agent read-file [--tar] PATH`: the file's bytes (or, with --tar, a tar of the file or
// directory) to stdout, resolved as FILE_READ (TAR_READ) resolves it (files.h). The host runs it
// through a `docker exec` for large files (sandbox.cc, ReadFile and DownloadTar).
struct ReadFileOptions {
  std::string path;
  bool tar = false;                             // TAR_READ's stream instead of FILE_READ's bytes
  bool watch_stdin = false;                     // end when stdin closes (the reader went away)
  std::string socket_path{kDefaultSocketPath};  // init's activity socket, held while it runs
  // --exclude (with --tar): absolute paths whose contents the tar leaves out (a directory stays,
  // empty): how a snapshot leaves out /proc, /sys, /dev and the agent's own files.
  std::vector<std::string> exclude;
  // --layer-since SECONDS[.NANOS] (with --tar of "/"): a layer over the sandbox's image instead
  // (TarStreamWriter::Options::Layer): what changed at or after that time, whiteouts for the
  // image's names that are gone. The image's tree comes on stdin first (ReadLayerBaseline).
  std::optional<std::string> layer_since;
  // --layer-whole PATH: archived whole in a layer whatever its ctime (a volume).
  std::vector<std::string> layer_whole;
};

struct VersionCommand {};

// `--help` anywhere: print `text` to stdout and exit 0.
struct HelpCommand {
  std::string text;
};

using Command = std::variant<InitOptions, ExecOptions, ConnectOptions, ReadFileOptions,
                             VersionCommand, HelpCommand>;

// Parses the arguments after argv[0]. Errors: kInvalidArgument, with a message that names the
// subcommand, the flag and the offending text ("exec: --timeout: expected a number of seconds
// > 0, got '-1'"), ready to print after "agvisor-agent: ".
Result<Command> ParseCommandLine(const std::vector<std::string>& args);

// --layer-since's value: unix seconds, optionally '.' and 1 to 9 digits ("1796548504.417").
// nullopt when malformed.
std::optional<timespec> ParseLayerSince(std::string_view text);

// Parses a number of seconds: digits with an optional fraction ("30", "0.5"), at most 100 years,
// rounded down to milliseconds. Zero is refused unless `allow_zero`. Errors: kInvalidArgument
// ("<flag>: expected ...").
Result<std::chrono::milliseconds> ParseSeconds(std::string_view flag, std::string_view text,
                                               bool allow_zero);

// "30s", "1.5s", "0.25s": for log lines.
std::string FormatSeconds(std::chrono::milliseconds d);

// Help texts (also returned in HelpCommand).
std::string_view MainHelp();
std::string_view InitHelp();
std::string_view ExecHelp();
std::string_view ConnectHelp();
std::string_view ReadFileHelp();
std::string_view VersionHelp();

}  // namespace agvisor::agent
