#include "agvisor/server/secret_vault.h"

#include <algorithm>
#include <set>

#include "agvisor/base/private_file.h"
#include "agvisor/sandbox/agent_paths.h"
#include "agvisor/server/log.h"

namespace agvisor::server {

Result<std::map<std::string, std::string>> ParseOperatorSecrets(std::string_view text) {
  std::map<std::string, std::string> out;
  std::size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = "secrets file, line " + std::to_string(line_no);
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Error::InvalidArgument(where + ": write NAME=VALUE");
    }
    egress::BrokeredSecret probe{
        .name = std::string(line.substr(0, eq)),
        .value = std::string(line.substr(eq + 1)),
        .placeholder = std::string(egress::kPlaceholderPrefix) + std::string(32, '0'),
        .hosts = {"example.com"}};
    if (auto ok = egress::ValidateSecret(probe); !ok.ok()) {
      return ok.error().WithContext(where);
    }
    if (!out.emplace(probe.name, std::move(probe.value)).second) {
      return Error::InvalidArgument(where + ": secret " + probe.name + " is given twice");
    }
  }
  return out;
}

Result<std::map<std::string, std::string>> ReadOperatorSecrets(const std::string& path) {
  const std::string text = AGVISOR_TRY(ReadPrivateFile(path, "secrets file", 1u << 20));
  return ParseOperatorSecrets(text);
}

SecretVault::SecretVault(std::map<std::string, std::string> operator_secrets)
    : operator_(std::move(operator_secrets)) {}

Result<BrokeredSecrets> SecretVault::Broker(const std::vector<SecretSpec>& specs) {
  std::vector<egress::BrokeredSecret> secrets;
  std::vector<SecretBinding> bindings;
  std::vector<std::string> hosts;
  BrokeredSecrets out;
  for (const SecretSpec& s : specs) {
    std::string value;
    if (s.value) {
      value = *s.value;
    } else {
      auto it = operator_.find(s.name);
      if (it == operator_.end()) {
        return Error::NotFound(
            "secret " + s.name + " is not in agvisord's secrets file: the operator adds a line `" +
            s.name +
            "=VALUE` to the file agvisord was started with (--secrets-file, mode 0600) and "
            "restarts it, or the caller passes the value itself");
      }
      value = it->second;
    }
    secrets.push_back({.name = s.name,
                       .value = std::move(value),
                       .placeholder = AGVISOR_TRY(egress::MakePlaceholder()),
                       .hosts = s.hosts,
                       .header = s.header});
    bindings.push_back({.name = s.name,
                        .placeholder = secrets.back().placeholder,
                        .hosts = s.hosts,
                        .header = s.header,
                        .from_operator = !s.value.has_value()});
    out.env.emplace_back(s.name, secrets.back().placeholder);
    for (const std::string& h : s.hosts) {
      if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
    }
  }
  AGVISOR_RETURN_IF_ERROR(egress::ValidateSecrets(secrets));
  auto ca = AGVISOR_TRY(egress::SandboxCa::Create("agvisor sandbox", hosts));
  out.ca_pem = ca->cert_pem();
  out.label = EncodeSecretBindings(bindings);
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(pending_, [&](const auto& p) { return now - p.second.made > kPendingFor; });
  pending_[out.label] = Pending{std::move(secrets), std::move(ca), now};
  return out;
}

void SecretVault::Release(const BrokeredSecrets& brokered) {
  std::lock_guard lock(mu_);
  pending_.erase(brokered.label);
}

std::optional<SecretVault::Claimed> SecretVault::Claim(const std::string& label,
                                                       const std::string& container) {
  {
    std::lock_guard lock(mu_);
    if (auto it = pending_.find(label); it != pending_.end()) {
      Claimed c{.secrets = std::move(it->second.secrets), .ca = std::move(it->second.ca)};
      pending_.erase(it);
      return c;
    }
  }
  auto bindings = DecodeSecretBindings(label);
  if (!bindings.ok()) return std::nullopt;
  Claimed c;
  std::vector<std::string> hosts;
  for (const SecretBinding& b : *bindings) {
    auto it = operator_.find(b.name);
    if (!b.from_operator || it == operator_.end()) {
      c.missing.push_back(b.name);
      continue;
    }
    c.secrets.push_back({.name = b.name,
                         .value = it->second,
                         .placeholder = b.placeholder,
                         .hosts = b.hosts,
                         .header = b.header});
    for (const std::string& h : b.hosts) {
      if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
    }
  }
  if (!c.secrets.empty()) {
    if (!egress::ValidateSecrets(c.secrets).ok()) return std::nullopt;
    auto ca = egress::SandboxCa::Create(container, hosts);
    if (!ca.ok()) return std::nullopt;
    c.ca = std::move(*ca);
    c.new_ca = true;
  }
  return c;
}

std::size_t SecretVault::pending() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

CaInstaller::CaInstaller(std::shared_ptr<client::HandleCache> sandboxes)
    : sandboxes_(std::move(sandboxes)), thread_([this] { Loop(); }) {}

CaInstaller::~CaInstaller() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CaInstaller::Install(const std::string& container, const std::string& ca_pem) {
  {
    std::lock_guard lock(mu_);
    queue_.emplace_back(container, ca_pem);
  }
  cv_.notify_all();
}

void CaInstaller::Loop() {
  for (;;) {
    std::pair<std::string, std::string> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    const auto& [container, pem] = job;
    auto install = [&]() -> Result<void> {
      auto handle = AGVISOR_TRY(sandboxes_->Get(container));
      const std::string bundle_path(kSandboxCaBundlePath);
      std::string bundle = AGVISOR_TRY(handle->ReadFilePrefix(bundle_path, 16u << 20));
      if (!bundle.empty() && bundle.back() != '\n') bundle += '\n';
      AGVISOR_RETURN_IF_ERROR(handle->WriteFile(kSandboxCaPath, pem, 0644));
      return handle->WriteFile(bundle_path, bundle + pem, 0644);
    };
    if (auto r = install(); !r.ok()) {
      LogEvent("error",
               "egress: cannot install a sandbox's new CA; its clients will refuse the "
               "enforcer's certificates for its secrets' hosts (create it again)",
               {{"sandbox", container}, {"error", r.error().ToString()}});
    } else {
      LogEvent("info", "egress: the sandbox's new CA is installed", {{"sandbox", container}});
    }
  }
}

}  // namespace agvisor::server
