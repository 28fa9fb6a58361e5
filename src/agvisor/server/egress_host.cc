#include "agvisor/server/egress_host.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agvisor/base/subprocess.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/egress_network.h"
#include "agvisor/server/log.h"

namespace agvisor::server {
namespace {

namespace fs = std::filesystem;

// How often networks whose sandbox is gone are looked for (an inspect per network).
constexpr std::chrono::seconds kOrphanCheck{5};
// A network without its sandbox this long is removed (a create may be between the network and
// the container).
constexpr std::chrono::seconds kOrphanGrace{60};
// A network that could not be served (its policy unreadable, its gateway taken by another
// process) is tried again after this, not every period (and logged once per try).
constexpr std::chrono::seconds kRetryPause{5};
// How often the sandbox firewall's hooks are checked (a few `iptables -C` calls).
constexpr std::chrono::seconds kFirewallCheck{5};
// The comment scripts/sandbox-firewall puts on every rule of its own.
constexpr std::string_view kFirewallTag = "agvisor-sandbox-firewall";
// Decision log lines per sandbox per second; the rest are counted and summarised (the ring and
// the counters keep every decision): a sandbox cannot flood agvisord's log.
constexpr int kLogLinesPerSecond = 20;

// Rate-limits one sandbox's decision log lines. Called on the proxy's thread only.
class LogLimiter {
 public:
  void Log(const egress::Decision& d) {
    const auto now = std::chrono::steady_clock::now();
    if (now - window_ >= std::chrono::seconds(1)) {
      if (dropped_ > 0) {
        LogEvent("warn", "egress: decisions not logged (rate limit; the ring has them)",
                 {{"sandbox", d.sandbox}, {"count", std::to_string(dropped_)}});
      }
      window_ = now;
      lines_ = 0;
      dropped_ = 0;
    }
    if (++lines_ > kLogLinesPerSecond) {
      ++dropped_;
      return;
    }
    LogEvent(d.allowed ? "info" : "warn", "egress " + egress::FormatDecision(d));
  }

 private:
  std::chrono::steady_clock::time_point window_{};
  int lines_ = 0;
  long dropped_ = 0;
};

Error NotServed(const std::string& container) {
  return Error::NotFound("sandbox " + container +
                         " has no egress policy served by this agvisord (created without one, "
                         "gone, or its network is not an agvisor egress network)");
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr std::string_view kOpeningComment = "agvisor egress ";

// Words of one `iptables -S` line; a double-quoted word (a comment with spaces) is one word.
std::vector<std::string> IptablesWords(std::string_view line) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    std::string word;
    if (line[i] == '"') {
      std::size_t end = line.find('"', i + 1);
      if (end == std::string_view::npos) end = line.size();
      word = std::string(line.substr(i + 1, end - i - 1));
      i = end + 1;
    } else {
      std::size_t end = line.find(' ', i);
      if (end == std::string_view::npos) end = line.size();
      word = std::string(line.substr(i, end - i));
      i = end;
    }
    words.push_back(std::move(word));
  }
  return words;
}

// Whether `pid` is an agvisord now running (a pid reused by another program is not).
bool AgvisordRunning(int pid) {
  if (pid == ::getpid()) return true;
  return ReadSmallFile("/proc/" + std::to_string(pid) + "/comm").starts_with("agvisord");
}

}  // namespace

std::vector<std::vector<std::string>> StaleOpenings(std::string_view listing,
                                                    const std::function<bool(int pid)>& running) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in{std::string(listing)};
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> words = IptablesWords(line);
    if (words.size() < 2 || words[0] != "-A" || words[1] != "AGVISOR-ALLOW") continue;
    auto comment = std::find(words.begin(), words.end(), "--comment");
    if (comment == words.end() || comment + 1 == words.end()) continue;
    const std::string& text = *(comment + 1);
    if (!text.starts_with(kOpeningComment)) continue;
    // "agvisor egress SANDBOX pid PID", or "agvisor egress SANDBOX" from before pids were kept.
    std::vector<std::string> parts = IptablesWords(text);
    if (parts.size() == 5 && parts[3] == "pid") {
      int pid = 0;
      try {
        pid = std::stoi(parts[4]);
      } catch (const std::exception&) {
        continue;  // not a comment this code wrote
      }
      if (running(pid)) continue;
    } else if (parts.size() != 3) {
      continue;
    }
    words[0] = "-D";
    out.push_back(std::move(words));
  }
  return out;
}

