// The WebSockets follow server.cc's pattern: Beast's asynchronous operations run on an
// io_context owned by a thread of their own, and the blocking calls post to it and wait, so a
// reader and a writer may use one stream from two threads (Beast's synchronous calls may not).
#include "agvisor/client/agvisord_api.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "agvisor/api/defaults.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/http/websocket.h"
#include "agvisor/http/ws_sync.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor::client {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bws = beast::websocket;
using boost::system::error_code;

namespace {

constexpr std::size_t kStdinChunk = 256 * 1024;
constexpr auto kArchiveTimeout = std::chrono::hours(24);

std::string Escape(std::string_view id) { return http::UrlEncode(id); }

std::string SandboxPath(std::string_view id) { return "/v1/sandboxes/" + Escape(id); }

std::string StartHint(const http::Endpoint& ep) {
  if (ep.kind == http::Endpoint::Kind::kSsh) {
    std::string who = ep.user.empty() ? ep.host : ep.user + "@" + ep.host;
    if (ep.port != 0) who = "-p " + std::to_string(ep.port) + " " + who;
    return "is agvisord running on " + ep.host + "? start it there: `ssh " + who +
           "`, then as root `agvisord --socket " + ep.path + " &`";
  }
  if (ep.kind == http::Endpoint::Kind::kUnix) {
    return "is agvisord running? start it with `agvisord --socket " + ep.path + "`";
  }
  return "is agvisord running? start it with `agvisord --listen " + ep.host + ":" +
         std::to_string(ep.port) + "`";
}

}  // namespace

// A WebSocket over a unix or TCP socket, with blocking calls usable from two threads.
class WsConnection {
 public:
  using Socket = net::generic::stream_protocol::socket;

  WsConnection() : ws_(Socket(ioc_)) {}
  ~WsConnection() {
    Close();
    Stop();
  }

  bws::stream<Socket>& ws() { return ws_; }
  net::io_context& ioc() { return ioc_; }

  // After the (synchronous) handshake: from now on operations run on the io thread.
  void StartIoThread() {
    guard_.emplace(net::make_work_guard(ioc_));
    ioc_.restart();
    io_ = std::thread([this] { ioc_.run(); });
  }

  Result<void> Send(std::string_view data, bool binary) {
    std::lock_guard lock(send_mu_);
    if (closed_) return Error::Unavailable("agvisord stream: closed");
    error_code ec = http::WriteMessage(ioc_, ws_, data, binary);
    if (ec) return Error::Unavailable("agvisord stream: send: " + ec.message());
    return Ok();
  }

  // The next message; nullopt once the server closed (close_reason() says why).
  Result<std::optional<http::WsMessage>> Receive() {
    std::lock_guard lock(recv_mu_);
    if (ended_) return std::optional<http::WsMessage>();
    beast::flat_buffer buf;
    bool binary = false;
    error_code ec = http::ReadMessage(ioc_, ws_, buf, binary);
    if (ec == bws::error::closed) {
      ended_ = true;
      return std::optional<http::WsMessage>();
    }
    if (ec) {
      ended_ = true;
      return Error::Unavailable("agvisord stream broke: " + ec.message());
    }
    return std::optional<http::WsMessage>(
        http::WsMessage{binary, beast::buffers_to_string(buf.data())});
  }

  std::string close_reason() const { return std::string(ws_.reason().reason.c_str()); }

  // Ends the stream (a close frame, else the socket). Idempotent.
  void Close() {
    std::unique_lock lock(send_mu_, std::defer_lock);
    // A sender stuck on a server that does not read must not hold the close forever.
    for (int i = 0; i < 50 && !lock.try_lock(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!io_.joinable()) return;
    if (lock.owns_lock()) {
      if (closed_) return;
      closed_ = true;
      auto done = std::make_shared<std::promise<void>>();
      auto fut = done->get_future();
      net::post(ioc_, [this, done] {
        ws_.async_close(bws::close_code::normal, [done](error_code) { done->set_value(); });
      });
      if (fut.wait_for(std::chrono::seconds(2)) == std::future_status::ready) return;
    }
    Abort();
  }

 private:
  void Abort() {
    net::post(ioc_, [this] {
      error_code ec;
      beast::get_lowest_layer(ws_).close(ec);
    });
  }
  void Stop() {
    if (!io_.joinable()) return;
    Abort();
    guard_.reset();
    ioc_.stop();
    io_.join();
  }

  net::io_context ioc_{1};
  bws::stream<Socket> ws_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> guard_;
  std::thread io_;
  std::mutex send_mu_, recv_mu_;
  bool closed_ = false;  // guarded by send_mu_
  bool ended_ = false;   // guarded by recv_mu_
};

namespace {

// An exec or attach WebSocket: stdin as tagged binary messages, control as JSON text.
class WsCommand final : public Command {
 public:
  WsCommand(std::unique_ptr<WsConnection> ws, std::uint32_t pid) : ws_(std::move(ws)), pid_(pid) {}
  Result<void> Write(std::string_view bytes) override {
    while (!bytes.empty()) {
      auto n = std::min(bytes.size(), kStdinChunk);
      std::string msg(1, static_cast<char>(api::kTagStdin));
      msg.append(bytes.substr(0, n));
      AGVISOR_RETURN_IF_ERROR(ws_->Send(msg, true));
      bytes.remove_prefix(n);
    }
    return Ok();
  }
  Result<void> CloseStdin() override {
    return ws_->Send(api::WsControlJson({api::WsControl::Type::kEof}), false);
  }
  Result<void> Resize(std::uint16_t rows, std::uint16_t cols) override {
    return ws_->Send(api::WsControlJson({api::WsControl::Type::kResize, rows, cols}), false);
  }
  Result<void> Signal(int signal) override {
    return ws_->Send(api::WsControlJson({api::WsControl::Type::kSignal, 0, 0, signal}), false);
  }

