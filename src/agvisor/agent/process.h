// ChannelProcess: one command started by an EXEC frame, driven by init's event loop; and
// ProcessRegistry, the agent's table of them.
//
// Used by session.cc (EXEC, STDIN, SIGNAL, RESIZE, PROC_LIST, PROC_ATTACH) and init.cc (SIGCHLD
// dispatch). A process reports to at most one ProcessSink (the stream of the EXEC or of a
// PROC_ATTACH) and pushes output only as far as the sink has room: when the sink's credit is used
// up, its pipes are no longer watched, so the command blocks on a full pipe and memory stays
// bounded. Semantics (docs/protocol.md "Exec"):
//   - EXIT when the MAIN process has exited and its pipes are drained up to that moment: what is
//     buffered is read without blocking, then our read ends are closed (a background child that
//     keeps stdout open does not hold the exec; its later output is lost).
//   - timeout: the whole tree (found through /proc; the command is a child subreaper, spawn.h) is
//     SIGTERMed, SIGKILLed 2 s later (stopped first, so nothing forks meanwhile) until nothing of
//     it is left, then EXIT {124, timed_out}. Timers, not sleeps: PID 1 never blocks.
//   - background (kExecBackground): the last 1 MiB of output is kept in a ring; the process
//     survives its session and can be re-attached (replay, then live output and EXIT).
//   - a non-background process whose session ends is killed like a timeout (no EXIT is sent).
//   - keep-awake (background only): the process is activity while its main process runs.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agvisor/agent/activity.h"
#include "agvisor/agent/event_loop.h"
#include "agvisor/agent/spawn.h"
#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/proto/messages.h"

namespace agvisor::agent {

// The receiving end of a process: an exec or attach stream of a session.
class ProcessSink {
 public:
  virtual ~ProcessSink() = default;
  // Output bytes the sink takes now (the stream's credit, limited by the session's queue).
  virtual std::size_t Room() const = 0;
  // `frame` holds proto::kOutputHeaderSize reserved bytes followed by the data (<= Room()).
  virtual void SendOutput(std::uint8_t fd, std::string&& frame) = 0;
  // `n` bytes of STDIN were consumed (written to the process, or dropped because it closed it).
  virtual void StdinConsumed(std::size_t n) = 0;
  // The last call: the process's outcome. The process forgets the sink before calling it.
  virtual void Exited(const proto::Exit& exit) = 0;
};

struct ProcessServices {
  EventLoop* loop = nullptr;
  TimerQueue* timers = nullptr;
};

class ChannelProcess {
 public:
  static constexpr std::size_t kRingBytes = 1024 * 1024;
  static constexpr std::chrono::milliseconds kKillGrace{2000};

