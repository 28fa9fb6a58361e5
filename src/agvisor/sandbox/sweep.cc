#include "agvisor/sandbox/sweep.h"

#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include "agvisor/sandbox/runtime_local.h"

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
  RuntimeLocal& local = runtime.local();
  {
    std::lock_guard lock(local.mu);
    if (local.swept) return;
    local.swept = true;
  }
  (void)SweepNeverStarted(runtime);
}

}  // namespace agvisor
