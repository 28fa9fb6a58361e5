#include "agvisor/client/desktop.h"

namespace agvisor::client {
namespace {

Result<Sandbox*> Library(SandboxHandle& sandbox, std::string_view verb) {
  if (Sandbox* sb = sandbox.library()) return sb;
  return Error::Unsupported(
      "desktop " + std::string(verb) + " of " + sandbox.container_name() +
      ": desktop verbs work on the Docker host, not through agvisord (run the caller on the "
      "daemon's host without --server, or use agvisord's /mcp, which runs them in the daemon)");
}

}  // namespace

Result<std::string> DesktopScreenshot(SandboxHandle& sandbox) {
  return desktop::Screenshot(*AGVISOR_TRY(Library(sandbox, "screenshot")));
}

Result<void> DesktopMove(SandboxHandle& sandbox, int x, int y) {
  return desktop::MouseMove(*AGVISOR_TRY(Library(sandbox, "move")), x, y);
}

Result<void> DesktopClick(SandboxHandle& sandbox, int x, int y, std::string_view button,
                          int count) {
  Sandbox* sb = AGVISOR_TRY(Library(sandbox, "click"));
  return desktop::Click(*sb, x, y, AGVISOR_TRY(desktop::ParseMouseButton(button)), count);
}

Result<void> DesktopScroll(SandboxHandle& sandbox, int x, int y, int dy, int dx) {
  return desktop::Scroll(*AGVISOR_TRY(Library(sandbox, "scroll")), x, y, dy, dx);
}

Result<void> DesktopType(SandboxHandle& sandbox, std::string_view text) {
  return desktop::TypeText(*AGVISOR_TRY(Library(sandbox, "type")), text);
}

Result<void> DesktopKey(SandboxHandle& sandbox, std::string_view combos) {
  return desktop::Key(*AGVISOR_TRY(Library(sandbox, "key")), combos);
}

}  // namespace agvisor::client
