#include "agvisor/desktop/rfb.h"

#include <cstring>
#include <optional>

#include "agvisor/desktop/vnc.h"

namespace agvisor::vnc {
namespace {

constexpr std::size_t kVersionBytes = 12;
constexpr std::uint8_t kSecurityNone = 1;
constexpr std::uint8_t kSecurityVncAuth = 2;
// Longest failure reason we accept from a server (a safety bound, not a protocol limit).
constexpr std::uint32_t kMaxReason = 4096;

std::uint32_t ReadU32(std::string_view b) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(b[0])) << 24 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b[1])) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b[2])) << 8 |
         static_cast<unsigned char>(b[3]);
}

// Takes a big-endian u32 off the front of `buf`; nullopt while fewer than 4 bytes have come.
std::optional<std::uint32_t> TakeU32(std::string& buf) {
  if (buf.size() < 4) return std::nullopt;
  const std::uint32_t v = ReadU32(buf);
  buf.erase(0, 4);
  return v;
}

std::string U32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// "RFB 003.008\n" -> minor version 8; -1 when it is not an RFB 3.x greeting.
int ParseVersion(std::string_view v) {
  if (v.size() != kVersionBytes || v.substr(0, 4) != "RFB " || v[7] != '.' || v[11] != '\n') {
    return -1;
  }
  int major = 0;
  int minor = 0;
  for (int i = 4; i < 7; ++i) {
    if (v[i] < '0' || v[i] > '9') return -1;
    major = major * 10 + (v[i] - '0');
  }
  for (int i = 8; i < 11; ++i) {
    if (v[i] < '0' || v[i] > '9') return -1;
    minor = minor * 10 + (v[i] - '0');
  }
  if (major != 3) return -1;
  return minor;
}

std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 200)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

// Takes the peer's ProtocolVersion off the front of `buf`: its minor version (3 or more), or
// nullopt while fewer than 12 bytes have come. `peer` names the other side in the error (kind
// `code`) for a greeting that is not RFB 3.x.
Result<std::optional<int>> TakeVersion(std::string& buf, std::string_view peer, ErrorCode code) {
  if (buf.size() < kVersionBytes) return std::optional<int>();
  const int minor = ParseVersion(std::string_view(buf).substr(0, kVersionBytes));
  if (minor < 3) {
    return Error(code, std::string(peer) + " does not speak RFB 3.x (it sent \"" +
                           Printable(buf.substr(0, kVersionBytes)) + "\")");
  }
  buf.erase(0, kVersionBytes);
  return std::optional<int>(minor);
}
}  // namespace

Result<RfbStep> RfbHandshake::Feed(std::string_view bytes) {
  buf_.append(bytes);
  RfbStep step;
  while (AGVISOR_TRY(Advance(step))) {
  }
  return step;
}

