// Boost.Beast stays in this file. Each viewer's connection thread reads the upgrade request and
// accepts the WebSocket synchronously, then an I/O thread runs a private io_context while the
// gateway blocks in Send/Receive, which post asynchronous operations to it: Beast allows one
// read and one write in flight at once, which its synchronous calls from two threads would not.
#include "agvisor/gateway/listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <cerrno>
#include <future>

#include "agvisor/base/accept.h"

namespace agvisor::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace bws = beast::websocket;
using tcp = net::ip::tcp;

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The value of query parameter `name` in an origin-form target ("" when absent), with %XX
// decoded. '+' stays '+' (a token is base64: '+' is a letter of its alphabet).
std::string QueryParam(std::string_view target, std::string_view name) {
  auto q = target.find('?');
  if (q == std::string_view::npos) return "";
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    auto eq = pair.find('=');
    if (eq == std::string_view::npos || pair.substr(0, eq) != name) continue;
    std::string_view v = pair.substr(eq + 1);
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '%' && i + 2 < v.size() && HexValue(v[i + 1]) >= 0 && HexValue(v[i + 2]) >= 0) {
        out += static_cast<char>(HexValue(v[i + 1]) * 16 + HexValue(v[i + 2]));
        i += 2;
      } else {
        out += v[i];
      }
    }
    return out;
  }
  return "";
}

}  // namespace

struct Listener::Conn : http::WebSocket {
  net::io_context ioc;
  bws::stream<tcp::socket> ws{ioc};
  std::thread thread;
  std::mutex write_mu;  // one write (message or close) at a time
  std::atomic<bool> closed{false};
  std::atomic<bool> io_running{false};  // the I/O thread runs ioc: operations are posted to it
  std::atomic<bool> finished{false};    // ServeConn returned: the thread may be joined
  beast::flat_buffer rbuf;

  Result<void> Send(std::string_view data, bool binary) override {
    std::lock_guard lock(write_mu);
    if (closed) return Error::Unavailable("viewer: closed");
    std::promise<beast::error_code> done;
    net::post(ioc, [&] {
      ws.binary(binary);
      ws.async_write(net::buffer(data.data(), data.size()),
                     [&](beast::error_code ec, std::size_t) { done.set_value(ec); });
    });
    auto ec = done.get_future().get();
    if (ec) return Error::Unavailable("viewer: send: " + ec.message());
    return Ok();
  }

  Result<std::optional<http::WsMessage>> Receive() override {
    std::promise<beast::error_code> done;
    net::post(ioc, [&] {
      rbuf.clear();
      ws.async_read(rbuf, [&](beast::error_code ec, std::size_t) { done.set_value(ec); });
    });
    auto ec = done.get_future().get();
    if (ec == bws::error::closed) return std::optional<http::WsMessage>();
    if (ec) {
      if (closed) return std::optional<http::WsMessage>();
      return Error::Unavailable("viewer: receive: " + ec.message());
    }
    http::WsMessage m;
    m.binary = ws.got_binary();
    m.data = beast::buffers_to_string(rbuf.data());
    return std::optional<http::WsMessage>(std::move(m));
  }

  void Close(int code, std::string_view reason) override { End(code, reason, true); }
  void CloseAtOnce(int code, std::string_view reason) override { End(code, reason, false); }

  // Sends a close frame, then ends the connection: after the peer's close frame when
  // `await_peer`, else at once (async_close writes its frame as it starts; the shutdown then ends
  // its wait for the peer's).
  void End(int code, std::string_view reason, bool await_peer) {
    std::lock_guard lock(write_mu);
    if (closed.exchange(true)) return;
    if (!io_running) {
      // Not (or no longer) a WebSocket served by the I/O thread: just end the connection.
      ::shutdown(ws.next_layer().native_handle(), SHUT_RDWR);
      return;
    }
    std::promise<void> done;
    net::post(ioc, [&] {
      ws.async_close(bws::close_reason(static_cast<bws::close_code>(code), std::string(reason)),
                     [this, &done, await_peer](beast::error_code) {
                       if (!await_peer) return;
                       beast::error_code ignored;
                       ws.next_layer().shutdown(tcp::socket::shutdown_both, ignored);
                       done.set_value();
                     });
      if (!await_peer) done.set_value();
    });
    done.get_future().wait();
    if (!await_peer) ::shutdown(ws.next_layer().native_handle(), SHUT_RDWR);
  }
};

