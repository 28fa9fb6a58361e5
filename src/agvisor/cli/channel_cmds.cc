// cp, shell, port-forward: the subcommands that use the agent channel beyond exec.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <thread>

#include "agvisor/cli/common.h"
#include "agvisor/sandbox/spec.h"
#include "agvisor/sandbox/types.h"

namespace agvisor::cli {
namespace {

// "NAME:/path" -> {NAME, /path}; a local path (no ':' before the first '/') -> nullopt.
struct SandboxPath {
  std::string sandbox;
  std::string path;
};
std::optional<SandboxPath> ParseSandboxPath(const std::string& s) {
  auto colon = s.find(':');
  auto slash = s.find('/');
  if (colon == std::string::npos || colon == 0 || (slash != std::string::npos && slash < colon)) {
    return std::nullopt;
  }
  return SandboxPath{s.substr(0, colon), s.substr(colon + 1)};
}

int Fail(const Error& e) { return ReportError(e); }

// ---- cp: where a copy lands, by docker cp's rules (docs/cli.md, "cp") ----

// What a destination path is on its side.
enum class Found { kMissing, kDirectory, kOther };
using Look = std::function<Result<Found>(const std::string& path)>;

// Where a copy goes: into `dir`, an existing directory, as `name` ("" = its own name).
struct CopyTarget {
  std::string dir;
  std::string name;
};

// docker cp's rules: an existing directory receives the source under its own name; a missing
// destination (whose parent exists) becomes the source under the destination's name, a file as
// a file, a directory as a directory of the source's contents; an existing file is replaced by a
// file and refused for a directory; a missing destination written with a trailing '/' must be a
// directory, which a file cannot make. `look` asks the destination's side, `shown` names the
// destination in errors.
Result<CopyTarget> WhereCopyLands(bool source_is_dir, std::string dst, const std::string& shown,
                                  const Look& look) {
  const Found found = AGVISOR_TRY(look(dst));
  if (found == Found::kDirectory) return CopyTarget{dst, ""};
  if (found == Found::kOther && source_is_dir) {
    return Error::InvalidArgument("cp: cannot copy a directory onto the file " + shown +
                                  ": name a directory or a new path");
  }
  const bool dir_only = dst.ends_with('/');
  while (dst.size() > 1 && dst.ends_with('/')) dst.pop_back();
  const std::filesystem::path p(dst);
  const std::string name = p.filename().string();
  std::string parent = p.parent_path().string();
  if (parent.empty()) parent = ".";
  if (found == Found::kMissing) {
    if (dir_only && !source_is_dir) {
      return Error::NotFound("cp: " + shown +
                             " does not exist: a destination ending in / must be an existing "
                             "directory (drop the / to copy the file to that name)");
    }
    if (name.empty() || name == "." || name == ".." ||
        AGVISOR_TRY(look(parent)) != Found::kDirectory) {
      return Error::NotFound("cp: the directory of " + shown +
                             " does not exist: make it first, or name an existing directory");
    }
  }
  return CopyTarget{parent, name};
}

// The source's name as an archive names it: a copy under that name needs no renaming.
std::string OwnName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.ends_with('/')) p.pop_back();
  return std::filesystem::path(p).lexically_normal().filename().string();
}

