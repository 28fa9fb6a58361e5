// Pins the instance every kind of sandbox gets, field by field, as the Engine API request body
// (BuildInstanceSpec, then DockerRuntime's ToContainerConfig, then docker/codec.h): a change to
// the security posture, the limits, the agent's argv or the labels shows here.
#include "agvisor/sandbox/instance_spec.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "agvisor/docker/codec.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"

namespace agvisor {
namespace {

InstanceDecisions Decide(const SandboxSpec& spec) {
  InstanceDecisions d;
  d.name = ContainerNameFor(spec.name ? *spec.name : "0123abcd");
  d.runtime = spec.runtime;
  d.image = "agvisor/with-agent:img-agent";
  d.source_image = !spec.image.empty()
                       ? spec.image
                       : std::string(spec.gui ? kDefaultDesktopImage : kDefaultImage);
  return d;
}

// (Built out of line: g++ 12 at -O2 warns of a maybe-uninitialized optional<string> otherwise.)
[[gnu::noinline]] SandboxSpec NamedSpec(const std::string& name) {
  SandboxSpec spec;
  spec.name = name;
  return spec;
}

std::string Body(const SandboxSpec& spec, const InstanceDecisions& d,
                 const std::optional<SandboxNetwork>& net = std::nullopt) {
  auto i = BuildInstanceSpec(spec, d);
  EXPECT_TRUE(i.ok()) << i.error().ToString();
  if (!i.ok()) return "";
  if (net) ApplyEgressNetwork(*i, *net, *spec.egress);
  auto body = docker::EncodeContainerCreate(ToContainerConfig(*i), docker::ApiVersion{1, 45});
  EXPECT_TRUE(body.ok()) << body.error().ToString();
  return body.ok() ? *body : "";
}

// Today's request bodies (Engine API 1.45), one per kind of sandbox. Every sandbox: the agent as
// PID 1 with stdin kept open across attaches, no new privileges, CapDrop ALL + only
// kSandboxCapabilities, no log of PID 1's stdio, no privileges, swap = memory.
constexpr const char* kAnonymous =
    R"({"Image":"agvisor/with-agent:img-agent","Cmd":["init","--channel-stdio","--warm-shells","2"],)"
    R"("Entrypoint":["/.agvisor/agvisor-agent"],"Labels":{"agvisor":"1","agvisor.cpus":"2",)"
    R"("agvisor.image":"agvisor/base:latest","agvisor.memory":"2g",)"
    R"("agvisor.platform":"systrap"},"Tty":false,)"
    R"("OpenStdin":true,"AttachStdin":true,"AttachStdout":true,"AttachStderr":true,)"
    R"("StdinOnce":false,"HostConfig":{"Runtime":"runsc","NanoCpus":2000000000,)"
    R"("Memory":2147483648,"MemorySwap":2147483648,"PidsLimit":1584,"NetworkMode":"bridge",)"
    R"("AutoRemove":false,"CapDrop":["ALL"],"CapAdd":["CHOWN","DAC_OVERRIDE","FOWNER","KILL",)"
    R"("SETGID","SETUID","NET_BIND_SERVICE"],"SecurityOpt":["no-new-privileges"],)"
    R"("ReadonlyRootfs":false,"Privileged":false,"LogConfig":{"Type":"none","Config":{}}}})";

constexpr const char* kNamed =
    R"({"Image":"agvisor/with-agent:img-agent","Cmd":["init","--channel-stdio","--lifetime",)"
    R"("3600","--idle-ttl","600","--warm-shells","2"],"Entrypoint":["/.agvisor/agvisor-agent"],)"
    R"("WorkingDir":"/workspace","Labels":{"agvisor":"1","agvisor.cpus":"0.5",)"
    R"("agvisor.idle_ttl":"600",)"
    R"("agvisor.image":"agvisor/base:latest","agvisor.lifetime":"3600",)"
    R"("agvisor.memory":"512m","agvisor.name":"proj","agvisor.platform":"systrap",)"
    R"("agvisor.pool":"p1","tenant":"t1"},"Tty":false,"OpenStdin":true,"AttachStdin":true,)"
    R"("AttachStdout":true,"AttachStderr":true,"StdinOnce":false,)"
    R"("HostConfig":{"Runtime":"runsc","NanoCpus":500000000,"Memory":536870912,)"
    R"("MemorySwap":536870912,"PidsLimit":240,"NetworkMode":"bridge","ShmSize":134217728,)"
    R"("AutoRemove":true,"Mounts":[{"Type":"volume","Source":"agvisor-proj",)"
    R"("Target":"/workspace","ReadOnly":false}],"CapDrop":["ALL"],"CapAdd":["CHOWN",)"
    R"("DAC_OVERRIDE","FOWNER","KILL","SETGID","SETUID","NET_BIND_SERVICE"],)"
    R"("SecurityOpt":["no-new-privileges"],"ReadonlyRootfs":false,"Privileged":false,)"
    R"("LogConfig":{"Type":"none","Config":{}}}})";

constexpr const char* kNoneOnTwin =
    R"({"Image":"agvisor/with-agent:img-agent","Cmd":["init","--channel-stdio","--warm-shells","2"],)"
    R"("Entrypoint":["/.agvisor/agvisor-agent"],"Labels":{"agvisor":"1","agvisor.cpus":"2",)"
    R"("agvisor.image":"agvisor/base:latest","agvisor.memory":"2g",)"
    R"("agvisor.platform":"systrap"},"Tty":false,)"
    R"("OpenStdin":true,"AttachStdin":true,"AttachStdout":true,"AttachStderr":true,)"
    R"("StdinOnce":false,"NetworkDisabled":true,"HostConfig":{"Runtime":"runsc-none",)"
    R"("NanoCpus":2000000000,"Memory":2147483648,"MemorySwap":2147483648,"PidsLimit":1584,)"
    R"("NetworkMode":"none","AutoRemove":false,"CapDrop":["ALL"],"CapAdd":["CHOWN",)"
    R"("DAC_OVERRIDE","FOWNER","KILL","SETGID","SETUID","NET_BIND_SERVICE"],)"
    R"("SecurityOpt":["no-new-privileges"],"ReadonlyRootfs":false,"Privileged":false,)"
    R"("LogConfig":{"Type":"none","Config":{}}}})";

constexpr const char* kNoneWithoutTwin =
    R"({"Image":"agvisor/with-agent:img-agent","Cmd":["init","--channel-stdio","--warm-shells","2"],)"
    R"("Entrypoint":["/.agvisor/agvisor-agent"],"Labels":{"agvisor":"1","agvisor.cpus":"2",)"
    R"("agvisor.image":"agvisor/base:latest","agvisor.memory":"2g",)"
    R"("agvisor.platform":"systrap"},"Tty":false,)"
    R"("OpenStdin":true,"AttachStdin":true,"AttachStdout":true,"AttachStderr":true,)"
    R"("StdinOnce":false,"HostConfig":{"Runtime":"runsc","NanoCpus":2000000000,)"
    R"("Memory":2147483648,"MemorySwap":2147483648,"PidsLimit":1584,"NetworkMode":"none",)"
    R"("AutoRemove":false,"CapDrop":["ALL"],"CapAdd":["CHOWN","DAC_OVERRIDE","FOWNER","KILL",)"
    R"("SETGID","SETUID","NET_BIND_SERVICE"],"SecurityOpt":["no-new-privileges"],)"
    R"("ReadonlyRootfs":false,"Privileged":false,"LogConfig":{"Type":"none","Config":{}}}})";

constexpr const char* kEgress =
    R"({"Image":"agvisor/with-agent:img-agent","Cmd":["init","--channel-stdio","--warm-shells","2"],)"
    R"("Entrypoint":["/.agvisor/agvisor-agent"],"Env":["HTTP_PROXY=http://172.19.0.1:3128",)"
    R"("HTTPS_PROXY=http://172.19.0.1:3128","http_proxy=http://172.19.0.1:3128",)"
    R"("https_proxy=http://172.19.0.1:3128","NO_PROXY=localhost,127.0.0.1,::1",)"
    R"("no_proxy=localhost,127.0.0.1,::1"],"Labels":{"agvisor":"1",)"
    R"("agvisor.cpus":"2",)"
    R"("agvisor.egress":"allow=example.com;cidr=;ports=443;deny=",)"
    R"("agvisor.image":"agvisor/base:latest","agvisor.memory":"2g",)"
    R"("agvisor.platform":"systrap"},"Tty":false,)"
    R"("OpenStdin":true,"AttachStdin":true,"AttachStdout":true,"AttachStderr":true,)"
    R"("StdinOnce":false,"HostConfig":{"Runtime":"runsc","NanoCpus":2000000000,)"
    R"("Memory":2147483648,"MemorySwap":2147483648,"PidsLimit":1584,)"
    R"("NetworkMode":"agvisor-0123abcd-egress","Dns":["172.19.0.1"],"AutoRemove":false,)"
    R"("CapDrop":["ALL"],"CapAdd":["CHOWN","DAC_OVERRIDE","FOWNER","KILL","SETGID","SETUID",)"
    R"("NET_BIND_SERVICE"],"SecurityOpt":["no-new-privileges"],"ReadonlyRootfs":false,)"
    R"("Privileged":false,"LogConfig":{"Type":"none","Config":{}}}})";

constexpr const char* kDesktopWithDiskCap =
    R"({"Image":"agvisor/with-agent:img-agent","Cmd":["init","--channel-stdio","--desktop","--warm-shells","2"],)"
    R"("Entrypoint":["/.agvisor/agvisor-agent"],"Labels":{"agvisor":"1","agvisor.cpus":"2",)"
    R"("agvisor.image":"agvisor/desktop:latest","agvisor.memory":"2g",)"
    R"("agvisor.platform":"systrap"},"Tty":false,)"
    R"("OpenStdin":true,"AttachStdin":true,"AttachStdout":true,"AttachStderr":true,)"
    R"("StdinOnce":false,"HostConfig":{"Runtime":"runsc","NanoCpus":2000000000,)"
    R"("Memory":2147483648,"MemorySwap":2147483648,"PidsLimit":1584,"NetworkMode":"bridge",)"
    R"("ShmSize":1073741824,"AutoRemove":false,"CapDrop":["ALL"],"CapAdd":["CHOWN",)"
    R"("DAC_OVERRIDE","FOWNER","KILL","SETGID","SETUID","NET_BIND_SERVICE"],)"
    R"("SecurityOpt":["no-new-privileges"],"ReadonlyRootfs":false,)"
    R"("Annotations":{"dev.gvisor.flag.overlay2":"root:self,size=5g"},"Privileged":false,)"
    R"("LogConfig":{"Type":"none","Config":{}}}})";

TEST(InstanceSpecTest, Anonymous) {
  SandboxSpec spec;
  EXPECT_EQ(Body(spec, Decide(spec)), kAnonymous);
}

TEST(InstanceSpecTest, NamedWithDeadlinesAndLabels) {
  SandboxSpec spec = NamedSpec("proj");
  spec.lifetime = 3600;
  spec.idle_ttl = 600;
  spec.labels = {{"tenant", "t1"}};
  spec.limits.cpus = 0.5;
  spec.limits.memory = "512m";
  spec.limits.pids = 64;
  spec.limits.shm = "128m";
  auto d = Decide(spec);
  d.system_labels = {{"agvisor.pool", "p1"}};
  EXPECT_EQ(Body(spec, d), kNamed);
}

TEST(InstanceSpecTest, NetworkNoneOnTheTwinAndWithout) {
  SandboxSpec spec;
  spec.network = "none";
  auto d = Decide(spec);
  d.runtime = "runsc-none";
  EXPECT_EQ(Body(spec, d), kNoneOnTwin);
  EXPECT_EQ(Body(spec, Decide(spec)), kNoneWithoutTwin);
}

// allow_setuid: no no-new-privileges, and the agent's sudo broker (agent/sudo_broker.h), since
// gVisor ignores setuid bits; nothing else changes.
TEST(InstanceSpecTest, AllowSetuidDropsNoNewPrivilegesAndStartsTheSudoBrokerOnly) {
  SandboxSpec spec;
  spec.allow_setuid = true;
  std::string want = kAnonymous;
  const std::string nnp = R"("SecurityOpt":["no-new-privileges"],)";
  want.erase(want.find(nnp), nnp.size());
  const std::string stdio = R"("--channel-stdio")";
  want.insert(want.find(stdio) + stdio.size(), R"(,"--sudo-broker")");
  EXPECT_EQ(Body(spec, Decide(spec)), want);
  EXPECT_EQ(std::string(kAnonymous).find("--sudo-broker"), std::string::npos);
}

TEST(InstanceSpecTest, Egress) {
  SandboxSpec spec;
  spec.egress = egress::EgressRules{.allow_domains = {"example.com"}, .ports = {443}};
  SandboxNetwork net{.name = "agvisor-0123abcd-egress", .gateway = "172.19.0.1"};
  EXPECT_EQ(Body(spec, Decide(spec), net), kEgress);
}

TEST(InstanceSpecTest, BrokeredSecretsAreTheirPlaceholdersAndTheCaNeverTheValue) {
  SandboxSpec spec;
  spec.egress = egress::EgressRules{.allow_domains = {"api.example.com"}};
  spec.secrets = {{.name = "API_KEY", .hosts = {"api.example.com"}}};
  auto i = BuildInstanceSpec(spec, Decide(spec));
  ASSERT_TRUE(i.ok());
  ApplyEgressNetwork(*i, SandboxNetwork{.name = "n", .gateway = "172.19.0.1"}, *spec.egress);
  ApplyBrokeredSecrets(*i, BrokeredSecrets{.env = {{"API_KEY", "agvsec_0123"}},
                                           .ca_pem = "-----BEGIN CERTIFICATE-----\nX\n"});
  auto has = [&](const std::string& kv) {
    return std::find(i->env.begin(), i->env.end(), kv) != i->env.end();
  };
  EXPECT_TRUE(has("API_KEY=agvsec_0123"));
  EXPECT_TRUE(has("AGVISOR_SANDBOX_CA=-----BEGIN CERTIFICATE-----\nX\n"));
  for (const char* var :
       {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"}) {
    EXPECT_TRUE(has(std::string(var) + "=/.agvisor/ca-bundle.pem")) << var;
  }
  EXPECT_TRUE(has("NODE_EXTRA_CA_CERTS=/.agvisor/sandbox-ca.pem"));
  EXPECT_TRUE(has("HTTPS_PROXY=http://172.19.0.1:3128"));  // the proxy's are kept
}

TEST(InstanceSpecTest, DesktopAndDiskCap) {
  SandboxSpec spec;
  spec.gui = true;
  spec.limits.memory = "2g";
  auto d = Decide(spec);
  d.disk_cap = "5g";
  EXPECT_EQ(Body(spec, d), kDesktopWithDiskCap);
}

// The runtime-neutral fields the Docker bodies above come from, for a named sandbox with
// deadlines: what a second runtime (Kubernetes) reads.
TEST(InstanceSpecTest, NeutralFieldsOfANamedSandbox) {
  SandboxSpec spec = NamedSpec("proj");
  spec.lifetime = 60;
  spec.limits.memory = "1g";
  auto i = BuildInstanceSpec(spec, Decide(spec));
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  EXPECT_EQ(i->name, "agvisor-proj");
  EXPECT_EQ(i->argv, (std::vector<std::string>{"/.agvisor/agvisor-agent", "init", "--channel-stdio",
                                               "--lifetime", "60", "--warm-shells", "2"}));
  EXPECT_EQ(i->workspace, std::optional<std::string>("agvisor-proj"));
  EXPECT_EQ(i->working_dir, "/workspace");
  EXPECT_TRUE(i->remove_on_exit);
  EXPECT_EQ(i->memory_bytes, 1LL << 30);
  EXPECT_EQ(i->runtime, "runsc");
  EXPECT_EQ(i->requested_runtime, "runsc");
  EXPECT_EQ(i->source_image, "agvisor/base:latest");
  spec.warm_shells = 0;  // off: the agent is not asked for any
  i = BuildInstanceSpec(spec, Decide(spec));
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  EXPECT_EQ(i->argv, (std::vector<std::string>{"/.agvisor/agvisor-agent", "init", "--channel-stdio",
                                               "--lifetime", "60"}));
}

// The platform is runtime-neutral in the instance (a field and the agvisor.platform label); the
// Docker runtime alone turns it into a runtime's name. Network none on ptrace runs on ptrace's
// none twin (network disabled); without the twin, on runsc-ptrace with Docker's network none.
TEST(InstanceSpecTest, PlatformIsALabelAndDockerPicksItsRuntime) {
  SandboxSpec spec;
  spec.platform = "ptrace";
  auto d = Decide(spec);
  d.platform = "ptrace";
  d.runtime = "runsc-ptrace";
  auto i = BuildInstanceSpec(spec, d);
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  EXPECT_EQ(i->platform, "ptrace");
  EXPECT_EQ(i->labels.at("agvisor.platform"), "ptrace");
  EXPECT_EQ(i->requested_runtime, "runsc");
  auto c = ToContainerConfig(*i);
  EXPECT_EQ(c.host_config.runtime, "runsc-ptrace");
  EXPECT_FALSE(c.network_disabled);  // its own runtime, not a none twin

  spec.network = "none";
  d.runtime = "runsc-ptrace-none";
  i = BuildInstanceSpec(spec, d);
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  c = ToContainerConfig(*i);
  EXPECT_EQ(c.host_config.runtime, "runsc-ptrace-none");
  EXPECT_TRUE(c.network_disabled);

  d.runtime = "runsc-ptrace";  // no twin registered
  i = BuildInstanceSpec(spec, d);
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  EXPECT_FALSE(ToContainerConfig(*i).network_disabled);
}

// pids mean the tasks inside: the host's cap (what Docker's PidsLimit and a resize write) is
// scaled by the platform at create and scaled back exactly where it is read, on either platform.
TEST(InstanceSpecTest, PidsAreScaledToTheHostCapByThePlatformAndBack) {
  for (std::string_view platform : {"systrap", "ptrace", ""}) {
    for (std::int64_t pids : {std::int64_t{1}, std::int64_t{64}, std::int64_t{512}, kMaxPids}) {
      const std::int64_t host = HostPidsCap(platform, pids);
      EXPECT_GT(host, pids) << platform << " " << pids;  // gVisor's own tasks on top
      EXPECT_LE(host, std::int64_t{4} << 20) << "pids.max takes at most PID_MAX_LIMIT";
      EXPECT_EQ(SandboxPidsOf(platform, host), pids) << platform << " " << pids;
    }
  }
  // ptrace runs several host tasks per process inside (a stub process, traced threads), systrap
  // about one per task; a sandbox of neither recorded platform is systrap's (made before).
  EXPECT_GT(HostPidsCap("ptrace", 512) - HostPidsCap("ptrace", 511),
            HostPidsCap("systrap", 512) - HostPidsCap("systrap", 511));
  EXPECT_EQ(HostPidsCap("", 64), HostPidsCap("systrap", 64));
  EXPECT_EQ(SandboxPidsOf("ptrace", 0), 0);  // no cap
  EXPECT_EQ(SandboxPidsOf("ptrace", 5), 1);  // a cap made another way, below gVisor's base

  SandboxSpec spec;
  spec.limits.pids = 64;
  auto d = Decide(spec);
  d.platform = "ptrace";
  auto i = BuildInstanceSpec(spec, d);
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->pids, HostPidsCap("ptrace", 64));
  EXPECT_EQ(ToContainerConfig(*i).host_config.pids_limit, HostPidsCap("ptrace", 64));

  // Stats: the cap exactly, the tasks now from the host's count above the base.
  SandboxStats idle{.pids = static_cast<std::uint64_t>(HostPidsCap("ptrace", 3)),
                    .pids_limit = static_cast<std::uint64_t>(HostPidsCap("ptrace", 64))};
  SandboxPidsInStats("ptrace", idle);
  EXPECT_EQ(idle.pids, 3u);
  EXPECT_EQ(idle.pids_limit, 64u);
  SandboxStats none{.pids = 1, .pids_limit = 0};
  SandboxPidsInStats("systrap", none);
  EXPECT_EQ(none.pids, 1u);  // the agent, at least
  EXPECT_EQ(none.pids_limit, 0u);
}

TEST(InstanceSpecTest, IdleActionReachesTheLabelsAndRemoval) {
  SandboxSpec spec = NamedSpec("proj");
  spec.idle_ttl = 30;
  spec.warm_shells = 0;
  auto i = BuildInstanceSpec(spec, Decide(spec));  // destroy: as before
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  EXPECT_TRUE(i->remove_on_exit);
  EXPECT_EQ(i->labels.count("agvisor.idle_action"), 0u);
  spec.idle_action = "stop";
  i = BuildInstanceSpec(spec, Decide(spec));
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  EXPECT_EQ(i->labels.at("agvisor.idle_action"), "stop");
  EXPECT_FALSE(i->remove_on_exit);  // the container stays, exited
  EXPECT_EQ(i->argv, (std::vector<std::string>{"/.agvisor/agvisor-agent", "init", "--channel-stdio",
                                               "--idle-ttl", "30"}));  // the agent just stops
  spec.idle_action = "pause";
  i = BuildInstanceSpec(spec, Decide(spec));
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  EXPECT_EQ(i->labels.at("agvisor.idle_action"), "pause");
  EXPECT_EQ(i->labels.at("agvisor.idle_ttl"), "30");  // what the lister compares against
  // The agent keeps the idle clock but never stops on it: the host freezes it.
  EXPECT_EQ(i->argv, (std::vector<std::string>{"/.agvisor/agvisor-agent", "init", "--channel-stdio",
                                               "--track-idle"}));
}

TEST(InstanceSpecTest, LifetimeOverCountsFromCreationForThePausedOnly) {
  const Labels labels = {{"agvisor", "1"}, {"agvisor.lifetime", "60"}};
  EXPECT_FALSE(LifetimeOver(labels, 1000, 1060));  // the agent's start comes a moment later
  EXPECT_TRUE(LifetimeOver(labels, 1000, 1061));
  EXPECT_FALSE(LifetimeOver({{"agvisor", "1"}}, 1000, 999999));  // no lifetime
  EXPECT_FALSE(LifetimeOver(labels, 0, 999999));                 // no creation time
  Labels pooled = labels;
  pooled["agvisor.pool"] = "p";  // handed out with a lifetime of its own (SetDeadlines)
  EXPECT_FALSE(LifetimeOver(pooled, 1000, 999999));
  EXPECT_FALSE(LifetimeOver({{"agvisor.lifetime", "6x"}}, 1000, 999999));
  EXPECT_FALSE(LifetimeOver({{"agvisor.lifetime", ""}}, 1000, 999999));
}

}  // namespace
}  // namespace agvisor
