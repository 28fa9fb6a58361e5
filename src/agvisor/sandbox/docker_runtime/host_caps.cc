#include "agvisor/sandbox/docker_runtime/host_caps.h"

#include <map>
#include <mutex>

#include "agvisor/docker/client.h"

namespace agvisor {
namespace {

// A probe sandbox with a 16 MiB root-disk cap that tries to write 32 MiB: the cap is real only
// if the write fails with ENOSPC while the sandbox keeps running.
Result<DiskCapSupport> RunDiskProbe(docker::Client& client, std::string_view runtime,
                                    std::string_view image) {
  docker::ContainerConfig c;
  c.image = std::string(image);
  c.entrypoint = {"sh", "-c",
                  "head -c 33554432 /dev/zero > /agvisor-disk-probe 2>&1 && echo WROTE || "
                  "echo ENOSPC"};
  c.cmd = {};
  c.labels = {{"agvisor.probe", "disk"}};
  c.host_config.runtime = std::string(runtime);
  c.host_config.network_mode = "none";
  c.host_config.annotations = {{"dev.gvisor.flag.overlay2", "root:self,size=16m"}};
  auto id = client.CreateContainer(c, "");
  if (!id.ok()) {
    return DiskCapSupport{
        false, "the daemon refused runsc's overlay size annotation (" + id.error().message() + ")"};
  }
  struct Remover {
    docker::Client& c;
    std::string id;
    ~Remover() { (void)c.RemoveContainer(id, true, false); }
  } remover{client, *id};
  if (auto r = client.StartContainer(*id); !r.ok()) {
    return DiskCapSupport{false, "runsc refused the overlay size annotation (" +
                                     r.error().message() + "); upgrade runsc"};
  }
  AGVISOR_RETURN_IF_ERROR(client.WaitContainer(*id, "not-running"));
  auto logs = AGVISOR_TRY(client.ContainerLogs(*id));
  if (logs.find("ENOSPC") != std::string::npos) {
    return DiskCapSupport{true,
                          "runsc overlay2 size annotation (probed: a 16m cap stopped a "
                          "32m write)"};
  }
  return DiskCapSupport{false,
                        "a probe sandbox wrote 32m past a 16m cap: this runsc ignores "
                        "the overlay size; upgrade runsc"};
}

}  // namespace

Result<DiskCapSupport> ProbeDiskCap(DiskCapCache& cache, docker::Client& client,
                                    std::string_view runtime, std::string_view image) {
  {
    std::lock_guard lock(cache.mu);
    if (auto it = cache.by_runtime.find(runtime); it != cache.by_runtime.end()) return it->second;
  }
  DiskCapSupport s;
  if (client.api_version() < docker::kAnnotationsApiVersion) {
    auto version = client.Version();
    s.detail = "its Docker Engine API is " + client.api_version().ToString() +
               (version.ok() ? " (Docker " + version->version + ")" : std::string()) +
               ", and passing runsc the overlay size annotation needs API " +
               docker::kAnnotationsApiVersion.ToString() +
               " or newer (Docker 24+, with a runsc that supports overlay2 size=)";
  } else {
    s = AGVISOR_TRY(RunDiskProbe(client, runtime, image));
  }
  std::lock_guard lock(cache.mu);
  cache.by_runtime[std::string(runtime)] = s;
  return s;
}

}  // namespace agvisor
