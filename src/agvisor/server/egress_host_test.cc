// EgressHost's pure helpers (the resolver from resolv.conf, the tunnel caps) and the Docker
// runtime's side of it (sandbox/docker_runtime/egress_host.h: which firewall openings are stale,
// the firewall hooks it checks), the host's firewall state file (sandbox/egress_network.h), and
// the egress log's files (egress_log_files.h).
#include "agvisor/server/egress_host.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agvisor/api/codec.h"
#include "agvisor/sandbox/docker_runtime/egress_host.h"
#include "agvisor/sandbox/egress_network.h"
#include "agvisor/server/egress_log_files.h"
#include "agvisor/server/secret_vault.h"

namespace agvisor::server {
namespace {

// `iptables -S AGVISOR-ALLOW` as agvisords write it: pid 100 is running, 200 is gone.
constexpr std::string_view kListing =
    "-N AGVISOR-ALLOW\n"
    "-A AGVISOR-ALLOW -d 172.20.0.1/32 -i agve01 -p tcp -m multiport --dports 80,443,3128 -m "
    "comment --comment \"agvisor egress agvisor-a pid 100\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 172.21.0.1/32 -i agve02 -p tcp -m multiport --dports 80,443,3128 -m "
    "comment --comment \"agvisor egress agvisor-b pid 200\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 172.21.0.1/32 -i agve02 -p udp -m udp --dport 53 -m comment --comment "
    "\"agvisor egress agvisor-b pid 200\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 172.22.0.1/32 -i agve03 -p udp -m udp --dport 53 -m comment --comment "
    "\"agvisor egress agvisor-c\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 10.9.0.1/32 -p tcp --dport 8080 -m comment --comment \"an admin's own "
    "rule\" -j ACCEPT\n"
    "-A AGVISOR-ALLOW -d 10.9.0.2/32 -p tcp --dport 8081 -j ACCEPT\n"
    "-A AGVISOR-ALLOW -m comment --comment \"agvisor egress x pid notanumber\" -j ACCEPT\n";

TEST(StaleOpeningsTest, OnlyOpeningsOfAgvisordsThatAreGoneAreDeleted) {
  auto stale = StaleOpenings(kListing, [](int pid) { return pid == 100; });
  ASSERT_EQ(stale.size(), 3u);
  const std::vector<std::string> first = {
      "-D", "AGVISOR-ALLOW", "-d",        "172.21.0.1/32",
      "-i", "agve02",        "-p",        "tcp",
      "-m", "multiport",     "--dports",  "80,443,3128",
      "-m", "comment",       "--comment", "agvisor egress agvisor-b pid 200",
      "-j", "ACCEPT"};
  EXPECT_EQ(stale[0], first);
  EXPECT_EQ(stale[1][7], "udp");
  EXPECT_EQ(stale[1][15], "agvisor egress agvisor-b pid 200");
  // The form written before pids were kept counts as gone.
  EXPECT_EQ(stale[2][15], "agvisor egress agvisor-c");
}

TEST(StaleOpeningsTest, NothingIsStaleWhileItsAgvisordRuns) {
  EXPECT_EQ(StaleOpenings(kListing, [](int) { return true; }).size(), 1u);  // agvisor-c only
  EXPECT_TRUE(StaleOpenings("", [](int) { return false; }).empty());
  EXPECT_TRUE(StaleOpenings("-N AGVISOR-ALLOW\n", [](int) { return false; }).empty());
}

// The orphan sweep decides from one list of the host's sandboxes: a network whose sandbox is not
// in it is removed only after the grace, and one whose sandbox comes back is forgotten.
TEST(DueOrphanNetworksTest, OneListDecidesEveryNetworkAfterTheGrace) {
  std::vector<std::pair<std::string, std::string>> nets;
  std::set<std::string, std::less<>> present;
  for (int i = 0; i < 300; ++i) {
    nets.emplace_back("net" + std::to_string(i), "agvisor-s" + std::to_string(i));
    if (i % 100 != 0) present.insert("agvisor-s" + std::to_string(i));  // 0, 100, 200 are gone
  }
  std::map<std::string, OrphanClock::time_point> since;
  const auto t0 = OrphanClock::now();
  const auto grace = std::chrono::seconds(60);
  EXPECT_TRUE(DueOrphanNetworks(nets, present, since, t0, grace).empty());  // first seen gone
  EXPECT_EQ(since.size(), 3u);
  EXPECT_TRUE(DueOrphanNetworks(nets, present, since, t0 + grace / 2, grace).empty());
  present.insert("agvisor-s100");  // its create finished: no longer an orphan
  EXPECT_EQ(DueOrphanNetworks(nets, present, since, t0 + grace, grace),
            (std::vector<std::size_t>{0, 200}));
  EXPECT_EQ(since.count("net100"), 0u);
  nets.erase(nets.begin());  // net0 removed: forgotten
  (void)DueOrphanNetworks(nets, present, since, t0 + grace * 2, grace);
  EXPECT_EQ(since.count("net0"), 0u);
  EXPECT_EQ(since.size(), 1u);
}

TEST(FirstNameserverTest, TakesTheFirstAddressLine) {
  auto ns = FirstNameserver("# comment\nsearch x\nnameserver bogus\nnameserver 10.0.0.2\n");
  ASSERT_TRUE(ns.ok());
  EXPECT_EQ(egress::FormatIpAddress(*ns), "10.0.0.2");
  EXPECT_EQ(FirstNameserver("search x\n").error().code(), ErrorCode::kNotFound);
}

TEST(EgressCapsTest, TunnelsFitTheOpenFilesLimitWithRoomForTheApi) {
  for (std::uint64_t limit : {256u, 1024u, 20000u, 1048576u}) {
    const EgressCaps c = ComputeEgressCaps(limit);
    EXPECT_LE(c.reserved_fds + c.max_tunnels * kFdsPerTunnel, limit) << limit;
    EXPECT_GE(c.reserved_fds, std::min<std::uint64_t>(512, limit / 2)) << limit;
    EXPECT_GE(c.max_tunnels_per_sandbox, 1u) << limit;
    EXPECT_LE(c.max_tunnels_per_sandbox * 4, std::max<std::size_t>(c.max_tunnels, 4)) << limit;
  }
  // systemd's default soft limit, when the hard one is no higher.
  const EgressCaps service = ComputeEgressCaps(1024);
  EXPECT_EQ(service.reserved_fds, 512u);
  EXPECT_EQ(service.max_tunnels, 85u);
  EXPECT_EQ(service.max_tunnels_per_sandbox, 21u);
  EXPECT_EQ(ComputeEgressCaps(1048576).max_tunnels_per_sandbox, 1024u);
}

// The jumps agvisord checks are the ones scripts/sandbox-firewall's hooks() adds (IPv4), with
// the egress chain replaceable for tests.
TEST(FirewallHooksTest, MatchTheScriptsJumps) {
  const auto hooks = FirewallHooks("AGVISOR-EGRESS");
  std::ifstream script(std::string(AGVISOR_SOURCE_DIR) + "/scripts/sandbox-firewall");
  std::stringstream text;
  text << script.rdbuf();
  ASSERT_NE(text.str().find("bridges=(docker0 br-+)"), std::string::npos);
  ASSERT_NE(text.str().find("egress_bridges=agve+"), std::string::npos);
  const std::vector<std::vector<std::string>> want = {
      {"DOCKER-USER", "docker0", "AGVISOR-FORWARD"}, {"INPUT", "docker0", "AGVISOR-INPUT"},
      {"DOCKER-USER", "br-+", "AGVISOR-FORWARD"},    {"INPUT", "br-+", "AGVISOR-INPUT"},
      {"DOCKER-USER", "agve+", "AGVISOR-EGRESS"},    {"INPUT", "agve+", "AGVISOR-EGRESS"}};
  EXPECT_EQ(hooks, want);
  EXPECT_EQ(FirewallHooks("X").back(), (std::vector<std::string>{"INPUT", "agve+", "X"}));
}

TEST(FirewallStateTest, OnlyThisBootsStateCounts) {
  const std::string text = FormatFirewallState(
      {.state = FirewallState::kUnprotected, .detail = "missing: INPUT\n-i agve+"}, "boot-a");
  EXPECT_EQ(text, "boot boot-a\nstate unprotected\ndetail missing: INPUT -i agve+\n");
  const FirewallStatus same = ParseFirewallState(text, "boot-a");
  EXPECT_EQ(same.state, FirewallState::kUnprotected);
  EXPECT_EQ(same.detail, "missing: INPUT -i agve+");
  EXPECT_EQ(ParseFirewallState(text, "boot-b").state, FirewallState::kUnknown);  // rebooted
  EXPECT_EQ(ParseFirewallState("", "boot-a").state, FirewallState::kUnknown);
  EXPECT_EQ(ParseFirewallState("boot boot-a\nstate maybe\n", "boot-a").state,
            FirewallState::kUnknown);
  EXPECT_EQ(ParseFirewallState("boot boot-a\nstate external\n", "boot-a").state,
            FirewallState::kExternal);
  // The script writes the same lines (record()).
  EXPECT_EQ(ParseFirewallState("boot boot-a\nstate protected\n", "boot-a").state,
            FirewallState::kProtected);
}

TEST(FirewallStateTest, AnUnprotectedHostRefusesNamingTheFixAndTheOptOut) {
  EXPECT_TRUE(RequireFirewall("", {}).ok());
  EXPECT_TRUE(RequireFirewall("", {.state = FirewallState::kProtected}).ok());
  EXPECT_TRUE(RequireFirewall("", {.state = FirewallState::kExternal}).ok());
  auto r = RequireFirewall("ssh://root@h", {.state = FirewallState::kUnprotected, .detail = "x"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message().find("not in place on ssh://root@h (x)"), std::string::npos);
  EXPECT_NE(r.error().message().find("scripts/sandbox-firewall block"), std::string::npos);
  EXPECT_NE(r.error().message().find("scripts/sandbox-firewall external"), std::string::npos);
}

TEST(FirewallStateTest, WrittenAndReadBackThroughTheTestPath) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("agvisor-fw-" + std::to_string(::getpid())))
          .string();
  ASSERT_EQ(::setenv("AGVISOR_FIREWALL_STATE", path.c_str(), 1), 0);
  EXPECT_EQ(FirewallStatePath(), path);
  // A link planted at the state's path is replaced, never written through; no temporary is left.
  const std::string target = path + ".target";
  std::filesystem::create_symlink(target, path);
  ASSERT_TRUE(WriteFirewallState({.state = FirewallState::kUnprotected, .detail = "d"}).ok());
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_FALSE(std::filesystem::is_symlink(path));
  EXPECT_EQ(std::filesystem::status(path).permissions(), std::filesystem::perms(0644));
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    EXPECT_FALSE(e.path().string().starts_with(path + ".")) << e.path();
  }
  EXPECT_EQ(HostFirewallStatus("").state, FirewallState::kUnprotected);
  EXPECT_EQ(HostFirewallStatus("tcp://127.0.0.1:2375").state, FirewallState::kUnknown);
  ::unsetenv("AGVISOR_FIREWALL_STATE");
  std::filesystem::remove(path);
  EXPECT_EQ(FirewallStatePath(), std::string(kFirewallStateFile));
}

