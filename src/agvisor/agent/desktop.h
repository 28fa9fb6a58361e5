// The desktop of a `--gui` sandbox, started by init (`agvisor-agent init --desktop`).
//
// Used by init.cc. Starts two processes (three with xrdp) and watches them, never blocking the
// event loop:
//   - Xvnc (TigerVNC) as root on display :0, VNC on port 5900 of loopback (127.0.0.1, ::1) only,
//     VNC authentication with a new random password (desktop/password.h) written first as
//     <dir>/password (plain, which the host reads back) and <dir>/vnc.passwd (Xvnc's), 0600 root
//     in a 0700 directory, so the desktop user cannot read them;
//   - the session, a shell script run as the desktop user: a D-Bus session bus, xfconfd, xfwm4,
//     then xfce4-panel and xfdesktop; once both are mapped it prints the ready line, then starts
//     a terminal (xterm: VTE-based terminals cannot open a pty peer under gVisor). Each step has a
//     deadline, so a broken image fails instead of hanging;
//   - when the image has xrdp: xrdp as root on 127.0.0.1:3389 inside, with a TLS key made for
//     this container in /run/xrdp; its VNC module logs in to Xvnc with the password the RDP
//     client gives (configuration: /run/xrdp/xrdp.ini, written by it), so RDP needs no second X
//     server. It is not part of "ready", and its death leaves VNC up (it is logged).
// Their output goes to <dir>/desktop.log (root only, capped). <dir>/state says where the desktop
// is: "starting", "ready", or "failed: <why>" (the host polls it through the channel's file
// reads; see sandbox/desktop.h). No restarts: a desktop that dies says so and stays down.
//
// gVisor notes (docs/desktop.md has the figures): xfce4-session cannot be used (glib's spawn
// needs close_range(2), which gVisor lacks), so the components are started directly; Xvnc runs
// without GLX (-extension GLX): with it every X client loads Mesa's LLVM software renderer at
// start, which costs seconds of CPU under gVisor.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/agent/spawn.h"
#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/desktop/password.h"

namespace agvisor::agent {

class EventLoop;

struct DesktopOptions {
  std::string user = "user";  // the desktop user (its home and ids come from /etc/passwd)
  std::string geometry = "1280x800";
  std::string dir{desktop::kDesktopDir};  // the password files, the state and the log
};

class Desktop {
 public:
  // Starts Xvnc and the session and returns at once. Errors: kNotFound (no such user), those of
  // spawning. A missing Xvnc or xfce component is reported later in the state file.
  static Result<std::unique_ptr<Desktop>> Start(const DesktopOptions& options, EventLoop* loop);
  ~Desktop();
  Desktop(const Desktop&) = delete;
  Desktop& operator=(const Desktop&) = delete;

  // Called by init for every reaped child; returns whether it was one of the desktop's.
  bool OnChildExited(pid_t pid, int wait_status);

 private:
  struct Output;
  Desktop(const DesktopOptions& options, EventLoop* loop);
  // Starts one of the desktop's processes, its output logged line by line behind "<name>: ";
  // its pid. Errors: SpawnCommand's, "desktop: start <name>: ...".
  Result<pid_t> Launch(const SpawnRequest& request, std::string_view name);
  Result<void> Watch(UniqueFd fd, std::string prefix);
  void OnReadable(Output& out);
  void Log(std::string_view line);
  void SetState(std::string_view state);

  DesktopOptions options_;
  EventLoop* loop_;
  pid_t xvnc_pid_ = -1;
  pid_t session_pid_ = -1;
  pid_t xrdp_pid_ = -1;
  bool ready_ = false;
  bool failed_ = false;
  UniqueFd log_;
  std::size_t logged_ = 0;
  std::vector<std::unique_ptr<Output>> outputs_;
  std::string last_lines_;  // the last few lines of output, for the failure message
};

}  // namespace agvisor::agent
