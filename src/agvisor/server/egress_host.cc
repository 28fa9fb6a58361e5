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

#include "agvisor/api/codec.h"
#include "agvisor/egress/learn.h"
#include "agvisor/sandbox/egress_network.h"
#include "agvisor/server/log.h"

namespace agvisor::server {
namespace {

namespace fs = std::filesystem;

// How often networks whose sandbox is gone are looked for (an inspect per network).
constexpr std::chrono::seconds kOrphanCheck{5};
// A network that could not be served (its policy unreadable, its gateway taken by another
// process) is tried again after this, not every period (and logged once per try).
constexpr std::chrono::seconds kRetryPause{5};
// How often the sandbox firewall's hooks are checked (a few `iptables -C` calls).
constexpr std::chrono::seconds kFirewallCheck{5};
// The egress log's directory inside the state directory (egress_log_files.h).
constexpr std::string_view kLogDirName = "log";
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

}  // namespace

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

EgressHost::EgressHost(std::unique_ptr<EgressHostRuntime> runtime, EgressHostOptions options)
    : runtime_(std::move(runtime)),
      options_(std::move(options)),
      host_addresses_(HostInterfaceAddresses()),
      log_(std::make_shared<egress::DecisionLog>()),
      budget_(std::make_shared<egress::ConnectionBudget>(options_.caps.max_tunnels)) {}

Result<std::unique_ptr<EgressHost>> EgressHost::Start(std::unique_ptr<EgressHostRuntime> runtime,
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
  std::shared_ptr<EgressLogFiles> files;
  if (!options.state_dir.empty()) {
    files = AGVISOR_TRY(EgressLogFiles::Open(options.state_dir + "/" + std::string(kLogDirName),
                                             options.log_limits));
  }
  auto host = std::unique_ptr<EgressHost>(new EgressHost(std::move(runtime), std::move(options)));
  host->files_ = std::move(files);
  host->ClearStaleState();
  if (host->options_.manage_firewall) {
    if (const int removed = host->runtime_->ClearStaleOpenings(); removed > 0) {
      LogEvent("info", "egress: removed firewall openings of an agvisord that is gone",
               {{"rules", std::to_string(removed)}});
    }
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
    // Networks whose sandbox is gone (it expired and was removed): removed after a grace.
    for (const auto& [network, sandbox] : runtime_->RemoveOrphanNetworks()) {
      LogEvent("info", "egress: removed the network of a sandbox that is gone",
               {{"network", network}, {"sandbox", sandbox}});
    }
  }
}

std::string EgressHost::StatePath(const std::string& network_id) const {
  return options_.state_dir.empty() ? std::string() : options_.state_dir + "/" + network_id;
}

Result<void> EgressHost::Reconcile() {
  auto nets = AGVISOR_TRY(runtime_->Networks());
  std::lock_guard lock(mu_);
  std::map<std::string, bool> seen;
  // Without the firewall's hooks nothing is served (and what was, is dropped below): the
  // sandboxes stay cut off rather than reach the host through their gateway.
  if (!firewall_in_place_) nets.clear();
  for (auto& n : nets) {
    seen[n.container] = true;
    auto have = served_.find(n.container);
    if (have != served_.end() && have->second.net.id == n.id) continue;
    if (auto retry = retry_after_.find(n.id);
        retry != retry_after_.end() && std::chrono::steady_clock::now() < retry->second) {
      continue;
    }
    if (have != served_.end()) {
      Drop(have->second);
      served_.erase(have);
    }
    // A live change kept from before a restart wins over the label.
    std::string text = n.rules;
    if (std::string path = StatePath(n.id); !path.empty() && fs::exists(path)) {
      text = ReadSmallFile(path);
    }
    auto rules = egress::DecodeEgressRules(text);
    if (!rules.ok()) {
      LogEvent("error", "egress: unreadable policy; the sandbox stays cut off",
               {{"sandbox", n.container}, {"error", rules.error().ToString()}});
      retry_after_[n.id] = std::chrono::steady_clock::now() + kRetryPause;
      continue;
    }
    ClaimSecrets(n);
    const std::string container = n.container;
    const std::string id = n.id;
    if (auto served = Serve(container, Served{std::move(n), *rules, nullptr}); !served.ok()) {
      LogEvent("error", "egress: cannot serve a sandbox; it stays cut off",
               {{"sandbox", container}, {"error", served.error().ToString()}});
      retry_after_[id] = std::chrono::steady_clock::now() + kRetryPause;
    } else {
      retry_after_.erase(id);
    }
  }
  for (auto it = served_.begin(); it != served_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    Drop(it->second);
    log_->Forget(it->first);
    secrets_.erase(it->first);  // a caller's values go with the sandbox's network
    it = served_.erase(it);
  }
  return Ok();
}

void EgressHost::ClaimSecrets(const EgressNetworkInfo& n) {
  if (n.secrets.empty() || !options_.vault) {
    if (options_.vault) secrets_.erase(n.container);  // a new network of that name, without
    return;
  }
  auto claimed = options_.vault->Claim(n.secrets, n.container);
  if (!claimed) {
    secrets_.erase(n.container);
    LogEvent("error", "egress: the sandbox's secret bindings cannot be read; none is brokered",
             {{"sandbox", n.container}});
    return;
  }
  for (const std::string& name : claimed->missing) {
    LogEvent("warn",
             "egress: a secret its caller passed is gone with agvisord's restart; the sandbox's "
             "placeholder now reaches its hosts unchanged (create the sandbox again)",
             {{"sandbox", n.container}, {"secret", name}});
  }
  if (claimed->secrets.empty()) {
    secrets_.erase(n.container);
    return;
  }
  if (claimed->new_ca) {
    LogEvent("info",
             "egress: the operator's secrets of a sandbox made before agvisord's restart are "
             "brokered again, with a new sandbox CA",
             {{"sandbox", n.container}, {"secrets", std::to_string(claimed->secrets.size())}});
    if (options_.on_new_ca) options_.on_new_ca(n.container, claimed->ca->cert_pem());
  }
  secrets_[n.container] = Secrets{std::move(claimed->secrets), std::move(claimed->ca)};
}

Result<void> EgressHost::Serve(const std::string& container, Served s) {
  auto policy = AGVISOR_TRY(egress::EgressPolicy::Create(s.rules));
  const auto gateway = AGVISOR_TRY(egress::ParseIpAddress(s.net.gateway));
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
  o.clients = AGVISOR_TRY(egress::ParseCidr(s.net.subnet));
  o.max_connections = options_.caps.max_tunnels_per_sandbox;
  o.shared_budget = budget_;
  o.idle_timeout = options_.idle_timeout;
  o.on_decision = [limiter = std::make_shared<LogLimiter>(), files = files_, id = s.net.id,
                   failed = std::make_shared<bool>(false)](const egress::Decision& d) {
    limiter->Log(d);
    if (!files) return;
    // A failing disk (full, read-only) is said once per sandbox, not once per record.
    if (auto w = files->Append(id, api::DecisionJson(d)); !w.ok() && !*failed) {
      *failed = true;
      LogEvent("error", "egress: cannot write the sandbox's egress log (the ring keeps it)",
               {{"sandbox", d.sandbox}, {"error", w.error().ToString()}});
    } else if (w.ok()) {
      *failed = false;
    }
  };
  o.upstream_ca_pem = options_.upstream_ca_pem;
  s.proxy = AGVISOR_TRY(egress::EgressProxy::Start(std::move(o), std::move(policy), log_));
  if (auto it = secrets_.find(container); it != secrets_.end()) {
    s.proxy->SetSecrets(it->second.secrets, it->second.ca);
  }
  if (options_.manage_firewall) {
    if (auto fw = runtime_->Firewall(s.net, /*open=*/true); !fw.ok()) {
      LogEvent("error", "egress: cannot open the host firewall for an enforcer",
               {{"sandbox", container}, {"error", fw.error().ToString()}});
    }
  }
  LogEvent("info", "egress: serving",
           {{"sandbox", container},
            {"gateway", s.net.gateway},
            {"bridge", s.net.bridge},
            {"policy", s.proxy->policy().Describe()}});
  served_[container] = std::move(s);
  return Ok();
}

Result<void> EgressHost::SetSecrets(const std::string& container,
                                    std::vector<egress::BrokeredSecret> secrets,
                                    std::shared_ptr<const egress::SandboxCa> ca) {
  if (secrets.empty()) {
    ForgetSecrets(container);
    return Ok();
  }
  AGVISOR_RETURN_IF_ERROR(egress::ValidateSecrets(secrets));
  if (!ca) return Error::InvalidArgument("secrets of " + container + ": no sandbox CA given");
  for (const egress::BrokeredSecret& s : secrets) {
    for (const std::string& h : s.hosts) {
      if (std::find(ca->hosts().begin(), ca->hosts().end(), h) == ca->hosts().end()) {
        return Error::InvalidArgument("secrets of " + container + ": secret " + s.name +
                                      " is bound to " + h + ", which the sandbox CA is not for");
      }
    }
  }
  std::lock_guard lock(mu_);
  if (auto it = served_.find(container); it != served_.end())
    it->second.proxy->SetSecrets(secrets, ca);
  secrets_[container] = Secrets{std::move(secrets), std::move(ca)};
  return Ok();
}

void EgressHost::ForgetSecrets(const std::string& container) {
  std::lock_guard lock(mu_);
  if (auto it = served_.find(container); it != served_.end())
    it->second.proxy->SetSecrets({}, nullptr);
  secrets_.erase(container);
}

void EgressHost::Drop(Served& s) {
  s.proxy.reset();
  if (options_.manage_firewall) (void)runtime_->Firewall(s.net, /*open=*/false);
  if (std::string path = StatePath(s.net.id); !path.empty()) {
    std::error_code ec;
    // Kept while the network exists (a restart serves it again); gone with it.
    if (!runtime_->NetworkMayExist(s.net.id)) fs::remove(path, ec);
  }
  if (files_) {
    // The sandbox's egress log goes with its network (the sandbox was removed); kept while the
    // network exists (agvisord stopping, a restart serves it again).
    if (runtime_->NetworkMayExist(s.net.id)) {
      files_->Close(s.net.id);
    } else {
      files_->Remove(s.net.id);
    }
  }
  LogEvent("info", "egress: stopped serving", {{"sandbox", s.net.container}});
}

void EgressHost::ClearStaleState() {
  if (options_.state_dir.empty()) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.state_dir, ec)) {
    const std::string id = entry.path().filename().string();
    if (id == kLogDirName) continue;  // the egress log's, below
    // Network ids are 64 hex digits; anything else (a ".tmp" of an interrupted write) goes too.
    if (id.size() == 64 && runtime_->NetworkMayExist(id)) continue;
    fs::remove(entry.path(), ec);
    LogEvent("info", "egress: removed the live-change state of a network that is gone",
             {{"network", id}});
  }
  if (!files_) return;
  for (const std::string& id : files_->Keys()) {
    if (runtime_->NetworkMayExist(id)) continue;
    files_->Remove(id);
    LogEvent("info", "egress: removed the egress log of a network that is gone", {{"network", id}});
  }
}

