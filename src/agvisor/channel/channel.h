// Channel: the host side of the agent channel protocol (docs/protocol.md). One Channel is one
// session with an in-sandbox agent over one byte stream (Transport); every operation (exec,
// files, ports, ping) is a numbered stream of frames on it.
//
// Used by sandbox/ (over Docker's attach stream or an `agvisor-agent connect` relay) and tests
// (over pipes to a real agent binary, or an in-memory fake). Knows nothing of Docker.
//
// Threading: every method may be called from many threads at once. One reader thread per
// Channel decodes frames and hands them to the stream they belong to; the thread that started an
// operation consumes its frames (so callbacks run on the caller's thread). Writes are serialised
// by a mutex; DATA / STDIN payloads are written straight from the caller's buffer (header and
// payload as one gathered write), never copied into a frame buffer.
//
// Flow control: each direction of each stream starts with `initial_window` bytes of credit.
// Senders here block while a stream has no credit; the consumer grants WINDOW as it takes bytes,
// so a fast producer in the sandbox is slowed to the caller's pace and memory stays bounded.
//
// Failure: when the transport breaks (EOF, error, a frame that does not parse, ERROR on stream 0,
// or no answer to a keep-alive PING while an operation waits), the Channel is broken for good:
// every operation in flight and every later one fails with kUnavailable ("agent channel lost:
// ..."). The owner (Sandbox) then opens a new Channel. Errors the agent reports for one
// operation (ERROR frames) are returned with their code (kNotFound, kPermissionDenied, ...).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "agvisor/base/error.h"
#include "agvisor/base/pending_bytes.h"
#include "agvisor/channel/transport.h"
#include "agvisor/proto/messages.h"

namespace agvisor::channel {

struct ChannelOptions {
  // The protocol version offered in HELLO (proto::kMinProtocolVersion..kProtocolVersion). The
  // agent answers with the lower of its own and this; an agent older than version 2 refuses
  // anything but 1 (Open fails with kUnsupported): open again with 1 (Sandbox does).
  std::uint16_t version = proto::kProtocolVersion;
  // Credit per direction per stream, sent in HELLO.
  std::uint32_t initial_window = proto::kDefaultWindow;
  // How long Open waits for WELCOME.
  std::chrono::milliseconds handshake_timeout{15000};
  // While an operation waits and nothing arrived for this long, a PING is sent...
  std::chrono::milliseconds keepalive_interval{2000};
  // ...and the channel is declared lost when nothing at all arrives for this long.
  std::chrono::milliseconds keepalive_timeout{15000};
  // Exec (Channel::Exec) with a timeout: the agent ends the command at the timeout and sends
  // EXIT; when none came this long after it, the host gives up (kTimeout) and closes the channel
  // (an agent that floods output or stalls without end cannot hold a caller longer).
  std::chrono::milliseconds exec_deadline_grace{10000};
};

// What WELCOME said.
struct AgentHello {
  std::uint16_t version = 0;
  std::string agent_version;
  std::uint64_t boot_unix_ms = 0;
};

// Output callbacks of an exec; each may be empty. Called on the thread that waits.
struct ExecCallbacks {
  std::function<void(std::string_view)> on_stdout;
  std::function<void(std::string_view)> on_stderr;
};

// Fills `buf` with the next bytes; 0 = end. An error aborts the operation and is returned.
using ByteSource = std::function<Result<std::size_t>(std::span<char> buf)>;
// Receives bytes as they arrive; an error aborts the operation and is returned.
using ByteSink = std::function<Result<void>(std::string_view bytes)>;

// A ByteSink that appends everything to `out` (which must outlive it): for reading a whole file
// into memory, grown as bytes arrive (never sized from what the sandbox says it will send).
inline ByteSink AppendingSink(std::string& out) {
  return [&out](std::string_view bytes) -> Result<void> {
    out.append(bytes);
    return Ok();
  };
}

class Channel;
struct StreamState;

// What each handle on one of a channel's streams (Process, PortStream, WatchStream) holds: the
// channel, kept alive while the handle lives, and the stream's state.
class StreamHandle {
 protected:
  StreamHandle(std::shared_ptr<Channel> channel, std::shared_ptr<StreamState> stream)
      : channel_(std::move(channel)), stream_(std::move(stream)) {}
  std::shared_ptr<Channel> channel_;
  std::shared_ptr<StreamState> stream_;
};

// A started command (Channel::Start) or an attached background process (Channel::AttachProcess).
// Write/CloseStdin/Resize/Signal may be called from any thread while another thread is in Wait.
// Destroying a Process whose command still runs sends SIGKILL to its process group and forgets
// the stream, except for a background one (kExecBackground, or attached): it keeps running and
// is detached (DETACH; with an agent of protocol version 1, which has no detach, it stays
// attached to this session until the session ends).
class Process : private StreamHandle {
 public:
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Sends stdin bytes (the EXEC must have had kExecStdin or kExecPty), blocking while the stream
  // has no credit. Errors: kUnavailable (channel lost), kConflict (the command has exited).
  Result<void> Write(std::string_view data);
  // STDIN_EOF: the command reads end of file.
  Result<void> CloseStdin();
  Result<void> Resize(std::uint16_t rows, std::uint16_t cols);
  // Sends `signal` to the command's process group.
  Result<void> Signal(int signal);
  // Delivers output to `callbacks` until the command exits; returns how it ended. Called once.
  // Errors: kUnavailable (channel lost), the agent's error for the EXEC (kNotFound: no such
  // program, kInvalidArgument, kPermissionDenied, ...).
  Result<proto::Exit> Wait(const ExecCallbacks& callbacks);
  // Waits for STARTED and returns the pid (at once when known: an attached process). Errors: as
  // Wait (the EXEC failed). Call before Wait, not while another thread is in Wait.
  Result<std::uint32_t> WaitStarted();
  // The pid STARTED reported (0 until Wait or WaitStarted has seen it).
  std::uint32_t pid() const { return pid_; }
  // Ends this attachment from any thread while another waits: Wait returns kUnavailable
  // ("detached by the host") and a background process runs on (any other is ended, as when its
  // session ends). With an agent of protocol version 1, which has no DETACH, it ends the whole
  // session: use it there only on an attach with a session of its own (Sandbox::AttachProcess
  // makes one then).
  Result<void> Detach();
  // The session this process's stream is on.
  const std::shared_ptr<Channel>& channel() const { return channel_; }

