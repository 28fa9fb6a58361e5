// The server side of the web element's browser tests (web/test/browser.test.mjs): a real gui
// sandbox (SandboxSpec::gui under runsc, network none: the desktop the agent starts, with its
// random VNC password) with an input recorder window on it, and the desktop gateway on loopback.
// Prints one JSON line
//   {"gateway": "ws://127.0.0.1:PORT/v1/desktop/ws", "token": "...", "foreign_token": "...",
//    "rdp_token": "...", "container": "agvisor-...", "width": W, "height": H,
//    "recorder": {"x": X, "y": Y, "width": W, "height": H}}
// (the screen's size and where the recorder window is, in screen pixels), then serves commands,
// one per stdin line, each answered with one JSON line:
//   exec <shell command>   -> {"exit_code": N, "out": "...", "err": "..."}  (run in the sandbox
//                             as the desktop user, DISPLAY=:0)
//   token                  -> {"token": "..."}                             (a fresh one)
// On EOF or "quit" it removes the sandbox and exits. Every container carries agvisor=1 and
// test.run=<id>, so a killed fixture's leftovers are found by label.
#include <openssl/rand.h>

#include <boost/json.hpp>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "agvisor/client/desktop.h"
#include "agvisor/gateway/gateway.h"
#include "agvisor/gateway/listener.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/testing/kept_runtime.h"

namespace {

using namespace agvisor;
using namespace agvisor::gateway;
using agvisor::desktop::MintToken;
using agvisor::desktop::MintVncToken;
using agvisor::desktop::ParseTokenKey;
using agvisor::desktop::TokenPayload;
using agvisor::desktop::VncTarget;

std::string RandomHex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(raw.size()));
  static const char* d = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex += d[c >> 4];
    hex += d[c & 15];
  }
  return hex;
}

// A 600x400 window that appends what it receives to files inside the sandbox: typed text to
// /tmp/typed, clicks as "x y" lines in screen coordinates to /tmp/clicks. Python's ctypes over
// libX11 (the image has both; it has no xev). XKeyEvent/XButtonEvent keep x_root, y_root at
// byte 72.
constexpr std::string_view kRecorder = R"(import ctypes, ctypes.util
x = ctypes.cdll.LoadLibrary(ctypes.util.find_library("X11") or "libX11.so.6")
x.XOpenDisplay.restype = ctypes.c_void_p
x.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
x.XDefaultRootWindow.restype = ctypes.c_ulong
x.XCreateSimpleWindow.argtypes = [ctypes.c_void_p, ctypes.c_ulong] + [ctypes.c_int] * 4 + [ctypes.c_uint, ctypes.c_ulong, ctypes.c_ulong]
x.XCreateSimpleWindow.restype = ctypes.c_ulong
x.XSelectInput.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_long]
x.XMapWindow.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
x.XStoreName.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_char_p]
x.XNextEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
x.XLookupString.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
d = x.XOpenDisplay(None)
w = x.XCreateSimpleWindow(d, x.XDefaultRootWindow(d), 100, 100, 600, 400, 1, 0, 0xE0E8F0)
x.XStoreName(d, w, b"agvisor input recorder")
x.XSelectInput(d, w, (1 << 0) | (1 << 2))  # KeyPress, ButtonPress
x.XMapWindow(d, w)
ev = ctypes.create_string_buffer(192)
buf = ctypes.create_string_buffer(32)
while True:
    x.XNextEvent(d, ev)
    kind = int.from_bytes(ev.raw[0:4], "little")
    px, py = int.from_bytes(ev.raw[72:76], "little", signed=True), int.from_bytes(ev.raw[76:80], "little", signed=True)
    if kind == 2:
        n = x.XLookupString(ev, buf, 32, None, None)
        with open("/tmp/typed", "ab") as f:
            f.write(b"\n" if buf.raw[:n] == b"\r" else buf.raw[:n])
    elif kind == 4:
        with open("/tmp/clicks", "a") as f:
            f.write("%d %d\n" % (px, py))
)";

