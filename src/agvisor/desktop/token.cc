#include "agvisor/desktop/token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <boost/json.hpp>
#include <cctype>
#include <cerrno>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "agvisor/base/private_file.h"

namespace agvisor::desktop {
namespace {

namespace json = boost::json;

constexpr std::size_t kIvBytes = 16;
constexpr std::size_t kMacBytes = 32;
constexpr std::string_view kEncLabel = "agvisor-enc";
constexpr std::string_view kMacLabel = "agvisor-mac";

Error Rejected() { return Error::PermissionDenied(std::string(kTokenRejected)); }

Result<void> CheckKey(const TokenKey& key) {
  if (key.bytes.size() != kTokenKeyBytes) {
    return Error::InvalidArgument("desktop token key: must be 32 bytes, got " +
                                  std::to_string(key.bytes.size()));
  }
  return Ok();
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  return std::string(reinterpret_cast<const char*>(out.data()), len);
}

struct DerivedKeys {
  std::string enc;
  std::string mac;
};
DerivedKeys Derive(const TokenKey& key) {
  return {HmacSha256(key.bytes, kEncLabel), HmacSha256(key.bytes, kMacLabel)};
}

// AES-256-CBC with PKCS#7 padding, either way. nullopt-like: returns false on failure.
bool AesCbc(bool encrypt, std::string_view key, std::string_view iv, std::string_view in,
            std::string& out) {
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx(EVP_CIPHER_CTX_new(),
                                                                      EVP_CIPHER_CTX_free);
  if (!ctx) return false;
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  const auto* v = reinterpret_cast<const unsigned char*>(iv.data());
  if (EVP_CipherInit_ex(ctx.get(), EVP_aes_256_cbc(), nullptr, k, v, encrypt ? 1 : 0) != 1) {
    return false;
  }
  out.resize(in.size() + 16);
  int n1 = 0;
  int n2 = 0;
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  if (EVP_CipherUpdate(ctx.get(), o, &n1, reinterpret_cast<const unsigned char*>(in.data()),
                       static_cast<int>(in.size())) != 1) {
    return false;
  }
  if (EVP_CipherFinal_ex(ctx.get(), o + n1, &n2) != 1) return false;
  out.resize(static_cast<std::size_t>(n1 + n2));
  return true;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

const json::string* StringField(const json::object& o, std::string_view name) {
  const json::value* v = o.if_contains(name);
  return v ? v->if_string() : nullptr;
}

// The integer value of a JSON number (integers only; the seed writes an int).
std::optional<std::int64_t> IntegerOf(const json::value& v) {
  if (const auto* i = v.if_int64()) return *i;
  if (const auto* u = v.if_uint64()) {
    if (*u <= static_cast<std::uint64_t>(INT64_MAX)) return static_cast<std::int64_t>(*u);
  }
  return std::nullopt;
}

Result<VncTarget> ParseVncSettings(const json::object& s) {
  VncTarget t;
  const auto* container = StringField(s, "container");
  if (!container || container->empty()) {
    return Error::InvalidArgument("desktop token: vnc settings lack \"container\"");
  }
  t.container = std::string(*container);
  if (const auto* host = StringField(s, "docker_host")) t.docker_host = std::string(*host);
  const auto* password = StringField(s, "password");
  if (!password) return Error::InvalidArgument("desktop token: vnc settings lack \"password\"");
  t.password = std::string(*password);
  if (const json::value* p = s.if_contains("port")) {
    std::optional<std::int64_t> port;
    if (const auto* str = p->if_string()) {
      std::int64_t v = 0;
      bool digits = !str->empty() && str->size() <= 5;
      for (char c : *str) {
        if (c < '0' || c > '9') digits = false;
        v = v * 10 + (c - '0');
      }
      if (digits) port = v;
    } else {
      port = IntegerOf(*p);
    }
    if (!port || *port < 1 || *port > 65535) {
      return Error::InvalidArgument("desktop token: vnc settings have a bad \"port\"");
    }
    t.port = static_cast<std::uint16_t>(*port);
  }
  return t;
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                      static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                      static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) n |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return Error::InvalidArgument("base64: bad length");
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    int v = Base64Value(c);
    if (v < 0) return Error::InvalidArgument("base64: a character outside the alphabet");
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

Result<TokenKey> ParseTokenKey(std::string_view hex) {
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.front()))) {
    hex.remove_prefix(1);
  }
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.back()))) {
    hex.remove_suffix(1);
  }
  if (hex.size() != 2 * kTokenKeyBytes) {
    return Error::InvalidArgument(
        "desktop token key: expected 64 hex digits (32 bytes, e.g. "
        "from `openssl rand -hex 32`), got " +
        std::to_string(hex.size()) + " characters");
  }
  TokenKey key;
  key.bytes.resize(kTokenKeyBytes);
  for (std::size_t i = 0; i < kTokenKeyBytes; ++i) {
    int hi = HexDigit(hex[2 * i]);
    int lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return Error::InvalidArgument(
          "desktop token key: a character that is not a hex digit at "
          "position " +
          std::to_string(hi < 0 ? 2 * i : 2 * i + 1));
    }
    key.bytes[i] = static_cast<char>(hi << 4 | lo);
  }
  return key;
}

