#include "agvisor/e2b/mount.h"

#include <strings.h>

#include <ctime>

#include "agvisor/api/codec.h"
#include "agvisor/base/strings.h"
#include "agvisor/e2b/auth.h"
#include "agvisor/e2b/envd.h"
#include "agvisor/e2b/errors.h"
#include "agvisor/e2b/ids.h"
#include "agvisor/e2b/rest.h"
#include "agvisor/server/log.h"

namespace agvisor::e2b {

namespace {

using server::HttpRequest;
using server::HttpResponse;
using server::HttpStream;

// Every route the pinned SDK (e2b 2.51.0) calls, REST under kApiPrefix. Paths live as long as
// the program (the router keeps views of them).
constexpr api::RouteDef kRestRoutes[] = {
    {"POST", "/e2b/sandboxes", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/sandboxes", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/v2/sandboxes", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/v2/sandboxes", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/sandboxes/{id}", api::RouteId::kExtension, false, false, true},
    {"DELETE", "/e2b/sandboxes/{id}", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/sandboxes/{id}/metrics", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/sandboxes/{id}/timeout", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/sandboxes/{id}/refreshes", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/sandboxes/{id}/pause", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/sandboxes/{id}/resume", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/sandboxes/{id}/connect", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/v2/sandboxes/{id}/connect", api::RouteId::kExtension, false, false, true},
    {"PUT", "/e2b/sandboxes/{id}/network", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/sandboxes/{id}/snapshots", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/sandboxes/{id}/fork", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/snapshots", api::RouteId::kExtension, false, false, true},
    {"DELETE", "/e2b/templates/{id}", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/templates", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/v3/templates", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/templates/aliases/{id}", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/templates/{id}/tags", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/templates/tags", api::RouteId::kExtension, false, false, true},
    {"DELETE", "/e2b/templates/tags", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/templates/{id}/files/{hash}", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/v2/templates/{id}/builds/{build}", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/templates/{id}/builds/{build}/status", api::RouteId::kExtension, false, false,
     true},
    {"GET", "/e2b/volumes", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/volumes", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/volumes/{id}", api::RouteId::kExtension, false, false, true},
    {"DELETE", "/e2b/volumes/{id}", api::RouteId::kExtension, false, false, true},
    {"GET", "/e2b/secrets", api::RouteId::kExtension, false, false, true},
    {"POST", "/e2b/secrets", api::RouteId::kExtension, false, false, true},
};

// envd's routes, at the root (mount.h says why).
constexpr api::RouteDef kEnvdRoutes[] = {
    {"POST", "/process.Process/{method}", api::RouteId::kExtension, false, false, true},
    {"POST", "/filesystem.Filesystem/{method}", api::RouteId::kExtension, false, false, true},
    {"GET", "/files", api::RouteId::kExtension, false, false, true},
    {"POST", "/files", api::RouteId::kExtension, false, false, true},
    {"GET", "/health", api::RouteId::kExtension, false, false, true},
};

// The user of an envd request: `Authorization: Basic base64(user:)` (the SDK's form), default
// "user". Errors: kInvalidArgument (not that form, or not a plausible user name).
Result<std::string> UserOf(const HttpRequest& req) {
  const std::string auth = req.header("authorization");
  if (auth.empty()) return std::string("user");
  constexpr std::string_view kBasic = "Basic ";
  if (auth.size() <= kBasic.size() ||
      ::strncasecmp(auth.c_str(), kBasic.data(), kBasic.size()) != 0) {
    return Error::InvalidArgument("Authorization must be Basic base64(user:)");
  }
  auto decoded = api::Base64Decode(std::string_view(auth).substr(kBasic.size()), "Authorization");
  if (!decoded.ok()) return decoded.error();
  std::string user = decoded->substr(0, decoded->find(':'));
  return user;
}

// A user name agvisor passes on to the agent: POSIX's portable set, 1-32 characters.
bool PlausibleUser(std::string_view u) {
  if (u.empty() || u.size() > 32 || u.front() == '-') return false;
  for (char c : u) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || c == '.')) {
      return false;
    }
  }
  return true;
}

struct Door {
  std::shared_ptr<client::HandleCache> sandboxes;
  E2bOptions options;
  Rest rest;
  Door(std::shared_ptr<client::HandleCache> s, E2bOptions o)
      : sandboxes(s), options(o), rest(std::move(s), std::move(o)) {}

  bool ApiKeyOk(const HttpRequest& req) const {
    return ApiKeyMatches(req.header("x-api-key"), options.secret);
  }