TEST(SecretVaultTest, TheOperatorsFileIsNameEqualsValueLinesAndErrorsNeverQuoteAValue) {
  auto parsed = ParseOperatorSecrets("# comment\n\nGITHUB_TOKEN=ghp_x=y\r\nAPI_KEY=sk 1\n");
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  EXPECT_EQ(*parsed,
            (std::map<std::string, std::string>{{"GITHUB_TOKEN", "ghp_x=y"}, {"API_KEY", "sk 1"}}));
  auto no_eq = ParseOperatorSecrets("A=1\nsk-secret-value\n");
  ASSERT_FALSE(no_eq.ok());
  EXPECT_NE(no_eq.error().message().find("line 2"), std::string::npos);
  EXPECT_EQ(no_eq.error().message().find("sk-secret"), std::string::npos);
  EXPECT_FALSE(ParseOperatorSecrets("A=1\nA=2\n").ok());
  EXPECT_FALSE(ParseOperatorSecrets("A=\n").ok());  // empty value
}

TEST(SecretVaultTest, OperatorSecretsFileMustBePrivate) {
  const std::string path = ::testing::TempDir() + "/agvisor-secrets-" + std::to_string(::getpid());
  std::ofstream(path) << "A=1\n";
  std::filesystem::permissions(path, std::filesystem::perms(0644));
  auto open = ReadOperatorSecrets(path);
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.error().code(), ErrorCode::kPermissionDenied);
  std::filesystem::permissions(path, std::filesystem::perms(0600));
  EXPECT_TRUE(ReadOperatorSecrets(path).ok());
  std::filesystem::remove(path);
}

