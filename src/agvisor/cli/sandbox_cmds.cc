// create, run, exec, ls, stop, rm, pause, resume, update.
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>

#include "agvisor/cli/common.h"
#include "agvisor/sandbox/types.h"

namespace agvisor::cli {
namespace {

struct ExecFlags {
  double timeout = 120;
  std::vector<std::string> env;
  std::string cwd;
  std::string user;
  bool stdin_input = false;
  std::vector<std::string> command;
  CLI::Option* timeout_option = nullptr;

  // Whether the command gets a timeout: always, except with --stdin and no -t (a command fed
  // from a pipe or a person lives as long as its input, as with `docker exec -i`; ending this
  // client ends it).
  bool HasTimeout() const { return !stdin_input || timeout_option->count() > 0; }

  void Add(CLI::App& cmd) {
    timeout_option = cmd.add_option("-t,--timeout", timeout,
                                    "seconds; at the deadline the whole process tree is killed "
                                    "and the exit code is 124 (with -i: none unless given)")
                         ->capture_default_str();
    cmd.add_option("-e,--env", env, "KEY=VALUE for the command (repeatable)")
        ->allow_extra_args(false);  // one value each: `-e K=V -- cmd` ends at `--`
    cmd.add_option("-w,--cwd", cwd, "working directory inside the sandbox");
    cmd.add_option("-u,--user", user, "user inside the sandbox");
    cmd.add_flag("-i,--stdin", stdin_input,
                 "stream this process's stdin to the command as it comes (any size; the command "
                 "may answer before it ends). No timeout unless -t is given");
    cmd.add_option("command", command, "the command and its arguments (after --)")->required();
  }

  Result<ExecOptions> Build() const {
    ExecOptions o;
    o.timeout = timeout;
    o.env = env;
    o.cwd = cwd;
    o.user = user;
    // Live output: stdout to stdout, stderr to stderr, as it arrives.
    o.on_stdout = [](std::string_view b) { WriteAll(1, b); };
    o.on_stderr = [](std::string_view b) { WriteAll(2, b); };
    return o;
  }
};

// The command line as given: one argument runs through `sh -c` (like the seed's exec), several
// run as argv.
std::vector<std::string> CommandArgv(const std::vector<std::string>& command) {
  if (command.size() == 1) return {"sh", "-c", command.front()};
  return command;
}

Result<ExecResult> RunIn(SandboxHandle& sb, const ExecFlags& f) {
  auto o = AGVISOR_TRY(f.Build());
  if (!f.stdin_input) return sb.Exec(CommandArgv(f.command), o);
  // --stdin: streamed as it comes (any size, in bounded memory; a command that reads a line
  // at a time answers before stdin ends), through a process with the same exit semantics. A
  // given -t is checked as for Exec (a process would take 0 as "none").
  ProcessOptions po = AGVISOR_TRY(client::ProcessOptionsFor(o));
  po.stdin = true;
  if (!f.HasTimeout()) po.timeout = 0;  // none
  auto p = AGVISOR_TRY(sb.Start(CommandArgv(f.command), po));
  auto exit = AGVISOR_TRY(RunFeedingStdin(*p, {o.on_stdout, o.on_stderr}, /*pty=*/false));
  ExecResult r;
  r.exit_code = exit.exit_code;
  r.timed_out = exit.timed_out;
  return r;
}

void PrintWarning(const Created& c) {
  static bool warned = false;
  if (!c.disk_warning.empty() && !warned) {
    warned = true;
    std::cerr << "agvisor: warning: " << EscapeForTerminal(c.disk_warning) << "\n";
  }
}

// The desktop image is not built with the host (scripts/setup-host builds only what the first
// run needs): the first --gui create on a host builds it, here, with debootstrap's progress.
// Through agvisord the daemon's host is not reachable from here: its create names the fix.
Result<void> EnsureDesktopImage(GlobalOptions& g) {
  Place* place = AGVISOR_TRY(g.GetPlace());
  const std::string image(kDefaultDesktopImage);
  client::ImageBuildOptions o{.kind = "desktop", .name = image, .if_missing = true};
  bool missing = false;
  o.on_build = [&missing, &image] {
    missing = true;
    if (geteuid() != 0) return;  // refused by the build: said below
    std::cerr << "agvisor: the desktop image " << EscapeForTerminal(image)
              << " is not on this host yet: building it once (debootstrap of Xvnc, xfce and "
                 "Firefox, then an import; about 4 minutes on 2 cores)\n";
  };
  o.progress = [](std::string_view line) { std::cerr << EscapeForTerminal(line) << "\n"; };
  auto built = place->BuildImage(o);
  if (!built.ok() && missing && geteuid() != 0) {
    return Error::NotFound("the desktop image " + image +
                           " is not on this host yet; the first --gui sandbox builds it, which "
                           "needs root: run `sudo agvisor image build desktop` once (about 4 "
                           "minutes on 2 cores), then this command again");
  }
  if (!built.ok()) return built.error();
  return Ok();
}

// Creates the sandbox of `opts` where the run's sandboxes live.
Result<Created> CreateFrom(GlobalOptions& g, const SpecOptions& opts) {
  auto spec = AGVISOR_TRY(opts.Build(g));
  if (spec.gui && g.server.empty() && (spec.image.empty() || spec.image == kDefaultDesktopImage)) {
    AGVISOR_RETURN_IF_ERROR(EnsureDesktopImage(g));
  }
  Place* b = AGVISOR_TRY(g.GetPlace());
  return b->Create(spec);
}

boost::json::object InfoJson(const SandboxInfo& i) {
  boost::json::object o;
  o["container"] = i.container_name;
  o["name"] = i.name ? boost::json::value(*i.name) : boost::json::value(nullptr);
  o["id"] = i.container_id;
  o["image"] = i.image;
  o["state"] = i.state;
  o["running"] = i.running;
  o["platform"] = i.platform.empty() ? boost::json::value(nullptr) : boost::json::value(i.platform);
  o["host"] = i.host;
  return o;
}

}  // namespace

void AddCreate(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "create");
  auto opts = std::make_shared<SpecOptions>();
  opts->Add(*cmd);
  cmd->callback([&g, exit_code, opts] {
    auto sb = CreateFrom(g, *opts);
    if (!sb.ok()) {
      *exit_code = ReportError(sb.error());
      return;
    }
    PrintWarning(*sb);
    if (g.json) {
      boost::json::object o;
      o["container"] = sb->handle->container_name();
      o["name"] = sb->name ? boost::json::value(*sb->name) : nullptr;
      o["resumed"] = sb->resumed;
      o["data_dir"] = sb->name ? "/workspace" : "";
      std::cout << boost::json::serialize(o) << "\n";
    } else {
      std::cout << EscapeForTerminal(sb->handle->container_name()) << "\n";
    }
  });
}

