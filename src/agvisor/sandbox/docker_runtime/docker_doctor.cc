// `agvisor doctor` on a Docker host (docker_doctor.h).
#include "agvisor/sandbox/docker_runtime/docker_doctor.h"

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "agvisor/base/fs.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/docker_runtime/host_caps.h"
#include "agvisor/sandbox/docker_runtime/runtime_check.h"
#include "agvisor/sandbox/egress_network.h"
#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/sandbox.h"

namespace agvisor {
namespace {

using Status = HostCheck::Status;

std::string Ms(std::chrono::steady_clock::duration d) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f ms", std::chrono::duration<double, std::milli>(d).count());
  return b;
}

std::string Join(const std::vector<std::string>& v, std::string_view sep = " ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : std::string(sep)) + x;
  return s;
}

// From inside a bridge sandbox: a TCP connect to its gateway (this host) and to the cloud
// metadata address. scripts/sandbox-firewall rejects both with ICMP "administratively
// prohibited", which a connect reports as EHOSTUNREACH at once; without it the gateway answers
// (connected or ECONNREFUSED) and the metadata address connects or times out. Only a SYN is
// sent; the probe reads nothing.
constexpr std::string_view kFirewallProbe =
    "import errno, socket, struct\n"
    "gw = None\n"
    "for line in open('/proc/net/route').read().splitlines()[1:]:\n"
    "    f = line.split()\n"
    "    if f[1] == '00000000': gw = socket.inet_ntoa(struct.pack('<I', int(f[2], 16)))\n"
    "for h, p in ((gw, 9), ('169.254.169.254', 80)):\n"
    "    try: socket.create_connection((h, p), timeout=2).close(); r = 'connected'\n"
    "    except socket.timeout: r = 'timeout'\n"
    "    except OSError as e: r = errno.errorcode.get(e.errno, str(e))\n"
    "    print(h, r)\n";

HostCheck FirewallCheck(Sandbox& sb) {
  HostCheck c{.name = "sandbox firewall"};
  auto r = sb.Exec({"python3", "-c", std::string(kFirewallProbe)}, {.timeout = 30});
  if (!r.ok() || r->exit_code != 0) {
    c.status = Status::kInfo;
    c.detail =
        "not probed (needs python3 in the image): " + (r.ok() ? r->err : r.error().message());
    return c;
  }
  std::string gateway, gateway_result, metadata_result, ignored;
  std::istringstream in(r->out);
  in >> gateway >> gateway_result >> ignored >> metadata_result;
  const bool host_closed = gateway_result == "EHOSTUNREACH";
  const bool metadata_closed = metadata_result == "EHOSTUNREACH";
  if (host_closed && metadata_closed) {
    c.detail = "a bridge sandbox is refused by this host (" + gateway +
               ") and by 169.254.169.254 (scripts/sandbox-firewall's rules)";
    return c;
  }
  c.status = Status::kWarn;
  c.detail =
      "a bridge sandbox reaches " +
      std::string(host_closed ? ""
                              : "this host's ports (" + gateway + ": " + gateway_result + ")") +
      (host_closed || metadata_closed ? "" : " and ") +
      (metadata_closed ? ""
                       : "the cloud metadata address (169.254.169.254: " + metadata_result + ")") +
      ": the sandbox firewall is not in place, so sandboxes may also reach each other and "
      "private addresses";
  c.fix = "sudo scripts/sandbox-firewall block (scripts/setup-host installs it; docs/security.md)";
  return c;
}

// Starts a real sandbox with `network` and lists its interfaces from /proc/net/dev; for
// bridge, also probes the sandbox firewall into `firewall`.
HostCheck NetworkCheck(const std::shared_ptr<Runtime>& runtime, const std::string& image,
                       const std::string& network, HostCheck* firewall = nullptr) {
  HostCheck c{.name = "network " + network};
  SandboxSpec spec;
  spec.host = runtime->host();
  spec.image = image;
  spec.network = network;
  spec.limits.disk = "none";
  spec.lifetime = 120;
  auto sb = Sandbox::Create(runtime, spec);
  if (!sb.ok()) {
    c.status = Status::kFail;
    c.detail = "a sandbox with network=" + network + " does not start: " + sb.error().message();
    c.fix =
        "see the runsc network mode check; scripts/setup-host probes and registers the mode "
        "that works";
    return c;
  }
  auto r = (*sb)->ExecShell("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '",
                            {.timeout = 30});
  if (firewall) *firewall = FirewallCheck(**sb);
  (void)(*sb)->Stop();
  if (!r.ok() || r->exit_code != 0) {
    c.status = Status::kFail;
    c.detail = "a command in a network=" + network +
               " sandbox failed: " + (r.ok() ? r->err : r.error().message());
    return c;
  }
  c.detail = "works; interfaces inside: " + r->out;
  if (network == "none" && r->out.find("eth") != std::string::npos) {
    c.status = Status::kWarn;
    c.detail += "(expected only lo)";
  }
  return c;
}

// A whole number read from the start of `text` (after `skip` words), or -1.
std::int64_t NumberAt(const std::string& text, int skip = 0) {
  std::istringstream in(text);
  std::string word;
  for (int i = 0; i <= skip; ++i) {
    if (!(in >> word)) return -1;
  }
  try {
    return std::stoll(word);
  } catch (const std::exception&) {
    return -1;
  }
}

std::int64_t EntriesIn(const std::string& dir) {
  std::error_code ec;
  std::int64_t n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

// The limits of DensityFacts as this machine shows them (the Docker host must be this machine).
DensityFacts ReadDensityFacts(Runtime& runtime, docker::Client& docker) {
  DensityFacts f;
  f.pid_max = NumberAt(ReadSmallFile("/proc/sys/kernel/pid_max", 64).value_or(""));
  // "0.20 0.30 0.40 2/17568 1234": runnable/all tasks.
  const std::string load = ReadSmallFile("/proc/loadavg", 256).value_or("");
  if (auto slash = load.find('/'); slash != std::string::npos) {
    f.tasks_now = NumberAt(load.substr(slash + 1));
  }
  if (auto list = runtime.List({std::string(kLabelManaged)}); list.ok()) {
    f.sandboxes_now = std::count_if(list->begin(), list->end(),
                                    [](const InstanceSummary& i) { return i.status == "running"; });
  }
  f.bridge_ports = EntriesIn("/sys/class/net/docker0/brif");
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string dir = it->path().string();
    if (ReadSmallFile(dir + "/comm", 64).value_or("") != "dockerd\n") continue;
    std::istringstream limits(ReadSmallFile(dir + "/limits", 8192).value_or(""));
    for (std::string line; std::getline(limits, line);) {
      if (line.starts_with("Max open files")) f.dockerd_nofile = NumberAt(line, 3);
    }
    f.dockerd_fds = EntriesIn(dir + "/fd");
    break;
  }
  f.pool_networks =
      AddressPoolNetworks(ReadSmallFile("/etc/docker/daemon.json", 1 << 20).value_or(""))
          .value_or(-1);
  if (auto nets = docker.ListNetworks({}); nets.ok()) {
    f.networks_now = std::count_if(nets->begin(), nets->end(), [](const docker::NetworkInfo& n) {
      return n.driver == "bridge";
    });
  }
  return f;
}

}  // namespace

