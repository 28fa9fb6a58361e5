#include "agvisor/agent/cli.h"

#include <algorithm>
#include <cstdint>

namespace agvisor::agent {
namespace {

constexpr std::int64_t kMaxSeconds = 100LL * 365 * 24 * 3600;

constexpr std::string_view kMainHelp = R"(Usage: agvisor-agent SUBCOMMAND [OPTIONS]

The in-sandbox agent of agvisor. The host copies it into every container before start and runs
`agvisor-agent init` as the container's entrypoint (PID 1).

Subcommands:
  init      be PID 1: reap zombies, track activity, enforce --lifetime / --idle-ttl
  exec      run a command; on --timeout kill its whole process tree and exit 124
  connect   relay stdin/stdout to init's channel socket (the host's second way in)
  read-file write one file, or a tar of it, to stdout (the host's path for large downloads)
  version   print the agent and protocol versions
  sudo      run a command as root through init's sudo broker (also as a program named sudo)

Run `agvisor-agent SUBCOMMAND --help` for the options of each.
)";

constexpr std::string_view kInitHelp =
    R"(Usage: agvisor-agent init [--lifetime SECONDS] [--idle-ttl SECONDS] [--socket PATH]
                          [--channel-stdio] [--desktop] [--desktop-size WxH]
                          [--warm-shells N] [--track-idle] [--sudo-broker]

PID 1 of a sandbox. Reaps every zombie (also when not PID 1: it makes itself a child subreaper),
serves the channel protocol (docs/protocol.md) on a unix socket and stops the sandbox on its own:
  --lifetime SECONDS   stop this long after start, whatever is running
  --idle-ttl SECONDS   stop once no operation has been in flight for this long (an exec, file
                       operation, port stream or attach in any session, or a connected client
                       that does not speak the protocol, e.g. `agvisor-agent exec`)
  --track-idle         keep the idle clock exact across freezes without stopping at an
                       idle-ttl: a host that freezes idle sandboxes asks for it (IDLE_QUERY)
  --socket PATH        channel socket (default /run/agvisor/agent.sock; its directory is
                       created 0700 and also receives the file `exit-reason`)
  --channel-stdio      also serve one session on stdin/stdout (EOF on stdin ends that session,
                       not the sandbox); log lines go to stderr only
  --desktop            start the desktop: Xvnc on :0 (VNC on loopback port 5900 inside, a new
                       random password in /run/agvisor/desktop), an xfce session of the user
                       `user` and, if installed, xrdp (RDP on 127.0.0.1:3389 inside); its state
                       is in /run/agvisor/desktop/state (docs/desktop.md)
  --desktop-size WxH   the desktop's screen size (default 1280x800; implies --desktop)
  --warm-shells N      keep N shells (0-16, default 0) started and waiting, so an exec of
                       `sh -c SCRIPT` with the default user, cwd and env skips the shell's start;
                       `ps` shows them as `sh -s agvisor-agent ready shell ...`
  --sudo-broker        passwordless sudo without setuid bits: serve /run/agvisor-sudo/sudo.sock
                       (mode 0666) and link /usr/local/bin/sudo to this binary, whose `sudo`
                       runs commands as root through it (any process of the sandbox may)
SECONDS: a number > 0, fractions allowed (0.5). Both limits are off unless given.

Stopping: SIGTERM to every process, 1 s of grace, then SIGKILL; the reason (lifetime, idle or
signal) is logged to stderr and written to <socket dir>/exit-reason. Exit codes:
  0 SIGTERM/SIGINT   1 could not start   2 bad command line   3 lifetime   4 idle-ttl
)";

constexpr std::string_view kExecHelp =
    R"(Usage: agvisor-agent exec [--timeout SECONDS] [--grace SECONDS] [--cwd DIR] [--env K=V]...
                          [--socket PATH] -- PROGRAM [ARG]...

