#include "agvisor/server/console_route.h"

#include <array>

#include "agvisor/api/codec.h"

// The files, embedded by console_assets.S (each followed by a NUL that is not part of it).
extern "C" const char agvisor_console_html_begin[], agvisor_console_html_end[];
extern "C" const char agvisor_console_js_begin[], agvisor_console_js_end[];
extern "C" const char agvisor_console_css_begin[], agvisor_console_css_end[];

namespace agvisor::server {
namespace {

std::string_view Bytes(const char* begin, const char* end) {
  return {begin, static_cast<std::size_t>(end - begin)};
}

const std::array<ConsoleAsset, 3>& Assets() {
  static const std::array<ConsoleAsset, 3> assets = {{
      {"index.html", "text/html; charset=utf-8",
       Bytes(agvisor_console_html_begin, agvisor_console_html_end)},
      {"console.js", "text/javascript; charset=utf-8",
       Bytes(agvisor_console_js_begin, agvisor_console_js_end)},
      {"console.css", "text/css; charset=utf-8",
       Bytes(agvisor_console_css_begin, agvisor_console_css_end)},
  }};
  return assets;
}

// A Host header that may be written into the policy as it is: host name or address, optional
// port, nothing else.
bool PlainHost(std::string_view host) {
  if (host.empty() || host.size() > 255) return false;
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == ':' || c == '[' || c == ']';
    if (!ok) return false;
  }
  return true;
}

HttpResponse Serve(const ConsoleAsset& asset, const HttpRequest& req) {
  HttpResponse r{200, std::string(asset.content_type), std::string(asset.bytes), {}};
  r.headers = {{"Content-Security-Policy", ConsoleContentSecurityPolicy(req.header("host"))},
               {"X-Content-Type-Options", "nosniff"},
               {"X-Frame-Options", "DENY"},
               {"Referrer-Policy", "no-referrer"},
               {"Cross-Origin-Opener-Policy", "same-origin"},
               {"Cache-Control", "no-cache"}};
  return r;
}

}  // namespace

const ConsoleAsset* FindConsoleAsset(std::string_view name) {
  for (const auto& a : Assets()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string ConsoleContentSecurityPolicy(std::string_view host) {
  std::string connect = "'self'";
  if (PlainHost(host)) {
    // CSP Level 3 lets 'self' cover ws: and wss: to the same host; older browsers need them named.
    connect += " ws://" + std::string(host) + " wss://" + std::string(host);
  }
  return "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
         "img-src 'self' data: blob:; font-src 'self' data:; connect-src " +
         connect + "; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
}

Result<void> MountConsole(Server& server) {
  // GET and HEAD (as GET, without the body: a link checker, a proxy's health check); "/console/"
  // is the page too. Issue 33 found a 405 and a JSON 404 for those.
  static const api::RouteDef kRoutes[] = {
      {"GET", kConsolePath, api::RouteId::kExtension, /*websocket=*/false, /*auth=*/false},
      {"GET", "/console/{asset}", api::RouteId::kExtension, /*websocket=*/false, /*auth=*/false},
      {"HEAD", kConsolePath, api::RouteId::kExtension, /*websocket=*/false, /*auth=*/false},
      {"HEAD", "/console/{asset}", api::RouteId::kExtension, /*websocket=*/false, /*auth=*/false},
      {"GET", "/console/", api::RouteId::kExtension, /*websocket=*/false, /*auth=*/false},
      {"HEAD", "/console/", api::RouteId::kExtension, /*websocket=*/false, /*auth=*/false},
  };
  for (const api::RouteDef& def : kRoutes) {
    const bool head = def.method == "HEAD";
    AGVISOR_RETURN_IF_ERROR(server.AddHttpRoute(def, [head](const HttpRequest& req,
                                                            const api::RouteMatch& m) {
      auto it = m.params.find("asset");
      const bool page = it == m.params.end() || it->second.empty();
      const ConsoleAsset* a = FindConsoleAsset(page ? "index.html" : it->second);
      if (!a || (!page && a->name == "index.html")) {
        return HttpResponse{
            404,
            "application/json",
            api::ErrorJson(Error::NotFound("no such console file (the console is at /console)")),
            {}};
      }
      HttpResponse r = Serve(*a, req);
      if (head) r.body.clear();
      return r;
    }));
  }
  return Ok();
}

}  // namespace agvisor::server