  Result<ProcessExit> Wait(const channel::ExecCallbacks& cb) override {
    for (;;) {
      auto m = AGVISOR_TRY(ws_->Receive());
      if (!m) {
        return Error::Unavailable("agvisord closed the stream before the command's exit" +
                                  (ws_->close_reason().empty() ? "" : ": " + ws_->close_reason()));
      }
      if (m->binary) {
        if (m->data.empty()) continue;
        std::string_view bytes = std::string_view(m->data).substr(1);
        const auto tag = static_cast<std::uint8_t>(m->data[0]);
        const auto& fn = tag == api::kTagStderr ? cb.on_stderr : cb.on_stdout;
        if (fn) fn(bytes);
        continue;
      }
      auto msg = AGVISOR_TRY(api::ParseWsServerMessage(m->data));
      if (msg.type == api::WsServerMessage::Type::kExit) return msg.exit;
      if (msg.type == api::WsServerMessage::Type::kError) return msg.error;
    }
  }

  void Close() override { ws_->Close(); }
  std::uint32_t pid() const override { return pid_; }

 private:
  std::unique_ptr<WsConnection> ws_;
  std::uint32_t pid_;
};

// A port WebSocket: raw bytes both ways.
// A watch WebSocket: a reader thread takes the server's messages into a bounded queue (when it
// is full the thread stops reading, so the daemon, the channel and finally the agent's queue
// hold back, and the agent reports an overflow), Next waits on the queue with its timeout.
class WsWatch final : public DirWatch {
 public:
  explicit WsWatch(std::unique_ptr<WsConnection> ws) : ws_(std::move(ws)) {
    reader_ = std::thread([this] { ReadLoop(); });
  }
  ~WsWatch() override {
    Close();
    reader_.join();
  }
  Result<std::optional<std::vector<WatchEvent>>> Next(std::chrono::milliseconds timeout) override {
    using Events = std::vector<WatchEvent>;
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || done_ || closed_; });
    if (!queue_.empty()) {
      Events out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
      cv_.notify_all();  // room for the reader again
      return std::optional<Events>(std::move(out));
    }
    if (closed_) return std::optional<Events>();
    if (done_) {
      if (error_) return *error_;
      return std::optional<Events>();
    }
    return std::optional<Events>(Events{});
  }
  void Close() override {
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      closed_ = true;
      cv_.notify_all();
    }
    ws_->Close();
  }

 private:
  static constexpr std::size_t kMaxQueued = 4096;

  void ReadLoop() {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return queue_.size() < kMaxQueued || closed_; });
        if (closed_) break;
      }
      auto m = ws_->Receive();
      std::lock_guard lock(mu_);
      if (!m.ok() || !m->has_value()) {
        if (!m.ok())
          error_ = m.error();
        else if (!ended_)
          error_ = Error::Unavailable(
              "agvisord closed the watch stream" +
              (ws_->close_reason().empty() ? std::string() : ": " + ws_->close_reason()));
        break;
      }
      auto msg = (*m)->binary ? Result<api::WsServerMessage>(Error::Internal(
                                    "agvisord sent a binary message on a watch stream"))
                              : api::ParseWsServerMessage((*m)->data);
      if (!msg.ok()) {
        error_ = msg.error();
        break;
      }
      if (msg->type == api::WsServerMessage::Type::kEvent) {
        queue_.push_back(std::move(msg->event));
      } else if (msg->type == api::WsServerMessage::Type::kEnd) {
        ended_ = true;  // the close that follows is the end, not an error
      } else if (msg->type == api::WsServerMessage::Type::kError) {
        error_ = msg->error;
        break;
      }
      cv_.notify_all();
    }
    std::lock_guard lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

  std::unique_ptr<WsConnection> ws_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<WatchEvent> queue_;
  std::optional<Error> error_;
  bool ended_ = false, done_ = false, closed_ = false;
  std::thread reader_;
};

