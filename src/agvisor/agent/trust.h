// The sandbox CA of a sandbox with brokered secrets (docs/egress.md, "Secrets"), installed by
// init at start: the CA alone (NODE_EXTRA_CA_CERTS adds it to Node's own roots) and a combined
// bundle of the image's trust store followed by the CA (SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
// PIP_CERT, GIT_SSL_CAINFO, CURL_CA_BUNDLE point at it), so clients verify the enforcer's
// certificates for the secret's hosts and every other HTTPS host as before.
//
// The host passes the CA's certificate in kSandboxCaEnv and names the two files through the
// variables above (sandbox/instance_spec.h ApplyBrokeredSecrets): the paths are the host's, the
// agent only writes them, and only under its own directory.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::agent {

inline constexpr std::string_view kSandboxCaEnvVar = "AGVISOR_SANDBOX_CA";
// Where images keep their trust store (the first that exists is used): Debian, Ubuntu and
// Alpine; Fedora and RHEL; openSUSE; Alpine's and BSD-style name.
inline constexpr std::array<std::string_view, 4> kImageTrustStores = {
    "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem"};

// The bundle: `image_store` (possibly empty), a newline when it lacks one, then `ca_pem`. Pure.
std::string CombinedTrustBundle(std::string_view image_store, std::string_view ca_pem);

// Writes `ca_pem` to `ca_path` and the combined bundle (the first of `stores` that can be read,
// at most 16 MiB) to `bundle_path`, each replaced atomically, mode 0644. Both paths must be
// absolute and below `dir` (kInvalidArgument otherwise: an image's env cannot aim the agent's
// writes elsewhere). `ca_pem` must hold a PEM certificate. Errors: kInternal (a write failed).
Result<void> InstallSandboxCa(std::string_view ca_pem, const std::string& ca_path,
                              const std::string& bundle_path, std::string_view dir,
                              const std::array<std::string_view, 4>& stores = kImageTrustStores);

// Init's step: when kSandboxCaEnvVar is set, installs it at the paths NODE_EXTRA_CA_CERTS and
// SSL_CERT_FILE name (under /.agvisor) and removes the variable from this process's environment
// (children do not need it). Returns whether it installed; errors as InstallSandboxCa.
Result<bool> InstallSandboxCaFromEnv();

}  // namespace agvisor::agent
