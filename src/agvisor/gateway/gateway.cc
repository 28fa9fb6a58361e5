#include "agvisor/gateway/gateway.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <thread>

#include "agvisor/desktop/rfb.h"
#include "agvisor/sandbox/runtimes.h"
#include "agvisor/sandbox/sandbox.h"

namespace agvisor::gateway {
namespace {

// A close reason fits in a control frame: at most 123 bytes (RFC 6455 section 5.5).
std::string ShortReason(std::string_view reason) {
  if (reason.size() <= 123) return std::string(reason);
  std::string r(reason.substr(0, 120));
  // Do not cut a UTF-8 sequence in half: drop continuation bytes at the cut.
  while (!r.empty() && (static_cast<unsigned char>(r.back()) & 0xC0) == 0x80) r.pop_back();
  if (!r.empty() && (static_cast<unsigned char>(r.back()) & 0x80)) r.pop_back();
  return r + "...";
}

// Closes the viewer's socket if the handshake is not over by the deadline.
class Watchdog {
 public:
  Watchdog(http::WebSocket& socket, std::chrono::seconds timeout)
      : thread_([this, &socket, timeout] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
            fired_ = true;
            lock.unlock();
            socket.Close(kCloseViewerProtocol, "the viewer did not finish the handshake in " +
                                                   std::to_string(timeout.count()) + " s");
          }
        }) {}
  ~Watchdog() { Disarm(); }
  void Disarm() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  bool fired() {
    std::lock_guard lock(mu_);
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;
};

}  // namespace

Gateway::Gateway(GatewayOptions options) : options_(std::move(options)) {}
Gateway::~Gateway() = default;

bool Gateway::OriginAllowed(std::string_view origin) const {
  if (origin.empty()) return true;  // not a browser; the token decides
  return std::any_of(options_.allowed_origins.begin(), options_.allowed_origins.end(),
                     [&](const std::string& o) { return o == "*" || o == origin; });
}

int Gateway::active_sessions() const {
  std::lock_guard lock(mu_);
  return active_;
}

int Gateway::unauthenticated_sessions() const {
  std::lock_guard lock(mu_);
  return unauthenticated_;
}

Result<std::shared_ptr<Sandbox>> Gateway::OpenSandbox(const desktop::VncTarget& target) {
  const std::string key = target.docker_host + "\n" + target.container;
  {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(key);
    if (it != sandboxes_.end()) {
      if (auto sb = it->second.lock()) return sb;
    }
  }
  // Opened outside the lock (it talks to Docker); two first viewers may both open one, and the
  // later one's handle is the one kept: both work.
  LazyRuntime* runtime = nullptr;
  {
    std::lock_guard lock(mu_);
    auto& slot = runtimes_[target.docker_host];
    if (!slot) slot = std::make_unique<LazyRuntime>(target.docker_host);
    runtime = slot.get();
  }
  auto opened = Sandbox::Open(AGVISOR_TRY(runtime->Get()), target.container);
  if (!opened.ok()) return opened.error();
  std::shared_ptr<Sandbox> sb(std::move(*opened));
  std::lock_guard lock(mu_);
  for (auto it = sandboxes_.begin(); it != sandboxes_.end();) {
    it = it->second.expired() ? sandboxes_.erase(it) : std::next(it);
  }
  sandboxes_[key] = sb;
  return sb;
}

