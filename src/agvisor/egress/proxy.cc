// Connections are C++20 coroutines on one io_context: each step of a connection's life (sniff,
// decide, resolve, dial, splice) reads top to bottom, where callbacks would scatter it over a
// state machine. A deadline is a timer that closes (or cancels) the socket it guards.
#include "agvisor/egress/proxy.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <csignal>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "agvisor/base/accept.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/egress/dns.h"
#include "agvisor/egress/dns_cache.h"
#include "agvisor/egress/intercept.h"
#include "agvisor/egress/sniff.h"

namespace agvisor::egress {
namespace {

namespace net = boost::asio;
using boost::system::error_code;
using net::ip::tcp;
using net::ip::udp;

// A client may split its ClientHello into 1-byte records (5 bytes of header each): the sniffers
// cap the message itself; this caps what is read before a verdict whatever the framing.
constexpr std::size_t kMaxSniffBytes = 6 * kMaxClientHelloBytes;
// Reads of a plain-HTTP client's requests after the first (RequestPump).
constexpr std::size_t kReadChunk = 64 * 1024;

net::ip::address ToAsio(const IpAddress& a) {
  if (a.is_v4()) {
    return net::ip::address_v4(
        net::ip::address_v4::bytes_type{a.bytes[0], a.bytes[1], a.bytes[2], a.bytes[3]});
  }
  net::ip::address_v6::bytes_type b;
  std::copy(a.bytes.begin(), a.bytes.end(), b.begin());
  return net::ip::address_v6(b);
}

IpAddress FromAsio(const net::ip::address& a) {
  IpAddress out;
  if (a.is_v4()) {
    const auto b = a.to_v4().to_bytes();
    return IpAddress::V4(b[0], b[1], b[2], b[3]);
  }
  const auto b = a.to_v6().to_bytes();
  out.family = IpAddress::Family::kV6;
  std::copy(b.begin(), b.end(), out.bytes.begin());
  return out;
}

// Is `a` an address of this host now? The kernel picks a local destination itself as the
// source of a route to it, so a UDP socket connect()ed to `a` (which sends nothing) has `a` as
// its own address exactly when `a` is local: an address added after the start and a gateway of
// a network made later are seen too. No route, no socket: not an address of this host (a TCP
// dial would fail the same way).
bool IsHostAddressNow(net::io_context& io, const IpAddress& a) {
  const udp::endpoint to(ToAsio(a), 9);
  udp::socket s(io);
  error_code ec;
  s.open(to.protocol(), ec);
  if (!ec) s.connect(to, ec);
  if (ec) return false;
  const udp::endpoint local = s.local_endpoint(ec);
  return !ec && FromAsio(local.address()) == a;
}

// The outcome of a lookup; a struct rather than Result<> (an awaitable's value must be
// default-constructible).
struct Lookup {
  std::vector<IpAddress> addresses;
  std::optional<Error> error;
};

std::string HttpRefusal(int status, std::string_view status_text, const std::string& reason) {
  std::string body = "agvisor egress: " + reason + "\n";
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_text) +
         "\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A request agvisor's egress policy refused: 403 whose body and X-Agvisor-Egress header carry
// the same one line (RefusalAdvice: what was refused, why, and how an operator allows it), so an
// agent reading either learns it was the policy, not the network, and what to ask for.
std::string PolicyRefusal(const std::string& advice) {
  const std::string body = advice + "\n";
  return "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nX-Agvisor-Egress: " + advice +
         "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         body;
}

// Runs `on_expiry` (which closes or cancels the socket an operation waits on) when the time is up,
// unless the Deadline was destroyed first. The handler may already be queued when the guarded
// operation completes and the coroutine moves on or ends; `armed` (shared with the handler, and
// cleared by the destructor) keeps it from touching a socket that is gone. One thread runs the
// io_context, so the flag needs no atomics.
class Deadline {
 public:
  template <typename Fn>
  Deadline(net::io_context& io, std::chrono::milliseconds after, Fn on_expiry)
      : timer_(io, after), state_(std::make_shared<State>()) {
    timer_.async_wait([state = state_, fn = std::move(on_expiry)](error_code e) {
      if (e || !state->armed) return;
      state->expired = true;
      fn();
    });
  }
  ~Deadline() {
    state_->armed = false;
    timer_.cancel();
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  bool expired() const { return state_->expired; }

 private:
  struct State {
    bool armed = true;
    bool expired = false;
  };
  net::steady_timer timer_;
  std::shared_ptr<State> state_;
};

// A refused later request waits at most this long for the answers to the requests before it
// (the upstream was told the requests ended), then the connection closes without its refusal.
constexpr std::chrono::seconds kAnswersBeforeRefusal{10};
// After a later request's refusal, the client's unread bytes are drained for this long (at
// most kMaxLingerBytes) before the close.
constexpr std::chrono::seconds kLingerAfterRefusal{2};
constexpr std::size_t kMaxLingerBytes = 256 * 1024;
// The head of the answer to an Upgrade request that is read to see whether it is a 101.
constexpr std::size_t kMaxUpgradeAnswerHead = 64 * 1024;
// Requests of one intercepted connection logged only once answered: past this many waiting, the
// oldest is logged without its answer.
constexpr std::size_t kMaxAwaiting = 64;

struct Splice;

// A sandbox's brokered secrets and the CA its bundle trusts (SetSecrets).
struct Brokered {
  std::vector<BrokeredSecret> secrets;
  std::shared_ptr<const SandboxCa> ca;
};

// What the proxy keeps of an open connection to judge it again when the policy changes.
struct Tracked {
  std::weak_ptr<Splice> splice;
  std::string via;
  Target target;
  IpAddress address;
};

// A socket pair being relayed; shared by the two directions, freed when both have ended.
struct Splice {
  enum class Upgrade : std::uint8_t { kNone, kPending, kSwitched, kRefused };

  Splice(net::io_context& io, tcp::socket c, tcp::socket u)
      : client(std::move(c)), upstream(std::move(u)), idle_timer(io), upgrade_wait(io) {
    upgrade_wait.expires_at(net::steady_timer::time_point::max());
  }
  ~Splice() {
    if (on_close) on_close(*this);
    if (registry != nullptr) registry->erase(this);
  }
  Splice(const Splice&) = delete;
  Splice& operator=(const Splice&) = delete;

  void Close() {
    error_code ignored;
    client.close(ignored);
    upstream.close(ignored);
  }
  void Touch() { last_active = std::chrono::steady_clock::now(); }

  tcp::socket client;
  tcp::socket upstream;
  std::chrono::steady_clock::time_point last_active = std::chrono::steady_clock::now();
  net::steady_timer idle_timer;
  // Sent to the client once the upstream's stream has ended (the refusal of a later request,
  // after the answers to the requests before it), then both sockets close.
  std::string final_to_client;
  bool down_ended = false;  // the upstream-to-client direction has passed its end on
  // The first request asked for an Upgrade: the client's next bytes wait for the answer.
  Upgrade upgrade = Upgrade::kNone;
  net::steady_timer upgrade_wait;  // cancelled when `upgrade` leaves kPending
  std::map<Splice*, Tracked>* registry = nullptr;
  // What the connection moved after its verdict, each way (an intercepted one: the plaintext),
  // and why the enforcer closed it ("" = an end of either side): its close record's
  // (Impl::WatchClose), logged by `on_close` when both directions have ended and this goes.
  std::uint64_t up = 0;
  std::uint64_t down = 0;
  std::string closed_because;
  std::function<void(const Splice&)> on_close;
};

// OpenSSL over one socket of a Splice, driven by the io thread's coroutines through a BIO over
// the pipe's own buffers (BufferBio): OpenSSL never touches the socket, so bytes read before the
// handshake (the ClientHello the sniffer kept) are fed in first, and reads and writes wait on
// Asio like every other pump. OpenSSL reads its records straight out of the buffer the socket
// was read into, and appends what it writes to the buffer the next socket write sends (a memory
// BIO would copy every byte once more each way). One reader at a time; writers from both
// directions are serialised by `flushing_` (the other waits for the socket write in progress,
// so a slow peer holds at most what was written meanwhile).
class TlsPipe {
 public:
  TlsPipe(net::io_context& io, tcp::socket& socket, SSL* ssl)
      : socket_(socket), ssl_(ssl), wake_(io) {
    BIO* bio = BIO_new(BufferBioMethod());
    BIO_set_data(bio, this);
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl_, bio, bio);  // one BIO both ways; the SSL owns it
    wake_.expires_at(net::steady_timer::time_point::max());
  }
  ~TlsPipe() { SSL_free(ssl_); }
  TlsPipe(const TlsPipe&) = delete;
  TlsPipe& operator=(const TlsPipe&) = delete;
  SSL* ssl() const { return ssl_; }

  // Bytes already read from the socket, handed to OpenSSL before anything else.
  void Feed(std::span<const std::uint8_t> bytes) {
    if (bytes.empty()) return;
    Reserve(bytes.size());
    std::memcpy(in_.get(), bytes.data(), bytes.size());
    in_pos_ = 0;
    in_end_ = bytes.size();
  }

