#include "agvisor/egress/sniff.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <chrono>
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
  auto port = SniffHttpRequest("\r\nGET / HTTP/1.0\r\nHost: a.example:8080\r\n\r\n");
  ASSERT_EQ(port.status, SniffStatus::kDone) << port.reason;
  EXPECT_EQ(port.target.port, 8080);
  EXPECT_EQ(port.head_bytes, 42u);  // the empty line before the request line included
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
      // Framing the proxy and a server could read differently (request smuggling).
      {"GET / HTTP/1.0\nHost: a.example\n\n", "bare LF"},
      {"GET / HTTP/1.1\r\nHost: a.example\nX: y\r\n\r\n", "bare LF"},
      {"GET / HTTP/1.1\r\nHost: a.example\rX: y\r\n\r\n", "bare CR"},
      {"GET / HTTP/1.1\r\nHost : a.example\r\n\r\n", "whitespace before its colon"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nX: a\x01b\r\n\r\n", "control character"},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
       "both Transfer-Encoding and Content-Length"},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
       "more than one Content-Length"},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n",
       "more than one Content-Length"},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", "not a decimal"},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", "not a decimal"},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
       "other than chunked"},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
       "chunked\r\n\r\n",
       "more than one Transfer-Encoding"},
      {"POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.0"},
      {"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: foo, H2C\r\n\r\n", "Upgrade to h2c"},
      {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "not HTTP/1.0 or 1.1"},
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

// Feeds `chunks` to an HttpRequestStream as the proxy does (the bytes no step covered are kept
// and passed again with the next chunk); returns one line per head ("HEAD host:port upgrade?"),
// body bytes summed per run ("BODY n"), and "REFUSED reason" at the end if refused. `covered` gets
// the bytes the steps covered, in order.
std::vector<std::string> FeedStream(const std::vector<std::string>& chunks,
                                    std::string* covered = nullptr) {
  HttpRequestStream stream;
  std::vector<std::string> out;
  std::string pending;
  std::size_t body = 0;
  auto flush_body = [&] {
    if (body > 0) out.push_back("BODY " + std::to_string(body));
    body = 0;
  };
  for (const std::string& chunk : chunks) {
    pending += chunk;
    while (true) {
      HttpRequestStream::Step step = stream.Next(pending);
      if (step.kind == HttpRequestStream::Step::Kind::kNeedMore) break;
      if (step.kind == HttpRequestStream::Step::Kind::kRefused) {
        flush_body();
        out.push_back("REFUSED " + step.reason);
        return out;
      }
      if (covered) *covered += pending.substr(0, step.bytes);
      if (step.kind == HttpRequestStream::Step::Kind::kBody) {
        body += step.bytes;
      } else {
        flush_body();
        out.push_back("HEAD " + step.request.method + " " + step.request.target.host + ":" +
                      std::to_string(step.request.target.port) +
                      (step.request.upgrade ? " upgrade" : ""));
      }
      pending.erase(0, step.bytes);
    }
  }
  flush_body();
  return out;
}

// Three requests a server reads as three: a Content-Length body that looks like a request, a
// chunked body with extensions and trailers, an empty line before the next request line, and an
// absolute-form request.
const std::string kPipeline =
    "POST /a HTTP/1.1\r\nHost: a.example\r\nContent-Length: 38\r\n\r\n"
    "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n"
    "PUT /b HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: Chunked\r\n\r\n"
    "5;name=value\r\nhello\r\n1d\r\nGET / HTTP/1.1\r\nHost: e.x\r\n\r\n\r\n0\r\nTrail: v\r\n\r\n"
    "\r\nGET http://a.example:8080/c HTTP/1.1\r\nUpgrade: websocket\r\n\r\n";

const std::vector<std::string> kPipelineEvents = {"HEAD POST a.example:80", "BODY 38",
                                                  "HEAD PUT a.example:80", "BODY 71",
                                                  "HEAD GET a.example:8080 upgrade"};

TEST(HttpRequestStreamTest, FollowsBodiesSoEveryHeadIsFoundAtEverySplit) {
  std::string covered;
  EXPECT_EQ(FeedStream({kPipeline}, &covered), kPipelineEvents);
  EXPECT_EQ(covered, kPipeline);
  for (std::size_t k = 1; k < kPipeline.size(); ++k) {
    std::string c;
    auto events = FeedStream({kPipeline.substr(0, k), kPipeline.substr(k)}, &c);
    // A split inside a body gives two body steps where one was; the heads stay the same.
    std::vector<std::string> heads;
    for (const auto& e : events) {
      if (!e.starts_with("BODY")) heads.push_back(e);
    }
    EXPECT_EQ(heads, (std::vector<std::string>{kPipelineEvents[0], kPipelineEvents[2],
                                               kPipelineEvents[4]}))
        << "split at " << k;
    EXPECT_EQ(c, kPipeline) << "split at " << k;
  }
  std::vector<std::string> bytes;
  for (char ch : kPipeline) bytes.emplace_back(1, ch);
  std::string c;
  auto one_by_one = FeedStream(bytes, &c);
  EXPECT_EQ(one_by_one.size(), 5u);
  EXPECT_EQ(c, kPipeline);
}

