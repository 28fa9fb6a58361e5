// The egress decision log: what each sandbox tried to reach and what the enforcer decided.
//
// Used by the proxy and the DNS answerer (writers) and by agvisord's EgressHost (the egress
// log's files, its routes and the metrics route: readers; docs/egress.md, "Log"). Bounded: a
// ring of the last `capacity` decisions per sandbox, at most `max_sandboxes` rings (the
// oldest-written ring is dropped first), and every string a record keeps cut to the bounds
// below (a sandbox chooses its paths and names). Counters are kept for the whole life of the
// log. Thread-safe (one mutex; a record is a few short strings).
#pragma once

#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace agvisor::egress {

struct Decision {
  std::chrono::system_clock::time_point time;
  std::string sandbox;
  std::string via;   // "tls", "http", "connect", "dns"
  std::string name;  // as decided on (normalised), or the literal
  std::uint16_t port = 0;
  bool allowed = false;
  std::string reason;   // the policy's reason, or why the connection failed
  std::string address;  // the address dialled (allowed) or refused after resolution, if any
  // One request on a connection the enforcer reads (plain HTTP, or TLS it terminates for a
  // brokered secret): empty `method` for a connection-level decision.
  std::string method;
  std::string path;  // the request target as sent, without the query string
  int status = 0;    // the upstream's status, or the enforcer's own answer (403, 421, 502)
  std::uint64_t bytes_up = 0;    // sandbox -> upstream
  std::uint64_t bytes_down = 0;  // upstream -> sandbox
  std::chrono::milliseconds duration{0};
  std::string secret;  // the brokered secret substituted into this request (its name only)
  // A connection's close record: the `seq` of the decision that let the connection through (0
  // for every other record). Its bytes and duration are the whole connection's, from that
  // decision to the close; the counters do not count it (it is not a decision).
  std::uint64_t closes = 0;
  // This sandbox's record number since its enforcer began serving it in this process (1, 2,
  // ...), set by DecisionLog::Record: a follower asks for the records after the last it saw.
  std::uint64_t seq = 0;
  // Learn mode let it through (`allowed` is true too); `reason` is why enforcing would have
  // refused it. A verdict of its own in the log line and the counters ("learned").
  bool learned = false;
};

// What a record keeps of each string, in bytes (BoundDecision). A request's path can be most of
// a 16 KiB head and a reason can quote what the sandbox sent: cut, a record holds at most ~4 KiB
// of strings, so a ring of 256 stays under ~1 MiB per sandbox.
inline constexpr std::size_t kMaxRecordPath = 1024;
inline constexpr std::size_t kMaxRecordMethod = 32;
inline constexpr std::size_t kMaxRecordText = 512;  // every other string (name, reason, ...)
// Cuts each string of `d` longer than its bound to the bound, at a UTF-8 character boundary,
// ending in "..." (so a cut is visible). Idempotent. DecisionLog::Record applies it.
void BoundDecision(Decision& d);

// "2026-12-01T15:04:05.123Z sandbox=a tls pypi.org:443 allowed (allowed by pypi.org) ->
// 151.101.0.223": one line per decision, for logs and the CLI ("sandbox=" only when `sandbox` is
// set). A request (`method` set) adds "GET /simple/ 200 up=310 down=5120 12ms", and
// "secret=NAME" when one was put in; a connection that moved bytes adds "up=N down=N". A close
// record reads "tls pypi.org:443 closed #12 -> 151.101.0.223 up=517 down=48213 1480ms". The
// strings are as recorded: a terminal gets the line through EscapeForTerminal.
std::string FormatDecision(const Decision& d);
// "2026-12-01T15:04:05.123Z" (UTC, milliseconds).
std::string FormatDecisionTime(std::chrono::system_clock::time_point t);
// The inverse of FormatDecisionTime (exactly that shape); nullopt for anything else.
std::optional<std::chrono::system_clock::time_point> ParseDecisionTime(std::string_view text);

struct DecisionCounters {
  std::uint64_t allowed = 0;  // learned decisions are not counted here, but in `learned`
  std::uint64_t denied = 0;
  std::uint64_t learned = 0;
  bool operator==(const DecisionCounters&) const = default;
};

// Where a connection learn mode let through went (Decision::learned), as SuggestRules reads it.
struct LearnedDestination {
  std::string name;  // normalised name or IP literal
  std::uint16_t port = 0;
  auto operator<=>(const LearnedDestination&) const = default;
};
// Distinct learned destinations kept per sandbox (more are counted, not kept).
inline constexpr std::size_t kMaxLearnedDestinations = 256;
struct LearnedDestinations {
  std::vector<LearnedDestination> kept;  // sorted
  std::uint64_t dropped = 0;  // learned connections to others, past kMaxLearnedDestinations
};

class DecisionLog {
 public:
  explicit DecisionLog(std::size_t capacity = 256, std::size_t max_sandboxes = 1024);

  // Keeps `decision`, bounded (BoundDecision) and numbered (`seq`), and returns what was kept.
  // A close record (`closes` set) is kept and numbered like any record, but not counted.
  Decision Record(Decision decision);
  // The sandbox's recent decisions, oldest first (empty for an unknown sandbox).
  std::vector<Decision> Recent(const std::string& sandbox) const;
  // Those of its recent decisions numbered after `after_seq`, oldest first (a follower's next
  // batch; when more than the ring holds came since, the oldest are gone: their numbers show
  // the gap).
  std::vector<Decision> Since(const std::string& sandbox, std::uint64_t after_seq) const;
  // The number of the sandbox's last decision (0: none yet).
  std::uint64_t LastSeq(const std::string& sandbox) const;
  DecisionCounters Counters(const std::string& sandbox) const;
  DecisionCounters Totals() const;
  // The destinations of the sandbox's learned connections (not DNS answers, not the requests on
  // an intercepted connection: via "dns", "https"), for as long as its ring is kept, whatever
  // the ring has dropped since.
  LearnedDestinations Learned(const std::string& sandbox) const;
  // Drops a sandbox's ring and counters (when the sandbox is removed).
  void Forget(const std::string& sandbox);

 private:
  struct Ring {
    std::deque<Decision> entries;
    DecisionCounters counters;
    std::uint64_t last_write = 0;
    std::uint64_t last_seq = 0;
    std::set<LearnedDestination> learned;
    std::uint64_t learned_dropped = 0;
  };
  const std::size_t capacity_;
  const std::size_t max_sandboxes_;
  mutable std::mutex mu_;
  std::map<std::string, Ring> rings_;
  DecisionCounters totals_;
  std::uint64_t writes_ = 0;
};

}  // namespace agvisor::egress
