#include "agvisor/e2b/auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <charconv>

#include "agvisor/api/codec.h"
#include "agvisor/base/strings.h"
#include "agvisor/server/server.h"

namespace agvisor::e2b {

std::string ApiKeyFor(std::string_view daemon_token) {
  return std::string(kApiKeyPrefix) + std::string(daemon_token);
}

bool ApiKeyMatches(std::string_view given, std::string_view daemon_token) {
  if (daemon_token.empty()) return false;
  return server::SecretsEqual(given, ApiKeyFor(daemon_token));
}

std::string EnvdAccessToken(std::string_view secret, std::string_view id,
                            std::string_view instance) {
  std::string message = "envd";
  message += '\0';
  message += id;
  message += '\0';
  message += instance;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(mac), len));
}

bool AccessTokenMatches(std::string_view given, std::string_view expected) {
  if (given.empty() || expected.empty()) return false;
  return server::SecretsEqual(given, expected);
}

std::string FileUrlSignature(std::string_view path, std::string_view operation,
                             std::string_view user, std::string_view access_token,
                             std::optional<std::int64_t> expiration) {
  std::string raw = std::string(path) + ":" + std::string(operation) + ":" + std::string(user) +
                    ":" + std::string(access_token);
  if (expiration) raw += ":" + std::to_string(*expiration);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(raw.data()), raw.size(), digest);
  std::string b64 =
      api::Base64Encode(std::string_view(reinterpret_cast<const char*>(digest), sizeof digest));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "v1_" + b64;
}

Result<void> CheckFileUrlSignature(std::string_view signature, std::string_view expiration,
                                   std::string_view path, std::string_view operation,
                                   std::string_view user, std::string_view access_token,
                                   std::int64_t now_unix) {
  if (signature.empty()) {
    return Error::PermissionDenied(
        "file URL without a signature: send X-Access-Token, or use the URL uploadUrl/downloadUrl "
        "made");
  }
  std::optional<std::int64_t> expires;
  if (!expiration.empty()) {
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(expiration.data(), expiration.data() + expiration.size(), v);
    if (ec != std::errc() || end != expiration.data() + expiration.size()) {
      return Error::InvalidArgument("signature_expiration must be unix seconds");
    }
    expires = v;
  }
  const std::string want = FileUrlSignature(path, operation, user, access_token, expires);
  if (!AccessTokenMatches(signature, want)) {
    return Error::PermissionDenied(
        "the file URL's signature does not match (path, operation "
        "and user as signed, this sandbox's token)");
  }
  if (expires && *expires <= now_unix) {
    return Error::PermissionDenied("the file URL's signature expired");
  }
  return {};
}

}  // namespace agvisor::e2b
