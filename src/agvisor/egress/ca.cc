// OpenSSL 3's X509 API. Each certificate gets a random 128-bit serial (RFC 5280 4.1.2.2 allows
// up to 20 octets), so two leaves from one CA never share one.
#include "agvisor/egress/ca.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>

#include "agvisor/egress/host.h"
#include "agvisor/egress/secrets.h"

namespace agvisor::egress {
namespace {

Error OpenSslError(const std::string& what) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  char text[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, text, sizeof text);
  return Error::Internal("sandbox CA: " + what + ": " + text);
}

bool AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate with a random serial, `key`'s public half, the validity window and a subject
// with one CN; issuer and signature are the caller's.
X509* NewCertificate(EVP_PKEY* key, const std::string& common_name, std::chrono::seconds lifetime) {
  X509* x = X509_new();
  if (x == nullptr) return nullptr;
  unsigned char serial[16];
  BIGNUM* bn = nullptr;
  bool ok = X509_set_version(x, 2) == 1 && RAND_bytes(serial, sizeof serial) == 1;
  if (ok) {
    serial[0] &= 0x7f;  // positive
    bn = BN_bin2bn(serial, sizeof serial, nullptr);
    ok = bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != nullptr;
  }
  BN_free(bn);
  ok = ok && X509_gmtime_adj(X509_getm_notBefore(x), -3600) != nullptr &&
       X509_gmtime_adj(X509_getm_notAfter(x), static_cast<long>(lifetime.count())) != nullptr &&
       X509_set_pubkey(x, key) == 1 &&
       X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                  -1, 0) == 1;
  if (!ok) {
    X509_free(x);
    return nullptr;
  }
  return x;
}

std::string ToPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  std::string out;
  if (bio != nullptr && PEM_write_bio_X509(bio, cert) == 1) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    if (n > 0) out.assign(data, static_cast<std::size_t>(n));
  }
  BIO_free(bio);
  return out;
}

}  // namespace

int AddPemCertificates(const std::string& pem, X509_STORE* store) {
  if (pem.empty()) return 0;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    if (store == nullptr || X509_STORE_add_cert(store, cert) == 1) ++added;
    X509_free(cert);
  }
  BIO_free(bio);
  ERR_clear_error();  // the end of the text reads as an error
  return added;
}

LeafCert::~LeafCert() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

SandboxCa::SandboxCa(X509* cert, EVP_PKEY* key, std::vector<std::string> hosts, std::string pem)
    : cert_(cert), key_(key), hosts_(std::move(hosts)), cert_pem_(std::move(pem)) {}

SandboxCa::~SandboxCa() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

Result<std::shared_ptr<SandboxCa>> SandboxCa::Create(const std::string& sandbox,
                                                     std::span<const std::string> hosts) {
  if (hosts.empty() || hosts.size() > kMaxSecretHosts) {
    return Error::InvalidArgument("sandbox CA for " + sandbox + ": 1.." +
                                  std::to_string(kMaxSecretHosts) + " hosts, got " +
                                  std::to_string(hosts.size()));
  }
  std::vector<std::string> names;
  for (const std::string& h : hosts) {
    auto t = TargetFromHost(h, 443);
    if (!t.ok() || t->literal || t->host != h) {
      return Error::InvalidArgument("sandbox CA for " + sandbox + ": \"" + h.substr(0, 80) +
                                    "\" is not a normalised DNS name");
    }
    names.push_back(h);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());

  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) return OpenSslError("make the key");
  // The subject names the sandbox for a person reading a trust store; bounded, printable.
  std::string cn = "agvisor sandbox CA " + sandbox.substr(0, 40);
  for (char& c : cn) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '_';
  }
  X509* cert = NewCertificate(key, cn, kValidity);
  if (cert == nullptr) {
    EVP_PKEY_free(key);
    return OpenSslError("make the certificate");
  }
  std::string permitted = "critical";
  for (const std::string& n : names) permitted += ",permitted;DNS:" + n;
  permitted += ",excluded;IP:0.0.0.0/0.0.0.0,excluded;IP:::/::";
  const bool ok = X509_set_issuer_name(cert, X509_get_subject_name(cert)) == 1 &&
                  AddExtension(cert, cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
                  AddExtension(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign") &&
                  AddExtension(cert, cert, NID_subject_key_identifier, "hash") &&
                  AddExtension(cert, cert, NID_name_constraints, permitted) &&
                  X509_sign(cert, key, EVP_sha256()) > 0;
  if (!ok) {
    X509_free(cert);
    EVP_PKEY_free(key);
    return OpenSslError("build the CA certificate");
  }
  std::string pem = ToPem(cert);
  return std::shared_ptr<SandboxCa>(new SandboxCa(cert, key, std::move(names), std::move(pem)));
}

Result<std::shared_ptr<const LeafCert>> SandboxCa::LeafFor(const std::string& host) const {
  if (std::find(hosts_.begin(), hosts_.end(), host) == hosts_.end()) {
    return Error::PermissionDenied("sandbox CA: not bound to " + host.substr(0, 80));
  }
  const auto now = std::chrono::system_clock::now();
  std::lock_guard lock(mu_);
  if (auto it = leaves_.find(host);
      it != leaves_.end() && it->second->not_after - now > std::chrono::hours(24)) {
    return it->second;
  }
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) return OpenSslError("make a leaf key");
  X509* cert = NewCertificate(key, host, kValidity);
  if (cert == nullptr) {
    EVP_PKEY_free(key);
    return OpenSslError("make a leaf for " + host);
  }
  auto leaf = std::make_shared<LeafCert>(cert, key);
  leaf->not_after = now + kValidity;
  const bool ok = X509_set_issuer_name(cert, X509_get_subject_name(cert_)) == 1 &&
                  AddExtension(cert, cert_, NID_basic_constraints, "critical,CA:FALSE") &&
                  AddExtension(cert, cert_, NID_key_usage, "critical,digitalSignature") &&
                  AddExtension(cert, cert_, NID_ext_key_usage, "serverAuth") &&
                  AddExtension(cert, cert_, NID_subject_alt_name, "DNS:" + host) &&
                  AddExtension(cert, cert_, NID_authority_key_identifier, "keyid:always") &&
                  X509_sign(cert, key_, EVP_sha256()) > 0;
  if (!ok) return OpenSslError("sign a leaf for " + host);
  leaves_[host] = leaf;
  return std::shared_ptr<const LeafCert>(leaf);
}

}  // namespace agvisor::egress