Runs PROGRAM (looked up in PATH; stdio inherited) in its own process group, holding a connection
to init's activity socket while it runs (the sandbox is not idle meanwhile; a missing socket is
fine). The agent is a child subreaper, so descendants that double-fork or setsid stay in its tree.
  --timeout SECONDS  after this long, SIGTERM the whole process tree, then after --grace SIGKILL
                     every descendant still alive (found through /proc, repeatedly until none
                     remains) and exit 124. Default: no timeout.
  --grace SECONDS    SIGTERM -> SIGKILL delay on timeout (default 2; 0 = SIGKILL at once)
  --cwd DIR          working directory of PROGRAM
  --env K=V          set an environment variable (repeatable)
  --socket PATH      init's activity socket (default /run/agvisor/agent.sock)
When PROGRAM exits, exec exits with its status at once; background processes it left behind keep
running (they are re-parented to PID 1, which reaps them). Exit codes: PROGRAM's code, 128+N if
it was killed by signal N, 124 timeout, 125 failure of exec itself (bad options, --cwd, fork),
126 PROGRAM not executable, 127 PROGRAM not found.
)";

constexpr std::string_view kConnectHelp =
    R"(Usage: agvisor-agent connect [--socket PATH] [--wait SECONDS]

Relays stdin to init's channel socket and the socket to stdout, byte for byte (no framing of its
own), until either side ends. The host runs it through `docker exec -i` (or a Kubernetes exec)
to open a session.
  --socket PATH   init's socket (default /run/agvisor/agent.sock)
  --wait SECONDS  retry a socket that is not there yet (init still starting) for this long
Exit codes: 0 the relay ended, 1 the socket could not be reached, 2 bad command line.
)";

constexpr std::string_view kReadFileHelp =
    R"(Usage: agvisor-agent read-file [--tar [--exclude PATH]... [--layer-since T [--layer-whole PATH]...]]
       [--watch-stdin] [--socket PATH] PATH

Writes the regular file at the absolute PATH to stdout, byte for byte. PATH resolves as the
channel's FILE_READ resolves it (symlinks followed, inside the sandbox). The host runs it through
a `docker exec` to download large files over Docker's own exec stream.
  --tar           write a tar of PATH (a file or a directory) instead, as the channel's
                  TAR_READ makes it (entries named after PATH's last component; "/" is
                  archived as "./", "./etc", ...)
  --exclude PATH  with --tar: leave out what is below the absolute PATH (a directory stays,
                  empty; a file is left out). Repeatable. The host's snapshots leave out /proc,
                  /sys, /dev and the agent's own files this way
  --layer-since T with --tar of /: only what changed since T (unix seconds, optionally with
                  up to 9 decimals) over the image the sandbox started from, as a layer: the
                  image's tree is read from stdin first (every entry's absolute path ending in
                  a NUL byte, then one more NUL); its names that are gone come out as
                  whiteouts ("DIR/.wh.NAME"). The host's layered snapshots use it
  --layer-whole PATH  with --layer-since: archive what is below the absolute PATH whole (a
                  volume). Repeatable
  --watch-stdin   stop when stdin reaches its end: the host keeps it open while it reads
                  (Docker does not end an exec whose client went away, and goes on taking
                  its output: without this, a file of terabytes would be read to its end)
  --socket PATH   init's activity socket, held while the file is read (default
                  /run/agvisor/agent.sock; missing: read anyway)
Exit codes: 0 the whole file (or tar) was written; 64+N it could not be read, N being the channel's
wire error code (docs/protocol.md: 65 invalid argument, 66 not found, 70 permission denied, ...),
with the reason on stderr; 2 bad command line.
)";

constexpr std::string_view kVersionHelp = R"(Usage: agvisor-agent version

Prints the agent version and the newest host<->agent protocol version it speaks, e.g.
  agvisor-agent 0.1.0 protocol 3
)";

// Walks the arguments of one subcommand: `--flag value`, `--flag=value`, `--`, positionals.
class ArgCursor {
 public:
  ArgCursor(std::string_view sub, const std::vector<std::string>& args) : sub_(sub), args_(args) {}

  bool done() const { return i_ >= args_.size(); }
  const std::string& peek() const { return args_[i_]; }
  void skip() { ++i_; }
  std::vector<std::string> rest() const {
    return {args_.begin() + static_cast<std::ptrdiff_t>(i_), args_.end()};
  }
  // Whether the current argument asks for the subcommand's help.
  bool help() const { return peek() == "--help" || peek() == "-h"; }

