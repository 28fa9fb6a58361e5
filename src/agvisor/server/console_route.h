// agvisord's web console (docs/console.md): a page where a person sees and drives the sandboxes
// of this daemon in a browser. Its files (web/console/: the page, the script and style bundle
// esbuild made from web/console/src) are embedded in the binary at build time
// (console_assets.S), so `agvisord --console` needs nothing installed beside it.
//
// GET /console and GET /console/{asset} are served without the bearer token: they hold no
// secret (the page asks the person for the token and keeps it in the tab's sessionStorage). The
// page carries a Content-Security-Policy that lets it load scripts and styles from this origin
// only and talk to this origin only. The API calls it makes carry the token as a header; its
// WebSockets send it as their first message (server.h ServerOptions::ws_auth_timeout).
//
// Used by daemon.cc (--console) and the console's tests.
#pragma once

#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/server/server.h"

namespace agvisor::server {

inline constexpr std::string_view kConsolePath = "/console";

// One embedded file of the console.
struct ConsoleAsset {
  std::string_view name;          // "index.html", "console.js", "console.css"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view bytes;
};

// The embedded file called `name`, or nullptr.
const ConsoleAsset* FindConsoleAsset(std::string_view name);

// The Content-Security-Policy of the console for a request whose Host header is `host`: scripts,
// styles, images and connections of this origin only (WebSockets to `host` named explicitly when
// it is a well-formed host[:port]); no frames, forms, plugins or base URL. Styles may be inline:
// xterm.js writes its theme into a <style> element it creates.
std::string ConsoleContentSecurityPolicy(std::string_view host);

// Adds GET /console (the page) and GET /console/{asset}. Errors: those of
// Server::AddHttpRoute (kConflict when mounted twice).
Result<void> MountConsole(Server& server);

}  // namespace agvisor::server
