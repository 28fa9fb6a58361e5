// Sandbox::Create and Pool on the fake runtime (fake_runtime.h): the real agent, no Docker. What
// every validation refuses before the runtime is asked anything; that a failure in any step
// leaves nothing behind; a named sandbox's resume, conflicts and races; a pool's fill, acquire
// and replacement of dead members.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "agvisor/sandbox/pool.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/start_gate.h"
#include "agvisor/sandbox/testing/fake_runtime.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;

// The local host's name: egress policies are offered on the local host only (egress_network.h),
// and this process talks to no Docker, so the fake stands in for it.
constexpr const char* kHost = "";

class SandboxCreateUnitTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeRuntime> rt_ = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
};

// (Built out of line: g++ 12 at -O2 warns of a maybe-uninitialized optional<string> otherwise.)
[[gnu::noinline]] SandboxSpec Named(const std::string& name) {
  SandboxSpec spec;
  spec.name = name;
  return spec;
}

TEST_F(SandboxCreateUnitTest, AnAnonymousSandboxRunsTheAgentWithTheSpecsArgvAndLabels) {
  SandboxSpec spec;
  spec.lifetime = 600;
  spec.labels = {{"tenant", "t1"}};
  auto sb = Sandbox::Create(rt_, spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto r = (*sb)->Exec({"sh", "-c", "echo hi"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "hi\n");
  // The first channel is PID 1's stdio: no relay was opened.
  EXPECT_EQ(rt_->CallCount("OpenExecStream"), 0);
  auto made = rt_->CreatedSpec((*sb)->container_name());
  ASSERT_TRUE(made.has_value());
  EXPECT_EQ(made->argv,
            (std::vector<std::string>{"/.agvisor/agvisor-agent", "init", "--channel-stdio",
                                      "--lifetime", "600", "--warm-shells", "2"}));
  EXPECT_EQ(made->image, "fake/with-agent:agvisor/base:latest");
  EXPECT_EQ(made->labels.at("agvisor"), "1");
  EXPECT_EQ(made->labels.at("tenant"), "t1");
  EXPECT_EQ(made->labels.at("agvisor.image"), "agvisor/base:latest");
  EXPECT_EQ(made->labels.at("agvisor.platform"), "ptrace");  // the default, recorded
  EXPECT_EQ(made->runtime, "runsc-ptrace");
  EXPECT_TRUE(made->remove_on_exit);
  EXPECT_FALSE(made->workspace.has_value());
  // The fake has no disk caps: the default one is said to be unenforced, not refused.
  EXPECT_THAT((*sb)->disk_warning(), HasSubstr("not enforced on this host"));
  ASSERT_TRUE(Sandbox::Remove(rt_, (*sb)->container_name(), /*erase_data=*/true).ok());
  EXPECT_TRUE(rt_->Snapshot().empty());
}

TEST_F(SandboxCreateUnitTest, WithoutARuntimeEveryEntryPointRefuses) {
  EXPECT_EQ(Sandbox::Create(nullptr, SandboxSpec{}).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Sandbox::Open(nullptr, "agvisor-x").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Sandbox::List(nullptr).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Sandbox::Remove(nullptr, "agvisor-x", true).error().code(),
            ErrorCode::kInvalidArgument);
  PoolOptions o;
  o.size = 1;
  EXPECT_EQ(Pool::Create(nullptr, o).error().code(), ErrorCode::kInvalidArgument);
}

// What a process keeps about a host belongs to the runtime object: two runtimes of one host
// (two places) each sweep once and each have their own start gate.
TEST_F(SandboxCreateUnitTest, EachRuntimeObjectKeepsItsOwnBookkeeping) {
  auto other = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
  for (auto rt : {rt_, other}) {
    for (int i = 0; i < 2; ++i) {
      auto sb = Sandbox::Create(rt, SandboxSpec{});
      ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    }
    EXPECT_EQ(rt->CallCount("List"), 1);  // the sweep, once per runtime object
  }
  EXPECT_EQ(rt_->start_gate().stats().admitted, 2u);
  EXPECT_EQ(other->start_gate().stats().admitted, 2u);
}

// The in-process library has no enforcer to hold a secret's value: a create with secrets that
// no broker (agvisord's) took is refused before anything is made, saying how to start agvisord.
TEST_F(SandboxCreateUnitTest, SecretsWithoutABrokerAreRefusedNamingAgvisord) {
  SandboxSpec spec;
  spec.egress = egress::EgressRules{.allow_domains = {"api.example.com"}};
  spec.secrets = {{.name = "API_KEY", .hosts = {"api.example.com"}, .value = "sk-live"}};
  auto sb = Sandbox::Create(rt_, spec);
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(sb.error().message().find("Start agvisord"), std::string::npos) << sb.error().message();
  EXPECT_EQ(sb.error().message().find("sk-live"), std::string::npos);
  EXPECT_EQ(rt_->CallCount("CreateAndStart"), 0);
}

TEST_F(SandboxCreateUnitTest, InvalidSpecsAreRefusedBeforeTheRuntimeIsAskedAnything) {
  std::vector<std::pair<std::string, SandboxSpec>> bad;
  bad.emplace_back("name", Named("Bad Name!"));
  SandboxSpec s;
  s.limits.cpus = -1;
  bad.emplace_back("cpus", s);
  s = {};
  s.limits.memory = "lots";
  bad.emplace_back("memory", s);
  s = {};
  s.limits.pids = 0;
  bad.emplace_back("pids", s);
  s = {};
  s.network = "host";
  bad.emplace_back("network", s);
  s = {};
  s.lifetime = 0;
  bad.emplace_back("lifetime", s);
  s = {};
  s.image = "-rm";
  bad.emplace_back("image", s);
  s = {};
  s.platform = "kvm";
  bad.emplace_back("platform", s);
  // A spec for another host than the runtime it is handed to.
  s = {};
  s.host = "ssh://elsewhere";
  bad.emplace_back("host", s);
  for (const auto& [what, spec] : bad) {
    auto sb = Sandbox::Create(rt_, spec);
    ASSERT_FALSE(sb.ok()) << what;
    EXPECT_EQ(sb.error().code(), ErrorCode::kInvalidArgument)
        << what << ": " << sb.error().ToString();
  }
  EXPECT_TRUE(rt_->calls().empty());
  // A runtime that is not gVisor: refused by the first question, before anything is made.
  s = {};
  s.runtime = "runc";
  auto sb = Sandbox::Create(rt_, s);
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(sb.error().message(), HasSubstr("only on gVisor"));
  EXPECT_EQ(rt_->calls().size(), 1u);
  EXPECT_TRUE(rt_->Snapshot().empty());
}

std::string IdOf(Sandbox& sb) {
  auto info = sb.Info();
  return info.ok() ? info->container_id : "";
}

// A named sandbox with an egress policy asks for the most: every runtime call of a good create,
// failed in turn, must leave nothing (no instance, volume or network) and say what failed.
TEST_F(SandboxCreateUnitTest, AFailureInAnyStepLeavesNothingBehind) {
  SandboxSpec spec = Named("proj");
  spec.egress = egress::EgressRules{.allow_domains = {"example.com"}, .ports = {443}};
  std::vector<std::string> steps;
  {
    auto good = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
    auto sb = Sandbox::Create(good, spec);
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    EXPECT_EQ(good->Snapshot(),
              (std::set<std::string>{"instance agvisor-proj", "volume agvisor-proj",
                                     "network agvisor-proj"}));
    for (const auto& c : good->calls()) steps.push_back(c.op);
  }
  // The first start on a runtime is followed by a sweep of never-started leftovers (List),
  // best-effort: its failure fails no create, so it is no step here.
  std::erase(steps, "List");
  EXPECT_EQ(steps, (std::vector<std::string>{"RequireGvisor", "ProbeDiskCap", "EnsureVolume",
                                             "PrepareImage", "Inspect", "EnsureEgressNetwork",
                                             "CreateAndStart"}));
  for (const auto& step : steps) {
    auto rt = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
    rt->FailNext(step, Error::Unavailable("injected failure of " + step));
    auto sb = Sandbox::Create(rt, spec);
    ASSERT_FALSE(sb.ok()) << step;
    EXPECT_EQ(sb.error().code(), ErrorCode::kUnavailable) << step;
    EXPECT_THAT(sb.error().message(), HasSubstr("injected failure of " + step));
    EXPECT_TRUE(rt->Snapshot().empty())
        << "after a failed " << step << ": " << ::testing::PrintToString(rt->Snapshot());
  }
  // After the instance started: an agent that never answers the handshake.
  auto rt = std::make_shared<FakeRuntime>(kHost, AGVISOR_AGENT_BINARY);
  rt->BreakNextAgent();
  auto sb = Sandbox::Create(rt, spec);
  ASSERT_FALSE(sb.ok());
  EXPECT_THAT(sb.error().message(), HasSubstr("agent handshake"));
  EXPECT_THAT(sb.error().message(), HasSubstr("start sandbox agvisor-proj"));
  EXPECT_TRUE(rt->Snapshot().empty()) << ::testing::PrintToString(rt->Snapshot());
}

// A runtime whose creating channel is a relay (Kubernetes) gets a second relay when the first
// did not start; without `reopen` (Docker: PID 1's stdio) a failed handshake fails the create
// (above).
TEST_F(SandboxCreateUnitTest, AFirstRelayThatDidNotStartIsOpenedOnceMore) {
  rt_->FailNextFirstRelay();
  auto sb = Sandbox::Create(rt_, SandboxSpec{});
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto r = (*sb)->ExecShell("echo relayed");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "relayed\n");
  EXPECT_EQ(rt_->CallCount("OpenExecStream"), 1);
}

// What the Kubernetes client reads when kubelet answers the relay's exec with a Failure Status
// (kube::ExecStream::ReadStdout): an error carrying the Status's message, not stray output.
const char* const kExecDidNotStart =
    "exec of /.agvisor/agvisor-agent in pod agvisor-x: exec failed: Internal error occurred: error "
    "executing command in container: OCI runtime exec failed: exec failed: fake";

TEST_F(SandboxCreateUnitTest, ARelayEndingWithAFailureStatusIsOpenedOnceMore) {
  rt_->FailNextRelaysWith(Error::Unavailable(kExecDidNotStart), 0);
  auto sb = Sandbox::Create(rt_, SandboxSpec{});
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto r = (*sb)->ExecShell("echo relayed");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, "relayed\n");
  EXPECT_EQ(rt_->CallCount("OpenExecStream"), 1);
}

