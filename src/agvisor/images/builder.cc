#include "agvisor/images/builder.h"

#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>

#include "agvisor/base/subprocess.h"
#include "agvisor/docker/client.h"

// The desktop recipe's configuration files (desktop/*.xml), embedded by desktop_files.S.
extern "C" const char agvisor_xfce4_panel_xml_begin[], agvisor_xfce4_panel_xml_end[];
extern "C" const char agvisor_xfce4_desktop_xml_begin[], agvisor_xfce4_desktop_xml_end[];

namespace agvisor::images {
namespace {

// Reads a child's output line by line, passing each to `on_line`; keeps the last few lines.
Result<void> PumpLines(UniqueFd& fd, const std::function<void(std::string_view)>& on_line,
                       std::deque<std::string>& last) {
  std::string buf;
  char chunk[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::FromErrno("read debootstrap output", errno);
    }
    if (n == 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (on_line) on_line(line);
      last.push_back(std::move(line));
      if (last.size() > 8) last.pop_front();
    }
  }
  if (!buf.empty() && on_line) on_line(buf);
  return Ok();
}

void Say(const BuildOptions& o, std::string_view line) {
  if (o.progress) o.progress(line);
}

// The desktop image's configuration, run in the new root. The desktop user ("user", uid 1000)
// has /workspace as home: for named desktops that is the volume kept across stop and start.
// The agent (agent/desktop.cc) starts Xvnc, xfwm4, xfce4-panel, xfdesktop and a terminal.
//  - The terminal is xterm with ptyHandshake off (see below why, and why not xfce4-terminal).
//  - xfce4-panel asks on first start (a dialog) unless its xfconf channel exists: ship one
//    (desktop/xfce4-panel.xml: menu, terminal and browser launchers, window list, clock), only
//    plugins that are installed.
//  - A plain backdrop (desktop/xfce4-desktop.xml): cheaper to draw, to send over VNC and to read
//    in screenshots.
//  - Firefox: no first-run pages, update checks or default-browser question in a throwaway box.
//  - Documentation and non-English messages are dropped (the image is for machines to drive).
// Where xfconf reads the system's channels (the setup script's $x).
constexpr std::string_view kXfconfDir = "/etc/xdg/xfce4/xfconf/xfce-perchannel-xml";

constexpr std::string_view kE2bBaseSetup = R"SH(set -e
groupadd --gid 1000 user
useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash user
echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/user
chmod 0440 /etc/sudoers.d/user
# The SDK runs every command as `bash -l -c CMD`, which reads /etc/profile: its "$(id -u)" forks
# and execs id for each command (milliseconds under gVisor). bash knows its EUID; sh still asks id.
sed -i 's/"$(id -u)"/"${EUID:-$(id -u)}"/' /etc/profile
grep -q 'EUID:-' /etc/profile
)SH";

constexpr std::string_view kDesktopSetup = R"SH(set -e
groupadd --gid 1000 user
useradd --uid 1000 --gid 1000 --home-dir /workspace --shell /bin/bash user
mkdir -p /workspace
chown 1000:1000 /workspace
x=/etc/xdg/xfce4/xfconf/xfce-perchannel-xml
mkdir -p $x
# xfwm4 writes every one of its defaults into xfconf on a user's first start, one D-Bus call
# each: ~6 s of a desktop's start under gVisor. Its defaults as a system channel make that a
# no-op. Compositing off: under VNC it only costs CPU.
{
  echo '<?xml version="1.0" encoding="UTF-8"?>'
  echo '<channel name="xfwm4" version="1.0">'
  echo '  <property name="general" type="empty">'
  sed -e 's/^use_compositing=.*/use_compositing=false/' /usr/share/xfwm4/defaults |
  while IFS='=' read -r k v; do
    [ -n "$k" ] || continue
    case "$k=$v" in
      title_shadow_*) t=string ;;
      *=true|*=false) t=bool ;;
      *=|*=*[!0-9-]*) t=string ;;
      *) t=int ;;
    esac
    printf '    <property name="%s" type="%s" value="%s"/>\n' "$k" "$t" "$v"
  done
  echo '  </property>'
  echo '</channel>'
} > $x/xfwm4.xml
# xterm, not xfce4-terminal: VTE puts its pty in packet mode (ioctl TIOCPKT), which gVisor
# (runsc 20240729) does not implement (ENOTTY), so every VTE terminal shows "Failed to open PTY".
# xterm's pty handshake makes its child open /dev/tty to check the new controlling terminal;
# gVisor fails that open with EIO and xterm loops trying new ptys: ptyHandshake off skips it.
# Anti-aliased DejaVu for xterm.
printf '*faceName: DejaVu Sans Mono\n*faceSize: 11\n*saveLines: 5000\n*ptyHandshake: false\n' \
  >> /etc/X11/app-defaults/XTerm