  ChannelProcess(ProcessServices services, SpawnedProcess spawned, std::string argv0,
                 bool background, std::optional<std::chrono::milliseconds> timeout);
  ~ChannelProcess();
  ChannelProcess(const ChannelProcess&) = delete;
  ChannelProcess& operator=(const ChannelProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& argv0() const { return argv0_; }
  bool background() const { return background_; }
  bool running() const { return !exit_; }
  // The EXIT it ended with (set once finished).
  const std::optional<proto::Exit>& exit() const { return exit_; }
  // Finished (EXIT decided) and nothing left to deliver.
  bool done() const { return exit_.has_value() && sink_ == nullptr && !killing_; }
  bool has_sink() const { return sink_ != nullptr; }
  // It runs in a ready shell (ready_shells.h): its EXIT says so (proto::Exit::prestarted).
  bool prestarted() const { return prestarted_; }
  void set_prestarted() { prestarted_ = true; }
  // Started with keep-awake (a background process, proto::kExecKeepAwake): until its main
  // process exits it holds `tracker` active, so idle_ttl does not end the sandbox meanwhile;
  // the idle clock starts when it exits. Listed in PROC_LIST_RESULT.
  void KeepAwake(ActivityTracker* tracker);
  bool keep_awake() const { return keep_awake_; }

  // Attaches a sink. `replay`: first send the kept output (PROC_ATTACH). If the process has
  // already finished, the sink gets the replay and EXIT.
  void Attach(ProcessSink* sink, bool replay);
  // Forgets the sink (its session is gone). A non-background process is then killed.
  void Detach(ProcessSink* sink);
  // The sink has more room (WINDOW, or its session's queue drained).
  void Resume();

  void WriteStdin(std::string_view data);
  void CloseStdin();
  // To the process group. Errors: kill's.
  Result<void> Signal(int sig);
  Result<void> Resize(std::uint16_t rows, std::uint16_t cols);

  // SIGCHLD: `pid` (the main process) exited with `wait_status`.
  void OnMainExited(int wait_status);

 private:
  struct Chunk {
    std::uint8_t fd;
    std::string bytes;
  };
  struct OutFd {
    UniqueFd fd;
    std::uint8_t number = 1;
    bool watched = false;
  };

  void UpdateWatches();
  void WatchPty();
  void OnReadable(OutFd& out);
  // Reads one chunk of at most `max` bytes; false at EOF / error (the fd is then closed).
  bool ReadOnce(OutFd& out, std::size_t max, bool to_sink);
  void KeepInRing(std::uint8_t fd, std::string_view bytes);
  void FlushStdin();
  void FlushBacklog();
  void MaybeFinish();
  void CloseOutputs();

  void StartKill(bool timed_out);
  void GraceTick();
  void KillRound();
  void FinishKill();
  void CollectTree(bool stop_them);

  ProcessServices svc_;
  pid_t pid_;
  std::string argv0_;
  bool background_;
  bool prestarted_ = false;
  bool keep_awake_ = false;
  ActivityHold awake_;  // held from KeepAwake until the main process exits
  ProcessSink* sink_ = nullptr;

  OutFd stdout_, stderr_, pty_;
  UniqueFd stdin_;
  bool stdin_watched_ = false;
  std::string stdin_buf_;
  std::size_t own_tail_ = 0;  // trailing bytes of stdin_buf_ the agent added (a pty's EOF)
  char last_stdin_ = '\n';    // the last byte the host sent (a pty's EOF after a partial line)
  bool stdin_eof_ = false;

  std::deque<Chunk> backlog_;  // to send before live output: replay, or the drain at exit
  std::deque<Chunk> ring_;     // background: the last kRingBytes of output
  std::size_t ring_bytes_ = 0;

  std::optional<int> main_status_;
  std::optional<proto::Exit> exit_;  // decided outcome (sent once the backlog is empty)
  bool exit_sent_ = false;

  TimerQueue::Id timeout_timer_ = 0;
  bool killing_ = false;
  bool timed_out_ = false;
  bool kill_phase_ = false;  // SIGKILL rounds (after the grace)
  TimerQueue::Id kill_timer_ = 0;
  std::set<pid_t> victims_;
};

// Every ChannelProcess of the agent, by pid. Finished non-background processes are dropped;
// finished background ones are kept (the newest kKeepFinished) for PROC_LIST / PROC_ATTACH.
class ProcessRegistry {
 public:
  static constexpr std::size_t kKeepFinished = 64;

  explicit ProcessRegistry(ProcessServices services) : svc_(services) {}

  // Spawns and registers. Errors: SpawnCommand's.
  Result<std::shared_ptr<ChannelProcess>> Start(const SpawnRequest& request, bool background,
                                                std::optional<std::chrono::milliseconds> timeout);
  // Registers a command already started (a taken ready shell, ready_shells.h) as Start would.
  std::shared_ptr<ChannelProcess> Adopt(SpawnedProcess spawned, std::string argv0, bool background,
                                        std::optional<std::chrono::milliseconds> timeout);
  // Routes a reaped child; false if it is not one of ours (an orphan).
  bool OnChildExited(pid_t pid, int wait_status);
  std::shared_ptr<ChannelProcess> FindBackground(pid_t pid) const;
  std::vector<proto::ProcInfo> ListBackground() const;
  // Drops finished processes nobody needs any more. Call between loop iterations.
  void Collect();

 private:
  ProcessServices svc_;
  std::map<pid_t, std::shared_ptr<ChannelProcess>> procs_;
  std::deque<pid_t> finished_background_;
};

}  // namespace agvisor::agent
