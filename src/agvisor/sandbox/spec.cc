#include "agvisor/sandbox/spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "agvisor/egress/secrets.h"
#include "agvisor/sandbox/snapshot.h"

namespace agvisor {
namespace {

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

// Docker's own name rule, the one `name` and `runtime` follow: [A-Za-z0-9][A-Za-z0-9_.-]*
bool IsDockerName(std::string_view s) {
  if (s.empty() || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::int64_t Multiplier(char suffix) {
  switch (std::tolower(static_cast<unsigned char>(suffix))) {
    case 'b':
      return 1;
    case 'k':
      return 1LL << 10;
    case 'm':
      return 1LL << 20;
    case 'g':
      return 1LL << 30;
    case 't':
      return 1LL << 40;
    default:
      return 0;
  }
}

}  // namespace

Result<std::int64_t> ParseMemorySize(std::string_view what, std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Error::InvalidArgument(std::string(what) + ": " + Quote(text) + " " + std::string(why) +
                                  " (use a number with an optional k/m/g/t suffix, e.g. '512m' or "
                                  "'1.5g'; 0 is refused because Docker reads it as unlimited)");
  };
  std::size_t i = 0;
  bool digits = false, dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    if (text[i] == '.') {
      if (dot) return bad("is not a size");
      dot = true;
    } else {
      digits = true;
    }
    ++i;
  }
  if (!digits) return bad("is not a size");
  std::int64_t mult = 1;
  if (i < text.size()) {
    mult = Multiplier(text[i]);
    if (mult == 0 || i + 1 != text.size()) return bad("has an unknown unit");
  }
  double value = std::strtod(std::string(text.substr(0, i)).c_str(), nullptr);
  double bytes = value * static_cast<double>(mult);
  if (!(bytes >= 1)) return bad("must be > 0");
  if (bytes > static_cast<double>(std::numeric_limits<std::int64_t>::max() / 2)) {
    return bad("is too large");
  }
  return static_cast<std::int64_t>(std::llround(bytes));
}

Result<std::int64_t> ParseDiskSize(std::string_view what, std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Error::InvalidArgument(
        std::string(what) + ": " + Quote(text) + " " + std::string(why) +
        " (use a whole number with an optional k/m/g/t suffix, e.g. '5g'; no decimals, no 'gb'; "
        "'none' for no cap)");
  };
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 15) return bad("is not a whole-number size");
  std::int64_t mult = 1;
  if (i < text.size()) {
    char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    mult = c == 'b' ? 0 : Multiplier(c);
    if (mult == 0 || i + 1 != text.size()) return bad("has an unknown unit");
  }
  std::int64_t n = std::strtoll(std::string(text.substr(0, i)).c_str(), nullptr, 10);
  if (n <= 0) return bad("must be > 0 (runsc reads 0 as unlimited)");
  if (n > std::numeric_limits<std::int64_t>::max() / mult) return bad("is too large");
  return n * mult;
}

Result<void> ValidateLimits(const Limits& l) {
  if (!(l.cpus > 0) || !std::isfinite(l.cpus)) {
    return Error::InvalidArgument(
        "limits.cpus: must be a number of cores > 0 (fractions such as "
        "0.5 are allowed), got " +
        std::to_string(l.cpus));
  }
  if (l.cpus > 1024) {
    return Error::InvalidArgument("limits.cpus: " + std::to_string(l.cpus) +
                                  " is more cores "
                                  "than any host has");
  }
  AGVISOR_RETURN_IF_ERROR(ParseMemorySize("limits.memory", l.memory));
  if (l.pids <= 0) {
    return Error::InvalidArgument(
        "limits.pids: must be > 0 (Docker reads 0 or less as "
        "unlimited), got " +
        std::to_string(l.pids));
  }
  if (l.pids > kMaxPids) {
    return Error::InvalidArgument("limits.pids: " + std::to_string(l.pids) +
                                  " is more than a sandbox may run (at most " +
                                  std::to_string(kMaxPids) + " processes)");
  }
  if (l.shm) AGVISOR_RETURN_IF_ERROR(ParseMemorySize("limits.shm", *l.shm));
  if (!l.disk.empty() && l.disk != "none") {
    AGVISOR_RETURN_IF_ERROR(ParseDiskSize("limits.disk", l.disk));
  }
  return Ok();
}

