#include "agvisor/server/daemon.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "agvisor/api/defaults.h"
#include "agvisor/base/fs.h"
#include "agvisor/base/private_file.h"
#include "agvisor/base/strings.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/desktop/token.h"
#include "agvisor/e2b/ids.h"
#include "agvisor/e2b/mount.h"
#include "agvisor/egress/host.h"
#include "agvisor/sandbox/types.h"
// The one include of the Docker runtime in server/: the egress enforcers' host side is made here.
#include "agvisor/sandbox/docker_runtime/egress_host.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/runtimes.h"
#include "agvisor/sandbox/snapshot.h"
#include "agvisor/sandbox/spec.h"
#include "agvisor/server/console_route.h"
#include "agvisor/server/desktop_route.h"
#include "agvisor/server/egress_host.h"
#include "agvisor/server/log.h"
#include "agvisor/server/mcp_route.h"
#include "agvisor/server/secret_vault.h"
#include "agvisor/server/server.h"
#include "agvisor/server/service.h"

namespace agvisor::server {

Result<std::string> LoadOrCreateToken(const std::string& path, bool* created) {
  *created = false;
  // Only a file no other user can read or replace is trusted (base/private_file.h).
  auto data = ReadPrivateFile(path, "token file");
  if (!data.ok() && data.error().code() == ErrorCode::kNotFound) {
    std::error_code ec;
    auto dir = std::filesystem::path(path).parent_path();
    if (!dir.empty()) {
      std::filesystem::create_directories(dir, ec);
      if (ec)
        return Error::FromErrno("create directory " + dir.string() + " for the token", ec.value());
    }
    const std::string token = AGVISOR_TRY(RandomHex(32));
    UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!out) return Error::FromErrno("create token file " + path, errno);
    std::string line = token + "\n";
    if (::write(out.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return Error::FromErrno("write token file " + path, errno);
    }
    *created = true;
    return token;
  }
  if (!data.ok()) {
    if (data.error().code() != ErrorCode::kPermissionDenied) return data.error();
    // Others could read (or replace) it: a new token is the safe way on.
    return Error::PermissionDenied(data.error().message() +
                                   " (and consider its token leaked: delete the file and "
                                   "agvisord makes a new one)");
  }
  auto b = data->find_first_not_of(" \t\r\n");
  auto e = data->find_last_not_of(" \t\r\n");
  if (b == std::string::npos) {
    return Error::InvalidArgument("token file " + path +
                                  " is empty (delete it to get a new token)");
  }
  return data->substr(b, e - b + 1);
}

namespace {

constexpr std::string_view kDescription =
    "agvisord: the agvisor daemon. Serves the HTTP+JSON API of docs/openapi.yaml (sandboxes, "
    "exec, files, processes, ports; WebSocket streams for exec, process attach and port "
    "forwarding) for the sandboxes of one Docker host.\n\n"
    "Listening: a unix socket by default (--socket; mode 0600), and optionally loopback TCP "
    "(--listen 127.0.0.1:PORT). Plain HTTP: a non-loopback address is refused unless "
    "--allow-remote (put a TLS proxy in front).\n"
    "Auth: every route but GET /v1/health needs `Authorization: Bearer <token>`; the token is "
    "read from --token-file, created there (0600, 256 random bits) when missing. Its path is "
    "logged at start.\n"
    "Logs: JSON lines on stderr (time, level, msg, method, path, status, ms).\n"
    "Signals: SIGTERM/SIGINT stop accepting, let requests finish (--shutdown-grace), close "
    "WebSockets with 1001; sandboxes keep running. After a restart agvisord finds them by label "
    "and serves them again.\n"
    "Example:\n"
    "  agvisord --socket /tmp/agvisord.sock --token-file /tmp/agvisord.token &\n"
    "  curl --unix-socket /tmp/agvisord.sock -H \"Authorization: Bearer $(cat "
    "/tmp/agvisord.token)\" http://agvisord/v1/sandboxes";

// Raises the soft limit on open files to the hard one and logs both: a service manager's default
// soft limit (1,024 under systemd) is a few hundred egress tunnels, after which accept(2) and
// every open fail (issue 32: one sandbox holding 256 TLS connections starved the API). Returns
// the soft limit in force.
std::uint64_t RaiseOpenFilesLimit() {
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  const rlim_t at_start = nofile.rlim_cur;
  if (nofile.rlim_cur < nofile.rlim_max) {
    rlimit raised = nofile;
    raised.rlim_cur = nofile.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      nofile = raised;
    } else {
      LogEvent("warn", "cannot raise the open files limit",
               {{"errno", std::strerror(errno)}, {"hard", std::to_string(nofile.rlim_max)}});
    }
  }
  LogEvent("info", "open files limit",
           {{"soft_at_start", std::to_string(at_start)},
            {"soft", std::to_string(nofile.rlim_cur)},
            {"hard", std::to_string(nofile.rlim_max)}});
  return nofile.rlim_cur;
}

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

int DaemonMain(int argc, char** argv) {
  CLI::App app{std::string(kDescription), "agvisord"};
  app.set_help_flag("-h,--help", "print this help and exit");
  std::string socket_path, listen, token_file, docker_host, max_body = "256m";
  bool no_socket = false, allow_remote = false;
  std::size_t max_connections = ServerOptions{}.max_connections;
  std::size_t max_unauthenticated = ServerOptions{}.max_unauthenticated;
  int idle_timeout = 60, shutdown_grace = 10, header_timeout = 10;
  std::string max_exec_output = "1m";
  std::string desktop_key_file;
  std::vector<std::string> desktop_origins;
  std::string egress_resolver, egress_state_dir, egress_upstream_ca;
  int egress_idle_timeout = 300;
  bool no_egress = false;
  std::string secrets_file;
  bool console = false;
  bool check_only = false;
  std::string snapshot_repository(kDefaultSnapshotRepository);
  bool e2b = false;
  std::string e2b_domain;
  app.add_option("--socket", socket_path,
                 "unix socket to listen on (default: /run/agvisord.sock for root, else "
                 "$XDG_RUNTIME_DIR/agvisord.sock)");
  app.add_flag("--no-socket", no_socket, "no unix socket (then --listen is required)");
  app.add_option("--listen", listen,
                 "also listen on TCP HOST:PORT, e.g. 127.0.0.1:8080 (PORT 0 = any; the bound "
                 "port is logged)");
  app.add_flag("--allow-remote", allow_remote,
               "allow a --listen address that is not loopback (plain HTTP: only behind TLS)");
  app.add_option("--token-file", token_file,
                 "bearer token file (default: /var/lib/agvisor/agvisord.token for root, else "
                 "~/.config/agvisor/agvisord.token); created 0600 when missing");
  app.add_option("-H,--host,--docker-host", docker_host,
                 "where the sandboxes run: a Docker host (unix:///path, tcp://host:port, "
                 "ssh://user@host) or a Kubernetes namespace (kube:[//CONTEXT][/NAMESPACE]; in a "
                 "pod, kube: is its service account's namespace: deploy/agvisord.yaml) (default: "
                 "$DOCKER_HOST, else the local socket)")
      ->envname("DOCKER_HOST");
  app.add_option("--max-connections", max_connections,
                 "connections served at once; more are answered 503 (default " +
                     std::to_string(max_connections) + ")")
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-unauthenticated", max_unauthenticated,
                 "connections that have not yet shown the token; at the bound a new one closes "
                 "the oldest of them (default " +
                     std::to_string(max_unauthenticated) + ")")
      ->check(CLI::Range(1, 4096));
  app.add_option("--header-timeout", header_timeout,
                 "seconds an unauthenticated connection has to send its whole request header "
                 "(default 10)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--max-exec-output", max_exec_output,
                 "POST exec keeps this much of each of stdout and stderr; the rest is read and "
                 "dropped, counted in stdout_dropped / stderr_dropped (default 1m)");
  app.add_option("--max-body", max_body,
                 "largest request body, e.g. a file upload (default 256m; larger: 413)");
  app.add_option("--idle-timeout", idle_timeout,
                 "seconds a keep-alive connection may wait for its next request (default 60)")
      ->check(CLI::Range(1, 86400));
  app.add_option("--shutdown-grace", shutdown_grace,
                 "seconds requests in flight may take to finish at SIGTERM (default 10)")
      ->check(CLI::Range(0, 3600));
  app.add_option(
      "--desktop-key-file", desktop_key_file,
      "serve the desktop gateway (WebSocket GET /v1/desktop/ws) with this key: 64 hex "
      "digits, e.g. from `openssl rand -hex 32`; the same key mints desktop tokens (POST "
      "/v1/sandboxes/{id}/desktop/token)");
  app.add_option("--desktop-origin", desktop_origins,
                 "a browser origin allowed to open desktops, e.g. https://app.example.com "
                 "(repeatable; '*' = any)");
  app.add_flag("--console", console,
               "serve the web console at http://HOST:PORT/console on the --listen address "
               "(docs/console.md); its desktops use --desktop-key-file, or a key made in memory "
               "for this run");
  app.add_flag("--no-egress", no_egress,
               "do not enforce egress policies (sandboxes with one then reach nothing: they "
               "stay cut off, never open)");
  app.add_option("--egress-resolver", egress_resolver,
                 "DNS server the egress enforcers resolve allowed names with, ADDRESS[:PORT] "
                 "(default: the first nameserver of /etc/resolv.conf)");
  app.add_option("--egress-state-dir", egress_state_dir,
                 "where live egress policy changes are kept across restarts (default: "
                 "/var/lib/agvisor/egress for root, else not kept)");
  app.add_option("--egress-upstream-ca", egress_upstream_ca,
                 "PEM file of CA certificates that upstreams of brokered secrets' hosts are "
                 "also verified against, besides the system trust store");
  app.add_option("--egress-idle-timeout", egress_idle_timeout,
                 "seconds an egress tunnel may move no byte either way before it is closed "
                 "(default 300; 0 = never)")
      ->check(CLI::Range(0, 86400));
  app.add_option("--secrets-file", secrets_file,
                 "brokered secrets callers and MCP may name without their values, one NAME=VALUE "
                 "a line (mode 0600, owned by agvisord's user; read once at start; docs/egress.md, "
                 "\"Secrets\")");
  app.add_option("--snapshot-repository", snapshot_repository,
                 "the repository snapshots and forks are made in, as REPOSITORY:TAG; `create "
                 "--image snapshot:TAG` starts from one (default agvisor/snapshot; under "
                 "agvisor/, where agvisor's own images are, only agvisor/snapshot[/...])");
  app.add_flag("--e2b", e2b,
               "serve E2B's API so the official `e2b` SDK runs unchanged (docs/e2b.md): "
               "E2B_API_URL=http://HOST:PORT/e2b, E2B_SANDBOX_URL=http://HOST:PORT (the --listen "
               "address), E2B_API_KEY=e2b_ followed by the token of --token-file, e.g. "
               "E2B_API_KEY=e2b_$(cat TOKEN_FILE). Raises --max-connections to 512 and "
               "--max-unauthenticated to 256 unless given (the SDK opens a connection per "
               "stream)");
  app.add_option("--e2b-domain", e2b_domain,
                 "the domain E2B sandboxes report, for the SDK's getHost(port) = PORT-ID.DOMAIN, "
                 "e.g. e2b.example.com:8080 with a DNS record *.e2b.example.com (default: the "
                 "Host the client reached agvisord by, an address as localhost); docs/e2b.md, "
                 "Ports");
  app.add_flag("--check", check_only,
               "check the options (listen address, sizes, the Docker or kube: host's address) "
               "and exit 0 without binding, reading the token or reaching the host; 2 when one "
               "is wrong. deploy/agvisord.yaml's args are checked this way");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  auto fail = [](const Error& e) {
    LogEvent("error", e.message(), {{"code", std::string(ErrorCodeName(e.code()))}});
    return e.code() == ErrorCode::kInvalidArgument ? 2 : 1;
  };
  // Stop signals are taken by one thread (sigwait); every thread inherits the mask.
  sigset_t stop = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  ServerOptions so;
  if (!no_socket) {
    if (socket_path.empty()) {
      auto d = api::DefaultSocketPath();
      if (!d.ok()) return fail(d.error());
      socket_path = *d;
    }
    so.unix_path = socket_path;
  } else if (listen.empty()) {
    return fail(Error::InvalidArgument("--no-socket needs --listen HOST:PORT"));
  }
  so.tcp_listen = listen;
  so.allow_remote = allow_remote;
  so.max_connections = max_connections;
  so.max_unauthenticated = max_unauthenticated;
  // E2B's SDK opens one connection per stream, up to 200 at once (docs/e2b.md), all new together:
  // each is unauthenticated until its first request is read.
  if (e2b && app.count("--max-connections") == 0) so.max_connections = 512;
  if (e2b && app.count("--max-unauthenticated") == 0) so.max_unauthenticated = 256;
  so.header_timeout = std::chrono::seconds(header_timeout);
  so.ws_auth_timeout = std::chrono::seconds(header_timeout);
  auto exec_cap = ParseMemorySize("--max-exec-output", max_exec_output);
  if (!exec_cap.ok()) return fail(exec_cap.error());
  auto body = ParseMemorySize("--max-body", max_body);
  if (!body.ok()) return fail(body.error());
  so.max_body_bytes = static_cast<std::size_t>(*body);
  so.idle_timeout = std::chrono::seconds(idle_timeout);
  so.shutdown_grace = std::chrono::seconds(shutdown_grace);
  if (console && listen.empty()) {
    return fail(Error::InvalidArgument(
        "--console needs --listen 127.0.0.1:PORT (a browser cannot reach a unix socket)"));
  }
  // Before any sandbox call: every door (API, MCP, console) resolves snapshots in it.
  if (auto r = SetSnapshotRepository(snapshot_repository); !r.ok()) {
    return fail(r.error().WithContext("--snapshot-repository"));
  }
  if (check_only) {
    if (!listen.empty()) {
      if (auto l = ParseListen(listen, allow_remote); !l.ok()) return fail(l.error());
    }
    if (auto h = CheckHostAddress(docker_host); !h.ok()) return fail(h.error());
    LogEvent("info", "agvisord options checked", {{"host", docker_host}});
    return 0;
  }
  const std::uint64_t open_files = RaiseOpenFilesLimit();
  if (token_file.empty()) token_file = api::DefaultTokenPath();
  bool created = false;
  auto token = LoadOrCreateToken(token_file, &created);
  if (!token.ok()) return fail(token.error());
  so.token = *token;

