#include "agvisor/channel/channel.h"

#include <csignal>
#include <cstring>
#include <utility>
#include <vector>

namespace agvisor::channel {

using proto::Frame;
using proto::Type;
using Clock = std::chrono::steady_clock;

// Everything one operation's stream holds; guarded by Channel::mu_.
struct StreamState {
  StreamState(std::uint32_t stream_id, std::uint64_t credit)
      : id(stream_id), send_credit(credit), recv_credit(credit) {}
  const std::uint32_t id;
  std::condition_variable cv;  // frames arrived, credit arrived, or the channel broke
  std::deque<Frame> inbox;
  std::uint64_t send_credit;
  // Payload bytes the agent may still send on this stream: the windows the host granted minus
  // what arrived. More than that is a protocol error (a hostile or broken agent).
  std::uint64_t recv_credit;
  // Payload bytes queued in `inbox` that no window counts (everything but DATA and OUTPUT's
  // data): bounded by kMaxInboxUnwindowedBytes.
  std::size_t unwindowed = 0;
  bool peer_done = false;   // EXIT, ERROR or CLOSE arrived: the agent takes no more input
  std::size_t unacked = 0;  // consumed bytes not yet granted back with WINDOW
  // Set by Cancel (a watch closed from another thread): NextUntil returns nullopt.
  bool cancelled = false;
  // When set, Next gives up at this time (an exec whose agent-enforced timeout has long passed,
  // or a request the agent answers at once) and closes the channel; `deadline_what` says why
  // ("" = an exec's).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::string deadline_what;
};

namespace {

constexpr std::size_t kReadBuffer = 256 * 1024;
// Frames with a payload up to this size are copied into one buffer (one write); bigger payloads
// go out as header + payload without a copy.
constexpr std::size_t kCopyLimit = 64 * 1024;
constexpr std::size_t kSourceChunk = 256 * 1024;
// Frames waiting in one stream's inbox. Payload bytes are bounded by the window; this bounds the
// frames that carry none (empty DATA, repeated STARTED, ...), which a hostile agent could send
// without end. A well-behaved agent sends a few control frames per operation, and its output
// frames are many only when small, so the bound is far from any real use (~3 MiB of frames).
constexpr std::size_t kMaxInboxFrames = 64 * 1024;
// Payload bytes of queued frames that no window counts (STARTED, EXIT, ERROR, CLOSE, listings,
// ...). Without this bound, 64Ki frames of up to 1 MiB each could be queued on one stream whose
// reader is slow (a daemon client that stopped reading): 64 GiB. Replies a well-behaved agent
// sends are one frame per request, at most one frame limit each (1 MiB).
constexpr std::size_t kMaxInboxUnwindowedBytes = 4 * 1024 * 1024;

// The flow-controlled bytes of a frame (docs/protocol.md): DATA's payload, OUTPUT's after its
// fd byte; the rest of a payload is not counted by any window.
std::uint64_t WindowedBytes(const Frame& f) {
  if (f.type == Type::kData) return f.payload.size();
  if (f.type == Type::kOutput && !f.payload.empty()) return f.payload.size() - 1;
  if (f.type == Type::kWatchEvents) return f.payload.size();
  return 0;
}

}  // namespace

// ---- Process ----

Process::Process(std::shared_ptr<Channel> channel, std::shared_ptr<StreamState> stream,
                 bool background, std::uint32_t pid)
    : StreamHandle(std::move(channel), std::move(stream)), pid_(pid), background_(background) {}

Process::~Process() {
  // A background process keeps running: CLOSE would close its stdin, SIGKILL would end it.
  if (!exited_ && !channel_->broken()) {
    if (!background_) {
      (void)channel_->Send(Type::kSignal, stream_->id, proto::Signal{SIGKILL}.Encode());
      (void)channel_->Send(Type::kClose, stream_->id, {});
    } else if (channel_->agent().version >= 2 && !detach_sent_) {
      (void)channel_->Send(Type::kDetach, stream_->id, {});  // its OK is dropped: stream forgotten
    }
  }
  channel_->Forget(*stream_);
}

Result<void> Process::Write(std::string_view data) {
  return channel_->SendBytes(*stream_, Type::kStdin, data);
}

Result<void> Process::CloseStdin() { return channel_->Send(Type::kStdinEof, stream_->id, {}); }

Result<void> Process::Resize(std::uint16_t rows, std::uint16_t cols) {
  return channel_->Send(Type::kResize, stream_->id, proto::Resize{rows, cols}.Encode());
}

Result<void> Process::Signal(int signal) {
  if (signal <= 0 || signal > 255) {
    return Error::InvalidArgument("signal " + std::to_string(signal) + " out of range");
  }
  return channel_->Send(Type::kSignal, stream_->id,
                        proto::Signal{static_cast<std::uint8_t>(signal)}.Encode());
}

Result<void> Process::Detach() {
  if (channel_->agent().version < 2) {
    channel_->Shutdown("detached by the host");
    return Ok();
  }
  if (detach_sent_.exchange(true)) return Ok();
  return channel_->Send(Type::kDetach, stream_->id, {});
}

Result<proto::Exit> Process::Wait(const ExecCallbacks& callbacks) {
  for (;;) {
    Frame f = AGVISOR_TRY(channel_->Next(*stream_));
    switch (f.type) {
      case Type::kOutput: {
        auto out = proto::Output::DecodeOutputView(f.payload);
        if (!out.ok()) return channel_->Unexpected(f, "exec");
        const auto& [fd, bytes] = *out;
        const auto& cb = fd == 2 ? callbacks.on_stderr : callbacks.on_stdout;
        if (cb) cb(bytes);
        // Credit counts the process bytes, not the fd byte (as the agent counts them).
        channel_->Consumed(*stream_, bytes.size());
        break;
      }
      case Type::kStarted: {
        auto s = proto::Started::Decode(f.payload);
        if (!s.ok()) return channel_->Unexpected(f, "exec");
        pid_ = s->pid;
        break;
      }
      case Type::kExit: {
        auto e = proto::Exit::Decode(f.payload);
        if (!e.ok()) return channel_->Unexpected(f, "exec");
        exited_ = true;
        return *e;
      }
      case Type::kError:
        exited_ = true;
        return channel_->AgentError(f, "exec");
      case Type::kClose:
        break;  // the agent will send nothing more but EXIT
      case Type::kOk:
        if (!detach_sent_) return channel_->Unexpected(f, "exec");
        exited_ = true;  // the agent let go of the stream; the process may run on
        return Error::Unavailable("detached by the host");
      default:
        return channel_->Unexpected(f, "exec");
    }
  }
}

Result<std::uint32_t> Process::WaitStarted() {
  while (pid_ == 0) {
    Frame f = AGVISOR_TRY(channel_->Next(*stream_));
    switch (f.type) {
      case Type::kStarted: {
        auto s = proto::Started::Decode(f.payload);
        if (!s.ok()) return channel_->Unexpected(f, "exec");
        pid_ = s->pid;
        break;
      }
      case Type::kError:
        exited_ = true;
        return channel_->AgentError(f, "exec");
      default:
        return channel_->Unexpected(f, "exec");  // the agent sends STARTED first
    }
  }
  return pid_;
}

// ---- PortStream ----

PortStream::PortStream(std::shared_ptr<Channel> channel, std::shared_ptr<StreamState> stream)
    : StreamHandle(std::move(channel), std::move(stream)) {}

PortStream::~PortStream() { Close(); }

Result<std::size_t> PortStream::Read(std::span<char> buf) {
  while (current_.empty()) {
    if (eof_ || closed_) return std::size_t{0};
    Frame f = AGVISOR_TRY(channel_->Next(*stream_));
    switch (f.type) {
      case Type::kData:
        channel_->Consumed(*stream_, f.payload.size());
        current_.Assign(std::move(f.payload));
        break;
      case Type::kClose:
      case Type::kEnd:
        eof_ = true;
        break;
      case Type::kError:
        eof_ = true;
        return channel_->AgentError(f, "port");
      default:
        return channel_->Unexpected(f, "port");
    }
  }
  return current_.Take(buf);
}

Result<void> PortStream::Write(std::string_view data) {
  if (write_closed_ || closed_) return Error::Conflict("port stream: write after close");
  return channel_->SendBytes(*stream_, Type::kData, data);
}

Result<void> PortStream::CloseWrite() {
  if (write_closed_ || closed_) return Ok();
  write_closed_ = true;
  return channel_->Send(Type::kClose, stream_->id, {});
}

void PortStream::Close() {
  if (closed_) return;
  if (!write_closed_ && !channel_->broken()) (void)channel_->Send(Type::kClose, stream_->id, {});
  closed_ = true;
  channel_->Forget(*stream_);
}

// ---- WatchStream ----

WatchStream::WatchStream(std::shared_ptr<Channel> channel, std::shared_ptr<StreamState> stream)
    : StreamHandle(std::move(channel), std::move(stream)) {}

WatchStream::~WatchStream() { Close(); }

void WatchStream::Close() {
  if (closed_.exchange(true)) return;
  channel_->Cancel(*stream_);
  if (!channel_->broken()) (void)channel_->Send(Type::kClose, stream_->id, {});
}

Result<std::optional<std::vector<proto::WatchEvent>>> WatchStream::Next(
    std::chrono::milliseconds timeout) {
  using Events = std::vector<proto::WatchEvent>;
  if (ended_ || closed_) return std::optional<Events>();
  auto f = AGVISOR_TRY(channel_->NextUntil(*stream_, Clock::now() + timeout));
  if (!f) {
    if (closed_) return std::optional<Events>();
    return std::optional<Events>(Events{});
  }
  switch (f->type) {
    case Type::kWatchEvents: {
      auto batch = proto::WatchEvents::Decode(f->payload);
      if (!batch.ok()) {
        Error e = Error::Internal("agent channel: malformed WATCH_EVENTS on stream " +
                                  std::to_string(stream_->id) + ": " + batch.error().message() +
                                  " (a broken or hostile agent); the channel is closed");
        channel_->Break(e);
        return e;
      }
      channel_->Consumed(*stream_, f->payload.size());
      return std::optional<Events>(std::move(batch->events));
    }
    case Type::kEnd:
      ended_ = true;
      return std::optional<Events>();
    case Type::kError:
      ended_ = true;
      return channel_->AgentError(*f, "watch");
    default:
      return channel_->Unexpected(*f, "watch");
  }
}

// ---- Channel: session ----

Channel::Channel(std::unique_ptr<Transport> transport, ChannelOptions options)
    : transport_(std::move(transport)), options_(options), last_rx_(Clock::now()) {}

Channel::~Channel() {
  Shutdown("the channel was closed");
  if (reader_.joinable()) reader_.join();
}

Result<std::shared_ptr<Channel>> Channel::Open(std::unique_ptr<Transport> transport,
                                               ChannelOptions options) {
  std::shared_ptr<Channel> ch(new Channel(std::move(transport), options));
  ch->reader_ = std::thread([c = ch.get()] { c->ReaderLoop(); });
  if (options.version < proto::kMinProtocolVersion || options.version > proto::kProtocolVersion) {
    return Error::InvalidArgument("protocol version " + std::to_string(options.version) +
                                  ": this build speaks " +
                                  std::to_string(proto::kMinProtocolVersion) + " to " +
                                  std::to_string(proto::kProtocolVersion));
  }
  proto::Hello hello;
  hello.version = options.version;
  hello.initial_window = options.initial_window;
  AGVISOR_RETURN_IF_ERROR(ch->Send(Type::kHello, proto::kSessionStream, hello.Encode()));
  std::unique_lock lock(ch->mu_);
  if (!ch->hello_cv_.wait_for(lock, options.handshake_timeout,
                              [&] { return ch->hello_.has_value(); })) {
    lock.unlock();
    ch->Shutdown("no WELCOME");
    return Error::Timeout("agent channel: no WELCOME from the agent within " +
                          std::to_string(options.handshake_timeout.count()) + " ms");
  }
  if (!ch->hello_->ok()) return ch->hello_->error();
  ch->agent_ = ch->hello_->value();
  return ch;
}

bool Channel::broken() const {
  std::lock_guard lock(mu_);
  return broken_.has_value();
}

std::optional<Error> Channel::broken_reason() const {
  std::lock_guard lock(mu_);
  return broken_;
}

void Channel::Shutdown(std::string_view reason) { Break(Error::Unavailable(std::string(reason))); }

void Channel::Break(Error reason) {
  {
    std::lock_guard lock(mu_);
    if (broken_) return;
    broken_ = Error::Unavailable("agent channel lost: " + reason.message());
    if (!hello_) hello_ = Result<AgentHello>(reason);
    for (auto& [id, s] : streams_) s->cv.notify_all();
  }
  hello_cv_.notify_all();
  pong_cv_.notify_all();
  transport_->Close();
}

void Channel::ReaderLoop() {
  std::vector<char> buf(kReadBuffer);
  proto::FrameDecoder decoder;
  for (;;) {
    auto n = transport_->Read(std::span<char>(buf.data(), buf.size()));
    if (!n.ok()) {
      Break(n.error());
      return;
    }
    if (*n == 0) {
      Break(Error::Unavailable(decoder.mid_frame() ? "the stream ended inside a frame"
                                                   : "the agent closed the stream"));
      return;
    }
    // Only a whole frame counts as a sign of life: an agent that trickles the bytes of a frame
    // it never finishes is as silent as one that sends nothing (keepalive_timeout).
    auto fed = decoder.Feed(std::string_view(buf.data(), *n), [this](Frame&& f) {
      {
        std::lock_guard lock(mu_);
        last_rx_ = Clock::now();
      }
      Dispatch(std::move(f));
    });
    if (!fed.ok()) {
      Break(Error::Unavailable("protocol error: " + fed.error().message()));
      return;
    }
  }
}

void Channel::Dispatch(Frame&& f) {
  if (f.stream == proto::kSessionStream) {
    switch (f.type) {
      case Type::kWelcome: {
        auto w = proto::Welcome::Decode(f.payload);
        std::lock_guard lock(mu_);
        if (hello_) return;  // a second WELCOME: ignored
        if (!w.ok()) {
          hello_ = Result<AgentHello>(Error::Unavailable("bad WELCOME: " + w.error().message()));
        } else if (w->version < proto::kMinProtocolVersion || w->version > options_.version) {
          hello_ = Result<AgentHello>(Error::Unsupported(
              "the agent answered protocol version " + std::to_string(w->version) + " to HELLO " +
              std::to_string(options_.version) + "; this host speaks " +
              std::to_string(proto::kMinProtocolVersion) + " to " +
              std::to_string(proto::kProtocolVersion) +
              ": the agent binary and the library do not match"));
        } else {
          hello_ = Result<AgentHello>(AgentHello{w->version, w->agent_version, w->boot_unix_ms});
        }
        hello_cv_.notify_all();
        return;
      }
      case Type::kPing: {
        auto p = proto::Ping::Decode(f.payload);
        if (p.ok()) (void)Send(Type::kPong, 0, proto::Pong{p->token}.Encode());
        return;
      }
      case Type::kPong: {
        auto p = proto::Pong::Decode(f.payload);
        if (!p.ok()) return;
        std::lock_guard lock(mu_);
        pings_.erase(p->token);
        pong_cv_.notify_all();
        return;
      }
      case Type::kError: {
        auto e = proto::ErrorPayload::Decode(f.payload);
        std::string why = e.ok() ? e->message : "malformed ERROR";
        if (e.ok() && e->code == proto::WireError::kVersion) {
          {
            std::lock_guard lock(mu_);
            if (!hello_) {
              hello_ = Result<AgentHello>(Error::Unsupported(
                  "the agent refused protocol version " + std::to_string(options_.version) + ": " +
                  why + " (the agent binary and the library do not match)"));
            }
          }
          hello_cv_.notify_all();
        }
        Break(Error::Unavailable("the agent ended the session: " + why));
        return;
      }
      default:
        return;  // WINDOW / CLOSE on the session: nothing to do
    }
  }
  std::optional<Error> violation;
  {
    std::lock_guard lock(mu_);
    auto it = streams_.find(f.stream);
    if (it == streams_.end()) return;  // an operation we gave up on: its late frames are dropped
    StreamState& s = *it->second;
    if (f.type == Type::kWindow) {
      auto w = proto::Window::Decode(f.payload);
      if (w.ok()) s.send_credit += w->bytes;
    } else {
      const std::uint64_t counted = WindowedBytes(f);
      const std::size_t unwindowed = f.payload.size() - static_cast<std::size_t>(counted);
      if (counted > s.recv_credit) {
        violation = Error::Unavailable(
            "protocol error: the agent sent " + std::to_string(counted) + " bytes on stream " +
            std::to_string(s.id) + " with only " + std::to_string(s.recv_credit) +
            " left of the window the host granted (a broken or hostile agent)");
      } else if (s.inbox.size() >= kMaxInboxFrames) {
        violation = Error::Unavailable(
            "protocol error: the agent queued more than " + std::to_string(kMaxInboxFrames) +
            " unread frames on stream " + std::to_string(s.id) + " (a broken or hostile agent)");
      } else if (s.unwindowed + unwindowed > kMaxInboxUnwindowedBytes) {
        violation = Error::Unavailable("protocol error: the agent queued more than " +
                                       std::to_string(kMaxInboxUnwindowedBytes) +
                                       " unread bytes outside the window on stream " +
                                       std::to_string(s.id) + " (a broken or hostile agent)");
      } else {
        s.recv_credit -= counted;
        s.unwindowed += unwindowed;
        if (f.type == Type::kExit || f.type == Type::kError || f.type == Type::kClose) {
          s.peer_done = true;
        }
        s.inbox.push_back(std::move(f));
      }
    }
    s.cv.notify_all();
  }
  if (violation) Break(*violation);
}

Result<void> Channel::Send(Type type, std::uint32_t stream, std::string_view payload) {
  if (!proto::FitsInFrame(payload.size())) {
    return Error::InvalidArgument(std::string(proto::TypeName(type)) + ": payload of " +
                                  std::to_string(payload.size()) +
                                  " bytes exceeds the frame limit");
  }
  Result<void> r = Ok();
  {
    std::lock_guard wlock(write_mu_);
    {
      std::lock_guard lock(mu_);
      if (broken_) return *broken_;
    }
    if (payload.size() <= kCopyLimit) {
      std::string frame;
      frame.reserve(proto::kFrameHeaderSize + payload.size());
      proto::AppendFrame(frame, type, stream, payload);
      r = transport_->Write(frame);
    } else {
      char header[proto::kFrameHeaderSize];
      proto::EncodeHeader(std::span<char, proto::kFrameHeaderSize>(header), type, stream,
                          payload.size());
      std::string_view parts[2] = {std::string_view(header, sizeof header), payload};
      r = transport_->WriteParts(parts);
    }
  }
  if (!r.ok()) {
    Break(r.error());
    std::lock_guard lock(mu_);
    return *broken_;
  }
  return Ok();
}

Result<std::shared_ptr<StreamState>> Channel::NewStream() {
  std::lock_guard lock(mu_);
  if (broken_) return *broken_;
  std::uint32_t id = next_stream_;
  next_stream_ += 2;
  if (next_stream_ > 0x7fffffffU * 2U) next_stream_ = 1;
  auto s = std::make_shared<StreamState>(id, options_.initial_window);
  streams_[id] = s;
  return s;
}

void Channel::Forget(StreamState& s) {
  std::lock_guard lock(mu_);
  streams_.erase(s.id);
}

void Channel::KeepAlive() {
  // Called with mu_ NOT held, when a waiter saw nothing for keepalive_interval.
  Clock::time_point last_rx;
  bool send_ping = false;
  {
    std::lock_guard lock(mu_);
    if (broken_) return;
    last_rx = last_rx_;
    const auto now = Clock::now();
    if (now - last_rx >= options_.keepalive_interval &&
        now - last_ping_sent_ >= options_.keepalive_interval) {
      last_ping_sent_ = now;
      send_ping = true;
    }
  }
  if (Clock::now() - last_rx >= options_.keepalive_timeout) {
    Break(Error::Unavailable("no answer from the agent for " +
                             std::to_string(options_.keepalive_timeout.count()) + " ms"));
    return;
  }
  if (send_ping) (void)Send(Type::kPing, 0, proto::Ping{0}.Encode());
}

Result<Frame> Channel::Next(StreamState& s) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (s.deadline && Clock::now() >= *s.deadline && !broken_) {
      // The agent enforces an exec's timeout and sends EXIT; one that has not, long after, is
      // broken or hostile (e.g. endless output): its channel ends, whatever else it sends.
      lock.unlock();
      Error e = Error::Timeout(!s.deadline_what.empty()
                                   ? s.deadline_what
                                   : "the agent did not end the command on stream " +
                                         std::to_string(s.id) + " by its timeout plus " +
                                         std::to_string(options_.exec_deadline_grace.count()) +
                                         " ms (a broken or hostile agent); its channel is closed");
      Break(e);
      return e;
    }
    if (!s.inbox.empty()) {
      Frame f = std::move(s.inbox.front());
      s.inbox.pop_front();
      s.unwindowed -= f.payload.size() - static_cast<std::size_t>(WindowedBytes(f));
      return f;
    }
    if (broken_) return *broken_;
    if (!s.cv.wait_for(lock, options_.keepalive_interval,
                       [&] { return !s.inbox.empty() || broken_.has_value(); })) {
      lock.unlock();
      KeepAlive();
      lock.lock();
    }
  }
}