  // If the current argument is `name` or `name=...`, consumes it (and its value) into *value.
  // Returns true when it matched; a missing value is an error.
  Result<bool> Take(std::string_view name, std::string* value) {
    const std::string& a = args_[i_];
    if (a == name) {
      if (i_ + 1 >= args_.size()) return Invalid(std::string(name) + " needs a value");
      *value = args_[i_ + 1];
      i_ += 2;
      return true;
    }
    if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
      *value = a.substr(name.size() + 1);
      i_ += 1;
      return true;
    }
    return false;
  }

  // Take for a path option (a string or an optional one): an empty value is refused ("<name>:
  // empty path").
  template <typename Path>
  Result<bool> TakePath(std::string_view name, Path* value) {
    std::string v;
    if (!AGVISOR_TRY(Take(name, &v))) return false;
    if (v.empty()) return Invalid(std::string(name) + ": empty path");
    *value = std::move(v);
    return true;
  }

  // Take for a number of seconds (ParseSeconds; 0 only with `allow_zero`).
  template <typename Duration>
  Result<bool> TakeSeconds(std::string_view name, bool allow_zero, Duration* value) {
    std::string v;
    if (!AGVISOR_TRY(Take(name, &v))) return false;
    *value = AGVISOR_TRY(ParseSeconds(std::string(sub_) + ": " + std::string(name), v, allow_zero));
    return true;
  }

  // If the current argument is the flag `name` (no value), consumes it and returns true.
  bool Flag(std::string_view name) {
    if (peek() != name) return false;
    ++i_;
    return true;
  }

  // "<sub>: <message>" (kInvalidArgument).
  Error Invalid(std::string message) const {
    return Error::InvalidArgument(std::string(sub_) + ": " + std::move(message));
  }

  // The error for the current argument when nothing took it: an unknown option, or an
  // unexpected positional (`why` says what was expected instead).
  Error Unexpected(std::string_view why = "") const {
    if (peek().starts_with("-")) {
      return Invalid("unknown option '" + peek() + "' (see `agvisor-agent " + std::string(sub_) +
                     " --help`)");
    }
    return Invalid("unexpected argument '" + peek() + "'" + std::string(why));
  }

 private:
  std::string_view sub_;
  const std::vector<std::string>& args_;
  std::size_t i_ = 0;
};

Result<Command> ParseInit(const std::vector<std::string>& args) {
  ArgCursor c("init", args);
  InitOptions o;
  std::string v;
  while (!c.done()) {
    if (c.help()) return HelpCommand{std::string(kInitHelp)};
    if (AGVISOR_TRY(c.TakeSeconds("--lifetime", false, &o.lifetime)) ||
        AGVISOR_TRY(c.TakeSeconds("--idle-ttl", false, &o.idle_ttl))) {
      // stored
    } else if (AGVISOR_TRY(c.TakePath("--socket", &o.socket_path))) {
      // stored
    } else if (c.Flag("--channel-stdio")) {
      o.channel_stdio = true;
    } else if (c.Flag("--track-idle")) {
      o.track_idle = true;
    } else if (c.Flag("--desktop")) {
      o.desktop = true;
    } else if (c.Flag("--sudo-broker")) {
      o.sudo_broker = true;
    } else if (AGVISOR_TRY(c.Take("--desktop-size", &v))) {
      auto x = v.find('x');
      auto digits = [](std::string_view t) {
        return !t.empty() && t.size() <= 5 &&
               t.find_first_not_of("0123456789") == std::string_view::npos;
      };
      if (x == std::string::npos || !digits(std::string_view(v).substr(0, x)) ||
          !digits(std::string_view(v).substr(x + 1)) || std::stoi(v.substr(0, x)) < 320 ||
          std::stoi(v.substr(x + 1)) < 200 || std::stoi(v.substr(0, x)) > 8192 ||
          std::stoi(v.substr(x + 1)) > 8192) {
        return c.Invalid(
            "--desktop-size: expected WIDTHxHEIGHT between 320x200 and 8192x8192, got '" + v + "'");
      }
      o.desktop = true;
      o.desktop_geometry = v;
    } else if (AGVISOR_TRY(c.Take("--warm-shells", &v))) {
      if (v.empty() || v.size() > 2 || v.find_first_not_of("0123456789") != std::string::npos ||
          std::stoul(v) > InitOptions::kMaxWarmShells) {
        return c.Invalid("--warm-shells: expected a count from 0 to " +
                         std::to_string(InitOptions::kMaxWarmShells) + ", got '" + v + "'");
      }
      o.warm_shells = std::stoul(v);
    } else {
      return c.Unexpected(" (init takes no command)");
    }
  }
  return o;
}