EgressCaps ComputeEgressCaps(std::uint64_t open_files_limit) {
  EgressCaps c;
  const std::uint64_t floor = std::min<std::uint64_t>(512, open_files_limit / 2);
  c.reserved_fds =
      static_cast<std::size_t>(std::clamp<std::uint64_t>(open_files_limit / 4, floor, 8192));
  c.max_tunnels = static_cast<std::size_t>((open_files_limit - c.reserved_fds) / kFdsPerTunnel);
  c.max_tunnels_per_sandbox =
      std::min<std::size_t>(std::max<std::size_t>(c.max_tunnels / 4, 1), 1024);
  return c;
}

std::vector<egress::IpAddress> HostInterfaceAddresses() {
  std::vector<egress::IpAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      sockaddr_in a;
      std::memcpy(&a, i->ifa_addr, sizeof a);
      const auto* b = reinterpret_cast<const std::uint8_t*>(&a.sin_addr.s_addr);
      out.push_back(egress::IpAddress::V4(b[0], b[1], b[2], b[3]));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      sockaddr_in6 a;
      std::memcpy(&a, i->ifa_addr, sizeof a);
      egress::IpAddress v6;
      v6.family = egress::IpAddress::Family::kV6;
      std::memcpy(v6.bytes.data(), a.sin6_addr.s6_addr, 16);
      out.push_back(v6);
    }
  }
  ::freeifaddrs(list);
  return out;
}

std::vector<std::vector<std::string>> FirewallHooks(const std::string& egress_chain) {
  std::vector<std::vector<std::string>> out;
  for (const char* bridge : {"docker0", "br-+"}) {
    out.push_back({"DOCKER-USER", bridge, "AGVISOR-FORWARD"});
    out.push_back({"INPUT", bridge, "AGVISOR-INPUT"});
  }
  out.push_back({"DOCKER-USER", std::string(kEgressBridgePrefix) + "+", egress_chain});
  out.push_back({"INPUT", std::string(kEgressBridgePrefix) + "+", egress_chain});
  return out;
}

Result<egress::IpAddress> FirstNameserver(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key, value;
    if (words >> key >> value && key == "nameserver") {
      auto a = egress::ParseIpAddress(value);
      if (a.ok()) return *a;
    }
  }
  return Error::NotFound("no nameserver line with an IP address");
}

EgressHost::EgressHost(std::shared_ptr<docker::Client> docker, EgressHostOptions options)
    : docker_(std::move(docker)),
      options_(std::move(options)),
      host_addresses_(HostInterfaceAddresses()),
      log_(std::make_shared<egress::DecisionLog>()),
      budget_(std::make_shared<egress::ConnectionBudget>(options_.caps.max_tunnels)) {}