Result<void> RunCopy(SandboxHandle& sb, const std::string& src, const std::string& dst,
                     const std::optional<SandboxPath>& s, const std::optional<SandboxPath>& d,
                     DownloadOptions download) {
  namespace fs = std::filesystem;
  if (s) {  // download: the sandbox's file or directory, this machine's destination
    const FileEntry entry = AGVISOR_TRY(sb.Stat(s->path));
    auto target = AGVISOR_TRY(WhereCopyLands(
        entry.kind == proto::EntryKind::kDir, dst, dst,
        [](const std::string& path) -> Result<Found> {
          std::error_code ec;
          const auto st = fs::status(path, ec);  // a link to a directory is that directory
          if (!fs::exists(st)) return Found::kMissing;
          return fs::is_directory(st) ? Found::kDirectory : Found::kOther;
        }));
    if (target.name != OwnName(s->path)) download.name = target.name;
    return sb.Download(s->path, target.dir, download);
  }
  std::error_code ec;
  const auto st = fs::symlink_status(src, ec);  // a link is copied as a link
  if (!fs::exists(st)) {
    return Error::NotFound("cp: no such local file or directory: " + src);
  }
  auto target =
      AGVISOR_TRY(WhereCopyLands(fs::is_directory(st), d->path, d->sandbox + ":" + d->path,
                                 [&sb](const std::string& path) -> Result<Found> {
                                   auto e = sb.Stat(path);
                                   if (!e.ok()) {
                                     if (e.error().code() == ErrorCode::kNotFound)
                                       return Found::kMissing;
                                     return e.error();
                                   }
                                   // A link inside is resolved by the agent in the sandbox's own
                                   // tree, as a directory.
                                   return e->kind == proto::EntryKind::kFile ||
                                                  e->kind == proto::EntryKind::kOther
                                              ? Found::kOther
                                              : Found::kDirectory;
                                 }));
  UploadOptions upload;
  if (target.name != OwnName(src)) upload.name = target.name;
  return sb.Upload(src, target.dir, upload);
}

// ---- shell: the terminal in raw mode for the session's length ----

class RawTerminal {
 public:
  RawTerminal() {
    if (::isatty(0) && ::tcgetattr(0, &saved_) == 0) {
      termios raw = saved_;
      ::cfmakeraw(&raw);
      active_ = ::tcsetattr(0, TCSANOW, &raw) == 0;
    }
  }
  ~RawTerminal() {
    if (active_) ::tcsetattr(0, TCSANOW, &saved_);
  }

 private:
  termios saved_{};
  bool active_ = false;
};

// SIGWINCH is turned into a byte on a pipe that the stdin pump polls.
int g_winch_pipe = -1;
void OnWinch(int) {
  char c = 'w';
  (void)!::write(g_winch_pipe, &c, 1);
}

// The SIGWINCH handler and its pipe for the length of a shell. Installed before the terminal's
// size is first read: a resize between that read and the handler would be lost (SIGWINCH is
// ignored by default), leaving the sandbox's terminal at the old size until the next resize.
// A signal caught before the stdin pump runs stays in the pipe: its first poll sends the size.
class WinchWatch {
 public:
  WinchWatch() {
    if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
      error_ = errno;
      pipe_[0] = pipe_[1] = -1;
      return;
    }
    g_winch_pipe = pipe_[1];
    struct sigaction sa {};
    sa.sa_handler = OnWinch;
    ::sigaction(SIGWINCH, &sa, nullptr);
  }
  ~WinchWatch() {
    if (pipe_[0] < 0) return;
    ::signal(SIGWINCH, SIG_DFL);
    for (int fd : pipe_) ::close(fd);
  }
  int error() const { return error_; }  // errno of pipe2, 0 when installed
  int read_fd() const { return pipe_[0]; }

 private:
  int pipe_[2];
  int error_ = 0;
};

int RunShell(SandboxHandle& sb, const std::vector<std::string>& command) {
  WinchWatch winch;
  if (winch.error() != 0) return Fail(Error::FromErrno("pipe", winch.error()));
  auto [rows, cols] = TerminalSize();
  ProcessOptions po;
  po.pty = true;
  po.rows = rows;
  po.cols = cols;
  po.env = {"TERM=" + std::string(std::getenv("TERM") ? std::getenv("TERM") : "xterm")};
  std::vector<std::string> argv = command;
  if (argv.empty())
    argv = {"sh", "-c", "if command -v bash >/dev/null; then exec bash; fi; exec sh"};
  auto p = sb.Start(argv, po);
  if (!p.ok()) return Fail(p.error());
  Result<proto::Exit> exit = Error::Internal("not run");
  {
    // Raw mode: Ctrl-C, Ctrl-Z and Ctrl-D are bytes for the sandbox's terminal, not signals here.
    RawTerminal raw;
    exit = RunFeedingStdin(
        **p,
        {[](std::string_view b) { WriteAll(1, b); }, [](std::string_view b) { WriteAll(2, b); }},
        /*pty=*/true, winch.read_fd());
  }
  if (!exit.ok()) return Fail(exit.error());
  return exit->exit_code;
}

// ---- port-forward ----