Result<Command> ParseExec(const std::vector<std::string>& args) {
  ArgCursor c("exec", args);
  ExecOptions o;
  std::string v;
  bool saw_separator = false;
  while (!c.done()) {
    if (c.Flag("--")) {
      saw_separator = true;
      break;
    }
    if (c.help()) return HelpCommand{std::string(kExecHelp)};
    if (AGVISOR_TRY(c.TakeSeconds("--timeout", false, &o.timeout)) ||
        AGVISOR_TRY(c.TakeSeconds("--grace", true, &o.grace))) {
      // stored
    } else if (AGVISOR_TRY(c.TakePath("--cwd", &o.cwd))) {
      // stored
    } else if (AGVISOR_TRY(c.Take("--env", &v))) {
      auto eq = v.find('=');
      if (eq == std::string::npos || eq == 0) {
        return c.Invalid("--env: expected K=V with a non-empty K, got '" + v + "'");
      }
      o.env.push_back(v);
    } else if (AGVISOR_TRY(c.TakePath("--socket", &o.socket_path))) {
      // stored
    } else if (c.peek().starts_with("-")) {
      return c.Unexpected();
    } else {
      return c.Invalid("missing `--` before the command '" + c.peek() +
                       "' (usage: agvisor-agent exec [OPTIONS] -- PROGRAM [ARG]...)");
    }
  }
  if (!saw_separator) return c.Invalid("missing `-- PROGRAM [ARG]...` (the command to run)");
  o.argv = c.rest();
  if (o.argv.empty() || o.argv[0].empty()) return c.Invalid("no command after `--`");
  return o;
}

Result<Command> ParseConnect(const std::vector<std::string>& args) {
  ArgCursor c("connect", args);
  ConnectOptions o;
  while (!c.done()) {
    if (c.help()) return HelpCommand{std::string(kConnectHelp)};
    if (AGVISOR_TRY(c.TakePath("--socket", &o.socket_path))) continue;
    if (!AGVISOR_TRY(c.TakeSeconds("--wait", false, &o.wait))) return c.Unexpected();
  }
  return o;
}

}  // namespace

std::optional<timespec> ParseLayerSince(std::string_view text) {
  const std::size_t dot = text.find('.');
  const std::string_view sec = text.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  auto digits = [](std::string_view v) {
    return std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  };
  if (sec.empty() || sec.size() > 12 || !digits(sec) || frac.size() > 9 || !digits(frac) ||
      (dot != std::string_view::npos && frac.empty())) {
    return std::nullopt;
  }
  timespec t{};
  t.tv_sec = static_cast<time_t>(std::stoll(std::string(sec)));
  std::string nanos(frac);
  nanos.resize(9, '0');
  t.tv_nsec = std::stol(nanos);
  return t;
}