Result<std::optional<Frame>> Channel::NextUntil(StreamState& s, Clock::time_point until) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (s.cancelled) return std::optional<Frame>();
    if (!s.inbox.empty()) {
      Frame f = std::move(s.inbox.front());
      s.inbox.pop_front();
      s.unwindowed -= f.payload.size() - static_cast<std::size_t>(WindowedBytes(f));
      return std::optional<Frame>(std::move(f));
    }
    if (broken_) return *broken_;
    const auto now = Clock::now();
    if (now >= until) return std::optional<Frame>();
    const auto wake = std::min(until, now + options_.keepalive_interval);
    if (!s.cv.wait_until(lock, wake,
                         [&] { return !s.inbox.empty() || broken_.has_value() || s.cancelled; }) &&
        wake != until) {
      // Nothing for a keep-alive interval: a PING (and a dead agent is found out).
      lock.unlock();
      KeepAlive();
      lock.lock();
    }
  }
}

void Channel::Cancel(StreamState& s) {
  std::lock_guard lock(mu_);
  s.cancelled = true;
  s.cv.notify_all();
  streams_.erase(s.id);
}

Result<void> Channel::SendBytes(StreamState& s, Type type, std::string_view bytes) {
  while (!bytes.empty()) {
    std::size_t n = 0;
    {
      std::unique_lock lock(mu_);
      for (;;) {
        if (broken_) return *broken_;
        if (s.peer_done) {
          return Error::Conflict("agent channel: the operation on stream " + std::to_string(s.id) +
                                 " has ended");
        }
        if (s.send_credit > 0) break;
        if (!s.cv.wait_for(lock, options_.keepalive_interval, [&] {
              return s.send_credit > 0 || s.peer_done || broken_.has_value();
            })) {
          lock.unlock();
          KeepAlive();
          lock.lock();
        }
      }
      n = std::min<std::uint64_t>({s.send_credit, bytes.size(), proto::kMaxPayload});
      s.send_credit -= n;
    }
    AGVISOR_RETURN_IF_ERROR(Send(type, s.id, bytes.substr(0, n)));
    bytes.remove_prefix(n);
  }
  return Ok();
}

