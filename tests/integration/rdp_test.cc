// RDP for native clients against real runsc (agvisor/desktop, network none): `agvisor desktop
// NAME --rdp` forwards a loopback port through the agent channel to xrdp inside the sandbox;
// Debian's FreeRDP client (xfreerdp, on a virtual X server of the test's own) logs in with the
// sandbox's password and shows a full-screen window of a known colour drawn inside; with a wrong
// password it shows xrdp's login window and never the desktop.
// AGVISOR_DESKTOP_TEST_IMAGE names a desktop image other than agvisor/desktop:latest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/client/desktop.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/kube_double.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

// A client handle on a sandbox this test holds (not owned): the desktop verbs take one.
std::unique_ptr<client::SandboxHandle> Handle(Sandbox& sb) {
  return client::WrapSandbox(std::shared_ptr<Sandbox>(std::shared_ptr<Sandbox>(), &sb));
}

using Clock = std::chrono::steady_clock;

// rdp_kube_test runs this suite on the Kubernetes runtime (CMakeLists.txt).
[[maybe_unused]] auto* const over_kube = testing::AddKubeDoubleIfAsked();

constexpr int kWidth = 1280;
constexpr int kHeight = 800;
// The colour of the window drawn inside, and xrdp's login window (the image's xrdp.ini: grey).
constexpr std::uint32_t kColour = 0xc8501e;
constexpr std::uint32_t kLoginGrey = 0xdedede;

struct Rgb {
  int w = 0, h = 0;
  std::vector<std::uint32_t> px;  // 0xRRGGBB, row by row
  std::uint32_t at(int x, int y) const { return px[static_cast<std::size_t>(y) * w + x]; }
};

std::uint32_t Be32(const std::string& d, std::size_t at) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(d[at])) << 24 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(d[at + 1])) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(d[at + 2])) << 8 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(d[at + 3]));
}

int Shift(std::uint32_t mask) {
  int s = 0;
  while (mask != 0 && (mask & 1) == 0) {
    mask >>= 1;
    ++s;
  }
  return s;
}

// Xvfb's screen as it keeps it with -fbdir: an XWD file (header fields big-endian, then the
// colour map, then 32-bit pixels in the image's byte order). nullopt while it is not readable.
std::optional<Rgb> ReadScreen(const std::string& path) {
  const std::string d = testing::ReadAll(path);
  if (d.size() < 100) return std::nullopt;
  const std::uint32_t header = Be32(d, 0), w = Be32(d, 16), h = Be32(d, 20);
  const std::uint32_t byte_order = Be32(d, 28), bpp = Be32(d, 44), stride = Be32(d, 48);
  const std::uint32_t rmask = Be32(d, 56), gmask = Be32(d, 60), bmask = Be32(d, 64);
  const std::uint32_t ncolors = Be32(d, 76);
  if (bpp != 32 || w != kWidth || h != kHeight) return std::nullopt;
  const std::size_t start = header + static_cast<std::size_t>(ncolors) * 12;
  if (d.size() < start + static_cast<std::size_t>(stride) * h) return std::nullopt;
  Rgb out{.w = static_cast<int>(w), .h = static_cast<int>(h), .px = {}};
  out.px.reserve(static_cast<std::size_t>(w) * h);
  for (std::uint32_t y = 0; y < h; ++y) {
    for (std::uint32_t x = 0; x < w; ++x) {
      const std::size_t o = start + static_cast<std::size_t>(y) * stride + x * 4;
      std::uint32_t v = 0;
      for (int i = 0; i < 4; ++i) {
        const auto b = static_cast<std::uint32_t>(static_cast<unsigned char>(d[o + i]));
        v |= byte_order == 0 ? b << (8 * i) : b << (8 * (3 - i));  // 0: LSBFirst
      }
      out.px.push_back(((v & rmask) >> Shift(rmask)) << 16 | ((v & gmask) >> Shift(gmask)) << 8 |
                       ((v & bmask) >> Shift(bmask)));
    }
  }
  return out;
}