  HttpResponse ServeRest(const HttpRequest& req, const api::RouteMatch& m, HttpStream& stream) {
    if (!ApiKeyOk(req)) {
      return ErrorResponse(401, req.header("x-api-key").empty()
                                    ? "missing X-API-Key: set E2B_API_KEY to e2b_ followed by "
                                      "agvisord's token (docs/e2b.md)"
                                    : "the API key is wrong: it is e2b_ followed by agvisord's "
                                      "token (docs/e2b.md)");
    }
    return rest.Serve(req, m, stream);
  }

  HttpResponse ServeEnvdRoute(const HttpRequest& req, const api::RouteMatch& m,
                              HttpStream& stream) {
    if (m.route->path == "/health") {
      // envd's health probe carries no credential; it says nothing about any sandbox.
      return {204, "", "", {}};
    }
    const std::string id = req.header("e2b-sandbox-id");
    if (id.empty()) {
      return ErrorResponse(400,
                           "missing E2b-Sandbox-Id: set E2B_SANDBOX_URL so the SDK sends it "
                           "(docs/e2b.md)");
    }
    if (!IsSandboxId(id)) return ErrorResponse(400, "E2b-Sandbox-Id is not a sandbox id");
    auto user = UserOf(req);
    if (!user.ok()) return ErrorResponse(400, user.error().message());
    const std::string given = req.header("x-access-token");
    const bool file_route = m.route->path == "/files";
    auto signature = m.query.find("signature");
    const bool signed_url = given.empty() && file_route && signature != m.query.end();
    if (given.empty() && !signed_url) {
      return ErrorResponse(401, "missing X-Access-Token: the sandbox's envdAccessToken");
    }
    auto access = rest.AccessOf(id);
    if (!access.ok()) {
      // E2B's proxy answers 502 for a sandbox it cannot reach; the SDK says it was not found or
      // timed out.
      const int status =
          access.error().code() == ErrorCode::kNotFound ? 502 : StatusFor(access.error());
      return ErrorResponse(status, access.error().message());
    }
    if (signed_url) {
      auto q = [&](const char* k) {
        auto it = m.query.find(k);
        return it == m.query.end() ? std::string() : it->second;
      };
      // The SDK signs the user it was given, or "" when it was given none (getSignature).
      const std::string signed_user = m.query.count("username") ? q("username") : "";
      auto checked =
          CheckFileUrlSignature(q("signature"), q("signature_expiration"), q("path"),
                                req.method == "GET" ? "read" : "write", signed_user, access->token,
                                static_cast<std::int64_t>(std::time(nullptr)));
      if (!checked.ok()) return ErrorResponse(401, checked.error().message());
      if (m.query.count("username")) *user = q("username");
    } else if (!AccessTokenMatches(given, access->token)) {
      return ErrorResponse(401, "the X-Access-Token is not this sandbox's");
    }
    if (!PlausibleUser(*user)) {
      return ErrorResponse(400, "the user must be 1-32 of [A-Za-z0-9_.-], not starting with '-'");
    }
    EnvdCall call{*sandboxes, access->container, id, *user, access->token, signed_url};
    call.envs = access->envs;
    return ServeEnvd(call, req, m, stream);
  }
};

}  // namespace

Result<void> Mount(server::Server& server, std::shared_ptr<client::HandleCache> sandboxes,
                   E2bOptions options) {
  if (options.secret.empty()) return Error::InvalidArgument("E2B needs agvisord's token");
  auto door = std::make_shared<Door>(std::move(sandboxes), std::move(options));
  for (const auto& def : kRestRoutes) {
    AGVISOR_RETURN_IF_ERROR(
        server.AddStreamRoute(def, [door](const HttpRequest& r, const api::RouteMatch& m,
                                          HttpStream& s) { return door->ServeRest(r, m, s); }));
  }
  for (const auto& def : kEnvdRoutes) {
    AGVISOR_RETURN_IF_ERROR(server.AddStreamRoute(
        def, [door](const HttpRequest& r, const api::RouteMatch& m, HttpStream& s) {
          return door->ServeEnvdRoute(r, m, s);
        }));
  }
  // The connection bookkeeping (server.h): a request with the API key or a sandbox's envd token
  // keeps its connection out of the unauthenticated ones (200+ SDK streams at once); the handler
  // checks again and answers.
  server.AddCredential([door](const HttpRequest& r) {
    if (door->ApiKeyOk(r)) return true;
    const std::string id = r.header("e2b-sandbox-id"), token = r.header("x-access-token");
    if (token.empty() || !IsSandboxId(id)) return false;
    auto access = door->rest.AccessOf(id);
    return access.ok() && AccessTokenMatches(token, access->token);
  });
  door->rest.StartSweep();
  return {};
}

}  // namespace agvisor::e2b
