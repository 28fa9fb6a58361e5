#include "agvisor/egress/dns_cache.h"

#include <gtest/gtest.h>

namespace agvisor::egress {
namespace {

using std::chrono::seconds;
const DnsCache::Clock::time_point kT0{};

std::vector<IpAddress> One(std::uint8_t last) { return {IpAddress::V4(192, 0, 2, last)}; }

TEST(DnsCacheTest, AnEntryLastsItsTtlAndNoLonger) {
  DnsCache cache;
  cache.Insert("pypi.org", One(1), seconds(30), kT0);
  ASSERT_TRUE(cache.Find("pypi.org", kT0).has_value());
  EXPECT_EQ(*cache.Find("pypi.org", kT0 + seconds(29)), One(1));
  EXPECT_FALSE(cache.Find("pypi.org", kT0 + seconds(30)).has_value());
  EXPECT_FALSE(cache.Find("other.org", kT0).has_value());
}

TEST(DnsCacheTest, LongTtlsAreCappedAndZeroIsNotKept) {
  DnsCache cache(8, seconds(300));
  cache.Insert("long.org", One(1), seconds(86400), kT0);
  EXPECT_TRUE(cache.Find("long.org", kT0 + seconds(299)).has_value());
  EXPECT_FALSE(cache.Find("long.org", kT0 + seconds(300)).has_value());
  cache.Insert("zero.org", One(2), seconds(0), kT0);
  cache.Insert("empty.org", {}, seconds(60), kT0);
  EXPECT_FALSE(cache.Find("zero.org", kT0).has_value());
  EXPECT_FALSE(cache.Find("empty.org", kT0).has_value());
  EXPECT_EQ(cache.size(), 1u);
}

TEST(DnsCacheTest, ANewAnswerReplacesTheOldOne) {
  DnsCache cache;
  cache.Insert("pypi.org", One(1), seconds(60), kT0);
  cache.Insert("pypi.org", One(2), seconds(5), kT0 + seconds(10));
  EXPECT_EQ(*cache.Find("pypi.org", kT0 + seconds(11)), One(2));
  EXPECT_FALSE(cache.Find("pypi.org", kT0 + seconds(15)).has_value());
  EXPECT_EQ(cache.size(), 1u);
}

TEST(DnsCacheTest, IsBoundedDroppingExpiredThenTheFirstToExpire) {
  DnsCache cache(3);
  cache.Insert("a.org", One(1), seconds(10), kT0);
  cache.Insert("b.org", One(2), seconds(100), kT0);
  cache.Insert("c.org", One(3), seconds(50), kT0);
  // Full, nothing expired: the entry closest to its end (a.org) goes.
  cache.Insert("d.org", One(4), seconds(100), kT0);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_FALSE(cache.Find("a.org", kT0).has_value());
  EXPECT_TRUE(cache.Find("b.org", kT0).has_value());
  // At 60 s c.org has expired: it makes the room, the live ones stay.
  cache.Insert("e.org", One(5), seconds(100), kT0 + seconds(60));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_TRUE(cache.Find("b.org", kT0 + seconds(60)).has_value());
  EXPECT_TRUE(cache.Find("d.org", kT0 + seconds(60)).has_value());
  EXPECT_TRUE(cache.Find("e.org", kT0 + seconds(60)).has_value());
  // Thousands of names never grow it past its bound.
  for (int i = 0; i < 5000; ++i) {
    cache.Insert("n" + std::to_string(i) + ".org", One(6), seconds(100), kT0 + seconds(60));
  }
  EXPECT_EQ(cache.size(), 3u);
}

TEST(DnsCacheTest, ACacheOfNoEntriesKeepsNothing) {
  DnsCache cache(0);
  cache.Insert("pypi.org", One(1), seconds(60), kT0);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.Find("pypi.org", kT0).has_value());
}

}  // namespace
}  // namespace agvisor::egress
