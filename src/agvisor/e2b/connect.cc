#include "agvisor/e2b/connect.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cctype>

namespace agvisor::e2b::connect {
namespace json = boost::json;

namespace {

// Each code's wire name and HTTP status (connectrpc.com/docs/protocol, "Error Codes"), by the
// code's number less one.
struct CodeRow {
  std::string_view name;
  int status;
};
constexpr CodeRow kCodeRows[] = {
    {"canceled", 499},
    {"unknown", 500},
    {"invalid_argument", 400},
    {"deadline_exceeded", 504},
    {"not_found", 404},
    {"already_exists", 409},
    {"permission_denied", 403},
    {"resource_exhausted", 429},
    {"failed_precondition", 400},
    {"aborted", 409},
    {"out_of_range", 400},
    {"unimplemented", 501},
    {"internal", 500},
    {"unavailable", 503},
    {"data_loss", 500},
    {"unauthenticated", 401},
};

const CodeRow& RowOf(Code code) {
  auto i = static_cast<std::size_t>(code);
  return i >= 1 && i <= std::size(kCodeRows) ? kCodeRows[i - 1] : kCodeRows[1];  // unknown
}

// agvisor's codes in Connect's words, by ErrorCode's order (error.h).
constexpr Code kFromErrorCode[] = {
    Code::kInvalidArgument,   Code::kNotFound,         Code::kAlreadyExists,
    Code::kUnavailable,       Code::kDeadlineExceeded, Code::kPermissionDenied,
    Code::kResourceExhausted, Code::kUnimplemented,    Code::kUnavailable,
    Code::kInternal,
};
static_assert(std::size(kFromErrorCode) == static_cast<std::size_t>(ErrorCode::kInternal) + 1);

}  // namespace

std::string_view CodeName(Code code) { return RowOf(code).name; }

int HttpStatusFor(Code code) { return RowOf(code).status; }

RpcError FromError(const Error& error) {
  return {kFromErrorCode[static_cast<std::size_t>(error.code())], error.message()};
}

namespace {

json::object ErrorObject(const RpcError& error) {
  json::object o;
  o["code"] = CodeName(error.code);
  o["message"] = error.message;
  return o;
}

// The media type of a Content-Type value: lower-cased, parameters and spaces dropped.
std::string MediaType(std::string_view value) {
  auto semi = value.find(';');
  if (semi != std::string_view::npos) value = value.substr(0, semi);
  std::string out;
  for (char c : value) {
    if (c != ' ' && c != '\t') out.push_back(static_cast<char>(std::tolower(c)));
  }
  return out;
}

bool IsIdentity(std::string_view encoding) {
  return encoding.empty() || MediaType(encoding) == "identity";
}

// 1 to `max_digits` ASCII digits as a number.
std::optional<std::uint64_t> Digits(std::string_view s, std::size_t max_digits) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

void PutLength(std::string& out, std::uint8_t flags, std::size_t n) {
  out.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  }
}

std::uint32_t GetLength(std::string_view header) {
  std::uint32_t n = 0;
  for (std::size_t i = 1; i < kEnvelopeHeaderBytes; ++i) {
    n = (n << 8) | static_cast<unsigned char>(header[i]);
  }
  return n;
}

}  // namespace

std::string ErrorBody(const RpcError& error) { return json::serialize(ErrorObject(error)); }

Result<void> CheckRequestHeaders(CallKind kind, std::string_view content_type,
                                 std::string_view content_encoding,
                                 std::string_view protocol_version) {
  auto want = kind == CallKind::kUnary ? kUnaryContentType : kStreamContentType;
  if (MediaType(content_type) != want) {
    return Error::InvalidArgument("Content-Type: this call takes " + std::string(want) +
                                  " (Connect's JSON form), got \"" +
                                  std::string(content_type.substr(0, 80)) + "\"");
  }
  if (!IsIdentity(content_encoding)) {
    return Error::Unsupported("request compression \"" +
                              std::string(content_encoding.substr(0, 40)) +
                              "\" is not supported: send the body uncompressed");
  }
  if (!protocol_version.empty() && protocol_version != "1") {
    return Error::InvalidArgument("Connect-Protocol-Version: only 1 is supported");
  }
  return {};
}

