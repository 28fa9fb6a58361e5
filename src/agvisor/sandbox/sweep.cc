#include "agvisor/sandbox/sweep.h"

#include <ctime>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace agvisor {

Result<int> SweepNeverStarted(Runtime& runtime, std::chrono::seconds min_age,
                              std::string_view also_label) {
  std::vector<std::string> filters = {"agvisor=1"};
  if (!also_label.empty()) filters.emplace_back(also_label);
  auto list = AGVISOR_TRY(runtime.List(filters));
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  int removed = 0;
  for (const auto& c : list) {
    if (c.status != "created" || now - c.created_unix < min_age.count()) continue;
    auto r = runtime.Remove(c.id);
    if (r.ok() && *r) ++removed;
  }
  return removed;
}

void SweepNeverStartedOnce(Runtime& runtime) {
  static std::mutex mu;
  static std::set<std::string, std::less<>> swept;
  {
    std::lock_guard lock(mu);
    if (!swept.insert(runtime.host()).second) return;
  }
  (void)SweepNeverStarted(runtime);
}

}  // namespace agvisor