namespace {

Result<Command> ParseReadFile(const std::vector<std::string>& args) {
  ArgCursor c("read-file", args);
  ReadFileOptions o;
  bool have_path = false;
  while (!c.done()) {
    if (c.help()) return HelpCommand{std::string(kReadFileHelp)};
    if (AGVISOR_TRY(c.TakePath("--socket", &o.socket_path))) continue;
    std::string excluded, since, whole;
    if (AGVISOR_TRY(c.Take("--layer-since", &since))) {
      if (since.empty() || !ParseLayerSince(since)) {
        return c.Invalid("--layer-since: '" + since +
                         "' is not unix seconds (digits, optionally '.' and up to 9 digits)");
      }
      o.layer_since = since;
    } else if (AGVISOR_TRY(c.TakePath("--layer-whole", &whole))) {
      if (whole.front() != '/') return c.Invalid("--layer-whole: '" + whole + "' is not absolute");
      o.layer_whole.push_back(std::move(whole));
    } else if (AGVISOR_TRY(c.TakePath("--exclude", &excluded))) {
      if (excluded.front() != '/')
        return c.Invalid("--exclude: '" + excluded + "' is not absolute");
      o.exclude.push_back(std::move(excluded));
    } else if (c.Flag("--tar")) {
      o.tar = true;
    } else if (c.Flag("--watch-stdin")) {
      o.watch_stdin = true;
    } else if (have_path || c.peek().starts_with("-")) {
      return c.Unexpected(" (one PATH only)");
    } else {
      o.path = c.peek();
      have_path = true;
      c.skip();
    }
  }
  if (!have_path || o.path.empty()) return c.Invalid("missing PATH (the file to write)");
  if (!o.exclude.empty() && !o.tar) return c.Invalid("--exclude needs --tar");
  if (o.layer_since && (!o.tar || o.path != "/")) {
    return c.Invalid("--layer-since needs --tar of /");
  }
  if (!o.layer_whole.empty() && !o.layer_since) {
    return c.Invalid("--layer-whole needs --layer-since");
  }
  return o;
}

Result<Command> ParseVersion(const std::vector<std::string>& args) {
  ArgCursor c("version", args);
  if (c.done()) return VersionCommand{};
  if (c.help()) return HelpCommand{std::string(kVersionHelp)};
  return c.Invalid("unexpected argument '" + c.peek() + "'");
}

}  // namespace

Result<std::chrono::milliseconds> ParseSeconds(std::string_view flag, std::string_view text,
                                               bool allow_zero) {
  const std::string expected = std::string(flag) + ": expected a number of seconds " +
                               (allow_zero ? ">= 0" : "> 0") + ", got '" + std::string(text) + "'";
  std::size_t i = 0;
  std::int64_t whole = 0;
  std::size_t whole_digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++whole_digits) {
    if (whole_digits >= 12) return Error::InvalidArgument(expected + " (too large)");
    whole = whole * 10 + (text[i] - '0');
  }
  std::int64_t millis = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    std::size_t frac_digits = 0;
    std::int64_t scale = 100;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++frac_digits) {
      millis += (text[i] - '0') * scale;
      scale /= 10;
    }
    if (frac_digits == 0) return Error::InvalidArgument(expected);
  }
  if (whole_digits == 0 || i != text.size()) return Error::InvalidArgument(expected);
  if (whole > kMaxSeconds) return Error::InvalidArgument(expected + " (more than 100 years)");
  std::chrono::milliseconds d(whole * 1000 + millis);
  if (d.count() == 0 && !allow_zero) return Error::InvalidArgument(expected);
  return d;
}

std::string FormatSeconds(std::chrono::milliseconds d) {
  std::string s = std::to_string(d.count() / 1000);
  if (auto frac = d.count() % 1000; frac != 0) {
    std::string f = std::to_string(1000 + frac).substr(1);  // three digits, leading zeros kept
    while (f.back() == '0') f.pop_back();
    s += "." + f;
  }
  return s + "s";
}

Result<Command> ParseCommandLine(const std::vector<std::string>& args) {
  if (args.empty()) {
    return Error::InvalidArgument(
        "missing subcommand (init, exec, connect, read-file or version; see --help)");
  }
  const std::string& sub = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "--help" || sub == "-h" || sub == "help") return HelpCommand{std::string(kMainHelp)};
  if (sub == "init") return ParseInit(rest);
  if (sub == "exec") return ParseExec(rest);
  if (sub == "connect") return ParseConnect(rest);
  if (sub == "read-file") return ParseReadFile(rest);
  if (sub == "version" || sub == "--version") return ParseVersion(rest);
  return Error::InvalidArgument(
      "unknown subcommand '" + sub +
      "' (expected init, exec, connect, read-file or version; see --help)");
}

std::string_view MainHelp() { return kMainHelp; }
std::string_view InitHelp() { return kInitHelp; }
std::string_view ExecHelp() { return kExecHelp; }
std::string_view ConnectHelp() { return kConnectHelp; }
std::string_view ReadFileHelp() { return kReadFileHelp; }
std::string_view VersionHelp() { return kVersionHelp; }

}  // namespace agvisor::agent
