#include "agvisor/kube/kubeconfig.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>

#include "agvisor/base/fs.h"
#include "agvisor/base/strings.h"

namespace agvisor::kube {
namespace {

constexpr std::size_t kMaxKubeconfigBytes = 4 << 20;
constexpr std::size_t kMaxCredentialFileBytes = 1 << 20;
constexpr std::string_view kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// A DNS-1123 label: what a namespace name is.
bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

bool HasControl(std::string_view s) {
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return true;
  }
  return false;
}

std::string Absolute(std::string_view path, std::string_view base_dir) {
  if (path.empty() || path.front() == '/' || base_dir.empty()) return std::string(path);
  return std::string(base_dir) + "/" + std::string(path);
}

// A scalar field, "" when absent. Throws YAML exceptions on a non-scalar (caught by the caller).
std::string Str(const YAML::Node& n, const char* key) {
  const YAML::Node v = n[key];
  if (!v || v.IsNull()) return "";
  return v.as<std::string>();
}

Result<std::string> Base64Field(const YAML::Node& n, const char* key, const std::string& where) {
  const std::string text = Str(n, key);
  if (text.empty()) return std::string();
  auto bytes = DecodeBase64(text);
  if (!bytes) return Error::InvalidArgument(where + "." + key + ": not base64");
  return *bytes;
}

Result<std::string> ReadCredentialFile(const std::string& path, std::string_view what) {
  auto bytes = ReadSmallFile(path, kMaxCredentialFileBytes);
  if (!bytes) {
    return Error::NotFound("the " + std::string(what) + " file " + path +
                           " named by the kubeconfig cannot be read");
  }
  if (bytes->size() > kMaxCredentialFileBytes) {
    return Error::InvalidArgument("the " + std::string(what) + " file " + path +
                                  " is larger than 1 MiB");
  }
  return std::move(*bytes);
}

std::string TrimSpace(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

bool IsKubeAddress(std::string_view host) { return host.rfind("kube:", 0) == 0; }

Result<KubeAddress> ParseKubeAddress(std::string_view host) {
  auto invalid = [&](std::string_view why) {
    return Error::InvalidArgument("Kubernetes host \"" + std::string(host) +
                                  "\": " + std::string(why) +
                                  " (accepted forms: kube:, kube://CONTEXT, "
                                  "kube://CONTEXT/NAMESPACE, kube:///NAMESPACE)");
  };
  if (!IsKubeAddress(host)) return invalid("does not start with kube:");
  if (HasControl(host)) return invalid("control characters");
  std::string_view rest = host.substr(5);
  if (rest.empty()) return KubeAddress{};
  if (rest.rfind("//", 0) != 0) return invalid("expected kube: or kube://...");
  rest.remove_prefix(2);
  KubeAddress a;
  auto slash = rest.rfind('/');
  if (slash == std::string_view::npos) {
    a.context = std::string(rest);
    return a;
  }
  a.context = std::string(rest.substr(0, slash));
  a.namespace_ = std::string(rest.substr(slash + 1));
  if (!a.namespace_.empty() && !IsDnsLabel(a.namespace_)) {
    return invalid("namespace '" + a.namespace_ +
                   "' is not a DNS label (lower-case letters, digits, '-', at most 63)");
  }
  return a;
}

std::optional<std::string> DecodeBase64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    if (padding) return std::nullopt;  // data after padding
    int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (bits >= 6) return std::nullopt;  // a lone trailing character
  return out;
}

namespace {

// Reads one of a kubeconfig's named lists (clusters, users, contexts: items of the shape
// {name: N, <field>: {...}}) into `out` with `read(field node, where it is) -> Result<T>`. An
// item without a name or without its field is skipped; every other is read (and may refuse the
// file), and of two items of one name the first wins.
template <typename Map, typename Fn>
Result<void> ReadNamed(const YAML::Node& root, const char* list, const char* field,
                       const std::string& where, Map& out, Fn read) {
  for (const auto& item : root[list]) {
    const std::string name = Str(item, "name");
    const YAML::Node node = item[field];
    if (name.empty() || !node) continue;
    const std::string at =
        "kubeconfig " + where + ": " + list + "[" + name + "]." + std::string(field);
    out.emplace(name, AGVISOR_TRY(read(node, at)));
  }
  return Ok();
}

// The `kind` (cluster, user) `key` that context `context` names. Errors: kNotFound.
template <typename Map>
Result<const typename Map::mapped_type*> NamedBy(const Map& map, const std::string& context,
                                                 std::string_view kind, const std::string& key) {
  auto it = map.find(key);
  if (it == map.end()) {
    return Error::NotFound("context '" + context + "' names " + std::string(kind) + " '" + key +
                           "', which the kubeconfig does not have");
  }
  return &it->second;
}

}  // namespace

Result<Kubeconfig> ParseKubeconfig(std::string_view yaml, std::string_view base_dir,
                                   std::string_view origin) {
  const std::string where(origin);
  if (yaml.size() > kMaxKubeconfigBytes) {
    return Error::InvalidArgument("kubeconfig " + where + ": larger than 4 MiB");
  }
  Kubeconfig config;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    if (!root || root.IsNull()) return config;  // an empty file, as kubectl allows
    if (!root.IsMap()) return Error::InvalidArgument("kubeconfig " + where + ": not a mapping");
    config.current_context = Str(root, "current-context");
    AGVISOR_RETURN_IF_ERROR(
        ReadNamed(root, "clusters", "cluster", where, config.clusters,
                  [&](const YAML::Node& c, const std::string& at) -> Result<KubeconfigCluster> {
                    KubeconfigCluster k;
                    k.server = Str(c, "server");
                    k.ca_pem = AGVISOR_TRY(Base64Field(c, "certificate-authority-data", at));
                    k.ca_file = Absolute(Str(c, "certificate-authority"), base_dir);
                    k.insecure_skip_tls_verify =
                        c["insecure-skip-tls-verify"] && c["insecure-skip-tls-verify"].as<bool>();
                    k.tls_server_name = Str(c, "tls-server-name");
                    return k;
                  }));
    AGVISOR_RETURN_IF_ERROR(
        ReadNamed(root, "users", "user", where, config.users,
                  [&](const YAML::Node& u, const std::string& at) -> Result<KubeconfigUser> {
                    KubeconfigUser k;
                    k.token = Str(u, "token");
                    k.token_file = Absolute(Str(u, "tokenFile"), base_dir);
                    k.cert_pem = AGVISOR_TRY(Base64Field(u, "client-certificate-data", at));
                    k.cert_file = Absolute(Str(u, "client-certificate"), base_dir);
                    k.key_pem = AGVISOR_TRY(Base64Field(u, "client-key-data", at));
                    k.key_file = Absolute(Str(u, "client-key"), base_dir);
                    if (const YAML::Node e = u["exec"]) {
                      k.exec_argv.push_back(Str(e, "command"));
                      for (const auto& arg : e["args"])
                        k.exec_argv.push_back(arg.as<std::string>());
                      for (const auto& env : e["env"]) {
                        k.exec_env.push_back(Str(env, "name") + "=" + Str(env, "value"));
                      }
                      if (k.exec_argv.front().empty()) {
                        return Error::InvalidArgument(at + ".exec: no command");
                      }
                    }
                    k.auth_provider = static_cast<bool>(u["auth-provider"]);
                    k.basic_auth = !Str(u, "username").empty() || !Str(u, "password").empty();
                    return k;
                  }));
    AGVISOR_RETURN_IF_ERROR(
        ReadNamed(root, "contexts", "context", where, config.contexts,
                  [](const YAML::Node& c, const std::string&) -> Result<KubeconfigContext> {
                    return KubeconfigContext{.cluster = Str(c, "cluster"),
                                             .user = Str(c, "user"),
                                             .namespace_ = Str(c, "namespace")};
                  }));
  } catch (const YAML::Exception& e) {
    return Error::InvalidArgument("kubeconfig " + where + ": " + e.what());
  }
  return config;
}

