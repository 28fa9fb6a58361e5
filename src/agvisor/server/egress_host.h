// agvisord's egress enforcers (docs/egress.md): one EgressProxy per egress network on its host
// (sandbox/egress_network.h), listening on the network's gateway: the explicit proxy port,
// 80 and 443 for clients that ignore proxy variables, and the in-sandbox resolver on udp 53.
// The networks, the host firewall and the sandbox firewall's hooks are the runtime's
// (sandbox/egress_host_runtime.h; Docker's: sandbox/docker_runtime/egress_host.h, which daemon.cc
// makes): this file only serves enforcers, and includes neither Docker nor iptables.
//
// Networks are found by label every `period`, so sandboxes made by the CLI, by Python, before a
// restart of agvisord or while it was down are served like its own. For each it also opens the
// host's firewall for exactly those ports on that gateway from that bridge (an ACCEPT in the
// chain AGVISOR-ALLOW that scripts/sandbox-firewall leaves to the enforcer; everything else from
// agve+ bridges is rejected there; its comment names the sandbox and agvisord's pid). A network
// whose sandbox is gone is removed. At start, openings left by an agvisord that is no longer
// running (SIGKILL, a crash) are taken out first.
//
// The policy comes from the network's label; a live change (SetRules) is kept in memory and in
// `state_dir` (one file per network id, so a network made again for a sandbox of the same name
// never inherits it), so it outlives a restart of agvisord.
//
// The sandbox firewall's hooks (every jump `scripts/sandbox-firewall block` adds)
// are checked at start and every 5 s. While one is missing no egress network is served (their
// sandboxes stay cut off), the error is logged with the fix, and the host's firewall state file
// says "unprotected", so creates of sandboxes with a network are refused before anything is made
// (sandbox/egress_network.h); once they are back, "protected" and served again. A host that
// declared `scripts/sandbox-firewall external` is served without them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agvisor/api/codec.h"
#include "agvisor/base/error.h"
#include "agvisor/egress/decision_log.h"
#include "agvisor/egress/policy.h"
#include "agvisor/egress/proxy.h"
#include "agvisor/sandbox/egress_host_runtime.h"
#include "agvisor/server/egress_log_files.h"
#include "agvisor/server/secret_vault.h"

namespace agvisor {
namespace server {

// A tunnel holds up to this many of agvisord's file descriptors: the sandbox's socket, the
// upstream socket, and a pipe (two descriptors) per direction for splice(2).
inline constexpr std::size_t kFdsPerTunnel = 6;

// How agvisord's open-file limit is shared out (docs/egress.md, "Limits"): `reserved_fds` stay
// for the API's connections, Docker, agent channels, listeners and files (a quarter of the
// limit, at least 512 or half of a small limit, at most 8192); the rest is for tunnels at
// kFdsPerTunnel each, over every sandbox (`max_tunnels`), and one sandbox may hold a quarter of
// them, at most 1024 (`max_tunnels_per_sandbox`), so one sandbox cannot starve the API or the
// others. Pure.
struct EgressCaps {
  std::size_t reserved_fds = 0;
  std::size_t max_tunnels = 0;
  std::size_t max_tunnels_per_sandbox = 0;
};
EgressCaps ComputeEgressCaps(std::uint64_t open_files_limit);

struct EgressHostOptions {
  // The DNS server enforcers resolve allowed names with (udp). Default: the first nameserver
  // of /etc/resolv.conf.
  std::optional<egress::IpAddress> resolver;
  std::uint16_t resolver_port = 53;
  std::chrono::milliseconds period{250};
  // Add and remove the AGVISOR-ALLOW rules (off only in tests that run no firewall).
  bool manage_firewall = true;
  // Where live policy changes are kept ("" = not kept across restarts), and the egress log's
  // files, in its `log` directory (egress_log_files.h; "" = the log is in memory only).
  std::string state_dir;
  EgressLogLimits log_limits;
  // Tunnel caps; all zero: computed from the process's soft RLIMIT_NOFILE at Start.
  EgressCaps caps;
  // A tunnel that moves no byte either way for this long is closed (0: never).
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
  // Extra CA certificates (PEM) that upstreams of intercepted connections (brokered secrets)
  // are verified against, besides the system trust store (egress::ProxyOptions::upstream_ca_pem).
  std::string upstream_ca_pem;
  // agvisord's broker of brokered secrets: a network whose bindings label names secrets gets
  // those the vault holds for it (ClaimSecrets). Null: none are brokered.
  std::shared_ptr<SecretVault> vault;
  // Called (on the reconcile thread, without locks held by the caller's work) with the new CA
  // of a sandbox whose operator's secrets were brokered again after a restart, for agvisord to
  // install it in the sandbox.
  std::function<void(const std::string& container, const std::string& ca_pem)> on_new_ca;
};

// One sandbox's egress counters, for the metrics route: decisions since its enforcer started
// serving it (in this agvisord), bytes spliced each way, connections open now.

class EgressHost {
 public:
  // Serves what is there now (one reconcile), then keeps reconciling on a thread. Errors:
  // kInvalidArgument (no resolver), kUnavailable (the state directory cannot be made).
  static Result<std::unique_ptr<EgressHost>> Start(std::unique_ptr<EgressHostRuntime> runtime,
                                                   EgressHostOptions options);
  // Stops the thread and every enforcer, and takes its firewall rules out again.
  ~EgressHost();
  EgressHost(const EgressHost&) = delete;
  EgressHost& operator=(const EgressHost&) = delete;

