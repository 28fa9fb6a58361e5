// TlsContext::Create: the client certificate and key are each checked, and named when refused.
#include "agvisor/http/tls.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

namespace agvisor::http::internal {
namespace {

struct KeyAndCert {
  std::string key_pem;
  std::string cert_pem;
};

std::string ToPem(int (*write)(BIO*, void*), void* object) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  EXPECT_EQ(write(bio.get(), object), 1);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

// A fresh EC key and a self-signed certificate for it.
KeyAndCert MakeKeyAndCert() {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("agvisor-test"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  X509_set_pubkey(cert.get(), key.get());
  X509_sign(cert.get(), key.get(), EVP_sha256());
  KeyAndCert out;
  out.key_pem = ToPem(
      [](BIO* b, void* k) {
        return PEM_write_bio_PrivateKey(b, static_cast<EVP_PKEY*>(k), nullptr, nullptr, 0, nullptr,
                                        nullptr);
      },
      key.get());
  out.cert_pem = ToPem([](BIO* b, void* c) { return PEM_write_bio_X509(b, static_cast<X509*>(c)); },
                       cert.get());
  return out;
}

std::string CreateError(const TlsConfig& config) {
  auto ctx = TlsContext::Create(config);
  if (ctx.ok()) return "";
  EXPECT_EQ(ctx.error().code(), ErrorCode::kInvalidArgument);
  return ctx.error().message();
}

TEST(TlsContextTest, TakesAClientCertificateWithItsKey) {
  const KeyAndCert client = MakeKeyAndCert();
  EXPECT_EQ(CreateError({"", client.cert_pem, client.key_pem}), "");
}

TEST(TlsContextTest, NamesWhichOfCertificateAndKeyIsRefused) {
  const KeyAndCert client = MakeKeyAndCert();
  const KeyAndCert other = MakeKeyAndCert();
  EXPECT_NE(CreateError({"", "not pem", client.key_pem})
                .find("the client certificate is not a PEM certificate"),
            std::string::npos);
  EXPECT_NE(CreateError({"", client.cert_pem, "not pem"})
                .find("the client key is not an unencrypted PEM key"),
            std::string::npos);
  // OpenSSL compares a key with the certificate already when it is handed over.
  EXPECT_NE(CreateError({"", client.cert_pem, other.key_pem}).find("the client key "),
            std::string::npos);
  EXPECT_NE(CreateError({"", client.cert_pem, ""}).find("needs its key"), std::string::npos);
}

}  // namespace
}  // namespace agvisor::http::internal
