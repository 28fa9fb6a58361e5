// The agent reaches every sandbox inside its image: for each image sandboxes use, a derived
// image holding the agent at kAgentPath is made once per host and agent build, instead of
// uploading the agent into every container (that upload was ~100 ms of each create; figures in
// bench/README.md).
//
// Why not a shared read-only volume (one upload per host, mounted everywhere): under runsc
// 20240729, open(O_WRONLY|O_TRUNC) on a read-only mount fails with EROFS yet truncates the file
// on the host, so one sandbox could empty the agent of all others (running ones die of SIGBUS).
// docs/security.md has the reproduction. An image layer is copy-on-write per container.
//
// The derived image is "agvisor/with-agent:<base image id, 12 hex>-<agent hash, 16 hex>" (hash:
// FNV-1a 64 of the embedded binary), made by committing a never-started container of the base
// image into which the agent was uploaded: the commit is atomic, so a client killed midway
// leaves no half-made image. Labels: agvisor.agent=<hash>, agvisor.agent.source=<image as
// named>. When a new one is made, derived images of the same source older than a day are removed
// (those in use stay; younger ones may serve another agvisor build on the host). A rebuilt base
// image gets a new id, hence a new derived image.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor {
namespace docker {
class Client;
struct ImageSummary;
}  // namespace docker

// The label every derived image carries (the agent's hash): its top layer is the agent's.
inline constexpr std::string_view kAgentImageLabel = "agvisor.agent";

// The derived images known to exist on one host (a member of its DockerRuntime).
struct AgentImageCache {
  std::mutex mu;
  std::set<std::string, std::less<>> known;
};

// The image to create sandboxes of `image` from on `docker`'s host, made when missing (and
// remembered in `cache`). Errors: kNotFound (`image` is not on the host), kUnavailable, those of
// the upload and the commit.
Result<std::string> EnsureAgentImage(AgentImageCache& cache, docker::Client& docker,
                                     std::string_view image);

// Of the derived images of one source, those to remove when `keep` was just made: not `keep`,
// made more than a day before `now` (unix seconds). Pure.
std::vector<std::string> AgentImagesToPrune(const std::vector<docker::ImageSummary>& images,
                                            std::string_view keep, std::int64_t now);

// Forgets that `ref` exists (in `cache`), so the next EnsureAgentImage looks again and makes it
// when it is gone.
void ForgetAgentImage(AgentImageCache& cache, std::string_view ref);

// "agvisor/with-agent:<12 hex of image_id>-<16 hex of the agent's hash>" (pure). `image_id` is
// Docker's "sha256:..." id.
std::string AgentImageRef(std::string_view image_id, std::string_view agent_binary);
// What every derived image of `image_id` is named with, whatever agent build made it:
// "agvisor/with-agent:<12 hex of image_id>-" (pure).
std::string AgentImageRefPrefix(std::string_view image_id);

}  // namespace agvisor