 private:
  friend class Channel;
  Process(std::shared_ptr<Channel> channel, std::shared_ptr<StreamState> stream, bool background,
          std::uint32_t pid);
  std::uint32_t pid_ = 0;
  bool exited_ = false;  // the stream is over (EXIT, ERROR, or OK after DETACH)
  bool background_ = false;
  std::atomic<bool> detach_sent_{false};
};

// A TCP connection to a port inside the sandbox (Channel::OpenPort). Read and Write may run on
// different threads at once. Destroying it closes it.
class PortStream : private StreamHandle {
 public:
  ~PortStream();
  PortStream(const PortStream&) = delete;
  PortStream& operator=(const PortStream&) = delete;

  // Up to buf.size() bytes; 0 = the sandbox side closed. Errors: kUnavailable (channel lost).
  Result<std::size_t> Read(std::span<char> buf);
  // All of `data`, blocking while there is no credit. Errors: kUnavailable, kConflict (closed).
  Result<void> Write(std::string_view data);
  // CLOSE: the sandbox side reads end of file; reading goes on.
  Result<void> CloseWrite();
  // Closes both directions. Idempotent.
  void Close();

 private:
  friend class Channel;
  PortStream(std::shared_ptr<Channel> channel, std::shared_ptr<StreamState> stream);
  PendingBytes current_;  // the DATA payload being read
  bool eof_ = false;
  bool write_closed_ = false;
  bool closed_ = false;
};

// A directory watch inside the sandbox (Channel::Watch): inotify events, relative to the watched
// directory. Next and Close may run on different threads at once (Close wakes a waiting Next).
// Destroying it closes it.
class WatchStream : private StreamHandle {
 public:
  ~WatchStream();
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  // The next events, waiting up to `timeout`: a non-empty list, an empty one when nothing came in
  // time, or nullopt once the watch is over (the watched directory was deleted or moved away, or
  // Close was called). Every event was checked (proto::WatchEvent::ReadFrom: known kind, paths
  // relative, bounded, without NUL). Errors: kUnavailable (channel lost), kInternal (the agent
  // sent something that does not parse: a broken or hostile agent; the channel is closed).
  Result<std::optional<std::vector<proto::WatchEvent>>> Next(std::chrono::milliseconds timeout);
  // Ends the watch (CLOSE to the agent). Idempotent, any thread.
  void Close();

