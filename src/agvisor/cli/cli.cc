#include "agvisor/cli/cli.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "agvisor/base/fs.h"
#include "agvisor/base/strings.h"
#include "agvisor/cli/common.h"
#include "agvisor/client/agvisord.h"
#include "agvisor/egress/secrets.h"

namespace agvisor::cli {

int ExitCodeFor(const Error& e) {
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
      return kExitUsage;
    case ErrorCode::kSandboxDied:
      return kExitSandboxDied;
    default:
      return kExitFailure;
  }
}

int ReportError(const Error& e) {
  // A message may quote what a sandbox chose (a path, a name, its agent's words): escaped whole,
  // its line breaks included. Split into lines, a quoted "\nagvisor: warning: ..." would print
  // as a line of agvisor's own; our messages are one line each.
  std::cerr << "agvisor: " << EscapeForTerminal(e.message()) << "\n";
  return ExitCodeFor(e);
}

int ReportExecError(const Error& e) {
  const int rc = ReportError(e);
  return rc == kExitSandboxDied || rc == kExitUsage ? rc : kExitExecFailure;
}

std::shared_ptr<std::string> AddSandboxArg(CLI::App& cmd) {
  auto name = std::make_shared<std::string>();
  cmd.add_option("sandbox", *name, "sandbox name (or its agvisor-... container name)")->required();
  return name;
}

int OnSandbox(GlobalOptions& g, const std::string& name,
              const std::function<int(SandboxHandle&)>& run) {
  auto sb = g.OpenSandbox(name);
  if (!sb.ok()) return ReportError(sb.error());
  return run(**sb);
}

CLI::App* AddSandboxCommand(CLI::App& app, GlobalOptions& g, int* exit_code, std::string_view name,
                            std::function<int(SandboxHandle&)> run) {
  auto* cmd = AddCommand(app, name);
  auto sandbox = AddSandboxArg(*cmd);
  cmd->callback(
      [&g, exit_code, sandbox, run = std::move(run)] { *exit_code = OnSandbox(g, *sandbox, run); });
  return cmd;
}

Result<Listening> ListenLoopback(std::string_view what, int port, int backlog) {
  int srv = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (srv < 0) return Error::FromErrno(std::string(what) + ": socket", errno);
  int one = 1;
  ::setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(srv, backlog) != 0) {
    const int err = errno;
    ::close(srv);
    return Error::FromErrno(std::string(what) + ": listen on 127.0.0.1:" + std::to_string(port),
                            err);
  }
  socklen_t len = sizeof a;
  ::getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len);
  return Listening{srv, ntohs(a.sin_port)};
}

void WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // EPIPE: the reader went away (e.g. `| head`)
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::pair<std::uint16_t, std::uint16_t> TerminalSize() {
  winsize ws{};
  if (::ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    return {ws.ws_row, ws.ws_col};
  }
  return {24, 80};
}

