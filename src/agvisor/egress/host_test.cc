#include "agvisor/egress/host.h"

#include <gtest/gtest.h>

namespace agvisor::egress {
namespace {

TEST(HostTest, NormalisesCaseAndTrailingDot) {
  EXPECT_EQ(*NormalizeHostName("PyPI.org."), "pypi.org");
  EXPECT_EQ(*NormalizeHostName("xn--bcher-kva.example"), "xn--bcher-kva.example");
  EXPECT_EQ(*NormalizeHostName("a-1.b2.c"), "a-1.b2.c");
  EXPECT_EQ(*NormalizeHostName("localhost"), "localhost");
  EXPECT_EQ(*NormalizeHostName("1.2.3.example"), "1.2.3.example");
}

TEST(HostTest, RefusesWhatIsNotAHostName) {
  std::string long_label(64, 'a');
  std::string long_name;
  for (int i = 0; i < 64; ++i) long_name += "abc.";
  long_name += "de";
  for (std::string bad : {std::string(""),
                          std::string("."),
                          std::string("a..b"),
                          std::string(".a"),
                          long_label + ".com",
                          long_name,
                          std::string("-a.com"),
                          std::string("a-.com"),
                          std::string("a_b.com"),
                          std::string("a b.com"),
                          std::string("a\0b.com", 7),
                          std::string("bücher.example"),
                          std::string("*.example.com"),
                          std::string("a/b"),
                          std::string("a:b"),
                          std::string("2130706433"),
                          std::string("127.1"),
                          std::string("0x7f.1"),
                          std::string("1.2.3.4"),
                          std::string("a.b.123")}) {
    auto r = NormalizeHostName(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(r.error().message().find("host name"), std::string::npos);
    }
  }
}

TEST(HostTest, ParsesAuthorities) {
  auto t = ParseAuthority("Example.COM:8080", 80);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "example.com");
  EXPECT_EQ(t->port, 8080);
  EXPECT_FALSE(t->literal);
  EXPECT_EQ(ParseAuthority("example.com", 80)->port, 80);
  auto v4 = ParseAuthority("192.0.2.1:443", 0);
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->literal, IpAddress::V4(192, 0, 2, 1));
  auto v6 = ParseAuthority("[2001:DB8::1]:443", 0);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "2001:db8::1");
  EXPECT_EQ(v6->port, 443);
  EXPECT_EQ(ParseAuthority("[::1]", 80)->port, 80);
  for (std::string_view bad : {"", ":80", "example.com:", "example.com:0", "example.com:65536",
                               "example.com:8x", "example.com:80:80", "[::1", "[1.2.3.4]:80",
                               "2001:db8::1", "[::1]x", "a b:80", "example.com:1234567"}) {
    EXPECT_FALSE(ParseAuthority(bad, 80).ok()) << bad;
  }
  auto no_port = ParseAuthority("example.com", 0);
  ASSERT_FALSE(no_port.ok());
  EXPECT_NE(no_port.error().message().find("port is required"), std::string::npos);
}

}  // namespace
}  // namespace agvisor::egress