class WsPort final : public ByteStream {
 public:
  explicit WsPort(std::unique_ptr<WsConnection> ws) : ws_(std::move(ws)) {}
  Result<std::size_t> Read(std::span<char> buf) override {
    while (pending_.size() == pending_pos_) {
      auto m = AGVISOR_TRY(ws_->Receive());
      if (!m) return std::size_t{0};
      if (!m->binary) {
        // A text message on a port stream is an error (nothing listens, the sandbox died).
        auto msg = api::ParseWsServerMessage(m->data);
        if (msg.ok() && msg->type == api::WsServerMessage::Type::kError) return msg->error;
        continue;
      }
      pending_ = std::move(m->data);
      pending_pos_ = 0;
    }
    std::size_t n = std::min(buf.size(), pending_.size() - pending_pos_);
    std::memcpy(buf.data(), pending_.data() + pending_pos_, n);
    pending_pos_ += n;
    return n;
  }
  Result<void> Write(std::string_view bytes) override { return ws_->Send(bytes, true); }
  Result<void> CloseWrite() override {
    return ws_->Send(api::WsControlJson({api::WsControl::Type::kEof}), false);
  }

  void Close() override { ws_->Close(); }

 private:
  std::unique_ptr<WsConnection> ws_;
  std::string pending_;  // Read's leftover of a message (guarded by the single reader)
  std::size_t pending_pos_ = 0;
};

}  // namespace

Result<http::Endpoint> ParseServerAddress(std::string_view spec) {
  auto bad = [&] {
    return Error::InvalidArgument("--server '" + std::string(spec) +
                                  "': use unix:/path/to/agvisord.sock, http://127.0.0.1:PORT or "
                                  "ssh://USER@HOST[:PORT][/path/to/agvisord.sock]");
  };
  http::Endpoint ep;
  if (spec.starts_with("ssh://")) {
    // http::ParseEndpoint checks the user, host and path; its default path is Docker's socket,
    // so whether one was written is read here.
    auto parsed = http::ParseEndpoint(spec);
    if (!parsed.ok()) return bad();
    if (spec.substr(6).find('/') == std::string_view::npos) parsed->path = api::kRootSocketPath;
    return *parsed;
  }
  if (spec.starts_with("unix:")) {
    std::string_view path = spec.substr(5);
    if (path.starts_with("//")) path.remove_prefix(2);
    if (path.empty() || path.front() != '/') return bad();
    ep.kind = http::Endpoint::Kind::kUnix;
    ep.path = std::string(path);
    return ep;
  }
  std::string_view rest;
  if (spec.starts_with("http://")) {
    rest = spec.substr(7);
  } else if (spec.starts_with("tcp://")) {
    rest = spec.substr(6);
  } else {
    return bad();
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  auto colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad();
  std::string_view port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != port.npos) {
    return bad();
  }
  const unsigned long n = std::stoul(std::string(port));
  if (n == 0 || n > 65535) return bad();
  auto parsed = http::ParseEndpoint("tcp://" + std::string(rest));
  if (!parsed.ok()) return bad();
  // Plain HTTP carries the bearer token in the clear: loopback only (agvisord refuses to listen
  // elsewhere without --allow-remote, for a TLS proxy this client cannot speak to).
  const std::string& h = parsed->host;
  if (h != "localhost" && h != "::1" && h != "[::1]" && !h.starts_with("127.")) {
    return Error::InvalidArgument(
        "--server '" + std::string(spec) +
        "': plain HTTP to a host other than loopback would send the token in the clear; reach a "
        "remote agvisord through a tunnel (ssh -L PORT:127.0.0.1:PORT host) and use "
        "http://127.0.0.1:PORT");
  }
  return *parsed;
}

std::string ServerAddressString(const http::Endpoint& ep) {
  if (ep.kind == http::Endpoint::Kind::kUnix) return "unix:" + ep.path;
  if (ep.kind == http::Endpoint::Kind::kSsh) {
    std::string s = "ssh://" + (ep.user.empty() ? "" : ep.user + "@") + ep.host;
    if (ep.port != 0) s += ":" + std::to_string(ep.port);
    return s + ep.path;
  }
  return "http://" + ep.host + ":" + std::to_string(ep.port);
}

Result<void> CheckAgvisordPeer(int fd, std::string_view address) {
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
    return Error::FromErrno("getsockopt(SO_PEERCRED) on agvisord's socket " + std::string(address),
                            errno);
  }
  const uid_t me = ::geteuid();
  if (peer.uid == 0 || peer.uid == me) return Ok();
  return Error::PermissionDenied(
      "refusing to send agvisord's token to " + std::string(address) +
      ": the process serving that socket runs as uid " + std::to_string(peer.uid) +
      ", neither root nor you (uid " + std::to_string(me) +
      "); agvisord runs as root or as you: check the socket path (--server) and who made it");
}

Result<RemoteToken> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) {
      return Error::NotFound("no agvisord token file at " + path +
                             " (agvisord writes its token to its --token-file at start: pass "
                             "that file with --token-file or AGVISOR_TOKEN_FILE)");
    }
    return Error::FromErrno("read the agvisord token file " + path, err);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  std::size_t start = 0;
  while (start < t.size() && std::isspace(static_cast<unsigned char>(t[start]))) ++start;
  t.erase(0, start);
  if (t.empty()) return Error::InvalidArgument("the agvisord token file " + path + " is empty");
  return RemoteToken{std::move(t), "the token file " + path};
}