void AddRun(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "run");
  auto opts = std::make_shared<SpecOptions>();
  auto flags = std::make_shared<ExecFlags>();
  opts->Add(*cmd);
  flags->Add(*cmd);
  auto keep = std::make_shared<bool>(false);
  cmd->add_flag("--keep", *keep, "leave the sandbox running afterwards");
  cmd->callback([&g, exit_code, opts, flags, keep] {
    // Validate the exec options before paying for a sandbox.
    if (flags->HasTimeout()) {
      if (auto v = ValidateExecTimeout(flags->timeout, opts->spec.idle_ttl); !v.ok()) {
        *exit_code = ReportError(v.error());
        return;
      }
    }
    auto sb = CreateFrom(g, *opts);
    if (!sb.ok()) {
      *exit_code = ReportError(sb.error());
      return;
    }
    PrintWarning(*sb);
    auto r = RunIn(*sb->handle, *flags);
    const std::string cname = sb->handle->container_name();
    if (!*keep) {
      // As Sandbox::Stop: the container goes, a named sandbox keeps its volume.
      auto s = (*g.GetPlace())->Remove(cname, /*erase_data=*/false);
      // Gone already: an anonymous sandbox that ended (lifetime, OOM) removes itself.
      if (!s.ok() && s.error().code() != ErrorCode::kNotFound) ReportError(s.error());
    } else {
      std::cerr << "agvisor: sandbox " << EscapeForTerminal(cname) << " left running\n";
    }
    if (!r.ok()) {
      int rc = ReportError(r.error());
      *exit_code = rc == kExitSandboxDied ? rc : kExitExecFailure;
      return;
    }
    if (r->timed_out) {
      std::cerr << "agvisor: timed out after " << flags->timeout << " s\n";
    }
    *exit_code = r->exit_code;
  });
}

