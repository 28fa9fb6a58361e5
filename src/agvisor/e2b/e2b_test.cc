// The E2B door's pure parts: ids, the API key, envd tokens, signed file URLs, error shapes and
// the network mapping.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "agvisor/e2b/auth.h"
#include "agvisor/e2b/errors.h"
#include "agvisor/e2b/ids.h"
#include "agvisor/e2b/network.h"

namespace agvisor::e2b {
namespace {

TEST(E2bIds, AnIdIsADnsLabelAndMapsToTheContainerName) {
  EXPECT_TRUE(IsSandboxId("3f9c01ab"));
  EXPECT_TRUE(IsSandboxId("my-box-2"));
  EXPECT_TRUE(IsSandboxId(std::string(63, 'a')));
  for (const char* bad : {"", "-a", "a-", "Box", "my_box", "a.b", "a/b", "a b", "ü", "a\nb"}) {
    EXPECT_FALSE(IsSandboxId(bad)) << bad;
    auto c = ContainerForId(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.error().code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_FALSE(IsSandboxId(std::string(64, 'a')));
  EXPECT_EQ(*ContainerForId("3f9c01ab"), "agvisor-3f9c01ab");
  EXPECT_EQ(IdForContainer("agvisor-3f9c01ab"), "3f9c01ab");
  // Sandboxes whose names are not labels are not visible to E2B.
  EXPECT_EQ(IdForContainer("agvisor-My_Box"), std::nullopt);
  EXPECT_EQ(IdForContainer("agvisor-a.b"), std::nullopt);
  EXPECT_EQ(IdForContainer("other-3f9c01ab"), std::nullopt);
  EXPECT_EQ(IdForContainer("agvisor-"), std::nullopt);
  // The round trip.
  EXPECT_EQ(IdForContainer(*ContainerForId("x-1")), "x-1");
}

TEST(E2bIds, SandboxHostsAsGetHostMakesThem) {
  auto h = ParseSandboxHost("8000-3f9c01ab.localhost:8080", "");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->port, 8000);
  EXPECT_EQ(h->id, "3f9c01ab");
  h = ParseSandboxHost("443-my-box.E2B.Example.com", "e2b.example.com:8080");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->id, "my-box");
  // agvisord's own names, other domains, bad ports and ids.
  for (const char* host :
       {"localhost:8080", "127.0.0.1:8080", "[::1]:8080", "8000-x", "x-y.z", "0-abc.localhost",
        "65536-abc.localhost", "123456-abc.localhost", "8000-Bad_Id.localhost", "8000-.localhost",
        "-abc.localhost", "8000-abc.", ""}) {
    EXPECT_FALSE(ParseSandboxHost(host, "")) << host;
  }
  EXPECT_FALSE(ParseSandboxHost("8000-abc.other.com", "e2b.example.com"));
  EXPECT_FALSE(ParseSandboxHost("8000-abc.x.e2b.example.com", "e2b.example.com"));
}

TEST(E2bIds, TheDomainFromTheHostTheClientUsed) {
  EXPECT_EQ(DomainFromHost("127.0.0.1:8080"), "localhost:8080");
  EXPECT_EQ(DomainFromHost("[::1]:8080"), "localhost:8080");
  EXPECT_EQ(DomainFromHost("127.0.0.1"), "localhost");
  EXPECT_EQ(DomainFromHost("e2b.example.com:8080"), "e2b.example.com:8080");
  EXPECT_EQ(DomainFromHost("localhost"), "localhost");
  // Whatever else a client sends is not echoed into the create response.
  EXPECT_EQ(DomainFromHost("a b"), "");
  EXPECT_EQ(DomainFromHost("x/../y"), "");
  EXPECT_EQ(DomainFromHost("\"><script>"), "");
  EXPECT_EQ(DomainFromHost(""), "");
}

TEST(E2bAuth, TheApiKeyIsE2bUnderscoreAndTheDaemonToken) {
  const std::string token(64, 'a');
  EXPECT_EQ(ApiKeyFor(token), "e2b_" + token);
  EXPECT_TRUE(ApiKeyMatches("e2b_" + token, token));
  EXPECT_FALSE(ApiKeyMatches(token, token));
  EXPECT_FALSE(ApiKeyMatches("e2b_" + token + "0", token));
  EXPECT_FALSE(ApiKeyMatches("", token));
  EXPECT_FALSE(ApiKeyMatches("e2b_", ""));  // no daemon token: nothing matches
}

TEST(E2bAuth, EnvdTokensAreDerivedPerSandboxAndInstance) {
  const std::string secret = "s3cret";
  const std::string a = EnvdAccessToken(secret, "aaaa", "container-1");
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a, EnvdAccessToken(secret, "aaaa", "container-1"));   // survives a restart
  EXPECT_NE(a, EnvdAccessToken(secret, "bbbb", "container-1"));   // another sandbox
  EXPECT_NE(a, EnvdAccessToken(secret, "aaaa", "container-2"));   // a later one of that id
  EXPECT_NE(a, EnvdAccessToken("other", "aaaa", "container-1"));  // another daemon
  EXPECT_NE(EnvdAccessToken(secret, "a", "a\0b"), EnvdAccessToken(secret, "a\0a", "b"));
  EXPECT_TRUE(AccessTokenMatches(a, a));
  EXPECT_FALSE(AccessTokenMatches(EnvdAccessToken(secret, "bbbb", "container-1"), a));
  EXPECT_FALSE(AccessTokenMatches("", a));
  EXPECT_FALSE(AccessTokenMatches("", ""));
}

TEST(E2bAuth, SignedFileUrlsAsTheSdkMakesThem) {
  // The SDK's own computation, done by hand with node for these inputs:
  //   "v1_" + base64(sha256("/home/user/a.txt:read:user:tok")) without '='.
  EXPECT_EQ(FileUrlSignature("/home/user/a.txt", "read", "user", "tok", std::nullopt),
            "v1_p0WqJQYCLtO6YX+e4h7VbpybRsdJbMbIw7clYpulIJk");
  const std::int64_t now = 1'800'000'000;
  const std::string sig = FileUrlSignature("/f", "write", "user", "tok", now + 60);
  EXPECT_TRUE(
      CheckFileUrlSignature(sig, std::to_string(now + 60), "/f", "write", "user", "tok", now).ok());
  auto expect_denied = [&](Result<void> r) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kPermissionDenied) << r.error().message();
  };
  // Expired, another operation, path, user or sandbox token, no signature, a moved expiry.
  expect_denied(
      CheckFileUrlSignature(sig, std::to_string(now + 60), "/f", "write", "user", "tok", now + 61));
  expect_denied(
      CheckFileUrlSignature(sig, std::to_string(now + 60), "/f", "read", "user", "tok", now));
  expect_denied(
      CheckFileUrlSignature(sig, std::to_string(now + 60), "/g", "write", "user", "tok", now));
  expect_denied(
      CheckFileUrlSignature(sig, std::to_string(now + 60), "/f", "write", "root", "tok", now));
  expect_denied(
      CheckFileUrlSignature(sig, std::to_string(now + 60), "/f", "write", "user", "other", now));
  expect_denied(
      CheckFileUrlSignature("", std::to_string(now + 60), "/f", "write", "user", "tok", now));
  expect_denied(
      CheckFileUrlSignature(sig, std::to_string(now + 6000), "/f", "write", "user", "tok", now));
  auto bad = CheckFileUrlSignature(sig, "soon", "/f", "write", "user", "tok", now);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
}

