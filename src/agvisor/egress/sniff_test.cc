#include "agvisor/egress/sniff.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <memory>
#include <vector>

namespace agvisor::egress {
namespace {

using Bytes = std::vector<std::uint8_t>;

void Put16(Bytes* b, std::size_t v) {
  b->push_back(static_cast<std::uint8_t>(v >> 8));
  b->push_back(static_cast<std::uint8_t>(v));
}

Bytes Vec16(const Bytes& body) {
  Bytes out;
  Put16(&out, body.size());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// The server_name extension with the given host_name entries.
Bytes SniExtension(const std::vector<std::string>& names) {
  Bytes list;
  for (const std::string& n : names) {
    list.push_back(0);
    Put16(&list, n.size());
    list.insert(list.end(), n.begin(), n.end());
  }
  Bytes ext;
  Put16(&ext, 0);
  Bytes data = Vec16(list);
  Put16(&ext, data.size());
  ext.insert(ext.end(), data.begin(), data.end());
  return ext;
}

// A ClientHello handshake message (type + 3-byte length + body) with `extensions` (raw, each
// type+length+data), or none at all when `with_extensions` is false.
Bytes ClientHello(const Bytes& extensions, bool with_extensions = true) {
  Bytes body = {3, 3};
  body.insert(body.end(), 32, 0xab);  // random
  body.push_back(0);                  // session id
  Bytes suites = {0x13, 0x01};
  Bytes v = Vec16(suites);
  body.insert(body.end(), v.begin(), v.end());
  body.push_back(1);  // compression methods
  body.push_back(0);
  if (with_extensions) {
    Bytes e = Vec16(extensions);
    body.insert(body.end(), e.begin(), e.end());
  }
  Bytes msg = {1, static_cast<std::uint8_t>(body.size() >> 16),
               static_cast<std::uint8_t>(body.size() >> 8), static_cast<std::uint8_t>(body.size())};
  msg.insert(msg.end(), body.begin(), body.end());
  return msg;
}

// Wraps a handshake message in TLS records of at most `fragment` bytes each.
Bytes Records(const Bytes& handshake, std::size_t fragment = 16384) {
  Bytes out;
  for (std::size_t at = 0; at < handshake.size(); at += fragment) {
    std::size_t n = std::min(fragment, handshake.size() - at);
    out.insert(out.end(), {22, 3, 1});
    Put16(&out, n);
    out.insert(out.end(), handshake.begin() + static_cast<std::ptrdiff_t>(at),
               handshake.begin() + static_cast<std::ptrdiff_t>(at + n));
  }
  return out;
}

// The first flight of a real TLS client (OpenSSL), with SNI `name`.
Bytes OpenSslClientHello(const char* name) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  BIO* rbio = BIO_new(BIO_s_mem());
  BIO* wbio = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl.get(), rbio, wbio);
  // SSL_set_tlsext_host_name is a macro with a C cast; its function form:
  SSL_ctrl(ssl.get(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
           const_cast<char*>(name));
  EXPECT_EQ(SSL_connect(ssl.get()), -1);  // wants the server's answer
  char* data = nullptr;
  long n = BIO_ctrl(wbio, BIO_CTRL_INFO, 0, &data);  // BIO_get_mem_data without its C cast
  return Bytes(data, data + n);
}

// Feeds every prefix shorter than the whole and checks each says kNeedMore, then the whole.
ClientHelloSniff SniffAtEverySplit(const Bytes& bytes) {
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto s = SniffClientHello(std::span(bytes.data(), n));
    EXPECT_EQ(s.status, SniffStatus::kNeedMore) << "prefix " << n << ": " << s.reason;
    if (s.status != SniffStatus::kNeedMore) break;
  }
  return SniffClientHello(bytes);
}

TEST(SniffTlsTest, RealOpenSslClientHelloAtEverySplitPoint) {
  Bytes hello = OpenSslClientHello("files.pythonhosted.org");
  auto s = SniffAtEverySplit(hello);
  ASSERT_EQ(s.status, SniffStatus::kDone) << s.reason;
  EXPECT_TRUE(s.has_server_name);
  EXPECT_EQ(s.server_name, "files.pythonhosted.org");
}

TEST(SniffTlsTest, HandshakeSplitAcrossRecords) {
  Bytes hs = ClientHello(SniExtension({"pypi.org"}));
  for (std::size_t fragment : {1, 2, 3, 4, 5, 17, 60}) {
    auto s = SniffAtEverySplit(Records(hs, fragment));
    ASSERT_EQ(s.status, SniffStatus::kDone) << fragment << ": " << s.reason;
    EXPECT_EQ(s.server_name, "pypi.org");
  }
}

TEST(SniffTlsTest, NoServerNameIsDoneWithoutAName) {
  auto none = SniffClientHello(Records(ClientHello({}, false)));
  EXPECT_EQ(none.status, SniffStatus::kDone);
  EXPECT_FALSE(none.has_server_name);
  // An unrelated extension only (type 0x000a, empty).
  auto other = SniffClientHello(Records(ClientHello({0, 10, 0, 0})));
  EXPECT_EQ(other.status, SniffStatus::kDone);
  EXPECT_FALSE(other.has_server_name);
}

TEST(SniffTlsTest, RefusesWhatIsNotAClientHello) {
  auto expect_refused = [](const Bytes& b, std::string_view why) {
    auto s = SniffClientHello(b);
    EXPECT_EQ(s.status, SniffStatus::kRefused) << why;
    EXPECT_NE(s.reason.find(why), std::string::npos) << s.reason;
  };
  Bytes ok = Records(ClientHello(SniExtension({"a.example"})));
  expect_refused(Bytes{'G', 'E', 'T', ' ', '/'}, "not a TLS handshake record");
  Bytes app = ok;
  app[0] = 23;
  expect_refused(app, "not a TLS handshake record");
  Bytes server_hello = ok;
  server_hello[5] = 2;
  expect_refused(server_hello, "not a ClientHello");
  Bytes bad_version = ok;
  bad_version[1] = 2;
  expect_refused(bad_version, "record version");
  expect_refused(Bytes{22, 3, 1, 0, 0}, "empty TLS handshake record");
  expect_refused(Bytes{22, 3, 1, 0x40, 0x01}, "longer than 2^14");
  // A handshake announcing more than the cap is refused as soon as its header is in.
  expect_refused(Records(Bytes{1, 0x01, 0x00, 0x00}), "larger than");
  // Two names, two extensions.
  expect_refused(Records(ClientHello(SniExtension({"a.example", "b.example"}))), "two host_name");
  Bytes twice = SniExtension({"a.example"});
  Bytes second = SniExtension({"b.example"});
  twice.insert(twice.end(), second.begin(), second.end());
  expect_refused(Records(ClientHello(twice)), "two server_name");
  expect_refused(Records(ClientHello(SniExtension({""}))), "empty host_name");
  // An interleaved non-handshake record.
  Bytes split = Records(ClientHello(SniExtension({"a.example"})), 10);
  split[15] = 21;  // the second record becomes an alert
  expect_refused(split, "interrupted");
}

TEST(SniffTlsTest, RefusesInconsistentLengthsAtEveryCorruption) {
  Bytes hs = ClientHello(SniExtension({"pypi.org"}));
  // Each length field grown or shrunk by one: never a crash, never a wrong name.
  for (std::size_t i = 4; i < hs.size(); ++i) {
    for (int delta : {-1, 1}) {
      Bytes m = hs;
      m[i] = static_cast<std::uint8_t>(m[i] + delta);
      auto s = SniffClientHello(Records(m));
      if (s.status == SniffStatus::kDone && s.has_server_name) {
        // Only the name's own bytes may change without breaking the structure.
        EXPECT_EQ(s.server_name.size(), 8u) << "byte " << i;
      }
    }
  }
}

TEST(SniffTlsTest, ReadsNoMoreThanTheCap) {
  // A record that claims the maximum and never ends: refused once the cap is passed.
  Bytes b = {22, 3, 1, 0x40, 0x00, 1, 0x00, 0x3f, 0xfc};
  b.resize(5 + 16384 - 1, 0);
  auto s = SniffClientHello(b);
  EXPECT_EQ(s.status, SniffStatus::kNeedMore);  // within the cap: a slow client
  Bytes hs = ClientHello(Bytes(kMaxClientHelloBytes, 0));
  auto big = SniffClientHello(Records(hs, 1000));
  EXPECT_EQ(big.status, SniffStatus::kRefused);
}

HttpRequestSniff SniffHttpAtEverySplit(std::string_view req) {
  for (std::size_t n = 0; n < req.size(); ++n) {
    auto s = SniffHttpRequest(req.substr(0, n));
    EXPECT_EQ(s.status, SniffStatus::kNeedMore) << "prefix " << n << ": " << s.reason;
    if (s.status != SniffStatus::kNeedMore) break;
  }
  return SniffHttpRequest(req);
}

TEST(SniffHttpTest, OriginFormTakesTheHostHeader) {
  std::string req = "GET /simple/pip/ HTTP/1.1\r\nUser-Agent: x\r\nhost:  PyPI.org \r\n\r\nBODY";
  auto s = SniffHttpAtEverySplit(req.substr(0, req.size() - 4));
  s = SniffHttpRequest(req);
  ASSERT_EQ(s.status, SniffStatus::kDone) << s.reason;
  EXPECT_EQ(s.form, HttpRequestSniff::Form::kOrigin);
  EXPECT_EQ(s.method, "GET");
  EXPECT_EQ(s.target.host, "pypi.org");
  EXPECT_EQ(s.target.port, 80);
  EXPECT_EQ(s.head_bytes, req.size() - 4);
  auto lf = SniffHttpRequest("GET / HTTP/1.0\nHost: a.example:8080\n\n");
  ASSERT_EQ(lf.status, SniffStatus::kDone) << lf.reason;
  EXPECT_EQ(lf.target.port, 8080);
}

TEST(SniffHttpTest, AbsoluteFormAndConnect) {
  auto abs = SniffHttpAtEverySplit(
      "GET http://Example.com:8080/a?b HTTP/1.1\r\nHost: example.com:8080\r\n\r\n");
  ASSERT_EQ(abs.status, SniffStatus::kDone) << abs.reason;
  EXPECT_EQ(abs.form, HttpRequestSniff::Form::kAbsolute);
  EXPECT_EQ(abs.target.host, "example.com");
  EXPECT_EQ(abs.target.port, 8080);
  auto no_host = SniffHttpRequest("GET http://example.com HTTP/1.1\r\n\r\n");
  ASSERT_EQ(no_host.status, SniffStatus::kDone) << no_host.reason;
  EXPECT_EQ(no_host.target.port, 80);
  auto c = SniffHttpAtEverySplit("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n");
  ASSERT_EQ(c.status, SniffStatus::kDone) << c.reason;
  EXPECT_EQ(c.form, HttpRequestSniff::Form::kConnect);
  EXPECT_EQ(c.target.host, "pypi.org");
  EXPECT_EQ(c.target.port, 443);
  auto v6 = SniffHttpRequest("CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n");
  ASSERT_EQ(v6.status, SniffStatus::kDone) << v6.reason;
  EXPECT_EQ(v6.target.literal, *ParseIpAddress("2001:db8::1"));
}

TEST(SniffHttpTest, RefusesMalformedAndAmbiguousRequests) {
  struct Case {
    std::string request;
    std::string reason;
  };
  const Case cases[] = {
      {"GET / HTTP/1.1\r\n\r\n", "no Host header"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", "more than one Host"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\n folded\r\n\r\n", "line folding"},
      {"GET / HTTP/2.0\r\nHost: a.example\r\n\r\n", "not HTTP/1.0 or 1.1"},
      {"GET /  HTTP/1.1\r\nHost: a.example\r\n\r\n", "malformed request line"},
      {"GET /\r\n\r\n", "malformed request line"},
      {"G(T / HTTP/1.1\r\n\r\n", "bad method"},
      {"GET / HTTP/1.1\r\nBad Header: x\r\nHost: a\r\n\r\n", "malformed header"},
      {"GET https://a.example/ HTTP/1.1\r\n\r\n", "not http://"},
      {"GET http://user@a.example/ HTTP/1.1\r\n\r\n", "user information"},
      {"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n", "does not match"},
      {"CONNECT pypi.org HTTP/1.1\r\n\r\n", "port is required"},
      {"GET / HTTP/1.1\r\nHost: a_b.example\r\n\r\n", "Host header"},
      {"GET / HTTP/1.1\r\nHost: 2130706433\r\n\r\n", "Host header"},
  };
  for (const Case& c : cases) {
    auto s = SniffHttpRequest(c.request);
    EXPECT_EQ(s.status, SniffStatus::kRefused) << c.request;
    EXPECT_NE(s.reason.find(c.reason), std::string::npos) << c.request << " -> " << s.reason;
  }
  // Binary bytes are refused at once, before any line end.
  EXPECT_EQ(SniffHttpRequest(std::string("\x16\x03\x01", 3)).status, SniffStatus::kRefused);
  EXPECT_EQ(SniffHttpRequest(std::string("GE\0", 3)).status, SniffStatus::kRefused);
}

TEST(SniffHttpTest, HeadOverTheCapIsRefused) {
  std::string req =
      "GET / HTTP/1.1\r\nHost: a.example\r\nX: " + std::string(kMaxHttpHeadBytes, 'x');
  auto s = SniffHttpRequest(req);
  EXPECT_EQ(s.status, SniffStatus::kRefused);
  EXPECT_NE(s.reason.find("larger than"), std::string::npos);
}

}  // namespace
}  // namespace agvisor::egress