  auto server = Server::Bind(so);
  if (!server.ok()) return fail(server.error());
  std::optional<desktop::TokenKey> desktop_key;
  if (!desktop_key_file.empty()) {
    auto key = desktop::ReadTokenKeyFile(desktop_key_file);
    if (!key.ok()) return fail(key.error().WithContext("--desktop-key-file"));
    desktop_key = *key;
  } else if (console) {
    // The console's desktops need tokens; a key no one else holds serves this run's own (its
    // tokens stop verifying at a restart: they live minutes anyway).
    desktop::TokenKey key;
    key.bytes.resize(desktop::kTokenKeyBytes);
    if (RAND_bytes(reinterpret_cast<unsigned char*>(key.bytes.data()),
                   static_cast<int>(key.bytes.size())) != 1) {
      return fail(Error::Internal("RAND_bytes failed (desktop key for the console)"));
    }
    desktop_key = std::move(key);
  }
  // Every door of the daemon (the API's routes, the desktop gateway, /mcp) reaches sandboxes
  // through this one place and its one set of handles.
  // Brokered secrets: the operator's file (by name), and the broker every create passes.
  std::map<std::string, std::string> operator_secrets;
  if (!secrets_file.empty()) {
    auto read = ReadOperatorSecrets(secrets_file);
    if (!read.ok()) return fail(read.error().WithContext("--secrets-file"));
    operator_secrets = std::move(*read);
    LogEvent("info", "secrets file read",
             {{"path", secrets_file}, {"secrets", std::to_string(operator_secrets.size())}});
  }
  auto vault = std::make_shared<SecretVault>(std::move(operator_secrets));
  auto sandboxes = std::make_shared<client::HandleCache>(client::InProcess(docker_host, vault));
  if (desktop_key) {
    auto mounted = MountDesktopGateway(**server, gateway::GatewayOptions{
                                                     .key = *desktop_key,
                                                     .allowed_origins = desktop_origins,
                                                     .allow_same_origin = console,
                                                     .sandboxes = sandboxes,
                                                     .docker_host = docker_host,
                                                 });
    if (!mounted.ok()) return fail(mounted.error());
    LogEvent("info", "desktop gateway mounted",
             {{"path", std::string(kDesktopRoutePath)},
              {"origins", std::to_string(desktop_origins.size())},
              {"key", desktop_key_file.empty() ? "made in memory" : desktop_key_file}});
  }
  if (console) {
    if (auto mounted = MountConsole(**server); !mounted.ok()) return fail(mounted.error());
  }
  // MCP for agents over HTTP (docs/mcp.md), bearer token as on every route. Its egress_log
  // tool reads the enforcers' log (started below; null with --no-egress).
  std::unique_ptr<EgressHost> egress_host;
  mcp::SessionOptions mcp_session;
  mcp_session.egress_log = [&egress_host](const std::string& container,
                                          std::size_t last) -> Result<std::string> {
    if (!egress_host) return NoEgressEnforcers();
    return api::EgressLogJson(api::SandboxIdFor(container),
                              AGVISOR_TRY(egress_host->Log(container, last)));
  };
  if (auto mcp = MountMcp(**server, {.sandboxes = sandboxes, .session = std::move(mcp_session)});
      !mcp.ok()) {
    return fail(mcp.error());
  }