RemoteClient::RemoteClient(http::Endpoint endpoint, RemoteToken token,
                           std::shared_ptr<http::Client> http)
    : endpoint_(std::move(endpoint)), token_(std::move(token)), http_(std::move(http)) {
  socket_endpoint_ = endpoint_;
  if (endpoint_.kind == http::Endpoint::Kind::kSsh) {
    socket_endpoint_ =
        http::Endpoint{.kind = http::Endpoint::Kind::kUnix, .path = http_->forwarded_socket()};
  }
}

RemoteClient::~RemoteClient() = default;

Result<std::unique_ptr<RemoteClient>> RemoteClient::Connect(const http::Endpoint& endpoint,
                                                            RemoteToken token) {
  // A connect of our own first: the HTTP client's errors speak of Docker.
  const std::string addr = ServerAddressString(endpoint);
  if (endpoint.kind == http::Endpoint::Kind::kSsh) {
    // ONE ssh process forwards a private local socket to agvisord's socket on that host (as for
    // a Docker host, with $AGVISOR_SSH_ARGS). ssh accepts on the local socket whether or not
    // anything listens remotely, so the health route (no token) is what says agvisord is there.
    http::ClientOptions options;
    options.ssh_args = HostSshArgs();
    auto http = http::Client::Connect(endpoint, options);
    if (!http.ok()) {
      return Error::Unavailable("cannot reach agvisord at " + addr + ": " + http.error().message());
    }
    auto health = (*http)->Send(
        {.method = "GET", .target = "/v1/health", .timeout = std::chrono::seconds(10)});
    if (!health.ok() || health->status != 200) {
      return Error::Unavailable("cannot reach agvisord at " + addr + ": nothing answers at " +
                                endpoint.path + " on " + endpoint.host + " (" +
                                StartHint(endpoint) + ")" +
                                (health.ok() ? ", HTTP " + std::to_string(health->status) : ""));
    }
    return std::unique_ptr<RemoteClient>(new RemoteClient(endpoint, std::move(token), *http));
  }
  int err = 0;
  if (endpoint.kind == http::Endpoint::Kind::kUnix) {
    sockaddr_un a{};
    if (endpoint.path.size() >= sizeof a.sun_path) {
      return Error::InvalidArgument("--server " + addr + ": the socket path is too long");
    }
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, endpoint.path.c_str(), endpoint.path.size() + 1);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Error::FromErrno("socket(AF_UNIX)", errno);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      err = errno;
    } else {
      AGVISOR_RETURN_IF_ERROR(CheckAgvisordPeer(fd.get(), addr));
    }
  } else {
    net::io_context ioc;
    net::ip::tcp::socket s(ioc);
    error_code ec;
    net::ip::tcp::resolver resolver(ioc);
    auto results = resolver.resolve(endpoint.host, std::to_string(endpoint.port), ec);
    if (!ec) net::connect(s, results, ec);
    if (ec) err = ec.category() == boost::system::system_category() ? ec.value() : ECONNREFUSED;
  }
  if (err == EACCES || err == EPERM) {
    return Error::PermissionDenied("cannot connect to agvisord at " + addr +
                                   ": permission denied (its socket is mode 0600: run as the "
                                   "user who started agvisord)");
  }
  if (err != 0) {
    std::string why = std::strerror(err);
    for (auto& c : why) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return Error::Unavailable("cannot reach agvisord at " + addr + ": " + why + " (" +
                              StartHint(endpoint) + ")");
  }
  http::ClientOptions options;
  if (endpoint.kind == http::Endpoint::Kind::kUnix) {
    // Each connection of the pool again: the socket's path may be swapped after this check.
    options.check_unix_peer = [addr](int fd) { return CheckAgvisordPeer(fd, addr); };
  }
  auto http = AGVISOR_TRY(http::Client::Connect(endpoint, std::move(options)));
  return std::unique_ptr<RemoteClient>(new RemoteClient(endpoint, std::move(token), http));
}

Error RemoteClient::Unreachable(const Error& e) const {
  if (e.code() != ErrorCode::kUnavailable) return e;
  return Error::Unavailable("agvisord at " + ServerAddressString(endpoint_) +
                            " dropped the connection (" + StartHint(endpoint_) +
                            "): " + e.message());
}

Error RemoteClient::TransferCut(std::string_view id, const Error& e) {
  if (e.code() != ErrorCode::kUnavailable) return e;
  auto r = Call({.method = "GET", .target = SandboxPath(id)});
  if (!r.ok()) {
    if (r.error().code() != ErrorCode::kNotFound) return Unreachable(e);
    return Error::SandboxDied("sandbox " + std::string(id) +
                              " ended during the transfer, and is gone (removed)");
  }
  auto v = api::ParseSandboxJson(r->body);
  if (!v.ok() || v->info.running) return Unreachable(e);
  return Error::SandboxDied("sandbox " + std::string(id) + " ended during the transfer (" +
                            std::string(api::EndReasonSlug(v->info.end_reason)) + ", exit code " +
                            std::to_string(v->info.exit_code) + ")");
}

