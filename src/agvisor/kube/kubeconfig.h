// Where a Kubernetes API server is and how to authenticate to it: the `kube://` host address,
// kubeconfig files (as kubectl reads them: $KUBECONFIG, else ~/.kube/config) and the in-cluster
// service account. Used by kube::Client (client.h) and the Kubernetes runtime
// (sandbox/kube_runtime/). Parsing is pure (ParseKubeAddress, ParseKubeconfig, ResolveContext);
// LoadCredentials reads the files.
//
// Supported credentials: a bearer token (inline or a tokenFile), a client certificate and key
// (inline -data or files), an exec plugin (client.authentication.k8s.io ExecCredential: run once
// per process, its status.token or client certificate used). Refused with the reason: a cluster
// with insecure-skip-tls-verify (agvisor always verifies the server), http:// servers,
// auth-provider plugins, basic auth.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::kube {

// "kube:" or "kube://" (the current context), "kube://CONTEXT", "kube://CONTEXT/NAMESPACE",
// "kube:///NAMESPACE" (the current context, another namespace). The namespace is what follows
// the LAST '/', so a context name that holds '/' (EKS's "arn:...:cluster/NAME") is written with
// its namespace after it.
struct KubeAddress {
  std::string context;     // "" = the kubeconfig's current-context
  std::string namespace_;  // "" = the context's namespace, else "default"
};

// Whether `host` is a Kubernetes address (starts with "kube:").
bool IsKubeAddress(std::string_view host);
// Errors: kInvalidArgument (not kube:, a namespace that is not a DNS label, control characters).
Result<KubeAddress> ParseKubeAddress(std::string_view host);

struct KubeconfigCluster {
  std::string server;                     // "https://host:port[/prefix]"
  std::string ca_pem;                     // certificate-authority-data, decoded
  std::string ca_file;                    // certificate-authority (a path)
  bool insecure_skip_tls_verify = false;  // refused at ResolveContext
  std::string tls_server_name;            // unsupported when set (refused)
};

struct KubeconfigUser {
  std::string token;
  std::string token_file;
  std::string cert_pem, cert_file;
  std::string key_pem, key_file;
  // exec plugin: the command and its arguments and "NAME=VALUE" environment.
  std::vector<std::string> exec_argv;
  std::vector<std::string> exec_env;
  bool auth_provider = false;  // refused at ResolveContext
  bool basic_auth = false;     // refused at ResolveContext
};

struct KubeconfigContext {
  std::string cluster;
  std::string user;
  std::string namespace_;
};

struct Kubeconfig {
  std::string current_context;
  std::map<std::string, KubeconfigCluster> clusters;
  std::map<std::string, KubeconfigUser> users;
  std::map<std::string, KubeconfigContext> contexts;
};

// Parses one kubeconfig document. Relative file paths in it are made absolute against
// `base_dir` (the file's directory), as kubectl does. Errors: kInvalidArgument (not YAML, not a
// kubeconfig, bad base64), naming `origin` (the file) and the field.
Result<Kubeconfig> ParseKubeconfig(std::string_view yaml, std::string_view base_dir,
                                   std::string_view origin);
// Merges `more` into `into` as kubectl merges the files of $KUBECONFIG: the first file to set a
// name (or the current context) wins.
void MergeKubeconfig(Kubeconfig& into, const Kubeconfig& more);

// What a client needs to reach and authenticate to the API server of one context.
struct Credentials {
  std::string context;  // the context's name
  std::string host;     // the server's host (a name or an IP address)
  std::uint16_t port = 443;
  std::string path_prefix;  // the server URL's path ("" or "/k8s/clusters/c-1"), no trailing '/'
  std::string ca_pem;       // "" = the system's trust store
  std::string token;        // bearer token, or ""
  // The file `token` was read from (a tokenFile; in a pod, the service account's token, which
  // kubelet rotates): kube::Client reads it again once a minute. "" = a fixed token.
  std::string token_file;
  std::string cert_pem, key_pem;
  std::vector<std::string> exec_argv, exec_env;  // an exec plugin to ask for a token
  std::string namespace_;  // the namespace to use (the address's, the context's, or "default")
  std::string ToString() const;  // "context C (https://host:port), namespace N", for messages
};

// The credentials of `address` in `config` (files it names are NOT read yet: see
// LoadCredentials). Errors: kNotFound (no such context, cluster or user; no current context),
// kPermissionDenied (insecure-skip-tls-verify: never honoured), kUnsupported (auth-provider,
// basic auth, tls-server-name), kInvalidArgument (a server that is not https://HOST[:PORT][/path]).
Result<Credentials> ResolveContext(const Kubeconfig& config, const KubeAddress& address);

// The credentials for `address` on this machine: the kubeconfig files of $KUBECONFIG (':'
// separated) or ~/.kube/config; with neither, inside a pod, the service account
// (KUBERNETES_SERVICE_HOST/PORT and /var/run/secrets/kubernetes.io/serviceaccount). Reads the
// files the kubeconfig names (CA, certificate, key, token file). Errors: those of
// ResolveContext, kNotFound (no kubeconfig and not in a cluster; a named file missing).
Result<Credentials> LoadCredentials(const KubeAddress& address);

// A bearer token file's token (trailing whitespace dropped). Errors: kNotFound (cannot be read),
// kInvalidArgument (over 1 MiB).
Result<std::string> ReadTokenFile(const std::string& path);

// Base64 (RFC 4648, padding optional, whitespace skipped) to bytes. nullopt when malformed.
std::optional<std::string> DecodeBase64(std::string_view text);

}  // namespace agvisor::kube
