// The only translation units of agvisord that include Boost.Beast are this one and the tests.
//
// Each connection thread owns a private io_context and drives Beast's asynchronous operations on
// it to completion (run + restart): Beast's synchronous API has no timeouts, its asynchronous one
// does (basic_stream::expires_after, websocket timeouts). A WebSocket gets a second thread that
// runs the io_context while the handler blocks in Send/Receive, which post operations to it.
#include "agvisor/server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <cerrno>
#include <cstring>
#include <future>
#include <thread>

#include "agvisor/api/codec.h"
#include "agvisor/base/accept.h"
#include "agvisor/http/ws_sync.h"
#include "agvisor/server/log.h"

namespace agvisor::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace bws = beast::websocket;
using boost::system::error_code;
using Proto = net::generic::stream_protocol;
using Stream = beast::basic_stream<Proto>;
using Clock = std::chrono::steady_clock;

// What Shutdown needs to reach one connection.
struct Server::Conn {
  std::mutex mu;
  std::function<void()> interrupt;  // set by the connection for its current phase; run under mu
  // A duplicate of the socket, for eviction: its own number, so it cannot name another
  // connection's socket after this one closed. Closed when the connection ends (under mu).
  UniqueFd evict_fd;
  bool authenticated = false;  // a request with the right token was seen (under mu)
  bool evicted = false;        // closed by Run() to make room (under mu)
};

namespace {

constexpr std::uint32_t kHeaderLimit = 64 * 1024;
constexpr std::size_t kWsMessageLimit = 16u << 20;

bool IsLoopback(const std::string& host) {
  in_addr a4{};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return false;
}

// Runs the io_context until the operations started on it are done.
void RunAll(net::io_context& ioc) {
  ioc.restart();
  ioc.run();
}

// The Beast WebSocket behind the WebSocket interface: operations are posted to the io thread.
class BeastWebSocket final : public WebSocket {
 public:
  // `on_authenticated`: what MarkAuthenticated does (the server's bookkeeping of its connection).
  BeastWebSocket(net::io_context& ioc, bws::stream<Stream>& ws,
                 std::function<void()> on_authenticated = nullptr)
      : ioc_(ioc), ws_(ws), on_authenticated_(std::move(on_authenticated)) {}

  Result<void> Send(std::string_view data, bool binary) override {
    std::lock_guard lock(send_mu_);
    if (closed_) return Error::Unavailable("websocket: closed");
    error_code ec = http::WriteMessage(ioc_, ws_, data, binary);
    if (ec) return Error::Unavailable("websocket: send: " + ec.message());
    return Ok();
  }

  Result<std::optional<WsMessage>> Receive() override {
    std::lock_guard lock(recv_mu_);
    beast::flat_buffer buf;
    bool binary = false;
    error_code ec = http::ReadMessage(ioc_, ws_, buf, binary);
    if (ec == bws::error::closed || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset) {
      return std::optional<WsMessage>();
    }
    if (ec == beast::error::timeout) return Error::Timeout("websocket: the peer went silent");
    if (ec) return Error::Unavailable("websocket: receive: " + ec.message());
    return std::optional<WsMessage>(WsMessage{binary, beast::buffers_to_string(buf.data())});
  }

  void Close(int code, std::string_view reason) override {
    std::unique_lock lock(send_mu_, std::defer_lock);
    // A sender stuck on a peer that does not read must not hold the close forever.
    for (int i = 0; i < 50 && !lock.try_lock(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!lock.owns_lock()) {
      Abort();
      return;
    }
    if (closed_) return;
    closed_ = true;
    auto done = std::make_shared<std::promise<void>>();
    auto fut = done->get_future();
    std::string why(reason.substr(0, 120));  // a close frame's payload is <= 125 bytes
    net::post(ioc_, [this, done, code, why] {
      ws_.async_close(bws::close_reason(static_cast<bws::close_code>(code), why),
                      [done](error_code) { done->set_value(); });
    });
    if (fut.wait_for(std::chrono::seconds(5)) != std::future_status::ready) Abort();
  }

  void CloseAtOnce(int code, std::string_view reason) override {
    std::unique_lock lock(send_mu_, std::try_to_lock);
    if (!lock.owns_lock() || closed_) {
      Abort();
      return;
    }
    closed_ = true;
    std::string why(reason.substr(0, 120));
    // async_close writes its frame as it starts (nothing else is being written: send_mu_ is
    // ours); the socket then closes under it, so its wait for the peer's frame ends at once.
    std::promise<void> started;
    net::post(ioc_, [&] {
      ws_.async_close(bws::close_reason(static_cast<bws::close_code>(code), why),
                      [](error_code) {});
      started.set_value();
    });
    started.get_future().wait();
    ::shutdown(beast::get_lowest_layer(ws_).socket().native_handle(), SHUT_RDWR);
  }

  void MarkAuthenticated() override {
    if (on_authenticated_) on_authenticated_();
  }

  // Closes the socket: every pending operation ends with an error.
  void Abort() {
    net::post(ioc_, [this] {
      error_code ec;
      beast::get_lowest_layer(ws_).socket().close(ec);
    });
  }

 private:
  net::io_context& ioc_;
  bws::stream<Stream>& ws_;
  std::function<void()> on_authenticated_;
  std::mutex send_mu_, recv_mu_;
  bool closed_ = false;  // guarded by send_mu_
};

// A streaming route's body and answer over the connection's Beast stream (server.h HttpStream).
class BeastHttpStream final : public HttpStream {
 public:
  using BodyParser = bhttp::request_parser<bhttp::buffer_body>;
  BeastHttpStream(net::io_context& ioc, Stream& stream, beast::flat_buffer& buf, BodyParser& parser,
                  unsigned version, std::chrono::seconds timeout, bool expect_continue)
      : ioc_(ioc),
        stream_(stream),
        buf_(buf),
        parser_(parser),
        version_(version),
        timeout_(timeout),
        expect_continue_(expect_continue) {}

