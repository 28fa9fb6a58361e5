#include "agvisor/agent/session.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agvisor/agent/cli.h"
#include "agvisor/agent/files.h"
#include "agvisor/agent/log.h"
#include "agvisor/agent/user.h"
#include "agvisor/agent/version.h"
#include "agvisor/agent/watch.h"

namespace agvisor::agent {
namespace {

using proto::Frame;
using proto::Type;
using proto::WireError;

constexpr std::size_t kReadChunk = 64 * 1024;
char g_input_buf[256 * 1024];

std::string FrameOf(Type type, std::uint32_t stream, std::string_view payload) {
  std::string out;
  proto::AppendFrame(out, type, stream, payload);
  return out;
}

// Grant WINDOW in batches of at least this much (or a quarter of the initial window, if less).
std::size_t GrantThreshold(std::uint32_t initial_window) {
  return std::max<std::size_t>(1, std::min<std::size_t>(64 * 1024, initial_window / 4));
}

// What a frame of each type from the host (after HELLO) is to a session.
enum class FromHost {
  kOpens,    // a request that opens the stream it names
  kRefused,  // a frame only the agent sends (or a second HELLO): a protocol error
  kOther,    // for the session (stream 0) or a stream already open
};

FromHost Classify(Type t) {
  switch (t) {
    case Type::kExec:
    case Type::kFileRead:
    case Type::kFileWrite:
    case Type::kStat:
    case Type::kList:
    case Type::kMkdir:
    case Type::kRemove:
    case Type::kTarRead:
    case Type::kTarWrite:
    case Type::kPortOpen:
    case Type::kProcList:
    case Type::kProcAttach:
    case Type::kProcSignal:
    case Type::kSetDeadlines:
    case Type::kIdleQuery:
    case Type::kWatch:
      return FromHost::kOpens;
    case Type::kHello:
    case Type::kWelcome:
    case Type::kError:
    case Type::kStarted:
    case Type::kOutput:
    case Type::kExit:
    case Type::kOk:
    case Type::kStatResult:
    case Type::kListResult:
    case Type::kProcListResult:
    case Type::kWatchEvents:
    case Type::kIdleState:
      return FromHost::kRefused;
    default:
      return FromHost::kOther;
  }
}

// ---------------------------------------------------------------------------------------------
// EXEC and PROC_ATTACH: a process's output and exit on this stream, STDIN/SIGNAL/RESIZE to it.

class ExecStream : public Stream, public ProcessSink {
 public:
  ExecStream(Session* s, std::uint32_t id, std::shared_ptr<ChannelProcess> proc, bool stdin_ok)
      : Stream(s, id), proc_(std::move(proc)), stdin_ok_(stdin_ok), hold_(s->services().tracker) {}
  ~ExecStream() override {
    if (proc_) proc_->Detach(this);
  }
  void AttachNow(bool replay) { proc_->Attach(this, replay); }

  void Resume() override {
    if (proc_) proc_->Resume();
  }

  std::size_t Room() const override { return SendRoom(); }
  void SendOutput(std::uint8_t fd, std::string&& frame) override {
    std::size_t n = frame.size() - proto::kOutputHeaderSize;
    proto::EncodeOutputHeader(
        std::span<char, proto::kOutputHeaderSize>(frame.data(), proto::kOutputHeaderSize), id_, fd,
        n);
    SendCounted(std::move(frame), n);
  }
  void StdinConsumed(std::size_t n) override { Consumed(n); }
  void Exited(const proto::Exit& exit) override {
    Send(Type::kExit, exit.Encode(session_->version()));
    proc_.reset();
    End();
  }

 protected:
  void OnFrame(const Frame& f) override {
    if (!proc_) return;
    switch (f.type) {
      case Type::kStdin:
        if (stdin_ok_) {
          proc_->WriteStdin(f.payload);
        } else {
          Consumed(f.payload.size());  // no stdin flag: the command reads /dev/null
        }
        break;
      case Type::kStdinEof:
      case Type::kClose:
        proc_->CloseStdin();
        break;
      case Type::kSignal: {
        auto sig = proto::Signal::Decode(f.payload);
        if (sig.ok()) {
          if (auto r = proc_->Signal(sig->signal); !r.ok()) LogLine(r.error().message());
        }
        break;
      }
      case Type::kResize: {
        auto rs = proto::Resize::Decode(f.payload);
        if (rs.ok()) {
          if (auto r = proc_->Resize(rs->rows, rs->cols); !r.ok()) LogLine(r.error().message());
        }
        break;
      }
      case Type::kDetach: {
        // The host leaves the stream: a background process runs on (its output goes to its
        // ring again), any other is ended as when its session ends.
        std::shared_ptr<ChannelProcess> proc = std::move(proc_);
        proc->Detach(this);
        Send(Type::kOk, "");
        End();
        break;
      }
      default:
        break;  // DATA/END on an exec stream: nothing to do with them
    }
  }