Result<void> ValidateLimitsUpdate(const LimitsUpdate& u) {
  if (!u.cpus && !u.memory && !u.pids) {
    return Error::InvalidArgument(
        "update: give at least one of cpus, memory and pids (shm and disk cannot change on a "
        "running sandbox)");
  }
  Limits l;  // the defaults are valid: only the fields given are checked
  if (u.cpus) l.cpus = *u.cpus;
  if (u.memory) l.memory = *u.memory;
  if (u.pids) l.pids = *u.pids;
  AGVISOR_RETURN_IF_ERROR(ValidateLimits(l));
  if (u.memory && AGVISOR_TRY(ParseMemorySize("limits.memory", *u.memory)) < kMinMemoryBytes) {
    return Error::InvalidArgument("limits.memory: '" + *u.memory +
                                  "' is below the least a sandbox may have (6m, Docker's floor)");
  }
  return Ok();
}

Result<void> ValidateName(std::string_view name) {
  if (name.size() > 63 || !IsDockerName(name)) {
    return Error::InvalidArgument(
        "name " + Quote(name) +
        " is invalid: use 1-63 letters, digits, '_', '.' or '-', "
        "starting with a letter or digit (it becomes a container and volume name)");
  }
  return Ok();
}

namespace {

// A runtime's or network's name as Docker takes it: at most 128 bytes of letters, digits, '_', '.',
// '-'. `what` names the field, `hint` says what it must be.
Result<void> CheckDockerName(std::string_view what, std::string_view value, std::string_view hint) {
  if (value.size() <= 128 && IsDockerName(value)) return Ok();
  return Error::InvalidArgument(std::string(what) + " " + Quote(value) + " is invalid: " +
                                std::string(hint) + " (letters, digits, '_', '.', '-')");
}

}  // namespace

Result<void> ValidateRuntime(std::string_view runtime) {
  AGVISOR_RETURN_IF_ERROR(CheckDockerName(
      "runtime", runtime, "it must be the name of a gVisor (runsc) runtime registered in Docker"));
  // Whether it IS gVisor is decided on the host, from its binary (runtime_check.h).
  return Ok();
}

Result<void> ValidateImage(std::string_view image) {
  if (image.empty()) return Ok();                 // the default image
  if (image.starts_with(kSnapshotImagePrefix)) {  // a snapshot's tag (snapshot.h)
    return ValidateSnapshotTag(image.substr(kSnapshotImagePrefix.size()));
  }
  if (image.front() == '-') {
    return Error::InvalidArgument("image " + Quote(image) +
                                  " is invalid: an image name cannot start with '-'");
  }
  for (char c : image) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) ||
              std::string_view("._-/:@").find(c) != std::string_view::npos;
    if (!ok) {
      return Error::InvalidArgument("image " + Quote(image) +
                                    " is invalid: use [registry/]repository[:tag][@digest] "
                                    "(letters, digits and . _ - / : @)");
    }
  }
  if (image.size() > 512) return Error::InvalidArgument("image name is longer than 512 bytes");
  return Ok();
}

Result<void> ValidateNetwork(std::string_view network) {
  AGVISOR_RETURN_IF_ERROR(CheckDockerName(
      "network", network,
      "use \"bridge\", \"none\" or a network made with `agvisor network create NAME`"));
  if (network == "host") {
    return Error::InvalidArgument(
        "network \"host\" is refused: it would share the host's network "
        "namespace with the sandbox; use \"bridge\" or \"none\"");
  }
  if (network.starts_with("container:")) {
    return Error::InvalidArgument("network " + Quote(network) + " is refused");
  }
  return Ok();
}