  Result<std::size_t> ReadBody(std::span<char> out) override {
    if (out.empty()) return Error::InvalidArgument("read request body: empty buffer");
    if (expect_continue_) {
      expect_continue_ = false;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      AGVISOR_RETURN_IF_ERROR(Write(net::buffer(kContinue.data(), kContinue.size())));
    }
    while (!parser_.is_done()) {
      auto& body = parser_.get().body();
      body.data = out.data();
      body.size = out.size();
      error_code ec;
      stream_.expires_after(timeout_);
      bhttp::async_read_some(stream_, buf_, parser_, [&](error_code e, std::size_t) { ec = e; });
      RunAll(ioc_);
      if (ec == bhttp::error::need_buffer) ec = {};  // `out` is full: not an error
      if (ec == bhttp::error::body_limit) {
        too_large_ = true;
        return Error::ResourceExhausted("read request body: larger than --max-body");
      }
      if (ec == beast::error::timeout) {
        return Error::Timeout("read request body: nothing arrived for " +
                              std::to_string(timeout_.count()) + " s");
      }
      if (ec) return Error::Unavailable("read request body: " + ec.message());
      if (std::size_t n = out.size() - body.size; n > 0) return n;
    }
    return std::size_t{0};
  }

  Result<void> BeginBody(int status, std::string_view content_type) override {
    if (began_) return Error::Internal("BeginBody called twice");
    began_ = true;
    bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(status), version_};
    res.set(bhttp::field::server, "agvisord");
    if (!content_type.empty()) res.set(bhttp::field::content_type, content_type);
    res.chunked(true);
    bhttp::response_serializer<bhttp::empty_body> sr{res};
    error_code ec;
    stream_.expires_after(timeout_);
    bhttp::async_write_header(stream_, sr, [&](error_code e, std::size_t) { ec = e; });
    RunAll(ioc_);
    if (ec) return Error::Unavailable("write response: " + ec.message());
    return Ok();
  }

  Result<void> WriteBody(std::string_view bytes) override {
    if (!began_) return Error::Internal("WriteBody before BeginBody");
    if (bytes.empty()) return Ok();  // an empty chunk would end the body
    return Write(bhttp::make_chunk(net::buffer(bytes.data(), bytes.size())));
  }

  // The last chunk (a body that ended properly).
  Result<void> Finish() { return Write(bhttp::make_chunk_last()); }

  bool began() const { return began_; }
  bool too_large() const { return too_large_; }

 private:
  template <class Buffers>
  Result<void> Write(const Buffers& buffers) {
    error_code ec;
    stream_.expires_after(timeout_);
    net::async_write(stream_, buffers, [&](error_code e, std::size_t) { ec = e; });
    RunAll(ioc_);
    if (ec == beast::error::timeout) {
      return Error::Timeout("write response: the client read nothing for " +
                            std::to_string(timeout_.count()) + " s");
    }
    if (ec) return Error::Unavailable("write response: " + ec.message());
    return Ok();
  }