Result<std::optional<std::chrono::milliseconds>> ParseTimeoutHeader(std::string_view value) {
  if (value.empty()) return std::optional<std::chrono::milliseconds>{};
  auto ms = Digits(value, 10);
  if (!ms) {
    return Error::InvalidArgument("Connect-Timeout-Ms: must be 1 to 10 digits (milliseconds)");
  }
  return std::optional(std::chrono::milliseconds(*ms));
}

Result<std::optional<std::chrono::seconds>> ParseKeepaliveHeader(std::string_view value) {
  if (value.empty()) return std::optional<std::chrono::seconds>{};
  auto s = Digits(value, 10);
  if (!s) return Error::InvalidArgument("Keepalive-Ping-Interval: must be a number of seconds");
  auto v = std::clamp<std::uint64_t>(*s, kMinKeepalive.count(), kMaxKeepalive.count());
  return std::optional(std::chrono::seconds(v));
}

std::string Envelope(std::string_view json) {
  std::string out;
  out.reserve(kEnvelopeHeaderBytes + json.size());
  PutLength(out, 0, json.size());
  out.append(json);
  return out;
}

std::string EndStream(const std::optional<RpcError>& error) {
  json::object o;
  if (error) o["error"] = ErrorObject(*error);
  auto body = json::serialize(o);
  std::string out;
  PutLength(out, kFlagEndStream, body.size());
  out.append(body);
  return out;
}

Result<std::string_view> SingleEnvelope(std::string_view body, std::size_t max_message) {
  if (body.size() < kEnvelopeHeaderBytes) {
    return Error::InvalidArgument("stream request: shorter than an envelope's 5-byte header (" +
                                  std::to_string(body.size()) + " bytes)");
  }
  auto flags = static_cast<std::uint8_t>(body[0]);
  if (flags & kFlagCompressed) {
    return Error::Unsupported("stream request: compressed envelopes are not supported");
  }
  if (flags != 0) {
    return Error::InvalidArgument("stream request: the envelope's flags must be 0, got " +
                                  std::to_string(flags));
  }
  std::uint32_t n = GetLength(body);
  if (n > max_message) {
    return Error::ResourceExhausted("stream request: a message of " + std::to_string(n) +
                                    " bytes is over the limit of " + std::to_string(max_message));
  }
  if (body.size() - kEnvelopeHeaderBytes != n) {
    return Error::InvalidArgument("stream request: the envelope says " + std::to_string(n) +
                                  " bytes, the body has " +
                                  std::to_string(body.size() - kEnvelopeHeaderBytes) +
                                  " after the header (one message is expected)");
  }
  return body.substr(kEnvelopeHeaderBytes);
}

Result<std::optional<EnvelopeReader::Message>> EnvelopeReader::Next() {
  if (failed_) return *failed_;
  std::string_view rest(buffer_);
  rest.remove_prefix(offset_);
  if (rest.size() < kEnvelopeHeaderBytes) return std::optional<Message>{};
  auto flags = static_cast<std::uint8_t>(rest[0]);
  if (flags & ~(kFlagCompressed | kFlagEndStream)) {
    failed_ = Error::InvalidArgument("envelope: unknown flag bits " + std::to_string(flags));
    return *failed_;
  }
  std::uint32_t n = GetLength(rest);
  if (n > max_message_) {
    failed_ =
        Error::ResourceExhausted("envelope: a message of " + std::to_string(n) +
                                 " bytes is over the limit of " + std::to_string(max_message_));
    return *failed_;
  }
  if (rest.size() - kEnvelopeHeaderBytes < n) return std::optional<Message>{};
  Message m{flags, std::string(rest.substr(kEnvelopeHeaderBytes, n))};
  offset_ += kEnvelopeHeaderBytes + n;
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  return std::optional(std::move(m));
}

}  // namespace agvisor::e2b::connect
