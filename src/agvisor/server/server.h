// agvisord's HTTP/1.1 + WebSocket server: listeners (a unix socket, optionally loopback TCP),
// connection threads, bearer-token auth, request limits and timeouts, JSON-line access logs,
// graceful shutdown. Routes go to a Service (service.h) or to extensions registered at start.
//
// Used by daemon.cc (the agvisord binary) and the server's component tests. Boost.Beast stays in
// server.cc: handlers see the Beast-free HttpRequest / HttpResponse / WebSocket below.
//
// Threading: Run() accepts on the calling thread; each connection gets a thread of its own (at
// most ServerOptions::max_connections; one more is answered 503 and closed). A WebSocket adds an
// I/O thread while it is open. Handlers run on the connection thread and may block (the library
// is synchronous). An exception out of a handler ends that connection only (a 500 when nothing
// of the answer was sent yet), logged; the daemon serves on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/api/router.h"
#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/http/websocket.h"

namespace agvisor::server {

struct HttpRequest {
  std::string method;
  std::string target;                          // origin-form, as received
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

using http::WebSocket;  // an accepted WebSocket, as handlers see it (http/websocket.h)
using http::WsMessage;  // one message of a WebSocket

// The body of a streaming route's request, read as it arrives, and its answer, written as it is
// made (RouteDef::streaming). Used on the connection thread only.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  // The next at most buf.size() bytes of the request body; 0 once it ended. An `Expect:
  // 100-continue` is answered by the first call. Errors: kResourceExhausted (longer than
  // ServerOptions::max_body_bytes: the server answers 413), kTimeout (no byte for body_timeout),
  // kUnavailable (the client went away).
  virtual Result<std::size_t> ReadBody(std::span<char> buf) = 0;
  // Sends the status line and headers of a chunked answer; the body follows with WriteBody. Once
  // this was called, the HttpResponse the handler returns only says how the body ended: a status
  // below 400 ends it properly, any other status breaks the connection off without the final
  // chunk, so the client sees a truncated body rather than a complete-looking one. Errors:
  // kUnavailable.
  virtual Result<void> BeginBody(int status, std::string_view content_type) = 0;
  // One piece of the body. Errors: kUnavailable, kTimeout (the client stopped reading).
  virtual Result<void> WriteBody(std::string_view bytes) = 0;
};

// A connection handed over whole to a front end (Server::SetHostRoute): the request's head as
// it came (request line and header fields, in order, ending with the empty line), the bytes the
// server had read past it, and the socket (blocking). The handler owns the socket.
struct RawConnection {
  std::string head;
  std::string buffered;
  UniqueFd fd;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&, const api::RouteMatch&)>;
using StreamHandler =
    std::function<HttpResponse(const HttpRequest&, const api::RouteMatch&, HttpStream&)>;
using WsHandler = std::function<void(const HttpRequest&, const api::RouteMatch&, WebSocket&)>;

struct ServerOptions {
  std::string unix_path;      // "" = no unix socket
  std::string tcp_listen;     // "127.0.0.1:PORT" (PORT 0 = any), "" = no TCP
  bool allow_remote = false;  // allow a non-loopback tcp_listen address
  std::string token;          // the bearer token every route with auth=true needs
  // Each a thread (two for a WebSocket). A client's exec is a WebSocket of its own, so 30
  // concurrent exec loops hold 30 and, on saturated cores, some more that are still closing
  // (issue 36: at 64, such a run was refused thousands of times a minute).
  std::size_t max_connections = 256;
  // Connections that have not yet sent a request with the right token (new ones included). At
  // the bound, a new connection closes the oldest of them: a local client that opens connections
  // and sends nothing cannot keep the others out. Above the clients' concurrency: a burst of
  // execs arrives together and waits for CPU before its headers are read (issue 36: at 16, 30
  // exec loops lost the oldest of their connections as "unauthenticated").
  std::size_t max_unauthenticated = 64;
  // An unauthenticated connection's request header must be complete this long after the
  // connection began waiting for it (authenticated keep-alive connections: idle_timeout).
  std::chrono::seconds header_timeout{10};
  // A WebSocket upgrade without an Authorization header (a browser cannot set one) is accepted,
  // and its first message must be {"type":"auth","token":"..."} (at most kWsAuthMessageBytes)
  // within this long, or the socket is closed with a reason (kCloseWsAuth*).
  std::chrono::seconds ws_auth_timeout{10};
  std::size_t max_body_bytes = 256u << 20;  // larger bodies: 413
  std::chrono::seconds idle_timeout{60};    // keep-alive connection without a request
  std::chrono::seconds body_timeout{300};   // reading one request body
  std::chrono::seconds shutdown_grace{10};  // requests in flight may finish for this long
};

// The first-message authentication of WebSockets (ServerOptions::ws_auth_timeout): its bound and
// the close codes it ends with (4000-4999: private use, RFC 6455 section 7.4.2; the reason says
// what to send).
inline constexpr std::size_t kWsAuthMessageBytes = 4096;
inline constexpr int kCloseWsAuthRejected = 4001;  // the token is wrong
inline constexpr int kCloseWsAuthProtocol = 4006;  // no auth message in time, or not that shape
inline constexpr int kCloseWsAuthTooBig = 1009;    // longer than kWsAuthMessageBytes

// Whether a browser's Origin header names the server the request was sent to (`host`: the Host
// header): "http://" or "https://" + host, compared without case. A WebSocket from a page of
// another origin is refused (403) on every route that needs the token.
bool OriginMatchesHost(std::string_view origin, std::string_view host);

// Parses "HOST:PORT" for --listen; refuses addresses that are not loopback unless
// `allow_remote`. Errors: kInvalidArgument (says why and what is accepted).
Result<std::pair<std::string, std::uint16_t>> ParseListen(std::string_view spec, bool allow_remote);

// Whether `authorization` ("Bearer <token>") carries `token`: compared in constant time.
bool BearerMatches(std::string_view authorization, std::string_view token);
// Whether `given` is `secret`, in a time that does not depend on where they differ (both are
// hashed first). An empty secret matches only an empty `given`: callers refuse empty secrets.
bool SecretsEqual(std::string_view given, std::string_view secret);

class Server {
 public:
  // Binds the listeners (a live unix socket at the path is refused: another daemon runs; a
  // stale one is replaced; the new socket is mode 0600). Errors: kInvalidArgument,
  // kConflict (another daemon), kPermissionDenied / kUnavailable (bind failures, with errno).
  static Result<std::unique_ptr<Server>> Bind(ServerOptions options);
  ~Server();