SessionEnd Gateway::Serve(const ViewerRequest& request, http::WebSocket& socket) {
  SessionEnd end;
  auto finish = [&](int code, std::string reason) {
    end.close_code = code;
    end.reason = ShortReason(reason);
    socket.Close(code, end.reason);
    return end;
  };
  // Counted as unauthenticated from the start (in the same step as active_, so a caller that
  // sees a session active sees it counted) until its token is accepted.
  bool over_cap;
  {
    std::lock_guard lock(mu_);
    ++active_;
    over_cap = unauthenticated_ >= options_.max_unauthenticated;
    if (!over_cap) ++unauthenticated_;
  }
  struct Count {
    Gateway* g;
    bool unauthenticated;
    void Authenticated() {
      std::lock_guard lock(g->mu_);
      if (unauthenticated) --g->unauthenticated_;
      unauthenticated = false;
    }
    ~Count() {
      std::lock_guard lock(g->mu_);
      --g->active_;
      if (unauthenticated) --g->unauthenticated_;
    }
  } count{this, !over_cap};
  if (over_cap) {
    // Dropped at once: a peer that never answers the close frame must not hold its connection
    // (and, under agvisord, one of the server's connection slots) for the close handshake.
    end.close_code = kCloseTryAgainLater;
    end.reason = ShortReason("too many viewers are sending their token right now (" +
                             std::to_string(options_.max_unauthenticated) + " at most): try again");
    socket.CloseAtOnce(end.close_code, end.reason);
    return end;
  }

  if (!(options_.allow_same_origin && request.same_origin) && !OriginAllowed(request.origin)) {
    return finish(kCloseOriginRefused,
                  "origin " + request.origin + " may not open desktops (allow it on the gateway)");
  }
  Watchdog watchdog(socket, options_.handshake_timeout);

  // 1. The token: from the query, or the first message.
  std::string token = request.token;
  if (token.empty()) {
    auto first = socket.Receive();
    if (!first.ok() || !first->has_value()) {
      return finish(kCloseViewerProtocol, watchdog.fired()
                                              ? "no desktop token in time"
                                              : "the viewer left before sending its token");
    }
    if ((*first)->binary) {
      return finish(kCloseViewerProtocol,
                    "send the desktop token first, as a text message (or as ?token=)");
    }
    token = std::move((*first)->data);
  }
  auto payload = desktop::VerifyToken(options_.key, token);
  if (!payload.ok()) {
    return finish(payload.error().code() == ErrorCode::kPermissionDenied ? kCloseTokenRejected
                                                                         : kCloseInternal,
                  payload.error().message());
  }
  if (payload->type != "vnc") {
    return finish(kCloseUnsupportedType,
                  "this gateway serves vnc desktops only; a \"" + payload->type.substr(0, 16) +
                      "\" token (the seed's rdp) is not served: mint a vnc token");
  }
  count.Authenticated();
  socket.MarkAuthenticated();
  const desktop::VncTarget& target = payload->vnc;
  end.container = target.container;

  // 2. The sandbox's VNC server, through its agent channel.
  auto sandbox = OpenSandbox(target);
  if (!sandbox.ok()) {
    return finish(kCloseSandboxUnavailable,
                  "sandbox " + target.container + ": " + sandbox.error().message());
  }
  auto port = (*sandbox)->OpenPort(target.port);
  if (!port.ok()) {
    return finish(kCloseSandboxUnavailable,
                  "sandbox " + target.container + " has no desktop running (VNC port " +
                      std::to_string(target.port) + "): " + port.error().message());
  }
  PortStream& vnc = **port;
  std::array<char, 64 * 1024> buf;

  // 3. RFB towards the sandbox: VNC authentication with the token's password.
  vnc::RfbClientHandshake client(target.password);
  for (bool done = false; !done;) {
    auto n = vnc.Read(buf);
    if (!n.ok() || *n == 0) {
      return finish(kCloseSandboxUnavailable, "sandbox " + target.container +
                                                  ": the VNC server closed the connection" +
                                                  (n.ok() ? "" : ": " + n.error().message()));
    }
    auto step = client.Feed(std::string_view(buf.data(), *n));
    if (!step.ok()) {
      return finish(kCloseSandboxUnavailable,
                    "sandbox " + target.container + ": " + step.error().message());
    }
    if (!step->send.empty() && !vnc.Write(step->send).ok()) {
      return finish(kCloseSandboxUnavailable,
                    "sandbox " + target.container + ": the VNC connection broke");
    }
    done = step->done;
  }

  // 4. RFB towards the browser: security type None.
  vnc::RfbServerHandshake server;
  if (!socket.Send(vnc::RfbServerHandshake::Greeting(), true).ok()) {
    return finish(kCloseNormal, "the viewer left");
  }
  for (bool done = false; !done;) {
    auto msg = socket.Receive();
    if (!msg.ok() || !msg->has_value()) {
      return finish(kCloseViewerProtocol, watchdog.fired()
                                              ? "the viewer's handshake timed out"
                                              : "the viewer left during the handshake");
    }
    if (!(*msg)->binary) {
      return finish(kCloseViewerProtocol, "the viewer sent text: RFB needs binary messages");
    }
    auto step = server.Feed((*msg)->data);
    if (!step.ok()) return finish(kCloseViewerProtocol, step.error().message());
    if (!step->send.empty() && !socket.Send(step->send, true).ok()) {
      return finish(kCloseNormal, "the viewer left");
    }
    done = step->done;
  }
  watchdog.Disarm();
  if (watchdog.fired()) return finish(kCloseViewerProtocol, "the viewer's handshake timed out");

  // 5. Relay. Bytes either side sent past its handshake go first.
  if (!server.leftover().empty() && !vnc.Write(server.leftover()).ok()) {
    return finish(kCloseSandboxEnded, "sandbox " + target.container + ": the desktop ended");
  }
  if (!client.leftover().empty() && !socket.Send(client.leftover(), true).ok()) {
    return finish(kCloseNormal, "the viewer left");
  }
  std::atomic<bool> viewer_left{false};
  std::atomic<std::uint64_t> from_viewer{0};
  std::thread up([&] {
    for (;;) {
      auto msg = socket.Receive();
      if (!msg.ok() || !msg->has_value()) break;
      if (!(*msg)->binary) continue;  // RFB is binary; nothing to do with text
      from_viewer += (*msg)->data.size();
      if (!vnc.Write((*msg)->data).ok()) break;
    }
    viewer_left = true;
    // Half-close: the VNC server reads end of file and closes, which ends the down direction.
    (void)vnc.CloseWrite();
  });
  Result<std::size_t> n = std::size_t{0};
  bool viewer_gone = false;
  for (;;) {
    n = vnc.Read(buf);
    if (!n.ok() || *n == 0) break;
    if (!socket.Send(std::string_view(buf.data(), *n), true).ok()) {
      viewer_gone = true;
      break;
    }
    end.bytes_to_viewer += *n;
  }
  if (viewer_gone || viewer_left) {
    finish(kCloseNormal, "the viewer left");
  } else {
    // Why did the desktop end? Ask Docker whether the sandbox still runs. A stopping sandbox
    // closes its VNC server first (SIGTERM) and ends a moment later: look for a few seconds
    // before blaming the VNC server alone.
    std::string why = "the desktop's VNC server closed the connection";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (;;) {
      auto info = (*sandbox)->Info();
      if (!info.ok()) {
        why = info.error().code() == ErrorCode::kNotFound ? "the sandbox was removed"
                                                          : "the sandbox ended";
        break;
      }
      if (!info->running) {
        why = "the sandbox ended";
        if (info->end_reason != EndReason::kNone) {
          why += " (" + std::string(EndReasonName(info->end_reason)) + ")";
        }
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    finish(kCloseSandboxEnded, "sandbox " + target.container + ": " + why);
  }
  up.join();
  vnc.Close();
  end.bytes_from_viewer = from_viewer;
  return end;
}

}  // namespace agvisor::gateway
