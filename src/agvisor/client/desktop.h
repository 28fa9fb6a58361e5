// The desktop verbs (docs/desktop.md): what a `gui` sandbox offers beyond exec and files, on a
// client::SandboxHandle, so they work wherever a handle does: in process and through agvisord
// (whose port WebSocket carries VNC). Written once over the handle's Exec, ReadFilePrefix and
// OpenPort; used by the CLI (`agvisor desktop`), the MCP server's desktop tools, the Python
// package and agvisord's desktop token. Sandbox::Create's own wait for a new desktop
// (WaitReady) and the constants (ports, user) are sandbox/desktop.h's.
//
// A screenshot is one VNC framebuffer capture (raw pixels through the port stream, PNG made
// here); mouse and keys are xdotool as the desktop user (one exec each, ~10 ms); typed text is
// VNC key events. Every value the sandbox sends back (the password, the VNC server's answers) is
// checked before use: the sandbox is hostile.
#pragma once

#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/client/place.h"
#include "agvisor/desktop/vnc.h"
#include "agvisor/sandbox/desktop.h"

namespace agvisor::desktop {

// The desktop's VNC password, read back from inside (works for resumed named desktops): at most
// 9 bytes are read, and only what the agent makes (8 of [A-Za-z0-9]) is accepted. Errors:
// kNotFound (not a desktop sandbox), kInternal (the file was changed inside), kSandboxDied,
// kUnavailable.
Result<std::string> Password(client::SandboxHandle& sandbox);

struct ScreenSize {
  int width = 0, height = 0;
};
// The screen as RGB pixels / as a PNG file. One VNC connection each (handshake + one full
// framebuffer, ~4 MB at 1280x800). Errors: those of Password and OpenPort, kPermissionDenied
// (password refused), kInternal (protocol).
Result<vnc::RgbImage> CaptureScreen(client::SandboxHandle& sandbox);
Result<std::string> Screenshot(client::SandboxHandle& sandbox);
Result<ScreenSize> GetScreenSize(client::SandboxHandle& sandbox);

enum class MouseButton { kLeft = 1, kMiddle = 2, kRight = 3 };
// Parses "left", "middle", "right" (or 1-3). Errors: kInvalidArgument.
Result<MouseButton> ParseMouseButton(std::string_view text);

// Input, as the desktop user through xdotool (TypeText: VNC). Coordinates are screen pixels from
// the top left, 0..65535 (others: kInvalidArgument). Errors also: kNotFound (xdotool missing:
// not the desktop image), kInternal (xdotool failed: its message), kSandboxDied, kUnavailable.
Result<void> MouseMove(client::SandboxHandle& sandbox, int x, int y);
// Moves to (x, y) and clicks `count` (1..10) times (2 = double click).
Result<void> Click(client::SandboxHandle& sandbox, int x, int y,
                   MouseButton button = MouseButton::kLeft, int count = 1);
// Presses at (x1, y1), moves to (x2, y2), releases.
Result<void> Drag(client::SandboxHandle& sandbox, int x1, int y1, int x2, int y2,
                  MouseButton button = MouseButton::kLeft);
// Moves to (x, y) and turns the wheel: dy > 0 scrolls down, dy < 0 up; dx > 0 right, < 0 left
// (in wheel steps, at most 100 each way).
Result<void> Scroll(client::SandboxHandle& sandbox, int x, int y, int dy, int dx = 0);
// Types UTF-8 text into the focused window, any characters ("héllo ✓"), through VNC key events
// ("\n" is Return, "\t" Tab). Errors: kInvalidArgument (invalid UTF-8, a NUL, other control
// characters), kPermissionDenied/kUnavailable from VNC.
Result<void> TypeText(client::SandboxHandle& sandbox, std::string_view text);
// Presses key combinations in xdotool's syntax, in turn: "Return", "ctrl+alt+t", "ctrl+c Return".
// Errors: kInvalidArgument for characters outside [A-Za-z0-9_+ ] (no xdotool option can be
// smuggled in) or no key at all.
Result<void> Key(client::SandboxHandle& sandbox, std::string_view combos);

}  // namespace agvisor::desktop
