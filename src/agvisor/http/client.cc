// The only translation unit of agvisor that includes Boost.Beast (11-15 s of compile time each).
//
// Beast does the HTTP/1.1 framing (request serialisation, response parsing, chunked decoding);
// the I/O underneath is ours (fd_io.h): Beast's synchronous algorithms only need a type with
// read_some/write_some, and a non-blocking socket polled against a deadline gives timeouts that
// Beast's synchronous API does not have, without pulling an io_context into every request.
#include "agvisor/http/client.h"

#include <poll.h>
#include <sys/uio.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/span_body.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/system/system_error.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "agvisor/http/fd_io.h"
#include "agvisor/http/ssh_tunnel.h"
#include "agvisor/http/tls.h"

namespace agvisor::http {
namespace {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using boost::system::error_code;
using internal::Clock;
using internal::Deadline;
using internal::DeadlineAfter;

constexpr std::size_t kIoChunk = 64 * 1024;
constexpr std::uint32_t kHeaderLimit = 64 * 1024;

// The SyncReadStream + SyncWriteStream Beast reads and writes through: our non-blocking socket,
// every call bounded by one deadline. Counts bytes both ways so that a failed exchange knows
// whether anything of the request left and whether any of the response arrived.
class DeadlineStream {
 public:
  // `tls`: the connection's TLS session (https), or null.
  DeadlineStream(int fd, internal::TlsConn* tls, Deadline deadline)
      : fd_(fd), tls_(tls), deadline_(deadline) {}

  void set_deadline(Deadline d) { deadline_ = d; }
  std::size_t sent() const { return sent_; }
  std::size_t received() const { return received_; }

  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
    iovec iov[16];
    int n = 0;
    for (auto it = net::buffer_sequence_begin(buffers);
         it != net::buffer_sequence_end(buffers) && n < 16; ++it) {
      net::mutable_buffer b(*it);
      if (b.size() > 0) iov[n++] = {b.data(), b.size()};
    }
    ec = {};
    if (n == 0) return 0;
    ssize_t r = tls_ != nullptr
                    ? tls_->Recv(static_cast<char*>(iov[0].iov_base), iov[0].iov_len, deadline_)
                    : internal::RecvSome(fd_, iov, n, deadline_);
    if (r > 0) {
      received_ += static_cast<std::size_t>(r);
      return static_cast<std::size_t>(r);
    }
    if (r == 0) {
      ec = net::error::eof;
    } else {
      ec = error_code(static_cast<int>(-r), boost::system::system_category());
    }
    return 0;
  }
  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers) {
    return OrThrow([&](error_code& ec) { return read_some(buffers, ec); });
  }

  template <class ConstBufferSequence>
  std::size_t write_some(const ConstBufferSequence& buffers, error_code& ec) {
    iovec iov[16];
    int n = 0;
    std::size_t total = 0;
    for (auto it = net::buffer_sequence_begin(buffers);
         it != net::buffer_sequence_end(buffers) && n < 16; ++it) {
      net::const_buffer b(*it);
      if (b.size() > 0) {
        iov[n++] = {const_cast<void*>(b.data()), b.size()};
        total += b.size();
      }
    }
    ec = {};
    if (int err = WriteAll(iov, n)) {
      ec = error_code(err, boost::system::system_category());
      return 0;
    }
    return total;
  }
  template <class ConstBufferSequence>
  std::size_t write_some(const ConstBufferSequence& buffers) {
    return OrThrow([&](error_code& ec) { return write_some(buffers, ec); });
  }

  // 0 or an errno.
  int WriteAll(const iovec* iov, int n) {
    if (tls_ != nullptr) return tls_->SendAll(iov, n, deadline_, &sent_);
    return internal::SendAll(fd_, iov, n, deadline_, &sent_);
  }

