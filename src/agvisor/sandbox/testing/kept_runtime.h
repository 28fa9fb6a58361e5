// KeptRuntime: the runtime of a host (MakeRuntime, runtimes.h) made on first use and kept for
// the rest of the process, with Sandbox's and Pool's entry points over it. For programs that are
// one long owner of many calls, as a place is: the integration tests, the bench, the soak and the
// e2e fixtures. Header-only; its users link agvisor::sandbox_runtimes.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/sandbox/pool.h"
#include "agvisor/sandbox/runtimes.h"
#include "agvisor/sandbox/sandbox.h"

namespace agvisor {

// The kept runtime of `host`; null (after printing why to stderr) when it cannot be made, which
// every call below then refuses with kInvalidArgument.
inline std::shared_ptr<Runtime> KeptRuntime(const std::string& host) {
  static std::mutex mu;
  static auto* runtimes = new std::map<std::string, std::shared_ptr<Runtime>>();
  std::lock_guard lock(mu);
  auto& slot = (*runtimes)[host];
  if (!slot) {
    auto made = MakeRuntime(host);
    if (!made.ok()) {
      std::fprintf(stderr, "runtime of '%s': %s\n", host.c_str(), made.error().ToString().c_str());
      return nullptr;
    }
    slot = *made;
  }
  return slot;
}

// The calls they stand for, on KeptRuntime(host), with the host where it was.
inline Result<std::unique_ptr<Sandbox>> CreateSandbox(const SandboxSpec& spec) {
  return Sandbox::Create(KeptRuntime(spec.host), spec);
}
inline Result<std::unique_ptr<Sandbox>> OpenSandbox(std::string_view container_name,
                                                    const std::string& host = "") {
  return Sandbox::Open(KeptRuntime(host), container_name);
}
inline Result<std::vector<SandboxInfo>> ListSandboxes(const std::string& host = "") {
  return Sandbox::List(KeptRuntime(host));
}
inline Result<void> RemoveSandbox(std::string_view container_name, const std::string& host,
                                  bool erase_data) {
  return Sandbox::Remove(KeptRuntime(host), container_name, erase_data);
}
inline Result<std::unique_ptr<Pool>> CreatePool(PoolOptions options) {
  auto runtime = KeptRuntime(options.spec.host);
  return Pool::Create(std::move(runtime), std::move(options));
}

}  // namespace agvisor
