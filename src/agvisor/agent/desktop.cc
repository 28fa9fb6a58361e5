#include "agvisor/agent/desktop.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "agvisor/agent/event_loop.h"
#include "agvisor/agent/log.h"
#include "agvisor/agent/spawn.h"
#include "agvisor/agent/user.h"
#include "agvisor/desktop/des.h"
#include "agvisor/desktop/password.h"

namespace agvisor::agent {
namespace {

// The log stops growing here (a desktop that spams warnings must not fill the sandbox's memory:
// /run is part of its root file system).
constexpr std::size_t kLogCap = 1 << 20;

// The session, run as the desktop user with DISPLAY=:0. Prints "agvisor-desktop: ready" once
// the panel and the desktop are mapped, "agvisor-desktop: failed: <why>" when a step misses its
// deadline. `wait` keeps it alive (its exit is reported) while the components run.
constexpr std::string_view kSessionScript = R"SH(
fail() { echo "agvisor-desktop: failed: $*"; exit 1; }
# until DEADLINE_TICKS COMMAND...: retry every 50 ms
until_ok() {
  n=$1; shift
  while ! "$@" >/dev/null 2>&1; do
    n=$((n - 1)); [ "$n" -gt 0 ] || return 1
    sleep 0.05
  done
}
for c in xdotool dbus-daemon xfwm4 xfce4-panel xfdesktop; do
  command -v "$c" >/dev/null || fail "$c is not installed in this image (build the desktop image: agvisor image build desktop)"
done
cd "$HOME" 2>/dev/null || cd /
export DBUS_SESSION_BUS_ADDRESS="unix:path=/tmp/.agvisor-session-bus-$(id -u)"
rm -f "/tmp/.agvisor-session-bus-$(id -u)"
dbus-daemon --session --fork --address="$DBUS_SESSION_BUS_ADDRESS" || fail "dbus-daemon did not start"
# xfconfd answers every component's settings queries: start it now rather than on first use.
for f in /usr/lib/*/xfce4/xfconf/xfconfd; do [ -x "$f" ] && "$f" & break; done
until_ok 600 test -S /tmp/.X11-unix/X0 || fail "no X server on :0 after 30 s (see Xvnc's lines above)"
xfwm4 &
until_ok 400 xdotool search --classname xfwm4 || fail "xfwm4 did not start within 20 s"
xfce4-panel &
xfdesktop &
until_ok 600 xdotool search --onlyvisible --classname xfce4-panel || fail "xfce4-panel did not appear within 30 s"
until_ok 600 xdotool search --onlyvisible --classname xfdesktop || fail "xfdesktop did not appear within 30 s"
echo "agvisor-desktop: ready"
# A terminal. ptyHandshake off: with it, xterm's child checks its new controlling terminal by
# opening /dev/tty, which gVisor (runsc 20240729) fails with EIO, and xterm retries forever. The
# desktop image sets the same in xterm's app-defaults (for the panel's launcher); this covers
# other images.
command -v xterm >/dev/null && xterm -xrm '*ptyHandshake: false' &
wait
)SH";

// RDP, run as root when the image has xrdp (the desktop image does): a TLS key and self-signed
// certificate for this container (an image-wide one would be shared by every container), then
// xrdp in the foreground (it forks a process per connection) with this configuration, all in
// /run/xrdp (root only). xrdp listens on 127.0.0.1:3389; its one session is its VNC module
// logging in to Xvnc with the password the RDP client sent (password=ask), at once (autorun):
// no password here, no second X server, no session manager. Xvnc must answer on ::1 too (see
// Start). Channels are allowed but each one is off: FreeRDP drops a server that joins none.
constexpr std::string_view kXrdpScript = R"SH(set -e
umask 077
mkdir -p /run/xrdp
out=$(openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=agvisor-desktop \
  -keyout /run/xrdp/key.pem -out /run/xrdp/cert.pem 2>&1) || { echo "$out"; exit 1; }
cat > /run/xrdp/xrdp.ini <<'EOF'
[Globals]
ini_version=1
fork=true
port=tcp://127.0.0.1:3389
use_vsock=false
tcp_nodelay=true
security_layer=tls
crypt_level=high
certificate=/run/xrdp/cert.pem
key_file=/run/xrdp/key.pem
ssl_protocols=TLSv1.2, TLSv1.3
autorun=desktop
allow_channels=true
allow_multimon=false
max_bpp=24
new_cursors=true
use_fastpath=both
grey=dedede
ls_title=agvisor desktop
ls_top_window_bg_color=294466
ls_bg_color=dedede
ls_logo_filename=

[Logging]
LogFile=/dev/null
LogLevel=INFO
EnableSyslog=false
EnableConsole=true
ConsoleLevel=INFO

[Channels]
rdpdr=false
rdpsnd=false
drdynvc=false
cliprdr=false
rail=false
xrdpvr=false
tcutils=false

[desktop]
name=desktop
lib=libvnc.so
username=na
password=ask
ip=127.0.0.1
port=5900
EOF
# Line-buffered: its log lines reach desktop.log as they happen, not when a pipe buffer fills.
exec stdbuf -oL xrdp --nodaemon --config /run/xrdp/xrdp.ini
)SH";

constexpr std::string_view kXrdpPath = "/usr/sbin/xrdp";

// gVisor (runsc 20240729) fails close_range(2) with EINVAL when its last fd is 2^31 or more;
// callers pass ~0U for "every fd above". glib falls back to walking /proc/self/fd only on ENOSYS,
// so every g_spawn (the panel's launchers and menu, xfdesktop's icons, xfce4-session) failed with
// "Failed to close file descriptor for child process (Invalid argument)". This seccomp filter
// turns exactly those calls into ENOSYS; every other system call, and close_range with a
// smaller last fd, is untouched. Installed in the agent (PID 1) before the desktop starts, so
// every process of a gui sandbox inherits it.
Result<void> InstallCloseRangeFilter() {
#if defined(__x86_64__)
  constexpr std::uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr std::uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
#error "the close_range filter needs this architecture's AUDIT_ARCH value"
#endif
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 0, 4),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_close_range, 0, 2),
      // args[1] is an unsigned int: its low 32 bits (little endian: the first word).
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[1])),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x80000000u, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
  };
  sock_fprog prog{.len = static_cast<unsigned short>(std::size(filter)), .filter = filter};
  // Sandboxes run with no-new-privileges already; a filter needs it (or CAP_SYS_ADMIN).
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return Error::FromErrno("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  }
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
    return Error::FromErrno("seccomp(close_range filter)", errno);
  }
  return Ok();
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended";
}

// Writes `text` to `path` (replacing it), mode 0600. Best effort: logged when it fails.
void WriteSmallFile(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    LogLine("desktop: open " + tmp + ": " + std::strerror(errno));
    return;
  }
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    LogLine("desktop: write " + path + ": " + std::strerror(errno));
  }
}

// Writes `text` to `path` through a new file beside it, mode 0600, and renames it over `path`
// (which an image or a snapshot may hold: it is replaced, never reused).
Result<void> WriteSecretFile(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Error::FromErrno("desktop: create " + tmp, errno);
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return Error::FromErrno("desktop: write " + tmp, errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error::FromErrno("desktop: rename " + tmp, errno);
  }
  return Ok();
}

}  // namespace

struct Desktop::Output {
  UniqueFd fd;
  std::string prefix;
  std::string partial;
};

Desktop::Desktop(const DesktopOptions& options, EventLoop* loop) : options_(options), loop_(loop) {}

Desktop::~Desktop() {
  for (auto& o : outputs_) {
    if (o->fd.valid()) loop_->Remove(o->fd.get());
  }
}

Result<std::unique_ptr<Desktop>> Desktop::Start(const DesktopOptions& options, EventLoop* loop) {
  auto d = std::unique_ptr<Desktop>(new Desktop(options, loop));
  const UserIds user = AGVISOR_TRY(LookupUser(options.user));
  // The directory is root's alone (an image may have made it otherwise).
  const std::string parent = options.dir.substr(0, options.dir.rfind('/'));
  if (!parent.empty() && ::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST) {
    return Error::FromErrno("mkdir " + parent, errno);
  }
  if (::mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Error::FromErrno("mkdir " + options.dir, errno);
  }
  if (::chown(options.dir.c_str(), 0, 0) != 0 || ::chmod(options.dir.c_str(), 0700) != 0) {
    return Error::FromErrno("chown/chmod " + options.dir, errno);
  }
  // A new password for every start of the desktop, before Xvnc reads it.
  const std::string password = desktop::NewPassword();
  AGVISOR_RETURN_IF_ERROR(WriteSecretFile(
      options.dir + "/" + std::string(desktop::kVncPasswordFile), vnc::VncPasswordFile(password)));
  AGVISOR_RETURN_IF_ERROR(
      WriteSecretFile(options.dir + "/" + std::string(desktop::kPasswordFile), password));
  const std::string log_path = options.dir + "/desktop.log";
  d->log_ = UniqueFd(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!d->log_.valid()) return Error::FromErrno("open " + log_path, errno);
  d->SetState("starting");

  // The home of a named desktop is a Docker volume: new volumes may come up owned by root.
  struct stat st {};
  if (!user.home.empty() && ::stat(user.home.c_str(), &st) == 0 && st.st_uid == 0 &&
      user.uid != 0 && ::chown(user.home.c_str(), user.uid, user.gid) != 0) {
    d->Log("desktop: chown " + user.home + ": " + std::strerror(errno));
  }
  if (auto f = InstallCloseRangeFilter(); !f.ok()) {
    d->Log("desktop: " + f.error().message() + " (the panel's launchers will not start programs)");
  }
  // X's socket directory must exist sticky and world-writable before Xvnc (run as root) makes
  // its socket there for the user's clients.
  ::mkdir("/tmp/.X11-unix", 01777);
  ::chmod("/tmp/.X11-unix", 01777);

  SpawnRequest x;
  x.argv = {"Xvnc", ":0", "-geometry", options.geometry, "-depth", "24", "-rfbport", "5900",
            // Loopback only, both 127.0.0.1 and ::1: xrdp's VNC module, told 127.0.0.1, tries
            // ::1 first and, under gVisor, never falls back (the refused connect does not fail
            // at once as on Linux).
            "-localhost", "-SecurityTypes", "VncAuth", "-PasswordFile", options.dir + "/vnc.passwd",
            "-AlwaysShared", "-nolisten", "tcp", "-desktop", "agvisor", "-extension", "GLX"};
  x.env = BuildEnvironment({}, std::nullopt, false);
  x.cwd = "/";
  d->xvnc_pid_ = AGVISOR_TRY(d->Launch(x, "Xvnc"));

  SpawnRequest s;
  s.argv = {"sh", "-c", std::string(kSessionScript)};
  s.env = BuildEnvironment({"DISPLAY=:0", "NO_AT_BRIDGE=1", "LANG=C.UTF-8", "SHELL=/bin/bash"},
                           user, false);
  s.cwd = user.home.empty() ? "/" : user.home;
  s.user = user;
  d->session_pid_ = AGVISOR_TRY(d->Launch(s, "session"));
  if (::access(std::string(kXrdpPath).c_str(), X_OK) == 0) {
    SpawnRequest r;
    r.argv = {"sh", "-c", std::string(kXrdpScript)};
    r.env = BuildEnvironment({}, std::nullopt, false);
    r.cwd = "/";
    d->xrdp_pid_ = AGVISOR_TRY(d->Launch(r, "xrdp"));
  }
  LogLine("desktop: Xvnc (pid " + std::to_string(d->xvnc_pid_) + ") and the session of " +
          options.user + " (pid " + std::to_string(d->session_pid_) + ") started on :0, " +
          options.geometry);
  return d;
}

Result<pid_t> Desktop::Launch(const SpawnRequest& request, std::string_view name) {
  auto spawned = SpawnCommand(request);
  if (!spawned.ok()) return spawned.error().WithContext("desktop: start " + std::string(name));
  const std::string prefix = std::string(name) + ": ";
  AGVISOR_RETURN_IF_ERROR(Watch(std::move(spawned->stdout_pipe), prefix));
  AGVISOR_RETURN_IF_ERROR(Watch(std::move(spawned->stderr_pipe), prefix));
  return spawned->pid;
}

Result<void> Desktop::Watch(UniqueFd fd, std::string prefix) {
  auto out = std::make_unique<Output>();
  out->fd = std::move(fd);
  out->prefix = std::move(prefix);
  Output* raw = out.get();
  AGVISOR_RETURN_IF_ERROR(
      loop_->Add(raw->fd.get(), EPOLLIN, [this, raw](std::uint32_t) { OnReadable(*raw); }));
  outputs_.push_back(std::move(out));
  return Ok();
}

void Desktop::OnReadable(Output& out) {
  char buf[4096];
  ssize_t n = ::read(out.fd.get(), buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    // End of output (the process and every child holding the pipe are gone).
    if (!out.partial.empty()) Log(out.prefix + out.partial);
    out.partial.clear();
    loop_->Remove(out.fd.get());
    out.fd.reset();
    return;
  }
  out.partial.append(buf, static_cast<std::size_t>(n));
  std::size_t nl;
  while ((nl = out.partial.find('\n')) != std::string::npos) {
    std::string line = out.partial.substr(0, nl);
    out.partial.erase(0, nl + 1);
    if (line == "agvisor-desktop: ready" && !failed_) {
      ready_ = true;
      SetState("ready");
      LogLine("desktop: ready");
    } else if (line.starts_with("agvisor-desktop: failed: ") && !failed_) {
      failed_ = true;
      SetState(line.substr(std::strlen("agvisor-desktop: ")) + "\n" + last_lines_);
      LogLine("desktop: " + line.substr(std::strlen("agvisor-desktop: ")));
    }
    Log(out.prefix + line);
  }
}

bool Desktop::OnChildExited(pid_t pid, int wait_status) {
  if (pid == xrdp_pid_) {
    // RDP is gone; VNC (and so the desktop) is not: the desktop stays "ready".
    xrdp_pid_ = -1;
    const std::string why = "xrdp " + DescribeExit(wait_status) + " (RDP is down, VNC is not)";
    Log("desktop: " + why);
    LogLine("desktop: " + why);
    return true;
  }
  if (pid != xvnc_pid_ && pid != session_pid_) return false;
  const bool xvnc = pid == xvnc_pid_;
  const std::string why =
      std::string(xvnc ? "Xvnc" : "the desktop session") + " " + DescribeExit(wait_status);
  Log("desktop: " + why);
  LogLine("desktop: " + why);
  if (xvnc)
    xvnc_pid_ = -1;
  else
    session_pid_ = -1;
  if (!failed_) {
    failed_ = true;
    SetState("failed: " + why + "\n" + last_lines_);
  }
  return true;
}

void Desktop::Log(std::string_view line) {
  last_lines_.append(line);
  last_lines_.push_back('\n');
  if (last_lines_.size() > 2048) last_lines_.erase(0, last_lines_.size() - 2048);
  if (!log_.valid() || logged_ > kLogCap) return;
  std::string text(line);
  text.push_back('\n');
  if (logged_ + text.size() > kLogCap) text = "(log capped at 1 MiB)\n";
  if (::write(log_.get(), text.data(), text.size()) > 0) logged_ += text.size();
}

void Desktop::SetState(std::string_view state) {
  std::string text(state);
  if (text.empty() || text.back() != '\n') text.push_back('\n');
  WriteSmallFile(options_.dir + "/state", text);
}

}  // namespace agvisor::agent
