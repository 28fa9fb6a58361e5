#include "agvisor/base/error.h"

#include <cerrno>
#include <cstring>

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

Error Error::FromErrno(std::string what, int err) {
  ErrorCode code = ErrorCode::kInternal;
  switch (err) {
    case ENOENT:
    case ESRCH:
      code = ErrorCode::kNotFound;
      break;
    case EEXIST:
    case EBUSY:
      code = ErrorCode::kConflict;
      break;
    case EACCES:
    case EPERM:
      code = ErrorCode::kPermissionDenied;
      break;
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EDQUOT:
    case EAGAIN:
      code = ErrorCode::kResourceExhausted;
      break;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case ENOTCONN:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ECONNABORTED:
      code = ErrorCode::kUnavailable;
      break;
    case ETIMEDOUT:
      code = ErrorCode::kTimeout;
      break;
    case EINVAL:
    case ENAMETOOLONG:
    case ENOTDIR:
    case EISDIR:
      code = ErrorCode::kInvalidArgument;
      break;
    case ENOSYS:
    case EOPNOTSUPP:
      code = ErrorCode::kUnsupported;
      break;
    default:
      break;
  }
  Error e(code, what + ": " + std::strerror(err));
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