void Channel::Consumed(StreamState& s, std::size_t n) {
  std::uint32_t grant = 0;
  {
    std::lock_guard lock(mu_);
    s.unacked += n;
    // Batched: one WINDOW per quarter window consumed keeps the pipe full with few frames.
    if (s.unacked >= options_.initial_window / 4 && !s.peer_done) {
      grant = static_cast<std::uint32_t>(s.unacked);
      s.unacked = 0;
      s.recv_credit += grant;  // counted before the agent can see the WINDOW
    }
  }
  if (grant > 0) (void)Send(Type::kWindow, s.id, proto::Window{grant}.Encode());
}

Error Channel::Unexpected(const Frame& f, std::string_view what) {
  Error e = Error::Internal("agent channel: unexpected " + std::string(proto::TypeName(f.type)) +
                            " frame (" + std::to_string(f.payload.size()) + " bytes) on " +
                            std::string(what) + " stream " + std::to_string(f.stream));
  Break(e);
  return e;
}

Error Channel::AgentError(const Frame& f, std::string_view what) {
  auto e = proto::ErrorPayload::Decode(f.payload);
  if (!e.ok()) return Unexpected(f, what);
  return e->ToError();
}

namespace {

// Owns a stream for one operation: forgets it on every return path.
class StreamGuard {
 public:
  StreamGuard(Channel* c, std::shared_ptr<StreamState> s, void (Channel::*forget)(StreamState&))
      : c_(c), s_(std::move(s)), forget_(forget) {}
  ~StreamGuard() { (c_->*forget_)(*s_); }
  StreamState& operator*() { return *s_; }
  StreamState* operator->() { return s_.get(); }

