#include "agvisor/base/error.h"

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <span>

namespace agvisor {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "kInvalidArgument";
    case ErrorCode::kNotFound:
      return "kNotFound";
    case ErrorCode::kConflict:
      return "kConflict";
    case ErrorCode::kUnavailable:
      return "kUnavailable";
    case ErrorCode::kTimeout:
      return "kTimeout";
    case ErrorCode::kPermissionDenied:
      return "kPermissionDenied";
    case ErrorCode::kResourceExhausted:
      return "kResourceExhausted";
    case ErrorCode::kUnsupported:
      return "kUnsupported";
    case ErrorCode::kSandboxDied:
      return "kSandboxDied";
    case ErrorCode::kInternal:
      return "kInternal";
  }
  return "kUnknown";
}

namespace {
// Numbers (errno values, HTTP statuses) grouped by the code they stand for.
struct CodeGroup {
  ErrorCode code;
  std::initializer_list<int> values;
};

std::optional<ErrorCode> CodeOf(std::span<const CodeGroup> groups, int value) {
  for (const auto& group : groups) {
    for (int v : group.values) {
      if (v == value) return group.code;
    }
  }
  return std::nullopt;
}

// The code of each errno a failing call is reported with; any other is kInternal.
const CodeGroup kErrnoGroups[] = {
    {ErrorCode::kNotFound, {ENOENT, ESRCH}},
    {ErrorCode::kConflict, {EEXIST, EBUSY}},
    {ErrorCode::kPermissionDenied, {EACCES, EPERM}},
    {ErrorCode::kResourceExhausted, {ENOSPC, ENOMEM, EMFILE, ENFILE, EDQUOT, EAGAIN}},
    {ErrorCode::kUnavailable,
     {ECONNREFUSED, ECONNRESET, EPIPE, ENOTCONN, EHOSTUNREACH, ENETUNREACH, ECONNABORTED}},
    {ErrorCode::kTimeout, {ETIMEDOUT}},
    {ErrorCode::kInvalidArgument, {EINVAL, ENAMETOOLONG, ENOTDIR, EISDIR}},
    {ErrorCode::kUnsupported, {ENOSYS, EOPNOTSUPP}},
};

// The HTTP statuses that say a code by themselves (ErrorCodeForHttpStatus).
const CodeGroup kHttpStatusGroups[] = {
    {ErrorCode::kInvalidArgument, {400, 422}},
    {ErrorCode::kPermissionDenied, {401, 403}},
    {ErrorCode::kNotFound, {404}},
    {ErrorCode::kConflict, {409, 410}},
    {ErrorCode::kUnavailable, {429, 503}},
    {ErrorCode::kTimeout, {504}},
};

ErrorCode CodeForErrno(int err) { return CodeOf(kErrnoGroups, err).value_or(ErrorCode::kInternal); }
}  // namespace

std::optional<ErrorCode> ErrorCodeForHttpStatus(int status) {
  return CodeOf(kHttpStatusGroups, status);
}

Error Error::FromErrno(std::string what, int err) {
  Error e(CodeForErrno(err), what + ": " + std::strerror(err));
  e.set_errno(err);
  return e;
}

Error Error::WithContext(std::string_view context) const {
  Error e = *this;
  e.message_ = std::string(context) + ": " + message_;
  return e;
}

std::string Error::ToString() const { return std::string(ErrorCodeName(code_)) + ": " + message_; }

}  // namespace agvisor