Result<void> ValidateLabels(const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : labels) {
    bool key_ok = !k.empty() && k.size() <= 128;
    for (char c : k) {
      key_ok = key_ok &&
               (std::islower(static_cast<unsigned char>(c)) ||
                std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_');
    }
    if (!key_ok || k == "agvisor" || k.starts_with("agvisor.")) {
      return Error::InvalidArgument("label key " + Quote(k) +
                                    " is invalid: use lower-case letters, digits, '.', '-', '_' "
                                    "(keys starting with 'agvisor' are reserved)");
    }
    bool value_ok = v.size() <= 256;
    for (char c : v) value_ok = value_ok && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
    if (!value_ok) {
      return Error::InvalidArgument("label " + Quote(k) +
                                    ": the value must be printable and at most 256 bytes");
    }
  }
  return Ok();
}

Result<void> ValidatePlatform(std::string_view platform) {
  if (platform.empty() || platform == kPlatformSystrap || platform == kPlatformPtrace) return Ok();
  return Error::InvalidArgument("platform " + Quote(platform) +
                                " is not a gVisor platform agvisor offers: use \"" +
                                std::string(kPlatformPtrace) + "\" (the default) or \"" +
                                std::string(kPlatformSystrap) + "\", or leave it unset");
}

Result<void> ValidateSpec(const SandboxSpec& s) {
  AGVISOR_RETURN_IF_ERROR(ValidateImage(s.image));
  AGVISOR_RETURN_IF_ERROR(ValidateLimits(s.limits));
  AGVISOR_RETURN_IF_ERROR(ValidateRuntime(s.runtime));
  AGVISOR_RETURN_IF_ERROR(ValidatePlatform(s.platform));
  if (s.gui && AGVISOR_TRY(ParseMemorySize("limits.memory", s.limits.memory)) <
                   AGVISOR_TRY(ParseMemorySize("", kMinDesktopMemory))) {
    return Error::InvalidArgument("limits.memory='" + s.limits.memory +
                                  "' is too little for a desktop: give it at least " +
                                  std::string(kMinDesktopMemory) + " (the default is 2g)");
  }
  AGVISOR_RETURN_IF_ERROR(ValidateNetwork(s.network));
  if (s.egress) {
    if (s.network == "none") {
      return Error::InvalidArgument(
          "an egress policy needs a network: with network 'none' there is nothing to allow "
          "(drop the policy, or use network 'bridge')");
    }
    if (s.network != "bridge") {
      return Error::InvalidArgument(
          "an egress policy puts the sandbox on a network of its own; "
          "it cannot be combined with network '" +
          s.network + "' (use network 'bridge')");
    }
    auto policy = egress::EgressPolicy::Create(*s.egress);
    if (!policy.ok()) return policy.error().WithContext("egress policy");
  }
  AGVISOR_RETURN_IF_ERROR(ValidateSecrets(s.secrets, s.egress));
  if (s.brokered) {
    bool matches = s.brokered->env.size() == s.secrets.size();
    for (std::size_t i = 0; matches && i < s.secrets.size(); ++i) {
      matches = s.brokered->env[i].first == s.secrets[i].name;
    }
    if (!matches) {
      return Error::InvalidArgument("brokered secrets do not match the spec's secrets");
    }
  }
  if (s.name) AGVISOR_RETURN_IF_ERROR(ValidateName(*s.name));
  AGVISOR_RETURN_IF_ERROR(ValidateLabels(s.labels));
  if (s.warm_shells < 0 || s.warm_shells > kMaxWarmShells) {
    return Error::InvalidArgument("warm_shells must be from 0 (off) to " +
                                  std::to_string(kMaxWarmShells) + ", got " +
                                  std::to_string(s.warm_shells));
  }
  AGVISOR_RETURN_IF_ERROR(ValidateDeadlines(s.lifetime, s.idle_ttl));
  if (s.idle_action != "destroy" && s.idle_action != "stop" && s.idle_action != "pause") {
    return Error::InvalidArgument("idle_action must be destroy, stop or pause, got '" +
                                  s.idle_action + "'");
  }
  if (s.idle_action != "destroy" && !s.idle_ttl) {
    return Error::InvalidArgument("idle_action " + s.idle_action +
                                  " needs idle_ttl: it says what happens when the sandbox has "
                                  "been idle that long (set idle_ttl, or drop idle_action)");
  }
  if (s.idle_action == "stop" && !s.name) {
    return Error::InvalidArgument(
        "idle_action stop keeps /workspace for a later create of the same name: give the "
        "sandbox a name (or use destroy, which ends an anonymous one for good)");
  }
  return Ok();
}