Result<std::unique_ptr<EgressHost>> EgressHost::Start(std::shared_ptr<docker::Client> docker,
                                                      EgressHostOptions options) {
  if (!options.resolver) {
    auto ns = FirstNameserver(ReadSmallFile("/etc/resolv.conf"));
    if (!ns.ok()) {
      return Error::InvalidArgument(
          "egress: no DNS server to resolve allowed names with (/etc/resolv.conf has no "
          "nameserver): pass --egress-resolver ADDRESS[:PORT]");
    }
    options.resolver = *ns;
  }
  if (options.caps.max_tunnels == 0) {
    rlimit nofile{};
    ::getrlimit(RLIMIT_NOFILE, &nofile);
    options.caps = ComputeEgressCaps(nofile.rlim_cur);
  }
  if (!options.state_dir.empty()) {
    std::error_code ec;
    fs::create_directories(options.state_dir, ec);
    if (ec) {
      return Error::Unavailable("egress state directory " + options.state_dir + ": " +
                                ec.message());
    }
  }
  if (options.firewall_chain.empty()) {
    const char* test_chain = std::getenv("AGVISOR_TEST_FIREWALL_CHAIN");
    options.firewall_chain = test_chain && *test_chain ? test_chain : "AGVISOR-EGRESS";
  }
  auto host = std::unique_ptr<EgressHost>(new EgressHost(std::move(docker), std::move(options)));
  host->ClearStaleState();
  if (host->options_.manage_firewall) {
    host->ClearStaleOpenings();
    host->CheckFirewall();
  }
  if (auto first = host->Reconcile(); !first.ok()) {
    LogEvent("warn", "egress: cannot list egress networks yet (tried again every period)",
             {{"error", first.error().ToString()}});
  }
  host->thread_ = std::thread([h = host.get()] { h->Loop(); });
  return host;
}

EgressHost::~EgressHost() {
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  for (auto& [name, s] : served_) Drop(s);
  served_.clear();
}

void EgressHost::Loop() {
  auto last_orphan_check = std::chrono::steady_clock::now();
  auto last_firewall_check = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::unique_lock lock(stop_mu_);
      if (stop_cv_.wait_for(lock, options_.period, [&] { return stopping_; })) return;
    }
    if (options_.manage_firewall &&
        std::chrono::steady_clock::now() - last_firewall_check >= kFirewallCheck) {
      last_firewall_check = std::chrono::steady_clock::now();
      CheckFirewall();
    }
    if (auto r = Reconcile(); !r.ok()) {
      LogEvent("warn", "egress: cannot list egress networks", {{"error", r.error().ToString()}});
    }
    if (std::chrono::steady_clock::now() - last_orphan_check < kOrphanCheck) continue;
    last_orphan_check = std::chrono::steady_clock::now();
    // Networks whose sandbox is gone (it expired and Docker removed it): removed after a grace.
    auto nets = docker_->ListNetworks({std::string(kLabelEgress)});
    if (!nets.ok()) continue;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& n : *nets) {
      auto it = n.labels.find(std::string(kLabelEgressSandbox));
      if (it == n.labels.end()) continue;
      auto c = docker_->InspectContainer(it->second);
      if (c.ok() || c.error().code() != ErrorCode::kNotFound) {
        orphan_since_.erase(n.id);
        continue;
      }
      auto [since, fresh] = orphan_since_.emplace(n.id, now);
      if (fresh || now - since->second < kOrphanGrace) continue;
      if (docker_->RemoveNetwork(n.id).ok()) {
        LogEvent("info", "egress: removed the network of a sandbox that is gone",
                 {{"network", n.name}, {"sandbox", it->second}});
      }
      orphan_since_.erase(n.id);
    }
  }
}

std::string EgressHost::StatePath(const std::string& network_id) const {
  return options_.state_dir.empty() ? std::string() : options_.state_dir + "/" + network_id;
}