Result<ProcessExit> RunFeedingStdin(Command& proc, const channel::ExecCallbacks& callbacks,
                                    bool pty, int winch_fd) {
  int stop[2];
  if (::pipe2(stop, O_CLOEXEC) != 0) return Error::FromErrno("pipe", errno);
  // Ends at stdin's end, when the command takes no more input (a write fails once it exited),
  // or when told to stop: the command may exit while stdin stays open (a terminal, `yes |`).
  std::thread pump([&] {
    char buf[64 * 1024];
    for (;;) {
      pollfd fds[3] = {{0, POLLIN, 0}, {stop[0], POLLIN, 0}, {winch_fd, POLLIN, 0}};
      if (::poll(fds, winch_fd >= 0 ? 3 : 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents) return;
      if (winch_fd >= 0 && fds[2].revents) {
        while (::read(winch_fd, buf, sizeof buf) > 0) {
        }
        auto [rows, cols] = TerminalSize();
        (void)proc.Resize(rows, cols);
      }
      if (fds[0].revents) {
        ssize_t n = ::read(0, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          (void)proc.CloseStdin();
          if (pty) (void)proc.Write("\x04");  // an older agent's pty ignores STDIN_EOF
          return;
        }
        if (!proc.Write(std::string_view(buf, static_cast<std::size_t>(n))).ok()) return;
      }
    }
  });
  auto exit = proc.Wait(callbacks);
  (void)!::write(stop[1], "x", 1);
  pump.join();
  ::close(stop[0]);
  ::close(stop[1]);
  return exit;
}

Result<Place*> GlobalOptions::GetPlace() {
  if (place_) return place_.get();
  if (server.empty()) {
    place_ = client::InProcess(host);
  } else {
    if (host_flag) {
      return Error::InvalidArgument(
          "--host and --server do not mix: agvisord drives its own Docker host (drop --host, "
          "or drop --server to use that host directly)");
    }
    place_ = AGVISOR_TRY(client::Agvisord(server, token_file));
  }
  if (no_resume) place_->SetAutoResume(false);
  return place_.get();
}

Result<std::unique_ptr<SandboxHandle>> GlobalOptions::OpenSandbox(std::string_view name) {
  Place* b = AGVISOR_TRY(GetPlace());
  return b->Open(ResolveContainerName(name));
}

std::string ResolveContainerName(std::string_view n) {
  if (n.starts_with(kNamePrefix)) return std::string(n);
  return ContainerNameFor(n);
}

void SpecOptions::Add(CLI::App& cmd) {
  cmd.add_option("--name", spec.name,
                 "make the sandbox resumable: /workspace is kept in a volume across stop and "
                 "expiry; creating the same name again re-attaches to a running one");
  cmd.add_option("--image", spec.image,
                 "image to run (default " + std::string(kDefaultImage) + ", " +
                     std::string(kDefaultDesktopImage) +
                     " with --gui); snapshot:TAG is the snapshot TAG (`agvisor snapshot`)");
  cmd.add_flag("--gui", spec.gui,
               "a desktop: Xvnc + xfce inside, ready when drawn; see `agvisor desktop --help`");
  cmd.add_flag("--allow-setuid", spec.allow_setuid,
               "passwordless sudo inside: no no-new-privileges, and the agent's sudo broker "
               "(gVisor ignores setuid bits); root inside is reachable with --user root anyway "
               "(docs/security.md)");
  cmd.add_option("--cpus", spec.limits.cpus, "CPU cores, fractions allowed")->capture_default_str();
  cmd.add_option("--memory", spec.limits.memory, "RAM cap, e.g. 512m, 2g (no swap)")
      ->capture_default_str();
  cmd.add_option("--pids", spec.limits.pids, "max processes inside (1-65536)")
      ->capture_default_str();
  cmd.add_option("--shm", spec.limits.shm, "/dev/shm size (default Docker's 64m)");
  cmd.add_option("--disk", disk,
                 "root file system cap, e.g. 5g; 'none' for no cap. Default: 5g where the host "
                 "can enforce it, else uncapped with a warning");
  cmd.add_option("--network", spec.network,
                 "bridge, none, or a network made with `agvisor network create NAME`")
      ->capture_default_str();
  cmd.add_option("--lifetime", spec.lifetime,
                 "seconds until the sandbox ends itself, even if this client dies");
  cmd.add_option("--idle-ttl", spec.idle_ttl,
                 "seconds without activity (exec) until the sandbox ends itself");
  cmd.add_option("--idle-action", spec.idle_action,
                 "what --idle-ttl does: destroy (ends and removes it), stop (ends it and keeps "
                 "the container; needs --name, whose next create starts on the same /workspace) "
                 "or pause (freezes it, memory and processes kept; the next call resumes it; "
                 "frozen by agvisord, or by the next `agvisor ls` without one)")
      ->check(CLI::IsMember({"destroy", "stop", "pause"}))
      ->capture_default_str();
  cmd.add_option("--runtime", spec.runtime, "Docker runtime (a gVisor one)")->capture_default_str();
  cmd.add_option("--platform", spec.platform,
                 "gVisor platform: ptrace (the default: near-zero idle CPU, faster process "
                 "starts; runs on the runtime runsc-ptrace, which scripts/setup-host registers; "
                 "without it: systrap, with a warning) or systrap (faster bulk I/O, ~4% of a CPU "
                 "per idle sandbox). Default for a named sandbox: its own");
  cmd.add_option("--warm-shells", spec.warm_shells,
                 "shells the agent keeps started so `sh -c` execs skip the shell's start; 0 = off")
      ->capture_default_str();
  // One value per --label, so `--label K=V -- cmd` ends at `--` (a vector option would take more).
  cmd.add_option("--label", labels,
                 "KEY=VALUE label on the container and volume, e.g. a tenant id (repeatable)")
      ->allow_extra_args(false);
  // Egress policy (docs/egress.md): one value per flag, like --label.
  cmd.add_option("--allow-domain", egress.allow_domains,
                 "egress policy: the sandbox may reach this name (pypi.org) or the names below "
                 "a wildcard ('*.pythonhosted.org', not the apex) and nothing else; enforced by "
                 "agvisord on the Docker host (repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--allow-cidr", egress.allow_cidrs,
                 "egress policy: IP addresses in this block may be reached (203.0.113.0/24; "
                 "the only way to allow an address literal or a private range) (repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--allow-port", egress.ports,
                 "egress policy: destination ports allowed (default 80 and 443) (repeatable)")
      ->allow_extra_args(false)
      ->check(CLI::Range(1, 65535));
  cmd.add_option("--deny-domain", egress.deny_domains,
                 "egress policy: never this name, even when an --allow-domain matches it "
                 "(repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--egress", egress.mode,
                 "egress policy mode: enforce (the default) or learn: what no rule allows is let "
                 "through and logged, never loopback, metadata, private ranges or the host; "
                 "`agvisor egress NAME --suggest` then prints the policy it needs. For a trusted "
                 "run only (docs/egress.md, \"Learn mode\")");
  cmd.add_option("--secret", secrets,
                 "a brokered secret (docs/egress.md, \"Secrets\"): NAME=@FILE:HOST[,HOST...]"
                 "[:header=NAME], or NAME:HOST[,...] for one in agvisord's --secrets-file. The "
                 "sandbox sees NAME=agvsec_<random>; agvisord's enforcer puts FILE's value into "
                 "Authorization (or the header) of requests to HOST. Needs agvisord (--server) and "
                 "a policy allowing HOST (repeatable)")
      ->allow_extra_args(false);
}

Result<std::pair<SecretSpec, std::string>> ParseSecretOption(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Error::InvalidArgument(
        "--secret " + EscapeForTerminal(text.substr(0, text.find('='))) +
        "...: " + std::string(why) +
        " (write NAME=@FILE:HOST[,HOST...][:header=NAME], or NAME:HOST[,...] for a secret in "
        "agvisord's --secrets-file)");
  };
  SecretSpec sec;
  std::string_view rest = text;
  if (std::size_t c = rest.rfind(':');
      c != std::string_view::npos && rest.substr(c + 1).starts_with("header=")) {
    sec.header = std::string(rest.substr(c + 8));
    rest = rest.substr(0, c);
  }
  const std::size_t c = rest.rfind(':');
  if (c == std::string_view::npos || c + 1 == rest.size()) return bad("no HOST");
  for (std::string_view h : Split(rest.substr(c + 1), ',')) sec.hosts.emplace_back(h);
  rest = rest.substr(0, c);
  std::string file;
  if (std::size_t eq = rest.find('='); eq != std::string_view::npos) {
    if (rest.substr(eq + 1, 1) != "@" || eq + 2 >= rest.size()) {
      return bad(
          "give the value as @FILE (a value in the command line shows in `ps` and in "
          "shell history)");
    }
    file = std::string(rest.substr(eq + 2));
    rest = rest.substr(0, eq);
  }
  if (rest.empty()) return bad("no NAME");
  sec.name = std::string(rest);
  return std::make_pair(std::move(sec), std::move(file));
}