  net::io_context& ioc_;
  Stream& stream_;
  beast::flat_buffer& buf_;
  BodyParser& parser_;
  unsigned version_;
  std::chrono::seconds timeout_;
  bool expect_continue_;
  bool began_ = false;
  bool too_large_ = false;
};

// Runs a handler; an exception out of it (a library bug, std::bad_alloc, ...) becomes a 500 for
// this request alone and a log line, never the end of the daemon.
template <class F>
HttpResponse Guarded(const HttpRequest& req, F&& handler) {
  std::string what;
  try {
    return handler();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown exception";
  }
  LogEvent("error", "handler threw",
           {{"method", req.method},
            {"path", req.target.substr(0, req.target.find('?'))},
            {"exception", what}});
  return {500,
          "application/json",
          api::ErrorJson(Error::Internal("agvisord: the request failed inside the daemon (" + what +
                                         "); the daemon serves on")),
          {}};
}

// The answer to a request body over --max-body, streamed or not.
HttpResponse PayloadTooLarge(std::size_t max_body_bytes) {
  return {413,
          "application/json",
          api::ErrorJsonSlug("payload_too_large", "the request body is larger than " +
                                                      std::to_string(max_body_bytes) +
                                                      " bytes (agvisord --max-body)"),
          {}};
}

std::string LowerCase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// How the first-message authentication of a WebSocket ended.
struct WsAuthOutcome {
  bool ok = false;
  std::string reason;  // for the log when refused (never the token)
};

// Reads a WebSocket's first message on its I/O thread, at most kWsAuthMessageBytes + one read.
struct FirstMessageReader : std::enable_shared_from_this<FirstMessageReader> {
  explicit FirstMessageReader(bws::stream<Stream>& w) : ws(w) {}
  void Read() {
    ws.async_read_some(net::buffer(chunk),
                       [self = shared_from_this()](error_code e, std::size_t n) {
                         if (!e) {
                           self->message.append(self->chunk.data(), n);
                           if (self->message.size() > kWsAuthMessageBytes) {
                             self->too_big = true;
                           } else if (!self->ws.is_message_done()) {
                             self->Read();
                             return;
                           }
                           self->text = self->ws.got_text();
                         }
                         self->ec = e;
                         self->done.set_value();
                       });
  }
  bws::stream<Stream>& ws;
  std::array<char, 1024> chunk{};
  std::string message;
  bool too_big = false, text = false;
  error_code ec;
  std::promise<void> done;
};

// The first-message authentication of a WebSocket accepted without an Authorization header
// (ServerOptions::ws_auth_timeout): the message must come within `timeout`, be at most
// kWsAuthMessageBytes, and carry the token. A refusal closes `wsock` with a code and a reason
// (server.h kCloseWsAuth*). Called on the connection thread while the I/O thread runs `ioc`.
WsAuthOutcome AuthenticateFirstMessage(net::io_context& ioc, bws::stream<Stream>& ws,
                                       BeastWebSocket& wsock, const std::string& token,
                                       std::chrono::seconds timeout) {
  auto reader = std::make_shared<FirstMessageReader>(ws);
  auto done = reader->done.get_future();
  net::post(ioc, [reader] { reader->Read(); });
  auto refuse = [&](int code, std::string reason) {
    wsock.Close(code, reason);  // a pending read then ends with an error
    done.wait();
    return WsAuthOutcome{false, std::move(reason)};
  };
  if (done.wait_for(timeout) != std::future_status::ready) {
    return refuse(kCloseWsAuthProtocol,
                  R"(unauthenticated: no {"type":"auth","token":...} message within )" +
                      std::to_string(timeout.count()) + " s");
  }
  if (reader->ec) {
    return {false, "the client left before authenticating (" + reader->ec.message() + ")"};
  }
  if (reader->too_big) {
    return refuse(kCloseWsAuthTooBig, "unauthenticated: the first message is over " +
                                          std::to_string(kWsAuthMessageBytes) +
                                          R"( bytes; send {"type":"auth","token":...})");
  }
  if (!reader->text) {
    return refuse(
        kCloseWsAuthProtocol,
        R"(unauthenticated: the first message must be text: {"type":"auth","token":...})");
  }
  auto given = api::ParseWsAuthMessage(reader->message);
  if (!given.ok()) {
    std::string why = "unauthenticated: " + given.error().message();
    if (why.size() > 123) why = why.substr(0, 120) + "...";
    return refuse(kCloseWsAuthProtocol, why);
  }
  if (!BearerMatches("Bearer " + *given, token)) {
    return refuse(kCloseWsAuthRejected,
                  "unauthenticated: the token is wrong (see the token file agvisord printed at "
                  "start: --token-file)");
  }
  return {true, ""};
}

// The SetMissAnswer of the prefix `target`'s path is under ("/e2b" takes "/e2b", "/e2b/x" and
// "/e2b?q", not "/e2bx"), or null.
const Server::MissAnswer* MissAnswerFor(
    const std::vector<std::pair<std::string, Server::MissAnswer>>& answers,
    std::string_view target) {
  for (const auto& [prefix, answer] : answers) {
    if (!target.starts_with(prefix)) continue;
    const std::string_view rest = target.substr(prefix.size());
    if (rest.empty() || rest.front() == '/' || rest.front() == '?') return &answer;
  }
  return nullptr;
}

}  // namespace

bool OriginMatchesHost(std::string_view origin, std::string_view host) {
  if (host.empty()) return false;
  const std::string o = LowerCase(origin), h = LowerCase(host);
  return o == "http://" + h || o == "https://" + h;
}

Result<std::pair<std::string, std::uint16_t>> ParseListen(std::string_view spec,
                                                          bool allow_remote) {
  auto colon = spec.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Error::InvalidArgument("--listen '" + std::string(spec) +
                                  "': use HOST:PORT, e.g. 127.0.0.1:8080 (PORT 0 = any free port)");
  }
  std::string host(spec.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::string_view port = spec.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != port.npos ||
      std::stoul(std::string(port)) > 65535) {
    return Error::InvalidArgument("--listen '" + std::string(spec) + "': port must be 0..65535");
  }
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, host.c_str(), &a4) != 1 && inet_pton(AF_INET6, host.c_str(), &a6) != 1) {
    return Error::InvalidArgument("--listen '" + std::string(spec) +
                                  "': the host must be an IP address (127.0.0.1 or ::1)");
  }
  if (!IsLoopback(host) && !allow_remote) {
    return Error::InvalidArgument(
        "--listen '" + std::string(spec) +
        "': not a loopback address. agvisord speaks plain HTTP: anyone on the network could read "
        "its token. Listen on 127.0.0.1 (and tunnel, e.g. ssh -L), or pass --allow-remote "
        "behind a TLS proxy");
  }
  return std::make_pair(host, static_cast<std::uint16_t>(std::stoul(std::string(port))));
}