std::string HexColour(std::uint32_t c) {
  char s[8];
  std::snprintf(s, sizeof s, "%06x", c & 0xffffffu);
  return s;
}

bool Near(std::uint32_t a, std::uint32_t b) {
  for (int s = 0; s < 24; s += 8) {
    const int d = static_cast<int>((a >> s) & 0xff) - static_cast<int>((b >> s) & 0xff);
    if (d > 8 || d < -8) return false;
  }
  return true;
}

// Whether the whole screen but a margin (xterm's cursor, top left) is `colour`, on a grid.
bool Filled(const Rgb& s, std::uint32_t colour) {
  for (int y = 40; y < s.h - 10; y += 37) {
    for (int x = 40; x < s.w - 10; x += 41) {
      if (!Near(s.at(x, y), colour)) return false;
    }
  }
  return true;
}

Rgb FromRgb(const vnc::RgbImage& img) {
  Rgb out{.w = static_cast<int>(img.width), .h = static_cast<int>(img.height), .px = {}};
  out.px.reserve(img.rgb.size() / 3);
  for (std::size_t i = 0; i + 2 < img.rgb.size(); i += 3) {
    out.px.push_back(static_cast<std::uint32_t>(static_cast<unsigned char>(img.rgb[i])) << 16 |
                     static_cast<std::uint32_t>(static_cast<unsigned char>(img.rgb[i + 1])) << 8 |
                     static_cast<unsigned char>(img.rgb[i + 2]));
  }
  return out;
}

bool Shows(const Rgb& s, std::uint32_t colour) {
  for (int y = 0; y < s.h; y += 4) {
    for (int x = 0; x < s.w; x += 4) {
      if (Near(s.at(x, y), colour)) return true;
    }
  }
  return false;
}

