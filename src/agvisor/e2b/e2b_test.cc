// The E2B door's pure parts: ids, the API key, envd tokens, signed file URLs, error shapes, the
// network mapping, the list's query and pages, the metrics ring.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "agvisor/e2b/auth.h"
#include "agvisor/e2b/errors.h"
#include "agvisor/e2b/ids.h"
#include "agvisor/e2b/list.h"
#include "agvisor/e2b/metrics.h"
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

TEST(E2bList, TheQueryTheSdkSends) {
  // What Sandbox.list({query: {metadata: {run: "e2b-1", "a b": "c&d=e", pct: "x%y"}, state,
  // startedAfter, template}, order, limit, nextToken}) sends (the pinned SDK, seen on the wire),
  // as the router decodes it.
  auto q = ParseListQuery({{"metadata", "run=e2b-1&a%2520b=c%2526d%253De&pct=x%2525y"},
                           {"state", "paused"},
                           {"startedAfter", "2026-12-06T10:00:00.000Z"},
                           {"template", "base"},
                           {"order", "asc"},
                           {"limit", "2"},
                           {"nextToken", "1796551200.abc"}});
  ASSERT_TRUE(q.ok()) << q.error().message();
  EXPECT_EQ(q->metadata, (std::map<std::string, std::string>{
                             {"run", "e2b-1"}, {"a b", "c&d=e"}, {"pct", "x%y"}}));
  EXPECT_EQ(q->states, (std::vector<std::string>{"paused"}));
  EXPECT_EQ(q->started_after, 1796551200);
  EXPECT_EQ(q->template_id, "base");
  EXPECT_TRUE(q->ascending);
  EXPECT_EQ(q->limit, 2u);
  EXPECT_EQ(q->after, (ListCursor{1796551200, "abc"}));
  // Defaults: running and paused, newest first, E2B's page of 100.
  auto d = ParseListQuery({});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->states, (std::vector<std::string>{"running", "paused"}));
  EXPECT_FALSE(d->ascending);
  EXPECT_EQ(d->limit, kDefaultListLimit);
  // Each bad parameter is named.
  for (auto [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"state", "running,killed"},
                                                        {"order", "newest"},
                                                        {"limit", "0"},
                                                        {"limit", "1001"},
                                                        {"limit", "x"},
                                                        {"startedAfter", "yesterday"},
                                                        {"startedAfter", "2026-13-01T00:00:00Z"},
                                                        {"nextToken", "abc"},
                                                        {"nextToken", "12.Bad_Id"},
                                                        {"metadata", "%zz=1"}}) {
    auto bad = ParseListQuery({{k, v}});
    ASSERT_FALSE(bad.ok()) << k << "=" << v;
    EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(bad.error().message().find(k), std::string::npos) << bad.error().message();
  }
}