  // One pass: serve new networks, drop gone ones. Errors: listing networks failed.
  Result<void> Reconcile();

  // kNotFound when the container has no served egress network.
  Result<api::EgressView> View(const std::string& container) const;
  // Replaces the sandbox's policy: new connections (and lookups) are decided by it at once.
  Result<api::EgressView> SetRules(const std::string& container, const egress::EgressRules& rules);
  // Registers a sandbox's brokered secrets (docs/egress.md, "Secrets") and the CA its trust
  // bundle holds, by container name, in memory only: given to its enforcer now if it is served,
  // else as soon as it is (so agvisord calls this before the sandbox starts). Replaces what was
  // registered; an empty list forgets. Kept while its network comes and goes, until
  // ForgetSecrets (agvisord calls it when the sandbox is removed). Errors: kInvalidArgument
  // (ValidateSecrets; no CA, or a CA not made for every bound host).
  Result<void> SetSecrets(const std::string& container, std::vector<egress::BrokeredSecret> secrets,
                          std::shared_ptr<const egress::SandboxCa> ca);
  void ForgetSecrets(const std::string& container);
  // kNotFound when the container has no served egress network.
  Result<api::EgressTraffic> Traffic(const std::string& container) const;
  // The egress log (docs/egress.md, "Log"). The sandbox's last `last` records, oldest first:
  // from its files when agvisord keeps them (records from before a restart of agvisord too),
  // else from the ring of the last 256. kNotFound when the container has no served egress
  // network.
  Result<std::vector<egress::Decision>> Log(const std::string& container, std::size_t last) const;
  // Its records numbered after `after_seq` (Decision::seq; from the ring: a follower's next
  // batch), and the number of its last record (a follower's starting point). kNotFound as Log.
  Result<std::vector<egress::Decision>> Since(const std::string& container,
                                              std::uint64_t after_seq) const;
  Result<std::uint64_t> LastSeq(const std::string& container) const;
  // Totals over every sandbox, for the metrics route.
  egress::DecisionCounters Totals() const { return log_->Totals(); }
  std::size_t served() const;
  const EgressCaps& caps() const { return options_.caps; }
  // Whether the firewall's hooks were in place (or the host declared external) at the last check.
  bool firewall_in_place() const;

 private:
  struct Served {
    EgressNetworkInfo net;
    egress::EgressRules rules;
    std::unique_ptr<egress::EgressProxy> proxy;
  };
  EgressHost(std::unique_ptr<EgressHostRuntime> runtime, EgressHostOptions options);
  Result<void> Serve(const std::string& container, Served s);
  // Under mu_: the secrets of network `n` from the vault into secrets_ (or none).
  void ClaimSecrets(const EgressNetworkInfo& n);
  void Drop(Served& s);
  // Deletes live-change files of networks that no longer exist.
  void ClearStaleState();
  // Checks the hooks, records the result (firewall_in_place_, the state file) and logs changes.
  void CheckFirewall();
  std::string StatePath(const std::string& network_id) const;
  void Loop();

  std::unique_ptr<EgressHostRuntime> runtime_;
  EgressHostOptions options_;
  std::vector<egress::IpAddress> host_addresses_;
  std::shared_ptr<egress::DecisionLog> log_;
  std::shared_ptr<EgressLogFiles> files_;             // null: no state directory
  std::shared_ptr<egress::ConnectionBudget> budget_;  // options_.caps.max_tunnels, all sandboxes
  mutable std::mutex mu_;
  std::map<std::string, Served> served_;  // by container name
  struct Secrets {
    std::vector<egress::BrokeredSecret> secrets;
    std::shared_ptr<const egress::SandboxCa> ca;
  };
  std::map<std::string, Secrets> secrets_;  // by container name, under mu_
  // Networks that could not be served, by id: tried again after a pause, not every period.
  std::map<std::string, std::chrono::steady_clock::time_point> retry_after_;
  bool firewall_in_place_ = true;  // under mu_
  std::string firewall_missing_;   // under mu_: what the last check found missing
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// What every egress door of an agvisord without enforcers answers (--no-egress, a Docker host
// elsewhere): kUnsupported saying why.
Error NoEgressEnforcers();

// The host's own interface addresses (v4 and v6): refused as destinations by every enforcer.
std::vector<egress::IpAddress> HostInterfaceAddresses();
// The first `nameserver` of a resolv.conf text; kNotFound when there is none.
Result<egress::IpAddress> FirstNameserver(std::string_view resolv_conf);

}  // namespace server
}  // namespace agvisor