 private:
  friend class Channel;
  WatchStream(std::shared_ptr<Channel> channel, std::shared_ptr<StreamState> stream);
  bool ended_ = false;  // END came, or Close: Next says nullopt
  std::atomic<bool> closed_{false};
};

class Channel : public std::enable_shared_from_this<Channel> {
 public:
  // Sends HELLO, waits for WELCOME and starts the reader thread. Errors: kUnsupported (the
  // agent speaks another protocol version: host and agent binaries do not match), kUnavailable
  // (the transport ended first; the message says what the peer sent, if anything), kTimeout (no
  // WELCOME within handshake_timeout).
  static Result<std::shared_ptr<Channel>> Open(std::unique_ptr<Transport> transport,
                                               ChannelOptions options = {});
  // Closes the transport and joins the reader; operations in flight fail with kUnavailable.
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  const AgentHello& agent() const { return agent_; }
  // True once the transport is lost; every operation then fails with kUnavailable.
  bool broken() const;
  // Why it broke (kUnavailable), or nullopt.
  std::optional<Error> broken_reason() const;
  // Breaks the channel (closes the transport) with `reason`.
  void Shutdown(std::string_view reason = "closed by the host");

  // ---- Exec ----
  // Sends EXEC and returns at once; the Process delivers output and the exit. Errors:
  // kUnavailable, kInvalidArgument (a request too big for one frame).
  Result<std::unique_ptr<Process>> Start(const proto::ExecRequest& request);
  // Runs a command to the end: output goes to `callbacks`, stdin (kExecStdin is set when
  // `stdin` is given) is streamed from `stdin` with credit and then STDIN_EOF. Errors: as
  // Process::Wait, and kTimeout when the agent sent no EXIT by the request's timeout plus
  // ChannelOptions::exec_deadline_grace (the channel is then closed).
  Result<proto::Exit> Exec(proto::ExecRequest request, const ExecCallbacks& callbacks,
                           const ByteSource* stdin = nullptr);

  // ---- Background processes (an EXEC with kExecBackground outlives the session) ----
  // The agent's background processes, running and recently finished. Errors: kUnavailable.
  Result<std::vector<proto::ProcInfo>> ListProcesses();
  // PROC_ATTACH: the Process's Wait delivers the kept output (the last 1 MiB), then live output
  // and the EXIT (at once for a finished process). Write/CloseStdin reach the process when it was
  // started with kExecStdin (else the bytes are dropped); Signal and Resize work. Wait's errors:
  // kNotFound (no background process `pid`), kConflict (attached to another stream), and as
  // for an exec. The process stays attached to this session until Wait returns or the session
  // ends.
  Result<std::unique_ptr<Process>> AttachProcess(std::uint32_t pid);
  // Sends `signal` to background process `pid` (its process group), whoever is attached to it
  // (PROC_SIGNAL). With an agent of protocol version 1 it attaches instead: the process then
  // stays attached to this session until the session ends (use a session of its own), and
  // kConflict means another client is attached. Errors: kNotFound, kInvalidArgument,
  // kUnavailable, kConflict (version 1 only).
  Result<void> SignalProcess(std::uint32_t pid, int signal);

  // ---- Files (paths absolute inside the sandbox) ----
  // Errors of each: the agent's (kNotFound, kPermissionDenied, kInvalidArgument, kConflict,
  // kResourceExhausted), kUnavailable.
  Result<std::string> ReadFile(std::string_view path);
  Result<void> ReadFileTo(std::string_view path, const ByteSink& sink);
  Result<void> WriteFile(std::string_view path, std::string_view data, std::uint32_t mode = 0644,
                         bool make_parents = false);
  Result<void> WriteFileFrom(std::string_view path, const ByteSource& source,
                             std::uint32_t mode = 0644, bool make_parents = false);
  Result<proto::Entry> Stat(std::string_view path);
  Result<std::vector<proto::Entry>> List(std::string_view path);
  Result<void> Mkdir(std::string_view path, std::uint32_t mode = 0755, bool parents = false);
  Result<void> Remove(std::string_view path, bool recursive = false);
  // A ustar stream of `path` (entries named relative to its parent) into `sink`.
  Result<void> TarRead(std::string_view path, const ByteSink& sink);
  // Extracts the ustar stream from `source` under the directory `dir`.
  Result<void> TarWrite(std::string_view dir, const ByteSource& source);

  // ---- Ports ----
  // A connection to 127.0.0.1:port inside the sandbox. Errors: kUnavailable (nothing listens,
  // or the channel is lost).
  Result<std::unique_ptr<PortStream>> OpenPort(std::uint16_t port);

  // ---- Watch (protocol version 4) ----
  // Watches the directory `path` (absolute) inside the sandbox, with `recursive` every directory
  // below it too. Returns once the agent's watch is in place: later changes are reported.
  // Errors: kUnsupported (the agent speaks an older protocol: a sandbox started by an older
  // build), the agent's (kNotFound, kInvalidArgument: not a directory, kPermissionDenied,
  // kResourceExhausted: too many directories), kUnavailable.
  Result<std::unique_ptr<WatchStream>> Watch(std::string_view path, bool recursive);

