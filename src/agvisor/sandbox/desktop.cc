#include "agvisor/sandbox/desktop.h"

#include <thread>

#include "agvisor/desktop/password.h"
#include "agvisor/sandbox/sandbox.h"

namespace agvisor::desktop {
namespace {

std::string DirPath(std::string_view file) {
  return std::string(kDesktopDir) + "/" + std::string(file);
}

// The last `n` lines of `text`.
std::string Tail(std::string_view text, int n) {
  std::size_t at = text.size();
  while (n-- > 0 && at > 0) {
    at = text.rfind('\n', at - 1);
    if (at == std::string_view::npos) return std::string(text);
  }
  return std::string(text.substr(at == 0 ? 0 : at + 1));
}

std::string Indent(std::string_view text) {
  std::string out;
  for (char c : text) {
    out.push_back(c);
    if (c == '\n') out += "  ";
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.pop_back();
  return out;
}

}  // namespace

Result<void> WaitReady(Sandbox& sb, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string state;
  for (;;) {
    auto s = sb.ReadFile(DirPath("state"));
    if (s.ok()) {
      state = *s;
      if (state.starts_with("ready")) break;
      if (state.starts_with("failed")) {
        auto log = sb.ReadFile(DirPath("desktop.log"));
        return Error::Internal("the desktop of " + sb.container_name() +
                               " did not start: " + Indent(state) +
                               (log.ok() ? "\n  log:\n  " + Indent(Tail(*log, 15)) : ""));
      }
    } else if (s.error().code() != ErrorCode::kNotFound) {
      return s.error().WithContext("read the desktop's state");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      auto log = sb.ReadFile(DirPath("desktop.log"));
      return Error::Timeout(
          "the desktop of " + sb.container_name() + " was not ready after " +
          std::to_string(timeout.count() / 1000) + " s (state: " +
          (state.empty() ? std::string("none: was the sandbox created with gui?") : Indent(state)) +
          ")" + (log.ok() ? "\n  log:\n  " + Indent(Tail(*log, 15)) : ""));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The session saw its windows; VNC must also answer (Xvnc listens before X clients can
  // connect, so this is one round trip).
  auto port = AGVISOR_TRY(sb.OpenPort(kVncPort));
  char greeting[12];
  std::size_t got = 0;
  while (got < sizeof greeting) {
    auto n = AGVISOR_TRY(port->Read(std::span<char>(greeting + got, sizeof greeting - got)));
    if (n == 0) break;
    got += n;
  }
  port->Close();
  if (std::string_view(greeting, got) != "RFB 003.008\n") {
    return Error::Internal("the desktop of " + sb.container_name() +
                           ": port 5900 did not greet as a VNC server (got '" +
                           std::string(greeting, got) + "')");
  }
  return Ok();
}

}  // namespace agvisor::desktop