  // True once the handshake is done.
  net::awaitable<bool> Handshake() {
    while (true) {
      ERR_clear_error();
      const int r = SSL_do_handshake(ssl_);
      const int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl_, r);
      // Flushed also after a failure: the alert tells the peer why.
      if (!co_await Flush()) co_return false;
      if (r == 1) co_return true;
      if (e != SSL_ERROR_WANT_READ || co_await Fill() <= 0) co_return false;
    }
  }

  // Up to `size` plaintext bytes: their count, 0 at the end of the stream (close_notify or the
  // socket's end), -1 on an error.
  net::awaitable<long> Read(char* buf, std::size_t size) {
    while (true) {
      ERR_clear_error();
      std::size_t n = 0;
      int r = SSL_read_ex(ssl_, buf, size, &n);
      // More records already received go in the same call (one write downstream for several
      // records, rather than one each).
      std::size_t more = 0;
      while (r == 1 && n < size && (SSL_pending(ssl_) > 0 || in_pos_ < in_end_) &&
             SSL_read_ex(ssl_, buf + n, size - n, &more) == 1) {
        n += more;
      }
      if (!out_.empty() && !co_await Flush()) co_return -1;
      if (r == 1) co_return static_cast<long>(n);
      const int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_ZERO_RETURN) co_return 0;
      if (e != SSL_ERROR_WANT_READ) co_return -1;
      const long filled = co_await Fill();
      if (filled <= 0) co_return filled;
    }
  }

  net::awaitable<bool> Write(std::string_view data) {
    ERR_clear_error();
    std::size_t n = 0;
    if (!data.empty() && SSL_write_ex(ssl_, data.data(), data.size(), &n) != 1) co_return false;
    co_return co_await Flush();
  }

  // close_notify: the peer reads the end of the stream.
  net::awaitable<void> Close() {
    ERR_clear_error();
    (void)SSL_shutdown(ssl_);
    (void)co_await Flush();
  }

 private:
  // The socket is read this much at a time (OpenSSL then takes records out of it).
  static constexpr std::size_t kSocketRead = 64 * 1024;

  // The BIO OpenSSL reads and writes through: reads take what Fill put in `in_` (or "retry" when
  // it is all taken), writes append to `out_`.
  static BIO_METHOD* BufferBioMethod() {
    static BIO_METHOD* const method = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "agvisor-tls-pipe");
      BIO_meth_set_read_ex(m, [](BIO* b, char* to, std::size_t size, std::size_t* done) {
        auto* self = static_cast<TlsPipe*>(BIO_get_data(b));
        BIO_clear_retry_flags(b);
        if (self->in_pos_ == self->in_end_) {
          BIO_set_retry_read(b);
          return 0;
        }
        *done = std::min(size, self->in_end_ - self->in_pos_);
        std::memcpy(to, self->in_.get() + self->in_pos_, *done);
        self->in_pos_ += *done;
        return 1;
      });
      BIO_meth_set_write_ex(m, [](BIO* b, const char* from, std::size_t size, std::size_t* done) {
        BIO_clear_retry_flags(b);
        static_cast<TlsPipe*>(BIO_get_data(b))->out_.append(from, size);
        *done = size;
        return 1;
      });
      BIO_meth_set_ctrl(m, [](BIO* b, int cmd, long, void*) -> long {
        auto* self = static_cast<TlsPipe*>(BIO_get_data(b));
        switch (cmd) {
          case BIO_CTRL_FLUSH:
            return 1;  // Flush writes `out_` when the coroutine gets to it
          case BIO_CTRL_PENDING:
            return static_cast<long>(self->in_end_ - self->in_pos_);
          case BIO_CTRL_WPENDING:
            return static_cast<long>(self->out_.size());
          default:
            return 0;
        }
      });
      return m;
    }();
    return method;
  }

  void Reserve(std::size_t size) {
    if (size <= in_size_) return;
    in_ = std::make_unique_for_overwrite<char[]>(size);
    in_size_ = size;
  }

  // Reads the socket into `in_` (OpenSSL has taken everything before): bytes read, 0 at its
  // end, -1 on an error.
  net::awaitable<long> Fill() {
    Reserve(kSocketRead);
    error_code ec;
    const std::size_t n = co_await socket_.async_read_some(
        net::buffer(in_.get(), in_size_), net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return ec == net::error::eof ? 0 : -1;
    in_pos_ = 0;
    in_end_ = n;
    co_return static_cast<long>(n);
  }

  // Writes what OpenSSL has queued to the socket; what is written meanwhile goes in the next
  // round (the buffers are swapped, not copied).
  net::awaitable<bool> Flush() {
    error_code ec;
    while (ok_) {
      if (flushing_) {
        co_await wake_.async_wait(net::redirect_error(net::use_awaitable, ec));
        continue;
      }
      if (out_.empty()) break;
      sending_.swap(out_);
      out_.clear();
      flushing_ = true;
      co_await net::async_write(socket_, net::buffer(sending_),
                                net::redirect_error(net::use_awaitable, ec));
      flushing_ = false;
      wake_.cancel();
      if (ec) ok_ = false;
    }
    co_return ok_;
  }

  tcp::socket& socket_;
  SSL* ssl_;
  net::steady_timer wake_;  // waited on while another coroutine flushes; cancelled after
  bool flushing_ = false;
  bool ok_ = true;
  std::unique_ptr<char[]> in_;  // what the socket gave, OpenSSL takes [in_pos_, in_end_)
  std::size_t in_size_ = 0;
  std::size_t in_pos_ = 0;
  std::size_t in_end_ = 0;
  std::string out_;      // what OpenSSL wrote since the last socket write began
  std::string sending_;  // the socket write in progress
};

// The enforcer decrypts and encrypts every byte of an intercepted connection on its io thread:
// its TLS 1.3 suites are offered AES-128-GCM first (OpenSSL's default puts AES-256-GCM first:
// 14 AES rounds a block instead of 10, measured in bench/README.md "Brokered secrets").
// AES-128-GCM is one of TLS 1.3's mandatory suites; the others stay offered.
void PreferAes128(SSL_CTX* ctx) {
  (void)SSL_CTX_set_ciphersuites(
      ctx, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384");
}

// Both TLS sessions of an intercepted connection (the sandbox's, and the upstream's), over the
// Splice's sockets.
struct Intercepted {
  Intercepted(net::io_context& io, std::shared_ptr<Splice> s, SSL* to_client, SSL* to_upstream)
      : splice(std::move(s)),
        client(io, splice->client, to_client),
        upstream(io, splice->upstream, to_upstream) {}
  std::shared_ptr<Splice> splice;
  TlsPipe client;
  TlsPipe upstream;
  // Requests sent and not answered yet, oldest first, with when each was sent: each is logged
  // once `answers` sees its answer end (status, bytes down, duration).
  std::deque<std::pair<Decision, std::chrono::steady_clock::time_point>> awaiting;
  AnswerTracker answers;
};

}  // namespace

class EgressProxy::Impl {
 public:
  Impl(ProxyOptions options, EgressPolicy policy, std::shared_ptr<DecisionLog> log)
      : options_(std::move(options)),
        policy_(std::make_shared<const EgressPolicy>(std::move(policy))),
        log_(std::move(log)),
        dns_cache_(options_.dns_cache_entries),
        dns_socket_(io_) {}

  ~Impl() {
    // Handlers (and so coroutine frames, with their sockets) are destroyed by ~io_context after
    // the thread has stopped running them.
    net::post(io_, [this] {
      stopping_ = true;  // the connections destroyed from now on log no close record
      error_code ignored;
      for (auto& a : acceptors_) a->close(ignored);
      dns_socket_.close(ignored);
      io_.stop();
    });
    if (thread_.joinable()) thread_.join();
  }

  Result<void> Listen() {
    error_code ec;
    std::vector<std::uint16_t> ports = {options_.listen_port};
    ports.insert(ports.end(), options_.extra_listen_ports.begin(),
                 options_.extra_listen_ports.end());
    for (std::uint16_t p : ports) {
      tcp::endpoint endpoint(ToAsio(options_.listen_address), p);
      auto a = std::make_unique<tcp::acceptor>(io_);
      a->open(endpoint.protocol(), ec);
      if (!ec) a->set_option(net::socket_base::reuse_address(true), ec);
      if (!ec) a->bind(endpoint, ec);
      if (!ec) a->listen(net::socket_base::max_listen_connections, ec);
      if (ec) {
        return Error::FromErrno("egress proxy: listen on " +
                                    FormatIpAddress(options_.listen_address) + ":" +
                                    std::to_string(p),
                                ec.value());
      }
      acceptors_.push_back(std::move(a));
    }
    port_ = acceptors_.front()->local_endpoint().port();
    if (options_.serve_dns) {
      udp::endpoint dns_endpoint(ToAsio(options_.listen_address), options_.dns_port);
      dns_socket_.open(dns_endpoint.protocol(), ec);
      if (!ec) dns_socket_.bind(dns_endpoint, ec);
      if (ec) {
        return Error::FromErrno("egress proxy: DNS on udp " +
                                    FormatIpAddress(options_.listen_address) + ":" +
                                    std::to_string(options_.dns_port),
                                ec.value());
      }
      dns_port_ = dns_socket_.local_endpoint().port();
      net::co_spawn(io_, ServeDns(), net::detached);
    }
    for (auto& a : acceptors_) net::co_spawn(io_, Accept(*a), net::detached);
    thread_ = std::thread([this] {
      // splice(2) into a socket whose peer is gone raises SIGPIPE at the calling thread (it takes
      // no MSG_NOSIGNAL). Blocked on this thread, it stays pending here and the pump sees EPIPE,
      // whatever the hosting process does with SIGPIPE.
      sigset_t sigpipe;
      sigemptyset(&sigpipe);
      sigaddset(&sigpipe, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &sigpipe, nullptr);
      io_.run();
    });
    return Ok();
  }