 private:
  Channel* c_;
  std::shared_ptr<StreamState> s_;
  void (Channel::*forget_)(StreamState&);
};

Error WithPath(const Error& e, std::string_view op, std::string_view path) {
  return e.WithContext(std::string(op) + " " + std::string(path));
}

}  // namespace

// ---- Exec ----

Result<std::unique_ptr<Process>> Channel::Start(const proto::ExecRequest& request) {
  if ((request.flags & proto::kExecKeepAwake) != 0 && agent_.version < 6) {
    return Error::Unsupported("keep_awake: the sandbox's agent speaks protocol version " +
                              std::to_string(agent_.version) +
                              " and keeping it awake needs 6 (a sandbox started by an older "
                              "agvisor; start a new sandbox)");
  }
  std::string payload = request.Encode();
  if (!proto::FitsInFrame(payload.size())) {
    return Error::InvalidArgument("exec: the command line and environment (" +
                                  std::to_string(payload.size()) +
                                  " bytes) do not fit in one frame (1 MiB)");
  }
  auto s = AGVISOR_TRY(NewStream());
  auto r = Send(Type::kExec, s->id, payload);
  if (!r.ok()) {
    Forget(*s);
    return r.error();
  }
  return std::unique_ptr<Process>(new Process(
      shared_from_this(), std::move(s), (request.flags & proto::kExecBackground) != 0, /*pid=*/0));
}