Result<void> EgressHost::Reconcile() {
  auto nets = AGVISOR_TRY(docker_->ListNetworks({std::string(kLabelEgress)}));
  std::lock_guard lock(mu_);
  std::map<std::string, bool> seen;
  // Without the firewall's hooks nothing is served (and what was, is dropped below): the
  // sandboxes stay cut off rather than reach the host through their gateway.
  if (!firewall_in_place_) nets.clear();
  for (const auto& n : nets) {
    auto c = n.labels.find(std::string(kLabelEgressSandbox));
    auto r = n.labels.find(std::string(kLabelEgress));
    if (c == n.labels.end() || r == n.labels.end()) continue;
    if (!n.internal || n.bridge_name.rfind(kEgressBridgePrefix, 0) != 0 || n.gateway.empty()) {
      continue;  // not one of ours: never served (its sandbox, if any, stays cut off)
    }
    seen[c->second] = true;
    auto have = served_.find(c->second);
    if (have != served_.end() && have->second.network_id == n.id) continue;
    if (auto retry = retry_after_.find(n.id);
        retry != retry_after_.end() && std::chrono::steady_clock::now() < retry->second) {
      continue;
    }
    if (have != served_.end()) {
      Drop(have->second);
      served_.erase(have);
    }
    // A live change kept from before a restart wins over the label.
    std::string text = r->second;
    if (std::string path = StatePath(n.id); !path.empty() && fs::exists(path)) {
      text = ReadSmallFile(path);
    }
    auto rules = egress::DecodeEgressRules(text);
    if (!rules.ok()) {
      LogEvent("error", "egress: unreadable policy; the sandbox stays cut off",
               {{"sandbox", c->second}, {"error", rules.error().ToString()}});
      retry_after_[n.id] = std::chrono::steady_clock::now() + kRetryPause;
      continue;
    }
    Served s{.network_id = n.id,
             .network = n.name,
             .bridge = n.bridge_name,
             .gateway = n.gateway,
             .subnet = n.subnet,
             .container = c->second,
             .rules = *rules,
             .proxy = nullptr};
    if (auto served = Serve(c->second, std::move(s)); !served.ok()) {
      LogEvent("error", "egress: cannot serve a sandbox; it stays cut off",
               {{"sandbox", c->second}, {"error", served.error().ToString()}});
      retry_after_[n.id] = std::chrono::steady_clock::now() + kRetryPause;
    } else {
      retry_after_.erase(n.id);
    }
  }
  for (auto it = served_.begin(); it != served_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    Drop(it->second);
    log_->Forget(it->first);
    it = served_.erase(it);
  }
  return Ok();
}

Result<void> EgressHost::Serve(const std::string& container, Served s) {
  auto policy = AGVISOR_TRY(egress::EgressPolicy::Create(s.rules));
  const auto gateway = AGVISOR_TRY(egress::ParseIpAddress(s.gateway));
  egress::ProxyOptions o;
  o.sandbox = container;
  o.listen_address = gateway;
  o.listen_port = kEgressProxyPort;
  o.extra_listen_ports = {kEgressHttpPort, kEgressTlsPort};
  o.resolver_address = *options_.resolver;
  o.resolver_port = options_.resolver_port;
  o.host_addresses = host_addresses_;
  o.serve_dns = true;
  o.dns_port = kEgressDnsPort;
  o.dns_answer_v4 = gateway;
  // Only the sandbox's own network is served (the firewall lets nothing else in either).
  o.clients = AGVISOR_TRY(egress::ParseCidr(s.subnet));
  o.max_connections = options_.caps.max_tunnels_per_sandbox;
  o.shared_budget = budget_;
  o.idle_timeout = options_.idle_timeout;
  o.on_decision = [limiter = std::make_shared<LogLimiter>()](const egress::Decision& d) {
    limiter->Log(d);
  };
  s.proxy = AGVISOR_TRY(egress::EgressProxy::Start(std::move(o), std::move(policy), log_));
  if (options_.manage_firewall) {
    if (auto fw = Firewall(s, /*add=*/true); !fw.ok()) {
      LogEvent("error", "egress: cannot open the host firewall for an enforcer",
               {{"sandbox", container}, {"error", fw.error().ToString()}});
    }
  }
  LogEvent("info", "egress: serving",
           {{"sandbox", container},
            {"gateway", s.gateway},
            {"bridge", s.bridge},
            {"policy", s.proxy->policy().Describe()}});
  served_[container] = std::move(s);
  return Ok();
}

