// A desktop's VNC password and the files that carry it into the sandbox.
//
// Used by Sandbox::Create (a new password for every desktop container, put in before start as
// PasswordArchive) and by sandbox/desktop.cc, which reads the plain password back for the
// desktop verbs. Inside, the agent's desktop (agent/desktop.h) hands the Xvnc password file to
// Xvnc. Pure apart from the kernel's random numbers: no I/O.
#pragma once

#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::desktop {

// Where the agent keeps the desktop's password files, state and log (root only).
inline constexpr std::string_view kDesktopDir = "/run/agvisor/desktop";
// In kDesktopDir: the plain password (read back by the host) and the Xvnc password file.
inline constexpr std::string_view kPasswordFile = "password";
inline constexpr std::string_view kVncPasswordFile = "vnc.passwd";

// A new random VNC password: 8 characters from [A-Za-z0-9] (VNC uses at most 8).
std::string NewPassword();

// The tar archive (paths relative to /) the host uploads before start: kDesktopDir with the
// plain password and the Xvnc password file (vnc::VncPasswordFile), both 0600 root. Errors:
// kInvalidArgument (a password of 0 or more than 8 characters).
Result<std::string> PasswordArchive(std::string_view password);

}  // namespace agvisor::desktop
