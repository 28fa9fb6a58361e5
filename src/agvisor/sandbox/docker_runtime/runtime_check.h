// Runtime check: every sandbox runs on gVisor, decided from what the runtime's binary IS, not
// from its name (docs/security.md, "Runtime").
//
// Used by Sandbox::Create (before anything is created on the host: no volume, container, probe
// or derived image) and by `agvisor doctor` (which lists the host's gVisor runtimes). So the
// library, the CLI, Python, pools and agvisord all get the same refusal.
//
// How a runtime is identified: Docker's GET /info maps each registered runtime name to the path
// of its binary (and its runtimeArgs). That path is run with `--version` ON THE DOCKER HOST: here
// for a unix socket, through the same ssh destination (and ssh arguments) for ssh:// hosts. Its
// first line must read "runsc version ..." (gVisor's own answer; runc answers "runc version",
// crun "crun version"). Running the path follows symlinks to the binary that would really run,
// so a runtime named "runsc" whose path is runc, a symlink to runc or a copy of runc is refused.
// A runtime that /info does not list (e.g. a name Docker maps to runc internally, such as
// "io.containerd.runc.v2" on newer daemons) is refused too, as is every runtime of a tcp://
// host, where the binary cannot be asked (use ssh:// for such a host).
//
// Cost: /info is asked once per RuntimeCheckCache (one per DockerRuntime object: a place or
// agvisord keeps one per host), and again when a runtime is not in the copy held (one registered
// since, e.g. by SIGHUP to dockerd); each (name, path, args) is identified once per cache. So only
// the first create through a runtime object pays (one /info and one `--version`: 60-300 ms here,
// by load); every later one pays nothing (bench/README, "Runtime check"). A runtime re-registered
// under the same name with another path is seen by runtime objects made after that, e.g. after
// an agvisord restart.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/runtime.h"  // HostSshArgs

namespace agvisor {
namespace docker {
class Client;
struct RuntimeInfo;
struct SystemInfo;
}  // namespace docker

// The runtime that network-none sandboxes run on where the host registers it (scripts/setup-host
// registers runsc-none: runsc --network=none). It must be gVisor too.
std::string NoneTwinOf(std::string_view runtime);

// The runtime that sandboxes of `runtime` on gVisor platform `platform` run on: `runtime` itself
// for "systrap" (runsc's default) or "", else "<runtime>-<platform>" (scripts/setup-host registers
// runsc-ptrace: runsc with --platform=ptrace, and its none twin runsc-ptrace-none).
std::string PlatformRuntimeOf(std::string_view runtime, std::string_view platform);

// The platform a runtime registered with `args` (its runtimeArgs) runs on: the value of its
// --platform flag, or "systrap" (runsc's default) without one.
std::string PlatformOfArgs(const std::vector<std::string>& args);

// The decision for a platform other than the runtime's own, pure: OK when `info` registers
// PlatformRuntimeOf(runtime, platform) with --platform=`platform`. Otherwise kInvalidArgument
// naming the platform, the runtime it needs and that scripts/setup-host registers it.
Result<void> DecidePlatformRuntime(std::string_view where, std::string_view runtime,
                                   std::string_view platform, const docker::SystemInfo& info);

// What one registered runtime's binary turned out to be.
struct RuntimeIdentity {
  std::string name;               // Docker's name for it ("runsc")
  std::string path;               // as /info reports it ("/usr/bin/runsc", "runc")
  std::vector<std::string> args;  // its runtimeArgs
  bool gvisor = false;
  // The binary's own first line of `--version` ("runsc version release-20240729.0"), or why it
  // could not be asked ("no such file", "cannot be asked over tcp://").
  std::string evidence;
  // The answer is the binary's own (it ran and ended). A spawn error, an ssh failure or a run
  // that timed out on a loaded host is not: it is not cached, so the next create asks again.
  bool conclusive = false;
};

// Whether `version_output` (what a binary printed for --version) is gVisor's runsc.
bool IsRunscVersionOutput(std::string_view version_output);

// Identifies one runtime (the real one runs its binary; tests pass a fake).
using IdentifyRuntimeFn =
    std::function<RuntimeIdentity(const std::string& name, const docker::RuntimeInfo& runtime)>;

// The decision, pure apart from `identify`: OK when `runtime` is registered in `info` and its
// binary is gVisor. Otherwise kInvalidArgument naming the runtime, what its binary is, and which
// runtimes of `where` ("this host", "ssh://...") ARE gVisor (or that none is, and how to
// install one). `identify` is called for `runtime`, and for the others only on refusal.
Result<void> DecideGvisorRuntime(std::string_view where, std::string_view runtime,
                                 const docker::SystemInfo& info, const IdentifyRuntimeFn& identify);

// What the check keeps of one Docker host: its runtime list (/info) and each runtime's identity
// by (name, path, args). A member of the host's DockerRuntime; a one-off caller (`agvisor
// doctor`) makes its own.
struct RuntimeCheckCache {
  std::mutex mu;
  std::shared_ptr<const docker::SystemInfo> info;
  std::map<std::string, RuntimeIdentity, std::less<>> ids;
};

// The runtime a sandbox of `runtime`, `platform` and `network_none` runs on: the platform's
// runtime (PlatformRuntimeOf, checked with DecidePlatformRuntime unless it is `runtime`), or its
// NoneTwinOf for network none where the host registers that twin. Both are checked with
// DecideGvisorRuntime (a registered twin that is not gVisor is refused, never skipped).
// Cached as described above. Errors: kInvalidArgument (not gVisor, not registered, no runtime
// for the platform), those of docker::Client::Info.
Result<std::string> RequireGvisorRuntime(RuntimeCheckCache& cache, std::string_view host,
                                         docker::Client& client, std::string_view runtime,
                                         std::string_view platform, bool network_none);

// The platform of a `runtime` sandbox that asks for none, and why it is not the default.
struct PlatformChoice {
  std::string platform;         // kDefaultPlatform, or "systrap"
  std::string fallback_reason;  // "" when it is the default; else why not and how to get it
};

// kDefaultPlatform when RequireGvisorRuntime accepts it for `runtime` (its runtime is registered
// with that --platform and is gVisor), else systrap with the refusal as the reason. Cached like
// the above. Errors: those of docker::Client::Info (a refusal is a fallback, not an error).
Result<PlatformChoice> DefaultPlatformOf(RuntimeCheckCache& cache, std::string_view host,
                                         docker::Client& client, std::string_view runtime);

// Forgets the runtime list held in `cache` (a create said a runtime is unknown after all).
void ForgetHostRuntimes(RuntimeCheckCache& cache);

// Every registered runtime of the host, identified (cached like the above): for `agvisor doctor`.
Result<std::vector<RuntimeIdentity>> IdentifyHostRuntimes(RuntimeCheckCache& cache,
                                                          docker::Client& client);

}  // namespace agvisor