void EgressHost::Drop(Served& s) {
  s.proxy.reset();
  if (options_.manage_firewall) (void)Firewall(s, /*add=*/false);
  if (std::string path = StatePath(s.network_id); !path.empty()) {
    std::error_code ec;
    // Kept while the network exists (a restart serves it again); gone with it.
    if (!docker_->InspectNetwork(s.network_id).ok()) fs::remove(path, ec);
  }
  LogEvent("info", "egress: stopped serving", {{"sandbox", s.container}});
}

void EgressHost::ClearStaleOpenings() {
  auto listing = RunCommand({"iptables", "-w", "-S", "AGVISOR-ALLOW"});
  if (!listing.ok() || !listing->status.success()) return;  // no firewall: nothing was opened
  int removed = 0;
  for (std::vector<std::string> rule : StaleOpenings(listing->out, AgvisordRunning)) {
    rule.insert(rule.begin(), {"iptables", "-w"});
    auto out = RunCommand(rule);
    if (out.ok() && out->status.success()) ++removed;
  }
  if (removed > 0) {
    LogEvent("info", "egress: removed firewall openings of an agvisord that is gone",
             {{"rules", std::to_string(removed)}});
  }
}

Result<void> EgressHost::Firewall(const Served& s, bool add) {
  const std::string comment =
      std::string(kOpeningComment) + s.container + " pid " + std::to_string(::getpid());
  auto rule = [&](std::vector<std::string> match) {
    std::vector<std::string> r = {"-i", s.bridge, "-d", s.gateway + "/32"};
    r.insert(r.end(), match.begin(), match.end());
    r.insert(r.end(), {"-m", "comment", "--comment", comment, "-j", "ACCEPT"});
    return r;
  };
  const std::vector<std::vector<std::string>> rules = {
      rule({"-p", "tcp", "-m", "multiport", "--dports",
            std::to_string(kEgressHttpPort) + "," + std::to_string(kEgressTlsPort) + "," +
                std::to_string(kEgressProxyPort)}),
      rule({"-p", "udp", "--dport", std::to_string(kEgressDnsPort)})};
  for (const auto& r : rules) {
    auto run = [&](const char* op) -> Result<CommandOutput> {
      std::vector<std::string> argv = {"iptables", "-w", op, "AGVISOR-ALLOW"};
      argv.insert(argv.end(), r.begin(), r.end());
      return RunCommand(argv);
    };
    if (add) {
      auto have = AGVISOR_TRY(run("-C"));
      if (have.status.success()) continue;
      auto out = AGVISOR_TRY(run("-A"));
      if (!out.status.success()) {
        return Error::Unavailable(
            "iptables -A AGVISOR-ALLOW: " + out.err +
            " (is the sandbox firewall installed? scripts/sandbox-firewall block)");
      }
    } else {
      for (int i = 0; i < 8; ++i) {
        auto out = AGVISOR_TRY(run("-D"));
        if (!out.status.success()) break;
      }
    }
  }
  return Ok();
}

void EgressHost::ClearStaleState() {
  if (options_.state_dir.empty()) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.state_dir, ec)) {
    const std::string id = entry.path().filename().string();
    // Network ids are 64 hex digits; anything else (a ".tmp" of an interrupted write) goes too.
    auto n = docker_->InspectNetwork(id.substr(0, 64));
    if (id.size() == 64 && (n.ok() || n.error().code() != ErrorCode::kNotFound)) continue;
    fs::remove(entry.path(), ec);
    LogEvent("info", "egress: removed the live-change state of a network that is gone",
             {{"network", id}});
  }
}