 private:
  std::shared_ptr<ChannelProcess> proc_;
  bool stdin_ok_;
  ActivityHold hold_;
};

// ---------------------------------------------------------------------------------------------
// PORT_OPEN: a TCP connection to 127.0.0.1:port inside the sandbox, DATA both ways.

class PortStream : public Stream {
 public:
  PortStream(Session* s, std::uint32_t id, std::uint16_t port)
      : Stream(s, id), port_(port), hold_(s->services().tracker) {}
  ~PortStream() override {
    if (watched_) session_->services().loop->Remove(fd_.get());
  }

  void Connect() {
    fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd_.valid()) return Fail(WireError::kResourceExhausted, "socket(AF_INET)", errno);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc;
    do {
      rc = ::connect(fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) return Connected();
    if (errno != EINPROGRESS) return Fail(WireError::kUnavailable, "connect", errno);
    Update();
  }

  void Resume() override { Update(); }

 protected:
  void OnFrame(const Frame& f) override {
    if (f.type == Type::kData) {
      wbuf_.append(f.payload);
      if (connected_) FlushOut();
    } else if (f.type == Type::kClose || f.type == Type::kEnd) {
      host_closed_ = true;
      if (connected_) FlushOut();
    }
  }

 private:
  std::string Where() const { return "127.0.0.1:" + std::to_string(port_); }

  void Fail(WireError code, const char* what, int err) {
    SendError(code, std::string(what) + " " + Where() + ": " + std::strerror(err));
    Stop();
  }
  void Stop() {
    if (watched_) session_->services().loop->Remove(fd_.get());
    watched_ = false;
    fd_.reset();
    End();
  }

  void Connected() {
    connected_ = true;
    Send(Type::kOk, "");
    FlushOut();
  }

  void Update() {
    if (!fd_.valid()) return;
    std::uint32_t ev = 0;
    if (!connected_) {
      ev = EPOLLOUT;
    } else {
      if (!peer_eof_ && SendRoom() > 0) ev |= EPOLLIN | EPOLLRDHUP;
      if (!wbuf_.empty()) ev |= EPOLLOUT;
    }
    auto* loop = session_->services().loop;
    if (ev == 0) {
      if (watched_) loop->Remove(fd_.get());
      watched_ = false;
    } else if (watched_) {
      (void)loop->Modify(fd_.get(), ev);
    } else {
      auto r = loop->Add(fd_.get(), ev, [this](std::uint32_t e) { OnEvents(e); });
      if (r.ok()) watched_ = true;
    }
  }

  void OnEvents(std::uint32_t ev) {
    if (!connected_) {
      int err = 0;
      socklen_t len = sizeof(err);
      if (::getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) return Fail(WireError::kUnavailable, "connect", err);
      Connected();
      return;
    }
    if (ev & EPOLLOUT) FlushOut();
    if (!fd_.valid()) return;
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ReadIn();
    Update();
  }

