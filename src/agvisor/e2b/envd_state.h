// envd's state between calls (envd_service.h's EnvdState), private to envd_*.cc: the processes
// started through envd (their configs and tags, which envd's List and selectors report and the
// agent does not keep), the command each open stream is attached to (so that SendInput,
// CloseStdin, Update and signals reach it), and the watchers of the watcher API.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "agvisor/client/place.h"
#include "agvisor/e2b/envd_messages.h"
#include "agvisor/e2b/envd_service.h"

namespace agvisor::e2b::envd {

struct TrackedProcess {
  ProcessConfig config;
  std::optional<std::string> tag;
  bool pty = false;
  // The command a Start or Connect stream is attached to, while it is (shared with the stream).
  std::shared_ptr<client::Command> attached;
};

struct Watcher {
  std::unique_ptr<client::DirWatch> watch;
  std::string root;
  bool include_entry = false;
};

struct EnvdState::Impl {
  std::mutex mu;
  // By container name, then pid.
  std::map<std::string, std::map<std::uint32_t, TrackedProcess>> processes;
  // By container name, then watcher id.
  std::map<std::string, std::map<std::string, std::shared_ptr<Watcher>>> watchers;
};

// The entry `key` of sandbox `sandbox` in `table` (processes or watchers), or nullptr. Call with
// the state's mutex held.
template <typename Key, typename Value>
Value* FindEntry(std::map<std::string, std::map<Key, Value>>& table, const std::string& sandbox,
                 const Key& key) {
  auto it = table.find(sandbox);
  if (it == table.end()) return nullptr;
  auto entry = it->second.find(key);
  return entry == it->second.end() ? nullptr : &entry->second;
}
// Erases that entry, and the sandbox's map once it is empty. Mutex held.
template <typename Key, typename Value>
void EraseEntry(std::map<std::string, std::map<Key, Value>>& table, const std::string& sandbox,
                const Key& key) {
  auto it = table.find(sandbox);
  if (it == table.end()) return;
  it->second.erase(key);
  if (it->second.empty()) table.erase(it);
}

}  // namespace agvisor::e2b::envd
