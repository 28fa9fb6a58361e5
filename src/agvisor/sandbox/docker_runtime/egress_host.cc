#include "agvisor/sandbox/docker_runtime/egress_host.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "agvisor/base/subprocess.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/egress_network.h"

namespace agvisor {
namespace {

// A network without its sandbox this long is removed (a create may be between the network and
// the container).
constexpr std::chrono::seconds kOrphanGrace{60};
// The comment scripts/sandbox-firewall puts on every rule of its own.
constexpr std::string_view kFirewallTag = "agvisor-sandbox-firewall";
constexpr std::string_view kOpeningComment = "agvisor egress ";

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

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
  return FileText("/proc/" + std::to_string(pid) + "/comm").starts_with("agvisord");
}

class DockerEgress final : public EgressHostRuntime {
 public:
  DockerEgress(std::shared_ptr<docker::Client> docker, std::string chain)
      : docker_(std::move(docker)), chain_(std::move(chain)) {}

  Result<std::vector<EgressNetworkInfo>> Networks() override {
    auto nets = AGVISOR_TRY(docker_->ListNetworks({std::string(kLabelEgress)}));
    std::vector<EgressNetworkInfo> out;
    for (const auto& n : nets) {
      auto c = n.labels.find(std::string(kLabelEgressSandbox));
      auto r = n.labels.find(std::string(kLabelEgress));
      if (c == n.labels.end() || r == n.labels.end()) continue;
      if (!n.internal || n.bridge_name.rfind(kEgressBridgePrefix, 0) != 0 || n.gateway.empty()) {
        continue;  // not one of ours: never served (its sandbox, if any, stays cut off)
      }
      out.push_back({.id = n.id,
                     .name = n.name,
                     .bridge = n.bridge_name,
                     .gateway = n.gateway,
                     .subnet = n.subnet,
                     .container = c->second,
                     .rules = r->second,
                     .secrets = n.labels.contains(std::string(kLabelEgressSecrets))
                                    ? n.labels.at(std::string(kLabelEgressSecrets))
                                    : std::string()});
    }
    return out;
  }

  bool NetworkMayExist(const std::string& id) override {
    auto n = docker_->InspectNetwork(id);
    return n.ok() || n.error().code() != ErrorCode::kNotFound;
  }

  std::vector<std::pair<std::string, std::string>> RemoveOrphanNetworks() override {
    std::vector<std::pair<std::string, std::string>> removed;
    auto nets = docker_->ListNetworks({std::string(kLabelEgress)});
    if (!nets.ok() || nets->empty()) return removed;
    // One list of the sandboxes for the whole pass (DueOrphanNetworks).
    auto containers = docker_->ListContainers(/*all=*/true, {"agvisor=1"});
    if (!containers.ok()) return removed;
    std::set<std::string, std::less<>> present;
    for (const auto& c : *containers) present.insert(c.names.begin(), c.names.end());
    std::vector<std::pair<std::string, std::string>> ours;
    for (const auto& n : *nets) {
      auto it = n.labels.find(std::string(kLabelEgressSandbox));
      if (it != n.labels.end()) ours.emplace_back(n.id, it->second);
    }
    for (std::size_t i : DueOrphanNetworks(ours, present, orphan_since_,
                                           std::chrono::steady_clock::now(), kOrphanGrace)) {
      const auto& [id, sandbox] = ours[i];
      if (!docker_->RemoveNetwork(id).ok()) continue;
      orphan_since_.erase(id);
      auto n = std::find_if(nets->begin(), nets->end(), [&](const auto& x) { return x.id == id; });
      removed.emplace_back(n->name, sandbox);
    }
    return removed;
  }

  Result<void> Firewall(const EgressNetworkInfo& s, bool add) override {
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

  int ClearStaleOpenings() override {
    auto listing = RunCommand({"iptables", "-w", "-S", "AGVISOR-ALLOW"});
    if (!listing.ok() || !listing->status.success()) return 0;  // no firewall: nothing opened
    int removed = 0;
    for (std::vector<std::string> rule : StaleOpenings(listing->out, AgvisordRunning)) {
      rule.insert(rule.begin(), {"iptables", "-w"});
      auto out = RunCommand(rule);
      if (out.ok() && out->status.success()) ++removed;
    }
    return removed;
  }

  SandboxFirewallCheck CheckSandboxFirewall() override {
    std::string missing;
    for (const auto& hook : FirewallHooks(chain_)) {
      auto r = RunCommand({"iptables", "-w", "-C", hook[0], "-i", hook[1], "-m", "comment",
                           "--comment", std::string(kFirewallTag), "-j", hook[2]});
      if (!r.ok() || !r->status.success()) {
        missing += (missing.empty() ? "" : ", ") + hook[0] + " -i " + hook[1] + " -j " + hook[2];
      }
    }
    const FirewallStatus recorded =
        ParseFirewallState(FileText(FirewallStatePath()), CurrentBootId());
    SandboxFirewallCheck check;
    check.external = recorded.state == FirewallState::kExternal;
    check.in_place = missing.empty() || check.external;
    if (!check.external) {
      FirewallStatus now{
          .state = missing.empty() ? FirewallState::kProtected : FirewallState::kUnprotected,
          .detail = missing.empty() ? "" : "missing: " + missing};
      if (now.state != recorded.state || now.detail != recorded.detail) {
        if (auto w = WriteFirewallState(now); !w.ok()) check.record_error = w.error().ToString();
      }
    }
    check.missing = std::move(missing);
    return check;
  }

 private:
  std::shared_ptr<docker::Client> docker_;
  std::string chain_;
  // Networks without their sandbox, by id: since when (the enforcers' thread only).
  std::map<std::string, std::chrono::steady_clock::time_point> orphan_since_;
};

}  // namespace

Result<std::unique_ptr<EgressHostRuntime>> DockerEgressHost(std::string_view docker_host,
                                                            std::string firewall_chain) {
  auto docker = AGVISOR_TRY(ConnectDockerHost(docker_host));
  if (firewall_chain.empty()) {
    const char* test_chain = std::getenv("AGVISOR_TEST_FIREWALL_CHAIN");
    firewall_chain = test_chain && *test_chain ? test_chain : "AGVISOR-EGRESS";
  }
  return std::unique_ptr<EgressHostRuntime>(
      std::make_unique<DockerEgress>(std::move(docker), std::move(firewall_chain)));
}

std::vector<std::size_t> DueOrphanNetworks(
    const std::vector<std::pair<std::string, std::string>>& networks,
    const std::set<std::string, std::less<>>& present,
    std::map<std::string, OrphanClock::time_point>& orphan_since, OrphanClock::time_point now,
    OrphanClock::duration grace) {
  std::vector<std::size_t> due;
  std::set<std::string, std::less<>> absent;
  for (std::size_t i = 0; i < networks.size(); ++i) {
    const auto& [id, sandbox] = networks[i];
    if (present.contains(sandbox)) continue;
    absent.insert(id);
    auto [since, fresh] = orphan_since.emplace(id, now);
    if (!fresh && now - since->second >= grace) due.push_back(i);
  }
  std::erase_if(orphan_since, [&](const auto& kv) { return !absent.contains(kv.first); });
  return due;
}

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

}  // namespace agvisor