Result<std::unique_ptr<Listener>> Listener::Start(Gateway& gateway, std::string address,
                                                  std::uint16_t port, bool allow_remote,
                                                  std::size_t max_connections) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    return Error::InvalidArgument("gateway listener: " + address +
                                  " is not an IPv4 address (e.g. 127.0.0.1)");
  }
  if (!allow_remote && (ntohl(addr.sin_addr.s_addr) >> 24) != 127) {
    return Error::InvalidArgument("gateway listener: " + address +
                                  " is not a loopback address; allow it explicitly");
  }
  std::unique_ptr<Listener> l(new Listener(gateway, max_connections));
  l->listen_fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (l->listen_fd_.get() < 0) return Error::FromErrno("gateway listener: socket", errno);
  int one = 1;
  ::setsockopt(l->listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(l->listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return Error::FromErrno("gateway listener: bind " + address + ":" + std::to_string(port),
                            errno);
  }
  if (::listen(l->listen_fd_.get(), 64) != 0) {
    return Error::FromErrno("gateway listener: listen", errno);
  }
  socklen_t len = sizeof addr;
  ::getsockname(l->listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  l->port_ = ntohs(addr.sin_port);
  l->wake_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
  if (l->wake_fd_.get() < 0) return Error::FromErrno("gateway listener: eventfd", errno);
  l->accept_thread_ = std::thread([p = l.get()] { p->AcceptLoop(); });
  return l;
}

Listener::~Listener() {
  stopping_ = true;
  std::uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof one);
  if (accept_thread_.joinable()) accept_thread_.join();
  std::vector<std::shared_ptr<Conn>> conns;
  {
    std::lock_guard lock(mu_);
    conns = conns_;
  }
  for (auto& c : conns) c->Close(1001, "the gateway is shutting down");
  for (auto& c : conns) {
    if (c->thread.joinable()) c->thread.join();
  }
}

void Listener::AcceptLoop() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (stopping_ || (fds[1].revents & POLLIN)) return;
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: pause rather than spin on the queued connection (base/accept.h).
      (void)BackOffAfterAcceptError(errno);
      continue;
    }
    std::lock_guard lock(mu_);
    // Join and forget finished connections.
    std::erase_if(conns_, [](const std::shared_ptr<Conn>& c) {
      if (!c->finished) return false;
      c->thread.join();
      return true;
    });
    if (conns_.size() >= max_connections_) {
      // Over the bound: closed before any thread starts (a thread each, for up to the handshake
      // timeout, is what the bound is for).
      ::close(fd);
      continue;
    }
    auto conn = std::make_shared<Conn>();
    beast::error_code ec;
    conn->ws.next_layer().assign(tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      continue;
    }
    conns_.push_back(conn);
    conn->thread = std::thread([this, conn] { ServeConn(conn); });
  }
}

void Listener::ServeConn(const std::shared_ptr<Conn>& conn) {
  beast::flat_buffer buf;
  bhttp::request<bhttp::string_body> req;
  beast::error_code ec;
  struct Done {
    Conn& c;
    ~Done() {
      c.closed = true;
      c.finished = true;
    }
  } mark_done{*conn};
  // The upgrade request must be complete within the handshake timeout: a client that connects
  // and sends nothing (or a byte now and then) would otherwise hold this thread for good, before
  // the gateway's cap on viewers without a token (Gateway::Serve) ever sees it.
  {
    bool late = false;
    net::steady_timer deadline(conn->ioc, gateway_.handshake_timeout());
    deadline.async_wait([&](beast::error_code e) {
      if (e) return;
      late = true;
      beast::error_code ignored;
      conn->ws.next_layer().cancel(ignored);
    });
    bhttp::async_read(conn->ws.next_layer(), buf, req, [&](beast::error_code e, std::size_t) {
      ec = e;
      deadline.cancel();
    });
    conn->ioc.run();
    conn->ioc.restart();
    if (ec || late) {
      // The fd itself goes with the Conn (AcceptLoop's clean-up); the client is told now.
      ::shutdown(conn->ws.next_layer().native_handle(), SHUT_RDWR);
      return;
    }
  }
  if (!bws::is_upgrade(req)) {
    bhttp::response<bhttp::string_body> res{bhttp::status::upgrade_required, req.version()};
    res.set(bhttp::field::content_type, "text/plain");
    res.set(bhttp::field::upgrade, "websocket");
    res.body() = "the desktop gateway speaks WebSocket only\n";
    res.prepare_payload();
    bhttp::write(conn->ws.next_layer(), res, ec);
    return;
  }
  ViewerRequest vr;
  vr.origin = std::string(req[bhttp::field::origin]);
  vr.token = QueryParam(req.target(), "token");
  conn->ws.set_option(bws::stream_base::timeout::suggested(beast::role_type::server));
  conn->ws.read_message_max(1 << 20);
  conn->ws.accept(req, ec);
  if (ec) return;
  // The I/O thread runs while the gateway serves; the work guard keeps it alive between ops.
  auto guard = net::make_work_guard(conn->ioc);
  std::thread io([conn] { conn->ioc.run(); });
  conn->io_running = true;
  if (stopping_) {
    conn->Close(1001, "the gateway is shutting down");
  } else {
    gateway_.Serve(vr, *conn);
  }
  conn->Close(kCloseNormal, "");
  conn->io_running = false;
  guard.reset();
  conn->ioc.stop();
  io.join();
}

}  // namespace agvisor::gateway
