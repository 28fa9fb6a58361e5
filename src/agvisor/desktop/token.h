// Desktop tokens: what a browser hands the desktop gateway to open one sandbox's desktop.
//
// Used by the gateway (gateway.h) to check a viewer, and by whoever mints tokens for pages (the
// CLI's `agvisor desktop token`, agvisord, the Python package). Pure functions: no I/O, the clock
// is a parameter.
//
// The format is the seed's, so tokens its `make_token` minted still verify:
//   token      = base64( JSON {"iv": b64(16 bytes), "value": b64(ciphertext), "mac": b64(32 bytes)}
//   ) ciphertext = AES-256-CBC(enc_key, iv, PKCS#7(plaintext)) mac        = HMAC-SHA256(mac_key, iv
//   || ciphertext)            (encrypt-then-MAC) enc_key    = HMAC-SHA256(secret, "agvisor-enc"),
//   mac_key = HMAC-SHA256(secret, "agvisor-mac") plaintext  = JSON {"expiration": <unix ms>,
//   "connection": {"type": "vnc"|"rdp", "settings": {}}}
// The secret is 32 bytes (64 hex digits in a key file, as `openssl rand -hex 32` writes them).
//
// VerifyToken checks the MAC first, in constant time, and only then decrypts and reads the
// expiry: a tampered token never reaches the decryptor or the JSON parser. Every bad token
// (tampered, truncated, expired, minted with another key, malformed) gets the same error, so a
// caller learns nothing about which check failed.
//
// agvisor's own desktops use type "vnc" with settings naming the sandbox and its VNC password
// (the token is encrypted: the browser never learns the password):
//   {"container": "agvisor-x", "docker_host": "", "port": 5900, "password": "..."}
// The seed's "rdp" tokens verify too; the gateway then refuses them (no RDP server path here).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::desktop {

// Length of the shared secret, in bytes.
inline constexpr std::size_t kTokenKeyBytes = 32;
// Tokens longer than this are refused before any work (a VNC token is ~400 characters).
inline constexpr std::size_t kMaxTokenBytes = 16 * 1024;
// The TTL `agvisor desktop token` uses unless told otherwise: a token only has to be valid when
// a viewer opens the desktop.
inline constexpr std::chrono::seconds kDefaultTokenTtl{60};
// The message of every rejected token.
inline constexpr std::string_view kTokenRejected =
    "desktop token rejected: it is invalid, was minted with another key, or has expired "
    "(mint a fresh one)";

// The 32-byte secret, as raw bytes.
struct TokenKey {
  std::string bytes;
};

// A key from 64 hex digits (surrounding whitespace ignored). Errors: kInvalidArgument (the
// message says what was wrong: length or a non-hex character; it never echoes the key).
Result<TokenKey> ParseTokenKey(std::string_view hex);
// Reads a key file holding 64 hex digits. The file must be owned by this process's user and
// closed to group and others (base/private_file.h). Errors: kInvalidArgument (content),
// kNotFound, kPermissionDenied (the file, its mode or owner: the message gives the chmod/chown
// that fixes it). The message names the file.
Result<TokenKey> ReadTokenKeyFile(const std::string& path);

// What a "vnc" token names: one sandbox's VNC server, reached through its agent channel.
struct VncTarget {
  std::string container;    // "agvisor-x"
  std::string docker_host;  // "" = the local daemon; "ssh://user@host", "unix:///...", ...
  std::uint16_t port = 5900;
  std::string password;  // the VNC password (VNC authentication uses its first 8 bytes)
};

// A verified token's content.
struct TokenPayload {
  std::int64_t expiration_ms = 0;  // unix time in milliseconds
  std::string type;                // "vnc", "rdp", or whatever else a minter wrote
  std::string settings_json;       // the connection's "settings" object, as JSON text
  VncTarget vnc;                   // filled when type == "vnc"
};

// A token for `payload` (type, settings_json and expiration_ms are used; for type "vnc" with an
// empty settings_json, settings are built from `vnc`). Errors: kInvalidArgument (key size,
// settings_json not a JSON object), kInternal (the crypto library failed).
Result<std::string> MintToken(const TokenKey& key, const TokenPayload& payload);
// A "vnc" token for `target`, valid for `ttl` from `now`. Errors: as MintToken.
Result<std::string> MintVncToken(
    const TokenKey& key, const VncTarget& target, std::chrono::seconds ttl,
    std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

// Checks `token` and returns its payload. Accepts the standard and the URL-safe base64
// alphabets, with or without padding. Errors: kPermissionDenied with kTokenRejected for every
// bad token; kInvalidArgument for a key of the wrong size (a caller bug, not a bad token).
Result<TokenPayload> VerifyToken(
    const TokenKey& key, std::string_view token,
    std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

// Base64 (standard alphabet, padded): exposed for the tests and the gateway.
std::string Base64Encode(std::string_view bytes);
// Decodes standard or URL-safe base64, padding optional; nullopt-like failure as kInvalidArgument.
Result<std::string> Base64Decode(std::string_view text);

}  // namespace agvisor::desktop