TEST_F(SandboxCreateUnitTest, TwoRelaysThatDidNotStartFailTheCreateWithTheReason) {
  rt_->FailNextRelaysWith(Error::Unavailable(kExecDidNotStart), 1);
  auto sb = Sandbox::Create(rt_, SandboxSpec{});
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kUnavailable) << sb.error().ToString();
  EXPECT_THAT(sb.error().message(), HasSubstr("agent handshake"));
  EXPECT_THAT(sb.error().message(), HasSubstr(kExecDidNotStart));
  EXPECT_TRUE(rt_->Snapshot().empty()) << ::testing::PrintToString(rt_->Snapshot());
}

TEST_F(SandboxCreateUnitTest, AVolumeThatWasThereIsKeptWhenTheCreateFails) {
  rt_->AddVolume("agvisor-keep", {{"agvisor", "1"}});
  rt_->FailNext("CreateAndStart", Error::Unavailable("injected"));
  auto sb = Sandbox::Create(rt_, Named("keep"));
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(rt_->Snapshot(), (std::set<std::string>{"volume agvisor-keep"}));
}

TEST_F(SandboxCreateUnitTest, AMissingImageSaysHowToGetIt) {
  rt_->FailNext("PrepareImage", Error::NotFound("no such image: mine:1"));
  SandboxSpec spec;
  spec.image = "mine:1";
  auto sb = Sandbox::Create(rt_, spec);
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(sb.error().message(),
              HasSubstr("image mine:1 not found on this host: pull it (`docker pull mine:1`) or "
                        "build it (`agvisor image build KIND`"));
  rt_->FailNext("PrepareImage", Error::NotFound("no such image"));
  sb = Sandbox::Create(rt_, SandboxSpec{});
  ASSERT_FALSE(sb.ok());
  EXPECT_THAT(sb.error().message(), HasSubstr("agvisor image build base"));
}

