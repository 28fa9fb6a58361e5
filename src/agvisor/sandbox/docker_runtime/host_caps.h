// What a Docker host can enforce for sandboxes, found by asking it (and by real probes where the
// answer cannot be read off), cached in a DiskCapCache (a member of the host's DockerRuntime).
//
// Used by Sandbox::Create (whether a root-disk cap can be passed) and by `agvisor doctor`.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/runtime.h"  // DiskCapSupport

namespace agvisor {
namespace docker {
class Client;
}

// The answers for one host, by runtime.
struct DiskCapCache {
  std::mutex mu;
  std::map<std::string, DiskCapSupport, std::less<>> by_runtime;
};

// Whether `runtime` on this host can cap a sandbox's root file system. Where the Engine API is
// older than 1.43 there is no way to pass runsc the annotation that carries the size: that is
// read off the negotiated version, not guessed. On newer daemons a probe sandbox is started
// with a 16 MiB cap on `image` and must fail to write 32 MiB. Cached in `cache` per runtime.
Result<DiskCapSupport> ProbeDiskCap(DiskCapCache& cache, docker::Client& client,
                                    std::string_view runtime, std::string_view image);

}  // namespace agvisor
