// E2B's error shapes, for every E2B route: the REST API's and envd's HTTP routes answer
// {"code": <HTTP status>, "message": "..."}, which the SDK turns into its error classes by status
// (401 AuthenticationError, 404 NotFoundError / SandboxNotFoundError, 429 RateLimitError,
// 502 the sandbox is gone or timed out, 503 ServiceBusyError, 507 NotEnoughSpaceError, others
// SandboxError with the status). Connect routes answer Connect's own error JSON (connect.h).
//
// Used by e2b/mount.cc, the REST API and envd. Unit-tested in e2b_test.cc.
#pragma once

#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/server/server.h"

namespace agvisor::e2b {

// {"code": status, "message": message} with that status.
server::HttpResponse ErrorResponse(int status, std::string_view message);
// The status of an agvisor error for E2B: as agvisord's (api::HttpStatusFor), except a sandbox
// that died (kSandboxDied) is 404 (E2B: gone) and kPermissionDenied stays 403.
int StatusFor(const Error& e);
inline server::HttpResponse ErrorResponse(const Error& e) {
  return ErrorResponse(StatusFor(e), e.message());
}
// A JSON answer of `status` (200 unless told).
server::HttpResponse JsonResponse(std::string body, int status = 200);

}  // namespace agvisor::e2b
