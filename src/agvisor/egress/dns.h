// DNS messages (RFC 1035) for the egress enforcer: the in-sandbox resolver's answers and the
// enforcer's own lookups of allowed names.
//
// Used by the proxy's resolver client (BuildDnsQuery / ParseDnsResponse) and, once wired, by the
// DNS server that sandboxes with a policy get as their resolver (AnswerDnsQuery). Pure: no
// sockets. The answerer never forwards: an allowed name gets the enforcer's own address (the
// sandbox then connects to the enforcer, which resolves the name itself), any other name gets
// NXDOMAIN, so a lookup of a disallowed name (or of a random subdomain that encodes data) never
// leaves the host. Docs: docs/egress.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/egress/address.h"
#include "agvisor/egress/policy.h"

namespace agvisor::egress {

enum class DnsType : std::uint16_t { kA = 1, kCname = 5, kAaaa = 28 };
enum class DnsRcode : std::uint8_t {
  kNoError = 0,
  kFormErr = 1,
  kServFail = 2,
  kNxDomain = 3,
  kNotImp = 4,
  kRefused = 5
};

// The one question of a query.
struct DnsQuestion {
  std::uint16_t id = 0;
  std::string name;  // as asked, dots between labels, no trailing dot, case kept
  std::uint16_t qtype = 0;
  std::uint16_t qclass = 0;
  std::size_t question_end = 0;  // offset just past the question in the query
};

// Parses a query: header with QR=0 and opcode QUERY, exactly one question, no answer or
// authority records (an EDNS OPT in additional is tolerated and ignored), names without
// compression pointers, labels of printable ASCII. kInvalidArgument says what was wrong.
Result<DnsQuestion> ParseDnsQuery(std::span<const std::uint8_t> message);

// A query for `name` (normalised) of type A or AAAA, recursion desired.
std::vector<std::uint8_t> BuildDnsQuery(std::uint16_t id, std::string_view name, DnsType type);

// A response to `query` (whose question was parsed as `question`): the header and question
// echoed (case included: resolvers that randomise case check it), `rcode`, and one A or AAAA
// record per address of the question's type, with `ttl`.
std::vector<std::uint8_t> BuildDnsResponse(std::span<const std::uint8_t> query,
                                           const DnsQuestion& question, DnsRcode rcode,
                                           std::span<const IpAddress> addresses, std::uint32_t ttl);

// Reads the response to a query built by BuildDnsQuery(id, name, type): checks QR, the id and
// the question (name compared case-insensitively), follows CNAMEs within the answer section, and
// returns the addresses of `type` that belong to the name or its CNAME chain (possibly none).
// Errors: kInvalidArgument for a malformed message or one that does not answer this question
// (the caller keeps waiting for the real one), kNotFound for NXDOMAIN, kUnavailable for any other
// rcode or a truncated (TC) answer.
Result<std::vector<IpAddress>> ParseDnsResponse(std::span<const std::uint8_t> message,
                                                std::uint16_t id, std::string_view name,
                                                DnsType type);

// ParseDnsResponse's addresses with how long they may be kept: `ttl` is the smallest TTL, in
// seconds, of the records they came from (the CNAMEs of the chain included; a TTL with the top
// bit set counts as 0, RFC 2181); 0 when there are no addresses. Same errors.
struct DnsAddresses {
  std::vector<IpAddress> addresses;
  std::uint32_t ttl = 0;
};
Result<DnsAddresses> ParseDnsAnswer(std::span<const std::uint8_t> message, std::uint16_t id,
                                    std::string_view name, DnsType type);

// What the in-sandbox resolver answers and why.
struct DnsAnswer {
  std::vector<std::uint8_t> response;  // empty: no answer at all (the query was unreadable)
  std::string name;                    // normalised, when it was a readable question
  std::uint16_t qtype = 0;
  bool allowed = false;
  std::string reason;
  bool learned = false;  // learn mode answered it (Verdict::learned)
};

// The answerer: an allowed name (policy.DecideName) asked for A gets `enforcer_v4`, for AAAA
// `enforcer_v6` (when that is unset: an empty NOERROR answer); other types of an allowed name
// (HTTPS, SVCB, TXT, MX, ...) get an empty NOERROR answer, so no ECH configuration or other data
// is handed out. A disallowed name gets NXDOMAIN; a malformed question FORMERR (or nothing when
// even the header is unreadable); a class other than IN REFUSED, an opcode other than QUERY NOTIMP.
DnsAnswer AnswerDnsQuery(std::span<const std::uint8_t> query, const EgressPolicy& policy,
                         const std::optional<IpAddress>& enforcer_v4,
                         const std::optional<IpAddress>& enforcer_v6, std::uint32_t ttl = 5);

}  // namespace agvisor::egress
