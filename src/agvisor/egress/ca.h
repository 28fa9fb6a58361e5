// A sandbox's own certificate authority, for the TLS the enforcer terminates for brokered secrets
// (docs/egress.md, "Secrets"). The sandbox trusts its certificate (the bundle installed in it);
// the enforcer presents, for each bound host, a leaf certificate this CA signs.
//
// The key is an EC P-256 key made in agvisord's memory: there is no way to export it, and it
// never reaches a file, a label or the sandbox. The CA certificate carries X.509 name
// constraints (RFC 5280 4.2.1.10, marked critical): permitted DNS names are the bound hosts only
// (as X.509 defines a DNS constraint, names under them match too; this CA signs only the exact
// bound names), and every IPv4 and IPv6 address is excluded. So a client that verifies the chain
// refuses a certificate this CA issued for any other name, even if the key were misused.
//
// Used by agvisord (which makes one per sandbox with secrets and hands it to the proxy and the
// sandbox's bundle) and the egress proxy (leaves). Thread-safe (the leaf cache has a lock).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "agvisor/base/error.h"

struct x509_st;
struct evp_pkey_st;
struct x509_store_st;

namespace agvisor::egress {

// A leaf certificate and its key, for one host (OpenSSL objects, freed with the Leaf).
class LeafCert {
 public:
  LeafCert(x509_st* cert, evp_pkey_st* key) : cert_(cert), key_(key) {}
  ~LeafCert();
  LeafCert(const LeafCert&) = delete;
  LeafCert& operator=(const LeafCert&) = delete;
  x509_st* cert() const { return cert_; }
  evp_pkey_st* key() const { return key_; }
  std::chrono::system_clock::time_point not_after;

 private:
  x509_st* cert_;
  evp_pkey_st* key_;
};

// Adds every certificate of a PEM text to `store` (nullptr: only reads them); the number added.
// Used for the upstream CAs an operator names (ProxyOptions::upstream_ca_pem).
int AddPemCertificates(const std::string& pem, x509_store_st* store);

class SandboxCa {
 public:
  // How long the CA and its leaves are valid (from one hour before now, for clocks that lag).
  static constexpr std::chrono::hours kValidity{24 * 365};

  // A new key and a self-signed CA certificate for `hosts` (normalised exact DNS names, as
  // ValidateSecret leaves them; 1..kMaxSecretHosts). `sandbox` goes into the subject's name.
  // Errors: kInvalidArgument (no hosts, a host that is not a DNS name), kInternal (OpenSSL).
  static Result<std::shared_ptr<SandboxCa>> Create(const std::string& sandbox,
                                                   std::span<const std::string> hosts);
  ~SandboxCa();
  SandboxCa(const SandboxCa&) = delete;
  SandboxCa& operator=(const SandboxCa&) = delete;

  // The CA certificate, PEM: what the sandbox's trust bundle gains.
  const std::string& cert_pem() const { return cert_pem_; }
  const std::vector<std::string>& hosts() const { return hosts_; }

  // A leaf for `host` (one of hosts()): made on first use (a new P-256 key, subjectAltName the
  // host only, serverAuth) and kept; made again once less than a day of it is left.
  // Errors: kPermissionDenied (a host this CA is not for), kInternal (OpenSSL).
  Result<std::shared_ptr<const LeafCert>> LeafFor(const std::string& host) const;

 private:
  // ca_test.cc signs a certificate for a name outside the constraints with the key, to prove a
  // verifying client refuses it; nothing else reaches the key.
  friend class SandboxCaTestPeer;
  SandboxCa(x509_st* cert, evp_pkey_st* key, std::vector<std::string> hosts, std::string pem);
  x509_st* cert_;
  evp_pkey_st* key_;
  std::vector<std::string> hosts_;
  std::string cert_pem_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::shared_ptr<const LeafCert>> leaves_;
};

}  // namespace agvisor::egress
