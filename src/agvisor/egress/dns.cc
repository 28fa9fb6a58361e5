#include "agvisor/egress/dns.h"

#include <algorithm>

#include "agvisor/egress/host.h"

namespace agvisor::egress {
namespace {

constexpr std::size_t kHeaderBytes = 12;
constexpr std::uint16_t kClassIn = 1;
constexpr std::uint16_t kTypeOpt = 41;

std::uint16_t Get16(std::span<const std::uint8_t> m, std::size_t at) {
  return static_cast<std::uint16_t>((m[at] << 8) | m[at + 1]);
}

void Put16(std::vector<std::uint8_t>* out, std::uint16_t v) {
  out->push_back(static_cast<std::uint8_t>(v >> 8));
  out->push_back(static_cast<std::uint8_t>(v));
}

void Put32(std::vector<std::uint8_t>* out, std::uint32_t v) {
  Put16(out, static_cast<std::uint16_t>(v >> 16));
  Put16(out, static_cast<std::uint16_t>(v));
}

Error Malformed(std::string why) { return Error::InvalidArgument("DNS message: " + why); }

// Reads a name at `*pos`, following compression pointers when `allow_pointers` (bounded: a
// pointer must point backwards, so a loop is impossible). Advances *pos past the name as it sits
// in the message.
Result<std::string> ReadName(std::span<const std::uint8_t> m, std::size_t* pos,
                             bool allow_pointers) {
  std::string name;
  std::size_t at = *pos;
  bool jumped = false;
  std::size_t limit = m.size();
  while (true) {
    if (at >= m.size()) return Malformed("name runs past the end");
    std::uint8_t len = m[at];
    if ((len & 0xc0) == 0xc0) {
      if (!allow_pointers) return Malformed("compression pointer in a question");
      if (at + 1 >= m.size()) return Malformed("truncated compression pointer");
      std::size_t target = static_cast<std::size_t>(((len & 0x3f) << 8) | m[at + 1]);
      if (target >= std::min(at, limit))
        return Malformed("compression pointer does not point back");
      if (!jumped) *pos = at + 2;
      jumped = true;
      limit = target;
      at = target;
      continue;
    }
    if (len & 0xc0) return Malformed("unknown label type");
    if (len == 0) {
      if (!jumped) *pos = at + 1;
      return name;
    }
    if (at + 1 + len > m.size()) return Malformed("label runs past the end");
    if (!name.empty()) name += '.';
    for (std::size_t i = 0; i < len; ++i) {
      char c = static_cast<char>(m[at + 1 + i]);
      if (c <= ' ' || c > '~' || c == '.') return Malformed("a label holds a byte outside ASCII");
      name += c;
    }
    if (name.size() > 253) return Malformed("name longer than 253 characters");
    at += 1 + len;
  }
}

bool SameName(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    return lower(x) == lower(y);
  });
}

// A header-only reply (no question) for queries too broken to echo.
std::vector<std::uint8_t> HeaderOnly(std::span<const std::uint8_t> query, DnsRcode rcode) {
  std::vector<std::uint8_t> out(query.begin(), query.begin() + kHeaderBytes);
  out[2] = static_cast<std::uint8_t>(0x80 | (query[2] & 0x79));  // QR, keep opcode and RD
  out[3] = static_cast<std::uint8_t>(rcode);
  std::fill(out.begin() + 4, out.end(), 0);
  return out;
}

}  // namespace

Result<DnsQuestion> ParseDnsQuery(std::span<const std::uint8_t> m) {
  if (m.size() < kHeaderBytes) return Malformed("shorter than a header");
  if (m[2] & 0x80) return Malformed("a response, not a query");
  if ((m[2] >> 3) & 0x0f) return Malformed("opcode is not QUERY");
  if (Get16(m, 4) != 1) return Malformed("must hold exactly one question");
  if (Get16(m, 6) != 0 || Get16(m, 8) != 0) return Malformed("a query with answer records");
  if (Get16(m, 10) > 1) return Malformed("more than one additional record");
  DnsQuestion q;
  q.id = Get16(m, 0);
  std::size_t pos = kHeaderBytes;
  q.name = AGVISOR_TRY(ReadName(m, &pos, false));
  if (pos + 4 > m.size()) return Malformed("truncated question");
  q.qtype = Get16(m, pos);
  q.qclass = Get16(m, pos + 2);
  q.question_end = pos + 4;
  if (Get16(m, 10) == 1) {
    std::size_t at = q.question_end;
    if (at + 11 > m.size() || m[at] != 0 || Get16(m, at + 1) != kTypeOpt) {
      return Malformed("the additional record is not an EDNS OPT");
    }
  }
  return q;
}