TEST_F(SandboxCreateUnitTest, AnExplicitDiskCapThisHostCannotEnforceIsRefused) {
  SandboxSpec spec;
  spec.limits.disk = "5g";
  auto sb = Sandbox::Create(rt_, spec);
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(sb.error().message(), HasSubstr("--disk none"));
  EXPECT_EQ(rt_->CallCount("CreateAndStart"), 0);
}

TEST_F(SandboxCreateUnitTest, ANamedSandboxIsResumedWhileItRunsAndItsVolumeOutlivesIt) {
  SandboxSpec spec = Named("proj");
  spec.idle_ttl = 900;
  auto first = Sandbox::Create(rt_, spec);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_FALSE((*first)->resumed());
  ASSERT_TRUE((*first)->Exec({"true"}).ok());
  auto made = rt_->CreatedSpec("agvisor-proj");
  ASSERT_TRUE(made.has_value());
  EXPECT_EQ(made->workspace, std::optional<std::string>("agvisor-proj"));
  EXPECT_EQ(made->working_dir, "/workspace");

  auto again = Sandbox::Create(rt_, Named("proj"));
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_TRUE((*again)->resumed());
  EXPECT_EQ(IdOf(**again), IdOf(**first));
  EXPECT_EQ((*again)->idle_ttl(), 900);  // from the running one's label
  EXPECT_EQ(rt_->CallCount("CreateAndStart"), 1);

  // Stopped: the next create replaces the instance and keeps the volume.
  const std::string first_id = IdOf(**first);
  ASSERT_TRUE((*first)->Stop().ok());
  auto third = Sandbox::Create(rt_, Named("proj"));
  ASSERT_TRUE(third.ok()) << third.error().ToString();
  EXPECT_FALSE((*third)->resumed());
  EXPECT_NE(IdOf(**third), first_id);
  EXPECT_EQ(rt_->CallCount("CreateAndStart"), 2);
  EXPECT_TRUE(rt_->HasVolume("agvisor-proj"));
  ASSERT_TRUE((*third)->Delete().ok());
  EXPECT_TRUE(rt_->Snapshot().empty());
}

