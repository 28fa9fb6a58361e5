// agvisor watch NAME PATH: a directory's events inside a sandbox, one per line, until Ctrl-C,
// the directory going away, or the sandbox ending.
#include <signal.h>

#include <chrono>
#include <csignal>
#include <iostream>

#include "agvisor/api/codec.h"
#include "agvisor/cli/common.h"

namespace agvisor::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void OnInterrupt(int) { g_interrupted = 1; }

// "create src/a.txt", "create src/" (a directory), "move old -> new", "overflow ...". The paths
// are the sandbox's choice: escaped.
std::string EventLine(const WatchEvent& e) {
  const std::string dir = e.is_dir ? "/" : "";
  switch (e.kind) {
    case WatchEventKind::kMove:
      return "move " + EscapeForTerminal(e.old_path) + dir + " -> " + EscapeForTerminal(e.path) +
             dir;
    case WatchEventKind::kOverflow:
      return "overflow (events were lost: the reader was too slow; rescan what you need)";
    default:
      return std::string(proto::WatchEventKindName(e.kind)) + " " + EscapeForTerminal(e.path) + dir;
  }
}

int RunWatch(SandboxHandle& sb, const std::string& name, const std::string& path, bool recursive,
             bool json) {
  auto w = sb.Watch(path, recursive);
  if (!w.ok()) return ReportError(w.error());
  // For the lines printed here (ReportError escapes the messages it prints itself).
  const std::string where = EscapeForTerminal(name) + ":" + EscapeForTerminal(path);
  // Ctrl-C ends the watch cleanly (the agent's side is closed) instead of killing us mid-line.
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  std::cerr << "agvisor: watching " << where << (recursive ? " (recursive)" : "")
            << "; Ctrl-C to stop\n";
  while (!g_interrupted) {
    // Short waits, so an interrupt is seen within a quarter second.
    auto batch = (*w)->Next(std::chrono::milliseconds(250));
    if (!batch.ok()) {
      return ReportError(batch.error().WithContext("watch " + name + ":" + path));
    }
    if (!batch->has_value()) {
      std::cerr << "agvisor: watch " << where
                << " ended: the directory was deleted or moved away\n";
      return kExitOk;
    }
    for (const WatchEvent& e : **batch) {
      std::cout << (json ? api::WsWatchEventJson(e) : EventLine(e)) << "\n";
    }
    std::cout.flush();  // one event per line as it happens, also into a pipe
  }
  (*w)->Close();
  std::cerr << "agvisor: watch stopped (interrupted)\n";
  return kExitOk;
}

}  // namespace

void AddWatch(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto path = std::make_shared<std::string>();
  auto no_recursive = std::make_shared<bool>(false);
  auto* cmd =
      AddSandboxCommand(app, g, exit_code, "watch", [&g, path, no_recursive](SandboxHandle& sb) {
        return RunWatch(sb, sb.container_name(), *path, !*no_recursive, g.json);
      });
  cmd->add_option("path", *path, "absolute directory inside the sandbox, e.g. /workspace")
      ->required();
  cmd->add_flag("--no-recursive", *no_recursive, "watch PATH itself only, not its subdirectories");
}

}  // namespace agvisor::cli