void AddExec(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "exec");
  auto name = AddSandboxArg(*cmd);
  auto flags = std::make_shared<ExecFlags>();
  flags->Add(*cmd);
  auto detach = std::make_shared<bool>(false);
  cmd->add_flag("-d,--detach", *detach,
                "start the command in the background and print its pid; it keeps running after "
                "this client exits (see ps, attach, kill). No timeout unless -t is given");
  auto keep_awake = std::make_shared<bool>(false);
  cmd->add_flag("--keep-awake", *keep_awake,
                "with --detach: while the command runs the sandbox is not idle, so its idle_ttl "
                "does not end, stop or pause it; the idle clock starts when the command exits");
  cmd->callback([&g, exit_code, name, flags, detach, keep_awake, cmd] {
    if (*detach && flags->stdin_input) {
      *exit_code = ReportError(Error::InvalidArgument("exec: --detach and --stdin do not mix"));
      return;
    }
    if (*keep_awake && !*detach) {
      *exit_code = ReportError(Error::InvalidArgument(
          "exec: --keep-awake needs --detach (a command run in the foreground is already "
          "activity while it runs)"));
      return;
    }
    *exit_code = OnSandbox(g, *name, [&](SandboxHandle& sb) {
      if (*detach) {
        BackgroundOptions o;
        if (cmd->count("--timeout") > 0) o.timeout = flags->timeout;
        o.env = flags->env;
        o.cwd = flags->cwd;
        o.user = flags->user;
        o.keep_awake = *keep_awake;
        auto pid = sb.StartBackground(CommandArgv(flags->command), o);
        if (!pid.ok()) return ReportExecError(pid.error());
        if (g.json) {
          std::cout << boost::json::serialize(boost::json::object{{"pid", *pid}}) << "\n";
        } else {
          std::cout << *pid << "\n";
        }
        return kExitOk;
      }
      auto r = RunIn(sb, *flags);
      return r.ok() ? r->exit_code : ReportExecError(r.error());
    });
  });
}

void AddList(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "ls");
  cmd->alias("list");
  auto size = std::make_shared<bool>(false);
  cmd->add_flag("--size", *size,
                "also the size of each named sandbox's /workspace volume (SIZE; --json: "
                "volume_bytes). Docker walks every volume to count it: slow on big ones");
  cmd->callback([&g, exit_code, size] {
    auto place = g.GetPlace();
    if (!place.ok()) {
      *exit_code = ReportError(place.error());
      return;
    }
    auto list = (*place)->List();
    if (!list.ok()) {
      *exit_code = ReportError(list.error());
      return;
    }
    // The volumes' sizes, by volume name (= the container name of a named sandbox).
    std::map<std::string, std::int64_t> sizes;
    if (*size) {
      auto v = (*place)->VolumeSizes();
      if (!v.ok()) {
        *exit_code = ReportError(v.error());
        return;
      }
      sizes = std::move(*v);
    }
    auto size_of = [&](const SandboxInfo& i) -> std::optional<std::int64_t> {
      auto it = sizes.find(i.container_name);
      if (!i.name || it == sizes.end() || it->second < 0) return std::nullopt;
      return it->second;
    };
    if (g.json) {
      boost::json::array a;
      for (const auto& i : *list) {
        auto o = InfoJson(i);
        if (*size) {
          auto n = size_of(i);
          o["volume_bytes"] = n ? boost::json::value(*n) : boost::json::value(nullptr);
        }
        a.push_back(std::move(o));
      }
      std::cout << boost::json::serialize(a) << "\n";
      return;
    }
    std::printf("%-32s %-20s %-10s %-8s %s%s\n", "CONTAINER", "NAME", "STATE", "PLATFORM",
                *size ? "SIZE       " : "", "IMAGE");
    bool stopped = false;
    for (const auto& i : *list) {
      stopped = stopped || i.state == "stopped";
      std::string shown_size;
      if (*size) {
        char buf[32] = "-";
        if (auto n = size_of(i)) {
          std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(*n) / (1 << 20));
        }
        shown_size = buf;
        shown_size.resize(std::max<std::size_t>(shown_size.size() + 1, 11), ' ');
      }
      std::printf("%-32s %-20s %-10s %-8s %s%s\n", EscapeForTerminal(i.container_name).c_str(),
                  i.name ? EscapeForTerminal(*i.name).c_str() : "-",
                  EscapeForTerminal(i.state).c_str(),
                  i.platform.empty() ? "-" : EscapeForTerminal(i.platform).c_str(),
                  shown_size.c_str(), i.image.empty() ? "-" : EscapeForTerminal(i.image).c_str());
    }
    if (stopped) {
      std::cerr << "agvisor: stopped: only /workspace is kept; `agvisor create --name NAME` "
                   "resumes on it, `agvisor rm NAME` erases it\n";
    }
  });
}