std::optional<std::int64_t> AddressPoolNetworks(std::string_view daemon_json) {
  // Docker's defaults (libnetwork's ipamutils): 172.17.0.0/16-172.31.0.0/16 as /16s, and
  // 192.168.0.0/16 as /20s.
  constexpr std::int64_t kDockerDefault = 15 + 16;
  if (daemon_json.find_first_not_of(" \t\r\n") == std::string_view::npos) return kDockerDefault;
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(daemon_json, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const auto* pools = v.as_object().if_contains("default-address-pools");
  if (pools == nullptr) return kDockerDefault;
  if (!pools->is_array()) return std::nullopt;
  std::int64_t n = 0;
  for (const auto& p : pools->as_array()) {
    const auto* o = p.if_object();
    const auto* base = o ? o->if_contains("base") : nullptr;
    const auto* size = o ? o->if_contains("size") : nullptr;
    if (!base || !base->is_string() || !size || !size->is_int64()) return std::nullopt;
    const std::string b(base->as_string());
    const auto slash = b.find('/');
    if (slash == std::string::npos) return std::nullopt;
    if (b.find(':') != std::string::npos) continue;  // IPv6: networks are counted by IPv4
    const std::int64_t prefix = NumberAt(b.substr(slash + 1));
    const std::int64_t bits = size->as_int64();
    if (prefix < 0 || prefix > 32 || bits < prefix || bits > 32) return std::nullopt;
    n += std::int64_t{1} << std::min<std::int64_t>(bits - prefix, 30);
  }
  return n;
}

std::vector<HostCheck> DensityChecks(const DensityFacts& f, std::int64_t target) {
  struct Room {
    std::int64_t more;
    std::string limit;
    std::string fix;
  };
  auto n = [](std::int64_t x) { return std::to_string(x); };
  std::vector<Room> rooms;
  if (f.pid_max > 0 && f.tasks_now >= 0) {
    rooms.push_back({std::max<std::int64_t>(0, f.pid_max - f.tasks_now) / kTasksPerIdleSandbox,
                     "kernel.pid_max " + n(f.pid_max) + " (" + n(f.tasks_now) +
                         " host tasks now, ~" + n(kTasksPerIdleSandbox) + " per idle sandbox)",
                     "sysctl -w kernel.pid_max=4194304 (scripts/setup-host sets it and keeps it "
                     "in /etc/sysctl.d/90-agvisor.conf)"});
  }
  if (f.bridge_ports >= 0) {
    // Port 0 is reserved: 1023 ports in all.
    rooms.push_back({std::max<std::int64_t>(0, kBridgePortLimit - 1 - f.bridge_ports),
                     "the docker0 bridge's " + n(kBridgePortLimit - 1) + " ports (" +
                         n(f.bridge_ports) + " used, one per bridge sandbox)",
                     "spread sandboxes over networks of their own (`agvisor network create "
                     "NAME`, then create --network NAME): each is a bridge with its own ports"});
  }
  if (f.dockerd_nofile > 0 && f.dockerd_fds >= 0) {
    rooms.push_back(
        {std::max<std::int64_t>(0, f.dockerd_nofile - f.dockerd_fds) / kDockerdFilesPerSandbox,
         "dockerd's open-files limit " + n(f.dockerd_nofile) + " (" + n(f.dockerd_fds) +
             " open, ~" + n(kDockerdFilesPerSandbox) + " per sandbox)",
         "start dockerd with a higher limit (`ulimit -n 1048576` before it, or LimitNOFILE= in "
         "its service)"});
  }
  std::vector<HostCheck> out;
  if (rooms.empty()) {
    out.push_back({"host limits", Status::kInfo, "could not read this host's limits", ""});
  } else {
    std::sort(rooms.begin(), rooms.end(),
              [](const Room& a, const Room& b) { return a.more < b.more; });
    const std::int64_t total = f.sandboxes_now + rooms.front().more;
    std::string detail = "room for about " + n(rooms.front().more) + " more idle sandboxes (" +
                         n(f.sandboxes_now) + " running) before " + rooms.front().limit;
    for (std::size_t i = 1; i < rooms.size(); ++i) {
      detail += "; then " + rooms[i].limit + ": " + n(rooms[i].more) + " more";
    }
    if (total < target) {
      out.push_back({"host limits", Status::kWarn, detail + "; fewer than " + n(target) + " in all",
                     rooms.front().fix});
    } else {
      out.push_back({"host limits", Status::kOk, detail, ""});
    }
  }
  if (f.pool_networks >= 0 && f.networks_now >= 0) {
    const std::int64_t more = std::max<std::int64_t>(0, f.pool_networks - f.networks_now);
    std::string detail =
        "each sandbox with an egress policy takes a network of its own: "
        "Docker's address pools hold " +
        n(f.pool_networks) + " networks, " + n(f.networks_now) +
        " bridge networks exist, room for " + n(more) + " more";
    if (more < target) {
      out.push_back({"egress networks", Status::kWarn, detail,
                     "give Docker a pool of small networks in /etc/docker/daemon.json, e.g. "
                     "\"default-address-pools\": [{\"base\": \"10.210.0.0/16\", \"size\": 26}] "
                     "(1024 networks of 62 addresses; a range this host's own networks do not "
                     "use), then restart dockerd"});
    } else {
      out.push_back({"egress networks", Status::kOk, detail, ""});
    }
  }
  return out;
}

std::vector<HostCheck> DiagnoseDockerHost(std::string_view host) {
  std::vector<HostCheck> checks;
  const std::string where = host.empty() ? "this host" : std::string(host);

  // 1. Docker reachable, and its API version.
  auto t0 = std::chrono::steady_clock::now();
  auto docker = ConnectDockerHost(host);
  if (!docker.ok()) {
    checks.push_back({"docker", Status::kFail, docker.error().message(),
                      host.empty() || host.starts_with("unix://")
                          ? "start dockerd: sudo scripts/setup-host (installs and starts it)"
                          : "check that `ssh` reaches the host without a password prompt and "
                            "that its user may use /var/run/docker.sock"});
    return checks;
  }
  auto version = (*docker)->Version();
  auto info = (*docker)->Info();
  if (!version.ok() || !info.ok()) {
    checks.push_back({"docker", Status::kFail,
                      (!version.ok() ? version.error() : info.error()).message(),
                      "start dockerd: sudo scripts/setup-host"});
    return checks;
  }
  checks.push_back({"docker", Status::kOk,
                    "Docker " + version->version + " at " + (*docker)->endpoint().ToString() +
                        ", Engine API " + version->api_version + " (speaking " +
                        (*docker)->api_version().ToString() + "), answered in " +
                        Ms(std::chrono::steady_clock::now() - t0)});

  // 2. Runtimes, and which are gVisor: each binary is asked what it is (runtime_check.h), the
  // check every sandbox create makes.
  // The sandboxes below are made on a runtime over this client (one connection: on an ssh://
  // host, one ssh process).
  const std::shared_ptr<Runtime> runtime =
      std::make_shared<DockerRuntime>(std::string(host), *docker);
  RuntimeCheckCache runtime_check;
  auto identities = IdentifyHostRuntimes(runtime_check, **docker);
  if (!identities.ok()) {
    checks.push_back({"runtime", Status::kFail, identities.error().message(),
                      "start dockerd: sudo scripts/setup-host"});
    return checks;
  }
  std::vector<std::string> gvisor, other;
  std::map<std::string, bool> is_gvisor;
  for (const auto& id : *identities) {
    is_gvisor[id.name] = id.gvisor;
    (id.gvisor ? gvisor : other)
        .push_back(id.name + " (" + id.path + (id.args.empty() ? "" : " " + Join(id.args)) +
                   (id.gvisor ? ")" : ": " + id.evidence + ")"));
  }
  auto runsc = info->runtimes.find("runsc");
  const std::string refused = other.empty() ? "none" : Join(other, ", ");
  if (runsc == info->runtimes.end() || !is_gvisor["runsc"]) {
    checks.push_back(
        {"runtime", Status::kFail,
         "gVisor runtimes: " + (gvisor.empty() ? std::string("none") : Join(gvisor, ", ")) +
             "; not gVisor (sandboxes refuse them): " + refused +
             "; the default runtime runsc is missing or not gVisor",
         "install runsc and register it: sudo scripts/setup-host"});
    return checks;
  }
  checks.push_back({"runtime", Status::kOk,
                    "gVisor runtimes (asked with --version): " + Join(gvisor, ", ") +
                        "; not gVisor (sandboxes refuse them): " + refused});

  // 3. runsc's network mode.
  const auto& args = runsc->second.args;
  if (std::find(args.begin(), args.end(), "--network=host") != args.end()) {
    checks.push_back(
        {"runsc network mode", Status::kWarn,
         "runsc runs with --network=host (hostinet): gVisor's own network stack does not work "
         "on this kernel, so sandboxes with a network use the HOST kernel's network stack inside "
         "their own network namespace. Docker's bridge semantics hold; the network stack is not "
         "isolated by gVisor",
         "none on this kernel; on a kernel where runsc's netstack works, re-run sudo "
         "scripts/setup-host and it registers runsc without --network=host"});
  } else if (std::find(args.begin(), args.end(), "--network=none") != args.end()) {
    checks.push_back({"runsc network mode", Status::kWarn,
                      "runsc runs with --network=none: no sandbox has a network",
                      "re-run sudo scripts/setup-host to probe the modes again"});
  } else {
    checks.push_back({"runsc network mode", Status::kOk, "gVisor's own network stack (netstack)"});
  }

  // 3b. network none's twin (sandbox/sandbox.cc: network none runs on it where registered).
  auto twin = info->runtimes.find("runsc-none");
  if (twin == info->runtimes.end()) {
    checks.push_back(
        {"network none runtime", Status::kWarn,
         "no runsc-none runtime: sandboxes with network none use Docker's network none on runsc "
         "(its network mode above) and start ~250 ms slower",
         "sudo scripts/setup-host registers runsc-none (runsc --network=none)"});
  } else if (!is_gvisor["runsc-none"]) {
    checks.push_back({"network none runtime", Status::kFail,
                      "runsc-none is registered but its binary " + twin->second.path +
                          " is not gVisor: sandboxes with network none are refused",
                      "sudo scripts/setup-host registers it as runsc --network=none"});
  } else if (std::find(twin->second.args.begin(), twin->second.args.end(), "--network=none") ==
             twin->second.args.end()) {
    checks.push_back({"network none runtime", Status::kWarn,
                      "runsc-none is registered but without --network=none (" + twin->second.path +
                          " " + Join(twin->second.args) +
                          "): sandboxes with network none run on it anyway",
                      "sudo scripts/setup-host registers it as runsc --network=none"});
  } else {
    checks.push_back({"network none runtime", Status::kOk,
                      "sandboxes with network none run on runsc-none: gVisor's own loopback-only "
                      "network stack, started without Docker's network hook"});
  }

  // 4. The default image.
  std::string image(kDefaultImage);
  auto img = (*docker)->InspectImage(image);
  if (!img.ok()) {
    checks.push_back({"image", Status::kFail,
                      image + " is not on " + where + ": " + img.error().message(),
                      "build it: sudo agvisor image build base (scripts/setup-host does it)"});
    return checks;
  }
  char size[32];
  std::snprintf(size, sizeof size, "%.0f MB", static_cast<double>(img->size) / 1e6);
  checks.push_back({"image", Status::kOk, image + " present (" + size + ")"});

  // 5. A real sandbox under runsc: create to ready, then an exec round trip.
  {
    SandboxSpec spec;
    spec.host = host;
    spec.network = "none";
    spec.limits.disk = "none";
    spec.lifetime = 120;
    auto start = std::chrono::steady_clock::now();
    auto sb = Sandbox::Create(runtime, spec);
    if (!sb.ok()) {
      checks.push_back({"sandbox", Status::kFail,
                        "a sandbox does not start under runsc: " + sb.error().message(),
                        "run `sudo scripts/setup-host`; see the dockerd log for the runtime's "
                        "error"});
      return checks;
    }
    auto created = std::chrono::steady_clock::now();
    auto r = (*sb)->Exec({"true"}, {.timeout = 30});
    auto done = std::chrono::steady_clock::now();
    auto kernel = (*sb)->Exec({"uname", "-r"}, {.timeout = 30});
    (void)(*sb)->Stop();
    if (!r.ok() || r->exit_code != 0) {
      checks.push_back({"sandbox", Status::kFail,
                        "a sandbox started but `true` failed inside: " +
                            (r.ok() ? "exit " + std::to_string(r->exit_code) + " " + r->err
                                    : r.error().message()),
                        "report this with the output of `agvisor doctor --json`"});
      return checks;
    }
    std::string k = kernel.ok() ? kernel->out : "";
    if (!k.empty() && k.back() == '\n') k.pop_back();
    checks.push_back({"sandbox", Status::kOk,
                      "a runsc sandbox started in " + Ms(created - start) + "; exec of `true` " +
                          Ms(done - created) + "; kernel inside: " + k});
  }

  // 5b. gVisor platforms (SandboxSpec::platform): systrap is runsc's own (proved above); each
  // other one needs its runtime (runsc-PLATFORM), and works when a sandbox starts on it. Without
  // the default's (ptrace), sandboxes fall back to systrap (Runtime::DefaultPlatform): a warning.
  {
    std::vector<std::string> works = {"systrap (runsc)"}, broken, missing;
    for (std::string_view platform : {kPlatformPtrace}) {
      const std::string p(platform), rt = PlatformRuntimeOf("runsc", platform);
      if (auto d = DecidePlatformRuntime(where, "runsc", platform, *info); !d.ok()) {
        (info->runtimes.contains(rt) ? broken : missing).push_back(p + ": " + d.error().message());
        continue;
      }
      if (!is_gvisor[rt]) {
        broken.push_back(p + ": " + rt + " is not gVisor");
        continue;
      }
      SandboxSpec spec;
      spec.host = host;
      spec.network = "none";
      spec.limits.disk = "none";
      spec.lifetime = 120;
      spec.platform = p;
      auto start = std::chrono::steady_clock::now();
      auto sb = Sandbox::Create(runtime, spec);
      if (!sb.ok()) {
        broken.push_back(p + " (" + rt + "): a sandbox does not start: " + sb.error().message());
        continue;
      }
      auto created = std::chrono::steady_clock::now();
      auto r = (*sb)->Exec({"true"}, {.timeout = 30});
      auto done = std::chrono::steady_clock::now();
      (void)(*sb)->Stop();
      if (!r.ok() || r->exit_code != 0) {
        broken.push_back(p + " (" + rt + "): `true` failed inside: " +
                         (r.ok() ? "exit " + std::to_string(r->exit_code) : r.error().message()));
        continue;
      }
      const std::string none_twin = info->runtimes.contains(NoneTwinOf(rt))
                                        ? ", " + NoneTwinOf(rt) + " for network none"
                                        : ", no " + NoneTwinOf(rt);
      works.push_back(p + (platform == kDefaultPlatform ? " (the default; " : " (") + rt +
                      none_twin + "; started in " + Ms(created - start) + ", exec of `true` " +
                      Ms(done - created) + ")");
    }
    const bool default_works = broken.empty() && missing.empty();
    std::string detail =
        (default_works ? std::string()
                       : "the default platform, " + std::string(kDefaultPlatform) +
                             ", is not available here: sandboxes that ask for none fall back to "
                             "systrap (an idle one keeps ~4% of a CPU busy instead of ~0.1%; "
                             "creates warn once per host). ") +
        "work: " + Join(works, "; ");
    if (!broken.empty()) detail += ". Registered but failing: " + Join(broken, "; ");
    if (!missing.empty()) detail += ". Not registered: " + Join(missing, "; ");
    checks.push_back({"platforms", broken.empty() ? Status::kOk : Status::kWarn, detail,
                      broken.empty() && missing.empty()
                          ? ""
                          : "sudo scripts/setup-host registers runsc-ptrace when it starts here "
                            "(bench/README.md, \"Density\" and \"gVisor platform\")"});
  }

  // 6. Which network modes work.
  HostCheck firewall{.name = "sandbox firewall", .status = Status::kInfo, .detail = "not probed"};
  // What the host recorded (egress_network.h): while it says unprotected, creates are refused.
  const FirewallStatus recorded = HostFirewallStatus(host);
  if (recorded.state == FirewallState::kUnprotected) {
    checks.push_back({"network bridge", Status::kWarn,
                      "not started: sandboxes with a network are refused on this host until the "
                      "sandbox firewall is in place (below)",
                      ""});
    firewall.status = Status::kWarn;
    firewall.detail = "not in place (" +
                      (recorded.detail.empty() ? std::string("recorded") : recorded.detail) +
                      "): bridge and egress sandboxes are refused until it is";
    firewall.fix =
        "sudo scripts/sandbox-firewall block (scripts/setup-host installs it; docs/security.md)";
  } else {
    checks.push_back(NetworkCheck(runtime, image, "bridge", &firewall));
    firewall.detail += recorded.state == FirewallState::kExternal
                           ? "; this host declared that it isolates sandboxes by other means "
                             "(scripts/sandbox-firewall external)"
                       : recorded.state == FirewallState::kUnknown
                           ? "; no state recorded this boot (agvisord and scripts/sandbox-firewall "
                             "write it)"
                           : "";
  }
  checks.push_back(std::move(firewall));
  checks.push_back(NetworkCheck(runtime, image, "none"));

  // 7. Root-disk cap.
  DiskCapCache disk_caps;
  auto disk = ProbeDiskCap(disk_caps, **docker, "runsc", image);
  if (!disk.ok()) {
    checks.push_back({"disk cap", Status::kWarn, "could not probe: " + disk.error().message(), ""});
  } else if (disk->supported) {
    checks.push_back({"disk cap", Status::kOk, "root-disk caps are enforced: " + disk->detail});
  } else {
    checks.push_back(
        {"disk cap", Status::kWarn,
         "no root-disk cap can be enforced on " + where + ": " + disk->detail +
             ". Sandboxes with the default limits run uncapped (with a warning); an explicit "
             "--disk is refused",
         "use a Docker 24+ daemon (API >= 1.43) and a runsc with overlay2 size= support, or "
         "pass --disk none to say uncapped is fine"});
  }

  // 8. cgroups.
  checks.push_back({"cgroups", Status::kInfo,
                    "cgroup v" + info->cgroup_version + " (" + info->cgroup_driver +
                        " driver), storage driver " + info->driver + ", kernel " +
                        info->kernel_version + ", " + std::to_string(info->ncpu) + " CPUs"});

  // 9. What stops the count of idle sandboxes (read on this machine: a local Docker host only).
  if ((*docker)->endpoint().kind == http::Endpoint::Kind::kUnix && !host.starts_with("ssh://")) {
    for (auto& c : DensityChecks(ReadDensityFacts(*runtime, **docker))) {
      checks.push_back(std::move(c));
    }
  } else {
    checks.push_back({"host limits", Status::kInfo,
                      "not checked: the Docker host is not this machine (run doctor there)", ""});
  }
  return checks;
}

}  // namespace agvisor
