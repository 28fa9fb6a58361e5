#include "agvisor/server/desktop_route.h"

#include <memory>

namespace agvisor::server {
Result<void> MountDesktopGateway(Server& server, gateway::GatewayOptions options) {
  auto gw = std::make_shared<gateway::Gateway>(std::move(options));
  static const api::RouteDef kRoute{"GET", kDesktopRoutePath, api::RouteId::kExtension,
                                    /*websocket=*/true,
                                    /*auth=*/false};
  return server.AddWebSocketRoute(
      kRoute, [gw](const HttpRequest& r, const api::RouteMatch& m, WebSocket& ws) {
        gateway::ViewerRequest vr;
        vr.origin = r.header("origin");
        vr.same_origin = !vr.origin.empty() && OriginMatchesHost(vr.origin, r.header("host"));
        if (auto it = m.query.find("token"); it != m.query.end()) vr.token = it->second;
        gw->Serve(vr, ws);
      });
}

}  // namespace agvisor::server