TEST(E2bList, Rfc3339AsTheSdkWritesItAndWithOffsets) {
  EXPECT_EQ(*ParseRfc3339("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(*ParseRfc3339("2026-12-06T10:00:00.123Z"), 1796551200);
  EXPECT_EQ(*ParseRfc3339("2026-12-06T12:00:00+02:00"), 1796551200);
  EXPECT_EQ(*ParseRfc3339("2026-12-06T09:30:00-00:30"), 1796551200);
  for (std::string_view bad : {"", "2026-12-06", "2026-12-06T10:00:00", "2026-12-06T10:00:00.Z",
                               "2026-12-06T25:00:00Z", "2026-12-06T10:00:00+2:00"}) {
    EXPECT_FALSE(ParseRfc3339(bad).ok()) << bad;
  }
}

TEST(E2bList, FiltersAndPagesInStartOrder) {
  ListQuery q;
  const std::map<std::string, std::string> meta{{"run", "1"}, {"x", "y"}};
  EXPECT_TRUE(ListWants(q, "running", "base", &meta, 10));
  q.metadata = {{"run", "1"}};
  EXPECT_TRUE(ListWants(q, "paused", "base", &meta, 10));
  EXPECT_FALSE(ListWants(q, "running", "base", nullptr, 10));
  q.states = {"running"};
  EXPECT_FALSE(ListWants(q, "paused", "base", &meta, 10));
  q.template_id = "other";
  EXPECT_FALSE(ListWants(q, "running", "base", &meta, 10));
  q.template_id = "";
  q.started_after = 11;
  EXPECT_FALSE(ListWants(q, "running", "base", &meta, 10));
  EXPECT_TRUE(ListWants(q, "running", "base", &meta, 11));

  // Five sandboxes, two started in the same second; pages of two, newest first, then oldest.
  const std::vector<ListRow> rows{{"c", 30}, {"a", 10}, {"e", 50}, {"b", 30}, {"d", 40}};
  for (bool ascending : {false, true}) {
    ListQuery p;
    p.ascending = ascending;
    p.limit = 2;
    std::vector<std::string> seen;
    for (int pages = 0; pages < 10; ++pages) {
      ListPage page = PageOf(rows, p);
      for (std::size_t i : page.rows) seen.push_back(rows[i].id);
      if (page.next_token.empty()) break;
      auto after = ParseListToken(page.next_token);
      ASSERT_TRUE(after.ok()) << page.next_token;
      p.after = *after;
    }
    EXPECT_EQ(seen, ascending ? (std::vector<std::string>{"a", "b", "c", "d", "e"})
                              : (std::vector<std::string>{"e", "d", "c", "b", "a"}));
  }
  // A full last page has no next token.
  ListQuery all;
  all.limit = 5;
  EXPECT_EQ(PageOf(rows, all).next_token, "");
  all.limit = 4;
  EXPECT_EQ(PageOf(rows, all).next_token, ListToken({30, "b"}));
}

MetricSample At(std::int64_t t) { return MetricSample{.at = t, .cpu_count = 2, .mem_used = t}; }

TEST(E2bMetrics, ARingSampledOnlyWhileAsked) {
  MetricsBook book;
  EXPECT_TRUE(book.Due(100).empty()) << "nobody asked: nothing is sampled";
  book.Add("a", At(100));
  book.Asked("a", 100);
  EXPECT_TRUE(book.Due(104).empty()) << "within the period";
  EXPECT_EQ(book.Due(105), (std::vector<std::string>{"a"}));
  for (std::int64_t t = 105; t <= 700; t += 5) book.Add("a", At(t));
  EXPECT_TRUE(book.Due(100 + kMetricsWatchSeconds + 1).empty()) << "asked too long ago";
  // The range, both ends included; a sample in the same second replaces the one before.
  auto r = book.Range("a", 200, 210);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r.front().at, 200);
  book.Add("a", At(700));
  EXPECT_EQ(book.Range("a", std::nullopt, std::nullopt).size(), 121u);
  // Bounded: the oldest go.
  for (std::int64_t t = 1000; t < 1000 + static_cast<std::int64_t>(kMaxMetricSamples); ++t) {
    book.Add("a", At(t));
  }
  EXPECT_EQ(book.Range("a", std::nullopt, std::nullopt).size(), kMaxMetricSamples);
  EXPECT_TRUE(book.Range("a", 0, 999).empty());
  // So is the number of rings; the least recently asked goes.
  for (std::size_t i = 0; i < kMaxMetricSandboxes + 3; ++i) {
    book.Asked("s" + std::to_string(i), 2000 + static_cast<std::int64_t>(i));
  }
  EXPECT_EQ(book.size(), kMaxMetricSandboxes);
  EXPECT_TRUE(book.Range("a", std::nullopt, std::nullopt).empty());
  book.Forget("s5");
  EXPECT_EQ(book.size(), kMaxMetricSandboxes - 1);
  // At most kMaxWatchedSandboxes are sampled at once, the most recently asked.
  auto due = book.Due(2000 + static_cast<std::int64_t>(kMaxMetricSandboxes) + 5);
  ASSERT_EQ(due.size(), kMaxWatchedSandboxes);
  EXPECT_EQ(due.front(), "s" + std::to_string(kMaxMetricSandboxes + 2));
}

TEST(E2bMetrics, TheRangeTheSdkSends) {
  auto r = ParseMetricsRange({{"start", "100"}, {"end", "200"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->start, 100);
  EXPECT_EQ(r->end, 200);
  EXPECT_FALSE(ParseMetricsRange({})->start);
  EXPECT_FALSE(ParseMetricsRange({{"start", "soon"}}).ok());
  EXPECT_FALSE(ParseMetricsRange({{"start", "200"}, {"end", "100"}}).ok());
}

}  // namespace
}  // namespace agvisor::e2b
