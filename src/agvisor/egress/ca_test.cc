// The sandbox CA checked the way a sandbox's client checks it: OpenSSL's chain verification with
// the CA as the only trust anchor and the host name to match.
#include "agvisor/egress/ca.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace agvisor::egress {

// Signs a leaf for any name with the CA's key: what a misused key could make.
class SandboxCaTestPeer {
 public:
  static X509* SignAnyName(const SandboxCa& ca, const std::string& san) {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 7);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, key);
    X509_set_issuer_name(x, X509_get_subject_name(ca.cert_));
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, ca.cert_, x, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, san.c_str());
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    X509_sign(x, ca.key_, EVP_sha256());
    EVP_PKEY_free(key);
    return x;
  }
};

namespace {

X509* FromPem(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return x;
}

// X509_V_OK or the verification error, for `leaf` checked as `host` against `ca_pem` alone.
int Verify(const std::string& ca_pem, X509* leaf, const std::string& host) {
  X509_STORE* store = X509_STORE_new();
  X509* ca = FromPem(ca_pem);
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  const int ok = X509_verify_cert(ctx);
  const int err = ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  X509_free(ca);
  return err;
}

TEST(SandboxCaTest, LeafForABoundHostVerifies) {
  auto ca = SandboxCa::Create("sb-1", std::vector<std::string>{"api.test", "git.test"});
  ASSERT_TRUE(ca.ok()) << ca.error().ToString();
  EXPECT_NE((*ca)->cert_pem().find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_EQ((*ca)->cert_pem().find("PRIVATE KEY"), std::string::npos);
  auto leaf = (*ca)->LeafFor("api.test");
  ASSERT_TRUE(leaf.ok()) << leaf.error().ToString();
  EXPECT_EQ(Verify((*ca)->cert_pem(), (*leaf)->cert(), "api.test"), X509_V_OK);
  // Kept: the same leaf next time.
  EXPECT_EQ((*ca)->LeafFor("api.test")->get(), leaf->get());
  // The leaf names api.test only.
  EXPECT_EQ(Verify((*ca)->cert_pem(), (*leaf)->cert(), "git.test"), X509_V_ERR_HOSTNAME_MISMATCH);
}

TEST(SandboxCaTest, NoLeafForAnUnboundHost) {
  auto ca = SandboxCa::Create("sb-1", std::vector<std::string>{"api.test"});
  ASSERT_TRUE(ca.ok());
  auto leaf = (*ca)->LeafFor("evil.test");
  ASSERT_FALSE(leaf.ok());
  EXPECT_EQ(leaf.error().code(), ErrorCode::kPermissionDenied);
}

// Name constraints: even the CA's own key cannot make a certificate a client accepts for a
// name it was not made for, nor for an IP address.
TEST(SandboxCaTest, CannotVouchForAnotherName) {
  auto ca = SandboxCa::Create("sb-1", std::vector<std::string>{"api.test"});
  ASSERT_TRUE(ca.ok());
  std::unique_ptr<X509, decltype(&X509_free)> evil(
      SandboxCaTestPeer::SignAnyName(**ca, "DNS:evil.test"), X509_free);
  EXPECT_EQ(Verify((*ca)->cert_pem(), evil.get(), "evil.test"), X509_V_ERR_PERMITTED_VIOLATION);
  std::unique_ptr<X509, decltype(&X509_free)> ip(
      SandboxCaTestPeer::SignAnyName(**ca, "DNS:api.test,IP:192.0.2.1"), X509_free);
  EXPECT_EQ(Verify((*ca)->cert_pem(), ip.get(), "api.test"), X509_V_ERR_EXCLUDED_VIOLATION);
  // The same key signing the bound name passes (so the refusals above are the constraints').
  std::unique_ptr<X509, decltype(&X509_free)> good(
      SandboxCaTestPeer::SignAnyName(**ca, "DNS:api.test"), X509_free);
  EXPECT_EQ(Verify((*ca)->cert_pem(), good.get(), "api.test"), X509_V_OK);
}

TEST(SandboxCaTest, RefusesBadHosts) {
  EXPECT_FALSE(SandboxCa::Create("sb", std::vector<std::string>{}).ok());
  EXPECT_FALSE(SandboxCa::Create("sb", std::vector<std::string>{"API.test"}).ok());
  EXPECT_FALSE(SandboxCa::Create("sb", std::vector<std::string>{"192.0.2.1"}).ok());
}

}  // namespace
}  // namespace agvisor::egress
