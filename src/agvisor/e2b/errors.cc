#include "agvisor/e2b/errors.h"

#include <boost/json.hpp>

#include "agvisor/api/codec.h"

namespace agvisor::e2b {

server::HttpResponse ErrorResponse(int status, std::string_view message) {
  boost::json::object o;
  o["code"] = status;
  o["message"] = message;
  return {status, "application/json", boost::json::serialize(o), {}};
}

int StatusFor(const Error& e) {
  if (e.code() == ErrorCode::kSandboxDied) return 404;
  return api::HttpStatusFor(e.code());
}

server::HttpResponse JsonResponse(std::string body, int status) {
  return {status, "application/json", std::move(body), {}};
}

}  // namespace agvisor::e2b