namespace {

// Adds subcommand `name` on one or more sandboxes (positional "sandbox", repeatable): each is
// handed to `act` on the place by its container name and printed when done; a failure is
// reported and sets the exit code, and the others are still tried.
CLI::App* AddEachSandboxCommand(CLI::App& app, GlobalOptions& g, int* exit_code,
                                std::string_view name,
                                std::function<Result<void>(Place&, std::string_view)> act) {
  auto* cmd = AddCommand(app, name);
  auto names = std::make_shared<std::vector<std::string>>();
  cmd->add_option("sandbox", *names, "sandbox names")->required();
  cmd->callback([&g, exit_code, names, act = std::move(act)] {
    auto place = g.GetPlace();
    if (!place.ok()) {
      *exit_code = ReportError(place.error());
      return;
    }
    for (const auto& n : *names) {
      const std::string cname = ResolveContainerName(n);
      if (auto r = act(**place, cname); !r.ok()) {
        *exit_code = ReportError(r.error());
      } else if (!g.json) {
        std::cout << EscapeForTerminal(cname) << "\n";
      }
    }
  });
  return cmd;
}

}  // namespace

void AddPause(CLI::App& app, GlobalOptions& g, int* exit_code) {
  AddEachSandboxCommand(app, g, exit_code, "pause",
                        [](Place& p, std::string_view c) { return p.Pause(c); });
}

void AddResume(CLI::App& app, GlobalOptions& g, int* exit_code) {
  AddEachSandboxCommand(app, g, exit_code, "resume",
                        [](Place& p, std::string_view c) { return p.Resume(c); });
}

void AddUpdate(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "update");
  struct Flags {
    std::string sandbox;
    double cpus = 0;
    std::string memory;
    std::int64_t pids = 0;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("sandbox", f->sandbox, "sandbox name")->required();
  auto* cpus = cmd->add_option("--cpus", f->cpus, "CPU cores (fractions allowed)");
  auto* memory = cmd->add_option("--memory", f->memory, "RAM cap, e.g. 512m, 1.5g (no swap)");
  auto* pids = cmd->add_option("--pids", f->pids, "max processes inside (1-65536)");
  cmd->callback([&g, exit_code, f, cpus, memory, pids] {
    LimitsUpdate u;
    if (cpus->count() > 0) u.cpus = f->cpus;
    if (memory->count() > 0) u.memory = f->memory;
    if (pids->count() > 0) u.pids = f->pids;
    // Refused before any host is reached.
    if (auto v = ValidateLimitsUpdate(u); !v.ok()) {
      *exit_code = ReportError(v.error());
      return;
    }
    auto place = g.GetPlace();
    if (!place.ok()) {
      *exit_code = ReportError(place.error());
      return;
    }
    const std::string cname = ResolveContainerName(f->sandbox);
    auto live = (*place)->Update(cname, u);
    if (!live.ok()) {
      *exit_code = ReportError(live.error());
      return;
    }
    if (g.json) {
      boost::json::object o{{"sandbox", cname},
                            {"cpus", live->cpus},
                            {"memory_bytes", live->memory_bytes},
                            {"pids", live->pids},
                            {"source", live->source}};
      std::cout << boost::json::serialize(o) << "\n";
      return;
    }
    auto none = [](bool unset, std::string v) { return unset ? std::string("none") : v; };
    char cpu_text[32];
    std::snprintf(cpu_text, sizeof cpu_text, "%g", live->cpus);
    std::cout << EscapeForTerminal(cname) << ": cpus " << none(live->cpus == 0, cpu_text)
              << ", memory "
              << none(live->memory_bytes == 0, std::to_string(live->memory_bytes >> 20) + "m")
              << ", pids " << none(live->pids == 0, std::to_string(live->pids)) << "\n";
  });
}

void AddStop(CLI::App& app, GlobalOptions& g, int* exit_code) {
  AddEachSandboxCommand(app, g, exit_code, "stop",
                        [](Place& p, std::string_view c) { return p.Remove(c, false); });
}

void AddRemove(CLI::App& app, GlobalOptions& g, int* exit_code) {
  AddEachSandboxCommand(app, g, exit_code, "rm", [](Place& p, std::string_view c) {
    return p.Remove(c, true);
  })->alias("delete");
}

}  // namespace agvisor::cli
