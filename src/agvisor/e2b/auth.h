// The E2B door's credentials (docs/e2b.md, "The key"; docs/security.md):
// - the API key (`X-API-Key`, E2B_API_KEY): "e2b_" followed by agvisord's bearer token (64 hex
//   digits), the form the SDK's own key check expects. Whoever holds the daemon's token file
//   holds the key; there is no second secret to lose.
// - a sandbox's envd access token (`X-Access-Token`, the create response's envdAccessToken):
//   derived, never stored: hex(HMAC-SHA256(daemon secret, "envd" NUL id NUL instance)), where
//   `instance` is what makes this sandbox differ from a later one reusing its id (its container
//   id). It survives an agvisord restart, and one sandbox's token opens no other.
// - signed file URLs (`uploadUrl`/`downloadUrl`): "v1_" + base64(sha256(path:operation:user:
//   token[:expiration])) without '=' padding, as the SDK computes them, with an expiry in unix
//   seconds.
// Every comparison runs in constant time (server::SecretsEqual).
//
// Used by e2b/mount.cc (every E2B route) and envd's HTTP file routes. Unit-tested in
// auth_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::e2b {

inline constexpr std::string_view kApiKeyPrefix = "e2b_";

// The API key agvisord accepts: "e2b_" + its bearer token.
std::string ApiKeyFor(std::string_view daemon_token);
// Whether `given` (the X-API-Key header) is that key. False for an empty daemon token.
bool ApiKeyMatches(std::string_view given, std::string_view daemon_token);

// The envd access token of the sandbox `id` whose instance is `instance` (64 hex digits).
std::string EnvdAccessToken(std::string_view secret, std::string_view id,
                            std::string_view instance);
// Whether `given` is `expected` (both tokens), in constant time; false when either is empty.
bool AccessTokenMatches(std::string_view given, std::string_view expected);

// The signature of a file URL as the SDK makes it (see above); `expiration` nullopt: none.
std::string FileUrlSignature(std::string_view path, std::string_view operation,
                             std::string_view user, std::string_view access_token,
                             std::optional<std::int64_t> expiration);

// Checks a signed file URL's query parameters: `signature` must be FileUrlSignature of `path`,
// `operation` ("read" for GET /files, "write" for POST), `user` and the sandbox's
// `access_token`, and `expiration` (the `signature_expiration` parameter, "" = none) must be a
// time after `now_unix`. Errors: kPermissionDenied (no or a wrong signature, an expired one; the
// message says which), kInvalidArgument (an expiration that is not a number).
Result<void> CheckFileUrlSignature(std::string_view signature, std::string_view expiration,
                                   std::string_view path, std::string_view operation,
                                   std::string_view user, std::string_view access_token,
                                   std::int64_t now_unix);

}  // namespace agvisor::e2b
