#include "agvisor/egress/intercept.h"

#include <gtest/gtest.h>

namespace agvisor::egress {
namespace {

constexpr std::string_view kP1 = "agvsec_11111111111111111111111111111111";
constexpr std::string_view kP2 = "agvsec_22222222222222222222222222222222";

std::vector<BrokeredSecret> Secrets() {
  return {
      {.name = "TOKEN",
       .value = "real-token",
       .placeholder = std::string(kP1),
       .hosts = {"api.test"},
       .header = ""},
      {.name = "KEY",
       .value = "real-key",
       .placeholder = std::string(kP2),
       .hosts = {"api.test", "other.test"},
       .header = "x-api-key"},
  };
}

RequestRewrite Rewrite(const std::string& head, std::string_view host = "api.test") {
  return RewriteRequestHead(head, host, 443, Secrets());
}

TEST(InterceptTest, BearerAndTokenGetTheValue) {
  auto r = Rewrite("GET /v1/x?q=1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " +
                   std::string(kP1) + "\r\n\r\n");
  ASSERT_EQ(r.kind, RequestRewrite::Kind::kForward) << r.reason;
  EXPECT_EQ(r.head,
            "GET /v1/x?q=1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer real-token\r\n\r\n");
  EXPECT_EQ(r.secret, "TOKEN");
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/v1/x");
  r = Rewrite("GET / HTTP/1.1\r\nhost: API.test:443\r\nauthorization: token " + std::string(kP1) +
              "\r\n\r\n");
  ASSERT_EQ(r.kind, RequestRewrite::Kind::kForward) << r.reason;
  EXPECT_NE(r.head.find("authorization: token real-token\r\n"), std::string::npos) << r.head;
}

TEST(InterceptTest, BasicUserOrPasswordDecodedAndEncodedAgain) {
  // "x-access-token:<P1>" and "<P1>:x".
  auto r = Rewrite(
      "GET /repo.git/info/refs HTTP/1.1\r\nHost: api.test\r\nAuthorization: Basic "
      "eC1hY2Nlc3MtdG9rZW46YWd2c2VjXzExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTEx\r\n\r\n");
  ASSERT_EQ(r.kind, RequestRewrite::Kind::kForward);
  // base64("x-access-token:real-token")
  EXPECT_NE(r.head.find("Authorization: Basic eC1hY2Nlc3MtdG9rZW46cmVhbC10b2tlbg==\r\n"),
            std::string::npos)
      << r.head;
  EXPECT_EQ(r.secret, "TOKEN");
  r = Rewrite(
      "GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Basic "
      "YWd2c2VjXzExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTExOng=\r\n\r\n");
  // base64("real-token:x")
  EXPECT_NE(r.head.find("Basic cmVhbC10b2tlbjp4\r\n"), std::string::npos) << r.head;
}

TEST(InterceptTest, NamedHeaderGetsTheValue) {
  auto r = Rewrite("POST /m HTTP/1.1\r\nHost: other.test\r\nX-Api-Key: " + std::string(kP2) +
                       "\r\nContent-Length: 0\r\n\r\n",
                   "other.test");
  ASSERT_EQ(r.kind, RequestRewrite::Kind::kForward);
  EXPECT_NE(r.head.find("X-Api-Key: real-key\r\n"), std::string::npos) << r.head;
  EXPECT_EQ(r.secret, "KEY");
}

// Anywhere but the binding's place, the placeholder goes on unchanged.
TEST(InterceptTest, NeverInThePathQueryOrOtherHeaders) {
  const std::string head = "GET /" + std::string(kP1) + "?k=" + std::string(kP2) +
                           " HTTP/1.1\r\nHost: api.test\r\nX-Echo: " + std::string(kP1) +
                           "\r\nAuthorization: Bearer " + std::string(kP2) +
                           "\r\nCookie: " + std::string(kP2) + "\r\nAuthorization: Digest " +
                           std::string(kP1) + "\r\n\r\n";
  auto r = Rewrite(head);
  ASSERT_EQ(r.kind, RequestRewrite::Kind::kForward);
  EXPECT_EQ(r.head, head);
  EXPECT_EQ(r.secret, "");
}

// TOKEN is bound to api.test only: for other.test its placeholder is a useless string.
TEST(InterceptTest, AnotherHostsSecretStaysAPlaceholder) {
  const std::string head = "GET / HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer " +
                           std::string(kP1) + "\r\n\r\n";
  auto r = Rewrite(head, "other.test");
  ASSERT_EQ(r.kind, RequestRewrite::Kind::kForward);
  EXPECT_EQ(r.head, head);
  EXPECT_EQ(r.secret, "");
}

TEST(InterceptTest, AnotherHostOrPortIsMisdirected) {
  for (const std::string host : {"other.test", "api.test:8443", "api.test.", "[::1]"}) {
    auto r = Rewrite("GET / HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " +
                     std::string(kP1) + "\r\n\r\n");
    if (host == "api.test.") {  // the same name, normalised
      EXPECT_EQ(r.kind, RequestRewrite::Kind::kForward);
      continue;
    }
    EXPECT_EQ(r.kind, RequestRewrite::Kind::kMisdirected) << host;
    EXPECT_TRUE(r.head.empty());
    EXPECT_TRUE(r.secret.empty());
  }
  auto r = Rewrite("GET / HTTP/1.1\r\nAuthorization: Bearer " + std::string(kP1) + "\r\n\r\n");
  EXPECT_EQ(r.kind, RequestRewrite::Kind::kMisdirected);
}

TEST(InterceptTest, ConnectAndUpgradeRefused) {
  EXPECT_EQ(Rewrite("CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n").kind,
            RequestRewrite::Kind::kRefused);
  EXPECT_EQ(
      Rewrite(
          "GET / HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
          .kind,
      RequestRewrite::Kind::kRefused);
}

// Answers as a server sends them, fed split at every point: the same answers come out.
TEST(AnswerTrackerTest, FindsEachAnswersEndAtEverySplit) {
  const std::string stream =
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
      "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n"  // the answer to a HEAD: no body
      "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
      "HTTP/1.1 204 No Content\r\n\r\n"
      "HTTP/1.0 200 OK\r\n\r\nuntil the end";
  for (std::size_t split = 0; split <= stream.size(); ++split) {
    AnswerTracker t;
    for (bool head : {false, true, false, false, false}) t.Expect(head);
    std::vector<AnswerTracker::Answer> all = t.Feed(std::string_view(stream).substr(0, split));
    for (const auto& a : t.Feed(std::string_view(stream).substr(split))) all.push_back(a);
    for (const auto& a : t.End()) all.push_back(a);
    ASSERT_EQ(all.size(), 5u) << split;
    EXPECT_EQ(all[0].status, 200);
    EXPECT_EQ(all[0].bytes, 25u + 43u) << split;  // the interim 100 counts with its final
    EXPECT_EQ(all[1].status, 200);
    EXPECT_EQ(all[2].status, 404);
    EXPECT_EQ(all[3].status, 204);
    EXPECT_EQ(all[4].status, 200);
    EXPECT_EQ(all[4].bytes, 32u);
    EXPECT_FALSE(t.broken());
  }
}

TEST(AnswerTrackerTest, StopsOnGarbageAndHugeHeads) {
  AnswerTracker t;
  t.Expect(false);
  EXPECT_TRUE(t.Feed("SSH-2.0-OpenSSH\r\n\r\n").empty());
  EXPECT_TRUE(t.broken());
  AnswerTracker big;
  big.Expect(false);
  EXPECT_TRUE(big.Feed("HTTP/1.1 200 OK\r\nX: " + std::string(70 * 1024, 'x')).empty());
  EXPECT_TRUE(big.broken());
}

}  // namespace
}  // namespace agvisor::egress
