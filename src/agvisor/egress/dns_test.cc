#include "agvisor/egress/dns.h"

#include <gtest/gtest.h>

namespace agvisor::egress {
namespace {

using Bytes = std::vector<std::uint8_t>;

EgressPolicy Policy() {
  return *EgressPolicy::Create(std::vector<std::string>{"pypi.org", "*.pythonhosted.org"}, {}, {});
}

const IpAddress kEnforcerV4 = IpAddress::V4(10, 200, 0, 1);

Bytes WithType(Bytes query, std::uint16_t type) {
  query[query.size() - 4] = static_cast<std::uint8_t>(type >> 8);
  query[query.size() - 3] = static_cast<std::uint8_t>(type);
  return query;
}

TEST(DnsTest, AllowedNameGetsTheEnforcersAddress) {
  Bytes q = BuildDnsQuery(0x1234, "files.pythonhosted.org", DnsType::kA);
  DnsAnswer a = AnswerDnsQuery(q, Policy(), kEnforcerV4, std::nullopt);
  EXPECT_TRUE(a.allowed);
  EXPECT_EQ(a.name, "files.pythonhosted.org");
  EXPECT_EQ(a.reason, "allowed by *.pythonhosted.org");
  auto r = ParseDnsResponse(a.response, 0x1234, "files.pythonhosted.org", DnsType::kA);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(*r, std::vector<IpAddress>{kEnforcerV4});
  // AAAA without an IPv6 enforcer address: an empty NOERROR answer.
  Bytes q6 = BuildDnsQuery(7, "pypi.org", DnsType::kAaaa);
  DnsAnswer a6 = AnswerDnsQuery(q6, Policy(), kEnforcerV4, std::nullopt);
  auto r6 = ParseDnsResponse(a6.response, 7, "pypi.org", DnsType::kAaaa);
  ASSERT_TRUE(r6.ok());
  EXPECT_TRUE(r6->empty());
  IpAddress v6 = *ParseIpAddress("fd00::1");
  auto r6b = ParseDnsResponse(AnswerDnsQuery(q6, Policy(), kEnforcerV4, v6).response, 7, "pypi.org",
                              DnsType::kAaaa);
  EXPECT_EQ(*r6b, std::vector<IpAddress>{v6});
}

TEST(DnsTest, CaseOfTheQuestionIsEchoed) {
  Bytes q = BuildDnsQuery(9, "PyPI.Org", DnsType::kA);
  DnsAnswer a = AnswerDnsQuery(q, Policy(), kEnforcerV4, std::nullopt);
  EXPECT_TRUE(a.allowed);
  EXPECT_TRUE(std::equal(q.begin() + 12, q.end(), a.response.begin() + 12));
  EXPECT_TRUE(ParseDnsResponse(a.response, 9, "PyPI.Org", DnsType::kA).ok());
}

TEST(DnsTest, DisallowedNamesGetNxdomainAndOtherTypesNoData) {
  for (std::string name : {"evil.example", "pythonhosted.org", "x.pypi.org",
                           "c2VjcmV0.files.pythonhosted.org.evil.example"}) {
    Bytes q = BuildDnsQuery(1, name, DnsType::kA);
    DnsAnswer a = AnswerDnsQuery(q, Policy(), kEnforcerV4, std::nullopt);
    EXPECT_FALSE(a.allowed) << name;
    auto r = ParseDnsResponse(a.response, 1, name, DnsType::kA);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  }
  // HTTPS (65) of an allowed name: NOERROR, no records (no ECH configuration handed out).
  Bytes https = WithType(BuildDnsQuery(2, "pypi.org", DnsType::kA), 65);
  DnsAnswer a = AnswerDnsQuery(https, Policy(), kEnforcerV4, std::nullopt);
  EXPECT_TRUE(a.allowed);
  EXPECT_EQ(a.response[3] & 0x0f, 0);
  EXPECT_EQ(a.response[7], 0);
}

TEST(DnsTest, MalformedQueriesGetFormerrOrNothing) {
  Bytes q = BuildDnsQuery(3, "pypi.org", DnsType::kA);
  EXPECT_TRUE(
      AnswerDnsQuery(Bytes(q.begin(), q.begin() + 11), Policy(), kEnforcerV4, {}).response.empty());
  // Every truncation of a query past the header: FORMERR, never a crash or an allowed answer.
  for (std::size_t n = 12; n < q.size(); ++n) {
    DnsAnswer a = AnswerDnsQuery(Bytes(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(n)),
                                 Policy(), kEnforcerV4, {});
    EXPECT_FALSE(a.allowed) << n;
    ASSERT_EQ(a.response.size(), 12u) << n;
    EXPECT_EQ(a.response[3] & 0x0f, 1) << n;
  }
  Bytes two = q;
  two[5] = 2;
  EXPECT_EQ(AnswerDnsQuery(two, Policy(), kEnforcerV4, {}).response[3] & 0x0f, 1);
  Bytes pointer = q;
  pointer[12] = 0xc0;
  pointer[13] = 12;
  EXPECT_EQ(AnswerDnsQuery(pointer, Policy(), kEnforcerV4, {}).response[3] & 0x0f, 1);
  Bytes notify = q;
  notify[2] = 4 << 3;
  EXPECT_EQ(AnswerDnsQuery(notify, Policy(), kEnforcerV4, {}).response[3] & 0x0f, 4);
  Bytes chaos = q;
  chaos[chaos.size() - 1] = 3;
  DnsAnswer c = AnswerDnsQuery(chaos, Policy(), kEnforcerV4, {});
  EXPECT_FALSE(c.allowed);
  EXPECT_EQ(c.response[3] & 0x0f, 5);
  Bytes binary = BuildDnsQuery(4, "pypi.org", DnsType::kA);
  binary[13] = 0x80;
  EXPECT_EQ(AnswerDnsQuery(binary, Policy(), kEnforcerV4, {}).response[3] & 0x0f, 1);
  Bytes response = AnswerDnsQuery(q, Policy(), kEnforcerV4, {}).response;
  EXPECT_TRUE(AnswerDnsQuery(response, Policy(), kEnforcerV4, {}).response.empty());
}

// A response as an upstream resolver would send it: the question, a CNAME, then A records.
Bytes UpstreamResponse(std::uint16_t id) {
  Bytes q = BuildDnsQuery(id, "pypi.org", DnsType::kA);
  Bytes r = q;
  r[2] = 0x81;
  r[3] = 0x80;
  r[7] = 3;
  auto name_ptr = [&r](std::uint16_t at) {
    r.push_back(static_cast<std::uint8_t>(0xc0 | (at >> 8)));
    r.push_back(static_cast<std::uint8_t>(at));
  };
  // pypi.org CNAME cdn.example (labels written out once, then pointed at).
  name_ptr(12);
  r.insert(r.end(), {0, 5, 0, 1, 0, 0, 0, 60, 0, 13});
  std::size_t cdn = r.size();
  r.insert(r.end(), {3, 'c', 'd', 'n', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0});
  name_ptr(static_cast<std::uint16_t>(cdn));
  r.insert(r.end(), {0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 151, 101, 0, 223});
  // An A record for an unrelated name must not be taken.
  r.insert(r.end(), {5, 'o', 't', 'h', 'e', 'r', 0});
  r.insert(r.end(), {0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 1});
  return r;
}

TEST(DnsTest, ResponsesFollowCnamesAndIgnoreStrangers) {
  Bytes r = UpstreamResponse(77);
  auto a = ParseDnsResponse(r, 77, "pypi.org", DnsType::kA);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(*a, std::vector<IpAddress>{IpAddress::V4(151, 101, 0, 223)});
  EXPECT_EQ(ParseDnsResponse(r, 78, "pypi.org", DnsType::kA).error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ParseDnsResponse(r, 77, "other.org", DnsType::kA).error().code(),
            ErrorCode::kInvalidArgument);
  Bytes tc = r;
  tc[2] |= 0x02;
  EXPECT_EQ(ParseDnsResponse(tc, 77, "pypi.org", DnsType::kA).error().code(),
            ErrorCode::kUnavailable);
  Bytes servfail = r;
  servfail[3] = 0x82;
  EXPECT_EQ(ParseDnsResponse(servfail, 77, "pypi.org", DnsType::kA).error().code(),
            ErrorCode::kUnavailable);
  // Every truncation: an error, never a crash.
  for (std::size_t n = 0; n < r.size(); ++n) {
    EXPECT_FALSE(ParseDnsResponse(std::span(r.data(), n), 77, "pypi.org", DnsType::kA).ok()) << n;
  }
  // A pointer to itself (a loop) is refused.
  Bytes loop = r;
  std::size_t first_answer = BuildDnsQuery(77, "pypi.org", DnsType::kA).size();
  loop[first_answer] = 0xc0;
  loop[first_answer + 1] = static_cast<std::uint8_t>(first_answer);
  EXPECT_FALSE(ParseDnsResponse(loop, 77, "pypi.org", DnsType::kA).ok());
}

TEST(DnsTest, AnswersCarryTheSmallestTtlOfTheRecordsUsed) {
  Bytes r = UpstreamResponse(77);
  const std::size_t cname_ttl = BuildDnsQuery(77, "pypi.org", DnsType::kA).size() + 6;
  const std::size_t a_ttl = cname_ttl + 4 + 2 + 13 + 2 + 4;
  const std::size_t other_ttl = a_ttl + 4 + 2 + 4 + 7 + 4;
  auto set_ttl = [&r](std::size_t at, std::uint32_t ttl) {
    for (int i = 0; i < 4; ++i) r[at + i] = static_cast<std::uint8_t>(ttl >> (24 - 8 * i));
  };
  auto ttl = [&r] { return ParseDnsAnswer(r, 77, "pypi.org", DnsType::kA).value().ttl; };
  EXPECT_EQ(ttl(), 60u);
  set_ttl(other_ttl, 1);  // a record of another name counts for nothing
  EXPECT_EQ(ttl(), 60u);
  set_ttl(cname_ttl, 20);  // the CNAME of the chain does
  EXPECT_EQ(ttl(), 20u);
  set_ttl(a_ttl, 7);
  EXPECT_EQ(ttl(), 7u);
  set_ttl(a_ttl, 0x80000000u);  // top bit set: zero (RFC 2181)
  EXPECT_EQ(ttl(), 0u);
  EXPECT_EQ(ParseDnsAnswer(r, 77, "pypi.org", DnsType::kA).value().addresses,
            std::vector<IpAddress>{IpAddress::V4(151, 101, 0, 223)});
}

}  // namespace
}  // namespace agvisor::egress