// A named sandbox's platform is recorded on its volume: made again without one, it comes back on
// it; asked for another one, it is refused before anything is made.
TEST_F(SandboxCreateUnitTest, ANamedSandboxComesBackOnItsPlatform) {
  SandboxSpec spec = Named("pt");
  spec.platform = "ptrace";
  auto first = Sandbox::Create(rt_, spec);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  auto made = rt_->CreatedSpec("agvisor-pt");
  ASSERT_TRUE(made.has_value());
  EXPECT_EQ(made->runtime, "runsc-ptrace");
  EXPECT_EQ(made->platform, "ptrace");
  auto info = (*first)->Info();
  ASSERT_TRUE(info.ok()) << info.error().ToString();
  EXPECT_EQ(info->platform, "ptrace");
  ASSERT_TRUE((*first)->Stop().ok());

  SandboxSpec other = Named("pt");
  other.platform = "systrap";
  auto refused = Sandbox::Create(rt_, other);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(refused.error().message(),
              HasSubstr("made on gVisor platform 'ptrace', not 'systrap'"));
  EXPECT_EQ(rt_->CallCount("CreateAndStart"), 1);

  auto again = Sandbox::Create(rt_, Named("pt"));  // no platform: its own
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  made = rt_->CreatedSpec("agvisor-pt");
  ASSERT_TRUE(made.has_value());
  EXPECT_EQ(made->runtime, "runsc-ptrace");
  EXPECT_EQ(made->labels.at("agvisor.platform"), "ptrace");
  auto listed = Sandbox::List(rt_);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().platform, "ptrace");
  ASSERT_TRUE((*again)->Delete().ok());
  EXPECT_TRUE(rt_->Snapshot().empty());
}