bool BearerMatches(std::string_view authorization, std::string_view token) {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() < kScheme.size() || token.empty()) return false;
  if (LowerCase(authorization.substr(0, kScheme.size())) != "bearer ") return false;
  return SecretsEqual(authorization.substr(kScheme.size()), token);
}

bool SecretsEqual(std::string_view given, std::string_view secret) {
  // Digests of both: equal lengths, so CRYPTO_memcmp's time does not depend on the secret.
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(given.data()), given.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), b);
  return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

void Server::SetHostRoute(std::function<bool(const HttpRequest&)> claims,
                          std::function<void(const HttpRequest&, RawConnection)> handler) {
  host_claims_ = std::move(claims);
  host_handler_ = std::move(handler);
}

void Server::SetMissAnswer(std::string prefix, MissAnswer answer) {
  miss_answers_.emplace_back(std::move(prefix), std::move(answer));
}

void Server::AddCredential(std::function<bool(const HttpRequest&)> shows_credential) {
  credentials_.push_back(std::move(shows_credential));
}

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() {
  if (!options_.unix_path.empty() && unix_fd_) ::unlink(options_.unix_path.c_str());
}

Result<std::unique_ptr<Server>> Server::Bind(ServerOptions options) {
  if (options.unix_path.empty() && options.tcp_listen.empty()) {
    return Error::InvalidArgument("agvisord: nothing to listen on (give --socket or --listen)");
  }
  if (options.token.empty()) return Error::InvalidArgument("agvisord: empty token");
  std::unique_ptr<Server> s(new Server(options));
  if (!options.unix_path.empty()) {
    const std::string& path = options.unix_path;
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path) {
      return Error::InvalidArgument("socket path '" + path + "' is too long (max " +
                                    std::to_string(sizeof addr.sun_path - 1) + " bytes)");
    }
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Error::FromErrno("socket(AF_UNIX)", errno);
    // A socket file that answers belongs to a running daemon; one that does not is stale.
    {
      UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        return Error::Conflict("another agvisord is listening on " + path +
                               " (stop it, or give --socket another path)");
      }
      if (errno == ECONNREFUSED) ::unlink(path.c_str());
    }
    mode_t old = ::umask(0177);  // the socket is created 0600: its owner only
    int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    int err = errno;
    ::umask(old);
    if (rc != 0) return Error::FromErrno("bind " + path, err);
    if (::listen(fd.get(), 128) != 0) return Error::FromErrno("listen " + path, errno);
    s->unix_fd_ = std::move(fd);
  }
  if (!options.tcp_listen.empty()) {
    auto [host, port] = AGVISOR_TRY(ParseListen(options.tcp_listen, options.allow_remote));
    sockaddr_storage ss{};
    socklen_t len = 0;
    int family = AF_INET;
    if (in_addr a4{}; inet_pton(AF_INET, host.c_str(), &a4) == 1) {
      auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
      sin->sin_family = AF_INET;
      sin->sin_port = htons(port);
      sin->sin_addr = a4;
      len = sizeof *sin;
    } else {
      family = AF_INET6;
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
      sin6->sin6_family = AF_INET6;
      sin6->sin6_port = htons(port);
      inet_pton(AF_INET6, host.c_str(), &sin6->sin6_addr);
      len = sizeof *sin6;
    }
    UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Error::FromErrno("socket(tcp)", errno);
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      return Error::FromErrno("bind " + options.tcp_listen, errno);
    }
    if (::listen(fd.get(), 128) != 0)
      return Error::FromErrno("listen " + options.tcp_listen, errno);
    sockaddr_storage bound{};
    socklen_t blen = sizeof bound;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &blen);
    s->tcp_port_ = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    s->tcp_fd_ = std::move(fd);
  }
  s->wake_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->wake_fd_) return Error::FromErrno("eventfd", errno);
  return s;
}

// Extensions are found by method and path: the route table is a vector that moves its entries
// as routes are added, so pointers into it would not last.
std::string Server::ExtensionKey(const api::RouteDef& def) {
  return std::string(def.method) + " " + std::string(def.path);
}

void Server::SetHandlers(HttpHandler http, WsHandler ws) {
  http_ = std::move(http);
  ws_ = std::move(ws);
}

void Server::SetStreamHandler(StreamHandler stream) { stream_ = std::move(stream); }

template <typename Handler>
Result<void> Server::AddExtension(const api::RouteDef& def,
                                  std::map<std::string, Handler>& handlers, Handler handler) {
  AGVISOR_RETURN_IF_ERROR(router_.AddExtension(def));
  handlers[ExtensionKey(router_.routes().back())] = std::move(handler);
  return Ok();
}

Result<void> Server::AddHttpRoute(const api::RouteDef& def, HttpHandler handler) {
  return AddExtension(def, ext_http_, std::move(handler));
}

Result<void> Server::AddStreamRoute(const api::RouteDef& def, StreamHandler handler) {
  api::RouteDef d = def;
  d.streaming = true;
  return AddExtension(d, ext_stream_, std::move(handler));
}