void MergeKubeconfig(Kubeconfig& into, const Kubeconfig& more) {
  if (into.current_context.empty()) into.current_context = more.current_context;
  for (const auto& [k, v] : more.clusters) into.clusters.emplace(k, v);
  for (const auto& [k, v] : more.users) into.users.emplace(k, v);
  for (const auto& [k, v] : more.contexts) into.contexts.emplace(k, v);
}

std::string Credentials::ToString() const {
  return "context " + context + " (https://" + host + ":" + std::to_string(port) + path_prefix +
         "), namespace " + namespace_;
}

Result<Credentials> ResolveContext(const Kubeconfig& config, const KubeAddress& address) {
  const std::string name = address.context.empty() ? config.current_context : address.context;
  if (name.empty()) {
    return Error::NotFound(
        "the kubeconfig has no current-context: name one (kube://CONTEXT) or set it with "
        "`kubectl config use-context`");
  }
  auto ctx = config.contexts.find(name);
  if (ctx == config.contexts.end()) {
    std::string known;
    for (const auto& [k, v] : config.contexts) known += (known.empty() ? "" : ", ") + k;
    return Error::NotFound("no context '" + name + "' in the kubeconfig (contexts: " +
                           (known.empty() ? std::string("none") : known) + ")");
  }
  const KubeconfigCluster& cluster =
      *AGVISOR_TRY(NamedBy(config.clusters, name, "cluster", ctx->second.cluster));
  if (cluster.insecure_skip_tls_verify) {
    return Error::PermissionDenied(
        "cluster '" + ctx->second.cluster +
        "' sets insecure-skip-tls-verify: agvisor always verifies the API server; give the "
        "cluster its certificate-authority(-data) instead");
  }
  if (!cluster.tls_server_name.empty()) {
    return Error::Unsupported("cluster '" + ctx->second.cluster +
                              "' sets tls-server-name, which agvisor does not support yet");
  }
  Credentials c;
  c.context = name;
  std::string_view server = cluster.server;
  if (server.rfind("https://", 0) != 0) {
    return Error::InvalidArgument("cluster '" + ctx->second.cluster + "': server '" +
                                  cluster.server +
                                  "' is not an https:// URL (agvisor speaks only TLS to the API "
                                  "server)");
  }
  server.remove_prefix(8);
  auto slash = server.find('/');
  std::string_view authority = server.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = server.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    c.path_prefix = std::string(path);
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) {
      return Error::InvalidArgument("cluster '" + ctx->second.cluster + "': bad server '" +
                                    cluster.server + "'");
    }
    c.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size() && authority[close + 1] == ':')
      port_text = authority.substr(close + 2);
  } else {
    auto colon = authority.find(':');
    c.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (!port_text.empty()) {
    unsigned long v = 0;
    for (char ch : port_text) {
      if (ch < '0' || ch > '9' || v > 65535) {
        v = 0;
        break;
      }
      v = v * 10 + static_cast<unsigned long>(ch - '0');
    }
    if (v == 0 || v > 65535) {
      return Error::InvalidArgument("cluster '" + ctx->second.cluster + "': bad port in server '" +
                                    cluster.server + "'");
    }
    c.port = static_cast<std::uint16_t>(v);
  }
  if (c.host.empty() || c.host.front() == '-' || HasControl(c.host) ||
      c.path_prefix.find_first_of(" ?#") != std::string::npos) {
    return Error::InvalidArgument("cluster '" + ctx->second.cluster + "': bad server '" +
                                  cluster.server + "'");
  }
  c.ca_pem = cluster.ca_pem;
  if (!ctx->second.user.empty()) {
    const KubeconfigUser& user =
        *AGVISOR_TRY(NamedBy(config.users, name, "user", ctx->second.user));
    if (user.auth_provider) {
      return Error::Unsupported("user '" + ctx->second.user +
                                "' uses an auth-provider plugin, which agvisor does not run: "
                                "use a token, a client certificate or an exec plugin");
    }
    if (user.basic_auth) {
      return Error::Unsupported("user '" + ctx->second.user +
                                "' uses basic auth (username/password), which Kubernetes removed; "
                                "use a token or a client certificate");
    }
    c.token = user.token;
    c.cert_pem = user.cert_pem;
    c.key_pem = user.key_pem;
    c.exec_argv = user.exec_argv;
    c.exec_env = user.exec_env;
  }
  c.namespace_ = !address.namespace_.empty()       ? address.namespace_
                 : !ctx->second.namespace_.empty() ? ctx->second.namespace_
                                                   : std::string("default");
  return c;
}

