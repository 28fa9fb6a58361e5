#include "agvisor/e2b/mount.h"

#include <strings.h>
#include <sys/socket.h>

#include <ctime>

#include "agvisor/api/codec.h"
#include "agvisor/base/strings.h"
#include "agvisor/client/relay.h"
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

// Every route the pinned SDK (e2b 2.51.0) calls: the REST API under kApiPrefix, envd's at the
// root (mount.h says why). All are streaming routes without agvisord's token (this file checks
// E2B's credentials). The router keeps views of the paths: they live as long as the program.
constexpr api::RouteDef E2bRoute(std::string_view method, std::string_view path) {
  return {method,
          path,
          api::RouteId::kExtension,
          /*websocket=*/false,
          /*auth=*/false,
          /*streaming=*/true};
}
constexpr api::RouteDef kRoutes[] = {
    E2bRoute("POST", "/e2b/sandboxes"),
    E2bRoute("GET", "/e2b/sandboxes"),
    E2bRoute("POST", "/e2b/v2/sandboxes"),
    E2bRoute("GET", "/e2b/v2/sandboxes"),
    E2bRoute("GET", "/e2b/sandboxes/{id}"),
    E2bRoute("DELETE", "/e2b/sandboxes/{id}"),
    E2bRoute("GET", "/e2b/sandboxes/{id}/metrics"),
    E2bRoute("POST", "/e2b/sandboxes/{id}/timeout"),
    E2bRoute("POST", "/e2b/sandboxes/{id}/refreshes"),
    E2bRoute("POST", "/e2b/sandboxes/{id}/pause"),
    E2bRoute("POST", "/e2b/sandboxes/{id}/resume"),
    E2bRoute("POST", "/e2b/sandboxes/{id}/connect"),
    E2bRoute("POST", "/e2b/v2/sandboxes/{id}/connect"),
    E2bRoute("PUT", "/e2b/sandboxes/{id}/network"),
    E2bRoute("POST", "/e2b/sandboxes/{id}/snapshots"),
    E2bRoute("POST", "/e2b/sandboxes/{id}/fork"),
    E2bRoute("GET", "/e2b/snapshots"),
    E2bRoute("DELETE", "/e2b/templates/{id}"),
    E2bRoute("GET", "/e2b/templates"),
    E2bRoute("POST", "/e2b/v3/templates"),
    E2bRoute("GET", "/e2b/templates/aliases/{id}"),
    E2bRoute("GET", "/e2b/templates/{id}/tags"),
    E2bRoute("POST", "/e2b/templates/tags"),
    E2bRoute("DELETE", "/e2b/templates/tags"),
    E2bRoute("GET", "/e2b/templates/{id}/files/{hash}"),
    E2bRoute("POST", "/e2b/v2/templates/{id}/builds/{build}"),
    E2bRoute("GET", "/e2b/templates/{id}/builds/{build}/status"),
    E2bRoute("GET", "/e2b/volumes"),
    E2bRoute("POST", "/e2b/volumes"),
    E2bRoute("GET", "/e2b/volumes/{id}"),
    E2bRoute("DELETE", "/e2b/volumes/{id}"),
    E2bRoute("GET", "/e2b/secrets"),
    E2bRoute("POST", "/e2b/secrets"),
    E2bRoute("POST", "/process.Process/{method}"),
    E2bRoute("POST", "/filesystem.Filesystem/{method}"),
    E2bRoute("GET", "/files"),
    E2bRoute("POST", "/files"),
    E2bRoute("GET", "/health"),
};

// The user of an envd request: `Authorization: Basic base64(user:)` (the SDK's form), default
// "user". Errors: kInvalidArgument (not that form).
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

