#include "agvisor/sandbox/egress_network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/http/client.h"
#include "agvisor/sandbox/runtime.h"  // HostSshArgs

namespace agvisor {
std::string EgressNetworkName(std::string_view container_name) {
  return std::string(container_name) + "-egress";
}

std::vector<std::string> EgressProxyEnv(std::string_view gateway) {
  const std::string url = "http://" + std::string(gateway) + ":" + std::to_string(kEgressProxyPort);
  const std::string no_proxy = "localhost,127.0.0.1,::1";
  return {"HTTP_PROXY=" + url,  "HTTPS_PROXY=" + url,   "http_proxy=" + url,
          "https_proxy=" + url, "NO_PROXY=" + no_proxy, "no_proxy=" + no_proxy};
}

Result<void> WaitForEnforcer(std::string_view gateway, std::chrono::milliseconds wait) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(kEgressProxyPort);
  if (::inet_pton(AF_INET, std::string(gateway).c_str(), &addr.sin_addr) != 1) {
    return Error::Internal("egress network gateway '" + std::string(gateway) +
                           "' is not an IPv4 address");
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Error::FromErrno("socket", errno);
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      return Ok();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Error::Unavailable(
          "no egress enforcer answers at " + std::string(gateway) + ":" +
          std::to_string(kEgressProxyPort) +
          ": egress policies are enforced by agvisord on the Docker host; start it (as root: "
          "`agvisord &`, see `agvisord --help`) and create the sandbox again");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

namespace {

// One `ssh -W GATEWAY:PORT` with its stdin at EOF: true when the remote connect succeeded, false
// when it was refused (ssh says "stdio forwarding failed"), an error when ssh itself failed.
Result<bool> ProbeOverSsh(const http::Endpoint& ep, const http::ClientOptions& options,
                          std::string_view gateway) {
  SubprocessOptions so;
  so.argv = http::SshStdioForwardCommandLine(ep, options, gateway, kEgressProxyPort);
  so.pipe_stdout = true;  // what the enforcer might send: nothing of ours to see
  so.pipe_stderr = true;
  so.new_process_group = true;
  auto p = AGVISOR_TRY(Subprocess::Spawn(std::move(so)));
  // ssh's connect timeout, plus the seconds the channel takes on a slow link: a peer that
  // accepted but never closes after our EOF is not an enforcer (it closes at once).
  auto st = p.WaitFor(options.connect_timeout + std::chrono::seconds(10));
  if (!st.ok()) {
    (void)p.Kill(SIGKILL);
    return Error::Unavailable("ssh -W " + std::string(gateway) + ":" +
                              std::to_string(kEgressProxyPort) + " on " + ep.ToString() +
                              " did not finish in time");
  }
  if (st->success()) return true;
  std::string said;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p.stderr_fd().get(), buf, sizeof buf)) > 0) {
    said.append(buf, static_cast<std::size_t>(n));
    if (said.size() > 16384) break;
  }
  // The remote host's connect was refused (nothing listens yet): "channel 0: open failed:
  // connect failed: Connection refused". Any other failure is ssh's or its server's, e.g.
  // "administratively prohibited" where sshd has AllowTcpForwarding no.
  if (said.find("open failed: connect failed") != std::string::npos) return false;
  while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
  return Error::Unavailable("cannot check the egress enforcer on " + ep.ToString() +
                            " over ssh (`ssh -W`, which needs AllowTcpForwarding on that host's "
                            "sshd; " +
                            st->ToString() + ")" + (said.empty() ? "" : ": " + said));
}

}  // namespace