Error RemoteClient::ErrorOf(const http::Response& r) const {
  if (r.status == 401) {
    return Error::PermissionDenied("agvisord at " + ServerAddressString(endpoint_) + " refused " +
                                   token_.source +
                                   ": not its token (use the file agvisord's --token-file names: "
                                   "--token-file FILE or AGVISOR_TOKEN_FILE)");
  }
  if (auto e = api::DecodeErrorJson(r.body)) {
    // 413 and 405 have codes of their own; the CLI treats them as failures.
    return *e;
  }
  return Error::Internal("agvisord at " + ServerAddressString(endpoint_) + " answered HTTP " +
                         std::to_string(r.status) + ": " +
                         api::SanitizeUtf8(r.body.substr(0, 200)));
}

void RemoteClient::set_auto_resume(std::string_view id, bool yes) {
  const std::string path = SandboxPath(id);
  std::lock_guard lock(held_mu_);
  std::erase(held_, path);
  if (!yes) held_.push_back(path);
}

std::string RemoteClient::WithResume(std::string target) const {
  bool held = !auto_resume_;
  if (!held) {
    std::lock_guard lock(held_mu_);
    for (const std::string& path : held_) {
      // The sandbox's own path or one below it; "/v1/sandboxes/ab" is not "/v1/sandboxes/abc".
      if (target.starts_with(path) && (target.size() == path.size() || target[path.size()] == '/' ||
                                       target[path.size()] == '?')) {
        held = true;
        break;
      }
    }
  }
  if (!held) return target;
  return target + (target.find('?') == std::string::npos ? "?" : "&") + "resume=false";
}

http::Request RemoteClient::TransferRequest(std::string method, std::string target) const {
  http::Request req{.method = std::move(method), .target = WithResume(std::move(target))};
  req.headers.push_back({"Authorization", "Bearer " + token_.token});
  req.timeout = kArchiveTimeout;
  return req;
}

Result<void> RemoteClient::TransferOutcome(std::string_view id, const Result<http::Response>& r) {
  if (!r.ok()) return TransferCut(id, r.error());
  if (r->status >= 400) return ErrorOf(*r);
  return Ok();
}

Result<http::Response> RemoteClient::Call(http::Request request) {
  request.target = WithResume(std::move(request.target));
  request.headers.push_back({"Authorization", "Bearer " + token_.token});
  auto r = http_->Send(request);
  if (!r.ok()) return Unreachable(r.error());
  if (r->status >= 400) return ErrorOf(*r);
  return r;
}

Result<api::SandboxView> RemoteClient::CreateSandbox(const SandboxSpec& spec) {
  http::Request req{.method = "POST", .target = "/v1/sandboxes"};
  req.body = api::CreateRequestJson(spec);
  req.content_type = "application/json";
  req.timeout = std::chrono::minutes(10);  // a desktop, or a start queued behind others
  auto r = AGVISOR_TRY(Call(std::move(req)));
  return api::ParseSandboxJson(r.body);
}

Result<api::SandboxView> RemoteClient::AcquireFromPool(std::string_view pool,
                                                       const AcquireOptions& options) {
  http::Request req{.method = "POST", .target = "/v1/sandboxes"};
  req.body = api::AcquireRequestJson(pool, options);
  req.content_type = "application/json";
  req.timeout = std::chrono::minutes(10) + options.wait;  // a cold create may follow the wait
  auto r = AGVISOR_TRY(Call(std::move(req)));
  return api::ParseSandboxJson(r.body);
}

Result<api::PoolView> RemoteClient::CreatePool(std::string_view name, const PoolOptions& options) {
  http::Request req{.method = "POST", .target = "/v1/pools"};
  req.body = api::CreatePoolRequestJson(name, options);
  req.content_type = "application/json";
  auto r = AGVISOR_TRY(Call(std::move(req)));
  return api::ParsePoolJson(r.body);
}

Result<std::vector<api::PoolView>> RemoteClient::ListPools() {
  auto r = AGVISOR_TRY(Call({.method = "GET", .target = "/v1/pools"}));
  return api::ParsePoolListJson(r.body);
}

Result<void> RemoteClient::DeletePool(std::string_view name) {
  // Closing waits for the pool's starts in flight.
  http::Request req{.method = "DELETE", .target = "/v1/pools/" + http::UrlEncode(name)};
  req.timeout = std::chrono::minutes(10);
  AGVISOR_RETURN_IF_ERROR(Call(std::move(req)));
  return Ok();
}

Result<std::vector<api::SandboxView>> RemoteClient::ListSandboxes() {
  auto r = AGVISOR_TRY(Call({.method = "GET", .target = "/v1/sandboxes"}));
  return api::ParseSandboxListJson(r.body);
}