Result<TokenKey> ReadTokenKeyFile(const std::string& path) {
  // Only a file no other user can read or replace (base/private_file.h).
  auto text = AGVISOR_TRY(ReadPrivateFile(path, "desktop token key file"));
  auto key = ParseTokenKey(text);
  if (!key.ok()) return key.error().WithContext(path);
  return key;
}

Result<std::string> MintToken(const TokenKey& key, const TokenPayload& payload) {
  AGVISOR_RETURN_IF_ERROR(CheckKey(key));
  json::value settings;
  if (!payload.settings_json.empty()) {
    std::error_code ec;
    settings = json::parse(payload.settings_json, ec);
    if (ec || !settings.is_object()) {
      return Error::InvalidArgument("desktop token: settings must be a JSON object");
    }
  } else if (payload.type == "vnc") {
    settings = json::object{{"container", payload.vnc.container},
                            {"docker_host", payload.vnc.docker_host},
                            {"port", payload.vnc.port},
                            {"password", payload.vnc.password}};
  } else {
    settings = json::object{};
  }
  json::object plain{{"expiration", payload.expiration_ms},
                     {"connection", json::object{{"type", payload.type}, {"settings", settings}}}};
  const std::string msg = json::serialize(plain);

  const DerivedKeys keys = Derive(key);
  std::string iv(kIvBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(iv.data()), static_cast<int>(iv.size())) != 1) {
    return Error::Internal("desktop token: no random bytes for the IV");
  }
  std::string ct;
  if (!AesCbc(true, keys.enc, iv, msg, ct)) return Error::Internal("desktop token: AES failed");
  const std::string mac = HmacSha256(keys.mac, iv + ct);
  json::object env{
      {"iv", Base64Encode(iv)}, {"value", Base64Encode(ct)}, {"mac", Base64Encode(mac)}};
  return Base64Encode(json::serialize(env));
}

Result<std::string> MintVncToken(const TokenKey& key, const VncTarget& target,
                                 std::chrono::seconds ttl,
                                 std::chrono::system_clock::time_point now) {
  if (ttl.count() <= 0) {
    return Error::InvalidArgument("desktop token: ttl must be > 0 seconds, got " +
                                  std::to_string(ttl.count()));
  }
  if (target.container.empty()) return Error::InvalidArgument("desktop token: no container");
  TokenPayload p;
  p.type = "vnc";
  p.vnc = target;
  p.expiration_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>((now + ttl).time_since_epoch()).count();
  return MintToken(key, p);
}

Result<TokenPayload> VerifyToken(const TokenKey& key, std::string_view token,
                                 std::chrono::system_clock::time_point now) {
  AGVISOR_RETURN_IF_ERROR(CheckKey(key));
  if (token.empty() || token.size() > kMaxTokenBytes) return Rejected();
  auto outer = Base64Decode(token);
  if (!outer.ok()) return Rejected();
  std::error_code ec;
  json::value env = json::parse(*outer, ec);
  if (ec || !env.is_object()) return Rejected();
  const auto* iv_b64 = StringField(env.as_object(), "iv");
  const auto* value_b64 = StringField(env.as_object(), "value");
  const auto* mac_b64 = StringField(env.as_object(), "mac");
  if (!iv_b64 || !value_b64 || !mac_b64) return Rejected();
  auto iv = Base64Decode(*iv_b64);
  auto ct = Base64Decode(*value_b64);
  auto mac = Base64Decode(*mac_b64);
  if (!iv.ok() || !ct.ok() || !mac.ok()) return Rejected();
  if (iv->size() != kIvBytes || mac->size() != kMacBytes || ct->empty() || ct->size() % 16 != 0) {
    return Rejected();
  }
  // The MAC first, in constant time: nothing an attacker made reaches AES or the JSON parser.
  const DerivedKeys keys = Derive(key);
  const std::string expected = HmacSha256(keys.mac, *iv + *ct);
  if (CRYPTO_memcmp(expected.data(), mac->data(), kMacBytes) != 0) return Rejected();

  std::string plain;
  if (!AesCbc(false, keys.enc, *iv, *ct, plain)) return Rejected();
  json::value msg = json::parse(plain, ec);
  if (ec || !msg.is_object()) return Rejected();
  const json::value* exp = msg.as_object().if_contains("expiration");
  std::optional<std::int64_t> expiration = exp ? IntegerOf(*exp) : std::nullopt;
  if (!expiration) return Rejected();
  const std::int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  if (now_ms >= *expiration) return Rejected();

  const json::value* conn = msg.as_object().if_contains("connection");
  if (!conn || !conn->is_object()) return Rejected();
  const auto* type = StringField(conn->as_object(), "type");
  const json::value* settings = conn->as_object().if_contains("settings");
  if (!type || !settings || !settings->is_object()) return Rejected();

  TokenPayload p;
  p.expiration_ms = *expiration;
  p.type = std::string(*type);
  p.settings_json = json::serialize(*settings);
  if (p.type == "vnc") p.vnc = AGVISOR_TRY(ParseVncSettings(settings->as_object()));
  return p;
}

}  // namespace agvisor::desktop
