// The desktop gateway: serves one browser's WebSocket by relaying it to a sandbox's VNC server
// through the sandbox's agent channel (no published port: it works with network=none).
//
// Used by agvisord (its WebSocket route GET /v1/desktop/ws, see docs/desktop-gateway.md) and by
// the standalone listener (listener.h) that tests and embedders use without agvisord.
//
// One viewer's session, as Gateway::Serve runs it:
//   0. Cap: a viewer whose token is not accepted yet is "unauthenticated"; past
//      GatewayOptions::max_unauthenticated of them at once, a new one is closed at once (1013,
//      try again later). Anyone who can reach the gateway can open WebSockets; without the cap
//      each could hold a connection and a thread for the whole handshake timeout, unbounded.
//   1. Origin: a browser's Origin header must be in the allowlist ("*" allows any); a request
//      without Origin (not a browser: a native client, a test) passes. The token still decides.
//   2. Token: the `token` query parameter, or else the first WebSocket message (text). The
//      element sends it as a message, which keeps it out of URLs and access logs.
//   3. VerifyToken (desktop/token.h). Only "vnc" tokens are served; the seed's "rdp" ones are
//      refused.
//   4. Sandbox::Open + OpenPort(port) on a handle shared by every viewer of that sandbox.
//   5. RFB handshakes (desktop/rfb.h): VNC authentication with the token's password towards
//      the sandbox, security type None towards the browser (which never sees the password).
//   6. Relay: binary messages both ways, until either side ends. Many viewers of one desktop
//      at once each get their own port stream (the VNC server is told the session is shared).
// Every refusal and every end is a WebSocket close with a code of the table below and a reason
// a person can act on (the web element shows it in its `error` event).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/desktop/token.h"
#include "agvisor/http/websocket.h"

namespace agvisor {
class Sandbox;
class LazyRuntime;
}  // namespace agvisor

namespace agvisor::gateway {

// WebSocket close codes the gateway sends (4000-4999: private use, RFC 6455 section 7.4.2).
inline constexpr int kCloseNormal = 1000;              // the viewer left
inline constexpr int kCloseTokenRejected = 4001;       // bad, tampered, expired or foreign token
inline constexpr int kCloseUnsupportedType = 4002;     // e.g. an "rdp" token: not served here
inline constexpr int kCloseOriginRefused = 4003;       // Origin not in the allowlist
inline constexpr int kCloseSandboxUnavailable = 4004;  // no such sandbox, no desktop, VNC refused
inline constexpr int kCloseSandboxEnded = 4005;    // the sandbox or its desktop ended mid-session
inline constexpr int kCloseViewerProtocol = 4006;  // the browser did not speak RFB / no token
inline constexpr int kCloseTryAgainLater = 1013;   // too many viewers without a token yet
inline constexpr int kCloseInternal = 1011;

struct GatewayOptions {
  desktop::TokenKey key;
  // Allowed browser origins, exactly as browsers send them ("https://app.example.com",
  // "http://127.0.0.1:8080"); "*" allows every origin.
  std::vector<std::string> allowed_origins;
  // Also allow a page served by the server the gateway is mounted on (ViewerRequest::
  // same_origin): agvisord's console (docs/console.md).
  bool allow_same_origin = false;
  // How long a viewer may take to send its token and finish the RFB handshake.
  std::chrono::seconds handshake_timeout{30};
  // Viewers whose token is not accepted yet, at once (step 0 above). A browser sends its token
  // right after the upgrade, so a few are plenty even with many viewers arriving together.
  int max_unauthenticated = 16;
};

// The request facts the gateway checks.
struct ViewerRequest {
  std::string origin;  // the Origin header, "" when absent
  std::string token;   // the `token` query parameter, "" when absent
  // The Origin names the server itself (its Host): a page that server served.
  bool same_origin = false;
};

// How a session ended (for logs and tests).
struct SessionEnd {
  int close_code = kCloseNormal;
  std::string reason;
  std::string container;  // the sandbox, once the token named it
  std::uint64_t bytes_to_viewer = 0;
  std::uint64_t bytes_from_viewer = 0;
};

class Gateway {
 public:
  explicit Gateway(GatewayOptions options);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Serves one viewer until its session ends and returns how it ended; `socket` is closed with
  // that code and reason. Blocks (one extra thread relays the viewer's input). Thread-safe: call
  // it from one thread per viewer.
  SessionEnd Serve(const ViewerRequest& request, http::WebSocket& socket);

  // GatewayOptions::handshake_timeout (the standalone listener bounds the upgrade request by it).
  std::chrono::seconds handshake_timeout() const { return options_.handshake_timeout; }

  // Whether `origin` may open desktops (exposed for the tests and the daemon's logs).
  bool OriginAllowed(std::string_view origin) const;

  // Number of sessions being served now, and of those whose token is not accepted yet.
  int active_sessions() const;
  int unauthenticated_sessions() const;

 private:
  // The shared handle on a sandbox, opened on first use and kept while a viewer uses it.
  Result<std::shared_ptr<Sandbox>> OpenSandbox(const desktop::VncTarget& target);

  GatewayOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::weak_ptr<Sandbox>> sandboxes_;       // "host\ncontainer" -> handle
  std::map<std::string, std::unique_ptr<LazyRuntime>> runtimes_;  // by host, kept
  int active_ = 0;
  int unauthenticated_ = 0;
};

}  // namespace agvisor::gateway