TEST_F(SandboxCreateUnitTest, ANamedSandboxIsNotResumedWithAnotherEgressPolicy) {
  ASSERT_TRUE(Sandbox::Create(rt_, Named("open")).ok());
  SandboxSpec closed = Named("open");
  closed.egress = egress::EgressRules{.allow_domains = {"example.com"}, .ports = {443}};
  auto sb = Sandbox::Create(rt_, closed);
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(sb.error().message(), HasSubstr("is running with no egress policy"));
  EXPECT_FALSE(rt_->HasNetwork("agvisor-open"));
}

TEST_F(SandboxCreateUnitTest, AContainerAgvisorDidNotMakeIsNeverTaken) {
  ASSERT_TRUE(rt_->AddInstance("agvisor-theirs", {}).ok());
  auto sb = Sandbox::Create(rt_, Named("theirs"));
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(sb.error().message(), HasSubstr("exists that agvisor did not create"));
  EXPECT_EQ(rt_->CallCount("Remove"), 0);
  EXPECT_EQ(rt_->CallCount("CreateAndStart"), 0);
}

TEST_F(SandboxCreateUnitTest, ALostRaceLooksAgainAndThreeLossesGiveUpCleanly) {
  rt_->FailNext("CreateAndStart", Error::Conflict("the name is already in use"));
  auto sb = Sandbox::Create(rt_, Named("race"));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  EXPECT_EQ(rt_->CallCount("CreateAndStart"), 2);
  ASSERT_TRUE((*sb)->Delete().ok());

  rt_->FailNext("CreateAndStart", Error::Conflict("the name is already in use"), 3);
  sb = Sandbox::Create(rt_, Named("race"));
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(sb.error().message(), HasSubstr("by other clients at the same time"));
  EXPECT_TRUE(rt_->Snapshot().empty());
}

TEST_F(SandboxCreateUnitTest, TheAgentEndsItsSandboxAtItsLifetimeAndTheRuntimeForgetsIt) {
  SandboxSpec spec;
  spec.lifetime = 1;
  auto sb = Sandbox::Create(rt_, spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  const std::string name = (*sb)->container_name();
  // The agent's deadline (1 s) ends it; 15 s is the bound on a loaded machine.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (rt_->HasInstance(name) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (void)rt_->List({});  // the fake forgets ended remove_on_exit instances when asked
  }
  EXPECT_FALSE(rt_->HasInstance(name));
  auto r = (*sb)->Exec({"true"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kSandboxDied);
}

TEST_F(SandboxCreateUnitTest, APoolFillsHandsOutAndReplacesAMemberThatDied) {
  PoolOptions o;
  o.size = 2;
  auto pool = Pool::Create(rt_, o);
  ASSERT_TRUE(pool.ok()) << pool.error().ToString();
  ASSERT_TRUE((*pool)->WaitReady(std::chrono::seconds(30)).ok());
  EXPECT_EQ(rt_->List({"agvisor.pool=" + (*pool)->id()})->size(), 2u);

  // A member killed behind the pool's back is found dead and never handed out.
  auto members = rt_->List({"agvisor.pool=" + (*pool)->id()});
  ASSERT_TRUE(members.ok());
  rt_->KillAgent(members->front().name, SIGKILL);
  for (int n = 0; n < 3; ++n) {
    auto sb = (*pool)->Acquire({.lifetime = 600, .wait = std::chrono::seconds(30)});
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    auto r = (*sb)->Exec({"sh", "-c", "echo up"});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r->out, "up\n");
    (void)Sandbox::Remove(rt_, (*sb)->container_name(), /*erase_data=*/true);
  }
  const PoolStats st = (*pool)->Stats();
  EXPECT_EQ(st.acquired + st.cold, 3u);
  EXPECT_GE(st.discarded, 1u);
  (*pool)->Close();
  EXPECT_TRUE(rt_->Snapshot().empty()) << ::testing::PrintToString(rt_->Snapshot());
}

TEST_F(SandboxCreateUnitTest, APoolThatDoesNotFitTheHostsMemoryIsRefused) {
  PoolOptions o;
  o.size = 5;
  o.spec.limits.memory = "2g";  // the fake host has 8 GiB
  auto pool = Pool::Create(rt_, o);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(pool.error().message(), HasSubstr("use size <= 4"));
  EXPECT_EQ(rt_->CallCount("CreateAndStart"), 0);
}

}  // namespace
}  // namespace agvisor
