// DnsCache: the egress proxy's memory of its own lookups (docs/egress.md, "A connection through
// the proxy"), so a connection to a name looked up moments ago does not wait for the resolver
// again.
//
// One cache per EgressProxy, so per sandbox and per upstream resolver: a sandbox cannot learn
// from its own connection times which names another sandbox looked up. An entry is kept for the
// answer's TTL, never longer than `max_ttl`; a TTL of 0 is not kept. At most `max_entries` names:
// a full cache first drops what has expired, then the entry that would expire first. Only
// answers with addresses are kept (a failure or NXDOMAIN is asked again next time). The cache
// holds what the resolver said, nothing more: the caller still checks every address against the
// refused ranges (EgressPolicy::CheckResolved) each time it uses one, so a cached answer can
// never let a rebinding address through.
//
// Pure and single-threaded (the proxy touches it on its io thread only); time is passed in.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/egress/address.h"

namespace agvisor::egress {

class DnsCache {
 public:
  using Clock = std::chrono::steady_clock;

  explicit DnsCache(std::size_t max_entries = 256,
                    std::chrono::seconds max_ttl = std::chrono::seconds(300));

  // The addresses kept for `name` (normalised by the caller), if they have not expired at `now`.
  std::optional<std::vector<IpAddress>> Find(const std::string& name, Clock::time_point now) const;
  // Keeps `addresses` for `name` until now + min(ttl, max_ttl). Does nothing for a TTL of 0,
  // no addresses, or a cache of 0 entries.
  void Insert(const std::string& name, std::vector<IpAddress> addresses, std::chrono::seconds ttl,
              Clock::time_point now);
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<IpAddress> addresses;
    Clock::time_point expires;
  };
  std::size_t max_entries_;
  std::chrono::seconds max_ttl_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace agvisor::egress