Result<void> RemoteClient::RemoveSandbox(std::string_view id, bool erase_data) {
  AGVISOR_RETURN_IF_ERROR(Call(
      {.method = "DELETE", .target = SandboxPath(id) + "?erase_data=" + (erase_data ? "1" : "0")}));
  return Ok();
}

Result<void> RemoteClient::PauseSandbox(std::string_view id, bool pause) {
  AGVISOR_RETURN_IF_ERROR(
      Call({.method = "POST", .target = SandboxPath(id) + (pause ? "/pause" : "/resume")}));
  return Ok();
}

Result<SnapshotResult> RemoteClient::SnapshotSandbox(std::string_view id,
                                                     const SnapshotOptions& options) {
  http::Request req{.method = "POST", .target = SandboxPath(id) + "/snapshot"};
  req.body = api::SnapshotRequestJson(options);
  req.content_type = "application/json";
  req.timeout = std::chrono::hours(2);  // gigabytes through the checker into the import
  auto r = AGVISOR_TRY(Call(std::move(req)));
  return api::ParseSnapshotResultJson(r.body);
}

Result<api::ForkView> RemoteClient::ForkSandbox(std::string_view id, const ForkOptions& options) {
  http::Request req{.method = "POST", .target = SandboxPath(id) + "/fork"};
  req.body = api::ForkRequestJson(options);
  req.content_type = "application/json";
  req.timeout = std::chrono::hours(2);
  auto r = AGVISOR_TRY(Call(std::move(req)));
  return api::ParseForkResultJson(r.body);
}

Result<api::SandboxView> RemoteClient::GetSandbox(std::string_view id) {
  auto r = AGVISOR_TRY(Call({.method = "GET", .target = SandboxPath(id)}));
  return api::ParseSandboxJson(r.body);
}

namespace {

// "?path=P" and more query parameters.
std::string PathQuery(std::string_view path) { return "?path=" + http::UrlEncode(path); }

std::string OctalMode(std::uint32_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%o", mode & 07777);
  return buf;
}

}  // namespace

Result<std::string> RemoteClient::ReadFile(std::string_view id, std::string_view path,
                                           std::optional<std::uint64_t> length) {
  std::string target = SandboxPath(id) + "/files" + PathQuery(path);
  if (length) target += "&length=" + std::to_string(*length);
  http::Request req = TransferRequest("GET", std::move(target));
  std::string data;
  auto r = http_->SendStreamingResponse(req, [&](std::string_view bytes) -> Result<void> {
    if (length && data.size() + bytes.size() > *length) {
      bytes = bytes.substr(0, *length - data.size());  // the daemon's, but never more than asked
    }
    data.append(bytes);
    return Ok();
  });
  AGVISOR_RETURN_IF_ERROR(TransferOutcome(id, r));
  return data;
}

Result<void> RemoteClient::WriteFile(std::string_view id, std::string_view path,
                                     std::string_view data, std::uint32_t mode) {
  http::Request req{
      .method = "PUT",
      .target = SandboxPath(id) + "/files" + PathQuery(path) + "&mode=" + OctalMode(mode)};
  req.body = std::string(data);
  req.content_type = "application/octet-stream";
  req.timeout = kArchiveTimeout;
  AGVISOR_RETURN_IF_ERROR(Call(std::move(req)));
  return Ok();
}

Result<FileEntry> RemoteClient::Stat(std::string_view id, std::string_view path) {
  auto r = AGVISOR_TRY(
      Call({.method = "GET", .target = SandboxPath(id) + "/files/stat" + PathQuery(path)}));
  return api::ParseFileEntryJson(r.body);
}

Result<std::vector<FileEntry>> RemoteClient::ListDir(std::string_view id, std::string_view path) {
  auto r = AGVISOR_TRY(
      Call({.method = "GET", .target = SandboxPath(id) + "/files/list" + PathQuery(path)}));
  return api::ParseFileListJson(r.body);
}

Result<void> RemoteClient::Mkdir(std::string_view id, std::string_view path, bool parents,
                                 std::uint32_t mode) {
  AGVISOR_RETURN_IF_ERROR(
      Call({.method = "POST",
            .target = SandboxPath(id) + "/files/mkdir" + PathQuery(path) +
                      "&parents=" + (parents ? "1" : "0") + "&mode=" + OctalMode(mode)}));
  return Ok();
}

Result<void> RemoteClient::RemovePath(std::string_view id, std::string_view path, bool recursive) {
  AGVISOR_RETURN_IF_ERROR(Call({.method = "DELETE",
                                .target = SandboxPath(id) + "/files" + PathQuery(path) +
                                          "&recursive=" + (recursive ? "1" : "0")}));
  return Ok();
}