  void ReadIn() {
    char buf[kReadChunk];
    for (int i = 0; i < 16 && !peer_eof_ && fd_.valid(); ++i) {
      std::size_t room = std::min(SendRoom(), kReadChunk);
      if (room == 0) return;
      ssize_t n = ::recv(fd_.get(), buf, room, 0);
      if (n > 0) {
        std::string frame;
        frame.reserve(proto::kFrameHeaderSize + static_cast<std::size_t>(n));
        proto::AppendFrame(frame, Type::kData, id_,
                           std::string_view(buf, static_cast<std::size_t>(n)));
        SendCounted(std::move(frame), static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (n < 0) return Fail(WireError::kUnavailable, "recv from", errno);
      peer_eof_ = true;  // the server closed its side: half-close towards the host
      Send(Type::kClose, "");
      MaybeDone();
    }
  }

  void FlushOut() {
    std::size_t consumed = 0;
    while (fd_.valid() && !wbuf_.empty()) {
      ssize_t n = ::send(fd_.get(), wbuf_.data(), wbuf_.size(), MSG_NOSIGNAL);
      if (n > 0) {
        wbuf_.erase(0, static_cast<std::size_t>(n));
        consumed += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      Consumed(consumed);
      return Fail(WireError::kUnavailable, "send to", errno);
    }
    Consumed(consumed);
    if (host_closed_ && wbuf_.empty() && !shut_wr_ && fd_.valid()) {
      ::shutdown(fd_.get(), SHUT_WR);
      shut_wr_ = true;
      MaybeDone();
    }
    Update();
  }

  void MaybeDone() {
    if (peer_eof_ && shut_wr_) Stop();
  }

  std::uint16_t port_;
  UniqueFd fd_;
  bool watched_ = false;
  bool connected_ = false;
  bool peer_eof_ = false;
  bool host_closed_ = false;
  bool shut_wr_ = false;
  std::string wbuf_;
  ActivityHold hold_;
};

// ---------------------------------------------------------------------------------------------
// WATCH: inotify events (watch.h) as WATCH_EVENTS frames, within the stream's window. The
// inotify fd is read whenever it is readable, room or not, so a consumer that stops reading
// fills the Watcher's bounded queue, which then reports one overflow.

class WatchStream : public Stream {
 public:
  WatchStream(Session* s, std::uint32_t id, std::unique_ptr<Watcher> watcher)
      : Stream(s, id), watcher_(std::move(watcher)), hold_(s->services().tracker) {}
  ~WatchStream() override { Stop(); }

  void Start() {
    Send(Type::kOk, "");
    auto r = session_->services().loop->Add(watcher_->fd(), EPOLLIN,
                                            [this](std::uint32_t) { OnReadable(); });
    if (!r.ok()) {
      SendError(proto::ToWireError(r.error().code()), "WATCH: " + r.error().message());
      return Finish(false);
    }
    watched_ = true;
  }

  void Resume() override {
    if (!watcher_) return;
    while (watcher_->has_events()) {
      // The payload is a u32 count plus the events, all of it counted against the window.
      const std::size_t room = std::min<std::size_t>(SendRoom(), proto::kMaxPayload);
      if (room <= 4) return;
      proto::WatchEvents batch{watcher_->Take(room - 4)};
      if (batch.events.empty()) return;  // the next event needs more room than there is
      const std::string payload = batch.Encode();
      std::string frame;
      proto::AppendFrame(frame, Type::kWatchEvents, id_, payload);
      SendCounted(std::move(frame), payload.size());
    }
    if (watcher_->ended()) Finish(true);
  }

 protected:
  void OnFrame(const Frame& f) override {
    if (f.type == Type::kClose) Finish(true);  // the host is done: END confirms it
  }

 private:
  void OnReadable() {
    if (!watcher_) return;
    if (auto r = watcher_->ReadEvents(); !r.ok()) {
      SendError(proto::ToWireError(r.error().code()), "WATCH: " + r.error().message());
      return Finish(false);
    }
    ResumeSafely();
  }
  void Stop() {
    if (watched_) session_->services().loop->Remove(watcher_->fd());
    watched_ = false;
  }
  void Finish(bool send_end) {
    if (!watcher_) return;
    Stop();
    watcher_.reset();
    if (send_end) Send(Type::kEnd, "");
    End();
  }

  std::unique_ptr<Watcher> watcher_;
  bool watched_ = false;
  ActivityHold hold_;
};

// ---------------------------------------------------------------------------------------------
// Files (files.h). Everything about them goes through StartFileStream.

class FileStream : public Stream {
 public:
  FileStream(Session* s, std::uint32_t id, std::unique_ptr<FileOp> op)
      : Stream(s, id), op_(std::move(op)), hold_(s->services().tracker) {}

  void Resume() override {
    if (!op_ || !op_->is_streaming_out()) return;
    // Bounded: the room never exceeds the session's queue high-water mark.
    while (op_) {
      std::size_t room = std::min<std::size_t>(SendRoom(), proto::kMaxPayload);
      if (room == 0) return;
      auto chunk = op_->Pull(room);
      if (!chunk.ok()) return Reply(ErrorReply(chunk.error()));
      if (!chunk->data.empty()) {
        std::string frame;
        proto::AppendFrame(frame, Type::kData, id_, chunk->data);
        SendCounted(std::move(frame), chunk->data.size());
      }
      if (chunk->end) return Reply({Type::kEnd, ""});
    }
  }

 protected:
  void OnFrame(const Frame& f) override {
    if (!op_ || !op_->is_streaming_in()) return;
    if (f.type == Type::kData) {
      auto r = op_->Push(f.payload);
      Consumed(f.payload.size());
      if (!r.ok()) Reply(ErrorReply(r.error()));
    } else if (f.type == Type::kEnd) {
      Reply(op_->Finish());
    } else if (f.type == Type::kClose) {
      op_.reset();  // abandoned by the host: a FILE_WRITE leaves nothing behind
      End();
    }
  }

 private:
  void Reply(const agvisor::agent::Reply& r) {
    Send(r.type, r.payload);
    op_.reset();
    End();
  }

  std::unique_ptr<FileOp> op_;
  ActivityHold hold_;
};

}  // namespace

namespace {

// Starts a file operation stream, or answers it at once. The one place the session knows about
// files.
std::unique_ptr<Stream> StartFileStream(Session* session, const Frame& f) {
  std::unique_ptr<FileOp> op = StartFileOp(f.type, f.payload);
  if (auto reply = op->Immediate()) {
    session->SendFrame(FrameOf(reply->type, f.stream, reply->payload));
    return nullptr;
  }
  return std::make_unique<FileStream>(session, f.stream, std::move(op));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Stream

Stream::Stream(Session* session, std::uint32_t id)
    : session_(session), id_(id), credit_(session->initial_window()) {}

void Stream::ResumeSafely() {
  // A stream that ended stays alive until the session's Collect, so the flags stay valid here.
  if (resuming_) {
    resume_again_ = true;
    return;
  }
  resuming_ = true;
  do {
    resume_again_ = false;
    Resume();
  } while (resume_again_);
  resuming_ = false;
}

void Stream::Deliver(const Frame& f) {
  if (f.type == Type::kWindow) {
    auto w = proto::Window::Decode(f.payload);
    if (w.ok()) {
      credit_ += w->bytes;
      ResumeSafely();
    }
    return;
  }
  OnFrame(f);
}

std::size_t Stream::SendRoom() const {
  return static_cast<std::size_t>(std::min<std::uint64_t>(credit_, session_->QueueRoom()));
}

void Stream::Send(Type type, std::string_view payload) {
  session_->SendFrame(FrameOf(type, id_, payload));
}

void Stream::SendCounted(std::string&& frame, std::size_t counted) {
  credit_ -= std::min<std::uint64_t>(credit_, counted);
  session_->SendFrame(std::move(frame), true);
}

void Stream::Consumed(std::size_t n) {
  ungranted_ += n;
  if (ungranted_ == 0 || ungranted_ < GrantThreshold(session_->initial_window())) return;
  while (ungranted_ > 0) {
    auto n32 = static_cast<std::uint32_t>(std::min<std::size_t>(ungranted_, 0xFFFFFFFFu));
    Send(Type::kWindow, proto::Window{n32}.Encode());
    ungranted_ -= n32;
  }
}

void Stream::SendError(WireError code, const std::string& message) {
  proto::ErrorPayload e{code, message.substr(0, proto::ErrorPayload::kMaxErrorMessage)};
  Send(Type::kError, e.Encode());
}

void Stream::End() { session_->EndStream(id_); }

// ---------------------------------------------------------------------------------------------
// Session

Session::Session(AgentServices services, int in_fd, int out_fd, UniqueFd owned, std::string name)
    : svc_(services),
      in_fd_(in_fd),
      out_fd_(out_fd),
      owned_(std::move(owned)),
      name_(std::move(name)) {}

std::unique_ptr<Session> Session::ForStdio(AgentServices services) {
  return std::unique_ptr<Session>(
      new Session(services, STDIN_FILENO, STDOUT_FILENO, UniqueFd(), "stdio"));
}

std::unique_ptr<Session> Session::ForSocket(AgentServices services, UniqueFd fd) {
  int raw = fd.get();
  auto s = std::unique_ptr<Session>(
      new Session(services, raw, raw, std::move(fd), "socket fd " + std::to_string(raw)));
  s->legacy_hold_ = ActivityHold(services.tracker);
  return s;
}

Session::~Session() {
  if (!closed_) Close("");
  streams_.clear();
  ended_.clear();
}

Result<void> Session::Start() {
  for (int fd : {in_fd_, out_fd_}) {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      return Error::FromErrno(name_ + ": fcntl(fd " + std::to_string(fd) + ", O_NONBLOCK)", errno);
    }
  }
  UpdateEvents();
  if (!in_watched_) return Error::Internal(name_ + ": cannot watch fd " + std::to_string(in_fd_));
  return Ok();
}

void Session::UpdateEvents() {
  if (closed_) return;
  // Input pauses while the host does not read what we send (PONGs must not pile up).
  std::uint32_t in =
      (!closing_ && queued_ < 4 * kQueueHighWater) ? std::uint32_t{EPOLLIN | EPOLLRDHUP} : 0u;
  std::uint32_t out = queue_.empty() ? 0u : std::uint32_t{EPOLLOUT};
  auto set = [&](int fd, std::uint32_t ev, bool& watched, std::uint32_t& cur,
                 std::function<void(std::uint32_t)> handler) {
    if (watched && ev == cur) return;
    if (ev == 0) {
      if (watched) svc_.loop->Remove(fd);
      watched = false;
    } else if (watched) {
      if (svc_.loop->Modify(fd, ev).ok()) cur = ev;
    } else {
      auto r = svc_.loop->Add(fd, ev, std::move(handler));
      if (!r.ok()) {
        LogLine(name_ + ": " + r.error().message());
        return;
      }
      watched = true;
    }
    cur = ev;
  };
  if (in_fd_ == out_fd_) {
    set(in_fd_, in | out, in_watched_, in_events_, [this](std::uint32_t ev) {
      if (ev & EPOLLOUT) OnOutput();
      if (!closed_ && (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) OnInput();
    });
    out_watched_ = in_watched_;
  } else {
    set(in_fd_, in, in_watched_, in_events_, [this](std::uint32_t) { OnInput(); });
    set(out_fd_, out, out_watched_, out_events_, [this](std::uint32_t) { OnOutput(); });
  }
}

void Session::OnInput() {
  for (int i = 0; i < 16 && !closed_ && !closing_; ++i) {
    ssize_t n = ::read(in_fd_, g_input_buf, sizeof(g_input_buf));
    if (n > 0) {
      auto r = decoder_.Feed(std::string_view(g_input_buf, static_cast<std::size_t>(n)),
                             [this](Frame&& f) {
                               if (!closed_ && !closing_) OnFrame(std::move(f));
                             });
      if (!r.ok() && !closing_ && !closed_)
        ProtocolError(WireError::kProtocol, r.error().message());
      if (queued_ >= 4 * kQueueHighWater) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n == 0) {
      Close(decoder_.mid_frame() ? "EOF in the middle of a frame" : "");
    } else {
      Close(std::string("read: ") + std::strerror(errno));
    }
    return;
  }
  UpdateEvents();
}

void Session::OnOutput() { Flush(); }

void Session::SendFrame(std::string&& frame, bool /*counted_data*/) {
  if (closed_) return;
  queued_ += frame.size();
  queue_.push_back(std::move(frame));
  if (queue_.size() == 1) {
    Flush();
  } else {
    UpdateEvents();
  }
}

void Session::Flush() {
  // The queue may have filled up in SendFrame (no Flush there while frames are queued): remember
  // it, so the streams that stopped for want of room are resumed once it drains.
  if (QueueRoom() == 0) was_full_ = true;
  while (!queue_.empty() && !closed_) {
    iovec iov[64];
    int cnt = 0;
    for (auto it = queue_.begin(); it != queue_.end() && cnt < 64; ++it, ++cnt) {
      std::size_t off = cnt == 0 ? front_offset_ : 0;
      iov[cnt].iov_base = it->data() + off;
      iov[cnt].iov_len = it->size() - off;
    }
    ssize_t n = ::writev(out_fd_, iov, cnt);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      Close(std::string("write: ") + std::strerror(errno));
      return;
    }
    auto left = static_cast<std::size_t>(n);
    queued_ -= left;
    while (left > 0) {
      std::size_t avail = queue_.front().size() - front_offset_;
      if (left >= avail) {
        left -= avail;
        queue_.pop_front();
        front_offset_ = 0;
      } else {
        front_offset_ += left;
        left = 0;
      }
    }
  }
  if (closing_ && queue_.empty()) {
    Close("");
    return;
  }
  bool full = QueueRoom() == 0;
  if (was_full_ && queued_ < kQueueHighWater / 2) {
    was_full_ = false;
    ResumeStreams();
  } else if (full) {
    was_full_ = true;
  }
  UpdateEvents();
}

void Session::ResumeStreams() {
  std::vector<Stream*> all;
  for (auto& [id, s] : streams_) all.push_back(s.get());
  for (Stream* s : all) {
    if (closed_) return;
    if (streams_.contains(s->id()) && streams_[s->id()].get() == s) s->ResumeSafely();
  }
}

void Session::EndStream(std::uint32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  ended_.push_back(std::move(it->second));
  streams_.erase(it);
}

void Session::Collect() { ended_.clear(); }

void Session::ProtocolError(WireError code, const std::string& message) {
  LogLine(name_ + ": " + std::string(proto::WireErrorName(code)) + ": " + message +
          "; closing the session");
  proto::ErrorPayload e{code, message.substr(0, proto::ErrorPayload::kMaxErrorMessage)};
  SendFrame(FrameOf(Type::kError, proto::kSessionStream, e.Encode()));
  closing_ = true;
  if (queue_.empty()) {
    Close("");
  } else {
    UpdateEvents();
  }
}

void Session::Close(const std::string& why) {
  if (closed_) return;
  if (!why.empty()) LogLine(name_ + ": " + why + "; session closed");
  closed_ = true;
  if (in_watched_) svc_.loop->Remove(in_fd_);
  if (out_watched_ && out_fd_ != in_fd_) svc_.loop->Remove(out_fd_);
  in_watched_ = out_watched_ = false;
  queue_.clear();
  queued_ = 0;
  legacy_hold_.Reset();
  if (!owned_.valid()) {
    // PID 1's stdio: put /dev/null in its place, so the host sees EOF on the old stdout and a
    // later pipe or socket never lands on fd 0/1.
    int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd >= 0) {
      ::dup2(null_fd, in_fd_);
      ::dup2(null_fd, out_fd_);
      ::close(null_fd);
    }
  }
  // Streams go with the session: execs are detached (non-background ones killed), ports closed.
  for (auto& [id, s] : streams_) ended_.push_back(std::move(s));
  streams_.clear();
  owned_.reset();
}

void Session::OnFrame(Frame&& f) {
  if (!welcomed_) {
    if (f.type != Type::kHello || f.stream != proto::kSessionStream) {
      return ProtocolError(WireError::kProtocol, "expected HELLO on stream 0 first, got " +
                                                     std::string(proto::TypeName(f.type)) +
                                                     " on stream " + std::to_string(f.stream));
    }
    auto hello = proto::Hello::Decode(f.payload);
    if (!hello.ok()) return ProtocolError(WireError::kProtocol, hello.error().message());
    if (hello->version < proto::kMinProtocolVersion) {
      return ProtocolError(WireError::kVersion, "this agent speaks protocol versions " +
                                                    std::to_string(proto::kMinProtocolVersion) +
                                                    " to " +
                                                    std::to_string(proto::kProtocolVersion) +
                                                    ", the host " + std::to_string(hello->version));
    }
    // The lower of the two: a newer host learns from WELCOME what this agent understands.
    const std::uint16_t version = std::min(hello->version, proto::kProtocolVersion);
    version_ = version;
    initial_window_ = hello->initial_window;
    welcomed_ = true;
    legacy_hold_.Withdraw();  // a protocol session: only its operations are activity
    proto::Welcome w{version, std::string(kAgentVersion), svc_.boot_unix_ms};
    SendFrame(FrameOf(Type::kWelcome, proto::kSessionStream, w.Encode()));
    return;
  }
  const FromHost kind = Classify(f.type);
  if (kind == FromHost::kRefused) {
    return ProtocolError(WireError::kProtocol, std::string(proto::TypeName(f.type)) +
                                                   " is not a frame the host sends here");
  }
  if (auto r = proto::CheckPayload(f.type, f.payload); !r.ok()) {
    return ProtocolError(WireError::kProtocol, r.error().message());
  }
  if (version_ < 2 && (f.type == Type::kProcSignal || f.type == Type::kDetach)) {
    return ProtocolError(WireError::kProtocol, std::string(proto::TypeName(f.type)) +
                                                   " needs protocol version 2; this session "
                                                   "speaks " +
                                                   std::to_string(version_));
  }
  if (version_ < 4 && f.type == Type::kWatch) {
    return ProtocolError(WireError::kProtocol,
                         "WATCH needs protocol version 4; this session "
                         "speaks " +
                             std::to_string(version_));
  }
  if (version_ < 5 && f.type == Type::kIdleQuery) {
    return ProtocolError(
        WireError::kProtocol,
        "IDLE_QUERY needs protocol version 5; this session speaks " + std::to_string(version_));
  }
  if (f.stream == proto::kSessionStream) return OnSessionFrame(f);
  if (kind == FromHost::kOpens) {
    if (streams_.contains(f.stream)) {
      return ProtocolError(WireError::kProtocol, std::string(proto::TypeName(f.type)) +
                                                     " on stream " + std::to_string(f.stream) +
                                                     ", which is still in use");
    }
    return Open(f);
  }
  auto it = streams_.find(f.stream);
  // Frames for a stream that already ended (STDIN racing an EXIT, ...) are dropped.
  if (it != streams_.end()) it->second->Deliver(f);
}

void Session::OnSessionFrame(const Frame& f) {
  switch (f.type) {
    case Type::kPing: {
      auto p = proto::Ping::Decode(f.payload);
      SendFrame(FrameOf(Type::kPong, 0, proto::Pong{p.ok() ? p->token : 0}.Encode()));
      return;
    }
    case Type::kPong:
    case Type::kWindow:
      return;
    case Type::kClose:
      // The host is done with the session.
      closing_ = true;
      if (queue_.empty()) Close("");
      return;
    default:
      return ProtocolError(WireError::kProtocol,
                           std::string(proto::TypeName(f.type)) + " is not valid on stream 0");
  }
}

void Session::Open(const Frame& f) {
  auto error = [&](WireError code, const std::string& message) {
    proto::ErrorPayload e{code, message.substr(0, proto::ErrorPayload::kMaxErrorMessage)};
    SendFrame(FrameOf(Type::kError, f.stream, e.Encode()));
  };
  // The background process `pid`, or null once ERROR kNotFound has answered (`op`: the request).
  auto find_background = [&](std::uint32_t pid, std::string_view op) {
    auto proc = svc_.processes->FindBackground(static_cast<pid_t>(pid));
    if (!proc) {
      error(WireError::kNotFound,
            std::string(op) + ": no background process " + std::to_string(pid));
    }
    return proc;
  };
  // Serves `proc` on this request's stream; `replay`: its kept output first.
  auto serve = [&](std::shared_ptr<ChannelProcess> proc, bool stdin_ok, bool replay) {
    auto stream = std::make_unique<ExecStream>(this, f.stream, std::move(proc), stdin_ok);
    ExecStream* raw = stream.get();
    streams_[f.stream] = std::move(stream);
    raw->AttachNow(replay);
  };
  switch (f.type) {
    case Type::kExec: {
      auto req = proto::ExecRequest::Decode(f.payload);
      if (!req.ok()) return ProtocolError(WireError::kProtocol, req.error().message());
      const bool keep_awake = (req->flags & proto::kExecKeepAwake) != 0;
      if (keep_awake && version_ < 6) {
        return ProtocolError(WireError::kProtocol,
                             "EXEC's keep-awake flag needs protocol version 6; this session "
                             "speaks " +
                                 std::to_string(version_));
      }
      if (keep_awake && (req->flags & proto::kExecBackground) == 0) {
        return error(WireError::kInvalidArgument,
                     "EXEC: keep-awake is for background processes only");
      }
      if (req->argv.empty() || req->argv[0].empty()) {
        return error(WireError::kInvalidArgument, "EXEC: empty argv");
      }
      for (const auto& kv : req->env) {
        auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) {
          return error(WireError::kInvalidArgument,
                       "EXEC: env entry '" + kv + "': expected K=V with a non-empty K");
        }
      }
      SpawnRequest sr;
      sr.argv = req->argv;
      if (!req->user.empty()) {
        auto user = LookupUser(req->user);
        if (!user.ok())
          return error(proto::ToWireError(user.error().code()), "EXEC: " + user.error().message());
        sr.user = std::move(*user);
      }
      const bool pty = (req->flags & proto::kExecPty) != 0;
      const bool background = (req->flags & proto::kExecBackground) != 0;
      sr.env = BuildEnvironment(req->env, sr.user, pty);
      sr.cwd = req->cwd;
      sr.pipe_stdin = (req->flags & proto::kExecStdin) != 0;
      sr.pty = pty;
      sr.rows = req->rows;
      sr.cols = req->cols;
      std::optional<std::chrono::milliseconds> timeout;
      if (req->timeout_ms > 0) timeout = std::chrono::milliseconds(req->timeout_ms);
      if (svc_.ready_shells != nullptr) {
        if (auto shell = svc_.ready_shells->Take(*req)) {
          auto proc = svc_.processes->Adopt(std::move(*shell), req->argv[0], background, timeout);
          proc->set_prestarted();
          if (keep_awake) proc->KeepAwake(svc_.tracker);
          SendFrame(FrameOf(Type::kStarted, f.stream,
                            proto::Started{static_cast<std::uint32_t>(proc->pid())}.Encode()));
          return serve(proc, /*stdin_ok=*/false, /*replay=*/false);
        }
      }
      auto proc = svc_.processes->Start(sr, background, timeout);
      if (!proc.ok()) {
        LogLine(name_ + ": exec " + req->argv[0] + ": " + proc.error().message());
        return error(proto::ToWireError(proc.error().code()),
                     "EXEC " + req->argv[0] + ": " + proc.error().message());
      }
      if (keep_awake) (*proc)->KeepAwake(svc_.tracker);
      SendFrame(FrameOf(Type::kStarted, f.stream,
                        proto::Started{static_cast<std::uint32_t>((*proc)->pid())}.Encode()));
      return serve(*proc, sr.pipe_stdin || pty, /*replay=*/false);
    }
    case Type::kProcAttach: {
      auto req = proto::ProcAttach::Decode(f.payload);
      if (!req.ok()) return ProtocolError(WireError::kProtocol, req.error().message());
      auto proc = find_background(req->pid, "PROC_ATTACH");
      if (!proc) return;
      if (proc->has_sink()) {
        return error(WireError::kConflict, "PROC_ATTACH: process " + std::to_string(req->pid) +
                                               " is attached to another stream");
      }
      return serve(proc, /*stdin_ok=*/true, /*replay=*/true);
    }
    case Type::kProcSignal: {
      auto req = proto::ProcSignal::Decode(f.payload);
      if (!req.ok()) return ProtocolError(WireError::kProtocol, req.error().message());
      auto proc = find_background(req->pid, "PROC_SIGNAL");
      if (!proc) return;
      if (auto r = proc->Signal(req->signal); !r.ok()) {
        return error(proto::ToWireError(r.error().code()), "PROC_SIGNAL: " + r.error().message());
      }
      SendFrame(FrameOf(Type::kOk, f.stream, {}));
      return;
    }
    case Type::kProcList: {
      proto::ProcListResult r{svc_.processes->ListBackground()};
      std::string payload = r.Encode(version_);
      if (!proto::FitsInFrame(payload.size())) {
        return error(WireError::kResourceExhausted, "PROC_LIST: too many processes");
      }
      SendFrame(FrameOf(Type::kProcListResult, f.stream, payload));
      return;
    }
    case Type::kSetDeadlines: {
      auto req = proto::SetDeadlines::Decode(f.payload);
      if (!req.ok()) return ProtocolError(WireError::kProtocol, req.error().message());
      // The command line's bound (100 years): larger values would overflow the clock.
      constexpr std::uint64_t kMaxMs = 100ULL * 365 * 24 * 3600 * 1000;
      if (req->lifetime_ms > kMaxMs || req->idle_ttl_ms > kMaxMs) {
        return error(WireError::kInvalidArgument,
                     "SET_DEADLINES: lifetime and idle-ttl must be at most 100 years");
      }
      ExpiryPolicy policy;
      if (req->lifetime_ms > 0) policy.lifetime = std::chrono::milliseconds(req->lifetime_ms);
      if (req->idle_ttl_ms > 0) policy.idle_ttl = std::chrono::milliseconds(req->idle_ttl_ms);
      svc_.tracker->SetPolicy(policy, Clock::now());
      LogLine(name_ + ": deadlines set: lifetime " +
              (policy.lifetime ? FormatSeconds(*policy.lifetime) : std::string("none")) +
              ", idle-ttl " +
              (policy.idle_ttl ? FormatSeconds(*policy.idle_ttl) : std::string("none")) +
              " from now");
      SendFrame(FrameOf(Type::kOk, f.stream, {}));
      return;
    }
    case Type::kIdleQuery: {
      // Answered at once and holds nothing: asking is not activity (the host polls idle
      // sandboxes with it, idle_action pause).
      const auto now = Clock::now();
      proto::IdleState st;
      st.holds = static_cast<std::uint32_t>(std::max(0, svc_.tracker->holders()));
      st.idle_ms =
          st.holds > 0 ? 0 : static_cast<std::uint64_t>(svc_.tracker->IdleFor(now).count());
      SendFrame(FrameOf(Type::kIdleState, f.stream, st.Encode()));
      return;
    }
    case Type::kWatch: {
      auto req = proto::WatchRequest::Decode(f.payload);
      if (!req.ok()) return ProtocolError(WireError::kProtocol, req.error().message());
      auto watcher = Watcher::Create(req->path, (req->flags & proto::kWatchRecursive) != 0);
      if (!watcher.ok()) {
        return error(proto::ToWireError(watcher.error().code()), watcher.error().message());
      }
      auto stream = std::make_unique<WatchStream>(this, f.stream, std::move(*watcher));
      WatchStream* raw = stream.get();
      streams_[f.stream] = std::move(stream);
      raw->Start();
      return;
    }
    case Type::kPortOpen: {
      auto req = proto::PortOpen::Decode(f.payload);
      if (!req.ok()) return ProtocolError(WireError::kProtocol, req.error().message());
      auto stream = std::make_unique<PortStream>(this, f.stream, req->port);
      PortStream* raw = stream.get();
      streams_[f.stream] = std::move(stream);
      raw->Connect();
      return;
    }
    default: {
      auto stream = StartFileStream(this, f);
      if (stream) {
        Stream* raw = stream.get();
        streams_[f.stream] = std::move(stream);
        raw->ResumeSafely();
      }
      return;
    }
  }
}

}  // namespace agvisor::agent
