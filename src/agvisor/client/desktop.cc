// The desktop verbs over a client::SandboxHandle (desktop.h): in process and through agvisord
// alike, since each needs only the handle's Exec, ReadFilePrefix and OpenPort.
#include "agvisor/client/desktop.h"

#include <cctype>
#include <set>
#include <thread>

#include "agvisor/desktop/password.h"

namespace agvisor::desktop {
namespace {

std::string DirPath(std::string_view file) {
  return std::string(kDesktopDir) + "/" + std::string(file);
}

vnc::ByteStream StreamOf(client::ByteStream& ps) {
  return vnc::ByteStream{.read = [&ps](std::span<char> buf) { return ps.Read(buf); },
                         .write = [&ps](std::string_view d) { return ps.Write(d); }};
}

// Runs an X client (xdotool, setxkbmap) as the desktop user on :0.
Result<void> RunX(client::SandboxHandle& sb, std::vector<std::string> args) {
  ExecOptions o;
  o.user = std::string(kDesktopUser);
  o.env = {"DISPLAY=:0", "LC_ALL=C.UTF-8"};
  o.timeout = 60;
  auto r = AGVISOR_TRY(sb.Exec(args, o));
  if (r.exit_code == 127) {
    return Error::NotFound(args[0] + " is not installed in sandbox " + sb.container_name() +
                           ": desktops need the desktop image (agvisor image build desktop)");
  }
  if (r.exit_code != 0) {
    std::string msg = r.err.empty() ? r.out : r.err;
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    return Error::Internal(args[0] + (args.size() > 1 ? " " + args[1] : "") + " failed (exit " +
                           std::to_string(r.exit_code) + "): " + msg);
  }
  return Ok();
}

Result<void> Xdotool(client::SandboxHandle& sb, std::vector<std::string> args) {
  args.insert(args.begin(), "xdotool");
  return RunX(sb, std::move(args));
}

// Xvnc puts a typed character missing from the keyboard on one of its ~19 free keycodes and
// keeps it there; once they are used up, new characters are dropped ("Failure adding new keysym"
// in the desktop log). Reloading the keyboard's layout frees them; a text is typed in parts of at
// most this many distinct characters beyond ASCII, each after such a reload.
constexpr std::size_t kNewKeysymsPerPart = 16;

Result<void> CheckPoint(std::string_view what, int x, int y) {
  if (x < 0 || y < 0 || x > 65535 || y > 65535) {
    return Error::InvalidArgument(std::string(what) +
                                  ": coordinates must be 0..65535 pixels from "
                                  "the top left, got (" +
                                  std::to_string(x) + ", " + std::to_string(y) + ")");
  }
  return Ok();
}

std::string ButtonArg(MouseButton b) { return std::to_string(static_cast<int>(b)); }

}  // namespace

Result<std::string> Password(client::SandboxHandle& sb) {
  // The file is the sandbox's (its agent made it): read at most 9 bytes and take only what
  // NewPassword makes (8 of [A-Za-z0-9]), since callers print it and hand it to VNC and RDP
  // clients.
  auto read = sb.ReadFilePrefix(DirPath(kPasswordFile), 9);
  if (!read.ok() && read.error().code() == ErrorCode::kNotFound) {
    return Error::NotFound("sandbox " + sb.container_name() +
                           " has no desktop (create it with gui / --gui)");
  }
  if (!read.ok()) return read.error();
  const std::string& pw = *read;
  if (!IsPassword(pw)) {
    return Error::Internal("sandbox " + sb.container_name() + ": its desktop password file " +
                           std::string(kDesktopDir) + "/" + std::string(kPasswordFile) +
                           " was changed inside the sandbox (not 8 letters and digits); "
                           "restart the desktop sandbox for a new one");
  }
  return pw;
}

Result<vnc::RgbImage> CaptureScreen(client::SandboxHandle& sb) {
  const std::string password = AGVISOR_TRY(Password(sb));
  auto port = AGVISOR_TRY(sb.OpenPort(kVncPort));
  auto stream = StreamOf(*port);
  auto init = vnc::Handshake(stream, password);
  if (!init.ok()) return init.error().WithContext("screenshot of " + sb.container_name());
  auto img = vnc::CaptureFramebuffer(stream, *init);
  port->Close();
  if (!img.ok()) return img.error().WithContext("screenshot of " + sb.container_name());
  return img;
}

Result<std::string> Screenshot(client::SandboxHandle& sb) {
  auto img = AGVISOR_TRY(CaptureScreen(sb));
  return vnc::EncodePng(img);
}

Result<ScreenSize> GetScreenSize(client::SandboxHandle& sb) {
  const std::string password = AGVISOR_TRY(Password(sb));
  auto port = AGVISOR_TRY(sb.OpenPort(kVncPort));
  auto init = AGVISOR_TRY(vnc::Handshake(StreamOf(*port), password));
  port->Close();
  return ScreenSize{init.width, init.height};
}

Result<MouseButton> ParseMouseButton(std::string_view t) {
  if (t == "left" || t == "1") return MouseButton::kLeft;
  if (t == "middle" || t == "2") return MouseButton::kMiddle;
  if (t == "right" || t == "3") return MouseButton::kRight;
  return Error::InvalidArgument("mouse button '" + std::string(t) + "': use left, middle or right");
}

Result<void> MouseMove(client::SandboxHandle& sb, int x, int y) {
  AGVISOR_RETURN_IF_ERROR(CheckPoint("mouse move", x, y));
  return Xdotool(sb, {"mousemove", std::to_string(x), std::to_string(y)});
}

Result<void> Click(client::SandboxHandle& sb, int x, int y, MouseButton button, int count) {
  AGVISOR_RETURN_IF_ERROR(CheckPoint("click", x, y));
  if (count < 1 || count > 10) {
    return Error::InvalidArgument("click: count must be 1..10, got " + std::to_string(count));
  }
  return Xdotool(sb, {"mousemove", std::to_string(x), std::to_string(y), "click", "--repeat",
                      std::to_string(count), "--delay", "80", ButtonArg(button)});
}

Result<void> Drag(client::SandboxHandle& sb, int x1, int y1, int x2, int y2, MouseButton button) {
  AGVISOR_RETURN_IF_ERROR(CheckPoint("drag start", x1, y1));
  AGVISOR_RETURN_IF_ERROR(CheckPoint("drag end", x2, y2));
  // A move halfway between press and release: toolkits start a drag on motion with the button
  // down, and some ignore a single jump.
  const std::string b = ButtonArg(button);
  return Xdotool(sb, {"mousemove", std::to_string(x1), std::to_string(y1), "mousedown", b, "sleep",
                      "0.05", "mousemove", std::to_string((x1 + x2) / 2),
                      std::to_string((y1 + y2) / 2), "sleep", "0.05", "mousemove",
                      std::to_string(x2), std::to_string(y2), "sleep", "0.05", "mouseup", b});
}

Result<void> Scroll(client::SandboxHandle& sb, int x, int y, int dy, int dx) {
  AGVISOR_RETURN_IF_ERROR(CheckPoint("scroll", x, y));
  if (dy == 0 && dx == 0) return Error::InvalidArgument("scroll: dy and dx are both 0");
  if (dy < -100 || dy > 100 || dx < -100 || dx > 100) {
    return Error::InvalidArgument("scroll: at most 100 wheel steps per call");
  }
  // X wheel buttons: 4 up, 5 down, 6 left, 7 right.
  std::vector<std::string> args = {"mousemove", std::to_string(x), std::to_string(y)};
  if (dy != 0) {
    args.insert(args.end(),
                {"click", "--repeat", std::to_string(dy > 0 ? dy : -dy), dy > 0 ? "5" : "4"});
  }
  if (dx != 0) {
    args.insert(args.end(),
                {"click", "--repeat", std::to_string(dx > 0 ? dx : -dx), dx > 0 ? "7" : "6"});
  }
  return Xdotool(sb, std::move(args));
}

Result<void> TypeText(client::SandboxHandle& sb, std::string_view text) {
  if (text.empty()) return Ok();
  if (text.find('\0') != std::string_view::npos) {
    return Error::InvalidArgument("type: text contains a NUL byte");
  }
  // Through VNC rather than xdotool: xdotool types a character missing from the keyboard map by
  // binding it to a spare keycode and unbinding it right after, and a client that looks the
  // keycode up late (xterm, under load) sees it unbound and drops the character. Xvnc maps a
  // character missing from the keyboard onto a free keycode and keeps it there.
  const auto keysyms = AGVISOR_TRY(vnc::KeysymsForText(text));
  std::vector<std::span<const std::uint32_t>> parts;
  std::set<std::uint32_t> fresh;
  std::size_t from = 0;
  for (std::size_t i = 0; i < keysyms.size(); ++i) {
    const bool on_every_keyboard =
        keysyms[i] < 0x80 || (keysyms[i] >= 0xff00 && keysyms[i] <= 0xffff);
    if (on_every_keyboard) continue;  // ASCII, Return, Tab
    if (fresh.insert(keysyms[i]).second && fresh.size() > kNewKeysymsPerPart) {
      parts.emplace_back(keysyms.data() + from, i - from);
      from = i;
      fresh = {keysyms[i]};
    }
  }
  parts.emplace_back(keysyms.data() + from, keysyms.size() - from);
  const bool beyond_ascii = !fresh.empty();
  const std::string password = AGVISOR_TRY(Password(sb));
  auto port = AGVISOR_TRY(sb.OpenPort(kVncPort));
  auto stream = StreamOf(*port);
  auto init = vnc::Handshake(stream, password);
  if (!init.ok()) return init.error().WithContext("type into " + sb.container_name());
  for (std::size_t p = 0; p < parts.size(); ++p) {
    if (beyond_ascii) {
      // Free the keycodes earlier characters took. A client reads a key's keycode some time
      // after the server took it, and reads the new mapping if it is late: give the previous
      // part's keys a second (200 ms lost characters in xterm on a busy machine).
      if (p > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
      AGVISOR_RETURN_IF_ERROR(RunX(sb, {"setxkbmap"}));
    }
    auto typed = vnc::TypeKeysyms(stream, *init, parts[p]);
    if (!typed.ok()) return typed.error().WithContext("type into " + sb.container_name());
  }
  port->Close();
  return Ok();
}

Result<void> Key(client::SandboxHandle& sb, std::string_view combo) {
  std::vector<std::string> args = {"key", "--clearmodifiers"};
  std::string cur;
  for (char c : combo) {
    if (c == ' ') {
      if (!cur.empty()) args.push_back(std::move(cur));
      cur.clear();
      continue;
    }
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '+') {
      return Error::InvalidArgument("key: '" + std::string(combo) +
                                    "' is not a key combination: use X key names joined by "
                                    "'+' (e.g. ctrl+alt+t, Return, shift+Tab)");
    }
    cur.push_back(c);
  }
  if (!cur.empty()) args.push_back(std::move(cur));
  if (args.size() == 2) return Error::InvalidArgument("key: no key given");
  return Xdotool(sb, std::move(args));
}

}  // namespace agvisor::desktop
