#include "agvisor/server/mcp_route.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "agvisor/api/codec.h"
#include "agvisor/base/strings.h"
#include "agvisor/client/place.h"

namespace agvisor::server {
namespace {

struct McpState {
  McpRouteOptions options;
  std::mutex mu;
  // Most recently used last.
  std::list<std::pair<std::string, std::shared_ptr<mcp::Session>>> sessions;

  std::shared_ptr<mcp::Session> Find(const std::string& id) {
    std::lock_guard lock(mu);
    for (auto it = sessions.begin(); it != sessions.end(); ++it) {
      if (it->first == id) {
        sessions.splice(sessions.end(), sessions, it);
        return sessions.back().second;
      }
    }
    return nullptr;
  }
};

HttpResponse JsonRpcError(int status, int code, std::string message) {
  return {status,
          "application/json",
          R"({"jsonrpc":"2.0","id":null,"error":{"code":)" + std::to_string(code) +
              R"(,"message":")" + message + R"("}})",
          {}};
}

// The refusals every /mcp request gets before its session is looked at (nullopt: none).
std::optional<HttpResponse> RefuseHeaders(const HttpRequest& req) {
  if (!McpOriginAllowed(req.header("origin"))) {
    return JsonRpcError(403, -32600,
                        "a web page of another origin may not use /mcp (only loopback origins "
                        "and clients that send no Origin may: docs/mcp.md)");
  }
  const std::string version = req.header("mcp-protocol-version");
  if (!version.empty() &&
      std::find(std::begin(mcp::kProtocolVersions), std::end(mcp::kProtocolVersions), version) ==
          std::end(mcp::kProtocolVersions)) {
    std::string known;
    for (auto v : mcp::kProtocolVersions) known += (known.empty() ? "" : ", ") + std::string(v);
    return JsonRpcError(400, -32600,
                        "unsupported MCP-Protocol-Version header: this server speaks " + known);
  }
  return std::nullopt;
}

HttpResponse Post(McpState& st, const HttpRequest& req, HttpStream& io) {
  if (auto refused = RefuseHeaders(req)) return *refused;
  std::string body;
  char buf[64 * 1024];
  for (;;) {
    auto n = io.ReadBody(buf);
    if (!n.ok()) {
      return JsonRpcError(n.error().code() == ErrorCode::kResourceExhausted ? 413 : 400, -32700,
                          "reading the request failed");
    }
    if (*n == 0) break;
    body.append(buf, *n);
  }
  const auto peek = mcp::Session::Inspect(body);
  if (!peek.valid_json) {
    return JsonRpcError(400, -32700,
                        "malformed JSON: POST one JSON-RPC 2.0 message (or a batch) to /mcp");
  }
  std::shared_ptr<mcp::Session> session;
  std::vector<std::pair<std::string, std::string>> headers;
  if (peek.initialize) {
    auto id = RandomHex(16);  // the session id: 128 random bits
    if (!id.ok()) return JsonRpcError(500, -32603, "cannot make a session id");
    session = std::make_shared<mcp::Session>(st.options.sandboxes->place(), st.options.session,
                                             st.options.sandboxes.get());
    std::lock_guard lock(st.mu);
    st.sessions.emplace_back(*id, session);
    while (st.sessions.size() > st.options.max_sessions) st.sessions.pop_front();
    headers.emplace_back("Mcp-Session-Id", *id);
  } else {
    const std::string id = req.header("mcp-session-id");
    if (id.empty()) {
      return JsonRpcError(400, -32600,
                          "the Mcp-Session-Id header is missing: send initialize first and "
                          "repeat the id its answer gave");
    }
    session = st.Find(id);
    if (!session) {
      return JsonRpcError(404, -32600,
                          "no such MCP session (ended, or agvisord restarted): "
                          "initialize a new one");
    }
  }
  if (!peek.has_request) {
    (void)session->Handle(body);
    return {202, "", "", headers};  // accepted, no body: no Content-Type either
  }
  if (!peek.wants_progress) {
    return {200, "application/json", session->Handle(body), headers};
  }
  // Progress: an event stream, each notification an event as it comes, the answer last.
  if (!io.BeginBody(200, "text/event-stream").ok()) return {200, "", "", {}};
  bool broken = false;
  auto event = [&io, &broken](std::string_view message) {
    if (broken || message.empty()) return;
    std::string e = "event: message\ndata: ";
    e.append(message);
    e.append("\n\n");
    broken = !io.WriteBody(e).ok();  // the client went away: the call still runs to its end
  };
  event(session->Handle(body, event));
  return {200, "", "", {}};
}

}  // namespace

bool McpOriginAllowed(std::string_view origin) {
  if (origin.empty()) return true;
  std::string o(origin);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view rest = o;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else {
    return false;  // "null" (a sandboxed frame, a file:), another scheme
  }
  // HOST or HOST:PORT, nothing else (an origin has no path, query or userinfo).
  std::string_view host = rest;
  std::string_view port;
  if (rest.starts_with("[")) {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host = rest.substr(0, close + 1);
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return false;
      port = after.substr(1);
    }
  } else if (const auto colon = rest.find(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (port.empty()) return false;
  }
  if (!port.empty() &&
      (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos)) {
    return false;
  }
  if (host == "localhost" || host == "[::1]") return true;
  in_addr a{};
  return inet_pton(AF_INET, std::string(host).c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

Result<void> MountMcp(Server& server, McpRouteOptions options) {
  auto st = std::make_shared<McpState>();
  st->options = std::move(options);
  if (!st->options.sandboxes) {
    st->options.sandboxes = std::make_shared<client::HandleCache>(client::InProcess(""));
  }
  AGVISOR_RETURN_IF_ERROR(
      server.AddStreamRoute({"POST", kMcpRoutePath, api::RouteId::kExtension},
                            [st](const HttpRequest& req, const api::RouteMatch&, HttpStream& io) {
                              return Post(*st, req, io);
                            }));
  AGVISOR_RETURN_IF_ERROR(server.AddHttpRoute(
      {"GET", kMcpRoutePath, api::RouteId::kExtension},
      [](const HttpRequest& req, const api::RouteMatch&) {
        // Every method gets the Origin and version checks, this refusal too: a page of another
        // origin learns nothing here, not even that /mcp exists.
        if (auto refused = RefuseHeaders(req)) return *refused;
        return HttpResponse{405,
                            "application/json",
                            api::ErrorJsonSlug("unsupported",
                                               "/mcp offers no server-initiated stream: POST "
                                               "JSON-RPC messages"),
                            {{"Allow", "POST, DELETE"}}};
      }));
  return server.AddHttpRoute(
      {"DELETE", kMcpRoutePath, api::RouteId::kExtension},
      [st](const HttpRequest& req, const api::RouteMatch&) {
        if (auto refused = RefuseHeaders(req)) return *refused;
        const std::string id = req.header("mcp-session-id");
        std::shared_ptr<mcp::Session> session;
        {
          std::lock_guard lock(st->mu);
          for (auto it = st->sessions.begin(); it != st->sessions.end(); ++it) {
            if (it->first == id) {
              session = it->second;
              st->sessions.erase(it);
              break;
            }
          }
        }
        if (!session) {
          return HttpResponse{
              404, "application/json", api::ErrorJsonSlug("not_found", "no such MCP session"), {}};
        }
        session->EndSandboxes();
        return HttpResponse{204, "application/json", "", {}};
      });
}

}  // namespace agvisor::server
