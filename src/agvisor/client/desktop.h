// The desktop verbs of sandbox/desktop.h (screenshot, mouse, keyboard) on a client handle, for
// callers written against place.h (the MCP server). They need the library's Sandbox behind the
// handle (SandboxHandle::library()): in process they work; through agvisord, which has no desktop
// routes for them, each returns kUnsupported saying so.
#pragma once

#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/client/place.h"
#include "agvisor/sandbox/desktop.h"

namespace agvisor::client {

// The screen as a PNG file. Errors: kUnsupported (through agvisord), desktop::Screenshot's.
Result<std::string> DesktopScreenshot(SandboxHandle& sandbox);
// As desktop::MouseMove / Click / Scroll / TypeText / Key (ParseMouseButton's names for
// `button`). Errors: kUnsupported (through agvisord), kInvalidArgument, the verb's.
Result<void> DesktopMove(SandboxHandle& sandbox, int x, int y);
Result<void> DesktopClick(SandboxHandle& sandbox, int x, int y, std::string_view button, int count);
Result<void> DesktopScroll(SandboxHandle& sandbox, int x, int y, int dy, int dx);
Result<void> DesktopType(SandboxHandle& sandbox, std::string_view text);
Result<void> DesktopKey(SandboxHandle& sandbox, std::string_view combos);

}  // namespace agvisor::client
