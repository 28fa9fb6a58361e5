// Error values and Result<T>: how every fallible agvisor function reports failure.
//
// Used by every layer. The convention (docs/error_handling.md): a fallible function returns
// Result<T>; callers branch on Error::code(), never on the message text. The message names the
// operation and the object ("create container agvisor-x: ...") and, where there is one, says what
// to do about it. Exceptions never cross agvisor's APIs (the Python binding maps codes to the
// exceptions the seed raises).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace agvisor {

// A small closed set: callers switch on it.
enum class ErrorCode : std::uint8_t {
  kInvalidArgument,    // the caller passed something malformed or out of range
  kNotFound,           // the named object does not exist
  kConflict,           // the object exists / is in a state that forbids the operation
  kUnavailable,        // a daemon or peer cannot be reached (retry may help)
  kTimeout,            // a deadline passed
  kPermissionDenied,   // authentication or authorisation failed
  kResourceExhausted,  // out of memory, disk, pids, ...
  kUnsupported,        // the host cannot do this (e.g. no disk cap on this runsc)
  kSandboxDied,        // the sandbox ended (OOM, pids, lifetime, killed) under the operation
  kInternal,           // a bug or an impossible state
};

std::string_view ErrorCodeName(ErrorCode code);

// The code an HTTP error status from a daemon's API stands for, where the status alone says it:
// 400/422 kInvalidArgument, 401/403 kPermissionDenied, 404 kNotFound, 409/410 kConflict,
// 429/503 kUnavailable, 504 kTimeout. nullopt for the rest (500 and the like: the caller reads
// the body, or picks its own fallback). Used by the error decoders of docker/ and kube/.
std::optional<ErrorCode> ErrorCodeForHttpStatus(int status);

class Error {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  // Builders: Error::InvalidArgument("limits.cpus: must be > 0, got -1").
  static Error InvalidArgument(std::string m) {
    return {ErrorCode::kInvalidArgument, std::move(m)};
  }
  static Error NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
  static Error Conflict(std::string m) { return {ErrorCode::kConflict, std::move(m)}; }
  static Error Unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
  static Error Timeout(std::string m) { return {ErrorCode::kTimeout, std::move(m)}; }
  static Error PermissionDenied(std::string m) {
    return {ErrorCode::kPermissionDenied, std::move(m)};
  }
  static Error ResourceExhausted(std::string m) {
    return {ErrorCode::kResourceExhausted, std::move(m)};
  }
  static Error Unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
  static Error SandboxDied(std::string m) { return {ErrorCode::kSandboxDied, std::move(m)}; }
  static Error Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }
  // From a failed syscall: "<what>: <strerror(err)>", errno kept; the code follows errno
  // (ENOENT -> kNotFound, EACCES/EPERM -> kPermissionDenied, ENOSPC/ENOMEM -> kResourceExhausted,
  // ECONNREFUSED -> kUnavailable, ...).
  static Error FromErrno(std::string what, int err);

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  int sys_errno() const { return errno_; }
  int http_status() const { return http_status_; }
  Error& set_errno(int e) {
    errno_ = e;
    return *this;
  }
  Error& set_http_status(int s) {
    http_status_ = s;
    return *this;
  }
  // Returns a copy whose message is "<context>: <message>".
  Error WithContext(std::string_view context) const;
  // "kNotFound: message" - for logs and tests.
  std::string ToString() const;

 private:
  ErrorCode code_;
  std::string message_;
  int errno_ = 0;
  int http_status_ = 0;
};

// Result<T>: a T or an Error, shaped like C++23 std::expected<T, Error> (g++ 12 lacks it).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT
  template <typename U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, Result> &&
           !std::is_same_v<std::decay_t<U>, Error> && !std::is_same_v<std::decay_t<U>, T>)
      Result(U&& u)
      : v_(std::in_place_index<0>, T(std::forward<U>(u))) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit on purpose

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  void value() const {}
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

 private:
  Error error_{ErrorCode::kInternal, ""};
  bool ok_ = true;
};

inline Result<void> Ok() { return {}; }

}  // namespace agvisor

// AGVISOR_TRY(expr): evaluates a Result; on error returns the error from the enclosing function,
// else yields the value. A GNU statement expression (g++ and clang both have them).
#define AGVISOR_TRY(expr)                            \
  ({                                                 \
    auto&& agvisor_try_result_ = (expr);             \
    if (!agvisor_try_result_.ok()) {                 \
      return std::move(agvisor_try_result_).error(); \
    }                                                \
    std::move(agvisor_try_result_).value();          \
  })

// AGVISOR_RETURN_IF_ERROR(expr): for Result<void> (or when the value is not needed).
#define AGVISOR_RETURN_IF_ERROR(expr)                \
  do {                                               \
    auto&& agvisor_rie_result_ = (expr);             \
    if (!agvisor_rie_result_.ok()) {                 \
      return std::move(agvisor_rie_result_).error(); \
    }                                                \
  } while (0)
