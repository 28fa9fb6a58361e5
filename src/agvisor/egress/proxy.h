// The egress proxy: the enforcer's data path (docs/egress.md).
//
// A TCP listener for one sandbox. For each connection it reads the first bytes (kept, replayed
// upstream later), decides where the connection wants to go from the TLS ClientHello's SNI, the
// HTTP Host header, an absolute-form proxy request or an HTTP CONNECT (sniff.h), asks the policy,
// resolves the name itself through the DNS server it was given (never the system resolver, never
// an address the client named), refuses restricted addresses after resolution (DNS rebinding),
// dials the address it resolved, and relays bytes both ways (splice(2) through a pipe per
// direction: they never pass through user space). No TLS is terminated, except for the hosts a
// brokered secret is bound to (SetSecrets, docs/egress.md "Secrets"). On a plain-HTTP
// connection the client's side is read in user space instead, so that every later request is
// checked against the connection's verdict (same name and port, else 403; ambiguous framing 400);
// after a 101 answer to the first request's Upgrade the bytes are opaque, as in a tunnel.
// Optionally it also answers the sandbox's DNS questions from the policy (serve_dns).
// Every decision goes to the DecisionLog. A new policy applies to the next connection, and open
// connections it no longer allows are closed (SetPolicy).
//
// Runs on its own thread (one io_context; connections are coroutines on it). Boost.Asio stays
// inside proxy.cc. Used by agvisord once wired (docs/egress.md, "Wiring"); tests and bench/ run it
// on loopback.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/egress/address.h"
#include "agvisor/egress/ca.h"
#include "agvisor/egress/decision_log.h"
#include "agvisor/egress/policy.h"
#include "agvisor/egress/secrets.h"

namespace agvisor::egress {

// Connections counted across proxies (agvisord's cap on tunnels over every sandbox, so that
// together they fit its file descriptors). Thread-safe.
class ConnectionBudget {
 public:
  explicit ConnectionBudget(std::size_t limit) : limit_(limit) {}
  // Takes one; false when `limit` are taken.
  bool TryTake();
  void Give();
  std::size_t taken() const { return taken_.load(); }
  std::size_t limit() const { return limit_; }

