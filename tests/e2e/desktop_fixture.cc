// The server side of the web element's browser tests (web/test/browser.test.mjs): a real desktop
// sandbox (agvisor/desktop under runsc, network none: Xvnc with a random VNC password, xfwm4 and
// an input recorder window) and the desktop gateway on loopback. Prints one JSON line
//   {"gateway": "ws://127.0.0.1:PORT/v1/desktop/ws", "token": "...", "foreign_token": "...",
//    "rdp_token": "...", "container": "agvisor-..."}
// then serves commands, one per stdin line, each answered with one JSON line:
//   exec <shell command>   -> {"exit_code": N, "out": "...", "err": "..."}  (run in the sandbox)
//   token                  -> {"token": "..."}                             (a fresh one)
// On EOF or "quit" it removes the sandbox and exits. Every container carries agvisor=1 and
// test.run=<id>, so a killed fixture's leftovers are found by label.
#include <openssl/rand.h>

#include <boost/json.hpp>
#include <iostream>
#include <random>
#include <string>

#include "agvisor/gateway/gateway.h"
#include "agvisor/gateway/listener.h"
#include "agvisor/gateway/rfb.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/vnc.h"

namespace {

using namespace agvisor;
using namespace agvisor::gateway;

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

// A window at +40+40 (600x400) that appends what it receives to files inside the sandbox: typed
// text to /tmp/typed, clicks as "x y" lines (window coordinates) to /tmp/clicks. Python's ctypes
// over libX11 (the image has both; it has no xev). XKeyEvent/XButtonEvent keep x, y at byte 64.
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
w = x.XCreateSimpleWindow(d, x.XDefaultRootWindow(d), 40, 40, 600, 400, 1, 0, 0xE0E8F0)
x.XStoreName(d, w, b"agvisor input recorder")
x.XSelectInput(d, w, (1 << 0) | (1 << 2))  # KeyPress, ButtonPress
x.XMapWindow(d, w)
ev = ctypes.create_string_buffer(192)
buf = ctypes.create_string_buffer(32)
while True:
    x.XNextEvent(d, ev)
    kind = int.from_bytes(ev.raw[0:4], "little")
    px, py = int.from_bytes(ev.raw[64:68], "little", signed=True), int.from_bytes(ev.raw[68:72], "little", signed=True)
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
  spec.image = "agvisor/desktop:latest";
  spec.network = "none";
  spec.limits.cpus = 1;
  spec.limits.memory = "1g";
  spec.limits.disk = "none";
  spec.lifetime = 900;  // a killed fixture's sandbox still goes away
  spec.labels["test.run"] = "web-" + RandomHex(3);
  auto sb = Sandbox::Create(spec);
  if (!sb.ok()) return Fail(sb.error());
  Sandbox& sandbox = **sb;
  const std::string password = RandomHex(4);
  auto cleanup = [&] { (void)sandbox.Stop(); };
  auto must = [&](Result<void> r) {
    if (!r.ok()) {
      cleanup();
      std::exit(Fail(r.error()));
    }
  };
  must(sandbox.WriteFile("/tmp/vncpass", vnc::VncPasswordFile(password), 0600));
  must(sandbox.WriteFile("/tmp/recorder.py", kRecorder, 0644));
  auto start = [&](const std::vector<std::string>& argv_) {
    BackgroundOptions o;
    o.env = {"DISPLAY=:1", "HOME=/tmp", "NO_AT_BRIDGE=1"};
    auto pid = sandbox.StartBackground(argv_, o);
    if (!pid.ok()) must(pid.error());
  };
  start({"Xvnc", ":1", "-geometry", "1024x768", "-depth", "24", "-rfbport", "5900", "-localhost",
         "-SecurityTypes", "VncAuth", "-PasswordFile", "/tmp/vncpass", "-AlwaysShared"});
  bool listening = false;
  for (int i = 0; i < 150 && !listening; ++i) {
    listening = sandbox.OpenPort(5900).ok();
    if (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!listening) {
    cleanup();
    return Fail(Error::Unavailable("Xvnc did not listen on 5900 in 30 s"));
  }
  // X clients only once the server accepts them (a fixed delay lost that race on a slow start:
  // no window, a black screen).
  start({"xfwm4"});
  start({"python3", "/tmp/recorder.py"});
  // The recorder is up once its window exists.
  bool recorder = false;
  for (int i = 0; i < 150 && !recorder; ++i) {
    auto r = sandbox.ExecShell(
        "DISPLAY=:1 xdotool search --onlyvisible --name 'agvisor input recorder'");
    recorder = r.ok() && r->exit_code == 0;
    if (!recorder) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!recorder) {
    cleanup();
    return Fail(Error::Unavailable("the input recorder window did not appear in 30 s"));
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
  const VncTarget target{.container = sandbox.container_name(), .password = password};
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
      {"container", sandbox.container_name()}};
  std::cout << boost::json::serialize(hello) << std::endl;

  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    boost::json::object answer;
    if (line.starts_with("exec ")) {
      auto r = sandbox.ExecShell(line.substr(5));
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