TEST(HttpRequestStreamTest, AmbiguousFramingOfALaterRequestIsRefused) {
  const std::string first = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
  struct Case {
    std::string then;
    std::string reason;
  };
  const Case cases[] = {
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
       "both Transfer-Encoding and Content-Length"},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
       "more than one Content-Length"},
      {"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n  2\r\n\r\n", "line folding"},
      {"GET / HTTP/1.1\nHost: a\n\n", "bare LF"},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello", "bare LF"},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX",
       "not followed by CRLF"},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not hexadecimal"},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n",
       "too large"},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n folded\r\n\r\n",
       "line folding"},
  };
  for (const Case& c : cases) {
    auto events = FeedStream({first + c.then});
    ASSERT_GE(events.size(), 2u) << c.then;
    EXPECT_EQ(events[0], "HEAD GET a.example:80");
    EXPECT_TRUE(events.back().starts_with("REFUSED ")) << c.then;
    EXPECT_NE(events.back().find(c.reason), std::string::npos) << c.then << " -> " << events.back();
  }
}

// Found by egress_fuzz: a CR of an empty line before the request line, arriving alone, was
// taken for the end of the method, so a bad method after it passed when sent byte by byte.
TEST(HttpRequestStreamTest, EmptyLinesBeforeTheRequestLineAtEverySplit) {
  for (const std::string& in : {std::string("\r\n/1.1\r\nHost: a.example\r\n\r\n"),
                                std::string("\r\n\r\nGET / HTTP/1.1\r\nHost: a.example\r\n\r\n")}) {
    const auto whole = FeedStream({in});
    std::vector<std::string> bytes;
    for (char ch : in) bytes.emplace_back(1, ch);
    EXPECT_EQ(FeedStream(bytes), whole) << in;
  }
  EXPECT_EQ(FeedStream({"\r\n/1.1\r\nHost: a\r\n\r\n"}).back(),
            "REFUSED not an HTTP request (bad method)");
}

// The sniffers resume where they stopped: bytes sent one at a time cost work linear in their
// number. Before they did, every read re-parsed the whole prefix: the TLS case below took
// seconds (quadratic in 96 KiB), which a sandbox could repeat on every connection.
TEST(SniffIncrementalTest, OneByteAtATimeIsLinear) {
  Bytes hs = ClientHello(SniExtension({"pypi.org"}));
  hs.resize(kMaxClientHelloBytes - 64, 0);  // padding inside the last extension's room
  const std::size_t body = hs.size() - 4;
  hs[1] = static_cast<std::uint8_t>(body >> 16);
  hs[2] = static_cast<std::uint8_t>(body >> 8);
  hs[3] = static_cast<std::uint8_t>(body);
  const Bytes records = Records(hs, 1);  // 1-byte records: 6 bytes on the wire per byte
  ASSERT_GT(records.size(), 90'000u);
  const auto start = std::chrono::steady_clock::now();
  ClientHelloSniffer tls;
  for (std::size_t n = 1; n <= records.size(); ++n) {
    const ClientHelloSniff& s = tls.Feed(std::span(records).first(n));
    if (s.status != SniffStatus::kNeedMore) {
      EXPECT_EQ(n, records.size());
      break;
    }
  }
  EXPECT_NE(tls.Feed(records).status, SniffStatus::kNeedMore);
  std::string head =
      "GET / HTTP/1.1\r\nHost: a.example\r\nX: " + std::string(kMaxHttpHeadBytes - 64, 'x') +
      "\r\n\r\n";
  HttpRequestStream http;
  std::size_t steps = 0;
  for (std::size_t n = 1; n <= head.size(); ++n) {
    auto step = http.Next(std::string_view(head).substr(0, n));
    if (step.kind != HttpRequestStream::Step::Kind::kNeedMore) {
      EXPECT_EQ(step.kind, HttpRequestStream::Step::Kind::kHead) << step.reason;
      ++steps;
    }
  }
  EXPECT_EQ(steps, 1u);
  // Linear: a few milliseconds here; quadratic took seconds. The bound is loose for a busy host.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
}

}  // namespace
}  // namespace agvisor::egress