int RunPortForward(SandboxHandle& sb, const std::string& spec) {
  auto colon = spec.find(':');
  int local = 0, remote = 0;
  try {
    if (colon == std::string::npos) {
      local = remote = std::stoi(spec);
    } else {
      local = std::stoi(spec.substr(0, colon));
      remote = std::stoi(spec.substr(colon + 1));
    }
  } catch (...) {
    local = remote = -1;
  }
  if (local < 0 || local > 65535 || remote < 1 || remote > 65535) {
    return Fail(
        Error::InvalidArgument("port-forward: expected LOCAL:REMOTE ports (LOCAL 0 = any "
                               "free port), got '" +
                               spec + "'"));
  }
  auto listening = ListenLoopback("port-forward", local, 64);
  if (!listening.ok()) return Fail(listening.error());
  const int srv = listening->fd;
  // The line scripts wait for (the port is open when it is printed).
  std::cout << "forwarding 127.0.0.1:" << listening->port << " -> "
            << EscapeForTerminal(sb.container_name()) << ":" << remote << std::endl;
  for (;;) {
    int c = ::accept4(srv, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      return Fail(Error::FromErrno("port-forward: accept", errno));
    }
    auto port = sb.OpenPort(static_cast<std::uint16_t>(remote));
    if (!port.ok()) {
      std::cerr << "agvisor: port-forward: " << EscapeForTerminal(port.error().message()) << "\n";
      ::close(c);
      if (port.error().code() == ErrorCode::kSandboxDied) return ExitCodeFor(port.error());
      continue;
    }
    std::thread([conn = std::shared_ptr<ByteStream>(std::move(*port)), c] {
      RelayPortConnection(conn, c);
    }).detach();
  }
}

}  // namespace

void AddCopy(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "cp");
  auto src = std::make_shared<std::string>();
  auto dst = std::make_shared<std::string>();
  auto max_bytes = std::make_shared<std::string>();
  cmd->add_option("SRC", *src, "local path or NAME:/path")->required();
  cmd->add_option("DST", *dst, "local path or NAME:/path: an existing directory, or a new name")
      ->required();
  cmd->add_option("--max-bytes", *max_bytes,
                  "downloads only: refuse (and undo) a download whose files add up to more "
                  "than SIZE (e.g. 500m, 2g), checked at each file's header before its data is "
                  "written; default: no budget");
  cmd->callback([&g, exit_code, src, dst, max_bytes] {
    auto s = ParseSandboxPath(*src);
    auto d = ParseSandboxPath(*dst);
    if (s.has_value() == d.has_value()) {
      *exit_code = Fail(Error::InvalidArgument(
          "cp: exactly one of SRC and DST must be a sandbox path NAME:/path"));
      return;
    }
    DownloadOptions options;
    if (!max_bytes->empty()) {
      if (!s) {
        *exit_code = Fail(Error::InvalidArgument(
            "cp: --max-bytes applies to downloads (SRC is NAME:/path); drop it for an upload"));
        return;
      }
      auto n = ParseMemorySize("cp --max-bytes", *max_bytes);
      if (!n.ok()) {
        *exit_code = Fail(n.error());
        return;
      }
      options.max_bytes = static_cast<std::uint64_t>(*n);
    }
    const SandboxPath& sp = s ? *s : *d;
    auto sb = g.OpenSandbox(sp.sandbox);
    if (!sb.ok()) {
      *exit_code = Fail(sb.error());
      return;
    }
    auto r = RunCopy(**sb, *src, *dst, s, d, options);
    if (!r.ok()) *exit_code = Fail(r.error());
  });
}

void AddShell(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto command = std::make_shared<std::vector<std::string>>();
  auto* cmd = AddSandboxCommand(app, g, exit_code, "shell",
                                [command](SandboxHandle& sb) { return RunShell(sb, *command); });
  cmd->add_option("command", *command, "command to run instead of the shell (after --)");
}

void AddPortForward(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto spec = std::make_shared<std::string>();
  auto* cmd = AddSandboxCommand(app, g, exit_code, "port-forward",
                                [spec](SandboxHandle& sb) { return RunPortForward(sb, *spec); });
  cmd->add_option("ports", *spec, "LOCAL:REMOTE, or PORT for the same number on both sides")
      ->required();
}

}  // namespace agvisor::cli
