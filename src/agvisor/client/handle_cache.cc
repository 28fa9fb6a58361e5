#include "agvisor/client/handle_cache.h"

namespace agvisor::client {

Result<std::shared_ptr<SandboxHandle>> HandleCache::Get(std::string_view container_name) {
  {
    std::lock_guard lock(mu_);
    if (auto it = handles_.find(container_name); it != handles_.end()) return it->second;
  }
  // Opened outside the lock: it talks to the runtime.
  std::shared_ptr<SandboxHandle> h = AGVISOR_TRY(place_->Open(container_name));
  std::lock_guard lock(mu_);
  return handles_.try_emplace(std::string(container_name), std::move(h)).first->second;
}

std::shared_ptr<SandboxHandle> HandleCache::Put(std::shared_ptr<SandboxHandle> handle) {
  std::lock_guard lock(mu_);
  handles_.insert_or_assign(handle->container_name(), handle);
  return handle;
}

void HandleCache::Forget(std::string_view container_name) {
  std::lock_guard lock(mu_);
  if (auto it = handles_.find(container_name); it != handles_.end()) handles_.erase(it);
}

std::size_t HandleCache::size() const {
  std::lock_guard lock(mu_);
  return handles_.size();
}

}  // namespace agvisor::client
