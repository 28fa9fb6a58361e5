#include "agvisor/sandbox/docker_runtime/agent_image.h"

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>
#include <set>

#include "agvisor/base/tar.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/agent_blob.h"
#include "agvisor/sandbox/agent_paths.h"

namespace agvisor {
namespace {

constexpr std::string_view kRepo = "agvisor/with-agent";
constexpr std::string_view kAgentLabel = kAgentImageLabel;
constexpr std::string_view kSourceLabel = "agvisor.agent.source";

std::string Hex(std::uint64_t v, int digits) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return std::string(buf + 16 - digits);
}

const std::string& AgentHash() { return EmbeddedAgentHash(); }

std::string RandomHex8() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mu);
  return Hex(rng(), 8);
}

// Uploads the agent into a never-started container of `base_id` and commits it as `ref`.
Result<void> Make(docker::Client& docker, std::string_view source, const std::string& base_id,
                  const std::string& ref) {
  docker::ContainerConfig c;
  c.image = base_id;
  c.entrypoint = {std::string(kAgentPath)};
  c.cmd = {"init"};
  // agvisor=1: the sweep of never-started containers removes a filler a killed client left;
  // `agvisor ls` skips it by its agvisor.agent label.
  c.labels = {{"agvisor", "1"}, {std::string(kAgentLabel), "filler"}};
  c.host_config.network_mode = "none";
  auto id = docker.CreateContainer(c, "agvisor-agent-fill-" + RandomHex8());
  if (!id.ok()) return id.error().WithContext("create the container that adds the agent");
  auto made = [&]() -> Result<void> {
    TarWriter w;
    AGVISOR_RETURN_IF_ERROR(w.AddDirectory(kAgentDir.substr(1), 0755));
    AGVISOR_RETURN_IF_ERROR(w.AddFile(kAgentPath.substr(1), EmbeddedAgentBinary(), 0755));
    AGVISOR_RETURN_IF_ERROR(docker.PutArchive(*id, "/", w.Finish()));
    const std::string tag = ref.substr(ref.rfind(':') + 1);
    AGVISOR_TRY(
        docker.CommitContainer(*id, kRepo, tag,
                               {"LABEL " + std::string(kAgentLabel) + "=" + AgentHash() + " " +
                                std::string(kSourceLabel) + "=\"" + std::string(source) + "\""}));
    return Ok();
  }();
  (void)docker.RemoveContainer(*id, /*force=*/true, /*remove_volumes=*/true);
  if (!made.ok()) return made.error().WithContext("add the agent to image " + std::string(source));
  return Ok();
}

// Removes the other derived images of `source` made more than a day ago that no container uses
// (younger ones may belong to another agvisor build in use on this host right now).
void PruneOthers(docker::Client& docker, std::string_view source, const std::string& keep) {
  auto list = docker.ListImages({std::string(kSourceLabel) + "=" + std::string(source)});
  if (!list.ok()) return;
  for (const std::string& id :
       AgentImagesToPrune(*list, keep, static_cast<std::int64_t>(std::time(nullptr)))) {
    (void)docker.RemoveImage(id);
  }
}

}  // namespace

std::vector<std::string> AgentImagesToPrune(const std::vector<docker::ImageSummary>& images,
                                            std::string_view keep, std::int64_t now) {
  std::vector<std::string> out;
  for (const auto& image : images) {
    bool kept = false;
    for (const auto& t : image.repo_tags) kept = kept || t == keep;
    if (!kept && image.created < now - 24 * 3600) out.push_back(image.id);
  }
  return out;
}

void ForgetAgentImage(AgentImageCache& cache, std::string_view ref) {
  std::lock_guard lock(cache.mu);
  if (auto it = cache.known.find(ref); it != cache.known.end()) cache.known.erase(it);
}

std::string AgentImageRefPrefix(std::string_view image_id) {
  std::string_view hex = image_id;
  if (hex.starts_with("sha256:")) hex.remove_prefix(7);
  return std::string(kRepo) + ":" + std::string(hex.substr(0, 12)) + "-";
}

std::string AgentImageRef(std::string_view image_id, std::string_view agent_binary) {
  return AgentImageRefPrefix(image_id) + Hex(AgentHashOf(agent_binary), 16);
}

Result<std::string> EnsureAgentImage(AgentImageCache& cache, docker::Client& docker,
                                     std::string_view image) {
  // Every time: a rebuilt or re-pulled image has a new id, hence a new derived image.
  const docker::ImageInfo base = AGVISOR_TRY(docker.InspectImage(image));
  if (auto it = base.labels.find(std::string(kAgentLabel));
      it != base.labels.end() && it->second == AgentHash()) {
    return std::string(image);  // a derived image already
  }
  const std::string ref = AgentImageRef(base.id, EmbeddedAgentBinary());
  {
    std::lock_guard lock(cache.mu);
    if (cache.known.count(ref)) return ref;
  }
  auto found = docker.InspectImage(ref);
  if (!found.ok()) {
    if (found.error().code() != ErrorCode::kNotFound) return found.error();
    AGVISOR_RETURN_IF_ERROR(Make(docker, image, base.id, ref));
    PruneOthers(docker, image, ref);
  }
  std::lock_guard lock(cache.mu);
  cache.known.insert(ref);
  return ref;
}

}  // namespace agvisor