std::vector<std::uint8_t> BuildDnsQuery(std::uint16_t id, std::string_view name, DnsType type) {
  std::vector<std::uint8_t> out;
  Put16(&out, id);
  Put16(&out, 0x0100);  // RD
  Put16(&out, 1);
  Put16(&out, 0);
  Put16(&out, 0);
  Put16(&out, 0);
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    out.push_back(static_cast<std::uint8_t>(dot - start));
    out.insert(out.end(), name.begin() + static_cast<std::ptrdiff_t>(start),
               name.begin() + static_cast<std::ptrdiff_t>(dot));
    start = dot + 1;
  }
  out.push_back(0);
  Put16(&out, static_cast<std::uint16_t>(type));
  Put16(&out, kClassIn);
  return out;
}

std::vector<std::uint8_t> BuildDnsResponse(std::span<const std::uint8_t> query,
                                           const DnsQuestion& question, DnsRcode rcode,
                                           std::span<const IpAddress> addresses,
                                           std::uint32_t ttl) {
  std::vector<std::uint8_t> out(query.begin(),
                                query.begin() + static_cast<std::ptrdiff_t>(question.question_end));
  out[2] = static_cast<std::uint8_t>(0x80 | 0x04 | (query[2] & 0x01));          // QR, AA, keep RD
  out[3] = static_cast<std::uint8_t>(0x80 | static_cast<std::uint8_t>(rcode));  // RA
  std::vector<const IpAddress*> matching;
  for (const IpAddress& a : addresses) {
    bool v4 = question.qtype == static_cast<std::uint16_t>(DnsType::kA);
    bool v6 = question.qtype == static_cast<std::uint16_t>(DnsType::kAaaa);
    if ((v4 && a.is_v4()) || (v6 && !a.is_v4())) matching.push_back(&a);
  }
  out[6] = 0;
  out[7] = static_cast<std::uint8_t>(matching.size());
  out[8] = out[9] = out[10] = out[11] = 0;
  for (const IpAddress* a : matching) {
    Put16(&out, 0xc000 | kHeaderBytes);  // the question's name
    Put16(&out, question.qtype);
    Put16(&out, kClassIn);
    Put32(&out, ttl);
    Put16(&out, static_cast<std::uint16_t>(a->size()));
    out.insert(out.end(), a->bytes.begin(),
               a->bytes.begin() + static_cast<std::ptrdiff_t>(a->size()));
  }
  return out;
}