// ---- Background processes ----

Result<std::vector<proto::ProcInfo>> Channel::ListProcesses() {
  auto f = Call(Type::kProcList, {});
  if (!f.ok()) return f.error().WithContext("list processes");
  if (f->type != Type::kProcListResult) return Unexpected(*f, "process list");
  auto r = proto::ProcListResult::Decode(f->payload, agent_.version);
  if (!r.ok()) return Unexpected(*f, "process list");
  return std::move(r->procs);
}

Result<void> Channel::SetDeadlines(std::optional<std::chrono::milliseconds> lifetime,
                                   std::optional<std::chrono::milliseconds> idle_ttl) {
  proto::SetDeadlines req;
  // 0 means none on the wire: a duration that rounds to 0 ms is sent as the smallest one.
  auto ms = [](std::optional<std::chrono::milliseconds> d) -> std::uint64_t {
    if (!d) return 0;
    return static_cast<std::uint64_t>(std::max<std::int64_t>(1, d->count()));
  };
  req.lifetime_ms = ms(lifetime);
  req.idle_ttl_ms = ms(idle_ttl);
  auto f = Call(Type::kSetDeadlines, req.Encode());
  if (!f.ok()) return f.error().WithContext("set deadlines");
  if (f->type != Type::kOk) return Unexpected(*f, "set deadlines");
  return Ok();
}