# xrdp: the agent runs it with a configuration of its own (agent/desktop.cc); Debian's service
# links are not needed.
rm -f /etc/rc?.d/*xrdp* /etc/init.d/xrdp /etc/init.d/xrdp-sesman
mkdir -p /usr/lib/firefox-esr/distribution
cat > /usr/lib/firefox-esr/distribution/policies.json <<'EOF'
{"policies": {"DisableAppUpdate": true, "DisableTelemetry": true,
  "DontCheckDefaultBrowser": true, "OverrideFirstRunPage": "", "OverridePostUpdatePage": ""}}
EOF
rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/*
find /usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'en*' ! -name locale.alias \
  -exec rm -rf {} +
)SH";

}  // namespace

Result<ImageRecipe> RecipeFor(std::string_view kind) {
  if (kind == "base") {
    return ImageRecipe{.kind = "base",
                       .suite = "bookworm",
                       .packages = {"python3", "git", "coreutils", "procps", "ca-certificates"}};
  }
  if (kind == "desktop") {
    return ImageRecipe{
        .kind = "desktop",
        .suite = "bookworm",
        .packages =
            {// what base has: exec works the same in a desktop
             "python3", "git", "coreutils", "procps", "ca-certificates",
             // X server with VNC (Xvnc), window manager, panel, desktop,
             // terminal, browser, input automation
             "tigervnc-standalone-server", "xfwm4", "xfce4-panel", "xfdesktop4", "xterm",
             "firefox-esr", "xdotool",
             // RDP for native clients: xrdp in front of Xvnc (its VNC module)
             "xrdp",
             // the session bus and settings daemon xfce talks to; fonts
             // and SVG icons (Recommends debootstrap leaves out)
             "dbus-x11", "xfconf", "fonts-dejavu-core", "librsvg2-common"},
        .files = {{std::string(kXfconfDir) + "/xfce4-panel.xml",
                   std::string(agvisor_xfce4_panel_xml_begin, agvisor_xfce4_panel_xml_end)},
                  {std::string(kXfconfDir) + "/xfce4-desktop.xml",
                   std::string(agvisor_xfce4_desktop_xml_begin, agvisor_xfce4_desktop_xml_end)}},
        .setup = std::string(kDesktopSetup)};
  }
  if (kind == "e2b-base") {
    // E2B's `base` template as its SDK's users see it (docs/e2b.md): commands run as `user`,
    // whose home and working directory is /home/user, with passwordless sudo.
    return ImageRecipe{
        .kind = "e2b-base",
        .suite = "bookworm",
        .packages = {"python3", "git", "coreutils", "procps", "ca-certificates", "sudo", "curl"},
        .setup = std::string(kE2bBaseSetup)};
  }
  return Error::InvalidArgument("unknown image kind '" + std::string(kind) +
                                "': the kinds are: base, desktop, e2b-base");
}

std::string ImageNameFor(std::string_view kind) {
  return "agvisor/" + std::string(kind) + ":latest";
}

Result<std::string> BuildImage(docker::Client& client, const ImageRecipe& recipe,
                               const BuildOptions& o) {
  if (::geteuid() != 0) {
    return Error::PermissionDenied(
        "image build needs root (debootstrap creates device nodes and "
        "files owned by other users): run it with sudo");
  }
  const std::string name = o.name.empty() ? ImageNameFor(recipe.kind) : o.name;
  const auto colon = name.rfind(':');
  const bool has_tag = colon != std::string::npos && name.find('/', colon) == std::string::npos;
  const std::string repo = has_tag ? name.substr(0, colon) : name;
  const std::string tag = has_tag ? name.substr(colon + 1) : "latest";

  std::string tmpl = o.workdir + "/agvisor-image-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return Error::FromErrno("mkdtemp " + tmpl, errno);
  const std::string dir = tmpl;
  const std::string rootfs = dir + "/rootfs";
  struct Cleanup {
    std::string dir;
    ~Cleanup() { (void)RunCommand({"rm", "-rf", "--one-file-system", dir}); }
  } cleanup{dir};

  // 1. debootstrap
  std::string include;
  for (const auto& p : recipe.packages) include += (include.empty() ? "" : ",") + p;
  std::vector<std::string> argv = {"debootstrap", "--variant=minbase"};
  if (!include.empty()) argv.push_back("--include=" + include);
  argv.insert(argv.end(), {recipe.suite, rootfs});
  if (!o.mirror.empty()) argv.push_back(o.mirror);
  Say(o, "[1/3] debootstrap " + recipe.suite + " (minbase + " + include + ")");
  auto start = std::chrono::steady_clock::now();
  SubprocessOptions so;
  so.argv = argv;
  so.pipe_stdout = true;
  so.stderr_to_stdout = true;
  so.env = {"LC_ALL=C"};
  auto child = Subprocess::Spawn(so);
  if (!child.ok()) {
    if (child.error().code() == ErrorCode::kNotFound) {
      return Error::NotFound(
          "debootstrap is not installed: apt-get install debootstrap "
          "(scripts/setup-host installs it)");
    }
    return child.error();
  }
  std::deque<std::string> last;
  int packages = 0;
  AGVISOR_RETURN_IF_ERROR(PumpLines(
      child->stdout_fd(),
      [&](std::string_view line) {
        // debootstrap says "I: Retrieving x", "I: Unpacking x", "I: Configuring x": show the
        // phases, count the packages.
        if (line.starts_with("I: Retrieving ")) ++packages;
        if (line.starts_with("I: Retrieving ") && packages % 10 != 1) return;
        if (line.starts_with("I: Validating ") || line.starts_with("I: Extracting ")) return;
        Say(o, "      " + std::string(line));
      },
      last));
  auto status = AGVISOR_TRY(child->Wait());
  if (!status.success()) {
    std::string tail;
    for (const auto& l : last) tail += "\n  " + l;
    return Error::Internal("debootstrap failed (" + status.ToString() + "):" + tail);
  }
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char msg[128];
  std::snprintf(msg, sizeof msg, "      root file system ready: %d packages in %.0f s", packages,
                secs);
  Say(o, msg);

  // 2. the recipe's files and its own setup in the new root, then trim: package caches are not
  // needed in the image; /workspace is where work goes. The files are written from inside the
  // new root (chroot), as the setup script would.
  for (const auto& f : recipe.files) {
    auto wrote =
        AGVISOR_TRY(RunCommand({"chroot", rootfs, "sh", "-c",
                                "umask 022 && mkdir -p \"${1%/*}\" && cat > \"$1\"", "sh", f.path},
                               f.content));
    if (!wrote.status.success()) {
      return Error::Internal("write " + f.path + " in the " + recipe.kind + " image (" +
                             wrote.status.ToString() + "): " + wrote.err);
    }
  }
  if (!recipe.setup.empty()) {
    Say(o, "[2/3] configuring (the " + recipe.kind + " recipe's setup script)");
    auto setup = AGVISOR_TRY(RunCommand({"chroot", rootfs, "sh", "-c", recipe.setup}));
    if (!setup.status.success()) {
      return Error::Internal("the " + recipe.kind + " image's setup script failed (" +
                             setup.status.ToString() + "): " + setup.err);
    }
  }
  Say(o, "[2/3] trimming caches");
  auto trim = AGVISOR_TRY(
      RunCommand({"sh", "-c",
                  "rm -rf \"$1\"/var/cache/apt/archives/*.deb \"$1\"/var/lib/apt/lists/* && "
                  "mkdir -p \"$1\"/workspace",
                  "sh", rootfs}));
  if (!trim.status.success()) return Error::Internal("trim root file system: " + trim.err);

  // 3. tar | import, streamed (bounded memory whatever the size).
  Say(o, "[3/3] importing into Docker as " + name);
  SubprocessOptions to;
  to.argv = {"tar", "--numeric-owner", "--xattrs", "-C", rootfs, "-c", "."};
  to.pipe_stdout = true;
  to.pipe_stderr = true;
  auto tar = AGVISOR_TRY(Subprocess::Spawn(to));
  std::uint64_t sent = 0;
  auto last_report = std::chrono::steady_clock::now();
  http::BodySource source = [&](std::span<char> buf) -> Result<std::size_t> {
    for (;;) {
      ssize_t n = ::read(tar.stdout_fd().get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Error::FromErrno("read tar output", errno);
      sent += static_cast<std::uint64_t>(n);
      auto now = std::chrono::steady_clock::now();
      if (now - last_report > std::chrono::seconds(1) || n == 0) {
        last_report = now;
        char line[96];
        std::snprintf(line, sizeof line, "      %.0f MB sent", static_cast<double>(sent) / 1e6);
        Say(o, line);
      }
      return static_cast<std::size_t>(n);
    }
  };
  auto id = client.ImportImage(repo, tag, source, [&](std::string_view line) {
    if (!line.empty()) Say(o, "      docker: " + std::string(line));
  });
  auto tar_status = tar.Wait();
  if (!id.ok()) return id.error().WithContext("import image " + name);
  if (tar_status.ok() && !tar_status->success()) {
    return Error::Internal("tar of the root file system failed (" + tar_status->ToString() + ")");
  }
  Say(o, "done: " + name);
  return *id;
}

}  // namespace agvisor::images