Result<void> WaitForEnforcer(std::string_view host, std::string_view gateway,
                             std::chrono::milliseconds wait) {
  const http::Endpoint ep = AGVISOR_TRY(http::ParseEndpoint(host));
  if (ep.kind != http::Endpoint::Kind::kSsh) return WaitForEnforcer(gateway, wait);
  // The gateway came from Docker; still, only an address goes on ssh's command line.
  sockaddr_in addr{};
  if (::inet_pton(AF_INET, std::string(gateway).c_str(), &addr.sin_addr) != 1) {
    return Error::Internal("egress network gateway '" + std::string(gateway) +
                           "' is not an IPv4 address");
  }
  http::ClientOptions options;
  options.ssh_args = HostSshArgs();  // $AGVISOR_SSH_ARGS, as for the Docker tunnel
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (AGVISOR_TRY(ProbeOverSsh(ep, options, gateway))) return Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string where = ep.host;
      if (!ep.user.empty()) where = ep.user + "@" + where;
      if (ep.port != 0) where = "-p " + std::to_string(ep.port) + " " + where;
      return Error::Unavailable(
          "no egress enforcer answers at " + std::string(gateway) + ":" +
          std::to_string(kEgressProxyPort) + " on " + ep.ToString() +
          ": egress policies are enforced by agvisord on the Docker host; start it there (`ssh " +
          where +
          "`, then as root: `agvisord &`, see `agvisord --help`) and create the sandbox "
          "again");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace agvisor

namespace agvisor {
namespace {

std::string ReadSmall(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str().substr(0, 4096);
}

std::string_view StateWord(FirewallState s) {
  switch (s) {
    case FirewallState::kProtected:
      return "protected";
    case FirewallState::kUnprotected:
      return "unprotected";
    case FirewallState::kExternal:
      return "external";
    case FirewallState::kUnknown:
      break;
  }
  return "unknown";
}

std::string Trimmed(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) {
    s.remove_suffix(1);
  }
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return std::string(s);
}

}  // namespace

std::string FirewallStatePath() {
  const char* env = std::getenv("AGVISOR_FIREWALL_STATE");
  return env && *env ? env : std::string(kFirewallStateFile);
}

std::string CurrentBootId() { return Trimmed(ReadSmall("/proc/sys/kernel/random/boot_id")); }

FirewallStatus ParseFirewallState(std::string_view text, std::string_view boot_id) {
  FirewallStatus out;
  std::string boot;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    const std::size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : Trimmed(line.substr(space + 1));
    if (key == "boot") boot = value;
    if (key == "detail") out.detail = value;
    if (key == "state") {
      for (FirewallState s :
           {FirewallState::kProtected, FirewallState::kUnprotected, FirewallState::kExternal}) {
        if (value == StateWord(s)) out.state = s;
      }
    }
  }
  if (boot_id.empty() || boot != boot_id) return {};  // of another boot: the rules are gone
  return out;
}

std::string FormatFirewallState(const FirewallStatus& status, std::string_view boot_id) {
  std::string detail = status.detail;
  for (char& c : detail) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return "boot " + std::string(boot_id) + "\nstate " + std::string(StateWord(status.state)) + "\n" +
         (detail.empty() ? "" : "detail " + detail + "\n");
}

Result<void> WriteFirewallState(const FirewallStatus& status) {
  namespace fs = std::filesystem;
  const fs::path path = FirewallStatePath();
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  // A new file of our own (mkstemp: O_EXCL, no link followed), then renamed over the state, so a
  // reader never sees half a file and a planted link in a shared directory is never written to.
  std::string tmp_name = path.string() + ".XXXXXX";
  UniqueFd fd(::mkostemp(tmp_name.data(), O_CLOEXEC));
  if (!fd) return Error::FromErrno("mkostemp " + tmp_name, errno);
  const fs::path tmp = tmp_name;
  const std::string text = FormatFirewallState(status, CurrentBootId());
  if (::fchmod(fd.get(), 0644) != 0 ||
      ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    fs::remove(tmp, ec);
    return Error::FromErrno("cannot write " + tmp.string(), err);
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Error::Unavailable("cannot write " + path.string() + ": " + ec.message());
  }
  return Ok();
}

FirewallStatus HostFirewallStatus(std::string_view host) {
  // Not a Docker host address (a kube: one): no file to read.
  auto ep = http::ParseEndpoint(host);
  if (!ep.ok() || ep->kind == http::Endpoint::Kind::kTcp ||
      ep->kind == http::Endpoint::Kind::kHttps) {
    return {};
  }
  if (ep->kind != http::Endpoint::Kind::kSsh) {
    return ParseFirewallState(ReadSmall(FirewallStatePath()), CurrentBootId());
  }
  // An ssh:// host: its own file and boot id.
  http::ClientOptions options;
  options.ssh_args = HostSshArgs();
  auto r = RunCommand(http::SshRemoteCommandLine(*ep, options,
                                                 "cat /proc/sys/kernel/random/boot_id; cat " +
                                                     std::string(kFirewallStateFile) +
                                                     " 2>/dev/null; true"));
  FirewallStatus status;
  if (r.ok() && r->status.success()) {
    const std::size_t nl = r->out.find('\n');
    const std::string boot = Trimmed(r->out.substr(0, nl));
    status = ParseFirewallState(nl == std::string::npos ? "" : r->out.substr(nl + 1), boot);
  }
  return status;
}

Result<void> RequireFirewall(std::string_view host, const FirewallStatus& status) {
  if (status.state != FirewallState::kUnprotected) return Ok();
  const std::string where = host.empty() ? "this host" : std::string(host);
  return Error::Unavailable(
      "the sandbox firewall is not in place on " + where +
      (status.detail.empty() ? "" : " (" + status.detail + ")") +
      ", so a sandbox would reach the host's own services and its private network: run "
      "`scripts/sandbox-firewall block` as root there (scripts/setup-host does; the rules do not "
      "survive a reboot). A host that isolates sandboxes by other means says so with "
      "`scripts/sandbox-firewall external` (docs/security.md)");
}

}  // namespace agvisor
