// The Connect protocol (connectrpc.com/docs/protocol) in its JSON form, as the E2B SDK speaks it
// to envd (`useBinaryFormat: false`): pure functions, no I/O. Used by envd.cc, which reads the
// request and writes these bytes through the server's stream.
//
// Unary calls are a POST of `application/json` answered by one JSON body (200) or by an error
// body {"code","message"} with the HTTP status of its code. Server streams are a POST of
// `application/connect+json` whose body is ONE envelope (1 flag byte, a 4-byte big-endian
// length, the JSON message), answered by 200 and envelopes, the last one flagged kEndStream
// carrying {"error":{...}} or {} (an error on a stream is always in that last envelope: the SDK
// maps a non-200 status of a stream to a coarse code).
//
// Everything here reads bytes a hostile caller chose: lengths are bounded before anything is
// allocated, and every refusal is a value naming what was wrong.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::e2b::connect {

// Connect's error codes (the gRPC set), by the numbers the SDK's `Code` enum uses.
enum class Code : std::uint8_t {
  kCanceled = 1,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
  kUnauthenticated,  // 16
};

// "not_found", "invalid_argument", ... (the wire name of a code).
std::string_view CodeName(Code code);
// The HTTP status of a unary error with `code` (Connect's table: not_found 404, unavailable 503,
// unauthenticated 401, canceled 499, ...).
int HttpStatusFor(Code code);

// An error as a Connect call reports it.
struct RpcError {
  Code code = Code::kUnknown;
  std::string message;
};
// agvisor's error codes in Connect's words: kInvalidArgument invalid_argument, kNotFound
// not_found, kConflict already_exists, kPermissionDenied permission_denied, kTimeout
// deadline_exceeded, kResourceExhausted resource_exhausted, kUnsupported unimplemented,
// kUnavailable and kSandboxDied unavailable (the SDK then says the sandbox is gone), kInternal
// internal.
RpcError FromError(const Error& error);

// {"code":"not_found","message":"..."}: the body of a unary error.
std::string ErrorBody(const RpcError& error);

// The request kinds a route can be, and their content types.
enum class CallKind { kUnary, kServerStream };
inline constexpr std::string_view kUnaryContentType = "application/json";
inline constexpr std::string_view kStreamContentType = "application/connect+json";

// Checks a request's headers for a call of `kind`: the content type (parameters such as
// "; charset=utf-8" allowed), no compression (`Content-Encoding` / `Connect-Content-Encoding`
// other than identity), and `Connect-Protocol-Version` 1 when present. Errors:
// kInvalidArgument (says what was expected), kUnsupported (a compressed request).
Result<void> CheckRequestHeaders(CallKind kind, std::string_view content_type,
                                 std::string_view content_encoding,
                                 std::string_view protocol_version);

// The deadline a client asks for (`Connect-Timeout-Ms`: 1 to 10 ASCII digits); nullopt when the
// header is absent (""). Errors: kInvalidArgument.
Result<std::optional<std::chrono::milliseconds>> ParseTimeoutHeader(std::string_view value);
// The keep-alive interval a client asks for (`Keepalive-Ping-Interval`, in seconds as E2B sends
// it), clamped to [kMinKeepalive, kMaxKeepalive]; nullopt when absent. Errors: kInvalidArgument.
inline constexpr std::chrono::seconds kMinKeepalive{1};
inline constexpr std::chrono::seconds kMaxKeepalive{300};
Result<std::optional<std::chrono::seconds>> ParseKeepaliveHeader(std::string_view value);

// ---- Envelopes ----
inline constexpr std::uint8_t kFlagCompressed = 0x01;
inline constexpr std::uint8_t kFlagEndStream = 0x02;
inline constexpr std::size_t kEnvelopeHeaderBytes = 5;

// One message as an envelope (flag 0).
std::string Envelope(std::string_view json);
// The end-of-stream envelope: {} on success, {"error":{"code","message"}} otherwise.
std::string EndStream(const std::optional<RpcError>& error);

// The one message of a server stream's request body, which must be exactly one envelope with
// flag 0 and a length of at most `max_message` (checked before any copy). Errors:
// kInvalidArgument (short, a length that disagrees with the body, trailing bytes, end-stream),
// kUnsupported (compressed), kResourceExhausted (longer than max_message).
Result<std::string_view> SingleEnvelope(std::string_view body, std::size_t max_message);

// Envelopes read incrementally from a byte stream (a client stream, tests): Feed bytes, then
// Next until it yields nullopt (more bytes needed). Bounded: a declared length over max_message
// fails at once, before its bytes arrive.
class EnvelopeReader {
 public:
  explicit EnvelopeReader(std::size_t max_message) : max_message_(max_message) {}
  struct Message {
    std::uint8_t flags = 0;
    std::string data;
  };
  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // Errors: kResourceExhausted (a length over max_message), kInvalidArgument (flag bits other
  // than compressed and end-stream). After an error the reader stays failed.
  Result<std::optional<Message>> Next();
  // Bytes fed and not yet part of a whole envelope.
  std::size_t pending() const { return buffer_.size() - offset_; }

 private:
  std::size_t max_message_;
  std::string buffer_;
  std::size_t offset_ = 0;
  std::optional<Error> failed_;
};

}  // namespace agvisor::e2b::connect
