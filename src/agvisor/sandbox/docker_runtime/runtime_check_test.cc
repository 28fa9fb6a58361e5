#include "agvisor/sandbox/docker_runtime/runtime_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agvisor/docker/types.h"

namespace agvisor {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// What this machine's binaries answer to --version (runsc 20240729, Debian's runc and crun).
constexpr std::string_view kRunsc = "runsc version release-20240729.0\nspec: 1.1.0-rc.1\n";
constexpr std::string_view kRunc =
    "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev\n";

// A host like this one after setup-host, plus a runtime named runsc-ish that is runc.
docker::SystemInfo Host() {
  docker::SystemInfo i;
  i.runtimes["runsc"] = {"/usr/bin/runsc", {"--network=host"}};
  i.runtimes["runsc-none"] = {"/usr/bin/runsc", {"--network=none"}};
  i.runtimes["runc"] = {"runc", {}};
  i.runtimes["io.containerd.runc.v2"] = {"runc", {}};
  i.runtimes["runsc-fake"] = {"/tmp/x/runsc", {}};  // a symlink to runc
  i.default_runtime = "runc";
  return i;
}

// Answers as the binaries would: by path, never by the runtime's name.
struct FakeHost {
  std::vector<std::string> asked;
  RuntimeIdentity operator()(const std::string& name, const docker::RuntimeInfo& rt) {
    asked.push_back(name);
    RuntimeIdentity id{.name = name, .path = rt.path, .args = rt.args};
    std::string_view out = rt.path == "/usr/bin/runsc" ? kRunsc : kRunc;
    id.evidence = std::string(out.substr(0, out.find('\n')));
    id.gvisor = IsRunscVersionOutput(out);
    return id;
  }
};

TEST(RuntimeCheckTest, VersionOutputOfRunscOnly) {
  EXPECT_TRUE(IsRunscVersionOutput(kRunsc));
  EXPECT_FALSE(IsRunscVersionOutput(kRunc));
  EXPECT_FALSE(IsRunscVersionOutput("crun version 1.8.1\n"));
  EXPECT_FALSE(IsRunscVersionOutput(""));
  // Only the first line counts: a binary that merely mentions runsc later is not it.
  EXPECT_FALSE(IsRunscVersionOutput("runc version 1.1.5\nrunsc version release-1\n"));
  EXPECT_FALSE(IsRunscVersionOutput("myrunsc version 1\n"));
}

TEST(RuntimeCheckTest, GvisorRuntimeIsAcceptedAskingOnlyItself) {
  FakeHost fake;
  auto identify = [&](const std::string& n, const docker::RuntimeInfo& r) { return fake(n, r); };
  EXPECT_TRUE(DecideGvisorRuntime("this host", "runsc", Host(), identify).ok());
  EXPECT_EQ(fake.asked, std::vector<std::string>{"runsc"});
}

TEST(RuntimeCheckTest, RuncByAnyNameIsRefusedNamingTheGvisorOnes) {
  for (std::string name : {"runc", "io.containerd.runc.v2", "runsc-fake"}) {
    FakeHost fake;
    auto identify = [&](const std::string& n, const docker::RuntimeInfo& r) { return fake(n, r); };
    auto r = DecideGvisorRuntime("this host", name, Host(), identify);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message(),
                AllOf(HasSubstr("runtime '" + name + "' is refused"), HasSubstr("runc version"),
                      HasSubstr("gVisor runtimes on this host: runsc, runsc-none"),
                      Not(HasSubstr("runsc-fake,"))))
        << name;
  }
}

TEST(RuntimeCheckTest, UnregisteredNameIsRefusedWithoutGuessing) {
  FakeHost fake;
  auto identify = [&](const std::string& n, const docker::RuntimeInfo& r) { return fake(n, r); };
  auto r = DecideGvisorRuntime("ssh://root@h", "crun", Host(), identify);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(),
              AllOf(HasSubstr("has no runtime registered under that name"),
                    HasSubstr("gVisor runtimes on ssh://root@h: runsc, runsc-none")));
}

TEST(RuntimeCheckTest, DefaultRuntimeIsNoExemption) {
  // The daemon's default (runc here) is checked like any other name.
  FakeHost fake;
  auto identify = [&](const std::string& n, const docker::RuntimeInfo& r) { return fake(n, r); };
  auto info = Host();
  EXPECT_FALSE(DecideGvisorRuntime("this host", info.default_runtime, info, identify).ok());
}

TEST(RuntimeCheckTest, NoGvisorAtAllSaysHowToInstallOne) {
  docker::SystemInfo info;
  info.runtimes["runc"] = {"runc", {}};
  FakeHost fake;
  auto identify = [&](const std::string& n, const docker::RuntimeInfo& r) { return fake(n, r); };
  auto r = DecideGvisorRuntime("this host", "runsc", info, identify);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(),
              AllOf(HasSubstr("registered: runc"), HasSubstr("No runtime on this host is gVisor"),
                    HasSubstr("scripts/setup-host")));
}

TEST(RuntimeCheckTest, NoneTwinName) { EXPECT_EQ(NoneTwinOf("runsc"), "runsc-none"); }

TEST(RuntimeCheckTest, PlatformRuntimeNamesAndArgs) {
  EXPECT_EQ(PlatformRuntimeOf("runsc", "systrap"), "runsc");
  EXPECT_EQ(PlatformRuntimeOf("runsc", ""), "runsc");
  EXPECT_EQ(PlatformRuntimeOf("runsc", "ptrace"), "runsc-ptrace");
  EXPECT_EQ(NoneTwinOf(PlatformRuntimeOf("runsc", "ptrace")), "runsc-ptrace-none");
  EXPECT_EQ(PlatformOfArgs({}), "systrap");
  EXPECT_EQ(PlatformOfArgs({"--network=host", "--platform=ptrace"}), "ptrace");
  EXPECT_EQ(PlatformOfArgs({"-platform", "ptrace"}), "ptrace");
  EXPECT_EQ(PlatformOfArgs({"--platform", "kvm", "--network=none"}), "kvm");
}

// A platform other than runsc's own needs its runtime registered with that platform; the
// refusal says which runtime and that setup-host registers it.
TEST(RuntimeCheckTest, PlatformNeedsItsRuntimeRegisteredWithThatPlatform) {
  auto info = Host();
  auto missing = DecidePlatformRuntime("this host", "runsc", "ptrace", info);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(missing.error().message(),
              AllOf(HasSubstr("platform 'ptrace' needs the runtime 'runsc-ptrace'"),
                    HasSubstr("does not have"), HasSubstr("scripts/setup-host registers")));
  info.runtimes["runsc-ptrace"] = {"/usr/bin/runsc", {"--network=host"}};  // no --platform
  auto wrong = DecidePlatformRuntime("this host", "runsc", "ptrace", info);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.error().message(), AllOf(HasSubstr("runs on platform 'systrap', not 'ptrace'"),
                                             HasSubstr("--network=host")));
  info.runtimes["runsc-ptrace"] = {"/usr/bin/runsc", {"--network=host", "--platform=ptrace"}};
  EXPECT_TRUE(DecidePlatformRuntime("this host", "runsc", "ptrace", info).ok());
}

}  // namespace
}  // namespace agvisor