Result<LiveLimits> RemoteClient::UpdateSandbox(std::string_view id, const LimitsUpdate& update) {
  auto r = AGVISOR_TRY(Call({.method = "POST",
                             .target = SandboxPath(id) + "/update",
                             .body = api::UpdateRequestJson(update),
                             .content_type = "application/json"}));
  auto view = AGVISOR_TRY(api::ParseSandboxJson(r.body));
  if (!view.info.limits) {
    return Error::Internal("agvisord's answer to update " + std::string(id) +
                           " has no limits (an older daemon?)");
  }
  return *view.info.limits;
}

Result<std::uint32_t> RemoteClient::StartProcess(std::string_view id,
                                                 const std::vector<std::string>& argv,
                                                 const BackgroundOptions& options) {
  http::Request req{.method = "POST", .target = SandboxPath(id) + "/processes"};
  req.body = api::StartProcessRequestJson(argv, options);
  req.content_type = "application/json";
  auto r = AGVISOR_TRY(Call(std::move(req)));
  return api::ParsePidJson(r.body);
}

Result<std::vector<ProcessInfo>> RemoteClient::ListProcesses(std::string_view id) {
  auto r = AGVISOR_TRY(Call({.method = "GET", .target = SandboxPath(id) + "/processes"}));
  return api::ParseProcessListJson(r.body);
}

Result<void> RemoteClient::SignalProcess(std::string_view id, std::uint32_t pid, int signal) {
  http::Request req{.method = "POST",
                    .target = SandboxPath(id) + "/processes/" + std::to_string(pid) + "/signal"};
  req.body = "{\"signal\":" + std::to_string(signal) + "}";
  req.content_type = "application/json";
  AGVISOR_RETURN_IF_ERROR(Call(std::move(req)));
  return Ok();
}

Result<SandboxStats> RemoteClient::Metrics(std::string_view id) {
  auto r = AGVISOR_TRY(Call({.method = "GET", .target = SandboxPath(id) + "/metrics"}));
  return api::ParseMetricsJson(r.body);
}

Result<api::EgressView> RemoteClient::GetEgress(std::string_view id) {
  auto r = AGVISOR_TRY(Call({.method = "GET", .target = SandboxPath(id) + "/egress"}));
  return api::ParseEgressViewJson(r.body);
}

Result<api::EgressView> RemoteClient::SetEgress(std::string_view id,
                                                const egress::EgressRules& rules) {
  http::Request req{.method = "PUT", .target = SandboxPath(id) + "/egress"};
  req.body = api::EgressRulesJson(rules);
  req.content_type = "application/json";
  auto r = AGVISOR_TRY(Call(std::move(req)));
  return api::ParseEgressViewJson(r.body);
}

Result<std::vector<egress::Decision>> RemoteClient::EgressLog(std::string_view id,
                                                              std::size_t last) {
  auto r = AGVISOR_TRY(Call(
      {.method = "GET", .target = SandboxPath(id) + "/egress/log?last=" + std::to_string(last)}));
  return api::ParseEgressLogJson(r.body);
}

Result<void> RemoteClient::FollowEgressLog(
    std::string_view id, std::size_t last,
    const std::function<bool(const egress::Decision&, const std::string&)>& on_record) {
  auto ws =
      AGVISOR_TRY(OpenWebSocket(SandboxPath(id) + "/egress/log/ws?last=" + std::to_string(last),
                                std::nullopt, true, nullptr));
  for (;;) {
    auto m = AGVISOR_TRY(ws->Receive());
    if (!m) {
      return Error::Unavailable("agvisord closed the egress log stream" +
                                (ws->close_reason().empty() ? "" : ": " + ws->close_reason()));
    }
    if (m->binary) return Error::Internal("agvisord sent a binary message on an egress log");
    auto msg = AGVISOR_TRY(api::ParseWsServerMessage(m->data));
    switch (msg.type) {
      case api::WsServerMessage::Type::kRecord:
        if (!on_record(msg.record, msg.record_json)) return Ok();
        break;
      case api::WsServerMessage::Type::kEnd:
        return Ok();
      case api::WsServerMessage::Type::kError:
        return msg.error;
      default:
        return Error::Internal("agvisord sent an unexpected message on an egress log");
    }
  }
}

Result<void> RemoteClient::PutArchive(std::string_view id, std::string_view dir,
                                      const channel::ByteSource& source) {
  http::Request req =
      TransferRequest("PUT", SandboxPath(id) + "/archive?path=" + http::UrlEncode(dir));
  req.content_type = "application/x-tar";
  return TransferOutcome(id, http_->SendStreamingBody(req, source));
}

Result<void> RemoteClient::GetArchive(std::string_view id, std::string_view path,
                                      const channel::ByteSink& sink) {
  http::Request req =
      TransferRequest("GET", SandboxPath(id) + "/archive?path=" + http::UrlEncode(path));
  return TransferOutcome(id, http_->SendStreamingResponse(req, sink));
}