Result<std::string> ReadTokenFile(const std::string& path) {
  return TrimSpace(AGVISOR_TRY(ReadCredentialFile(path, "tokenFile")));
}

Result<Credentials> LoadCredentials(const KubeAddress& address) {
  std::vector<std::string> files;
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    for (auto part : Split(env, ':')) {
      if (!part.empty()) files.emplace_back(part);
    }
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    files.push_back(std::string(home) + "/.kube/config");
  }
  Kubeconfig config;
  bool found = false;
  for (const auto& path : files) {
    auto text = ReadSmallFile(path, kMaxKubeconfigBytes + 1);
    if (!text) continue;  // kubectl skips missing files of $KUBECONFIG too
    found = true;
    const auto cut = path.rfind('/');
    const std::string dir = cut == std::string::npos ? "." : path.substr(0, cut);
    auto one = AGVISOR_TRY(ParseKubeconfig(*text, dir, path));
    MergeKubeconfig(config, one);
  }
  if (!found) {
    const char* svc_host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* svc_port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (svc_host == nullptr || *svc_host == '\0' || !address.context.empty()) {
      return Error::NotFound(
          "no kubeconfig found (" +
          (files.empty() ? std::string("$KUBECONFIG and $HOME are unset")
                         : "looked at " + files.front()) +
          ") and not running in a cluster: set KUBECONFIG or create ~/.kube/config");
    }
    // In a pod: the service account kubelet mounts.
    const std::string dir(kServiceAccountDir);
    std::string server = std::string("https://") +
                         (std::string_view(svc_host).find(':') != std::string_view::npos
                              ? "[" + std::string(svc_host) + "]"
                              : std::string(svc_host)) +
                         ":" + (svc_port && *svc_port ? svc_port : "443");
    config.current_context = "in-cluster";
    KubeconfigCluster cluster;
    cluster.server = server;
    cluster.ca_pem = AGVISOR_TRY(ReadCredentialFile(dir + "/ca.crt", "CA"));
    config.clusters["in-cluster"] = std::move(cluster);
    KubeconfigUser user;
    user.token_file = dir + "/token";
    config.users["in-cluster"] = std::move(user);
    std::string ns = "default";
    if (auto n = ReadSmallFile(dir + "/namespace", 256)) ns = TrimSpace(*n);
    config.contexts["in-cluster"] =
        KubeconfigContext{.cluster = "in-cluster", .user = "in-cluster", .namespace_ = ns};
  }
  auto creds = AGVISOR_TRY(ResolveContext(config, address));
  const auto& cluster = config.clusters.at(config.contexts.at(creds.context).cluster);
  if (creds.ca_pem.empty() && !cluster.ca_file.empty()) {
    creds.ca_pem = AGVISOR_TRY(ReadCredentialFile(cluster.ca_file, "certificate-authority"));
  }
  const std::string& user_name = config.contexts.at(creds.context).user;
  if (auto us = config.users.find(user_name); us != config.users.end()) {
    const KubeconfigUser& user = us->second;
    if (creds.token.empty() && !user.token_file.empty()) {
      creds.token = AGVISOR_TRY(ReadTokenFile(user.token_file));
      creds.token_file = user.token_file;
    }
    if (creds.cert_pem.empty() && !user.cert_file.empty()) {
      creds.cert_pem = AGVISOR_TRY(ReadCredentialFile(user.cert_file, "client-certificate"));
    }
    if (creds.key_pem.empty() && !user.key_file.empty()) {
      creds.key_pem = AGVISOR_TRY(ReadCredentialFile(user.key_file, "client-key"));
    }
  }
  return creds;
}

}  // namespace agvisor::kube
