// A desktop's VNC password and where it lives inside a desktop sandbox.
//
// On base/ only (with des.h), for the in-sandbox agent: a desktop's agent makes a new password
// each time it starts the desktop (agent/desktop.h) and writes both files below, root only;
// sandbox/desktop.cc reads the plain one back through the channel for the desktop verbs and
// checks it with IsPassword (the sandbox may have replaced it). Pure apart from the kernel's
// random numbers: no I/O.
#pragma once

#include <string>
#include <string_view>

namespace agvisor::desktop {

// Where the agent keeps the desktop's password files, state and log (root only).
inline constexpr std::string_view kDesktopDir = "/run/agvisor/desktop";
// In kDesktopDir: the plain password (read back by the host) and the Xvnc password file
// (vnc::VncPasswordFile).
inline constexpr std::string_view kPasswordFile = "password";
inline constexpr std::string_view kVncPasswordFile = "vnc.passwd";

// A new random VNC password: 8 characters from [A-Za-z0-9] (VNC uses at most 8).
std::string NewPassword();

// Whether `s` is what NewPassword makes: exactly 8 of [A-Za-z0-9].
bool IsPassword(std::string_view s);

}  // namespace agvisor::desktop
