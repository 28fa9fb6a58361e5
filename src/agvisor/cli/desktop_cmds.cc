// agvisor desktop NAME [ACTION ...]: a native VNC viewer's port and password, screenshots and
// computer use (mouse, keyboard) on a --gui sandbox. See docs/desktop.md.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "agvisor/cli/common.h"
#include "agvisor/client/desktop.h"

namespace agvisor::cli {
namespace {

int Fail(const Error& e) { return ReportError(e); }

// Listens on 127.0.0.1:port (0 = a free one), prints where and the password, and forwards each
// connection to the desktop's VNC port (RDP port with `rdp`) through the agent channel until
// interrupted. The password is the same for both: xrdp passes the RDP client's on to Xvnc.
// The suggested xfreerdp line turns clipboard redirection off (`-clipboard`) unless `clipboard`:
// with it on, the sandbox reads what the user copies on the host and fills the host's clipboard.
int Serve(SandboxHandle& sb, int port, bool rdp, bool clipboard, bool json) {
  auto password = desktop::Password(sb);
  if (!password.ok()) return Fail(password.error());
  if (port < 0 || port > 65535) {
    return Fail(Error::InvalidArgument("desktop: --port must be 0..65535 (0 = any free port)"));
  }
  auto listening = ListenLoopback("desktop", port, 16);
  if (!listening.ok()) return Fail(listening.error());
  const int srv = listening->fd;
  const int bound = listening->port;
  const std::uint16_t inside = rdp ? desktop::kRdpPort : desktop::kVncPort;
  const std::string address = "127.0.0.1:" + std::to_string(bound);
  if (json) {
    boost::json::object o{{"sandbox", sb.container_name()},
                          {"host", "127.0.0.1"},
                          {"port", bound},
                          {"password", *password},
                          {"url", (rdp ? "rdp://" : "vnc://") + address}};
    if (rdp) o["user"] = desktop::kDesktopUser;
    std::cout << boost::json::serialize(o) << std::endl;
  } else if (rdp) {
    std::cout << "RDP of " << EscapeForTerminal(sb.container_name()) << ": " << address
              << "  user: " << desktop::kDesktopUser << "  password: " << *password << "\n"
              << "(e.g. `xfreerdp /v:" << address << " /u:" << desktop::kDesktopUser
              << " /cert:ignore " << (clipboard ? "+clipboard" : "-clipboard")
              << "`: the certificate is self-signed, made in the sandbox; "
              << (clipboard ? "the clipboard is shared with the sandbox (--clipboard); "
                            : "the clipboard is not shared with the sandbox (--clipboard shares "
                              "it); ")
              << "forwarded through the agent channel until Ctrl-C)" << std::endl;
  } else {
    std::cout << "VNC of " << EscapeForTerminal(sb.container_name()) << ": " << address
              << "  password: " << *password << "\n"
              << "(e.g. `vncviewer 127.0.0.1::" << bound
              << "`; forwarded through the agent channel until Ctrl-C)" << std::endl;
  }
  for (;;) {
    int c = ::accept4(srv, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      return Fail(Error::FromErrno("desktop: accept", errno));
    }
    auto ps = sb.OpenPort(inside);
    if (!ps.ok()) {
      std::cerr << "agvisor: desktop: " << EscapeForTerminal(ps.error().message()) << "\n";
      ::close(c);
      if (ps.error().code() == ErrorCode::kSandboxDied) return ExitCodeFor(ps.error());
      continue;
    }
    std::thread(RelayPortConnection, std::shared_ptr<ByteStream>(std::move(*ps)), c).detach();
  }
}

// Opens the named sandbox where this run's sandboxes live (in process or through agvisord) and
// runs `fn` on it; reports errors.
int WithSandbox(GlobalOptions& g, const std::string& name,
                const std::function<Result<void>(SandboxHandle&)>& fn) {
  auto sb = g.OpenSandbox(name);
  if (!sb.ok()) return Fail(sb.error());
  auto r = fn(**sb);
  return r.ok() ? kExitOk : Fail(r.error());
}

}  // namespace

void AddDesktop(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "desktop");
  auto name = AddSandboxArg(*cmd);
  auto port = std::make_shared<int>(0);
  cmd->add_option("--port", *port, "local port to listen on (0 = any free port)")
      ->capture_default_str();
  auto rdp = std::make_shared<bool>(false);
  cmd->add_flag("--rdp", *rdp,
                "forward RDP (xrdp inside, port 3389) instead of VNC; the password is the same");
  auto clipboard = std::make_shared<bool>(false);
  cmd->add_flag("--clipboard", *clipboard,
                "with --rdp: suggest an xfreerdp line that shares the clipboard with the sandbox "
                "(+clipboard); by default it is off (-clipboard): a hostile sandbox would read "
                "what you copy and fill your clipboard")
      ->needs("--rdp");
  cmd->callback([&g, exit_code, cmd, name, port, rdp, clipboard] {
    if (!cmd->get_subcommands().empty()) return;  // an action ran
    auto sb = g.OpenSandbox(*name);
    if (!sb.ok()) {
      *exit_code = Fail(sb.error());
      return;
    }
    *exit_code = Serve(**sb, *port, *rdp, *clipboard, g.json);
  });
  // Actions run in their own callbacks, after the parent's positional is parsed.
  auto run = [&g, exit_code, name](std::function<Result<void>(SandboxHandle&)> fn) {
    *exit_code = WithSandbox(g, *name, fn);
  };