Result<void> Server::AddWebSocketRoute(const api::RouteDef& def, WsHandler handler) {
  api::RouteDef d = def;
  d.websocket = true;
  return AddExtension(d, ext_ws_, std::move(handler));
}

void Server::Shutdown() {
  if (stopping_.exchange(true)) return;
  std::uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof one);
}

std::size_t Server::Run() {
  std::uint64_t next_id = 1;
  bool short_of_fds = false;  // logged once per shortage
  while (!stopping_) {
    pollfd pfds[3];
    int n = 0;
    pfds[n++] = {wake_fd_.get(), POLLIN, 0};
    if (unix_fd_) pfds[n++] = {unix_fd_.get(), POLLIN, 0};
    if (tcp_fd_) pfds[n++] = {tcp_fd_.get(), POLLIN, 0};
    if (::poll(pfds, static_cast<nfds_t>(n), -1) < 0) {
      if (errno == EINTR) continue;
      LogEvent("error", "poll failed", {{"errno", std::strerror(errno)}});
      break;
    }
    for (int i = 1; i < n; ++i) {
      if (!(pfds[i].revents & POLLIN)) continue;
      int family = pfds[i].fd == unix_fd_.get() ? AF_UNIX : AF_INET;
      if (pfds[i].fd == tcp_fd_.get()) {
        sockaddr_storage ss{};
        socklen_t l = sizeof ss;
        ::getsockname(tcp_fd_.get(), reinterpret_cast<sockaddr*>(&ss), &l);
        family = ss.ss_family;
      }
      int fd = ::accept4(pfds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        // Out of descriptors: pause rather than spin on the queued connection (base/accept.h).
        if (BackOffAfterAcceptError(err) && !short_of_fds) {
          short_of_fds = true;
          LogEvent("warn", "accept: out of file descriptors or memory; pausing between tries",
                   {{"errno", std::strerror(err)}});
        }
        continue;
      }
      short_of_fds = false;
      std::unique_lock lock(mu_);
      if (conns_.size() >= options_.max_connections) {
        lock.unlock();
        static constexpr std::string_view kBusy =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            "Connection: close\r\nContent-Length: 96\r\n\r\n"
            "{\"error\":{\"code\":\"unavailable\",\"message\":\"agvisord: too many connections; "
            "try again later\"}}";
        (void)!::send(fd, kBusy.data(), kBusy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::close(fd);
        LogEvent("warn", "connection refused: too many connections",
                 {{"max_connections", std::to_string(options_.max_connections)}});
        continue;
      }
      // Unauthenticated connections beyond the bound: the oldest of them goes (ids grow with
      // time). shutdown(2) makes its pending read end at once; its thread cleans up.
      std::size_t unauthenticated = 0;
      std::shared_ptr<Conn> oldest;
      for (auto& [cid, c] : conns_) {
        std::lock_guard clock(c->mu);
        if (c->authenticated || c->evicted) continue;
        ++unauthenticated;
        if (!oldest) oldest = c;
      }
      if (unauthenticated >= options_.max_unauthenticated && oldest) {
        std::lock_guard clock(oldest->mu);
        if (!oldest->authenticated && oldest->evict_fd) {
          oldest->evicted = true;
          ::shutdown(oldest->evict_fd.get(), SHUT_RDWR);
          LogEvent("warn", "unauthenticated connection closed to make room",
                   {{"max_unauthenticated", std::to_string(options_.max_unauthenticated)}});
        }
      }
      std::uint64_t id = next_id++;
      auto conn = std::make_shared<Conn>();
      conn->evict_fd = UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
      conns_[id] = conn;
      lock.unlock();
      std::thread([this, fd, family, id] { Serve(fd, family, id); }).detach();
    }
  }
  // Stop accepting: the unix socket file goes first, so new clients fail fast.
  if (unix_fd_) ::unlink(options_.unix_path.c_str());
  unix_fd_.reset();
  tcp_fd_.reset();
  std::vector<std::shared_ptr<Conn>> conns;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, c] : conns_) conns.push_back(c);
  }
  LogEvent("info", "shutting down", {{"connections", std::to_string(conns.size())}});
  std::vector<std::thread> interrupts;
  for (auto& c : conns) {
    // The interrupt runs under the connection's lock: its captures (the WebSocket, the stream)
    // live on the Serve thread's stack, and Serve clears the interrupt under the same lock
    // before it destroys them. Called on a copy outside the lock, it raced a connection that
    // was ending on its own and closed a WebSocket already gone.
    interrupts.emplace_back([c] {
      std::lock_guard lock(c->mu);
      if (c->interrupt) c->interrupt();
    });
  }
  for (auto& t : interrupts) t.join();
  std::unique_lock lock(mu_);
  idle_cv_.wait_for(lock, options_.shutdown_grace, [&] { return conns_.empty(); });
  return conns_.size();
}