  // Routes: `http` serves the non-WebSocket routes, `ws` the WebSocket ones (both required
  // before Run). Extensions: a route + handler of its own (e.g. the desktop gateway's
  // WebSocket). Errors: as Router::AddExtension.
  void SetHandlers(HttpHandler http, WsHandler ws);
  // The built-in routes with RouteDef::streaming (the archive routes, GET files); without it they
  // answer 501.
  void SetStreamHandler(StreamHandler stream);
  Result<void> AddHttpRoute(const api::RouteDef& def, HttpHandler handler);
  Result<void> AddWebSocketRoute(const api::RouteDef& def, WsHandler handler);
  // An extension that reads its body and writes its answer as they flow (RouteDef::streaming is
  // set for it), e.g. /mcp answering with an event stream.
  Result<void> AddStreamRoute(const api::RouteDef& def, StreamHandler handler);

  // A credential of a front end's own (E2B's API key and envd tokens, e2b/mount.h) on its routes
  // with auth=false: a request for which `shows_credential` answers true makes its connection
  // authenticated, as the bearer token does (never evicted by max_unauthenticated, the idle
  // timeout instead of the header timeout). The route's handler still checks the credential
  // itself; this only keeps the connection bookkeeping. Call before Run.
  void AddCredential(std::function<bool(const HttpRequest&)> shows_credential);

  // Requests for host names of a front end's own (the E2B door's PORT-ID.DOMAIN, e2b/mount.h):
  // when `claims` says a request's Host is one (before any route or token check: the handler
  // decides who may pass), the connection goes to `handler` as it is (RawConnection) on the
  // connection's thread, e.g. to relay it into a sandbox's port, HTTP and WebSocket alike; it
  // counts as authenticated (the handler refuses what it must, by answering on the socket), and
  // the server serves nothing more on it. At shutdown its socket is shut down. Call before Run.
  void SetHostRoute(std::function<bool(const HttpRequest&)> claims,
                    std::function<void(const HttpRequest&, RawConnection)> handler);

  // A front end's own error shape for requests under its path prefix (the E2B door's "/e2b")
  // that no route takes: `answer(request, status, message)` makes the 404 (no such path) or 405
  // (not with this method; the message lists the methods) instead of agvisord's shape. Call before
  // Run.
  using MissAnswer =
      std::function<HttpResponse(const HttpRequest&, int status, std::string_view message)>;
  void SetMissAnswer(std::string prefix, MissAnswer answer);

  // The bound TCP port (0 when there is no TCP listener).
  std::uint16_t tcp_port() const { return tcp_port_; }
  const api::Router& router() const { return router_; }

  // Accepts and serves until Shutdown; then stops accepting, lets requests in flight finish for
  // up to shutdown_grace, closes WebSockets with 1001 "agvisord is shutting down", and returns
  // the number of connections still open at the deadline.
  std::size_t Run();
  // Thread-safe (not async-signal-safe: call it from a signal-waiting thread).
  void Shutdown();

  struct Conn;

 private:
  explicit Server(ServerOptions options);
  void Serve(int fd, int family, std::uint64_t id);
  // The body of Serve: reads requests and answers them until the connection ends.
  void ServeConnection(int fd, int family, Conn& conn);

  ServerOptions options_;
  api::Router router_;
  HttpHandler http_;
  WsHandler ws_;
  StreamHandler stream_;
  // Keyed by ExtensionKey (method + path).
  static std::string ExtensionKey(const api::RouteDef& def);
  // Adds `def` to the router and its handler to `handlers` (one of the three maps below).
  template <typename Handler>
  Result<void> AddExtension(const api::RouteDef& def, std::map<std::string, Handler>& handlers,
                            Handler handler);
  std::vector<std::function<bool(const HttpRequest&)>> credentials_;
  std::function<bool(const HttpRequest&)> host_claims_;
  std::function<void(const HttpRequest&, RawConnection)> host_handler_;
  std::vector<std::pair<std::string, MissAnswer>> miss_answers_;  // by path prefix
  std::map<std::string, HttpHandler> ext_http_;
  std::map<std::string, WsHandler> ext_ws_;
  std::map<std::string, StreamHandler> ext_stream_;
  std::vector<std::unique_ptr<api::RouteDef>> ext_defs_;
  UniqueFd unix_fd_, tcp_fd_, wake_fd_;
  std::uint16_t tcp_port_ = 0;

  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::map<std::uint64_t, std::shared_ptr<Conn>> conns_;
};

}  // namespace agvisor::server
