// Desktops: what a `gui` sandbox offers beyond exec and files (docs/desktop.md).
//
// Used by Sandbox::Create (WaitReady; the agent writes the password files, desktop/password.h), the
// CLI (`agvisor desktop`), agvisord and the Python binding: free functions on a Sandbox, plain
// values in and out. The protocols (VNC, RFB, PNG) are the pure code of desktop/.
//
// Inside the sandbox the agent runs Xvnc on display :0 (VNC on 127.0.0.1:5900, reachable only
// through the agent channel, so it works with network "none") and an xfce session of the
// desktop user (kDesktopUser, uid 1000, home /workspace: the kept volume of a named desktop).
// Computer use runs xdotool as that user through the channel (one exec each, ~10 ms); a
// screenshot is one VNC framebuffer capture (raw pixels through the channel, PNG made here).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/desktop/vnc.h"

namespace agvisor {
class Sandbox;
namespace desktop {

// The VNC port inside every desktop sandbox: connect with Sandbox::OpenPort(kVncPort).
inline constexpr std::uint16_t kVncPort = 5900;
// The RDP port inside a desktop sandbox whose image has xrdp (agvisor/desktop does): xrdp in
// front of the same Xvnc; the RDP password is Password(sb), any user name. Reached like VNC,
// through Sandbox::OpenPort(kRdpPort).
inline constexpr std::uint16_t kRdpPort = 3389;
// The desktop user: owns the session; computer-use commands run as it.
inline constexpr std::string_view kDesktopUser = "user";
// How long Sandbox::Create waits for a desktop before failing (the target is 10 s; the margin
// is for loaded hosts).
inline constexpr std::chrono::seconds kReadyTimeout{45};

// Waits until the desktop is ready: the agent says the panel and the desktop are drawn, and
// VNC answers on kVncPort with an RFB greeting. Errors: kTimeout (with the desktop's state and
// the last lines of its log), kInternal (the desktop failed: why, and its log), kSandboxDied.
Result<void> WaitReady(Sandbox& sandbox, std::chrono::milliseconds timeout = kReadyTimeout);

// The desktop's VNC password, read back from inside (works for resumed named desktops).
// Errors: kNotFound (not a desktop sandbox), kSandboxDied, kUnavailable.
Result<std::string> Password(Sandbox& sandbox);

struct ScreenSize {
  int width = 0, height = 0;
};
// The screen as RGB pixels / as a PNG file. One VNC connection each (handshake + one full
// framebuffer, ~4 MB at 1280x800 through the channel). Errors: those of Password and OpenPort,
// kPermissionDenied (password refused), kInternal (protocol).
Result<vnc::RgbImage> CaptureScreen(Sandbox& sandbox);
Result<std::string> Screenshot(Sandbox& sandbox);
Result<ScreenSize> GetScreenSize(Sandbox& sandbox);

enum class MouseButton { kLeft = 1, kMiddle = 2, kRight = 3 };
// Parses "left", "middle", "right" (or 1-3). Errors: kInvalidArgument.
Result<MouseButton> ParseMouseButton(std::string_view text);

// Input, as the desktop user through xdotool (TypeText: VNC). Coordinates are screen pixels from
// the top left; negative ones are refused (kInvalidArgument). Errors also: kInternal (xdotool
// failed: its message), kSandboxDied, kUnavailable.
Result<void> MouseMove(Sandbox& sandbox, int x, int y);
// Moves to (x, y) and clicks `count` times (2 = double click).
Result<void> Click(Sandbox& sandbox, int x, int y, MouseButton button = MouseButton::kLeft,
                   int count = 1);
// Presses at (x1, y1), moves to (x2, y2), releases.
Result<void> Drag(Sandbox& sandbox, int x1, int y1, int x2, int y2,
                  MouseButton button = MouseButton::kLeft);
// Moves to (x, y) and turns the wheel: dy > 0 scrolls down, dy < 0 up; dx > 0 right, < 0 left
// (in wheel steps).
Result<void> Scroll(Sandbox& sandbox, int x, int y, int dy, int dx = 0);
// Types UTF-8 text into the focused window, any characters ("héllo ✓"), through VNC key events
// ("\n" is Return, "\t" Tab). Errors: kInvalidArgument (invalid UTF-8, other control
// characters), kPermissionDenied/kUnavailable from VNC.
Result<void> TypeText(Sandbox& sandbox, std::string_view text);
// Presses a key combination in xdotool's syntax: "Return", "ctrl+alt+t", "ctrl+shift+Tab".
// Several combos separated by spaces are pressed in turn. Errors: kInvalidArgument for
// characters outside [A-Za-z0-9_+ ] (no xdotool options can be smuggled in).
Result<void> Key(Sandbox& sandbox, std::string_view combo);

}  // namespace desktop
}  // namespace agvisor