Result<DnsAddresses> ParseDnsAnswer(std::span<const std::uint8_t> m, std::uint16_t id,
                                    std::string_view name, DnsType type) {
  if (m.size() < kHeaderBytes) return Malformed("shorter than a header");
  if (!(m[2] & 0x80) || Get16(m, 0) != id) return Malformed("not the response to this query");
  if (Get16(m, 4) != 1) return Malformed("response without its question");
  std::size_t pos = kHeaderBytes;
  std::string qname = AGVISOR_TRY(ReadName(m, &pos, true));
  if (pos + 4 > m.size()) return Malformed("truncated question");
  if (!SameName(qname, name) || Get16(m, pos) != static_cast<std::uint16_t>(type)) {
    return Malformed("the question is not ours");
  }
  pos += 4;
  if (m[2] & 0x02) {
    return Error::Unavailable("DNS answer for " + std::string(name) + " was truncated");
  }
  auto rcode = static_cast<DnsRcode>(m[3] & 0x0f);
  if (rcode == DnsRcode::kNxDomain) {
    return Error::NotFound("DNS: " + std::string(name) + " does not exist (NXDOMAIN)");
  }
  if (rcode != DnsRcode::kNoError) {
    return Error::Unavailable("DNS: the resolver answered rcode " +
                              std::to_string(static_cast<int>(rcode)) + " for " +
                              std::string(name));
  }
  struct Record {
    std::string owner;
    std::uint16_t type;
    std::uint32_t ttl;
    std::span<const std::uint8_t> data;
    std::string cname;
  };
  std::vector<Record> records;
  std::uint16_t count = Get16(m, 6);
  for (std::uint16_t i = 0; i < count; ++i) {
    Record r;
    r.owner = AGVISOR_TRY(ReadName(m, &pos, true));
    if (pos + 10 > m.size()) return Malformed("truncated record");
    r.type = Get16(m, pos);
    r.ttl = (std::uint32_t{Get16(m, pos + 4)} << 16) | Get16(m, pos + 6);
    // RFC 2181 section 8: a TTL with the top bit set is read as zero.
    if (r.ttl > 0x7fffffffu) r.ttl = 0;
    std::uint16_t rdlen = Get16(m, pos + 8);
    pos += 10;
    if (pos + rdlen > m.size()) return Malformed("record data runs past the end");
    r.data = m.subspan(pos, rdlen);
    if (r.type == static_cast<std::uint16_t>(DnsType::kCname)) {
      std::size_t at = pos;
      r.cname = AGVISOR_TRY(ReadName(m, &at, true));
    }
    pos += rdlen;
    records.push_back(std::move(r));
  }
  // The names that stand for `name`: itself, then each CNAME target in turn (bounded by the
  // record count, so a CNAME loop ends).
  std::vector<std::string> aliases{std::string(name)};
  DnsAddresses out;
  std::optional<std::uint32_t> ttl;  // the smallest TTL of the records used
  for (std::size_t round = 0; round < records.size(); ++round) {
    bool grew = false;
    for (const Record& r : records) {
      if (r.cname.empty() || !SameName(r.owner, aliases.back())) continue;
      aliases.push_back(r.cname);
      ttl = std::min(ttl.value_or(r.ttl), r.ttl);
      grew = true;
      break;
    }
    if (!grew) break;
  }
  for (const Record& r : records) {
    if (r.type != static_cast<std::uint16_t>(type)) continue;
    bool ours = std::any_of(aliases.begin(), aliases.end(),
                            [&](const std::string& a) { return SameName(a, r.owner); });
    if (!ours) continue;
    IpAddress a;
    if (type == DnsType::kA && r.data.size() == 4) {
      a = IpAddress::V4(r.data[0], r.data[1], r.data[2], r.data[3]);
    } else if (type == DnsType::kAaaa && r.data.size() == 16) {
      a.family = IpAddress::Family::kV6;
      std::copy(r.data.begin(), r.data.end(), a.bytes.begin());
    } else {
      return Malformed("address record of the wrong size");
    }
    out.addresses.push_back(a);
    ttl = std::min(ttl.value_or(r.ttl), r.ttl);
  }
  out.ttl = out.addresses.empty() ? 0 : ttl.value_or(0);
  return out;
}

Result<std::vector<IpAddress>> ParseDnsResponse(std::span<const std::uint8_t> m, std::uint16_t id,
                                                std::string_view name, DnsType type) {
  DnsAddresses a = AGVISOR_TRY(ParseDnsAnswer(m, id, name, type));
  return std::move(a.addresses);
}

DnsAnswer AnswerDnsQuery(std::span<const std::uint8_t> query, const EgressPolicy& policy,
                         const std::optional<IpAddress>& enforcer_v4,
                         const std::optional<IpAddress>& enforcer_v6, std::uint32_t ttl) {
  DnsAnswer answer;
  if (query.size() < kHeaderBytes || (query[2] & 0x80)) {
    answer.reason = "unreadable DNS query";
    return answer;  // nothing to answer: a response, or not even a header
  }
  auto q = ParseDnsQuery(query);
  if (!q.ok()) {
    bool not_query = (query[2] >> 3) & 0x0f;
    answer.response = HeaderOnly(query, not_query ? DnsRcode::kNotImp : DnsRcode::kFormErr);
    answer.reason = q.error().message();
    return answer;
  }
  answer.qtype = q->qtype;
  auto name = NormalizeHostName(q->name);
  if (!name.ok()) {
    answer.name = q->name;
    answer.reason = name.error().message();
    answer.response = BuildDnsResponse(query, *q, DnsRcode::kNxDomain, {}, ttl);
    return answer;
  }
  answer.name = *name;
  if (q->qclass != kClassIn) {
    answer.reason = "class " + std::to_string(q->qclass) + " is not IN";
    answer.response = BuildDnsResponse(query, *q, DnsRcode::kRefused, {}, ttl);
    return answer;
  }
  Verdict verdict = policy.DecideName(*name);
  answer.allowed = verdict.allowed;
  answer.reason = verdict.reason;
  answer.learned = verdict.learned;
  if (!verdict.allowed) {
    answer.response = BuildDnsResponse(query, *q, DnsRcode::kNxDomain, {}, ttl);
    return answer;
  }
  std::vector<IpAddress> addresses;
  if (enforcer_v4) addresses.push_back(*enforcer_v4);
  if (enforcer_v6) addresses.push_back(*enforcer_v6);
  answer.response = BuildDnsResponse(query, *q, DnsRcode::kNoError, addresses, ttl);
  return answer;
}

}  // namespace agvisor::egress