void EgressHost::CheckFirewall() {
  std::string missing;
  for (const auto& hook : FirewallHooks(options_.firewall_chain)) {
    auto r = RunCommand({"iptables", "-w", "-C", hook[0], "-i", hook[1], "-m", "comment",
                         "--comment", std::string(kFirewallTag), "-j", hook[2]});
    if (!r.ok() || !r->status.success()) {
      missing += (missing.empty() ? "" : ", ") + hook[0] + " -i " + hook[1] + " -j " + hook[2];
    }
  }
  const FirewallStatus recorded =
      ParseFirewallState(ReadSmallFile(FirewallStatePath()), CurrentBootId());
  const bool external = recorded.state == FirewallState::kExternal;
  const bool in_place = missing.empty() || external;
  if (!external) {
    FirewallStatus now{
        .state = missing.empty() ? FirewallState::kProtected : FirewallState::kUnprotected,
        .detail = missing.empty() ? "" : "missing: " + missing};
    if (now.state != recorded.state || now.detail != recorded.detail) {
      if (auto w = WriteFirewallState(now); !w.ok()) {
        LogEvent("warn", "egress: cannot record the sandbox firewall's state",
                 {{"error", w.error().ToString()}});
      }
    }
  }
  std::lock_guard lock(mu_);
  if (in_place != firewall_in_place_ || (!in_place && missing != firewall_missing_)) {
    if (in_place) {
      LogEvent("info", external ? "egress: serving without the sandbox firewall (this host "
                                  "declared external isolation: scripts/sandbox-firewall external)"
                                : "egress: the sandbox firewall is in place; serving");
    } else {
      LogEvent("error",
               "egress: the sandbox firewall is not in place; no egress network is served and "
               "creates are refused until it is: run scripts/sandbox-firewall block as root",
               {{"missing", missing}});
    }
  }
  firewall_in_place_ = in_place;
  firewall_missing_ = missing;
}

bool EgressHost::firewall_in_place() const {
  std::lock_guard lock(mu_);
  return firewall_in_place_;
}

Result<api::EgressView> EgressHost::View(const std::string& container) const {
  std::lock_guard lock(mu_);
  auto it = served_.find(container);
  if (it == served_.end()) return NotServed(container);
  const Served& s = it->second;
  api::EgressView v;
  v.container = container;
  v.network = s.network;
  v.gateway = s.gateway;
  const egress::EgressPolicy policy = s.proxy->policy();
  v.rules = policy.Rules();
  v.describe = policy.Describe();
  v.recent = log_->Recent(container);
  v.counters = log_->Counters(container);
  return v;
}

Result<api::EgressTraffic> EgressHost::Traffic(const std::string& container) const {
  std::lock_guard lock(mu_);
  auto it = served_.find(container);
  if (it == served_.end()) return NotServed(container);
  const egress::ProxyTraffic bytes = it->second.proxy->traffic();
  return api::EgressTraffic{.decisions = log_->Counters(container),
                            .bytes_up = bytes.bytes_up,
                            .bytes_down = bytes.bytes_down,
                            .open_connections = it->second.proxy->open_connections()};
}

Result<api::EgressView> EgressHost::SetRules(const std::string& container,
                                             const egress::EgressRules& rules) {
  auto policy = AGVISOR_TRY(egress::EgressPolicy::Create(rules));
  {
    std::lock_guard lock(mu_);
    auto it = served_.find(container);
    if (it == served_.end()) return NotServed(container);
    Served& s = it->second;
    if (std::string path = StatePath(s.network_id); !path.empty()) {
      const std::string tmp = path + ".tmp";
      {
        std::ofstream out(tmp, std::ios::trunc);
        out << egress::EncodeEgressRules(policy.Rules());
        if (!out.flush()) return Error::Unavailable("egress: cannot write " + tmp);
      }
      std::error_code ec;
      fs::rename(tmp, path, ec);
      if (ec) return Error::Unavailable("egress: cannot write " + path + ": " + ec.message());
    }
    s.rules = policy.Rules();
    LogEvent("info", "egress: policy changed",
             {{"sandbox", container}, {"policy", policy.Describe()}});
    s.proxy->SetPolicy(std::move(policy));
  }
  return View(container);
}

std::size_t EgressHost::served() const {
  std::lock_guard lock(mu_);
  return served_.size();
}

}  // namespace agvisor::server