  // ---- Sandbox control ----
  // SET_DEADLINES: the agent replaces the sandbox's lifetime and idle-ttl; the lifetime counts
  // from now and the idle clock restarts (nullopt = none). Errors: kInvalidArgument (more than
  // 100 years), kUnavailable.
  Result<void> SetDeadlines(std::optional<std::chrono::milliseconds> lifetime,
                            std::optional<std::chrono::milliseconds> idle_ttl);
  // IDLE_QUERY: how long the sandbox has been idle by the agent's activity clock (operations in
  // flight, holds > 0, mean not idle). Asking is not activity. The answer is the sandbox's claim
  // (a hostile agent can only get itself frozen early or kept awake). An agent that does not
  // answer within `timeout` (checked at each keepalive interval) has its channel closed.
  // Errors: kUnsupported (an agent older than protocol version 5), kTimeout, kUnavailable.
  Result<proto::IdleState> QueryIdle(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

  // ---- Session ----
  // PING/PONG round trip. Errors: kUnavailable, kTimeout.
  Result<std::chrono::microseconds> Ping(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

 private:
  friend class Process;
  friend class PortStream;
  friend class WatchStream;
  Channel(std::unique_ptr<Transport> transport, ChannelOptions options);

  void ReaderLoop();
  void Dispatch(proto::Frame&& frame);
  void Break(Error reason);
  // A new stream with the next odd id, registered before its first frame is sent.
  Result<std::shared_ptr<StreamState>> NewStream();
  void Forget(StreamState& s);
  // The next frame of stream `s` (kUnavailable when the channel broke first).
  Result<proto::Frame> Next(StreamState& s);
  // As Next, but nullopt when nothing came by `until` or the stream was cancelled.
  Result<std::optional<proto::Frame>> NextUntil(StreamState& s,
                                                std::chrono::steady_clock::time_point until);
  // Wakes a NextUntil on `s` (which then returns nullopt) and forgets the stream.
  void Cancel(StreamState& s);
  // Frames on the wire.
  Result<void> Send(proto::Type type, std::uint32_t stream, std::string_view payload);
  // DATA / STDIN bytes with credit: blocks while the stream has none.
  Result<void> SendBytes(StreamState& s, proto::Type type, std::string_view bytes);
  // Grants the peer credit for `n` consumed bytes (batched).
  void Consumed(StreamState& s, std::size_t n);
  // Sends a request and returns the single frame that answers it (an ERROR is an error).
  Result<proto::Frame> Call(proto::Type type, std::string_view payload);
  Result<void> SendAll(StreamState& s, const ByteSource& source);
  // Sends the request (`type`, `payload`), then `source` as DATA frames and END; the agent's
  // answer decides: OK, or the ERROR that may have cut the upload short. Errors carry "op
  // object" as context; `what` names the operation when the answer is another frame.
  Result<void> Upload(proto::Type type, std::string_view payload, const ByteSource& source,
                      std::string_view op, std::string_view object, std::string_view what);
  // Sends the request (`type`, one path) and hands `sink` the DATA frames that answer it, to
  // the END. Errors carry "op path" as context; `what` names the operation as in Upload.
  Result<void> Download(proto::Type type, std::string_view path, const ByteSink& sink,
                        std::string_view op, std::string_view what);
  Result<void> ReceiveAll(StreamState& s, const ByteSink& sink, std::string_view what);
  Error Unexpected(const proto::Frame& f, std::string_view what);
  // The error an ERROR frame `f` carries; a malformed one is Unexpected (`what` as there).
  Error AgentError(const proto::Frame& f, std::string_view what);
  void KeepAlive();

  std::unique_ptr<Transport> transport_;
  const ChannelOptions options_;
  AgentHello agent_;

  mutable std::mutex mu_;  // guards everything below and every StreamState
  std::condition_variable hello_cv_;
  std::optional<Result<AgentHello>> hello_;
  std::map<std::uint32_t, std::shared_ptr<StreamState>> streams_;
  std::uint32_t next_stream_ = 1;
  std::optional<Error> broken_;
  std::chrono::steady_clock::time_point last_rx_;
  std::chrono::steady_clock::time_point last_ping_sent_{};
  std::uint64_t next_ping_ = 1;
  std::map<std::uint64_t, std::chrono::steady_clock::time_point> pings_;  // token -> sent
  std::condition_variable pong_cv_;

  std::mutex write_mu_;  // one frame at a time on the transport
  std::thread reader_;
};

}  // namespace agvisor::channel