  std::uint16_t port() const { return port_; }
  std::uint16_t dns_port() const { return dns_port_; }
  std::size_t open_connections() const { return open_.load(); }
  ProxyTraffic traffic() const {
    return {.bytes_up = bytes_up_.load(std::memory_order_relaxed),
            .bytes_down = bytes_down_.load(std::memory_order_relaxed)};
  }

  void SetPolicy(EgressPolicy policy) {
    auto next = std::make_shared<const EgressPolicy>(std::move(policy));
    {
      std::lock_guard lock(mu_);
      policy_ = std::move(next);
    }
    net::post(io_, [this] { JudgeOpenConnections(); });
  }
  std::shared_ptr<const EgressPolicy> policy() const {
    std::lock_guard lock(mu_);
    return policy_;
  }

  void SetSecrets(std::vector<BrokeredSecret> secrets, std::shared_ptr<const SandboxCa> ca) {
    std::shared_ptr<const Brokered> next;
    if (!secrets.empty() && ca) {
      next = std::make_shared<const Brokered>(Brokered{std::move(secrets), std::move(ca)});
    }
    std::lock_guard lock(mu_);
    brokered_ = std::move(next);
  }
  std::shared_ptr<const Brokered> brokered() const {
    std::lock_guard lock(mu_);
    return brokered_;
  }

 private:
  // Counts a connection while it is open.
  // Counts a connection while it is open (and holds its share of a shared budget).
  class OpenGuard {
   public:
    explicit OpenGuard(std::atomic<std::size_t>* n) : n_(n) { ++*n_; }
    ~OpenGuard() {
      --*n_;
      if (budget_) budget_->Give();
    }
    OpenGuard(const OpenGuard&) = delete;
    OpenGuard& operator=(const OpenGuard&) = delete;
    bool Take(const std::shared_ptr<ConnectionBudget>& budget) {
      if (!budget->TryTake()) return false;
      budget_ = budget;
      return true;
    }

   private:
    std::atomic<std::size_t>* n_;
    std::shared_ptr<ConnectionBudget> budget_;
  };