  if (e2b) {
    if (!e2b_domain.empty() && e2b::DomainFromHost(e2b_domain) != e2b_domain) {
      return fail(Error::InvalidArgument("--e2b-domain '" + EscapeForTerminal(e2b_domain) +
                                         "': give a host name and optional port, e.g. "
                                         "e2b.example.com:8080"));
    }
    // E2B's records of its sandboxes sit beside the token (a private directory: envs may hold
    // secrets).
    const std::string state_dir =
        std::filesystem::path(token_file).parent_path().append("e2b").string();
    auto mounted = e2b::Mount(**server, sandboxes,
                              {.secret = *token, .domain = e2b_domain, .state_dir = state_dir});
    if (!mounted.ok()) return fail(mounted.error().WithContext("--e2b"));
    LogEvent("info", "E2B API mounted",
             {{"api", std::string(e2b::kApiPrefix)},
              {"max_connections", std::to_string(so.max_connections)}});
  }

  // Egress enforcers: where the sandboxes run, so only for a local Docker host.
  const bool local_docker = docker_host.empty() || docker_host.rfind("unix://", 0) == 0;
  if (!no_egress && !local_docker) {
    LogEvent("warn",
             "egress policies are not enforced: the Docker host is not this machine "
             "(run agvisord on that host for them)",
             {{"docker_host", docker_host}});
  } else if (!no_egress) {
    EgressHostOptions eo;
    if (!egress_resolver.empty()) {
      auto a = egress::ParseAuthority(egress_resolver, 53);
      if (!a.ok() || !a->literal) {
        return fail(Error::InvalidArgument("--egress-resolver '" + egress_resolver +
                                           "': expected ADDRESS[:PORT], e.g. 192.0.2.53 or "
                                           "[2001:db8::53]:5353"));
      }
      eo.resolver = *a->literal;
      eo.resolver_port = a->port;
    }
    if (!egress_upstream_ca.empty()) {
      auto pem = ReadSmallFile(egress_upstream_ca, 1 << 20);
      if (!pem || egress::AddPemCertificates(*pem, nullptr) == 0) {
        return fail(Error::InvalidArgument("--egress-upstream-ca '" + egress_upstream_ca +
                                           "': not a readable PEM file of CA certificates "
                                           "(at most 1 MiB)"));
      }
      eo.upstream_ca_pem = std::move(*pem);
    }
    eo.caps = ComputeEgressCaps(open_files);
    eo.idle_timeout = std::chrono::seconds(egress_idle_timeout);
    eo.vault = vault;
    eo.on_new_ca = [installer = std::make_shared<CaInstaller>(sandboxes)](
                       const std::string& container, const std::string& pem) {
      installer->Install(container, pem);
    };
    eo.state_dir = !egress_state_dir.empty() ? egress_state_dir
                   : ::geteuid() == 0        ? "/var/lib/agvisor/egress"
                                             : "";
    auto runtime = DockerEgressHost(docker_host);
    if (!runtime.ok()) return fail(runtime.error());
    auto started = EgressHost::Start(std::move(*runtime), eo);
    if (!started.ok()) return fail(started.error().WithContext("egress"));
    egress_host = std::move(*started);
    LogEvent("info", "egress enforcers started",
             {{"serving", std::to_string(egress_host->served())},
              {"max_tunnels", std::to_string(eo.caps.max_tunnels)},
              {"max_tunnels_per_sandbox", std::to_string(eo.caps.max_tunnels_per_sandbox)},
              {"reserved_fds", std::to_string(eo.caps.reserved_fds)},
              {"idle_timeout_s", std::to_string(egress_idle_timeout)}});
  }
  Service service({.sandboxes = sandboxes,
                   .docker_host = docker_host,
                   .desktop_key = desktop_key,
                   .max_exec_output = static_cast<std::size_t>(*exec_cap),
                   .egress = egress_host.get()});
  (*server)->SetHandlers(
      [&](const HttpRequest& r, const api::RouteMatch& m) { return service.Handle(r, m); },
      [&](const HttpRequest& r, const api::RouteMatch& m, WebSocket& ws) {
        service.HandleWebSocket(r, m, ws);
      });
  (*server)->SetStreamHandler([&](const HttpRequest& r, const api::RouteMatch& m, HttpStream& io) {
    return service.HandleStream(r, m, io);
  });
  auto recovered = service.Recover();
  if (!recovered.ok()) {
    LogEvent("warn", "cannot list the host's sandboxes yet (served on first use)",
             {{"error", recovered.error().ToString()}});
  }
  std::vector<std::pair<std::string, std::string>> fields = {
      {"token_file", token_file}, {"token_created", created ? "true" : "false"}};
  if (!so.unix_path.empty()) fields.emplace_back("socket", so.unix_path);
  if (!so.tcp_listen.empty()) {
    fields.emplace_back("listen", so.tcp_listen);
    fields.emplace_back("tcp_port", std::to_string((*server)->tcp_port()));
    if (console) {
      std::string host = ParseListen(so.tcp_listen, true)->first;
      if (host.find(':') != std::string::npos) host = "[" + host + "]";
      fields.emplace_back("console", "http://" + host + ":" +
                                         std::to_string((*server)->tcp_port()) +
                                         std::string(kConsolePath));
    }
  }
  fields.emplace_back("sandboxes_recovered", std::to_string(recovered.ok() ? *recovered : 0));
  LogEvent("info", "agvisord listening", fields);

  // A paused sandbox's agent is frozen: past its lifetime, the daemon ends it (docs/lifecycle.md).
  std::thread([&service] {
    for (;;) {
      std::this_thread::sleep_for(Service::kPausedSweepInterval);
      service.SweepPaused();
    }
  }).detach();
  Server* srv = server->get();
  std::thread signals([srv, stop] {
    int sig = 0;
    sigwait(&stop, &sig);
    LogEvent("info", "signal received", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
    srv->Shutdown();
  });
  std::size_t left = srv->Run();
  // Warm pools' members would end on their own (their safety lifetime); remove them now.
  service.ClosePools();
  // Enforcers stop and their firewall openings close: egress sandboxes are cut off until the
  // next start (fail closed).
  egress_host.reset();
  LogEvent("info", "agvisord stopped", {{"connections_left", std::to_string(left)}});
  // Connections still open past the grace period hold references into the server and the
  // service: leave without running destructors under them.
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace agvisor::server