Result<proto::IdleState> Channel::QueryIdle(std::chrono::milliseconds timeout) {
  if (agent_.version < 5) {
    return Error::Unsupported("query idle time: the sandbox's agent speaks protocol version " +
                              std::to_string(agent_.version) +
                              " and asking needs 5 (a sandbox started by an older agvisor)");
  }
  StreamGuard s(this, AGVISOR_TRY(NewStream()), &Channel::Forget);
  {
    // Answered at once by a working agent; one that does not answer is broken or hostile, and
    // the caller (a sweep over every sandbox) must not wait on it.
    std::lock_guard lock(mu_);
    s->deadline = Clock::now() + timeout;
    s->deadline_what = "the agent did not answer IDLE_QUERY within " +
                       std::to_string(timeout.count()) +
                       " ms (a broken or hostile agent); its channel is closed";
  }
  AGVISOR_RETURN_IF_ERROR(Send(Type::kIdleQuery, s->id, {}));
  auto f = Next(*s);
  if (f.ok() && f->type == Type::kError) f = AgentError(*f, "IDLE_QUERY");
  if (!f.ok()) return f.error().WithContext("query idle time");
  if (f->type != Type::kIdleState) return Unexpected(*f, "idle state");
  auto r = proto::IdleState::Decode(f->payload);
  if (!r.ok()) return Unexpected(*f, "idle state");
  return *r;
}

Result<std::unique_ptr<Process>> Channel::AttachProcess(std::uint32_t pid) {
  auto s = AGVISOR_TRY(NewStream());
  auto r = Send(Type::kProcAttach, s->id, proto::ProcAttach{pid}.Encode());
  if (!r.ok()) {
    Forget(*s);
    return r.error();
  }
  return std::unique_ptr<Process>(new Process(shared_from_this(), std::move(s), true, pid));
}

Result<void> Channel::SignalProcess(std::uint32_t pid, int signal) {
  if (signal <= 0 || signal > 255) {
    return Error::InvalidArgument("signal " + std::to_string(signal) + " out of range");
  }
  const auto sig = static_cast<std::uint8_t>(signal);
  if (agent_.version >= 2) {
    auto f = Call(Type::kProcSignal, proto::ProcSignal{pid, sig}.Encode());
    if (!f.ok()) return f.error().WithContext("signal process " + std::to_string(pid));
    if (f->type != Type::kOk) return Unexpected(*f, "signal process");
    return Ok();
  }
  StreamGuard s(this, AGVISOR_TRY(NewStream()), &Channel::Forget);
  AGVISOR_RETURN_IF_ERROR(Send(Type::kProcAttach, s->id, proto::ProcAttach{pid}.Encode()));
  AGVISOR_RETURN_IF_ERROR(Send(Type::kSignal, s->id, proto::Signal{sig}.Encode()));
  // The agent answers frames in order: once the PONG is back, an ERROR for the PROC_ATTACH (no
  // such process, attached elsewhere) is in the inbox; without one the SIGNAL was delivered.
  if (auto pong = Ping(); !pong.ok()) return pong.error();
  std::lock_guard lock(mu_);
  for (const Frame& f : s->inbox) {
    if (f.type != Type::kError) continue;
    auto e = proto::ErrorPayload::Decode(f.payload);
    if (!e.ok()) return Error::Internal("agent channel: malformed ERROR for PROC_ATTACH");
    return e->ToError().WithContext("signal process " + std::to_string(pid));
  }
  return Ok();
}