void Server::Serve(int raw_fd, int family, std::uint64_t id) {
  std::shared_ptr<Conn> conn;
  {
    std::lock_guard lock(mu_);
    conn = conns_[id];
  }
  try {
    ServeConnection(raw_fd, family, *conn);
  } catch (const std::exception& e) {
    // Beast or the parser threw outside any handler: this connection ends (its socket closed as
    // the stack unwound), the others go on.
    LogEvent("error", "connection ended by an exception", {{"exception", e.what()}});
  } catch (...) {
    LogEvent("error", "connection ended by an exception", {{"exception", "unknown"}});
  }
  {
    std::lock_guard lock(conn->mu);
    conn->interrupt = nullptr;
    conn->evict_fd.reset();
  }
  std::lock_guard lock(mu_);
  conns_.erase(id);
  idle_cv_.notify_all();
}

void Server::ServeConnection(int raw_fd, int family, Conn& conn_ref) {
  Conn* conn = &conn_ref;
  net::io_context ioc(1);
  {
    Proto::socket sock(ioc);
    error_code ec;
    sock.assign(Proto(family, 0), raw_fd, ec);
    // Streamed answers are many small writes (chunks, events): without this, Nagle's algorithm
    // holds each behind the peer's delayed ACK of the one before (up to 40 ms on Linux).
    if (error_code ignored; !ec && family != AF_UNIX) {
      sock.set_option(net::ip::tcp::no_delay(true), ignored);
    }
    if (ec) {
      ::close(raw_fd);
    } else {
      Stream stream(std::move(sock));
      bool moved = false;  // the stream went into a WebSocket
      beast::flat_buffer buf;
      // Writes a whole (non-streaming) answer.
      auto write_response = [&](HttpResponse& resp, unsigned version, bool keep_alive) {
        bhttp::response<bhttp::string_body> out{static_cast<bhttp::status>(resp.status), version};
        out.set(bhttp::field::server, "agvisord");
        if (!resp.content_type.empty() && resp.status != 204) {
          out.set(bhttp::field::content_type, resp.content_type);
        }
        for (const auto& [k, v] : resp.headers) out.set(k, v);
        out.keep_alive(keep_alive);
        if (resp.status != 204) out.body() = std::move(resp.body);
        out.prepare_payload();
        error_code wec;
        stream.expires_after(options_.body_timeout);
        bhttp::async_write(stream, out, [&](error_code e, std::size_t) { wec = e; });
        RunAll(ioc);
        return wec;
      };
      auto log_request = [](const HttpRequest& req, int status, Clock::time_point start) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
        std::string path = req.target.substr(0, req.target.find('?'));
        LogEvent(status >= 500 ? "error" : "info", "request",
                 {{"method", req.method},
                  {"path", path},
                  {"status", std::to_string(status)},
                  {"ms", std::to_string(ms.count())}});
      };
      auto set_interrupt = [&](std::function<void()> f) {
        std::lock_guard lock(conn->mu);
        conn->interrupt = std::move(f);
      };
      // However this scope ends (a return, or an exception from Beast or the parser), the
      // interrupt, which refers to `ioc` and `stream` here, is gone before they are: a Shutdown
      // at that moment must not post to a destroyed io_context.
      struct ClearInterrupt {
        Conn* conn;
        ~ClearInterrupt() {
          std::lock_guard lock(conn->mu);
          conn->interrupt = nullptr;
        }
      } clear_interrupt{conn};
      // While waiting for a request: Shutdown cancels the read.
      // (The cancel runs on this thread's io_context, later: by then the stream may have moved
      // into a WebSocket, which has its own interrupt.)
      set_interrupt([&] {
        net::post(ioc, [&] {
          if (!moved) stream.cancel();
        });
      });
      for (;;) {
        if (stopping_) break;
        bhttp::request_parser<bhttp::string_body> parser;
        parser.header_limit(kHeaderLimit);
        parser.body_limit(options_.max_body_bytes);
        error_code rec;
        bool authenticated = false;
        {
          std::lock_guard lock(conn->mu);
          authenticated = conn->authenticated;
        }
        // Before the token was seen, the whole header must come within header_timeout.
        stream.expires_after(authenticated ? options_.idle_timeout : options_.header_timeout);
        bhttp::async_read_header(stream, buf, parser, [&](error_code e, std::size_t) { rec = e; });
        RunAll(ioc);
        if (rec) break;  // closed, idle timeout, shutdown, or garbage: nothing to answer
        auto start = Clock::now();
        auto& hdr = parser.get();
        HttpRequest req;
        req.method = std::string(hdr.method_string());
        req.target = std::string(hdr.target());
        for (const auto& f : hdr) req.headers[LowerCase(f.name_string())] = std::string(f.value());
        bool keep_alive = hdr.keep_alive();

        if (host_claims_ && host_claims_(req)) {
          // ---- A host name of a front end's own: the connection is the handler's ----
          RawConnection raw;
          raw.head = std::string(hdr.method_string()) + " " + std::string(hdr.target()) +
                     (hdr.version() == 10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n");
          for (const auto& f : hdr) {
            raw.head += std::string(f.name_string()) + ": " + std::string(f.value()) + "\r\n";
          }
          raw.head += "\r\n";
          const auto pending = buf.data();
          raw.buffered.assign(static_cast<const char*>(pending.data()), pending.size());
          raw.fd = UniqueFd(::fcntl(stream.socket().native_handle(), F_DUPFD_CLOEXEC, 0));
          // Asio made the socket non-blocking; the handler reads it blocking.
          if (raw.fd) {
            ::fcntl(raw.fd.get(), F_SETFL, ::fcntl(raw.fd.get(), F_GETFL) & ~O_NONBLOCK);
            // The interrupt's own descriptor of the socket: the handler closes raw.fd when it
            // likes, and a number closed there may soon name another connection's socket.
            auto shut = std::make_shared<UniqueFd>(::fcntl(raw.fd.get(), F_DUPFD_CLOEXEC, 0));
            {
              std::lock_guard lock(conn->mu);
              conn->authenticated = true;
            }
            set_interrupt([shut] {
              if (*shut) ::shutdown(shut->get(), SHUT_RDWR);
            });
            (void)Guarded(req, [&] {
              host_handler_(req, std::move(raw));
              return HttpResponse{};
            });
            set_interrupt(nullptr);
          }
          LogEvent("info", "host route",
                   {{"method", req.method},
                    {"host", req.header("host").substr(0, 256)},
                    {"ms", std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              Clock::now() - start)
                                              .count())}});
          break;
        }
        HttpResponse resp;
        const api::RouteDef* route = nullptr;
        api::RouteMatch match;
        bool is_ws = bws::is_upgrade(hdr);
        bool first_message_auth = false;
        bool read_body = true;
        auto m = router_.Match(req.method, req.target);
        if (!m.ok()) {
          const auto& e = m.error();
          const int status =
              e.code() == ErrorCode::kUnsupported ? 405 : api::HttpStatusFor(e.code());
          const auto* own = MissAnswerFor(miss_answers_, req.target);
          if (own && (status == 404 || status == 405)) {
            resp = (*own)(req, status, e.message());
          } else if (status == 405) {
            resp = {
                405, "application/json", api::ErrorJsonSlug("method_not_allowed", e.message()), {}};
          } else {
            resp = {status, "application/json", api::ErrorJson(e), {}};
          }
        } else {
          match = std::move(*m);
          route = match.route;
          // A browser cannot set headers on a WebSocket: without an Authorization header the
          // token is the first message (AuthenticateFirstMessage, after the upgrade).
          first_message_auth =
              route->auth && route->websocket && is_ws && req.header("authorization").empty();
          const std::string origin = req.header("origin");
          if (route->auth && is_ws && !origin.empty() &&
              !OriginMatchesHost(origin, req.header("host"))) {
            // Only pages this server serves itself (the console) may open its WebSockets.
            resp = {403,
                    "application/json",
                    api::ErrorJsonSlug("permission_denied",
                                       "a page of another origin may not open agvisord's "
                                       "WebSockets (only agvisord's own console may)"),
                    {}};
            keep_alive = false;
          } else if (route->auth && !first_message_auth &&
                     !BearerMatches(req.header("authorization"), options_.token)) {
            const bool given = !req.header("authorization").empty();
            resp = {
                401,
                "application/json",
                api::ErrorJsonSlug("unauthenticated",
                                   given ? "the bearer token is wrong (see the token file "
                                           "agvisord printed at start: --token-file)"
                                         : "missing Authorization: Bearer <token> (the token is in "
                                           "the file agvisord printed at start: --token-file)"),
                {{"WWW-Authenticate", "Bearer"}}};
            keep_alive = false;
            // An unauthenticated body is never used; a small one is drained so that closing
            // the connection does not reset it under the client before it reads the answer.
            auto len = parser.content_length();
            read_body = len && *len <= 65536;
          } else {
            if (!authenticated && !first_message_auth &&
                (route->auth || std::any_of(credentials_.begin(), credentials_.end(),
                                            [&](const auto& shows) { return shows(req); }))) {
              std::lock_guard lock(conn->mu);
              conn->authenticated = true;
              authenticated = true;
            }
            if (route->websocket != is_ws) {
              resp = {route->websocket ? 426 : 400,
                      "application/json",
                      api::ErrorJsonSlug(route->websocket ? "upgrade_required" : "invalid_argument",
                                         route->websocket
                                             ? "this route is a WebSocket: send an Upgrade "
                                               "request (RFC 6455)"
                                             : "this route is not a WebSocket"),
                      {}};
              keep_alive = false;
            }
          }
        }
        if (route && resp.body.empty() && is_ws) {
          // ---- WebSocket ----
          set_interrupt(nullptr);
          if (route->auth && !first_message_auth) {
            // The bearer token was seen: never evicted. A route without the server's token (the
            // desktop gateway's) stays unauthenticated, evictable, until its handler accepts its
            // own credential (WebSocket::MarkAuthenticated): upgrades that never send one must
            // not hold connection slots (eviction shuts the socket: its reads end at once).
            std::lock_guard lock(conn->mu);
            conn->authenticated = true;
          }
          moved = true;
          bws::stream<Stream> ws(std::move(stream));
          beast::get_lowest_layer(ws).expires_never();
          auto t = bws::stream_base::timeout::suggested(beast::role_type::server);
          t.idle_timeout = std::chrono::seconds(120);  // with pings every 60 s
          t.keep_alive_pings = true;
          ws.set_option(t);
          ws.read_message_max(kWsMessageLimit);
          http::SendWholeFrames(ws);
          error_code aec;
          ws.async_accept(hdr, [&](error_code e) { aec = e; });
          RunAll(ioc);
          LogEvent("info", "websocket",
                   {{"method", req.method},
                    {"path", std::string(route->path)},
                    {"status", aec ? "400" : "101"}});
          if (aec) break;
          auto guard = net::make_work_guard(ioc);
          ioc.restart();
          std::thread io([&] { ioc.run(); });
          BeastWebSocket wsock(ioc, ws, [conn] {
            std::lock_guard lock(conn->mu);
            conn->authenticated = true;
          });
          set_interrupt([&] { wsock.Close(1001, "agvisord is shutting down"); });
          bool allowed = true;
          if (first_message_auth) {
            auto auth =
                AuthenticateFirstMessage(ioc, ws, wsock, options_.token, options_.ws_auth_timeout);
            allowed = auth.ok;
            if (!allowed) {
              LogEvent("warn", "websocket refused",
                       {{"path", std::string(route->path)}, {"reason", auth.reason}});
            } else {
              std::lock_guard lock(conn->mu);
              conn->authenticated = true;
            }
          }
          auto ext = ext_ws_.find(ExtensionKey(*route));
          if (allowed) {
            (void)Guarded(req, [&] {
              if (ext != ext_ws_.end()) {
                ext->second(req, match, wsock);
              } else {
                ws_(req, match, wsock);
              }
              return HttpResponse{};
            });
          }
          wsock.Close(1000, "");
          set_interrupt(nullptr);
          wsock.Abort();
          guard.reset();
          // After the abort (posted first: one thread runs them in order), the I/O thread
          // stops: a WebSocket whose read ended at EOF (an evicted one) keeps Beast's idle
          // timer pending, which would hold run() until it expired.
          net::post(ioc, [&ioc] { ioc.stop(); });
          io.join();
          LogEvent("info", "websocket closed",
                   {{"path", std::string(route->path)},
                    {"ms", std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              Clock::now() - start)
                                              .count())}});
          break;
        }
        if (route && resp.body.empty() && route->streaming) {
          // ---- A streaming route: the handler reads the body and writes the answer ----
          const unsigned version = hdr.version();
          const bool expect_continue = LowerCase(req.header("expect")) == "100-continue";
          // Beast's body conversion: the header is parsed, the body not yet (`hdr` dangles now).
          BeastHttpStream::BodyParser body_parser(std::move(parser));
          BeastHttpStream hs(ioc, stream, buf, body_parser, version, options_.body_timeout,
                             expect_continue);
          auto ext = ext_stream_.find(ExtensionKey(*route));
          const StreamHandler& handler = ext != ext_stream_.end() ? ext->second : stream_;
          HttpResponse r =
              handler ? Guarded(req, [&] { return handler(req, match, hs); })
                      : HttpResponse{501,
                                     "application/json",
                                     api::ErrorJsonSlug("unsupported", "this route is not served"),
                                     {}};
          if (hs.too_large() && !hs.began()) {
            r = PayloadTooLarge(options_.max_body_bytes);
          }
          // A body the handler did not read to its end leaves the connection unusable.
          keep_alive = keep_alive && body_parser.is_done() && !stopping_;
          bool wrote = true;
          if (hs.began()) {
            wrote = r.status < 400 && hs.Finish().ok();
            if (!wrote) keep_alive = false;  // broken off: the client sees a truncated body
          } else {
            wrote = !write_response(r, version, keep_alive);
          }
          log_request(req, r.status, start);
          if (!wrote || !keep_alive) break;
          continue;
        }
        if (read_body && !parser.is_done()) {
          if (LowerCase(req.header("expect")) == "100-continue" && resp.body.empty()) {
            static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
            error_code wec;
            stream.expires_after(options_.body_timeout);
            net::async_write(stream, net::buffer(kContinue.data(), kContinue.size()),
                             [&](error_code e, std::size_t) { wec = e; });
            RunAll(ioc);
            if (wec) break;
          }
          stream.expires_after(options_.body_timeout);
          bhttp::async_read(stream, buf, parser, [&](error_code e, std::size_t) { rec = e; });
          RunAll(ioc);
          if (rec == bhttp::error::body_limit) {
            resp = PayloadTooLarge(options_.max_body_bytes);
            keep_alive = false;
          } else if (rec) {
            break;
          } else {
            req.body = std::move(parser.get().body());
          }
        }
        if (resp.body.empty() && route) {
          auto ext = ext_http_.find(ExtensionKey(*route));
          resp = Guarded(req, [&] {
            return ext != ext_http_.end() ? ext->second(req, match) : http_(req, match);
          });
        }
        if (stopping_) keep_alive = false;
        error_code wec = write_response(resp, hdr.version(), keep_alive);
        log_request(req, resp.status, start);
        if (wec || !keep_alive) break;
      }
      {
        std::lock_guard lock(conn->mu);
        conn->interrupt = nullptr;
      }
      if (!moved && stream.socket().is_open()) {
        error_code ec2;
        stream.socket().shutdown(net::socket_base::shutdown_send, ec2);
        stream.socket().close(ec2);
      }
    }
  }
}

}  // namespace agvisor::server