Result<SandboxSpec> SpecOptions::Build(const GlobalOptions& g) const {
  SandboxSpec s = spec;
  s.host = g.host;
  if (disk) s.limits.disk = *disk;
  for (const auto& kv : labels) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) {
      return Error::InvalidArgument("--label '" + kv + "' is not KEY=VALUE");
    }
    s.labels[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!egress.allow_domains.empty() || !egress.allow_cidrs.empty() || !egress.ports.empty() ||
      !egress.deny_domains.empty() || !egress.mode.empty()) {
    s.egress = egress;
  }
  for (const std::string& text : secrets) {
    auto [secret, file] = AGVISOR_TRY(ParseSecretOption(text));
    if (!file.empty()) {
      // Read by this process, with its permissions: agvisord never opens a caller's path.
      auto value = ReadSmallFile(file, egress::kMaxSecretValueBytes + 2);
      if (!value) {
        return Error::NotFound("--secret " + secret.name + ": cannot read " +
                               EscapeForTerminal(file) + ": " + std::strerror(errno));
      }
      if (value->ends_with('\n')) value->pop_back();
      if (value->ends_with('\r')) value->pop_back();
      secret.value = std::move(*value);
    }
    s.secrets.push_back(std::move(secret));
  }
  return s;
}

int RunCli(int argc, char** argv) {
  // A reader that goes away (`agvisor exec x -- yes | head`) must not kill us with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{
      "agvisor: throwaway gVisor (runsc) sandboxes for coding agents.\n"
      "Run `agvisor doctor` to check a host, `agvisor run -- CMD` for a one-off command."};
  app.require_subcommand(1);
  GlobalOptions g;
  if (const char* h = std::getenv("AGVISOR_HOST")) g.host = h;
  app.add_option("-H,--host", g.host,
                 "Docker host: unix:///path, tcp://host:port or ssh://user@host[:port]; or a "
                 "Kubernetes namespace: kube://[CONTEXT][/NAMESPACE] (kube: = the current "
                 "context) (default $AGVISOR_HOST, then $DOCKER_HOST, then the local socket)");
  if (const char* s = std::getenv("AGVISOR_SERVER")) g.server = s;
  app.add_option("--server", g.server,
                 "drive sandboxes through agvisord at unix:/path/to.sock, "
                 "http://127.0.0.1:PORT or ssh://user@host[:port][/path/to.sock] (default "
                 "$AGVISOR_SERVER; unset = the Docker host directly). See docs/cli.md");
  app.add_option("--token-file", g.token_file,
                 "agvisord's token file, with --server (default $AGVISOR_TOKEN_FILE, then "
                 "$AGVISOR_TOKEN, then agvisord's default token file; over ssh, root's on "
                 "that host)");
  app.add_flag("--json", g.json, "machine-readable output");
  app.add_flag("--no-resume", g.no_resume,
               "fail on a paused sandbox (naming how to resume it) instead of resuming it first");
  app.set_version_flag("--version", "agvisor 0.1.0");
  int exit_code = 0;
  for (Subcommand* add :
       {AddCreate,   AddRun,  AddExec,        AddPs,      AddAttach, AddKill,
        AddShell,    AddCopy, AddPortForward, AddDesktop, AddList,   AddTop,
        AddEgress,   AddStop, AddRemove,      AddPause,   AddResume, AddUpdate,
        AddSnapshot, AddFork, AddWatch,       AddImage,   AddDoctor, AddNetwork}) {
    add(app, g, &exit_code);
  }
  AddMcp(app, g, &exit_code);  // the MCP server on stdio (docs/mcp.md)
  app.parse_complete_callback([&] { g.host_flag = app.count("--host") > 0; });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  return exit_code;
}

}  // namespace agvisor::cli
