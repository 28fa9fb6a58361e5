#include "agvisor/base/error.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <utility>

namespace agvisor {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Error::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  int h = AGVISOR_TRY(Half(x));
  return AGVISOR_TRY(Half(h));
}

Result<void> CheckEven(int x) {
  AGVISOR_RETURN_IF_ERROR(Half(x));
  return Ok();
}

TEST(ResultTest, ValueAndErrorPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().message(), "odd: 3");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(5).ok());
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(ErrorTest, FromErrnoMapsCodes) {
  EXPECT_EQ(Error::FromErrno("open x", ENOENT).code(), ErrorCode::kNotFound);
  EXPECT_EQ(Error::FromErrno("connect", ECONNREFUSED).code(), ErrorCode::kUnavailable);
  EXPECT_EQ(Error::FromErrno("write", ENOSPC).code(), ErrorCode::kResourceExhausted);
  Error e = Error::FromErrno("open /x", EACCES);
  EXPECT_EQ(e.code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(e.sys_errno(), EACCES);
  EXPECT_EQ(e.message(), "open /x: Permission denied");
  EXPECT_EQ(e.WithContext("load").message(), "load: open /x: Permission denied");
  EXPECT_EQ(Error::NotFound("x").ToString(), "kNotFound: x");
}

TEST(ErrorTest, FromErrnoGivesEachErrnoItsCode) {
  const std::pair<int, ErrorCode> kExpected[] = {
      {ENOENT, ErrorCode::kNotFound},
      {ESRCH, ErrorCode::kNotFound},
      {EEXIST, ErrorCode::kConflict},
      {EBUSY, ErrorCode::kConflict},
      {EACCES, ErrorCode::kPermissionDenied},
      {EPERM, ErrorCode::kPermissionDenied},
      {ENOSPC, ErrorCode::kResourceExhausted},
      {ENOMEM, ErrorCode::kResourceExhausted},
      {EMFILE, ErrorCode::kResourceExhausted},
      {ENFILE, ErrorCode::kResourceExhausted},
      {EDQUOT, ErrorCode::kResourceExhausted},
      {EAGAIN, ErrorCode::kResourceExhausted},
      {ECONNREFUSED, ErrorCode::kUnavailable},
      {ECONNRESET, ErrorCode::kUnavailable},
      {EPIPE, ErrorCode::kUnavailable},
      {ENOTCONN, ErrorCode::kUnavailable},
      {EHOSTUNREACH, ErrorCode::kUnavailable},
      {ENETUNREACH, ErrorCode::kUnavailable},
      {ECONNABORTED, ErrorCode::kUnavailable},
      {ETIMEDOUT, ErrorCode::kTimeout},
      {EINVAL, ErrorCode::kInvalidArgument},
      {ENAMETOOLONG, ErrorCode::kInvalidArgument},
      {ENOTDIR, ErrorCode::kInvalidArgument},
      {EISDIR, ErrorCode::kInvalidArgument},
      {ENOSYS, ErrorCode::kUnsupported},
      {EOPNOTSUPP, ErrorCode::kUnsupported},
      {EIO, ErrorCode::kInternal},
      {EXDEV, ErrorCode::kInternal},
  };
  for (const auto& [err, code] : kExpected) {
    const Error e = Error::FromErrno("op", err);
    EXPECT_EQ(e.code(), code) << "errno " << err;
    EXPECT_EQ(e.sys_errno(), err);
  }
}

TEST(ErrorTest, HttpStatusGivesACodeOnlyWhereItSaysOne) {
  EXPECT_EQ(ErrorCodeForHttpStatus(400), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeForHttpStatus(422), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeForHttpStatus(401), ErrorCode::kPermissionDenied);
  EXPECT_EQ(ErrorCodeForHttpStatus(403), ErrorCode::kPermissionDenied);
  EXPECT_EQ(ErrorCodeForHttpStatus(404), ErrorCode::kNotFound);
  EXPECT_EQ(ErrorCodeForHttpStatus(409), ErrorCode::kConflict);
  EXPECT_EQ(ErrorCodeForHttpStatus(410), ErrorCode::kConflict);
  EXPECT_EQ(ErrorCodeForHttpStatus(429), ErrorCode::kUnavailable);
  EXPECT_EQ(ErrorCodeForHttpStatus(503), ErrorCode::kUnavailable);
  EXPECT_EQ(ErrorCodeForHttpStatus(504), ErrorCode::kTimeout);
  for (int status : {200, 302, 405, 500, 502}) {
    EXPECT_EQ(ErrorCodeForHttpStatus(status), std::nullopt) << status;
  }
}

}  // namespace
}  // namespace agvisor