 private:
  const std::size_t limit_;
  std::atomic<std::size_t> taken_{0};
};

struct ProxyOptions {
  std::string sandbox;  // the name decisions are logged under
  IpAddress listen_address = IpAddress::V4(127, 0, 0, 1);
  std::uint16_t listen_port = 0;  // 0: a free port, see EgressProxy::port()
  // More ports on listen_address served the same way (e.g. 80 and 443 for clients that ignore
  // proxy variables and connect to the address the in-sandbox resolver gave them).
  std::vector<std::uint16_t> extra_listen_ports;
  // The DNS server the enforcer resolves allowed names with (UDP). Required.
  IpAddress resolver_address;
  std::uint16_t resolver_port = 53;
  // The port a TLS connection is dialled on (the ClientHello carries no port; once wired, the
  // sandbox's original destination port).
  std::uint16_t tls_port = 443;
  // Addresses of the host itself: refused after resolution like loopback (a name that resolves
  // to the host must not reach its services). Before each dial the proxy also asks the kernel
  // whether the address is local now, which covers addresses (a gateway of a network made later)
  // that appeared after this list was taken.
  std::vector<IpAddress> host_addresses;
  // Tests and benchmarks only, whose servers listen on loopback: blocks exempt from the classes
  // no policy opens (EgressPolicy::CheckResolved); a CIDR rule must still name them. agvisord
  // never sets it.
  std::vector<Cidr> test_only_dialable;
  // A connection that has not said where it goes within this time is closed (and logged).
  std::chrono::milliseconds sniff_timeout{5000};
  // Per DNS attempt (two attempts per address type).
  std::chrono::milliseconds resolve_timeout{1000};
  // Names whose lookup is kept for the answer's TTL (at most 300 s), so a connection to a name
  // looked up moments ago skips the resolver's round trip (dns_cache.h); 0: every connection
  // asks. The addresses are checked against the refused ranges on every use either way.
  std::size_t dns_cache_entries = 256;
  std::chrono::milliseconds connect_timeout{5000};
  // Bytes in flight per direction of a spliced connection: the size asked for the pipe that
  // splice(2) moves them through (the kernel may grant less), or of the buffer in user space when
  // no pipe can be had. Pipe pages are taken only while bytes sit in the pipe.
  std::size_t buffer_bytes = 1024 * 1024;
  // Connections over this are closed at once (and logged as denied).
  std::size_t max_connections = 1024;
  // When set, each connection also takes one from this budget (shared with other proxies) and
  // is closed at once (logged as denied) when none is left.
  std::shared_ptr<ConnectionBudget> shared_budget;
  // A connection past its verdict that moves no byte either way for this long is closed
  // (0: never).
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
  // When set, connections and DNS questions from addresses outside this block are dropped
  // without an answer (a sandbox's own network: nothing else is served, whatever routes exist).
  std::optional<Cidr> clients;
  // The in-sandbox resolver (dns.h, AnswerDnsQuery) on UDP listen_address:dns_port, when set
  // (0: a free port, see EgressProxy::dns_port()). Allowed names are answered with the address
  // that clients should connect to (default: listen_address), everything else with NXDOMAIN;
  // nothing is forwarded. Each question is a decision in the log (via "dns").
  bool serve_dns = false;
  std::uint16_t dns_port = 0;
  std::optional<IpAddress> dns_answer_v4;
  std::optional<IpAddress> dns_answer_v6;
  // Brokered secrets (SetSecrets): the upstream of an intercepted connection is verified against
  // the host's system trust store plus these CA certificates (PEM, "" = none), which an operator
  // names for upstreams behind their own CA (agvisord --egress-upstream-ca; the tests' servers).
  std::string upstream_ca_pem;
  // Called on the proxy's thread for every decision, after it is recorded (e.g. a log line).
  std::function<void(const Decision&)> on_decision;
};

// Bytes spliced through a proxy's connections since it started (after the verdict: the replayed
// first bytes and everything after them; refused connections move none).
struct ProxyTraffic {
  std::uint64_t bytes_up = 0;    // from the sandbox to the destinations
  std::uint64_t bytes_down = 0;  // from the destinations to the sandbox
};

class EgressProxy {
 public:
  // Binds the listener and starts the thread. kInvalidArgument for options out of range (no
  // resolver_address, port 0, buffer_bytes outside 1 KiB..16 MiB);
  // kUnavailable / errno codes when the address cannot be bound.
  static Result<std::unique_ptr<EgressProxy>> Start(ProxyOptions options, EgressPolicy policy,
                                                    std::shared_ptr<DecisionLog> log);
  // Stops: closes the listener and every connection, joins the thread.
  ~EgressProxy();
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  std::uint16_t port() const;
  // The in-sandbox resolver's UDP port (0 unless options.serve_dns).
  std::uint16_t dns_port() const;
  // Replaces the policy; connections accepted from now on are decided by it, and open ones are
  // judged again: those it no longer allows (their name, port or dialled address) are closed,
  // each logged as a denied decision.
  void SetPolicy(EgressPolicy policy);
  EgressPolicy policy() const;
  // Registers the sandbox's brokered secrets (secrets.h; validated by the caller with
  // ValidateSecrets) and the CA its bundle trusts; an empty list (or no CA) turns interception
  // off. From the next connection on, a CONNECT or a TLS connection to a bound host on
  // options.tls_port is intercepted: TLS terminated with a leaf of `ca` (ALPN: http/1.1 only),
  // the upstream dialled as usual and verified (system trust store + upstream_ca_pem, its name
  // against the bound host) before a byte is sent, then each request checked and rewritten
  // (intercept.h) and logged as a decision with its method, path and secret name. Every other
  // connection is relayed as before, untouched.
  void SetSecrets(std::vector<BrokeredSecret> secrets, std::shared_ptr<const SandboxCa> ca);
  // Connections accepted and not yet closed.
  std::size_t open_connections() const;
  ProxyTraffic traffic() const;

 private:
  class Impl;
  explicit EgressProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace agvisor::egress
