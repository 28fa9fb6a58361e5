// Desktops (docs/desktop.md): what Sandbox::Create needs of a `gui` sandbox (WaitReady) and the
// constants every desktop caller shares. The desktop verbs (password, screenshot, mouse, keys)
// work on any client::SandboxHandle: client/desktop.h. The protocols (VNC, RFB, PNG) are the
// pure code of desktop/.
//
// Inside the sandbox the agent runs Xvnc on display :0 (VNC on 127.0.0.1:5900, reachable only
// through the agent channel, so it works with network "none") and an xfce session of the
// desktop user (kDesktopUser, uid 1000, home /workspace: the kept volume of a named desktop).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor {
class Sandbox;
namespace desktop {

// The VNC port inside every desktop sandbox: connect with Sandbox::OpenPort(kVncPort).
inline constexpr std::uint16_t kVncPort = 5900;
// The RDP port inside a desktop sandbox whose image has xrdp (agvisor/desktop does): xrdp in
// front of the same Xvnc; the RDP password is the VNC one (client/desktop.h Password), any user
// name. Reached like VNC, through Sandbox::OpenPort(kRdpPort).
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

}  // namespace desktop
}  // namespace agvisor