TEST(SecretVaultTest, BrokeredSecretsAreClaimedOnceAndOnlyTheOperatorsOutliveARestart) {
  const std::map<std::string, std::string> file = {{"GIT_TOKEN", "ghp_operator"}};
  SecretVault vault(file);
  const std::vector<SecretSpec> specs = {
      {.name = "API_KEY", .hosts = {"api.example.com"}, .value = "sk-caller"},
      {.name = "GIT_TOKEN", .hosts = {"git.example.com"}}};
  auto b = vault.Broker(specs);
  ASSERT_TRUE(b.ok()) << b.error().ToString();
  ASSERT_EQ(b->env.size(), 2u);
  EXPECT_TRUE(b->env[0].second.starts_with("agvsec_"));
  EXPECT_NE(b->ca_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  // What leaves the vault for labels and the sandbox holds no value.
  for (const std::string& text : {b->label, b->ca_pem, b->env[0].second, b->env[1].second}) {
    EXPECT_EQ(text.find("sk-caller"), std::string::npos);
    EXPECT_EQ(text.find("ghp_operator"), std::string::npos);
  }
  EXPECT_EQ(vault.pending(), 1u);
  auto claimed = vault.Claim(b->label, "agvisor-x");
  ASSERT_TRUE(claimed.has_value());
  ASSERT_EQ(claimed->secrets.size(), 2u);
  EXPECT_EQ(claimed->secrets[0].value, "sk-caller");
  EXPECT_EQ(claimed->secrets[1].value, "ghp_operator");
  EXPECT_EQ(claimed->ca->cert_pem(), b->ca_pem);
  EXPECT_FALSE(claimed->new_ca);
  EXPECT_EQ(vault.pending(), 0u);
  // A restart: a new vault with the same file knows nothing pending. The operator's secret is
  // rebuilt from the label (same placeholder, a new CA); the caller's is gone.
  SecretVault restarted(file);
  auto again = restarted.Claim(b->label, "agvisor-x");
  ASSERT_TRUE(again.has_value());
  ASSERT_EQ(again->secrets.size(), 1u);
  EXPECT_EQ(again->secrets[0].name, "GIT_TOKEN");
  EXPECT_EQ(again->secrets[0].placeholder, b->env[1].second);
  EXPECT_TRUE(again->new_ca);
  EXPECT_EQ(again->missing, std::vector<std::string>{"API_KEY"});
  // By name, but not in the file: refused, saying how to add it.
  auto missing = vault.Broker({{.name = "OTHER", .hosts = {"api.example.com"}}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message().find("--secrets-file"), std::string::npos);
  // A create that made nothing releases what it brokered.
  auto released = vault.Broker(specs);
  ASSERT_TRUE(released.ok());
  vault.Release(*released);
  EXPECT_EQ(vault.pending(), 0u);
}

}  // namespace
}  // namespace agvisor::server

