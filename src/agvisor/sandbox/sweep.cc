#include "agvisor/sandbox/sweep.h"

#include <ctime>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agvisor/docker/client.h"

namespace agvisor {

Result<int> SweepNeverStarted(docker::Client& docker, std::chrono::seconds min_age,
                              std::string_view also_label) {
  std::vector<std::string> filters = {"agvisor=1"};
  if (!also_label.empty()) filters.emplace_back(also_label);
  auto list = AGVISOR_TRY(docker.ListContainers(/*all=*/true, filters));
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  int removed = 0;
  for (const auto& c : list) {
    if (c.state != "created" || now - c.created < min_age.count()) continue;
    if (docker.RemoveContainer(c.id, /*force=*/true, /*remove_volumes=*/false).ok()) ++removed;
  }
  return removed;
}

void SweepNeverStartedOnce(std::string_view host, docker::Client& docker) {
  static std::mutex mu;
  static std::set<std::string, std::less<>> swept;
  {
    std::lock_guard lock(mu);
    if (!swept.insert(std::string(host)).second) return;
  }
  (void)SweepNeverStarted(docker);
}

}  // namespace agvisor