  cmd->add_subcommand("password", "print the VNC password")->callback([run, &g] {
    run([&g](SandboxHandle& sb) -> Result<void> {
      auto pw = AGVISOR_TRY(desktop::Password(sb));
      if (g.json) {
        std::cout << boost::json::serialize(boost::json::object{{"password", pw}}) << "\n";
      } else {
        std::cout << pw << "\n";
      }
      return Ok();
    });
  });

  cmd->add_subcommand("size", "print the screen size (WIDTHxHEIGHT)")->callback([run, &g] {
    run([&g](SandboxHandle& sb) -> Result<void> {
      auto s = AGVISOR_TRY(desktop::GetScreenSize(sb));
      if (g.json) {
        std::cout << boost::json::serialize(
                         boost::json::object{{"width", s.width}, {"height", s.height}})
                  << "\n";
      } else {
        std::cout << s.width << "x" << s.height << "\n";
      }
      return Ok();
    });
  });

  auto* shot = cmd->add_subcommand("screenshot", "save the screen as a PNG file ('-': stdout)");
  auto file = std::make_shared<std::string>();
  shot->add_option("file", *file, "where to write the PNG")->required();
  shot->callback([run, file] {
    run([file](SandboxHandle& sb) -> Result<void> {
      auto png = AGVISOR_TRY(desktop::Screenshot(sb));
      if (*file == "-") {
        WriteAll(1, png);
        return Ok();
      }
      std::ofstream out(*file, std::ios::binary | std::ios::trunc);
      out.write(png.data(), static_cast<std::streamsize>(png.size()));
      out.close();
      if (!out) return Error::FromErrno("write " + *file, errno);
      return Ok();
    });
  });

  auto xy = std::make_shared<std::vector<int>>();
  auto* move = cmd->add_subcommand("move", "move the mouse pointer to X Y");
  move->add_option("xy", *xy, "X Y")->required()->expected(2);
  move->callback([run, xy] {
    run([xy](SandboxHandle& sb) { return desktop::MouseMove(sb, (*xy)[0], (*xy)[1]); });
  });

  auto button = std::make_shared<std::string>("left");
  auto count = std::make_shared<int>(1);
  auto* click = cmd->add_subcommand("click", "click at X Y");
  click->add_option("xy", *xy, "X Y")->required()->expected(2);
  click->add_option("-b,--button", *button, "left, middle or right")->capture_default_str();
  click->add_option("-n,--count", *count, "clicks (2 = double click)")->capture_default_str();
  click->callback([run, xy, button, count] {
    run([=](SandboxHandle& sb) -> Result<void> {
      auto b = AGVISOR_TRY(desktop::ParseMouseButton(*button));
      return desktop::Click(sb, (*xy)[0], (*xy)[1], b, *count);
    });
  });

  auto* drag = cmd->add_subcommand("drag", "press at X1 Y1, move to X2 Y2, release");
  drag->add_option("points", *xy, "X1 Y1 X2 Y2")->required()->expected(4);
  drag->add_option("-b,--button", *button, "left, middle or right")->capture_default_str();
  drag->callback([run, xy, button] {
    run([=](SandboxHandle& sb) -> Result<void> {
      auto b = AGVISOR_TRY(desktop::ParseMouseButton(*button));
      return desktop::Drag(sb, (*xy)[0], (*xy)[1], (*xy)[2], (*xy)[3], b);
    });
  });

  auto* scroll = cmd->add_subcommand(
      "scroll", "turn the wheel at X Y: DY steps (> 0 down, < 0 up), optional DX (> 0 right)");
  scroll->add_option("args", *xy, "X Y DY [DX]")->required()->expected(3, 4);
  scroll->callback([run, xy] {
    run([xy](SandboxHandle& sb) {
      return desktop::Scroll(sb, (*xy)[0], (*xy)[1], (*xy)[2], xy->size() > 3 ? (*xy)[3] : 0);
    });
  });

  auto text = std::make_shared<std::string>();
  auto* type = cmd->add_subcommand("type", "type TEXT into the focused window");
  type->add_option("text", *text, "the text (UTF-8)")->required();
  type->callback(
      [run, text] { run([text](SandboxHandle& sb) { return desktop::TypeText(sb, *text); }); });

  auto combos = std::make_shared<std::vector<std::string>>();
  auto* key = cmd->add_subcommand(
      "key", "press key combinations in turn: Return, ctrl+alt+t, shift+Tab, ctrl+c ...");
  key->add_option("combo", *combos, "X key names joined by '+'")->required();
  key->callback([run, combos] {
    run([combos](SandboxHandle& sb) {
      std::string all;
      for (const auto& c : *combos) all += (all.empty() ? "" : " ") + c;
      return desktop::Key(sb, all);
    });
  });
}

}  // namespace agvisor::cli