namespace agvisor::server {
namespace {

// A host with no egress network yet (the sandbox is about to be made).
class NoNetworks : public EgressHostRuntime {
 public:
  Result<std::vector<EgressNetworkInfo>> Networks() override {
    return std::vector<EgressNetworkInfo>{};
  }
  bool NetworkMayExist(const std::string&) override { return false; }
  std::vector<std::pair<std::string, std::string>> RemoveOrphanNetworks() override { return {}; }
  Result<void> Firewall(const EgressNetworkInfo&, bool) override { return Ok(); }
  int ClearStaleOpenings() override { return 0; }
  SandboxFirewallCheck CheckSandboxFirewall() override { return {.in_place = true}; }
};

// Secrets are registered before the sandbox's network exists, checked on the way in.
TEST(EgressSecretsTest, RegisteredBeforeTheSandboxAndChecked) {
  auto host = EgressHost::Start(
      std::make_unique<NoNetworks>(),
      {.resolver = egress::IpAddress::V4(127, 0, 0, 1), .manage_firewall = false});
  ASSERT_TRUE(host.ok()) << host.error().ToString();
  auto ca = egress::SandboxCa::Create("sb", std::vector<std::string>{"api.test"});
  ASSERT_TRUE(ca.ok());
  egress::BrokeredSecret s{.name = "TOKEN",
                           .value = "v",
                           .placeholder = "agvsec_0123456789abcdef0123456789abcdef",
                           .hosts = {"API.test"}};
  EXPECT_TRUE((*host)->SetSecrets("sb", {s}, *ca).ok());
  // Not covered by the CA, no CA, a bad secret: refused, naming the secret, never its value.
  egress::BrokeredSecret other = s;
  other.hosts = {"other.test"};
  auto r = (*host)->SetSecrets("sb", {other}, *ca);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("which the sandbox CA is not for"), std::string::npos);
  EXPECT_FALSE((*host)->SetSecrets("sb", {s}, nullptr).ok());
  egress::BrokeredSecret bad = s;
  bad.value = "secret-value\n";
  r = (*host)->SetSecrets("sb", {bad}, *ca);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message().find("secret-value"), std::string::npos);
  (*host)->ForgetSecrets("sb");
  EXPECT_TRUE((*host)->SetSecrets("sb", {}, nullptr).ok());  // an empty list forgets
}

