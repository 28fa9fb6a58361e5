#include "agvisor/egress/dns_cache.h"

#include <algorithm>

namespace agvisor::egress {

DnsCache::DnsCache(std::size_t max_entries, std::chrono::seconds max_ttl)
    : max_entries_(max_entries), max_ttl_(max_ttl) {}

std::optional<std::vector<IpAddress>> DnsCache::Find(const std::string& name,
                                                     Clock::time_point now) const {
  auto it = entries_.find(name);
  if (it == entries_.end() || now >= it->second.expires) return std::nullopt;
  return it->second.addresses;
}

void DnsCache::Insert(const std::string& name, std::vector<IpAddress> addresses,
                      std::chrono::seconds ttl, Clock::time_point now) {
  ttl = std::min(ttl, max_ttl_);
  if (ttl <= std::chrono::seconds(0) || addresses.empty() || max_entries_ == 0) return;
  if (!entries_.contains(name) && entries_.size() >= max_entries_) {
    std::erase_if(entries_, [now](const auto& e) { return now >= e.second.expires; });
    if (entries_.size() >= max_entries_) {
      auto first_to_expire = std::min_element(
          entries_.begin(), entries_.end(),
          [](const auto& a, const auto& b) { return a.second.expires < b.second.expires; });
      entries_.erase(first_to_expire);
    }
  }
  entries_[name] = Entry{std::move(addresses), now + ttl};
}

}  // namespace agvisor::egress