namespace {

// Variables agvisor itself sets in a sandbox (the proxy's, the CA bundle's) or that would change
// how every program runs: a secret may not take their name.
bool ReservedEnvName(std::string_view n) {
  static constexpr std::string_view kReserved[] = {"HTTP_PROXY",
                                                   "HTTPS_PROXY",
                                                   "NO_PROXY",
                                                   "ALL_PROXY",
                                                   "SSL_CERT_FILE",
                                                   "SSL_CERT_DIR",
                                                   "REQUESTS_CA_BUNDLE",
                                                   "PIP_CERT",
                                                   "GIT_SSL_CAINFO",
                                                   "CURL_CA_BUNDLE",
                                                   "NODE_EXTRA_CA_CERTS",
                                                   "PATH",
                                                   "HOME",
                                                   "USER",
                                                   "SHELL",
                                                   "TERM"};
  for (std::string_view r : kReserved) {
    if (n == r) return true;
  }
  return n.starts_with("AGVISOR_") || n.starts_with("LD_");
}

}  // namespace

Result<void> ValidateSecrets(const std::vector<SecretSpec>& secrets,
                             const std::optional<egress::EgressRules>& egress) {
  if (secrets.empty()) return Ok();
  if (!egress) {
    return Error::InvalidArgument(
        "secrets need an egress policy: the enforcer that puts a secret's value into requests "
        "is the egress policy's (allow each secret's hosts: --allow-domain HOST)");
  }
  if (secrets.size() > kMaxSecrets) {
    return Error::InvalidArgument("at most " + std::to_string(kMaxSecrets) +
                                  " secrets per sandbox, got " + std::to_string(secrets.size()));
  }
  // The secret's own rules are the enforcer's (egress::ValidateSecret): checked on a copy with
  // a placeholder of each its own (the broker makes the real ones) and, for a secret given by
  // name, a stand-in value (the operator's file has the real one).
  std::vector<egress::BrokeredSecret> probes;
  for (std::size_t i = 0; i < secrets.size(); ++i) {
    const std::string index = std::to_string(i);
    probes.push_back({.name = secrets[i].name,
                      .value = secrets[i].value.value_or("x"),
                      .placeholder = std::string(egress::kPlaceholderPrefix) +
                                     std::string(32 - index.size(), '0') + index,
                      .hosts = secrets[i].hosts,
                      .header = secrets[i].header});
  }
  AGVISOR_RETURN_IF_ERROR(egress::ValidateSecrets(probes));
  const auto policy = AGVISOR_TRY(egress::EgressPolicy::Create(*egress));
  for (std::size_t i = 0; i < secrets.size(); ++i) {
    const SecretSpec& sec = secrets[i];
    const std::string what = "secret " + sec.name;
    if (ReservedEnvName(sec.name)) {
      return Error::InvalidArgument(what +
                                    ": that variable is agvisor's or the system's own "
                                    "(proxy, CA bundle, PATH, AGVISOR_*, LD_*); pick another name");
    }
    for (const std::string& h : sec.hosts) {
      // The bindings travel in a label and the CA names them: one spelling of each.
      if (std::find(probes[i].hosts.begin(), probes[i].hosts.end(), h) == probes[i].hosts.end()) {
        return Error::InvalidArgument(what + ": host " + Quote(h.substr(0, 255)) +
                                      " is not in canonical form (lower case, no trailing dot)");
      }
      // A rule must name it: in learn mode a secret's host is not one learned on the way.
      const egress::Verdict v = policy.Decide(egress::Target{.host = h, .port = 443});
      if (!v.allowed || v.learned) {
        return Error::InvalidArgument(what + ": host " + h +
                                      " is not allowed by the egress policy (" + v.reason +
                                      "): allow it too (--allow-domain " + h + ")");
      }
    }
  }
  return Ok();
}