 private:
  // The throwing form the stream concepts also ask for, over the error_code form `io`.
  template <class Io>
  static std::size_t OrThrow(Io io) {
    error_code ec;
    std::size_t n = io(ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  int fd_;
  internal::TlsConn* tls_;
  Deadline deadline_;
  std::size_t sent_ = 0;
  std::size_t received_ = 0;
};

// Request::max_body_bytes as Beast's parser takes it (none = unbounded).
boost::optional<std::uint64_t> BodyLimit(const Request& r) {
  if (r.max_body_bytes == 0) return boost::none;
  return static_cast<std::uint64_t>(r.max_body_bytes);
}

bool IsIdempotent(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "PUT" || method == "DELETE" ||
         method == "OPTIONS" || method == "TRACE";
}

bool HasCtl(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

// Refuses what would let a caller's string break the request framing (header injection).
Result<void> ValidateRequest(const Request& r) {
  if (r.method.empty() || std::any_of(r.method.begin(), r.method.end(), [](char c) {
        return !(c >= 'A' && c <= 'Z') && c != '-' && c != '_';
      })) {
    return Error::InvalidArgument("HTTP request: bad method \"" + r.method + "\"");
  }
  if (r.target.empty() || r.target[0] != '/' || HasCtl(r.target) ||
      r.target.find(' ') != std::string::npos) {
    return Error::InvalidArgument("HTTP request: target must be origin-form (\"/path?query\"), " +
                                  std::string("without spaces or control characters: \"") +
                                  r.target + "\"");
  }
  for (const auto& h : r.headers) {
    if (h.name.empty() || HasCtl(h.name) || HasCtl(h.value) ||
        h.name.find_first_of(" :") != std::string::npos) {
      return Error::InvalidArgument("HTTP request " + r.target + ": bad header \"" + h.name + "\"");
    }
  }
  if (HasCtl(r.content_type)) {
    return Error::InvalidArgument("HTTP request " + r.target + ": bad content type");
  }
  return Ok();
}

template <class Fields>
std::vector<Header> CopyHeaders(const Fields& fields) {
  std::vector<Header> out;
  for (const auto& f : fields) {
    out.push_back({std::string(f.name_string()), std::string(f.value())});
  }
  return out;
}

enum class Mode { kBuffered, kStreamingBody, kStreamingResponse, kHijack };

// What happened during one attempt, for the retry decision.
struct AttemptState {
  bool connection_lost = false;  // EOF / reset / broken pipe (not a timeout, not a parse error)
  bool response_started = false;
  bool request_started = false;
  bool callbacks_ran = false;  // the BodySource or BodySink was called: cannot replay
};

struct Outcome {
  Response response;
  std::unique_ptr<RawStream> stream;
};

}  // namespace

struct Client::Impl {
  Endpoint endpoint;
  ClientOptions options;
  std::string host_header;
  std::unique_ptr<internal::SshTunnel> tunnel;  // kSsh only
  std::shared_ptr<internal::TlsContext> tls;    // kHttps only

  struct Connection {
    UniqueFd fd;
    std::unique_ptr<internal::TlsConn> tls;  // kHttps; destroyed before the fd closes
    bool reused = false;
  };

  std::mutex mu;
  std::vector<Connection> idle;  // guarded by mu; destroyed before `tunnel`

  ~Impl() {
    std::lock_guard lock(mu);
    idle.clear();
  }

  std::string Hint() const {
    switch (endpoint.kind) {
      case Endpoint::Kind::kUnix:
        return "is dockerd running? scripts/setup-host starts it";
      case Endpoint::Kind::kTcp:
        return "is the daemon listening on " + endpoint.host + ":" + std::to_string(endpoint.port) +
               "?";
      case Endpoint::Kind::kHttps:
        return "is the server listening on " + endpoint.host + ":" + std::to_string(endpoint.port) +
               "?";
      case Endpoint::Kind::kSsh: {
        std::string h =
            "is dockerd running on " + endpoint.host + " with its socket at " + endpoint.path + "?";
        if (tunnel) {
          std::string said = tunnel->StderrTail();
          if (!said.empty()) h += " ssh said: " + said;
        }
        return h;
      }
    }
    return "";
  }

  Error ConnectError(const Error& e) const {
    int err = e.sys_errno();
    std::string ep = endpoint.ToString();
    const std::string server = endpoint.kind == Endpoint::Kind::kHttps ? "the server" : "Docker";
    Error out(ErrorCode::kUnavailable, "");
    if (err == EACCES || err == EPERM) {
      out = Error::PermissionDenied("cannot connect to " + server + " at " + ep +
                                    ": permission denied " +
                                    "(run as root or join the docker group)");
    } else if (err == ETIMEDOUT) {
      out = Error::Unavailable("cannot reach " + server + " at " + ep + ": no connection within " +
                               std::to_string(options.connect_timeout.count()) + " ms (" + Hint() +
                               ")");
    } else if (err == ENAMETOOLONG) {
      out = Error::InvalidArgument("cannot connect to " + ep + ": socket path too long");
    } else {
      // "connection refused", "no such file or directory"; a resolver failure keeps its text.
      bool resolver = e.message().rfind("resolve ", 0) == 0;
      std::string why = err != 0 && !resolver ? std::strerror(err) : e.message();
      if (!resolver) {
        for (auto& c : why) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      out = Error::Unavailable("cannot reach " + server + " at " + ep + ": " + why + " (" + Hint() +
                               ")");
    }
    out.set_errno(err);
    return out;
  }

  Result<Connection> Acquire(Deadline deadline) {
    {
      std::lock_guard lock(mu);
      while (!idle.empty()) {
        Connection c = std::move(idle.back());
        idle.pop_back();
        if (internal::IdleConnectionUsable(c.fd.get())) {
          c.reused = true;
          return c;
        }
      }
    }
    Deadline d = std::min(deadline, DeadlineAfter(options.connect_timeout));
    Result<UniqueFd> fd = Error::Internal("unreachable");
    switch (endpoint.kind) {
      case Endpoint::Kind::kUnix:
        fd = internal::ConnectUnix(endpoint.path, d);
        if (fd.ok() && options.check_unix_peer) {
          if (auto checked = options.check_unix_peer(fd->get()); !checked.ok()) {
            return checked.error();
          }
        }
        break;
      case Endpoint::Kind::kTcp:
      case Endpoint::Kind::kHttps:
        fd = internal::ConnectTcp(endpoint.host, endpoint.port, d);
        break;
      case Endpoint::Kind::kSsh:
        fd = internal::ConnectUnix(tunnel->socket_path(), d);
        break;
    }
    if (!fd.ok()) return ConnectError(fd.error());
    Connection c{std::move(fd).value(), nullptr, false};
    if (tls) {
      auto session = internal::TlsConn::Handshake(*tls, c.fd.get(), endpoint.host, d);
      if (!session.ok()) return session.error().WithContext(endpoint.ToString());
      c.tls = std::move(*session);
    }
    return c;
  }

  void Release(Connection conn) {
    conn.reused = false;
    std::lock_guard lock(mu);
    if (idle.size() < options.max_idle_connections) idle.push_back(std::move(conn));
  }

  std::string What(const Request& r) const {
    return r.method + " " + r.target + " at " + endpoint.ToString();
  }

  // Turns a Beast / socket error of one attempt into our Error, noting whether it looked like
  // a connection the peer had dropped.
  Error IoError(const Request& r, const error_code& ec, const DeadlineStream& s,
                std::chrono::milliseconds timeout, AttemptState& st) const {
    st.request_started = s.sent() > 0;
    st.response_started = s.received() > 0;
    bool sys = ec.category() == boost::system::system_category();
    if (sys && ec.value() == ETIMEDOUT) {
      Error e = Error::Timeout(What(r) + ": no complete response within " +
                               std::to_string(timeout.count()) + " ms");
      e.set_errno(ETIMEDOUT);
      return e;
    }
    if (ec == net::error::eof || ec == bhttp::error::end_of_stream ||
        ec == bhttp::error::partial_message ||
        (sys && (ec.value() == ECONNRESET || ec.value() == EPIPE || ec.value() == ENOTCONN))) {
      st.connection_lost = true;
      Error e = Error::Unavailable(
          What(r) + ": the connection was closed " +
          (st.response_started ? "in the middle of the response" : "before a response arrived") +
          " (" + Hint() + ")");
      if (sys) e.set_errno(ec.value());
      return e;
    }
    if (sys) return Error::FromErrno(What(r), ec.value());
    return Error::Internal(What(r) + ": malformed HTTP response: " + ec.message());
  }

  template <bool isRequest, class Body>
  void SetCommonFields(bhttp::message<isRequest, Body>& m, const Request& r) const {
    m.version(11);
    m.method_string(r.method);
    m.target(r.target);
    m.set(bhttp::field::host, host_header);
    m.set(bhttp::field::user_agent, "agvisor");
    if (!r.content_type.empty()) m.set(bhttp::field::content_type, r.content_type);
    for (const auto& h : r.headers) m.insert(h.name, h.value);
  }

  // Reads the body after the header into `out` (error statuses of streaming calls).
  template <class Parser>
  Result<void> ReadBodyInto(DeadlineStream& s, boost::beast::flat_buffer& buf, Parser& p,
                            std::string& out, const Request& r, std::chrono::milliseconds to,
                            AttemptState& st) {
    char chunk[kIoChunk];
    while (!p.is_done()) {
      p.get().body().data = chunk;
      p.get().body().size = sizeof chunk;
      error_code ec;
      bhttp::read_some(s, buf, p, ec);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) return IoError(r, ec, s, to, st);
      out.append(chunk, sizeof chunk - p.get().body().size);
    }
    return Ok();
  }

  // One attempt on one connection. The connection goes back to the pool when the exchange
  // ended cleanly and the server keeps it alive.
  Result<Outcome> RunOnce(Connection conn, const Request& r, Mode mode, const BodySource* source,
                          const BodySink* sink, Deadline deadline,
                          std::chrono::milliseconds timeout, AttemptState& st) {
    DeadlineStream s(conn.fd.get(), conn.tls.get(), deadline);
    error_code ec;

    // 1. The request.
    if (mode == Mode::kStreamingBody) {
      bhttp::request<bhttp::empty_body> req;
      SetCommonFields(req, r);
      req.chunked(true);
      bhttp::request_serializer<bhttp::empty_body> sr(req);
      bhttp::write_header(s, sr, ec);
      std::vector<char> buf(kIoChunk);
      while (!ec) {
        st.callbacks_ran = true;
        auto n = (*source)(std::span<char>(buf.data(), buf.size()));
        if (!n.ok()) return std::move(n).error().WithContext(What(r) + ": request body");
        std::size_t len = std::min(*n, buf.size());
        char head[32];
        int hl = std::snprintf(head, sizeof head, "%zx\r\n", len);
        static char kCrlfEnd[] = "\r\n0\r\n\r\n";
        iovec iov[3];
        int cnt = 0;
        if (len > 0) {
          iov[cnt++] = {head, static_cast<std::size_t>(hl)};
          iov[cnt++] = {buf.data(), len};
          iov[cnt++] = {kCrlfEnd, 2};
        } else {
          iov[cnt++] = {kCrlfEnd + 2, 5};  // the last chunk, no trailers
        }
        if (int err = s.WriteAll(iov, cnt)) ec = error_code(err, boost::system::system_category());
        if (len == 0) break;
      }
      if (ec) {
        // The daemon may have answered (an error) and closed without reading the whole body:
        // its answer says more than our EPIPE.
        Error write_error = IoError(r, ec, s, timeout, st);
        auto answer = ReadBuffered(std::move(conn), s, r, timeout, st, /*pool=*/false);
        if (answer.ok()) return answer;
        return write_error;
      }
    } else {
      bhttp::request<bhttp::span_body<const char>> req;
      SetCommonFields(req, r);
      req.body() = boost::beast::span<const char>(r.body.data(), r.body.size());
      if (!r.body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH") {
        req.content_length(r.body.size());
      }
      if (mode == Mode::kHijack) {
        req.set(bhttp::field::connection, "Upgrade");
        if (req.find(bhttp::field::upgrade) == req.end()) req.set(bhttp::field::upgrade, "tcp");
      }
      bhttp::write(s, req, ec);
      if (ec) return IoError(r, ec, s, timeout, st);
    }

    // 2. The response.
    if (mode == Mode::kBuffered || mode == Mode::kStreamingBody) {
      return ReadBuffered(std::move(conn), s, r, timeout, st, /*pool=*/true);
    }
    boost::beast::flat_buffer buf;
    if (mode == Mode::kHijack) {
      bhttp::response_parser<bhttp::string_body> p;
      p.header_limit(kHeaderLimit);
      p.body_limit(BodyLimit(r));
      bhttp::read_header(s, buf, p, ec);
      if (ec) return IoError(r, ec, s, timeout, st);
      Outcome out;
      out.response.status = p.get().result_int();
      out.response.headers = CopyHeaders(p.get().base());
      if (out.response.status == 101 || out.response.status == 200) {
        // Beast may already hold the first bytes of the raw stream (they can share a packet
        // with the headers): Read hands them out first.
        std::string early(static_cast<const char*>(buf.data().data()), buf.size());
        out.stream = internal::MakeSocketRawStream(std::move(conn.fd), std::move(conn.tls),
                                                   std::move(early));
        return out;
      }
      bhttp::read(s, buf, p, ec);
      if (ec) return IoError(r, ec, s, timeout, st);
      out.response.body = std::move(p.get().body());
      if (p.keep_alive() && buf.size() == 0) Release(std::move(conn));
      return out;
    }

    // kStreamingResponse
    bhttp::response_parser<bhttp::buffer_body> p;
    p.header_limit(kHeaderLimit);
    p.body_limit(boost::none);  // the sink bounds what it keeps
    if (r.method == "HEAD") p.skip(true);
    bhttp::read_header(s, buf, p, ec);
    if (ec) return IoError(r, ec, s, timeout, st);
    Outcome out;
    out.response.status = p.get().result_int();
    out.response.headers = CopyHeaders(p.get().base());
    if (out.response.status >= 400) {
      AGVISOR_RETURN_IF_ERROR(ReadBodyInto(s, buf, p, out.response.body, r, timeout, st));
    } else {
      s.set_deadline(Deadline::max());  // a stream may run for as long as it likes
      std::vector<char> chunk(kIoChunk);
      while (!p.is_done()) {
        p.get().body().data = chunk.data();
        p.get().body().size = chunk.size();
        bhttp::read_some(s, buf, p, ec);
        if (ec == bhttp::error::need_buffer) ec = {};
        if (ec) return IoError(r, ec, s, timeout, st);
        std::size_t n = chunk.size() - p.get().body().size;
        if (n == 0) continue;
        st.callbacks_ran = true;
        auto sunk = (*sink)(std::string_view(chunk.data(), n));
        if (!sunk.ok()) return std::move(sunk).error().WithContext(What(r) + ": response body");
      }
    }
    if (p.keep_alive() && buf.size() == 0) Release(std::move(conn));
    return out;
  }

  Result<Outcome> ReadBuffered(Connection conn, DeadlineStream& s, const Request& r,
                               std::chrono::milliseconds timeout, AttemptState& st, bool pool) {
    boost::beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> p;
    p.header_limit(kHeaderLimit);
    p.body_limit(BodyLimit(r));
    if (r.method == "HEAD") p.skip(true);
    error_code ec;
    bhttp::read(s, buf, p, ec);
    if (ec) return IoError(r, ec, s, timeout, st);
    Outcome out;
    out.response.status = p.get().result_int();
    out.response.headers = CopyHeaders(p.get().base());
    out.response.body = std::move(p.get().body());
    if (pool && p.keep_alive() && buf.size() == 0) Release(std::move(conn));
    return out;
  }

  Result<Outcome> Run(const Request& r, Mode mode, const BodySource* source, const BodySink* sink) {
    AGVISOR_RETURN_IF_ERROR(ValidateRequest(r));
    auto timeout = r.timeout.count() > 0 ? r.timeout : options.request_timeout;
    Deadline deadline = DeadlineAfter(timeout);
    for (int attempt = 0;; ++attempt) {
      auto conn = AGVISOR_TRY(Acquire(deadline));
      bool reused = conn.reused;
      AttemptState st;
      Result<Outcome> out = Error::Internal("unreachable");
      try {
        out = RunOnce(std::move(conn), r, mode, source, sink, deadline, timeout, st);
      } catch (const std::exception& e) {  // Beast allocation failures and the like
        return Error::Internal(What(r) + ": " + e.what());
      }
      if (out.ok()) return out;
      // A keep-alive connection the server closed while it sat in the pool looks like "closed
      // before a response": replay once on a fresh connection when that is safe.
      bool stale = reused && st.connection_lost && !st.response_started && !st.callbacks_ran;
      if (attempt == 0 && stale && (IsIdempotent(r.method) || !st.request_started)) continue;
      return out;
    }
  }
};

Result<std::shared_ptr<Client>> Client::Connect(const Endpoint& endpoint, ClientOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->endpoint = endpoint;
  impl->options = std::move(options);
  switch (endpoint.kind) {
    case Endpoint::Kind::kUnix:
      if (endpoint.path.empty() || endpoint.path[0] != '/') {
        return Error::InvalidArgument("unix endpoint needs an absolute socket path, got \"" +
                                      endpoint.path + "\"");
      }
      impl->host_header = "docker";
      break;
    case Endpoint::Kind::kTcp:
    case Endpoint::Kind::kHttps:
    case Endpoint::Kind::kSsh: {
      // A hand-built Endpoint gets the same checks as a parsed one (no ssh option injection).
      auto reparsed = ParseEndpoint(endpoint.ToString());
      if (!reparsed.ok()) return reparsed.error();
      if (endpoint.kind == Endpoint::Kind::kHttps) {
        impl->host_header = endpoint.ToString().substr(8);  // after "https://"
        impl->tls = AGVISOR_TRY(internal::TlsContext::Create(impl->options.tls));
      } else if (endpoint.kind == Endpoint::Kind::kTcp) {
        impl->host_header = endpoint.ToString().substr(6);  // after "tcp://"
      } else {
        impl->host_header = "docker";
        impl->tunnel = AGVISOR_TRY(internal::SshTunnel::Start(endpoint, impl->options));
      }
      break;
    }
  }
  return std::shared_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const Endpoint& Client::endpoint() const { return impl_->endpoint; }

const std::string& Client::forwarded_socket() const {
  static const std::string kNone;
  return impl_->tunnel ? impl_->tunnel->socket_path() : kNone;
}

Result<Response> Client::Send(const Request& request) {
  auto out = AGVISOR_TRY(impl_->Run(request, Mode::kBuffered, nullptr, nullptr));
  return std::move(out.response);
}

Result<Response> Client::SendStreamingBody(const Request& request, const BodySource& source) {
  auto out = AGVISOR_TRY(impl_->Run(request, Mode::kStreamingBody, &source, nullptr));
  return std::move(out.response);
}

Result<Response> Client::SendStreamingResponse(const Request& request, const BodySink& sink) {
  auto out = AGVISOR_TRY(impl_->Run(request, Mode::kStreamingResponse, nullptr, &sink));
  return std::move(out.response);
}

Result<Hijacked> Client::Hijack(const Request& request) {
  auto out = AGVISOR_TRY(impl_->Run(request, Mode::kHijack, nullptr, nullptr));
  return Hijacked{std::move(out.response), std::move(out.stream)};
}

}  // namespace agvisor::http