TEST(E2bErrors, TheShapeTheSdkReads) {
  auto r = ErrorResponse(404, "sandbox x not found \"quoted\"");
  EXPECT_EQ(r.status, 404);
  auto v = boost::json::parse(r.body).as_object();
  EXPECT_EQ(v.at("code").as_int64(), 404);
  EXPECT_EQ(v.at("message").as_string(), "sandbox x not found \"quoted\"");
  EXPECT_EQ(StatusFor(Error::NotFound("x")), 404);
  EXPECT_EQ(StatusFor(Error::SandboxDied("x")), 404);
  EXPECT_EQ(StatusFor(Error::InvalidArgument("x")), 400);
  EXPECT_EQ(StatusFor(Error::Unsupported("x")), 501);
}

E2bNetwork Net(std::vector<std::string> allow, std::vector<std::string> deny,
               std::optional<bool> internet = std::nullopt) {
  E2bNetwork n;
  n.allow_out = std::move(allow);
  n.deny_out = std::move(deny);
  n.allow_internet_access = internet;
  return n;
}

TEST(E2bNetwork, MappedExactlyOrRefusedWithAReason) {
  // Open by default, and wherever E2B's allow wins.
  for (const auto& n : {Net({}, {}), Net({}, {}, true), Net({"example.com"}, {}),
                        Net({"0.0.0.0/0"}, {"0.0.0.0/0"})}) {
    auto c = MapNetwork(n);
    ASSERT_TRUE(c.ok()) << c.error().message();
    EXPECT_EQ(c->network, "bridge");
    EXPECT_FALSE(c->egress);
  }
  // Nothing leaves.
  for (const auto& n : {Net({}, {}, false), Net({}, {"0.0.0.0/0"})}) {
    auto c = MapNetwork(n);
    ASSERT_TRUE(c.ok()) << c.error().message();
    EXPECT_EQ(c->network, "none");
  }
  // A domain allow list under a deny of everything: agvisor's egress policy.
  auto c = MapNetwork(Net({"example.com", "*.pythonhosted.org"}, {"0.0.0.0/0"}));
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->network, "bridge");
  ASSERT_TRUE(c->egress);
  EXPECT_EQ(c->egress->allow_domains,
            (std::vector<std::string>{"example.com", "*.pythonhosted.org"}));
  c = MapNetwork(Net({"example.com"}, {}, false));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->egress);
  // What agvisor cannot enforce exactly.
  auto unsupported = [](const E2bNetwork& n, std::string_view says) {
    auto r = MapNetwork(n);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kUnsupported);
    EXPECT_NE(r.error().message().find(says), std::string::npos) << r.error().message();
  };
  unsupported(Net({"1.1.1.1"}, {"0.0.0.0/0"}), "every port");
  unsupported(Net({"8.8.8.0/24"}, {"0.0.0.0/0"}), "every port");
  unsupported(Net({}, {"10.0.0.0/8"}), "allow list");
  E2bNetwork rules = Net({}, {});
  rules.unsupported = {"rules"};
  unsupported(rules, "rules");
  // E2B's own rule: a domain in denyOut.
  auto r = MapNetwork(Net({}, {"example.com"}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agvisor::e2b