Result<std::unique_ptr<WsConnection>> RemoteClient::OpenWebSocket(
    const std::string& target, std::optional<std::string> first_message, bool wait_started,
    std::uint32_t* started_pid) {
  auto conn = std::make_unique<WsConnection>();
  auto& sock = beast::get_lowest_layer(conn->ws());
  error_code ec;
  if (socket_endpoint_.kind == http::Endpoint::Kind::kUnix) {
    net::local::stream_protocol::endpoint ep(socket_endpoint_.path);
    sock.open(net::generic::stream_protocol(AF_UNIX, 0), ec);
    if (!ec) sock.connect(net::generic::stream_protocol::endpoint(ep), ec);
    if (!ec) {
      AGVISOR_RETURN_IF_ERROR(
          CheckAgvisordPeer(sock.native_handle(), ServerAddressString(socket_endpoint_)));
    }
  } else {
    net::ip::tcp::resolver resolver(conn->ioc());
    auto results = resolver.resolve(endpoint_.host, std::to_string(endpoint_.port), ec);
    if (!ec && results.empty()) ec = net::error::host_not_found;
    // Every address in turn (`localhost` is often ::1 first while agvisord listens on 127.0.0.1).
    for (const auto& entry : results) {
      if (sock.is_open()) sock.close(ec);
      net::ip::tcp::endpoint ep = entry.endpoint();
      sock.open(net::generic::stream_protocol(ep.protocol().family(), IPPROTO_TCP), ec);
      if (!ec) sock.connect(net::generic::stream_protocol::endpoint(ep), ec);
      if (!ec) break;
    }
  }
  if (ec) {
    return Error::Unavailable("cannot reach agvisord at " + ServerAddressString(endpoint_) + ": " +
                              ec.message() + " (" + StartHint(endpoint_) + ")");
  }
  const std::string bearer = "Bearer " + token_.token;
  conn->ws().set_option(bws::stream_base::decorator(
      [bearer](bws::request_type& r) { r.set(beast::http::field::authorization, bearer); }));
  conn->ws().read_message_max(64u << 20);
  bws::response_type res;
  conn->ws().handshake(res, "agvisord", WithResume(target), ec);
  if (ec) {
    if (res.result_int() >= 400) {
      http::Response r;
      r.status = res.result_int();
      r.body = res.body();
      return ErrorOf(r);
    }
    return Error::Unavailable("agvisord at " + ServerAddressString(endpoint_) +
                              ": WebSocket upgrade failed: " + ec.message());
  }
  conn->StartIoThread();
  if (first_message) AGVISOR_RETURN_IF_ERROR(conn->Send(*first_message, false));
  if (wait_started) {
    // The first answer is "started" or an error (no such sandbox, a bad request, ...).
    auto m = AGVISOR_TRY(conn->Receive());
    if (!m || m->binary) {
      return Error::Unavailable("agvisord closed the stream before the command started" +
                                (conn->close_reason().empty() ? "" : ": " + conn->close_reason()));
    }
    auto msg = AGVISOR_TRY(api::ParseWsServerMessage(m->data));
    if (msg.type == api::WsServerMessage::Type::kError) return msg.error;
    if (started_pid != nullptr) *started_pid = msg.pid;
  }
  return conn;
}

Result<std::unique_ptr<Command>> RemoteClient::Exec(std::string_view id,
                                                    const std::vector<std::string>& argv,
                                                    const ProcessOptions& options) {
  std::uint32_t pid = 0;
  auto ws = AGVISOR_TRY(OpenWebSocket(SandboxPath(id) + "/exec/ws",
                                      api::WsExecRequestJson(argv, options), true, &pid));
  return std::unique_ptr<Command>(std::make_unique<WsCommand>(std::move(ws), pid));
}

Result<std::unique_ptr<Command>> RemoteClient::Attach(std::string_view id, std::uint32_t pid) {
  auto ws = AGVISOR_TRY(OpenWebSocket(SandboxPath(id) + "/processes/" + std::to_string(pid) + "/ws",
                                      std::nullopt, true, nullptr));
  return std::unique_ptr<Command>(std::make_unique<WsCommand>(std::move(ws), pid));
}

Result<std::unique_ptr<ByteStream>> RemoteClient::OpenPort(std::string_view id,
                                                           std::uint16_t port) {
  // Returns once the daemon made the connection inside (nothing listening is an error here, as
  // in process).
  auto ws = AGVISOR_TRY(OpenWebSocket(SandboxPath(id) + "/ports/" + std::to_string(port) + "/ws",
                                      std::nullopt, true, nullptr));
  return std::unique_ptr<ByteStream>(std::make_unique<WsPort>(std::move(ws)));
}

Result<std::unique_ptr<DirWatch>> RemoteClient::Watch(std::string_view id, std::string_view path,
                                                      bool recursive) {
  auto ws = AGVISOR_TRY(OpenWebSocket(SandboxPath(id) + "/watch/ws?path=" + http::UrlEncode(path) +
                                          "&recursive=" + (recursive ? "true" : "false"),
                                      std::nullopt, true, nullptr));
  return std::unique_ptr<DirWatch>(std::make_unique<WsWatch>(std::move(ws)));
}

}  // namespace agvisor::client