// Reads one line from `fd` within `timeout` (the CLI's JSON line).
std::string ReadLine(int fd, std::chrono::milliseconds timeout) {
  std::string line;
  const auto deadline = Clock::now() + timeout;
  char c;
  while (Clock::now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    if (::read(fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line.push_back(c);
  }
  return line;
}

class RdpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto docker = ConnectDockerHost("");
    ASSERT_TRUE(docker.ok()) << docker.error().ToString();
    SandboxSpec spec = testing::TestSpec();
    spec.gui = true;
    spec.network = "none";
    spec.limits.cpus = 2;
    spec.limits.memory = "2g";
    if (const char* image = std::getenv("AGVISOR_DESKTOP_TEST_IMAGE")) spec.image = image;
    const std::string image = spec.image.empty() ? std::string(kDefaultDesktopImage) : spec.image;
    ASSERT_TRUE((*docker)->InspectImage(image).ok())
        << "the desktop image " << image
        << " is missing: build it with `agvisor image build desktop`, then run this test again";
    auto sb = CreateSandbox(spec);
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    sandbox_ = std::move(*sb).release();
    auto xrdp = sandbox_->Exec({"test", "-x", "/usr/sbin/xrdp"});
    ASSERT_TRUE(xrdp.ok() && xrdp->exit_code == 0)
        << image << " has no xrdp: it was built before RDP came; rebuild it with `agvisor image "
        << "build desktop`";
    // A full-screen window of a known colour, drawn inside by the desktop user, for both tests:
    // one must see it, the other must not. The session opens a terminal of its own just after
    // the desktop is ready; drawn before that one maps, the window ends up under it (and loses
    // its full screen), so wait until it is mapped, or until there is no xterm process (twice, a
    // second apart: the session starts it just after reporting ready): then none will map.
    ExecOptions o;
    o.user = "user";
    o.env = {"DISPLAY=:0"};
    o.timeout = 60;
    auto terminal = sandbox_->ExecShell(
        "until xdotool search --onlyvisible --class XTerm >/dev/null 2>&1; do\n"
        "  pgrep -x xterm >/dev/null || { sleep 1; pgrep -x xterm >/dev/null || exit 3; }\n"
        "  sleep 0.1\n"
        "done",
        o);
    ASSERT_TRUE(terminal.ok() && (terminal->exit_code == 0 || terminal->exit_code == 3))
        << "the session's terminal did not map within 60 s though it runs: "
        << (terminal.ok() ? terminal->err : terminal.error().ToString()) << Inside();
    if (terminal->exit_code == 3) {
      std::fprintf(stderr, "note: the session's terminal is not running (ignored)%s\n",
                   Inside().c_str());
    }
    char bg[16];
    std::snprintf(bg, sizeof bg, "#%06x", kColour);
    auto drawn = sandbox_->ExecShell(std::string("xterm -fullscreen -bg '") + bg + "' -fg '" + bg +
                                         "' -e sleep 600 >/dev/null 2>&1 &",
                                     o);
    ASSERT_TRUE(drawn.ok()) << drawn.error().ToString();
    // Seen through VNC inside (not RDP): the whole screen is that colour, on top of everything.
    std::optional<Rgb> inside;
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          auto img = desktop::CaptureScreen(*Handle(*sandbox_));
          if (!img.ok() || img->width != kWidth || img->height != kHeight) return false;
          inside = FromRgb(*img);
          return Filled(*inside, kColour);
        },
        std::chrono::seconds(30)))
        << "the full-screen window did not cover the desktop within 30 s (VNC's capture inside, "
        << "centre: " << (inside ? "#" + HexColour(inside->at(kWidth / 2, kHeight / 2)) : "none")
        << ")";
  }
  static void TearDownTestSuite() {
    if (sandbox_) (void)sandbox_->Stop();
    delete sandbox_;
    sandbox_ = nullptr;
    testing::CleanupRun(testing::TestHost());
  }

  void SetUp() override {
    if (sandbox_ == nullptr) GTEST_SKIP() << "the desktop sandbox was not created (see above)";
    // A virtual X server for the client, its screen kept in a file: a free display number.
    char tmpl[] = "/tmp/agvisor-rdp-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (int n = 90; n < 190 && display_.empty(); ++n) {
      struct stat st {};
      const std::string num = std::to_string(n);
      if (::stat(("/tmp/.X11-unix/X" + num).c_str(), &st) != 0 &&
          ::stat(("/tmp/.X" + num + "-lock").c_str(), &st) != 0) {
        display_ = ":" + num;
      }
    }
    ASSERT_FALSE(display_.empty()) << "no free X display number in :90..:189";
    SubprocessOptions x;
    x.argv = {"Xvfb", display_, "-screen", "0", "1280x800x24", "-fbdir", dir_, "-nolisten", "tcp"};
    auto xvfb = Subprocess::Spawn(x);
    ASSERT_TRUE(xvfb.ok())
        << xvfb.error().ToString()
        << " (Xvfb: apt-get install xvfb; scripts/setup-host --test-deps installs it)";
    xvfb_.emplace(std::move(*xvfb));
    ASSERT_TRUE(
        testing::WaitFor([&] { return ReadScreen(Fb()).has_value(); }, std::chrono::seconds(20)))
        << "Xvfb " << display_ << " did not make its screen file";
    // The forward, as a user runs it: `agvisor desktop NAME --rdp --json`.
    SubprocessOptions c;
    c.argv = {AGVISOR_CLI_BINARY, "--json", "desktop", sandbox_->container_name(), "--rdp"};
    if (const std::string host = testing::TestHost(); !host.empty()) {
      c.argv.insert(c.argv.begin() + 1, {"--host", host});  // rdp_kube_test: the double
    }
    c.pipe_stdout = true;
    auto cli = Subprocess::Spawn(c);
    ASSERT_TRUE(cli.ok()) << cli.error().ToString();
    cli_.emplace(std::move(*cli));
    const std::string line = ReadLine(cli_->stdout_fd().get(), std::chrono::seconds(30));
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    ASSERT_FALSE(ec) << "agvisor desktop --rdp --json printed: " << line;
    const auto& o = v.as_object();
    port_ = static_cast<int>(o.at("port").as_int64());
    password_ = std::string(o.at("password").as_string());
    EXPECT_EQ(o.at("user").as_string(), "user");
    EXPECT_EQ(std::string(o.at("url").as_string()), "rdp://127.0.0.1:" + std::to_string(port_));
    auto pw = desktop::Password(*Handle(*sandbox_));
    ASSERT_TRUE(pw.ok()) << pw.error().ToString();
    EXPECT_EQ(password_, *pw);
  }

  void TearDown() override {
    client_.reset();
    cli_.reset();
    xvfb_.reset();
    if (!dir_.empty()) (void)RunCommand({"rm", "-rf", dir_});
  }

  std::string Fb() const { return dir_ + "/Xvfb_screen0"; }

  // What a failure needs to be understood from CI's output alone: is xfreerdp still running, what
  // does the desktop inside show (VNC's own capture, not through RDP), what did xrdp and Xvnc log.
  std::string Diagnose() {
    std::string out = "\n  xfreerdp: ";
    auto st = client_ ? client_->TryWait() : Result<std::optional<ExitStatus>>(std::nullopt);
    if (!client_) {
      out += "not started";
    } else if (!st.ok()) {
      out += st.error().ToString();
    } else {
      out += *st ? "ended, " + (*st)->ToString() : std::string("running");
    }
    auto inside = desktop::CaptureScreen(*Handle(*sandbox_));
    out += "\n  inside, VNC's capture: ";
    if (!inside.ok()) {
      out += inside.error().ToString();
    } else {
      const Rgb rgb = FromRgb(*inside);
      out += std::to_string(rgb.w) + "x" + std::to_string(rgb.h) +
             ", filled with the colour: " + (Filled(rgb, kColour) ? "yes" : "no");
    }
    if (auto png = desktop::Screenshot(*Handle(*sandbox_)); png.ok()) {
      const std::string path =
          "/tmp/agvisor-rdp-test-inside-" + std::to_string(::getpid()) + ".png";
      std::ofstream(path, std::ios::binary) << *png;
      out += " (kept in " + path + ")";
    }
    return out + Inside();
  }

  // The processes inside and the desktop's log.
  static std::string Inside() {
    auto ps = sandbox_->Exec({"ps", "-eo", "pid,ppid,stat,wchan:16,args"});
    std::string out = "\n  ps inside:\n" + (ps.ok() ? ps->out : ps.error().ToString());
    auto log = sandbox_->ReadFile("/run/agvisor/desktop/desktop.log");
    out += "\n  desktop.log (last 40 lines):\n";
    if (!log.ok()) return out + log.error().ToString();
    std::size_t from = log->size(), lines = 0;
    while (from > 0 && lines <= 40) {
      if ((*log)[--from] == '\n') ++lines;
    }
    return out + log->substr(from);
  }

  void StartClient(const std::string& password) {
    SubprocessOptions f;
    f.argv = {"xfreerdp",        "/v:127.0.0.1:" + std::to_string(port_),
              "/u:user",         "/p:" + password,
              "/cert:ignore",    "/size:1280x800",
              "/bpp:24",         "-decorations",
              "/log-level:ERROR"};
    f.env = {"DISPLAY=" + display_};
    auto client = Subprocess::Spawn(f);
    ASSERT_TRUE(client.ok()) << client.error().ToString()
                             << " (xfreerdp: apt-get install freerdp2-x11; scripts/setup-host "
                                "--test-deps installs it)";
    client_.emplace(std::move(*client));
  }

  static Sandbox* sandbox_;
  std::string dir_, display_, password_;
  int port_ = 0;
  std::optional<Subprocess> xvfb_, cli_, client_;
};
Sandbox* RdpTest::sandbox_ = nullptr;