// A directory of one test's own under gtest's temporary directory, gone with the test.
struct ScratchDir {
  explicit ScratchDir(const std::string& tag)
      : path(::testing::TempDir() + "agvisor-" + tag + "-" + std::to_string(::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  const std::string path;
};

unsigned ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// A sandbox that sprays requests fills its own files and rotates them: never more than `files`
// of at most `file_bytes` each, the newest records kept, read back in order.
TEST(EgressLogFilesTest, RotationBoundsASandboxsFilesAndKeepsTheNewest) {
  ScratchDir scratch("egress-log-rotation");
  const std::string& dir = scratch.path;
  auto files = EgressLogFiles::Open(dir + "/log", {.file_bytes = 4096, .files = 3});
  ASSERT_TRUE(files.ok()) << files.error().ToString();
  const std::string key = "0123abcd";
  for (int i = 0; i < 2000; ++i) {
    char line[128];
    std::snprintf(line, sizeof line, "{\"n\":%06d,\"pad\":\"%s\"}", i,
                  std::string(80, 'x').c_str());
    ASSERT_TRUE((*files)->Append(key, line).ok());
  }
  std::uint64_t total = 0;
  for (const char* suffix : {".jsonl", ".jsonl.1", ".jsonl.2"}) {
    const std::string p = dir + "/log/" + key + suffix;
    ASSERT_TRUE(std::filesystem::exists(p)) << p;
    EXPECT_LE(std::filesystem::file_size(p), 4096u) << p;
    EXPECT_EQ(ModeOf(p), 0600u) << p;
    total += std::filesystem::file_size(p);
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/log/" + key + ".jsonl.3"));
  EXPECT_LE(total, 3u * 4096u);
  EXPECT_EQ(ModeOf(dir + "/log"), 0700u);
  auto last = (*files)->Last(key, 3);
  ASSERT_EQ(last.size(), 3u);
  EXPECT_TRUE(last[0].starts_with("{\"n\":001997,"));
  EXPECT_TRUE(last[2].starts_with("{\"n\":001999,"));
  // Asking for more than is kept gives what is kept, across the files, in order.
  auto all = (*files)->Last(key, 1000);
  ASSERT_GT(all.size(), 40u);
  ASSERT_LT(all.size(), 1000u);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(std::stoi(all[i].substr(5, 6)), 2000 - static_cast<int>(all.size() - i)) << i;
  }
  EXPECT_EQ((*files)->Keys(), std::vector<std::string>{key});
  (*files)->Remove(key);
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/log"));
  EXPECT_TRUE((*files)->Last(key, 10).empty());
}

// Only network ids become file names; a link planted where a file goes is not followed; a file
// left readable is made private; a line torn by a crash is left out.
TEST(EgressLogFilesTest, KeysAreNetworkIdsAndFilesArePrivate) {
  ScratchDir scratch("egress-log-keys");
  const std::string& dir = scratch.path;
  auto files = EgressLogFiles::Open(dir + "/log");
  ASSERT_TRUE(files.ok());
  for (const std::string& key :
       std::vector<std::string>{"", "../x", "AB", "a/b", std::string(65, 'a')}) {
    auto r = (*files)->Append(key, "{}");
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << key;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/log"));
  ASSERT_EQ(::symlink((dir + "/elsewhere").c_str(), (dir + "/log/ee.jsonl").c_str()), 0);
  EXPECT_FALSE((*files)->Append("ee", "{}").ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/elsewhere"));
  { std::ofstream(dir + "/log/ff.jsonl") << "{\"a\":1}\n{\"torn"; }
  ::chmod((dir + "/log/ff.jsonl").c_str(), 0644);
  EXPECT_EQ((*files)->Last("ff", 10), std::vector<std::string>{"{\"a\":1}"});
  ASSERT_TRUE((*files)->Append("ff", "{\"b\":2}").ok());
  EXPECT_EQ(ModeOf(dir + "/log/ff.jsonl"), 0600u);
}

// At start, the log files of networks that are gone (their sandboxes removed while agvisord
// was down) are deleted; those of networks that may still exist are kept.
class OneNetworkMayExist : public NoNetworks {
 public:
  bool NetworkMayExist(const std::string& id) override { return id == "aa"; }
};

TEST(EgressLogFilesTest, EgressHostDeletesTheLogsOfNetworksThatAreGone) {
  ScratchDir scratch("egress-log-start");
  const std::string& dir = scratch.path;
  auto files = EgressLogFiles::Open(dir + "/state/log");
  ASSERT_TRUE(files.ok());
  egress::Decision d;
  d.name = "allowed.test";
  ASSERT_TRUE((*files)->Append("aa", api::DecisionJson(d)).ok());
  ASSERT_TRUE((*files)->Append("bb", api::DecisionJson(d)).ok());
  files->reset();
  auto host = EgressHost::Start(std::make_unique<OneNetworkMayExist>(),
                                {.resolver = egress::IpAddress::V4(127, 0, 0, 1),
                                 .manage_firewall = false,
                                 .state_dir = dir + "/state"});
  ASSERT_TRUE(host.ok()) << host.error().ToString();
  EXPECT_TRUE(std::filesystem::exists(dir + "/state/log/aa.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/state/log/bb.jsonl"));
  // A sandbox it does not serve has no log to read.
  EXPECT_EQ((*host)->Log("agvisor-x", 10).error().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace agvisor::server