Result<bool> RfbClientHandshake::Advance(RfbStep& step) {
  switch (state_) {
    case State::kVersion: {
      if (buf_.size() >= kVersionBytes) server_version_ = buf_.substr(0, kVersionBytes - 1);
      const auto version = AGVISOR_TRY(TakeVersion(buf_, "VNC server", ErrorCode::kUnsupported));
      if (!version) return false;
      const int minor = *version;
      // 3.4-3.6 are 3.3 in disguise (RFC 6143 appendix A); anything past 3.8 speaks 3.8.
      minor_ = minor >= 8 ? 8 : minor == 7 ? 7 : 3;
      step.send += minor_ == 8 ? "RFB 003.008\n" : minor_ == 7 ? "RFB 003.007\n" : "RFB 003.003\n";
      state_ = minor_ == 3 ? State::kType33 : State::kTypes;
      return true;
    }
    case State::kTypes: {
      if (buf_.empty()) return false;
      const std::size_t n = static_cast<unsigned char>(buf_[0]);
      if (n == 0) {
        state_ = State::kReason;
        buf_.erase(0, 1);
        return true;
      }
      if (buf_.size() < 1 + n) return false;
      bool has_none = false;
      bool has_vnc = false;
      std::string offered;
      for (std::size_t i = 0; i < n; ++i) {
        const auto t = static_cast<std::uint8_t>(buf_[1 + i]);
        offered_types_.push_back(t);
        has_none |= t == kSecurityNone;
        has_vnc |= t == kSecurityVncAuth;
        offered += (offered.empty() ? "" : ", ") + std::to_string(t);
      }
      buf_.erase(0, 1 + n);
      if (!has_vnc && !has_none) {
        return Error::Unsupported(
            "VNC server offers no security type agvisor can answer (offered " + offered +
            "; it needs 2 = VNC authentication)");
      }
      security_type_ = has_vnc ? kSecurityVncAuth : kSecurityNone;
      step.send += static_cast<char>(security_type_);
      if (security_type_ == kSecurityVncAuth) {
        state_ = State::kChallenge;
      } else if (minor_ == 8) {
        state_ = State::kResult;
      } else {
        state_ = State::kDone;
      }
      return true;
    }
    case State::kType33: {
      const auto type = TakeU32(buf_);
      if (!type) return false;
      const std::uint32_t t = *type;
      if (t != 0 && t < 256) offered_types_.push_back(static_cast<std::uint8_t>(t));
      if (t == 0) {
        state_ = State::kReason;
      } else if (t == kSecurityVncAuth) {
        security_type_ = kSecurityVncAuth;
        state_ = State::kChallenge;
      } else if (t == kSecurityNone) {
        security_type_ = kSecurityNone;
        state_ = State::kDone;
      } else {
        return Error::Unsupported("VNC server (RFB 3.3) wants security type " + std::to_string(t) +
                                  "; agvisor answers only 1 and 2");
      }
      return true;
    }
    case State::kChallenge: {
      if (buf_.size() < 16) return false;
      std::array<std::uint8_t, 16> challenge;
      std::memcpy(challenge.data(), buf_.data(), 16);
      buf_.erase(0, 16);
      const auto response = VncAuthResponse(password_, challenge);
      step.send.append(reinterpret_cast<const char*>(response.data()), response.size());
      state_ = State::kResult;
      return true;
    }
    case State::kResult: {
      const auto result = TakeU32(buf_);
      if (!result) return false;
      if (*result == 0) {
        state_ = State::kDone;
        return true;
      }
      if (minor_ == 8) {
        state_ = State::kReason;
        return true;
      }
      return Error::PermissionDenied("VNC server refused the desktop's password");
    }
    case State::kReason: {
      if (buf_.size() < 4) return false;
      const std::uint32_t len = ReadU32(buf_);
      if (len > kMaxReason) {
        return Error::InvalidArgument("VNC server: a failure reason of " + std::to_string(len) +
                                      " bytes");
      }
      if (buf_.size() < 4 + len) return false;
      const std::string reason = Printable(buf_.substr(4, len));
      return security_type_ == kSecurityVncAuth
                 ? Error::PermissionDenied("VNC server refused the desktop's password: " + reason)
                 : Error::Unavailable("VNC server refused the connection: " + reason);
    }
    case State::kDone:
      break;
  }
  step.done = true;
  return false;
}

Result<bool> RfbServerHandshake::Advance(RfbStep& step) {
  switch (state_) {
    case State::kVersion: {
      const auto version = AGVISOR_TRY(TakeVersion(buf_, "viewer", ErrorCode::kInvalidArgument));
      if (!version) return false;
      const int minor = *version;
      if (minor >= 7) {
        step.send += std::string("\x01\x01", 2);  // one type: None
        state_ = State::kChoice;
        // 3.7 has no SecurityResult after None; 3.8 does (sent once the choice arrives).
        minor_ = minor >= 8 ? 8 : 7;
      } else {
        step.send += U32(kSecurityNone);  // 3.3: the server decides
        state_ = State::kDone;
      }
      return true;
    }
    case State::kChoice: {
      if (buf_.empty()) return false;
      const auto choice = static_cast<std::uint8_t>(buf_[0]);
      buf_.erase(0, 1);
      if (choice != kSecurityNone) {
        return Error::InvalidArgument("viewer chose security type " + std::to_string(choice) +
                                      "; the gateway offers only 1 (None)");
      }
      if (minor_ == 8) step.send += U32(0);  // SecurityResult OK
      state_ = State::kDone;
      return true;
    }
    case State::kDone:
      break;
  }
  step.done = true;
  return false;
}

}  // namespace agvisor::vnc
