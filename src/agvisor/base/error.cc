#include "agvisor/base/error.h"

#include <cerrno>
#include <cstring>
#include <initializer_list>

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
// The code of each errno a failing call is reported with; any other is kInternal.
struct ErrnoGroup {
  ErrorCode code;
  std::initializer_list<int> errnos;
};
const ErrnoGroup kErrnoGroups[] = {
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

ErrorCode CodeForErrno(int err) {
  for (const auto& group : kErrnoGroups) {
    for (int e : group.errnos) {
      if (e == err) return group.code;
    }
  }
  return ErrorCode::kInternal;
}
}  // namespace

std::optional<ErrorCode> ErrorCodeForHttpStatus(int status) {
  switch (status) {
    case 400:
    case 422:
      return ErrorCode::kInvalidArgument;
    case 401:
    case 403:
      return ErrorCode::kPermissionDenied;
    case 404:
      return ErrorCode::kNotFound;
    case 409:
    case 410:
      return ErrorCode::kConflict;
    case 429:
    case 503:
      return ErrorCode::kUnavailable;
    case 504:
      return ErrorCode::kTimeout;
    default:
      return std::nullopt;
  }
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