Result<proto::Exit> Channel::Exec(proto::ExecRequest request, const ExecCallbacks& callbacks,
                                  const ByteSource* stdin) {
  if (stdin) request.flags |= proto::kExecStdin;
  auto process = AGVISOR_TRY(Start(request));
  if (request.timeout_ms > 0) {
    std::lock_guard lock(mu_);
    process->stream_->deadline =
        Clock::now() + std::chrono::milliseconds(request.timeout_ms) + options_.exec_deadline_grace;
  }
  std::thread writer;
  Result<void> write_status = Ok();
  if (stdin) {
    // stdin goes from its own thread: a command that writes before it reads cannot deadlock us.
    writer = std::thread([&] {
      std::vector<char> buf(kSourceChunk);
      for (;;) {
        auto n = (*stdin)(std::span<char>(buf.data(), buf.size()));
        if (!n.ok()) {
          write_status = n.error();
          (void)process->Signal(SIGKILL);
          return;
        }
        if (*n == 0) {
          (void)process->CloseStdin();
          return;
        }
        // A failed write means the command exited (or the channel broke): Wait says which.
        if (!process->Write(std::string_view(buf.data(), *n)).ok()) return;
      }
    });
  }
  auto exit = process->Wait(callbacks);
  if (writer.joinable()) writer.join();
  if (!write_status.ok()) return write_status.error().WithContext("exec stdin");
  return exit;
}

// ---- Files ----

Result<void> Channel::ReceiveAll(StreamState& s, const ByteSink& sink, std::string_view what) {
  for (;;) {
    Frame f = AGVISOR_TRY(Next(s));
    switch (f.type) {
      case Type::kData: {
        auto r = sink(f.payload);
        if (!r.ok()) {
          (void)Send(Type::kClose, s.id, {});
          return r.error();
        }
        Consumed(s, f.payload.size());
        break;
      }
      case Type::kEnd:
        return Ok();
      case Type::kError:
        return AgentError(f, what);
      default:
        return Unexpected(f, what);
    }
  }
}

Result<void> Channel::SendAll(StreamState& s, const ByteSource& source) {
  std::vector<char> buf(kSourceChunk);
  for (;;) {
    auto n = source(std::span<char>(buf.data(), buf.size()));
    if (!n.ok()) {
      (void)Send(Type::kClose, s.id, {});
      return n.error();
    }
    if (*n == 0) break;
    AGVISOR_RETURN_IF_ERROR(SendBytes(s, Type::kData, std::string_view(buf.data(), *n)));
  }
  return Send(Type::kEnd, s.id, {});
}

Result<void> Channel::Upload(Type type, std::string_view payload, const ByteSource& source,
                             std::string_view op, std::string_view object, std::string_view what) {
  StreamGuard s(this, AGVISOR_TRY(NewStream()), &Channel::Forget);
  auto r = Send(type, s->id, payload);
  if (r.ok()) r = SendAll(*s, source);
  // The agent's answer (OK, or an ERROR that may have cut the upload short) decides.
  if (r.ok() || r.error().code() == ErrorCode::kConflict) {
    auto f = Next(*s);
    if (!f.ok()) return WithPath(f.error(), op, object);
    if (f->type == Type::kOk) return Ok();
    if (f->type == Type::kError) {
      auto e = proto::ErrorPayload::Decode(f->payload);
      if (e.ok()) return WithPath(e->ToError(), op, object);
    }
    return Unexpected(*f, what);
  }
  return WithPath(r.error(), op, object);
}

Result<Frame> Channel::Call(Type type, std::string_view payload) {
  if (!proto::FitsInFrame(payload.size())) {
    return Error::InvalidArgument(std::string(proto::TypeName(type)) + ": request too large");
  }
  StreamGuard s(this, AGVISOR_TRY(NewStream()), &Channel::Forget);
  AGVISOR_RETURN_IF_ERROR(Send(type, s->id, payload));
  Frame f = AGVISOR_TRY(Next(*s));
  if (f.type == Type::kError) return AgentError(f, proto::TypeName(type));
  return f;
}

Result<void> Channel::Download(Type type, std::string_view path, const ByteSink& sink,
                               std::string_view op, std::string_view what) {
  StreamGuard s(this, AGVISOR_TRY(NewStream()), &Channel::Forget);
  auto r = Send(type, s->id, proto::PathRequest{std::string(path)}.Encode());
  if (r.ok()) r = ReceiveAll(*s, sink, what);
  if (!r.ok()) return WithPath(r.error(), op, path);
  return Ok();
}

Result<void> Channel::ReadFileTo(std::string_view path, const ByteSink& sink) {
  return Download(Type::kFileRead, path, sink, "read file", "read file");
}

Result<std::string> Channel::ReadFile(std::string_view path) {
  std::string out;
  AGVISOR_RETURN_IF_ERROR(ReadFileTo(path, AppendingSink(out)));
  return out;
}

Result<void> Channel::WriteFileFrom(std::string_view path, const ByteSource& source,
                                    std::uint32_t mode, bool make_parents) {
  proto::FileWrite req{std::string(path), mode,
                       static_cast<std::uint8_t>(make_parents ? proto::kFileWriteParents : 0)};
  return Upload(Type::kFileWrite, req.Encode(), source, "write file", path, "write file");
}

Result<void> Channel::WriteFile(std::string_view path, std::string_view data, std::uint32_t mode,
                                bool make_parents) {
  std::size_t pos = 0;
  // The source hands out the caller's bytes in big pieces; SendBytes splits them by credit.
  return WriteFileFrom(
      path,
      [&](std::span<char> buf) -> Result<std::size_t> {
        std::size_t n = std::min(buf.size(), data.size() - pos);
        std::memcpy(buf.data(), data.data() + pos, n);
        pos += n;
        return n;
      },
      mode, make_parents);
}