  net::awaitable<void> Accept(tcp::acceptor& acceptor) {
    while (true) {
      error_code ec;
      tcp::socket client =
          co_await acceptor.async_accept(net::redirect_error(net::use_awaitable, ec));
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        // E.g. EMFILE: the listener goes on after a pause rather than spinning on the error
        // (base/accept.h).
        net::steady_timer pause(io_, kAcceptBackoff);
        co_await pause.async_wait(net::redirect_error(net::use_awaitable, ec));
        continue;
      }
      net::co_spawn(io_, Connection(std::move(client)), net::detached);
    }
  }

  // Logs `d` (time and sandbox set here); returns its number in the log (a close record's
  // `closes`).
  std::uint64_t Record(Decision d) {
    d.learned = d.learned && d.allowed;  // a learned connection that then failed is denied
    d.time = std::chrono::system_clock::now();
    d.sandbox = options_.sandbox;
    // What the log kept (bounded, numbered) is what the callback sees: agvisord's log files.
    const Decision kept = log_->Record(std::move(d));
    if (options_.on_decision) options_.on_decision(kept);
    return kept.seq;
  }

  // Counts `n` bytes relayed on `s` (up: sandbox to upstream): the proxy's totals and the
  // connection's own (its close record).
  void Count(Splice& s, bool up, std::uint64_t n) {
    (up ? bytes_up_ : bytes_down_).fetch_add(n, std::memory_order_relaxed);
    (up ? s.up : s.down) += n;
  }

  // Makes `s` log its close record when it goes (both directions ended): the connection of
  // decision `d` (number `seq`), its bytes each way and how long it was open. Costs the
  // connection one callback; the record goes to the same bounded ring and files as the rest.
  void WatchClose(Splice& s, const Decision& d, std::uint64_t seq) {
    s.on_close = [this, seq, via = d.via, name = d.name, port = d.port, address = d.address,
                  opened = std::chrono::steady_clock::now()](const Splice& closed) {
      if (stopping_) return;
      Record({.via = via,
              .name = name,
              .port = port,
              .allowed = true,
              .reason = closed.closed_because,
              .address = address,
              .bytes_up = closed.up,
              .bytes_down = closed.down,
              .duration = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - opened),
              .closes = seq});
    };
  }

  bool FromClient(const net::ip::address& peer) const {
    return !options_.clients || options_.clients->Contains(FromAsio(peer));
  }

  net::awaitable<void> Connection(tcp::socket client) {
    auto guard = std::make_shared<OpenGuard>(&open_);
    Decision d;
    error_code ec;
    if (auto peer = client.remote_endpoint(ec); ec || !FromClient(peer.address())) co_return;
    client.set_option(tcp::no_delay(true), ec);
    if (open_.load() > options_.max_connections) {
      Record({.via = "tcp",
              .reason =
                  "too many open connections (" + std::to_string(options_.max_connections) + ")"});
      co_return;
    }
    if (options_.shared_budget && !guard->Take(options_.shared_budget)) {
      Record({.via = "tcp",
              .reason = "too many open connections on this host (" +
                        std::to_string(options_.shared_budget->limit()) + ")"});
      co_return;
    }
    // 1. Sniff: read until a sniffer decides, within the deadline and the byte cap.
    std::vector<std::uint8_t> head;
    bool is_tls = false;
    ClientHelloSniffer tls_sniffer;  // both resume where they stopped (sniff.h)
    HttpRequestStream requests;
    ClientHelloSniff tls;
    HttpRequestSniff http;
    {
      Deadline deadline(io_, options_.sniff_timeout, [&client] {
        error_code ignored;
        client.close(ignored);
      });
      std::uint8_t chunk[4096];
      while (true) {
        std::size_t n = co_await client.async_read_some(
            net::buffer(chunk), net::redirect_error(net::use_awaitable, ec));
        if (ec) {
          if (deadline.expired()) {
            Record({.via = "tcp",
                    .reason = "no destination within " +
                              std::to_string(options_.sniff_timeout.count()) + " ms"});
          }
          co_return;  // the client left before saying where to: nothing to decide
        }
        head.insert(head.end(), chunk, chunk + n);
        is_tls = head[0] == 0x16;
        SniffStatus status;
        std::string reason;
        if (is_tls) {
          tls = tls_sniffer.Feed(head);
          status = tls.status;
          reason = tls.reason;
        } else {
          HttpRequestStream::Step step = requests.Next(
              std::string_view(reinterpret_cast<const char*>(head.data()), head.size()));
          status = step.kind == HttpRequestStream::Step::Kind::kHead      ? SniffStatus::kDone
                   : step.kind == HttpRequestStream::Step::Kind::kRefused ? SniffStatus::kRefused
                                                                          : SniffStatus::kNeedMore;
          reason = std::move(step.reason);
          if (status == SniffStatus::kDone) http = std::move(step.request);
        }
        if (status == SniffStatus::kNeedMore && head.size() >= kMaxSniffBytes) {
          status = SniffStatus::kRefused;
          reason = "no verdict within " + std::to_string(kMaxSniffBytes) + " bytes";
        }
        if (status == SniffStatus::kDone) break;
        if (status == SniffStatus::kRefused) {
          Record({.via = is_tls ? "tls" : "http", .reason = reason, .status = is_tls ? 0 : 400});
          if (!is_tls) co_await Reply(client, HttpRefusal(400, "Bad Request", reason));
          co_return;
        }
      }
    }
    // 2. Decide on the name.
    d.via = is_tls ? "tls" : http.form == HttpRequestSniff::Form::kConnect ? "connect" : "http";
    Target target;
    if (is_tls) {
      if (!tls.has_server_name) {
        d.reason = "TLS ClientHello without a server name (SNI)";
        Record(d);
        co_return;
      }
      auto t = TargetFromHost(tls.server_name, options_.tls_port);
      if (!t.ok()) {
        d.name = tls.server_name.substr(0, 80);
        d.reason = t.error().message();
        Record(d);
        co_return;
      }
      target = *t;
    } else {
      target = http.target;
    }
    d.name = target.host;
    d.port = target.port;
    if (!is_tls && http.form != HttpRequestSniff::Form::kConnect) {
      d.method = http.method;  // the connection's first request (the log's request fields)
      d.path = http.path;
    }
    std::shared_ptr<const EgressPolicy> policy = this->policy();
    Verdict verdict = policy->Decide(target);
    // The enforcer's own answer, when it gives one (transparent TLS gets none: a reset).
    auto answered = [&](int status) { return is_tls ? 0 : status; };
    if (!verdict.allowed) {
      d.reason = verdict.reason;
      d.status = answered(403);
      Record(d);
      if (!is_tls) {
        co_await Reply(client, PolicyRefusal(RefusalAdvice(options_.sandbox, target, d.reason)));
      }
      co_return;
    }
    // 3. Resolve (a literal resolves to itself), then check every address.
    Lookup lookup;
    if (target.literal) {
      lookup.addresses.push_back(*target.literal);
    } else {
      lookup = co_await Resolve(target.host);
    }
    if (lookup.error) {
      d.reason = lookup.error->message();
      d.status = answered(502);
      Record(d);
      if (!is_tls) co_await Reply(client, HttpRefusal(502, "Bad Gateway", d.reason));
      co_return;
    }
    std::vector<IpAddress> dialable;
    Verdict refused;
    for (const IpAddress& a : lookup.addresses) {
      Verdict v = CheckAddress(*policy, a);
      if (v.allowed) {
        dialable.push_back(a);
      } else if (refused.reason.empty()) {
        refused = v;
      }
    }
    if (dialable.empty()) {
      d.reason = lookup.addresses.empty() ? "resolves to no address"
                                          : "resolves to a refused address: " + refused.reason;
      d.status = answered(403);
      Record(d);
      if (!is_tls) {
        co_await Reply(client, PolicyRefusal(RefusalAdvice(options_.sandbox, target, d.reason,
                                                           /*resolved=*/true)));
      }
      co_return;
    }
    // 4. Dial the first address that answers.
    tcp::socket upstream(io_);
    std::string dial_error;
    IpAddress dialled;
    for (const IpAddress& a : dialable) {
      tcp::socket s(io_);
      {
        Deadline deadline(io_, options_.connect_timeout, [&s] {
          error_code ignored;
          s.close(ignored);
        });
        co_await s.async_connect(tcp::endpoint(ToAsio(a), target.port),
                                 net::redirect_error(net::use_awaitable, ec));
      }
      if (!ec && s.is_open()) {
        upstream = std::move(s);
        d.address = FormatIpAddress(a);
        dialled = a;
        break;
      }
      dial_error = FormatIpAddress(a) + ": " + (ec ? ec.message() : "connect timed out");
    }
    if (!upstream.is_open()) {
      d.reason = "could not connect: " + dial_error;
      d.status = answered(502);
      Record(d);
      if (!is_tls) co_await Reply(client, HttpRefusal(502, "Bad Gateway", d.reason));
      co_return;
    }
    upstream.set_option(tcp::no_delay(true), ec);
    d.reason = verdict.reason;
    d.learned = verdict.learned;
    if (std::shared_ptr<const Brokered> brokered = this->brokered();
        (is_tls || http.form == HttpRequestSniff::Form::kConnect) &&
        Intercepts(brokered.get(), target, options_.tls_port)) {
      const std::size_t early_from = is_tls ? 0 : http.head_bytes;
      std::vector<std::uint8_t> early(head.begin() + static_cast<std::ptrdiff_t>(early_from),
                                      head.end());
      co_await Intercept(std::move(client), std::move(upstream), std::move(early), target, dialled,
                         std::move(d), !is_tls, std::move(brokered), guard, policy.get());
      co_return;
    }
    d.allowed = true;
    auto splice = std::make_shared<Splice>(io_, std::move(client), std::move(upstream));
    WatchClose(*splice, d, Record(d));
    // 5. Replay what was read, then relay. TLS and CONNECT: every byte after the head, both
    // ways, spliced. Plain HTTP: the first head now; the client's side then goes through
    // RequestPump, which checks every later request.
    const bool plain_http = !is_tls && http.form != HttpRequestSniff::Form::kConnect;
    std::size_t replay_from = 0;
    std::size_t replay_to = head.size();
    if (!is_tls && http.form == HttpRequestSniff::Form::kConnect) {
      replay_from = http.head_bytes;
      co_await Reply(splice->client, "HTTP/1.1 200 Connection established\r\n\r\n");
    }
    if (plain_http) replay_to = http.head_bytes;
    if (replay_from < replay_to) {
      co_await net::async_write(splice->upstream,
                                net::buffer(head.data() + replay_from, replay_to - replay_from),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      Count(*splice, true, replay_to - replay_from);
    }
    std::string rest(head.begin() + static_cast<std::ptrdiff_t>(replay_to), head.end());
    head = {};
    Track(splice, {.via = d.via, .target = target, .address = dialled}, policy.get());
    if (options_.idle_timeout.count() > 0) net::co_spawn(io_, IdleWatch(splice), net::detached);
    if (!plain_http) {
      net::co_spawn(io_, Relay(splice, guard, true), net::detached);
      co_await Relay(splice, guard, false);
      co_return;
    }
    if (http.upgrade) splice->upgrade = Splice::Upgrade::kPending;
    net::co_spawn(io_,
                  RequestPump(splice, guard, std::move(requests), std::move(rest), target, d.reason,
                              d.address),
                  net::detached);
    if (http.upgrade) {
      co_await UpgradeAnswerPump(splice, guard);
    } else {
      co_await Relay(splice, guard, false);
    }
  }

  // ---- Brokered secrets: the connections the enforcer terminates (SetSecrets) ----

  // Whether a connection to `target` (allowed, dialled) is intercepted: a CONNECT or a TLS
  // connection to a name a secret is bound to, on the HTTPS port. Everything else stays as it is.
  static bool Intercepts(const Brokered* b, const Target& target, std::uint16_t tls_port) {
    return b != nullptr && !target.literal && target.port == tls_port &&
           IsBoundHost(b->secrets, target.host);
  }

  // The context the sandbox's side is served with (its leaf is set per connection): TLS 1.2+,
  // and ALPN agrees on http/1.1 only (a client offering only h2 gets no ALPN, and falls back).
  SSL_CTX* SandboxSideContext() {
    if (!sandbox_ctx_) {
      SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
      if (ctx == nullptr) return nullptr;
      SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
      PreferAes128(ctx);
      // Ours, not the client's order: AES-128-GCM unless the client puts ChaCha20 first (it
      // has no AES instructions, then ChaCha20 is its faster one).
      SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);
      SSL_CTX_set_alpn_select_cb(
          ctx,
          [](SSL*, const unsigned char** out, unsigned char* out_len, const unsigned char* in,
             unsigned int in_len, void*) {
            static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
            unsigned char* chosen = nullptr;
            if (SSL_select_next_proto(&chosen, out_len, kHttp11, sizeof kHttp11, in, in_len) !=
                OPENSSL_NPN_NEGOTIATED) {
              return SSL_TLSEXT_ERR_NOACK;
            }
            *out = chosen;
            return SSL_TLSEXT_ERR_OK;
          },
          nullptr);
      sandbox_ctx_.reset(ctx);
    }
    return sandbox_ctx_.get();
  }

  // The context upstreams are verified with: the system's trust store plus upstream_ca_pem
  // (loaded on the first intercepted connection: a proxy without secrets never reads it).
  SSL_CTX* UpstreamContext() {
    if (!upstream_ctx_) {
      SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
      if (ctx == nullptr) return nullptr;
      upstream_ctx_.reset(ctx);
      SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
      PreferAes128(ctx);
      (void)SSL_CTX_set_default_verify_paths(ctx);
      (void)AddPemCertificates(options_.upstream_ca_pem, SSL_CTX_get_cert_store(ctx));
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
      static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
      SSL_CTX_set_alpn_protos(ctx, kHttp11, sizeof kHttp11);
    }
    return upstream_ctx_.get();
  }

  // An allowed, dialled connection to a bound host: the upstream's TLS first, verified (its
  // certificate against the trust store, its name against the bound host) before anything of
  // the sandbox's is sent; then the sandbox's TLS with the sandbox CA's leaf for that host; then
  // every request through InterceptRequests. `early`: the sandbox's bytes read so far (the
  // ClientHello, or what followed a CONNECT head).
  net::awaitable<void> Intercept(tcp::socket client, tcp::socket upstream,
                                 std::vector<std::uint8_t> early, Target target, IpAddress dialled,
                                 Decision d, bool via_connect,
                                 std::shared_ptr<const Brokered> brokered,
                                 std::shared_ptr<OpenGuard> guard, const EgressPolicy* decided_by) {
    auto splice = std::make_shared<Splice>(io_, std::move(client), std::move(upstream));
    auto leaf = brokered->ca->LeafFor(target.host);
    SSL_CTX* up_ctx = UpstreamContext();
    SSL_CTX* sandbox_ctx = SandboxSideContext();
    // Why the connection is refused before the sandbox's handshake ("" while it is not).
    std::string refusal;
    if (!leaf.ok() || up_ctx == nullptr || sandbox_ctx == nullptr) {
      refusal = leaf.ok() ? "TLS interception unavailable (OpenSSL could not make a context)"
                          : leaf.error().message();
    }
    SSL* up = refusal.empty() ? SSL_new(up_ctx) : nullptr;
    SSL* down = refusal.empty() ? SSL_new(sandbox_ctx) : nullptr;
    if (refusal.empty() && (up == nullptr || down == nullptr)) {
      refusal = "TLS interception unavailable (OpenSSL could not make a session)";
    }
    if (!refusal.empty()) {
      SSL_free(up);
      SSL_free(down);
      co_await RefuseBeforeInterception(*splice, d, via_connect, std::move(refusal));
      co_return;
    }
    auto ic = std::make_shared<Intercepted>(io_, splice, down, up);
    SSL_set_connect_state(up);
    SSL_ctrl(up, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(target.host.c_str()));
    SSL_set1_host(up, target.host.c_str());
    SSL_set_accept_state(down);
    SSL_use_certificate(down, (*leaf)->cert());
    SSL_use_PrivateKey(down, (*leaf)->key());
    bool ok;
    {
      Deadline deadline(io_, options_.connect_timeout, [&splice] {
        error_code ignored;
        splice->upstream.close(ignored);
      });
      ok = co_await ic->upstream.Handshake();
    }
    if (!ok) {
      const long verify = SSL_get_verify_result(up);
      refusal = "upstream " + target.host + ": " +
                (verify != X509_V_OK ? std::string("its certificate did not verify (") +
                                           X509_verify_cert_error_string(verify) + ")"
                                     : std::string("the TLS handshake failed")) +
                "; nothing was sent to it";
      co_await RefuseBeforeInterception(*splice, d, via_connect, std::move(refusal));
      co_return;
    }
    if (via_connect) {
      co_await Reply(splice->client, "HTTP/1.1 200 Connection established\r\n\r\n");
    }
    ic->client.Feed(early);
    {
      Deadline deadline(io_, options_.connect_timeout, [&splice] {
        error_code ignored;
        splice->client.close(ignored);
      });
      ok = co_await ic->client.Handshake();
    }
    if (!ok) {
      d.allowed = false;
      d.reason = "the sandbox's TLS handshake for " + target.host +
                 " failed (does it trust its CA bundle? SSL_CERT_FILE)";
      Record(d);
      splice->Close();
      co_return;
    }
    d.allowed = true;
    d.reason += "; TLS terminated for a brokered secret";
    WatchClose(*splice, d, Record(d));
    Track(splice, {.via = d.via, .target = target, .address = dialled}, decided_by);
    if (options_.idle_timeout.count() > 0) net::co_spawn(io_, IdleWatch(splice), net::detached);
    net::co_spawn(io_, InterceptRequests(ic, guard, target, brokered, d.address), net::detached);
    co_await InterceptAnswers(ic, guard);
  }

  // Logs `d` as refused for `reason`; a CONNECT client is told (502), then both sides close.
  net::awaitable<void> RefuseBeforeInterception(Splice& s, Decision& d, bool via_connect,
                                                std::string reason) {
    d.allowed = false;
    d.reason = std::move(reason);
    d.status = via_connect ? 502 : 0;
    Record(d);
    if (via_connect) co_await Reply(s.client, HttpRefusal(502, "Bad Gateway", d.reason));
    s.Close();
  }

  // The sandbox-to-upstream direction of an intercepted connection: the decrypted stream is
  // followed by HttpRequestStream (the same parser, and the same refusals of ambiguous framing,
  // as plain HTTP); each head is checked and rewritten (RewriteRequestHead) and logged; bodies go
  // on as they are.
  net::awaitable<void> InterceptRequests(std::shared_ptr<Intercepted> ic,
                                         [[maybe_unused]] std::shared_ptr<OpenGuard> guard,
                                         Target target, std::shared_ptr<const Brokered> brokered,
                                         std::string address) {
    Splice& s = *ic->splice;
    HttpRequestStream requests;
    std::string pending;
    std::unique_ptr<char[]> buffer = std::make_unique_for_overwrite<char[]>(kReadChunk);
    auto request_decision = [&] {
      Decision r;
      r.via = "https";
      r.name = target.host;
      r.port = target.port;
      r.address = address;
      return r;
    };
    while (true) {
      while (!pending.empty()) {
        HttpRequestStream::Step step = requests.Next(pending);
        if (step.kind == HttpRequestStream::Step::Kind::kNeedMore) break;
        if (step.kind == HttpRequestStream::Step::Kind::kRefused) {
          Decision r = request_decision();
          r.reason = step.reason;
          r.status = 400;
          Record(r);
          co_await RefuseIntercepted(ic, HttpRefusal(400, "Bad Request", step.reason));
          co_return;
        }
        std::string_view out(pending.data(), step.bytes);
        std::string head;
        if (step.kind == HttpRequestStream::Step::Kind::kHead) {
          RequestRewrite rw = RewriteRequestHead(out, target.host, target.port, brokered->secrets);
          Decision r = request_decision();
          r.method = std::move(rw.method);
          r.path = std::move(rw.path);
          r.secret = rw.secret;
          if (rw.kind != RequestRewrite::Kind::kForward) {
            const bool misdirected = rw.kind == RequestRewrite::Kind::kMisdirected;
            r.status = misdirected ? 421 : 400;
            r.reason = rw.reason;
            Record(r);
            co_await RefuseIntercepted(
                ic, HttpRefusal(r.status, misdirected ? "Misdirected Request" : "Bad Request",
                                rw.reason));
            co_return;
          }
          r.allowed = true;
          r.reason = "bound host " + target.host;
          r.bytes_up = rw.head.size();
          ic->answers.Expect(r.method == "HEAD");
          ic->awaiting.emplace_back(std::move(r), std::chrono::steady_clock::now());
          // Bounded: past this many unanswered (or once answers cannot be followed), the oldest
          // is logged without its answer.
          while (ic->awaiting.size() > kMaxAwaiting || ic->answers.broken()) {
            if (ic->awaiting.empty()) break;
            Record(std::move(ic->awaiting.front().first));
            ic->awaiting.pop_front();
          }
          head = std::move(rw.head);
          out = head;
        }
        if (!co_await ic->upstream.Write(out)) {
          s.Close();
          co_return;
        }
        if (step.kind == HttpRequestStream::Step::Kind::kBody && !ic->awaiting.empty()) {
          ic->awaiting.back().first.bytes_up += out.size();
        }
        Count(s, true, out.size());
        s.Touch();
        pending.erase(0, step.bytes);
      }
      const long n = co_await ic->client.Read(buffer.get(), kReadChunk);
      if (n == 0) {
        co_await ic->upstream.Close();
        error_code ec;
        s.upstream.shutdown(tcp::socket::shutdown_send, ec);
        co_return;
      }
      if (n < 0) {
        s.Close();
        co_return;
      }
      pending.append(buffer.get(), static_cast<std::size_t>(n));
      s.Touch();
    }
  }

  // A request on an intercepted connection is refused: nothing more goes upstream, the upstream
  // is told the requests have ended, and `refusal` follows the answers to the requests before it
  // (InterceptAnswers sends it at the upstream's end; kAnswersBeforeRefusal at most).
  net::awaitable<void> RefuseIntercepted(std::shared_ptr<Intercepted> ic, std::string refusal) {
    Splice& s = *ic->splice;
    if (s.down_ended) {
      (void)co_await ic->client.Write(refusal);
      co_await ic->client.Close();
      co_await Linger(s);
      co_return;
    }
    s.final_to_client = std::move(refusal);
    co_await ic->upstream.Close();
    error_code ec;
    s.upstream.shutdown(tcp::socket::shutdown_send, ec);
    auto timer = std::make_shared<net::steady_timer>(io_, kAnswersBeforeRefusal);
    timer->async_wait([timer, weak = std::weak_ptr<Splice>(ic->splice)](error_code e) {
      if (e) return;
      if (auto alive = weak.lock()) alive->Close();
    });
  }

  // Logs the requests whose answers ended (`answers`, oldest first), and at the end of the
  // connection (`all`) those left unanswered (status 0).
  void LogAnswered(Intercepted& ic, const std::vector<AnswerTracker::Answer>& answers, bool all) {
    const auto now = std::chrono::steady_clock::now();
    for (const AnswerTracker::Answer& a : answers) {
      if (ic.awaiting.empty()) break;
      auto& [d, sent] = ic.awaiting.front();
      d.status = a.status;
      d.bytes_down = a.bytes;
      d.duration = std::chrono::duration_cast<std::chrono::milliseconds>(now - sent);
      Record(std::move(d));
      ic.awaiting.pop_front();
    }
    while (all && !ic.awaiting.empty()) {
      Record(std::move(ic.awaiting.front().first));
      ic.awaiting.pop_front();
    }
  }

  // The upstream-to-sandbox direction of an intercepted connection: answers go back as they are.
  net::awaitable<void> InterceptAnswers(std::shared_ptr<Intercepted> ic,
                                        [[maybe_unused]] std::shared_ptr<OpenGuard> guard) {
    Splice& s = *ic->splice;
    std::unique_ptr<char[]> buffer = std::make_unique_for_overwrite<char[]>(kReadChunk);
    while (true) {
      const long n = co_await ic->upstream.Read(buffer.get(), kReadChunk);
      if (n < 0) {
        s.Close();
        LogAnswered(*ic, ic->answers.End(), true);
        co_return;
      }
      if (n == 0) break;
      LogAnswered(*ic,
                  ic->answers.Feed(std::string_view(buffer.get(), static_cast<std::size_t>(n))),
                  false);
      if (!co_await ic->client.Write(std::string_view(buffer.get(), static_cast<std::size_t>(n)))) {
        s.Close();
        co_return;
      }
      Count(s, false, static_cast<std::uint64_t>(n));
      s.Touch();
    }
    s.down_ended = true;
    LogAnswered(*ic, ic->answers.End(), true);
    if (!s.final_to_client.empty()) (void)co_await ic->client.Write(s.final_to_client);
    co_await ic->client.Close();
    if (!s.final_to_client.empty()) {
      co_await Linger(s);
      co_return;
    }
    error_code ec;
    s.client.shutdown(tcp::socket::shutdown_send, ec);
  }

  // Why a later request on a plain-HTTP connection is refused ("" when it is not), and the
  // status to answer. The connection was dialled for `allowed` only: a request for any other
  // name or port (even one the policy allows) would reach the wrong server (issue 32: behind a
  // CDN one allowed name would open every site on it).
  static std::pair<int, std::string> LaterRequestRefusal(const HttpRequestSniff& r,
                                                         const Target& allowed) {
    const std::string wanted = r.target.host + ":" + std::to_string(r.target.port);
    const std::string dialled = allowed.host + ":" + std::to_string(allowed.port);
    if (r.form == HttpRequestSniff::Form::kConnect) {
      return {400, "CONNECT after another request on one connection (open a new connection)"};
    }
    if (!(r.target == allowed)) {
      return {403, "a request for " + wanted + " on a connection opened for " + dialled +
                       " (one connection, one destination: open a new connection)"};
    }
    if (r.upgrade) {
      return {400, "Upgrade only on the first request of a connection (open a new connection)"};
    }
    return {0, ""};
  }

  // The client-to-upstream direction of a plain-HTTP connection, in user space: the request
  // stream is followed (HttpRequestStream) so that every head is checked before it is sent on.
  // `pending` holds the client's bytes read after the first head. Each later request is a record
  // of its own: refused, or allowed by the connection's verdict (`reason`, dialled `address`).
  net::awaitable<void> RequestPump(std::shared_ptr<Splice> s, std::shared_ptr<OpenGuard> guard,
                                   HttpRequestStream requests, std::string pending, Target allowed,
                                   std::string reason, std::string address) {
    error_code ec;
    std::unique_ptr<char[]> buffer = std::make_unique_for_overwrite<char[]>(kReadChunk);
    while (true) {
      while (!pending.empty() &&
             !(s->upgrade != Splice::Upgrade::kNone && requests.at_request_start())) {
        HttpRequestStream::Step step = requests.Next(pending);
        if (step.kind == HttpRequestStream::Step::Kind::kNeedMore) break;
        if (step.kind == HttpRequestStream::Step::Kind::kRefused) {
          Record({.via = "http", .reason = step.reason});
          EndAfterAnswers(s, HttpRefusal(400, "Bad Request", step.reason));
          co_return;
        }
        if (step.kind == HttpRequestStream::Step::Kind::kHead) {
          auto [status, why] = LaterRequestRefusal(step.request, allowed);
          if (status != 0) {
            Record({.via = "http",
                    .name = step.request.target.host,
                    .port = step.request.target.port,
                    .reason = why,
                    .method = step.request.method,
                    .path = step.request.path,
                    .status = status});
            EndAfterAnswers(s,
                            HttpRefusal(status, status == 403 ? "Forbidden" : "Bad Request", why));
            co_return;
          }
          Record({.via = "http",
                  .name = allowed.host,
                  .port = allowed.port,
                  .allowed = true,
                  .reason = reason,
                  .address = address,
                  .method = step.request.method,
                  .path = step.request.path});
        }
        co_await net::async_write(s->upstream, net::buffer(pending.data(), step.bytes),
                                  net::redirect_error(net::use_awaitable, ec));
        if (ec) {
          s->Close();
          co_return;
        }
        Count(*s, true, step.bytes);
        s->Touch();
        pending.erase(0, step.bytes);
      }
      if (s->upgrade != Splice::Upgrade::kNone && requests.at_request_start()) {
        // The first request asked to switch protocols and has been sent whole: nothing more
        // goes until its answer says whether the rest is HTTP.
        if (s->upgrade == Splice::Upgrade::kPending) {
          co_await s->upgrade_wait.async_wait(net::redirect_error(net::use_awaitable, ec));
        }
        if (!s->client.is_open() || !s->upstream.is_open()) co_return;
        if (s->upgrade == Splice::Upgrade::kSwitched) {
          if (!pending.empty()) {
            co_await net::async_write(s->upstream, net::buffer(pending),
                                      net::redirect_error(net::use_awaitable, ec));
            if (ec) {
              s->Close();
              co_return;
            }
            Count(*s, true, pending.size());
          }
          co_await Relay(std::move(s), std::move(guard), true);
          co_return;
        }
        // Not switched: the connection ends after that answer (its end is not known here).
        s->upstream.shutdown(tcp::socket::shutdown_send, ec);
        co_return;
      }
      const std::size_t n = co_await s->client.async_read_some(
          net::buffer(buffer.get(), kReadChunk), net::redirect_error(net::use_awaitable, ec));
      if (ec == net::error::eof) {
        s->upstream.shutdown(tcp::socket::shutdown_send, ec);
        co_return;
      }
      if (ec) {
        s->Close();
        co_return;
      }
      pending.append(buffer.get(), n);
      s->Touch();
    }
  }

  // The upstream-to-client direction after an Upgrade request: the answer's head is read in
  // user space (and passed on as it comes) to see whether it is a 101; then spliced as usual.
  net::awaitable<void> UpgradeAnswerPump(std::shared_ptr<Splice> s,
                                         std::shared_ptr<OpenGuard> guard) {
    std::string head;
    char buf[4096];
    error_code ec;
    bool switched = false;
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxUpgradeAnswerHead) {
      const std::size_t n = co_await s->upstream.async_read_some(
          net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
      if (!ec) {
        co_await net::async_write(s->client, net::buffer(buf, n),
                                  net::redirect_error(net::use_awaitable, ec));
      }
      if (ec) {
        s->upgrade = Splice::Upgrade::kRefused;
        s->upgrade_wait.cancel();
        if (ec == net::error::eof) {
          co_await EndOfUpstream(*s);
        } else {
          s->Close();
        }
        co_return;
      }
      Count(*s, false, n);
      s->Touch();
      head.append(buf, n);
    }
    // "HTTP/1.1 101 Switching Protocols": only this answer makes the rest opaque.
    switched = head.size() >= 13 && head.starts_with("HTTP/1.") && head.compare(8, 5, " 101 ") == 0;
    s->upgrade = switched ? Splice::Upgrade::kSwitched : Splice::Upgrade::kRefused;
    s->upgrade_wait.cancel();
    co_await Relay(std::move(s), std::move(guard), false);
  }

  // A later request is refused: nothing more of the client's goes upstream, the upstream is
  // told the requests have ended, and `refusal` follows the answers to the requests before it
  // (the upstream-to-client pump sends it at the upstream's end, then closes). A server that
  // keeps its side open is not waited for past kAnswersBeforeRefusal.
  void EndAfterAnswers(const std::shared_ptr<Splice>& s, std::string refusal) {
    if (s->down_ended) {
      s->Close();  // the upstream already ended: the client's write side is shut
      return;
    }
    s->final_to_client = std::move(refusal);
    error_code ec;
    s->upstream.shutdown(tcp::socket::shutdown_send, ec);
    auto timer = std::make_shared<net::steady_timer>(io_, kAnswersBeforeRefusal);
    timer->async_wait([timer, weak = std::weak_ptr<Splice>(s)](error_code e) {
      if (e) return;
      if (auto alive = weak.lock()) alive->Close();
    });
  }

  // Called at the end of the upstream's stream: the refusal waiting for it, if any, goes to
  // the client and both sockets close; else the end is passed on (half-close).
  net::awaitable<void> EndOfUpstream(Splice& s) {
    error_code ec;
    if (!s.final_to_client.empty()) {
      co_await net::async_write(s.client, net::buffer(s.final_to_client),
                                net::redirect_error(net::use_awaitable, ec));
      co_await Linger(s);
      co_return;
    }
    s.client.shutdown(tcp::socket::shutdown_send, ec);
    s.down_ended = true;
  }

  // Closes a connection after a refusal was sent: the client's side is shut, the upstream
  // closed, and (a lingering close) the client's unread bytes drained for a moment, since closing
  // with unread bytes makes the kernel send a reset, which can destroy the refusal before the
  // client has read it.
  net::awaitable<void> Linger(Splice& s) {
    error_code ec;
    s.client.shutdown(tcp::socket::shutdown_send, ec);
    s.upstream.close(ec);
    Deadline deadline(io_, kLingerAfterRefusal, [&s] {
      error_code ignored;
      s.client.close(ignored);
    });
    char sink[4096];
    for (std::size_t drained = 0; drained < kMaxLingerBytes;) {
      drained += co_await s.client.async_read_some(net::buffer(sink),
                                                   net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
    }
    s.Close();
  }

  // EgressPolicy::CheckResolved with this proxy's options, then the kernel's word on whether the
  // address is the host's own now (host_addresses is a list taken at one moment).
  Verdict CheckAddress(const EgressPolicy& policy, const IpAddress& a) {
    Verdict v = policy.CheckResolved(a, options_.host_addresses, options_.test_only_dialable);
    for (const Cidr& c : options_.test_only_dialable) {
      if (c.Contains(a)) return v;
    }
    if (v.allowed && IsHostAddressNow(io_, a))
      return {false, FormatIpAddress(a) + " is the host's own address (no rule opens it)"};
    return v;
  }

  // Registers an open connection so that a policy change judges it again; judged at once if
  // the policy changed while it was being dialled (`decided_by` is the policy that allowed it).
  void Track(const std::shared_ptr<Splice>& s, Tracked t, const EgressPolicy* decided_by) {
    t.splice = s;
    s->registry = &tracked_;
    auto it = tracked_.emplace(s.get(), std::move(t)).first;
    if (policy().get() != decided_by) JudgeAgain(it->second);
  }

  // Closes the connection when the current policy no longer allows it; true when it did.
  bool JudgeAgain(const Tracked& t) {
    auto s = t.splice.lock();
    if (!s) return false;
    std::shared_ptr<const EgressPolicy> p = policy();
    Verdict v = p->Decide(t.target);
    if (v.allowed) {
      Verdict a = CheckAddress(*p, t.address);
      if (!a.allowed) v.reason = "resolves to a refused address: " + a.reason;
      v.allowed = a.allowed;
    }
    if (v.allowed) return false;
    Record({.via = t.via,
            .name = t.target.host,
            .port = t.target.port,
            .reason = "open connection closed, the policy changed: " + v.reason,
            .address = FormatIpAddress(t.address)});
    s->closed_because = "the policy changed";
    s->Close();
    return true;
  }

  void JudgeOpenConnections() {
    std::vector<Tracked> open;
    for (const auto& [ptr, t] : tracked_) open.push_back(t);
    for (const Tracked& t : open) (void)JudgeAgain(t);
  }

  // Closes a relayed connection that moved no byte either way for options_.idle_timeout.
  net::awaitable<void> IdleWatch(std::weak_ptr<Splice> weak) {
    while (true) {
      net::steady_timer* timer = nullptr;
      {
        auto s = weak.lock();
        if (!s || (!s->client.is_open() && !s->upstream.is_open())) co_return;
        if (std::chrono::steady_clock::now() - s->last_active >= options_.idle_timeout) {
          s->closed_because = "idle for " + std::to_string(options_.idle_timeout.count()) + " ms";
          s->Close();
          co_return;
        }
        s->idle_timer.expires_at(s->last_active + options_.idle_timeout);
        timer = &s->idle_timer;
      }
      // The Splice may go while this waits: its timer's destructor cancels the wait, and the
      // timer is not touched again.
      error_code ec;
      co_await timer->async_wait(net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
    }
  }

  // One direction of a connection: through a pipe with splice(2) (SplicePump), or, when no pipe
  // can be had (e.g. out of file descriptors), through a buffer in user space (CopyPump).
  net::awaitable<void> Relay(std::shared_ptr<Splice> splice, std::shared_ptr<OpenGuard> guard,
                             bool client_to_upstream) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
      UniqueFd out(fds[0]);
      UniqueFd in(fds[1]);
      co_await SplicePump(std::move(splice), std::move(guard), client_to_upstream, std::move(in),
                          std::move(out));
    } else {
      co_await CopyPump(std::move(splice), std::move(guard), client_to_upstream);
    }
  }

  net::awaitable<void> Reply(tcp::socket& client, std::string text) {
    error_code ec;
    co_await net::async_write(client, net::buffer(text),
                              net::redirect_error(net::use_awaitable, ec));
  }

  // One direction of a splice. At the source's end of stream, the end is passed on (shutdown of
  // the sending side) and the other direction goes on; on an error both sockets close.
  // `guard` keeps the connection counted until both directions have ended.
  // One direction through a pipe: splice(2) moves the source socket's received pages into the pipe
  // and from the pipe into the destination socket, so no byte is copied through user space, and
  // each call moves up to a pipe's worth (buffer_bytes) rather than one buffer. Measured on runsc
  // (docs/egress.md, "Figures"): a 100 MB download through 64 KiB read/write copies cost the
  // relay ~140 ms of CPU, through a 1 MiB pipe ~50 ms, and a sandbox's receiving side also does
  // less work when data comes in larger pieces. Same end-of-stream and error handling as
  // CopyPump; bytes are counted as they leave the pipe into the destination.
  net::awaitable<void> SplicePump(std::shared_ptr<Splice> splice,
                                  [[maybe_unused]] std::shared_ptr<OpenGuard> guard,
                                  bool client_to_upstream, UniqueFd pipe_in, UniqueFd pipe_out) {
    tcp::socket& from = client_to_upstream ? splice->client : splice->upstream;
    tcp::socket& to = client_to_upstream ? splice->upstream : splice->client;
    // A larger pipe is a request: the kernel may refuse it (pipe-user-pages limits for users
    // without CAP_SYS_RESOURCE), and the pipe then keeps its default size.
    (void)::fcntl(pipe_in.get(), F_SETPIPE_SZ, static_cast<int>(options_.buffer_bytes));
    const int size = ::fcntl(pipe_in.get(), F_GETPIPE_SZ);
    const std::size_t capacity = size > 0 ? static_cast<std::size_t>(size) : 65536;
    error_code ec;
    // splice(2) on a socket blocks unless the socket itself is O_NONBLOCK (SPLICE_F_NONBLOCK
    // only covers the pipe's side).
    from.native_non_blocking(true, ec);
    if (!ec) to.native_non_blocking(true, ec);
    std::size_t in_pipe = 0;     // bytes read from `from` and not yet written to `to`
    std::size_t since_turn = 0;  // bytes moved since this pump last let others run
    bool source_ended = false;
    auto fail = [&] {
      from.close(ec);
      to.close(ec);
    };
    while (true) {
      // Native handles are read afresh each time: the other direction may have closed both.
      if (!from.is_open() || !to.is_open()) co_return;
      if (!source_ended && in_pipe < capacity) {
        const ssize_t n = ::splice(from.native_handle(), nullptr, pipe_in.get(), nullptr,
                                   capacity - in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
          in_pipe += static_cast<std::size_t>(n);
        } else if (n == 0) {
          source_ended = true;
        } else if (errno == EAGAIN) {
          if (in_pipe == 0) {
            // Edge-triggered readiness is safe here: the wait starts only after the source said
            // it had nothing, so the next arrival is an edge the wait sees.
            co_await from.async_wait(tcp::socket::wait_read,
                                     net::redirect_error(net::use_awaitable, ec));
            if (ec) {
              fail();
              co_return;
            }
            continue;
          }
        } else if (errno != EINTR) {
          fail();
          co_return;
        }
      }
      if (in_pipe > 0) {
        const ssize_t m = ::splice(pipe_out.get(), nullptr, to.native_handle(), nullptr, in_pipe,
                                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (m > 0) {
          splice->Touch();
          in_pipe -= static_cast<std::size_t>(m);
          since_turn += static_cast<std::size_t>(m);
          Count(*splice, client_to_upstream, static_cast<std::uint64_t>(m));
        } else if (m < 0 && errno == EAGAIN) {
          co_await to.async_wait(tcp::socket::wait_write,
                                 net::redirect_error(net::use_awaitable, ec));
          if (ec) {
            fail();
            co_return;
          }
          since_turn = 0;
        } else if (m == 0 || errno != EINTR) {
          fail();  // e.g. EPIPE, ECONNRESET
          co_return;
        }
        // A fast pair never has to wait, and one io thread serves all of a sandbox's connections:
        // after a few pipes' worth, let the others run.
        if (since_turn >= 4 * capacity) {
          co_await net::post(io_, net::use_awaitable);
          since_turn = 0;
        }
        continue;
      }
      if (source_ended) {
        if (!client_to_upstream) {
          co_await EndOfUpstream(*splice);
        } else {
          to.shutdown(tcp::socket::shutdown_send, ec);
        }
        co_return;
      }
    }
  }

  // One direction through a buffer of buffer_bytes in user space (read, then write).
  net::awaitable<void> CopyPump(std::shared_ptr<Splice> splice,
                                [[maybe_unused]] std::shared_ptr<OpenGuard> guard,
                                bool client_to_upstream) {
    tcp::socket& from = client_to_upstream ? splice->client : splice->upstream;
    tcp::socket& to = client_to_upstream ? splice->upstream : splice->client;
    // Not zero-filled: an idle tunnel's buffer pages are never touched, so they cost no RSS.
    std::unique_ptr<std::uint8_t[]> buffer =
        std::make_unique_for_overwrite<std::uint8_t[]>(options_.buffer_bytes);
    error_code ec;
    while (true) {
      std::size_t n =
          co_await from.async_read_some(net::buffer(buffer.get(), options_.buffer_bytes),
                                        net::redirect_error(net::use_awaitable, ec));
      if (ec == net::error::eof) {
        if (!client_to_upstream) {
          co_await EndOfUpstream(*splice);
        } else {
          to.shutdown(tcp::socket::shutdown_send, ec);
        }
        co_return;
      }
      if (!ec) {
        splice->Touch();
        co_await net::async_write(to, net::buffer(buffer.get(), n),
                                  net::redirect_error(net::use_awaitable, ec));
        // One relaxed add per buffer's worth: no cost the bench can see.
        if (!ec) Count(*splice, client_to_upstream, n);
      }
      if (ec) {
        from.close(ec);
        to.close(ec);
        co_return;
      }
    }
  }

  // The in-sandbox resolver: one datagram in, at most one out, no state kept between them.
  net::awaitable<void> ServeDns() {
    std::optional<IpAddress> v4 = options_.dns_answer_v4;
    std::optional<IpAddress> v6 = options_.dns_answer_v6;
    if (!v4 && !v6) (options_.listen_address.is_v4() ? v4 : v6) = options_.listen_address;
    std::vector<std::uint8_t> buf(4096);
    while (true) {
      udp::endpoint from;
      error_code ec;
      std::size_t n = co_await dns_socket_.async_receive_from(
          net::buffer(buf), from, net::redirect_error(net::use_awaitable, ec));
      if (ec == net::error::operation_aborted || !dns_socket_.is_open()) co_return;
      if (ec) continue;  // e.g. a datagram larger than the buffer: dropped
      if (!FromClient(from.address())) continue;
      DnsAnswer answer = AnswerDnsQuery(std::span(buf.data(), n), *policy(), v4, v6);
      Record({.via = "dns",
              .name = answer.name,
              .port = dns_port_,
              .allowed = answer.allowed,
              .reason = answer.reason,
              .learned = answer.learned});
      if (answer.response.empty()) continue;
      co_await dns_socket_.async_send_to(net::buffer(answer.response), from,
                                         net::redirect_error(net::use_awaitable, ec));
    }
  }

  // A, then AAAA, for `name` through the configured resolver, unless a lookup of it is still
  // kept (dns_cache_); answers with addresses are kept for their TTL.
  net::awaitable<Lookup> Resolve(std::string name) {
    Lookup out;
    if (auto kept = dns_cache_.Find(name, DnsCache::Clock::now())) {
      out.addresses = std::move(*kept);
      co_return out;
    }
    std::optional<Error> last;
    for (DnsType type : {DnsType::kA, DnsType::kAaaa}) {
      Result<DnsAddresses> r = co_await Query(name, type);
      if (r.ok()) {
        if (!r->addresses.empty()) {
          out.addresses = r->addresses;
          dns_cache_.Insert(name, std::move(r->addresses), std::chrono::seconds(r->ttl),
                            DnsCache::Clock::now());
          co_return out;
        }
      } else {
        if (r.error().code() == ErrorCode::kNotFound) {
          out.error = r.error();
          co_return out;
        }
        last = r.error();
      }
    }
    if (out.addresses.empty() && last) out.error = last;
    co_return out;
  }

  // One question, two attempts of resolve_timeout each. Datagrams that are not the answer (from
  // another address, another id or question) are ignored: a spoofer must guess a random id and
  // port, and a wrong answer never ends the wait early.
  net::awaitable<Result<DnsAddresses>> Query(std::string name, DnsType type) {
    udp::endpoint server(ToAsio(options_.resolver_address), options_.resolver_port);
    udp::socket socket(io_);
    error_code ec;
    socket.open(server.protocol(), ec);
    if (ec) co_return Error::FromErrno("egress resolver: open a UDP socket", ec.value());
    std::uint16_t id = static_cast<std::uint16_t>(std::random_device{}());
    std::vector<std::uint8_t> query = BuildDnsQuery(id, name, type);
    std::vector<std::uint8_t> buf(4096);
    for (int attempt = 0; attempt < 2; ++attempt) {
      co_await socket.async_send_to(net::buffer(query), server,
                                    net::redirect_error(net::use_awaitable, ec));
      if (ec) continue;
      Deadline deadline(io_, options_.resolve_timeout, [&socket] {
        error_code ignored;
        socket.cancel(ignored);
      });
      while (true) {
        udp::endpoint from;
        std::size_t n = co_await socket.async_receive_from(
            net::buffer(buf), from, net::redirect_error(net::use_awaitable, ec));
        if (ec) break;  // the deadline cancelled it: next attempt
        if (from != server) continue;
        auto r = ParseDnsAnswer(std::span(buf.data(), n), id, name, type);
        if (!r.ok() && r.error().code() == ErrorCode::kInvalidArgument) continue;
        co_return r;
      }
    }
    co_return Error::Timeout("DNS: no answer for " + name + " from " +
                             FormatIpAddress(options_.resolver_address) + ":" +
                             std::to_string(options_.resolver_port));
  }

  ProxyOptions options_;
  mutable std::mutex mu_;
  std::shared_ptr<const EgressPolicy> policy_;
  std::shared_ptr<const Brokered> brokered_;  // null: nothing is intercepted
  // TLS contexts of intercepted connections, made on first use (io thread only).
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> sandbox_ctx_{nullptr, SSL_CTX_free};
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> upstream_ctx_{nullptr, SSL_CTX_free};
  std::shared_ptr<DecisionLog> log_;
  DnsCache dns_cache_;  // touched on the io thread only
  // Open relayed connections, for JudgeOpenConnections (io thread only). Declared before io_:
  // Splices destroyed with io_'s handlers take themselves out of it.
  std::map<Splice*, Tracked> tracked_;
  std::atomic<std::size_t> open_{0};
  std::atomic<std::uint64_t> bytes_up_{0};
  std::atomic<std::uint64_t> bytes_down_{0};
  std::uint16_t port_ = 0;
  // Set on the io thread as the proxy stops (read by WatchClose's callbacks, which run on it or,
  // after the thread is joined, as io_'s handlers are destroyed).
  bool stopping_ = false;
  // io_ is declared before everything that holds its handlers, and destroyed after them.
  net::io_context io_{1};
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;  // listen_port first
  udp::socket dns_socket_;
  std::uint16_t dns_port_ = 0;
  std::thread thread_;
};