// A call to a paused sandbox made with autoResume false, as E2B answers it: envd's 502 (the SDK:
// the sandbox is not running; isRunning() false), getHost traffic's 409 "The sandbox is paused".
HttpResponse HeldPausedResponse(int status, const std::string& id) {
  return ErrorResponse(status, "sandbox " + id +
                                   " is paused and was created with lifecycle.autoResume false, "
                                   "so calls do not wake it: Sandbox.connect('" +
                                   id + "') resumes it");
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

  // A request for PORT-ID.DOMAIN: relayed as it is (HTTP or a WebSocket upgrade) into the
  // sandbox's port; 502 in E2B's shape when the port is not open.
  void ServeHost(const HttpRequest& req, server::RawConnection raw) {
    auto host = ParseSandboxHost(req.header("host"), options.domain);
    auto answer = [&](const HttpResponse& e, std::string_view reason) {
      const std::string out = "HTTP/1.1 " + std::to_string(e.status) + " " + std::string(reason) +
                              "\r\nContent-Type: application/json\r\n"
                              "Connection: close\r\nContent-Length: " +
                              std::to_string(e.body.size()) + "\r\n\r\n" + e.body;
      (void)!::send(raw.fd.get(), out.data(), out.size(), MSG_NOSIGNAL);
    };
    auto refuse = [&](const std::string& message) {
      answer(ErrorResponse(502, message), "Bad Gateway");
    };
    if (!host) return refuse("not a sandbox host");
    auto access = rest.AccessOf(host->id);
    if (!access.ok()) return refuse("sandbox " + host->id + " is not running");
    if (rest.HeldPaused(host->id)) {
      // What E2B's proxy answers for a paused sandbox that traffic may not wake.
      return answer(HeldPausedResponse(409, host->id), "Conflict");
    }
    auto handle = sandboxes->Get(access->container);
    if (!handle.ok()) return refuse("sandbox " + host->id + " is not running");
    auto port = (*handle)->OpenPort(host->port);
    if (!port.ok()) {
      return refuse("the sandbox is running but port " + std::to_string(host->port) +
                    " is not open (" + port.error().message() + ")");
    }
    std::shared_ptr<client::ByteStream> stream(std::move(*port));
    if (!stream->Write(raw.head + raw.buffered).ok()) return;
    client::RelayPortConnection(std::move(stream), raw.fd.release());
  }

  // envd's health (the SDK's isRunning): 204 without a sandbox id; with one, 502 when that
  // sandbox is gone (as E2B's proxy), or, for its own token, paused and not to be woken (an id
  // and token of no sandbox learn nothing more than an envd call's 502 tells).
  HttpResponse Health(const HttpRequest& req, const std::string& id) {
    if (id.empty() || !IsSandboxId(id)) return {204, "", "", {}};
    auto access = rest.AccessOf(id);
    if (!access.ok()) {
      if (access.error().code() == ErrorCode::kNotFound) {
        return ErrorResponse(502, access.error().message());
      }
      return {204, "", "", {}};
    }
    if (AccessTokenMatches(req.header("x-access-token"), access->token) && rest.HeldPaused(id)) {
      return HeldPausedResponse(502, id);
    }
    return {204, "", "", {}};
  }

  HttpResponse ServeEnvdRoute(const HttpRequest& req, const api::RouteMatch& m,
                              HttpStream& stream) {
    std::string id = req.header("e2b-sandbox-id");
    if (m.route->path == "/health") return Health(req, id);
    auto user = UserOf(req);
    if (!user.ok()) return ErrorResponse(400, user.error().message());
    const std::string given = req.header("x-access-token");
    const bool file_route = m.route->path == "/files";
    const bool signed_url = given.empty() && file_route && m.query.count("signature") != 0;
    auto q = [&](const char* k) {
      auto it = m.query.find(k);
      return it == m.query.end() ? std::string() : it->second;
    };
    // The SDK signs the user it was given, or "" when it was given none (getSignature).
    const std::string signed_user = m.query.count("username") ? q("username") : "";
    auto check_signature = [&](const std::string& token) {
      return CheckFileUrlSignature(q("signature"), q("signature_expiration"), q("path"),
                                   req.method == "GET" ? "read" : "write", signed_user, token,
                                   static_cast<std::int64_t>(std::time(nullptr)));
    };
    if (id.empty() && signed_url) {
      // A signed URL carries no sandbox id (the SDK makes it from E2B_SANDBOX_URL alone, for
      // clients that send no headers): the sandbox is the one whose token signed it.
      for (const auto& known : rest.KnownIds()) {
        auto access = rest.AccessOf(known);
        if (access.ok() && check_signature(access->token).ok()) {
          id = known;
          break;
        }
      }
      if (id.empty()) {
        return ErrorResponse(401, "the file URL's signature matches no sandbox (or it expired)");
      }
    }
    if (id.empty()) {
      return ErrorResponse(400,
                           "missing E2b-Sandbox-Id: set E2B_SANDBOX_URL so the SDK sends it "
                           "(docs/e2b.md)");
    }
    if (!IsSandboxId(id)) return ErrorResponse(400, "E2b-Sandbox-Id is not a sandbox id");
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
      if (auto checked = check_signature(access->token); !checked.ok()) {
        return ErrorResponse(401, checked.error().message());
      }
      if (m.query.count("username")) *user = q("username");
    } else if (!AccessTokenMatches(given, access->token)) {
      return ErrorResponse(401, "the X-Access-Token is not this sandbox's");
    }
    if (rest.HeldPaused(id)) return HeldPausedResponse(502, id);
    // The user is checked where every door's is: the agent resolves it in the sandbox's
    // /etc/passwd and refuses one it does not know.
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
  for (const auto& def : kRoutes) {
    const bool rest = def.path.starts_with(kApiPrefix);
    AGVISOR_RETURN_IF_ERROR(server.AddStreamRoute(
        def, [door, rest](const HttpRequest& r, const api::RouteMatch& m, HttpStream& s) {
          return rest ? door->ServeRest(r, m, s) : door->ServeEnvdRoute(r, m, s);
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
  // A path under /e2b that E2B's API does not have, or a method it does not take there: E2B's
  // error shape, as its API answers.
  server.SetMissAnswer(std::string(kApiPrefix), [](const HttpRequest& req, int status,
                                                   std::string_view message) {
    if (status != 404) return ErrorResponse(status, message);
    const std::string path = req.target.substr(0, std::min<std::size_t>(req.target.find('?'), 256));
    return ErrorResponse(404, "E2B's API has no route " + req.method.substr(0, 16) + " " + path +
                                  " on agvisor (docs/e2b.md lists the SDK's calls it serves)");
  });
  // getHost(port): PORT-ID.DOMAIN goes into the sandbox's port, as E2B's public URLs do.
  server.SetHostRoute(
      [door](const HttpRequest& r) {
        auto h = ParseSandboxHost(r.header("host"), door->options.domain);
        return h && door->rest.HasRecord(h->id);
      },
      [door](const HttpRequest& r, server::RawConnection raw) {
        door->ServeHost(r, std::move(raw));
      });
  door->rest.StartSweep();
  door->rest.StartMetricsSampler();
  return {};
}

}  // namespace agvisor::e2b