std::string EncodeSecretBindings(const std::vector<SecretBinding>& bindings) {
  std::string out;
  for (const SecretBinding& b : bindings) {
    if (!out.empty()) out += ';';
    out += b.name + "|" + b.placeholder + "|";
    for (std::size_t i = 0; i < b.hosts.size(); ++i) out += (i ? "," : "") + b.hosts[i];
    out += "|" + b.header + "|" + (b.from_operator ? "operator" : "caller");
  }
  return out;
}

Result<std::vector<SecretBinding>> DecodeSecretBindings(std::string_view label) {
  std::vector<SecretBinding> out;
  auto bad = [] { return Error::InvalidArgument("malformed secret bindings label"); };
  std::size_t pos = 0;
  while (pos < label.size()) {
    std::size_t end = label.find(';', pos);
    if (end == std::string_view::npos) end = label.size();
    std::string_view one = label.substr(pos, end - pos);
    std::vector<std::string_view> parts;
    std::size_t p = 0;
    while (true) {
      std::size_t bar = one.find('|', p);
      parts.push_back(one.substr(p, bar == std::string_view::npos ? one.size() - p : bar - p));
      if (bar == std::string_view::npos) break;
      p = bar + 1;
    }
    if (parts.size() != 5 || parts[0].empty() || parts[1].empty() || parts[2].empty() ||
        (parts[4] != "caller" && parts[4] != "operator")) {
      return bad();
    }
    SecretBinding b{.name = std::string(parts[0]),
                    .placeholder = std::string(parts[1]),
                    .header = std::string(parts[3]),
                    .from_operator = parts[4] == "operator"};
    std::size_t h = 0;
    while (h <= parts[2].size()) {
      std::size_t comma = parts[2].find(',', h);
      if (comma == std::string_view::npos) comma = parts[2].size();
      if (comma == h) return bad();
      b.hosts.emplace_back(parts[2].substr(h, comma - h));
      h = comma + 1;
    }
    out.push_back(std::move(b));
    pos = end + 1;
  }
  return out;
}

Result<void> ValidateDeadlines(std::optional<std::int64_t> lifetime,
                               std::optional<std::int64_t> idle_ttl) {
  if (lifetime && *lifetime <= 0) {
    return Error::InvalidArgument("lifetime must be > 0 seconds, got " + std::to_string(*lifetime) +
                                  " (leave it unset to live until stop)");
  }
  if (idle_ttl && *idle_ttl <= 0) {
    return Error::InvalidArgument("idle_ttl must be > 0 seconds, got " + std::to_string(*idle_ttl) +
                                  " (leave it unset to never expire when idle)");
  }
  return Ok();
}

namespace {
std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}
}  // namespace

Result<void> ValidateExecTimeout(double timeout, std::optional<std::int64_t> idle_ttl) {
  if (!(timeout > 0) || !std::isfinite(timeout)) {
    return Error::InvalidArgument("timeout must be > 0 seconds, got " + Seconds(timeout));
  }
  if (idle_ttl && timeout >= static_cast<double>(*idle_ttl)) {
    return Error::InvalidArgument(
        "timeout=" + std::to_string(static_cast<long long>(timeout)) +
        "s must stay below idle_ttl=" + std::to_string(*idle_ttl) +
        "s, or the sandbox could expire under the command; lower the timeout or create the "
        "sandbox with a longer idle_ttl");
  }
  return Ok();
}

Result<void> ValidateProcessTimeout(double timeout, std::optional<std::int64_t> idle_ttl) {
  if (timeout == 0) return Ok();  // none: the process lives until it ends or is signalled
  if (!(timeout > 0) || !std::isfinite(timeout)) {
    return Error::InvalidArgument("timeout must be > 0 seconds (or 0 for none), got " +
                                  Seconds(timeout));
  }
  return ValidateExecTimeout(timeout, idle_ttl);
}

std::string ContainerNameFor(std::string_view name) {
  return std::string(kNamePrefix) + std::string(name);
}

}  // namespace agvisor