bool ConnectionBudget::TryTake() {
  std::size_t n = taken_.load();
  do {
    if (n >= limit_) return false;
  } while (!taken_.compare_exchange_weak(n, n + 1));
  return true;
}

void ConnectionBudget::Give() { taken_.fetch_sub(1); }

EgressProxy::EgressProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EgressProxy::~EgressProxy() = default;

Result<std::unique_ptr<EgressProxy>> EgressProxy::Start(ProxyOptions options, EgressPolicy policy,
                                                        std::shared_ptr<DecisionLog> log) {
  if (RestrictedAddressReason(options.resolver_address) == "unspecified") {
    return Error::InvalidArgument(
        "egress proxy: resolver_address is not set (the DNS server that resolves allowed names)");
  }
  if (options.resolver_port == 0) {
    return Error::InvalidArgument("egress proxy: resolver_port must be 1..65535");
  }
  if (options.tls_port == 0) return Error::InvalidArgument("egress proxy: tls_port must be set");
  if (options.buffer_bytes < 1024 || options.buffer_bytes > (16u << 20)) {
    return Error::InvalidArgument("egress proxy: buffer_bytes must be 1 KiB..16 MiB");
  }
  if (!options.upstream_ca_pem.empty() &&
      AddPemCertificates(options.upstream_ca_pem, nullptr) == 0) {
    return Error::InvalidArgument(
        "egress proxy: upstream_ca_pem holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  }
  if (!log) log = std::make_shared<DecisionLog>();
  auto impl = std::make_unique<Impl>(std::move(options), std::move(policy), std::move(log));
  AGVISOR_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<EgressProxy>(new EgressProxy(std::move(impl)));
}

std::uint16_t EgressProxy::port() const { return impl_->port(); }
std::uint16_t EgressProxy::dns_port() const { return impl_->dns_port(); }
void EgressProxy::SetPolicy(EgressPolicy policy) { impl_->SetPolicy(std::move(policy)); }
void EgressProxy::SetSecrets(std::vector<BrokeredSecret> secrets,
                             std::shared_ptr<const SandboxCa> ca) {
  impl_->SetSecrets(std::move(secrets), std::move(ca));
}
EgressPolicy EgressProxy::policy() const { return *impl_->policy(); }
std::size_t EgressProxy::open_connections() const { return impl_->open_connections(); }
ProxyTraffic EgressProxy::traffic() const { return impl_->traffic(); }

}  // namespace agvisor::egress
