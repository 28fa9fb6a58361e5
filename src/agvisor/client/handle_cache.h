// One handle per sandbox for a front end that serves many callers for a long time (agvisord: its
// routes, the desktop gateway, the MCP route): each sandbox is opened through the Place the
// first time it is used, and that handle (its agent channel) is then shared by every request,
// viewer and session until the sandbox is forgotten (stopped, deleted, found ended).
//
// Used by server/ (Service, the /mcp route) and gateway/. Thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/client/place.h"

namespace agvisor::client {

class HandleCache {
 public:
  // Handles of the sandboxes of `place` (shared: the owner may call the place directly too).
  explicit HandleCache(std::shared_ptr<Place> place) : place_(std::move(place)) {}
  HandleCache(const HandleCache&) = delete;
  HandleCache& operator=(const HandleCache&) = delete;

  Place& place() { return *place_; }

  // The handle of `container_name` ("agvisor-..."), opened (Place::Open) on first use. Two first
  // callers may both open one; the first kept is handed to both. Errors: Place::Open's
  // (kNotFound: no such sandbox, kUnavailable).
  Result<std::shared_ptr<SandboxHandle>> Get(std::string_view container_name);
  // Keeps `handle` (a sandbox just created, acquired or forked) for its container, replacing
  // any older handle of it, and returns it shared.
  std::shared_ptr<SandboxHandle> Put(std::shared_ptr<SandboxHandle> handle);
  // Drops the handle of `container_name` (callers holding it keep theirs until they let go).
  void Forget(std::string_view container_name);
  // How many handles are kept.
  std::size_t size() const;

 private:
  std::shared_ptr<Place> place_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<SandboxHandle>, std::less<>> handles_;
};

}  // namespace agvisor::client
