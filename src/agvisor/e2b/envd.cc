#include "agvisor/e2b/envd.h"

#include "agvisor/e2b/errors.h"

namespace agvisor::e2b {

server::HttpResponse ServeEnvd(const EnvdCall& call, const server::HttpRequest& req,
                               const api::RouteMatch& match, server::HttpStream& stream) {
  (void)call, (void)match, (void)stream;
  if (req.target.starts_with("/health")) return {204, "", "", {}};
  return ErrorResponse(501, "envd is not served yet by this agvisord: " + req.method + " " +
                                req.target.substr(0, req.target.find('?')));
}

}  // namespace agvisor::e2b
