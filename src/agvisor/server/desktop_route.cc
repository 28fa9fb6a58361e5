#include "agvisor/server/desktop_route.h"

#include <memory>

namespace agvisor::server {
namespace {

// The server's WebSocket as the gateway's ViewerSocket (both allow one sender and one receiver
// at once, and Close from any thread).
class ViewerAdapter : public gateway::ViewerSocket {
 public:
  explicit ViewerAdapter(WebSocket& ws) : ws_(ws) {}
  Result<void> Send(std::string_view data, bool binary) override { return ws_.Send(data, binary); }
  Result<std::optional<gateway::ViewerMessage>> Receive() override {
    auto m = ws_.Receive();
    if (!m.ok()) return m.error();
    if (!m->has_value()) return std::optional<gateway::ViewerMessage>();
    return std::optional<gateway::ViewerMessage>(
        gateway::ViewerMessage{(*m)->binary, std::move((*m)->data)});
  }
  void Close(int code, std::string_view reason) override { ws_.Close(code, reason); }

 private:
  WebSocket& ws_;
};

}  // namespace

Result<void> MountDesktopGateway(Server& server, gateway::GatewayOptions options) {
  auto gw = std::make_shared<gateway::Gateway>(std::move(options));
  static const api::RouteDef kRoute{"GET", kDesktopRoutePath, api::RouteId::kExtension,
                                    /*websocket=*/true,
                                    /*auth=*/false};
  return server.AddWebSocketRoute(
      kRoute, [gw](const HttpRequest& r, const api::RouteMatch& m, WebSocket& ws) {
        gateway::ViewerRequest vr;
        vr.origin = r.header("origin");
        if (auto it = m.query.find("token"); it != m.query.end()) vr.token = it->second;
        ViewerAdapter viewer(ws);
        gw->Serve(vr, viewer);
      });
}

}  // namespace agvisor::server