Result<proto::Entry> Channel::Stat(std::string_view path) {
  auto f = Call(Type::kStat, proto::PathRequest{std::string(path)}.Encode());
  if (!f.ok()) return WithPath(f.error(), "stat", path);
  if (f->type != Type::kStatResult) return Unexpected(*f, "stat");
  auto r = proto::StatResult::Decode(f->payload);
  if (!r.ok()) return Unexpected(*f, "stat");
  return r->entry;
}

Result<std::vector<proto::Entry>> Channel::List(std::string_view path) {
  auto f = Call(Type::kList, proto::PathRequest{std::string(path)}.Encode());
  if (!f.ok()) return WithPath(f.error(), "list", path);
  if (f->type != Type::kListResult) return Unexpected(*f, "list");
  auto r = proto::ListResult::Decode(f->payload);
  if (!r.ok()) return Unexpected(*f, "list");
  return std::move(r->entries);
}

Result<void> Channel::Mkdir(std::string_view path, std::uint32_t mode, bool parents) {
  auto f = Call(Type::kMkdir, proto::Mkdir{std::string(path), mode, parents}.Encode());
  if (!f.ok()) return WithPath(f.error(), "mkdir", path);
  if (f->type != Type::kOk) return Unexpected(*f, "mkdir");
  return Ok();
}

Result<void> Channel::Remove(std::string_view path, bool recursive) {
  auto f = Call(Type::kRemove, proto::Remove{std::string(path), recursive}.Encode());
  if (!f.ok()) return WithPath(f.error(), "remove", path);
  if (f->type != Type::kOk) return Unexpected(*f, "remove");
  return Ok();
}

Result<void> Channel::TarRead(std::string_view path, const ByteSink& sink) {
  return Download(Type::kTarRead, path, sink, "download", "tar read");
}

Result<void> Channel::TarWrite(std::string_view dir, const ByteSource& source) {
  return Upload(Type::kTarWrite, proto::PathRequest{std::string(dir)}.Encode(), source, "upload to",
                dir, "tar write");
}

// ---- Watch ----

Result<std::unique_ptr<WatchStream>> Channel::Watch(std::string_view path, bool recursive) {
  if (agent_.version < 4) {
    return Error::Unsupported("watch " + std::string(path) +
                              ": the sandbox's agent speaks protocol version " +
                              std::to_string(agent_.version) +
                              " and watching needs 4 (a sandbox started by an older agvisor: "
                              "start a new one)");
  }
  proto::WatchRequest req{std::string(path),
                          static_cast<std::uint8_t>(recursive ? proto::kWatchRecursive : 0)};
  std::string payload = req.Encode();
  if (!proto::FitsInFrame(payload.size())) {
    return Error::InvalidArgument("watch: the path does not fit in one frame");
  }
  auto s = AGVISOR_TRY(NewStream());
  auto fail = [&](const Error& e) {
    Forget(*s);
    return e;
  };
  auto r = Send(Type::kWatch, s->id, payload);
  if (!r.ok()) return fail(r.error().WithContext("watch " + std::string(path)));
  auto f = Next(*s);
  if (!f.ok()) return fail(f.error().WithContext("watch " + std::string(path)));
  if (f->type == Type::kError) return fail(AgentError(*f, "watch"));
  if (f->type != Type::kOk) return fail(Unexpected(*f, "watch"));
  return std::unique_ptr<WatchStream>(new WatchStream(shared_from_this(), std::move(s)));
}

// ---- Ports ----

Result<std::unique_ptr<PortStream>> Channel::OpenPort(std::uint16_t port) {
  auto s = AGVISOR_TRY(NewStream());
  auto fail = [&](const Error& e) {
    Forget(*s);
    return e.WithContext("open port " + std::to_string(port) + " in the sandbox");
  };
  auto r = Send(Type::kPortOpen, s->id, proto::PortOpen{port}.Encode());
  if (!r.ok()) return fail(r.error());
  auto f = Next(*s);
  if (!f.ok()) return fail(f.error());
  if (f->type == Type::kError) return fail(AgentError(*f, "port"));
  if (f->type != Type::kOk) return fail(Unexpected(*f, "port"));
  return std::unique_ptr<PortStream>(new PortStream(shared_from_this(), std::move(s)));
}

// ---- Ping ----

Result<std::chrono::microseconds> Channel::Ping(std::chrono::milliseconds timeout) {
  std::uint64_t token;
  const auto start = Clock::now();
  {
    std::lock_guard lock(mu_);
    if (broken_) return *broken_;
    token = next_ping_++;
    pings_[token] = start;
  }
  AGVISOR_RETURN_IF_ERROR(Send(Type::kPing, 0, proto::Ping{token}.Encode()));
  std::unique_lock lock(mu_);
  bool answered = pong_cv_.wait_for(
      lock, timeout, [&] { return pings_.count(token) == 0 || broken_.has_value(); });
  if (pings_.count(token) == 0) {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  }
  pings_.erase(token);
  if (broken_) return *broken_;
  (void)answered;
  return Error::Timeout("agent channel: no PONG within " + std::to_string(timeout.count()) + " ms");
}

}  // namespace agvisor::channel
