#include "agvisor/sandbox/docker_runtime/runtime_check.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "agvisor/base/subprocess.h"
#include "agvisor/docker/client.h"
#include "agvisor/http/client.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor {
namespace {

using Clock = std::chrono::steady_clock;

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// A word for sh: single-quoted, with each ' written as '\''.
std::string ShellWord(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string FirstLine(std::string_view s) {
  auto end = s.find('\n');
  std::string line(s.substr(0, end));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return line;
}

std::string Join(const std::vector<std::string>& v, std::string_view sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : std::string(sep)) + x;
  return s;
}

// Runs argv with a deadline, keeping the first 4 KiB of its stdout and stderr together.
struct Ran {
  bool finished = false;
  ExitStatus status;
  std::string output;
};
Result<Ran> RunBounded(std::vector<std::string> argv, std::chrono::milliseconds timeout) {
  auto p = AGVISOR_TRY(
      Subprocess::Spawn({.argv = std::move(argv), .pipe_stdout = true, .stderr_to_stdout = true}));
  Ran r;
  const auto deadline = Clock::now() + timeout;
  char buf[4096];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return r;  // p's destructor kills and reaps it
    pollfd pfd{p.stdout_fd().get(), POLLIN, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = ::read(p.stdout_fd().get(), buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF: the program (and anything it started) closed its output
    if (r.output.size() < sizeof buf) r.output.append(buf, static_cast<std::size_t>(got));
  }
  auto st = p.WaitFor(std::chrono::duration_cast<std::chrono::milliseconds>(
      std::max(deadline - Clock::now(), Clock::duration(std::chrono::milliseconds(100)))));
  if (!st.ok()) return r;
  r.finished = true;
  r.status = *st;
  return r;
}

// Asks the binary at `path` on the Docker host what it is. The path is what /info reports:
// absolute, or a name dockerd looks up in its PATH (which may hold sbin directories that a
// login shell's lacks, hence the extra ones).
RuntimeIdentity Identify(const http::Endpoint& endpoint, const std::string& name,
                         const docker::RuntimeInfo& rt) {
  RuntimeIdentity id{.name = name, .path = rt.path, .args = rt.args};
  if (rt.path.empty()) {
    id.evidence = "Docker reports no binary path for it";
    id.conclusive = true;
    return id;
  }
  if (endpoint.kind == http::Endpoint::Kind::kTcp) {
    id.evidence =
        "the binaries of a tcp:// Docker host cannot be asked from here (reach that "
        "host over ssh://USER@HOST so agvisor can check its runtimes)";
    id.conclusive = true;
    return id;
  }
  const std::string script =
      "PATH=\"$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"; export PATH; "
      "exec " +
      ShellWord(rt.path) + " --version";
  std::vector<std::string> argv;
  std::chrono::milliseconds timeout{10000};
  if (endpoint.kind == http::Endpoint::Kind::kSsh) {
    http::ClientOptions options;
    options.ssh_args = HostSshArgs();
    argv = http::SshRemoteCommandLine(endpoint, options, "sh -c " + ShellWord(script));
    timeout += options.connect_timeout;
  } else {
    argv = {"sh", "-c", script};
  }
  auto ran = RunBounded(std::move(argv), timeout);
  if (!ran.ok()) {
    id.evidence = "could not be asked: " + ran.error().message();
  } else if (!ran->finished) {
    id.evidence = "`" + rt.path + " --version` did not answer within " +
                  std::to_string(timeout.count() / 1000) + " s";
  } else {
    id.conclusive = true;
    id.evidence = FirstLine(ran->output);
    if (id.evidence.empty()) id.evidence = "(no output, " + ran->status.ToString() + ")";
    id.gvisor = ran->status.success() && IsRunscVersionOutput(ran->output);
  }
  return id;
}

// The host's runtime list: the copy held, unless it lacks `need` (a runtime registered since:
// SIGHUP makes dockerd read daemon.json again).
Result<docker::SystemInfo> HostInfo(RuntimeCheckCache& cache, docker::Client& client,
                                    std::string_view need) {
  {
    std::lock_guard lock(cache.mu);
    if (cache.info && (need.empty() || cache.info->runtimes.contains(std::string(need)))) {
      return *cache.info;
    }
  }
  auto info = AGVISOR_TRY(client.Info());
  std::lock_guard lock(cache.mu);
  cache.info = std::make_shared<const docker::SystemInfo>(info);
  return info;
}

IdentifyRuntimeFn CachedIdentify(RuntimeCheckCache& cache, const http::Endpoint& endpoint) {
  return [&cache, endpoint](const std::string& name, const docker::RuntimeInfo& rt) {
    std::string key = name + '\0' + rt.path;
    for (const auto& a : rt.args) key += '\0' + a;
    {
      std::lock_guard lock(cache.mu);
      if (auto it = cache.ids.find(key); it != cache.ids.end()) return it->second;
    }
    RuntimeIdentity id = Identify(endpoint, name, rt);
    if (id.conclusive) {
      std::lock_guard lock(cache.mu);
      cache.ids[key] = id;
    }
    return id;
  };
}

std::string Where(std::string_view host) {
  return host.empty() ? std::string("this host") : std::string(host);
}

}  // namespace

std::string NoneTwinOf(std::string_view runtime) { return std::string(runtime) + "-none"; }

std::string PlatformRuntimeOf(std::string_view runtime, std::string_view platform) {
  if (platform.empty() || platform == "systrap") return std::string(runtime);
  return std::string(runtime) + "-" + std::string(platform);
}

std::string PlatformOfArgs(const std::vector<std::string>& args) {
  std::string platform = "systrap";
  for (std::size_t i = 0; i < args.size(); ++i) {
    // runsc takes Go-style flags: --platform=X, -platform=X, or the value as the next word.
    std::string_view a = args[i];
    if (a.starts_with("--")) a.remove_prefix(1);
    if (a.starts_with("-platform=")) {
      platform = std::string(a.substr(10));
    } else if (a == "-platform" && i + 1 < args.size()) {
      platform = args[++i];
    }
  }
  return platform;
}

Result<void> DecidePlatformRuntime(std::string_view where, std::string_view runtime,
                                   std::string_view platform, const docker::SystemInfo& info) {
  const std::string name = PlatformRuntimeOf(runtime, platform);
  const std::string fix =
      " (sudo scripts/setup-host registers one per platform that starts "
      "on this host; or leave the platform unset for systrap)";
  auto it = info.runtimes.find(name);
  if (it == info.runtimes.end()) {
    return Error::InvalidArgument(
        "platform " + Quote(platform) + " needs the runtime " + Quote(name) + " (" +
        std::string(runtime) + " with --platform=" + std::string(platform) + "), which Docker on " +
        std::string(where) + " does not have" + fix);
  }
  if (const std::string has = PlatformOfArgs(it->second.args); has != platform) {
    return Error::InvalidArgument("runtime " + Quote(name) + " on " + std::string(where) +
                                  " runs on platform " + Quote(has) + ", not " + Quote(platform) +
                                  " (its runtimeArgs: " + Join(it->second.args, " ") + ")" + fix);
  }
  return Ok();
}

bool IsRunscVersionOutput(std::string_view out) {
  return FirstLine(out).starts_with("runsc version ");
}

Result<void> DecideGvisorRuntime(std::string_view where, std::string_view runtime,
                                 const docker::SystemInfo& info,
                                 const IdentifyRuntimeFn& identify) {
  std::string why;
  auto it = info.runtimes.find(std::string(runtime));
  if (it != info.runtimes.end()) {
    RuntimeIdentity id = identify(it->first, it->second);
    if (id.gvisor) return Ok();
    why = "its binary " + Quote(id.path) +
          " is not gVisor's runsc (asked with --version: " + Quote(id.evidence) + ")";
  } else {
    std::vector<std::string> names;
    for (const auto& [name, rt] : info.runtimes) names.push_back(name);
    why = "Docker on " + std::string(where) + " has no runtime registered under that name (" +
          (names.empty() ? std::string("none is registered") : "registered: " + Join(names, ", ")) +
          ")";
  }
  std::vector<std::string> gvisor;
  for (const auto& [name, rt] : info.runtimes) {
    if (name != runtime && identify(name, rt).gvisor) gvisor.push_back(name);
  }
  std::string fix =
      gvisor.empty()
          ? "No runtime on " + std::string(where) +
                " is gVisor: install runsc and register it with Docker (sudo scripts/setup-host "
                "does both)"
          : "gVisor runtimes on " + std::string(where) + ": " + Join(gvisor, ", ") +
                " (pass one as the runtime: CLI --runtime, Python runtime=, API \"runtime\")";
  return Error::InvalidArgument("runtime " + Quote(runtime) +
                                " is refused: sandboxes run only on gVisor, and " + why + ". " +
                                fix);
}

Result<std::string> RequireGvisorRuntime(RuntimeCheckCache& cache, std::string_view host,
                                         docker::Client& client, std::string_view runtime,
                                         std::string_view platform, bool network_none) {
  const std::string base = PlatformRuntimeOf(runtime, platform);
  auto info = AGVISOR_TRY(HostInfo(cache, client, base));
  if (base != runtime) {
    AGVISOR_RETURN_IF_ERROR(DecidePlatformRuntime(Where(host), runtime, platform, info));
    runtime = base;
  }
  auto identify = CachedIdentify(cache, client.endpoint());
  AGVISOR_RETURN_IF_ERROR(DecideGvisorRuntime(Where(host), runtime, info, identify));
  const std::string twin = NoneTwinOf(runtime);
  if (!network_none || !info.runtimes.contains(twin)) return std::string(runtime);
  if (auto r = DecideGvisorRuntime(Where(host), twin, info, identify); !r.ok()) {
    return r.error().WithContext("network none runs on " + Quote(twin) + ", the none twin of " +
                                 Quote(runtime) +
                                 " (unregister it, or register it as runsc --network=none)");
  }
  return twin;
}

Result<PlatformChoice> DefaultPlatformOf(RuntimeCheckCache& cache, std::string_view host,
                                         docker::Client& client, std::string_view runtime) {
  auto r = RequireGvisorRuntime(cache, host, client, runtime, kDefaultPlatform, false);
  if (r.ok()) return PlatformChoice{.platform = std::string(kDefaultPlatform)};
  if (r.error().code() != ErrorCode::kInvalidArgument) return r.error();
  return PlatformChoice{
      .platform = std::string(kPlatformSystrap),
      .fallback_reason =
          "sandboxes on " + Where(host) + " run on gVisor's systrap platform, not the default " +
          std::string(kDefaultPlatform) +
          " (an idle systrap sandbox keeps ~4% of a CPU busy, a ptrace one ~0.1%): " +
          r.error().message() + "; `agvisor doctor` checks the platforms"};
}

void ForgetHostRuntimes(RuntimeCheckCache& cache) {
  std::lock_guard lock(cache.mu);
  cache.info.reset();
}

Result<std::vector<RuntimeIdentity>> IdentifyHostRuntimes(RuntimeCheckCache& cache,
                                                          docker::Client& client) {
  auto info = AGVISOR_TRY(HostInfo(cache, client, ""));
  auto identify = CachedIdentify(cache, client.endpoint());
  std::vector<RuntimeIdentity> out;
  for (const auto& [name, rt] : info.runtimes) out.push_back(identify(name, rt));
  return out;
}

}  // namespace agvisor
