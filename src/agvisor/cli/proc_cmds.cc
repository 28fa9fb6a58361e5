// ps, attach, kill: background processes (started with `exec --detach`).
#include <boost/json.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "agvisor/cli/common.h"
#include "agvisor/sandbox/types.h"

namespace agvisor::cli {
namespace {

// "TERM", "SIGTERM", "term" or a number.
Result<int> ParseSignal(std::string s) {
  if (s.empty()) return Error::InvalidArgument("kill: empty signal");
  if (s.find_first_not_of("0123456789") == std::string::npos) {
    if (s.size() > 3) return Error::InvalidArgument("kill: signal " + s + " out of range");
    int n = std::stoi(s);
    if (n <= 0 || n > 64) return Error::InvalidArgument("kill: signal " + s + " out of range");
    return n;
  }
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s.starts_with("SIG")) s.erase(0, 3);
  static const std::pair<const char*, int> kNames[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"STOP", SIGSTOP},
      {"CONT", SIGCONT}, {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}, {"WINCH", SIGWINCH}};
  for (const auto& [name, n] : kNames) {
    if (s == name) return n;
  }
  return Error::InvalidArgument("kill: unknown signal '" + s + "' (a number or e.g. TERM, KILL)");
}

}  // namespace

void AddPs(CLI::App& app, GlobalOptions& g, int* exit_code) {
  AddSandboxCommand(app, g, exit_code, "ps", [&g](SandboxHandle& sb) {
    auto list = sb.ListProcesses();
    if (!list.ok()) return ReportError(list.error());
    if (g.json) {
      boost::json::array a;
      for (const auto& p : *list) {
        boost::json::object o{{"pid", p.pid},
                              {"state", p.running ? "running" : "exited"},
                              {"command", p.argv0},
                              {"keep_awake", p.keep_awake}};
        if (p.running) {
          o["exit_code"] = nullptr;
        } else {
          o["exit_code"] = p.exit_code;
        }
        a.push_back(std::move(o));
      }
      std::cout << boost::json::serialize(a) << "\n";
      return kExitOk;
    }
    // AWAKE: started with exec --detach --keep-awake.
    std::printf("%-8s %-8s %-5s %-5s %s\n", "PID", "STATE", "EXIT", "AWAKE", "COMMAND");
    for (const auto& p : *list) {
      std::string exit = p.running ? "-" : std::to_string(p.exit_code);
      std::printf("%-8u %-8s %-5s %-5s %s\n", p.pid, p.running ? "running" : "exited", exit.c_str(),
                  p.keep_awake ? "yes" : "-", EscapeForTerminal(p.argv0).c_str());
    }
    return kExitOk;
  });
}

void AddAttach(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto pid = std::make_shared<std::uint32_t>(0);
  auto* cmd = AddSandboxCommand(app, g, exit_code, "attach", [pid](SandboxHandle& sb) {
    channel::ExecCallbacks cb;
    cb.on_stdout = [](std::string_view b) { WriteAll(1, b); };
    cb.on_stderr = [](std::string_view b) { WriteAll(2, b); };
    auto exit = sb.AttachProcess(*pid, cb);
    return exit.ok() ? exit->exit_code : ReportExecError(exit.error());
  });
  cmd->add_option("pid", *pid, "the pid `exec --detach` printed (see ps)")->required();
}

void AddKill(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "kill");
  auto pid = std::make_shared<std::uint32_t>(0);
  auto signal = std::make_shared<std::string>("TERM");
  cmd->add_option("-s,--signal", *signal, "signal name or number, e.g. TERM, KILL, INT, 9")
      ->capture_default_str();
  auto name = AddSandboxArg(*cmd);
  cmd->add_option("pid", *pid, "the pid `exec --detach` printed (see ps)")->required();
  cmd->callback([&g, exit_code, name, pid, signal] {
    auto sig = ParseSignal(*signal);
    if (!sig.ok()) {
      *exit_code = ReportError(sig.error());
      return;
    }
    *exit_code = OnSandbox(g, *name, [&](SandboxHandle& sb) {
      auto r = sb.Signal(*pid, *sig);
      return r.ok() ? kExitOk : ReportError(r.error());
    });
  });
}

}  // namespace agvisor::cli
