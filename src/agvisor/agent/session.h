// Session: one client of the agent channel (docs/protocol.md), on PID 1's stdio
// (`init --channel-stdio`) or on one connection of the unix socket. Every operation is a stream
// of frames: exec (and background attach), files, port forwards.
//
// Used by init.cc, which creates one Session per stdio channel / accepted connection and runs
// them all in its one epoll loop. Nothing here blocks: every fd is non-blocking; outbound frames
// wait in a per-session queue; a process's pipes, a port's socket and a file read are read only
// while their stream has credit (WINDOW) and the queue is below kQueueHighWater, so memory stays
// bounded whatever the host does. A session ends on EOF or an I/O error on its input, or after
// sending ERROR kProtocol / kVersion; only that session ends, never init. Its non-background
// execs are then killed (whole tree), background ones keep running (ProcessRegistry).
//
// Activity (activity.h): each stream in progress holds the sandbox active; an idle connected
// session does not. A socket connection that has not sent HELLO yet is a legacy holder (the
// `agvisor-agent exec` subcommand connects and stays silent) and counts until it does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agvisor/agent/activity.h"
#include "agvisor/agent/event_loop.h"
#include "agvisor/agent/process.h"
#include "agvisor/agent/ready_shells.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/proto/messages.h"

namespace agvisor::agent {

struct AgentServices {
  EventLoop* loop = nullptr;
  TimerQueue* timers = nullptr;
  ActivityTracker* tracker = nullptr;
  ProcessRegistry* processes = nullptr;
  std::uint64_t boot_unix_ms = 0;
  ReadyShells* ready_shells = nullptr;  // null: every exec starts cold
};

class Session;

// One operation stream of a session (exec, attach, port, file). Created by the opening frame.
class Stream {
 public:
  Stream(Session* session, std::uint32_t id);
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  std::uint32_t id() const { return id_; }
  // A frame for this stream after the opening one (WINDOW is handled here first).
  void Deliver(const proto::Frame& frame);
  // Room to send more payload: the stream's credit, limited by the session's queue.
  std::size_t SendRoom() const;
  // There may be room again (WINDOW arrived or the session's queue drained). Callers use
  // ResumeSafely: sending from Resume can drain the session's queue, which resumes every stream,
  // this one included, from inside its own Resume.
  virtual void Resume() {}
  // Resume, never re-entered for the same stream: a nested call is turned into one more pass
  // after the running one.
  void ResumeSafely();

 protected:
  virtual void OnFrame(const proto::Frame& frame) = 0;
  // Queues a frame on this stream; DATA/OUTPUT payload counts against the credit.
  void Send(proto::Type type, std::string_view payload);
  void SendCounted(std::string&& frame, std::size_t counted);
  // Grants the host credit for `n` more consumed bytes (batched into WINDOW frames).
  void Consumed(std::size_t n);
  void SendError(proto::WireError code, const std::string& message);
  // The stream is over: the session drops it after the current event.
  void End();

  Session* session_;
  std::uint32_t id_;
  std::uint64_t credit_;
  std::size_t ungranted_ = 0;

 private:
  bool resuming_ = false;
  bool resume_again_ = false;
};

class Session {
 public:
  // Queued outbound bytes above which producers stop (and input stops at 4x).
  static constexpr std::size_t kQueueHighWater = 512 * 1024;

  // Stdio: reads fd 0 and writes fd 1 (not closed at the end: they are PID 1's stdio).
  static std::unique_ptr<Session> ForStdio(AgentServices services);
  // A socket connection (owned); legacy_hold: counts as activity until HELLO.
  static std::unique_ptr<Session> ForSocket(AgentServices services, UniqueFd fd);
  ~Session();

  // Errors: the event loop's (the fds cannot be watched: e.g. stdin is a regular file).
  Result<void> Start();
  bool closed() const { return closed_; }
  const std::string& name() const { return name_; }
  // Drops streams that ended. Call between loop iterations.
  void Collect();

  // --- for streams
  void SendFrame(std::string&& frame, bool counted_data = false);
  std::size_t QueueRoom() const {
    return queued_ >= kQueueHighWater ? 0 : kQueueHighWater - queued_;
  }
  std::uint32_t initial_window() const { return initial_window_; }
  const AgentServices& services() const { return svc_; }
  std::uint16_t version() const { return version_; }
  void EndStream(std::uint32_t id);

 private:
  Session(AgentServices services, int in_fd, int out_fd, UniqueFd owned, std::string name);

  void UpdateEvents();
  void OnInput();
  void OnOutput();
  void Flush();
  void OnFrame(proto::Frame&& frame);
  void OnSessionFrame(const proto::Frame& frame);
  void Open(const proto::Frame& frame);
  void ProtocolError(proto::WireError code, const std::string& message);
  void Close(const std::string& why);
  void ResumeStreams();

  AgentServices svc_;
  int in_fd_, out_fd_;
  UniqueFd owned_;
  std::string name_;
  ActivityHold legacy_hold_;
  bool welcomed_ = false;
  std::uint16_t version_ = 0;  // the session's protocol version, from HELLO
  bool closing_ = false;       // an ERROR that ends the session is queued: flush, then close
  bool closed_ = false;
  bool in_watched_ = false, out_watched_ = false;
  std::uint32_t in_events_ = 0, out_events_ = 0;
  std::uint32_t initial_window_ = proto::kDefaultWindow;
  proto::FrameDecoder decoder_;
  std::deque<std::string> queue_;
  std::size_t front_offset_ = 0;
  std::size_t queued_ = 0;
  bool was_full_ = false;
  std::map<std::uint32_t, std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Stream>> ended_;
};

}  // namespace agvisor::agent