void EgressHost::CheckFirewall() {
  const SandboxFirewallCheck check = runtime_->CheckSandboxFirewall();
  if (!check.record_error.empty()) {
    LogEvent("warn", "egress: cannot record the sandbox firewall's state",
             {{"error", check.record_error}});
  }
  const bool in_place = check.in_place;
  const bool external = check.external;
  const std::string& missing = check.missing;
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
  v.network = s.net.name;
  v.gateway = s.net.gateway;
  const egress::EgressPolicy policy = s.proxy->policy();
  v.rules = policy.Rules();
  v.describe = policy.Describe();
  v.recent = log_->Recent(container);
  v.counters = log_->Counters(container);
  const egress::LearnedDestinations learned = log_->Learned(container);
  v.learned_destinations = learned.kept.size();
  v.learned_dropped = learned.dropped;
  // Past the rule limit (hundreds of names learned) the rules are shown as they are; the
  // decisions still name what was reached.
  v.suggested = egress::SuggestRules(v.rules, learned).value_or(v.rules);
  return v;
}

Error NoEgressEnforcers() {
  return Error::Unsupported(
      "this agvisord enforces no egress policies (started with --no-egress, or its Docker host "
      "is another machine: run agvisord there)");
}

Result<std::vector<egress::Decision>> EgressHost::Log(const std::string& container,
                                                      std::size_t last) const {
  std::string id;
  {
    std::lock_guard lock(mu_);
    auto it = served_.find(container);
    if (it == served_.end()) return NotServed(container);
    id = it->second.net.id;
  }
  std::vector<egress::Decision> out;
  if (files_) {
    // Read outside mu_ (a few MiB at most): the reconcile thread goes on meanwhile.
    for (const std::string& line : files_->Last(id, last)) {
      if (auto d = api::ParseDecisionJson(line); d.ok()) out.push_back(std::move(*d));
    }
    return out;
  }
  out = log_->Recent(container);
  if (out.size() > last) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(last));
  return out;
}

Result<std::vector<egress::Decision>> EgressHost::Since(const std::string& container,
                                                        std::uint64_t after_seq) const {
  std::lock_guard lock(mu_);
  if (!served_.contains(container)) return NotServed(container);
  return log_->Since(container, after_seq);
}

Result<std::uint64_t> EgressHost::LastSeq(const std::string& container) const {
  std::lock_guard lock(mu_);
  if (!served_.contains(container)) return NotServed(container);
  return log_->LastSeq(container);
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
    if (std::string path = StatePath(s.net.id); !path.empty()) {
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
