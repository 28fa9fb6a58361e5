#include "agvisor/egress/address.h"

#include <gtest/gtest.h>

namespace agvisor::egress {
namespace {

IpAddress Ip(std::string_view text) {
  auto a = ParseIpAddress(text);
  EXPECT_TRUE(a.ok()) << text;
  return a.ok() ? *a : IpAddress{};
}

TEST(AddressTest, ParsesAndFormatsStrictForms) {
  EXPECT_EQ(Ip("192.0.2.1"), IpAddress::V4(192, 0, 2, 1));
  EXPECT_EQ(FormatIpAddress(Ip("192.0.2.1")), "192.0.2.1");
  EXPECT_EQ(FormatIpAddress(Ip("2001:DB8:0:0:0:0:0:1")), "2001:db8::1");
  EXPECT_FALSE(Ip("::ffff:127.0.0.1").is_v4());
  for (std::string_view bad :
       {"", "127.1", "0x7f.0.0.1", "0127.0.0.1", "2130706433", "1.2.3.4.5", "1.2.3.256", "1.2.3.",
        " 1.2.3.4", "[::1]", "fe80::1%eth0", "1.2.3.4:80", "::g", "example.com"}) {
    auto r = ParseIpAddress(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    }
  }
}

TEST(AddressTest, CidrParsesContainsAndRefusesHostBits) {
  auto c = ParseCidr("203.0.113.0/24");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->Contains(Ip("203.0.113.255")));
  EXPECT_FALSE(c->Contains(Ip("203.0.114.0")));
  EXPECT_FALSE(c->Contains(Ip("::ffff:203.0.113.1")));  // families never mix
  auto odd = ParseCidr("10.0.0.0/9");
  ASSERT_TRUE(odd.ok());
  EXPECT_TRUE(odd->Contains(Ip("10.127.255.255")));
  EXPECT_FALSE(odd->Contains(Ip("10.128.0.0")));
  auto v6 = ParseCidr("2001:db8::/32");
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE(v6->Contains(Ip("2001:db8:ffff::1")));
  EXPECT_FALSE(v6->Contains(Ip("2001:db9::1")));
  auto single = ParseCidr("127.0.0.1");
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->prefix, 32);
  auto all = ParseCidr("0.0.0.0/0");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->Contains(Ip("8.8.8.8")));
  auto host_bits = ParseCidr("203.0.113.7/24");
  ASSERT_FALSE(host_bits.ok());
  EXPECT_NE(host_bits.error().message().find("write 203.0.113.0/24"), std::string::npos);
  for (std::string_view bad : {"1.2.3.0/33", "1.2.3.0/", "1.2.3.0/x", "1.2.3.0/08", "::/129",
                               "foo/8", "/8", "1.2.3.0/24/1"}) {
    EXPECT_FALSE(ParseCidr(bad).ok()) << bad;
  }
  EXPECT_EQ(FormatCidr(*v6), "2001:db8::/32");
}

TEST(AddressTest, RestrictedAddressesAreNamed) {
  struct Case {
    const char* address;
    const char* reason;  // nullptr: public
  };
  const Case cases[] = {
      {"0.0.0.0", "unspecified"},
      {"0.1.2.3", "this network (0/8)"},
      {"127.0.0.1", "loopback"},
      {"127.255.255.254", "loopback"},
      {"10.1.2.3", "private (RFC 1918)"},
      {"172.16.0.1", "private (RFC 1918)"},
      {"172.31.255.255", "private (RFC 1918)"},
      {"172.32.0.1", nullptr},
      {"192.168.1.1", "private (RFC 1918)"},
      {"100.64.0.1", "carrier-grade NAT (RFC 6598)"},
      {"100.128.0.1", nullptr},
      {"169.254.169.254", "link-local (cloud metadata)"},
      {"192.0.0.170", "IETF protocol assignments (192.0.0.0/24)"},
      {"198.19.0.1", "benchmarking (198.18.0.0/15)"},
      {"224.0.0.251", "multicast"},
      {"240.0.0.1", "reserved (240.0.0.0/4)"},
      {"255.255.255.255", "broadcast"},
      {"168.63.129.16", "Azure platform endpoint"},
      {"168.63.129.17", nullptr},
      {"fd00:ec2::254", "unique local (fc00::/7)"},  // AWS's IPv6 metadata address
      {"8.8.8.8", nullptr},
      {"203.0.113.5", nullptr},
      {"::", "unspecified"},
      {"::1", "loopback"},
      {"::ffff:127.0.0.1", "IPv4-mapped: loopback"},
      {"::ffff:169.254.169.254", "IPv4-mapped: link-local (cloud metadata)"},
      {"::ffff:8.8.8.8", nullptr},
      {"::10.0.0.1", "IPv4-compatible: private (RFC 1918)"},
      {"64:ff9b::a9fe:a9fe", "NAT64: link-local (cloud metadata)"},
      {"2002:7f00:1::", "6to4: loopback"},
      {"fe80::1", "link-local"},
      {"fec0::1", "site-local (deprecated)"},
      {"fc00::1", "unique local (fc00::/7)"},
      {"fd12:3456::1", "unique local (fc00::/7)"},
      {"ff02::1", "multicast"},
      {"64:ff9b:1::a00:1", "local-use NAT64"},
      {"64:ff9b:2::1", nullptr},
      {"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo (2001::/32)"},
      {"2001:db8::1", nullptr},
      {"2606:4700::1111", nullptr},
  };
  for (const Case& c : cases) {
    auto reason = RestrictedAddressReason(Ip(c.address));
    if (c.reason == nullptr) {
      EXPECT_FALSE(reason.has_value()) << c.address << ": " << reason.value_or("");
    } else {
      EXPECT_EQ(reason.value_or("(public)"), c.reason) << c.address;
    }
  }
}

TEST(AddressTest, NeverDialledIsASubsetOfRestricted) {
  for (std::string_view a :
       {"127.0.0.2", "0.1.2.3", "169.254.169.254", "168.63.129.16", "100.100.100.200",
        "192.0.0.192", "239.1.1.1", "255.255.255.255", "::1", "::", "fe80::1", "ff02::1",
        "fd00:ec2::254", "::ffff:169.254.169.254", "::7f00:1", "64:ff9b::7f00:1",
        "2002:a9fe:a9fe::1"}) {
    EXPECT_TRUE(NeverDialledReason(Ip(a)).has_value()) << a;
    EXPECT_TRUE(RestrictedAddressReason(Ip(a)).has_value()) << a;
  }
  // Restricted, yet openable by a CIDR rule on purpose (a private service).
  for (std::string_view a : {"10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "192.0.0.8",
                             "198.18.0.1", "fd12::1", "::ffff:10.0.0.1"}) {
    EXPECT_FALSE(NeverDialledReason(Ip(a)).has_value()) << a;
    EXPECT_TRUE(RestrictedAddressReason(Ip(a)).has_value()) << a;
  }
  EXPECT_EQ(NeverDialledReason(Ip("::ffff:127.0.0.1")), "IPv4-mapped: loopback");
  EXPECT_FALSE(NeverDialledReason(Ip("151.101.0.223")).has_value());
}

}  // namespace
}  // namespace agvisor::egress