TEST_F(RdpTest, FreeRdpLogsInAndShowsTheDesktop) {
  const auto start = Clock::now();
  StartClient(password_);
  std::optional<Rgb> last;
  const bool shown = testing::WaitFor(
      [&] {
        last = ReadScreen(Fb());
        return last && Filled(*last, kColour);
      },
      std::chrono::seconds(60));
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(shown) << "xfreerdp's window does not show the colour #" << std::hex << kColour
                     << " within 60 s (centre pixel: "
                     << (last ? "#" + HexColour(last->at(640, 400)) : "no screen file") << ")"
                     << Diagnose();
  std::printf("xfreerdp start to the colour on its screen: %.2f s\n", secs);
  // Logged in, and the password is on no command line inside (xrdp's included).
  auto ps = sandbox_->Exec({"ps", "-eo", "args"});
  ASSERT_TRUE(ps.ok()) << ps.error().ToString();
  EXPECT_NE(ps->out.find("xrdp --nodaemon"), std::string::npos) << ps->out;
  EXPECT_EQ(ps->out.find(password_), std::string::npos) << ps->out;
}

// The xfreerdp line `agvisor desktop NAME --rdp` suggests keeps the clipboard to the host
// (`-clipboard`): a shared one lets the sandbox read what the user copies and fill the user's
// clipboard. `--clipboard` asks for it (`+clipboard`).
TEST_F(RdpTest, TheSuggestedClientLineKeepsTheClipboardOffUnlessAsked) {
  for (bool asked : {false, true}) {
    SubprocessOptions c;
    c.argv = {AGVISOR_CLI_BINARY, "desktop", sandbox_->container_name(), "--rdp"};
    if (asked) c.argv.push_back("--clipboard");
    if (const std::string host = testing::TestHost(); !host.empty()) {
      c.argv.insert(c.argv.begin() + 1, {"--host", host});
    }
    c.pipe_stdout = true;
    auto cli = Subprocess::Spawn(c);
    ASSERT_TRUE(cli.ok()) << cli.error().ToString();
    const std::string first = ReadLine(cli->stdout_fd().get(), std::chrono::seconds(30));
    const std::string hint = ReadLine(cli->stdout_fd().get(), std::chrono::seconds(5));
    EXPECT_THAT(first, ::testing::HasSubstr("RDP of " + sandbox_->container_name()));
    EXPECT_THAT(hint, ::testing::HasSubstr("xfreerdp /v:127.0.0.1:"));
    EXPECT_THAT(hint, ::testing::HasSubstr(asked ? " +clipboard`" : " -clipboard`")) << hint;
    EXPECT_EQ(hint.find(asked ? " -clipboard`" : " +clipboard`"), std::string::npos) << hint;
  }
}

TEST_F(RdpTest, AWrongPasswordGetsTheLoginWindowNotTheDesktop) {
  std::string wrong = password_;
  wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
  StartClient(wrong);
  std::optional<Rgb> last;
  // xrdp draws its login window (grey) when the VNC login fails ...
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        last = ReadScreen(Fb());
        return last && Shows(*last, kLoginGrey);
      },
      std::chrono::seconds(60)))
      << "xrdp's login window did not appear within 60 s" << Diagnose();
  // ... and nothing of the desktop (its backdrop, the panel) shows, then or a little later.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  last = ReadScreen(Fb());
  ASSERT_TRUE(last.has_value());
  EXPECT_FALSE(Shows(*last, kColour));
  auto log = sandbox_->ReadFile("/run/agvisor/desktop/desktop.log");
  ASSERT_TRUE(log.ok()) << log.error().ToString();
  // Xvnc itself refused the password xrdp passed on.
  EXPECT_NE(log->find("Authentication failure"), std::string::npos) << *log;
}

}  // namespace
}  // namespace agvisor
