// agvisord's broker of brokered secrets (docs/egress.md, "Secrets"): what its in-process place
// (client::InProcess with a SecretBroker) asks when a create carries secrets, and what its egress
// enforcers (egress_host.h) ask when they serve a sandbox's network.
//
// Values come from the caller (over agvisord's authenticated API: the caller read its own file)
// or, by name, from the operator's secrets file, read once at start (`agvisord --secrets-file`,
// mode 0600, owned by agvisord's user: base/private_file.h); agvisord never opens a path a
// caller names. Broker makes a placeholder per secret and one sandbox CA (egress/ca.h) for
// their hosts, and keeps them, by the bindings label the sandbox's network carries
// (EncodeSecretBindings), until the enforcer claims them. After a restart nothing is pending:
// Claim rebuilds the operator's secrets from the label and the file (with a new CA, which the
// caller of Claim installs in the sandbox); a caller's are gone.
//
// Values live in memory only: never logged, labelled or written. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/client/handle_cache.h"
#include "agvisor/egress/ca.h"
#include "agvisor/egress/secrets.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor::server {

// The operator's secrets file: one `NAME=VALUE` a line (the value is the rest of the line, as
// it is), blank lines and lines starting with '#' skipped. kInvalidArgument naming the line
// number (never its value): no '=', a bad name (egress::ValidateSecret's rule), a name twice.
Result<std::map<std::string, std::string>> ParseOperatorSecrets(std::string_view text);
// ReadPrivateFile (0600, owned by this user, at most 1 MiB), then ParseOperatorSecrets.
Result<std::map<std::string, std::string>> ReadOperatorSecrets(const std::string& path);

class SecretVault final : public SecretBroker {
 public:
  // A create's pending secrets that no enforcer claimed within this are dropped.
  static constexpr std::chrono::minutes kPendingFor{10};

  explicit SecretVault(std::map<std::string, std::string> operator_secrets);

  // kNotFound naming a secret given by name that the operator's file does not hold (and how to
  // add it); kInvalidArgument (egress::ValidateSecrets); kInternal (the CA).
  Result<BrokeredSecrets> Broker(const std::vector<SecretSpec>& secrets) override;
  void Release(const BrokeredSecrets& brokered) override;

  struct Claimed {
    std::vector<egress::BrokeredSecret> secrets;
    std::shared_ptr<const egress::SandboxCa> ca;
    bool new_ca = false;               // rebuilt after a restart: the sandbox must get it
    std::vector<std::string> missing;  // a caller's secrets lost with agvisord's restart
  };
  // The secrets for the network of `container` whose bindings label is `label`: a create's
  // pending ones (taken), else the operator's rebuilt from the label with a new CA. nullopt
  // when there are none to give (a malformed label, only a caller's secrets after a restart:
  // `missing` is then logged by the caller through the second form).
  std::optional<Claimed> Claim(const std::string& label, const std::string& container);
  std::size_t pending() const;

 private:
  struct Pending {
    std::vector<egress::BrokeredSecret> secrets;
    std::shared_ptr<const egress::SandboxCa> ca;
    std::chrono::steady_clock::time_point made;
  };
  const std::map<std::string, std::string> operator_;
  mutable std::mutex mu_;
  std::map<std::string, Pending> pending_;  // by bindings label
};

// Installs the new CA of a sandbox whose operator's secrets were brokered again after a restart
// (EgressHostOptions::on_new_ca), on a thread of its own so the enforcers' reconcile never
// waits on a sandbox: the CA file is replaced and the new CA appended to the trust bundle (the
// old one stays in it; at most 16 MiB of it is read back), through the sandbox's handle.
// Failures are logged (the sandbox's clients then refuse the enforcer's certificates: nothing is
// sent). Joins its thread on destruction.
class CaInstaller {
 public:
  explicit CaInstaller(std::shared_ptr<client::HandleCache> sandboxes);
  ~CaInstaller();
  CaInstaller(const CaInstaller&) = delete;
  CaInstaller& operator=(const CaInstaller&) = delete;
  void Install(const std::string& container, const std::string& ca_pem);

 private:
  void Loop();
  std::shared_ptr<client::HandleCache> sandboxes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::string>> queue_;  // under mu_
  bool stopping_ = false;                                  // under mu_
  std::thread thread_;
};

}  // namespace agvisor::server