int Fail(const Error& e) {
  std::cerr << "desktop_fixture: " << e.ToString() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> origins;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--origin") origins.push_back(argv[i + 1]);
  }
  SandboxSpec spec;
  spec.gui = true;  // agvisor/desktop: the agent starts Xvnc and the session on :0
  spec.network = "none";
  spec.limits.cpus = 1;
  spec.limits.memory = "1g";
  spec.limits.disk = "none";
  spec.lifetime = 900;  // a killed fixture's sandbox still goes away
  spec.labels["test.run"] = "web-" + RandomHex(3);
  auto sb = CreateSandbox(spec);  // returns once the desktop is drawn and VNC answers
  if (!sb.ok()) return Fail(sb.error());
  Sandbox& sandbox = **sb;
  auto cleanup = [&] { (void)sandbox.Stop(); };
  auto must = [&](Result<void> r) {
    if (!r.ok()) {
      cleanup();
      std::exit(Fail(r.error()));
    }
  };
  auto handle = client::WrapSandbox(std::shared_ptr<Sandbox>(std::shared_ptr<Sandbox>(), &sandbox));
  auto password = desktop::Password(*handle);
  if (!password.ok()) must(password.error());
  auto screen = desktop::GetScreenSize(*handle);
  if (!screen.ok()) must(screen.error());
  ExecOptions as_user;
  as_user.user = std::string(desktop::kDesktopUser);
  as_user.env = {"DISPLAY=:0"};
  as_user.timeout = 60;
  must(sandbox.WriteFile("/tmp/recorder.py", kRecorder, 0644));
  BackgroundOptions bg;
  bg.user = as_user.user;
  bg.env = as_user.env;
  auto pid = sandbox.StartBackground({"python3", "/tmp/recorder.py"}, bg);
  if (!pid.ok()) must(pid.error());
  // Once mapped, the window manager has placed it: put it where the tests look for it (inside
  // the screen, clear of the panel) and give it the focus; then read where it is.
  std::string geometry;
  for (int i = 0; i < 150 && geometry.empty(); ++i) {
    auto r = sandbox.ExecShell(
        "w=$(xdotool search --onlyvisible --name 'agvisor input recorder' | head -1) && "
        "[ -n \"$w\" ] && xdotool windowmove $w 100 100 windowactivate $w && sleep 0.3 && "
        "xdotool getwindowgeometry --shell $w",
        as_user);
    if (r.ok() && r->exit_code == 0) geometry = r->out;
    if (geometry.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (geometry.empty()) {
    cleanup();
    return Fail(Error::Unavailable("the input recorder window did not appear in 30 s"));
  }
  // getwindowgeometry --shell: WINDOW=, X=, Y=, WIDTH=, HEIGHT=, SCREEN= lines.
  boost::json::object recorder;
  std::istringstream lines(geometry);
  for (std::string kv; std::getline(lines, kv);) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    const std::string key = k == "X"        ? "x"
                            : k == "Y"      ? "y"
                            : k == "WIDTH"  ? "width"
                            : k == "HEIGHT" ? "height"
                                            : "";
    if (!key.empty()) recorder[key] = std::stoi(kv.substr(eq + 1));
  }
  if (recorder.size() != 4) {
    cleanup();
    return Fail(Error::Internal("xdotool getwindowgeometry said: " + geometry));
  }

  GatewayOptions go;
  go.key = *ParseTokenKey(RandomHex(32));
  go.allowed_origins = origins;
  Gateway gateway(go);
  auto listener = Listener::Start(gateway);
  if (!listener.ok()) {
    cleanup();
    return Fail(listener.error());
  }
  const VncTarget target{.container = sandbox.container_name(), .password = *password};
  auto token = [&] { return *MintVncToken(go.key, target, std::chrono::seconds(120)); };
  TokenPayload rdp;
  rdp.type = "rdp";
  rdp.settings_json = R"({"hostname":"127.0.0.1","port":"3389"})";
  rdp.expiration_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          (std::chrono::system_clock::now() + std::chrono::minutes(10)).time_since_epoch())
          .count();
  boost::json::object hello{
      {"gateway", "ws://127.0.0.1:" + std::to_string((*listener)->port()) + "/v1/desktop/ws"},
      {"token", token()},
      {"foreign_token",
       *MintVncToken(*ParseTokenKey(RandomHex(32)), target, std::chrono::seconds(120))},
      {"rdp_token", *MintToken(go.key, rdp)},
      {"container", sandbox.container_name()},
      {"width", screen->width},
      {"height", screen->height},
      {"recorder", recorder}};
  std::cout << boost::json::serialize(hello) << std::endl;

  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    boost::json::object answer;
    if (line.starts_with("exec ")) {
      auto r = sandbox.ExecShell(line.substr(5), as_user);
      if (r.ok()) {
        answer = {{"exit_code", r->exit_code}, {"out", r->out}, {"err", r->err}};
      } else {
        answer = {{"exit_code", -1}, {"out", ""}, {"err", r.error().ToString()}};
      }
    } else if (line == "token") {
      answer = {{"token", token()}};
    } else {
      answer = {{"error", "unknown command: " + line}};
    }
    std::cout << boost::json::serialize(answer) << std::endl;
  }
  listener->reset();
  cleanup();
  return 0;
}
