// Sandboxes run only on gVisor, decided from what the runtime's binary is (sandbox/
// runtime_check.h, docs/security.md "Runtime"), against the real dockerd (label `integration`).
//
// The suite registers runtimes of its own in Docker's daemon.json (merged with what is there,
// then SIGHUP to dockerd, which re-reads its runtimes; never a restart) and removes them again at
// the end, also when a test fails: a runtime NAMED like gVisor whose binary is runc (a symlink to
// it, and a copy of it called runsc), and a real runsc whose network-none twin is runc. Each is
// refused before anything is created on the host: no container, no volume, no derived image.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>

#include "agvisor/base/subprocess.h"
#include "agvisor/base/tar.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/docker_runtime/runtime_check.h"
#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadAll;
using testing::RunId;
using testing::TestSpec;
using testing::WaitFor;

constexpr const char* kDaemonJson = "/etc/docker/daemon.json";
// Runtimes this suite registers are named kPrefix + run id + a role; leftovers of a killed run
// are recognised by the prefix and a path that no longer exists.
constexpr std::string_view kPrefix = "agvisor-test-rt-";

// dockerd's pid(s), found by process name as `pgrep -x dockerd` would.
std::vector<pid_t> DockerdPids() {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string n = e.path().filename();
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string comm = ReadAll(e.path().string() + "/comm");
    if (comm == "dockerd\n") pids.push_back(std::stoi(n));
  }
  return pids;
}

// Rewrites daemon.json with `edit` applied to its "runtimes" object, under a lock that other
// runs of this suite take too, atomically (rename), then SIGHUPs dockerd.
void EditRuntimes(const std::function<void(json::object&)>& edit) {
  UniqueFd lock(
      ::open("/etc/docker/daemon.json.agvisor-test.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  ASSERT_TRUE(lock) << "open the daemon.json lock: " << std::strerror(errno);
  ASSERT_EQ(::flock(lock.get(), LOCK_EX), 0);
  json::object root;
  if (fs::exists(kDaemonJson)) {
    boost::system::error_code ec;
    auto v = json::parse(ReadAll(kDaemonJson), ec);
    ASSERT_FALSE(ec) << kDaemonJson << " is not JSON";
    ASSERT_TRUE(v.is_object());
    root = v.as_object();
  }
  if (!root.contains("runtimes")) root["runtimes"] = json::object();
  edit(root["runtimes"].as_object());
  const std::string tmp = std::string(kDaemonJson) + ".agvisor-test." + RunId();
  std::ofstream(tmp) << json::serialize(root) << "\n";
  ASSERT_EQ(::rename(tmp.c_str(), kDaemonJson), 0) << std::strerror(errno);
  auto pids = DockerdPids();
  ASSERT_FALSE(pids.empty()) << "no dockerd process";
  for (pid_t p : pids) ASSERT_EQ(::kill(p, SIGHUP), 0);
}

bool InfoListsAll(const std::vector<std::string>& names, bool present) {
  auto docker = ConnectDockerHost("");
  if (!docker.ok()) return false;
  auto info = (*docker)->Info();
  if (!info.ok()) return false;
  for (const auto& n : names) {
    if (info->runtimes.contains(n) != present) return false;
  }
  return true;
}

std::string Which(const std::string& program) {
  auto r = RunCommand({"sh", "-c", "command -v " + program});
  if (!r.ok() || !r->status.success()) return "";
  std::string p = r->out;
  while (!p.empty() && p.back() == '\n') p.pop_back();
  return p;
}

class GvisorRuntimeTest : public ::testing::Test {
 protected:
  static std::string Name(std::string_view role) {
    return std::string(kPrefix) + RunId() + "-" + std::string(role);
  }
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/agvisor-rt-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string runc = Which("runc");
    ASSERT_FALSE(runc.empty()) << "runc is not installed (Docker's default runtime)";
    auto docker = ConnectDockerHost("");
    ASSERT_TRUE(docker.ok()) << docker.error().ToString();
    auto info = (*docker)->Info();
    ASSERT_TRUE(info.ok()) << info.error().ToString();
    ASSERT_TRUE(info->runtimes.contains("runsc")) << "run scripts/setup-host first";
    const std::string runsc = info->runtimes.at("runsc").path;
    // A runtime named like gVisor whose binary is runc, twice: a symlink called runsc, and a
    // copy of the binary called runsc.
    fs::create_directories(dir_ + "/link");
    fs::create_directories(dir_ + "/copy");
    fs::create_symlink(runc, dir_ + "/link/runsc");
    fs::copy_file(runc, dir_ + "/copy/runsc");
    ASSERT_EQ(::chmod((dir_ + "/copy/runsc").c_str(), 0755), 0);
    EditRuntimes([&](json::object& rt) {
      // Leftovers of killed runs of this suite: their binaries' directory is gone.
      std::vector<std::string> stale;
      for (const auto& kv : rt) {
        std::string n(kv.key());
        if (!n.starts_with(kPrefix) || !kv.value().is_object()) continue;
        const auto* path = kv.value().as_object().if_contains("path");
        if (path && path->is_string() && !fs::exists(std::string(path->as_string())) &&
            std::string(path->as_string()).starts_with("/tmp/agvisor-rt-")) {
          stale.push_back(n);
        }
      }
      for (const auto& n : stale) rt.erase(n);
      rt[Name("link")] = json::object{{"path", dir_ + "/link/runsc"}};
      rt[Name("copy")] = json::object{{"path", dir_ + "/copy/runsc"}};
      rt[Name("ok")] =
          json::object{{"path", runsc}, {"runtimeArgs", json::array{"--network=host"}}};
      rt[Name("ok") + "-none"] = json::object{{"path", dir_ + "/link/runsc"}};
    });
    registered_ = true;
    ImportImage();
    ASSERT_TRUE(WaitFor([] { return InfoListsAll(All(), true); }, std::chrono::seconds(20)))
        << "dockerd did not pick up the runtimes after SIGHUP";
  }
  static void TearDownTestSuite() {
    testing::CleanupRun();
    if (auto docker = ConnectDockerHost(""); docker.ok())
      (void)(*docker)->RemoveImage(Image(), true);
    if (registered_) {
      EditRuntimes([](json::object& rt) {
        for (const auto& n : All()) rt.erase(n);
      });
      EXPECT_TRUE(WaitFor([] { return InfoListsAll(All(), false); }, std::chrono::seconds(20)))
          << "dockerd still lists this suite's runtimes";
    }
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // An image only this run has (never given the agent): a derived one would name it.
  static std::string Image() { return "agvisor-test/rt:" + RunId(); }
  static void ImportImage() {
    auto docker = ConnectDockerHost("");
    ASSERT_TRUE(docker.ok());
    TarWriter w;
    ASSERT_TRUE(w.AddDirectory("etc").ok());
    ASSERT_TRUE(w.AddFile("etc/marker", "rt\n").ok());
    const std::string tar = w.Finish();
    std::size_t pos = 0;
    http::BodySource source = [&](std::span<char> buf) -> Result<std::size_t> {
      std::size_t n = std::min(buf.size(), tar.size() - pos);
      std::memcpy(buf.data(), tar.data() + pos, n);
      pos += n;
      return n;
    };
    auto id = (*docker)->ImportImage("agvisor-test/rt", RunId(), source, nullptr);
    ASSERT_TRUE(id.ok()) << id.error().ToString();
  }
  static std::vector<std::string> All() {
    return {Name("link"), Name("copy"), Name("ok"), Name("ok") + "-none"};
  }

  // Creates a named sandbox on `runtime` from Image(), and checks that it
  // is refused with `words` and that nothing was made: no container, volume or derived image.
  static void ExpectRefusedCreatingNothing(const std::string& runtime, const std::string& network,
                                           const std::vector<std::string>& words) {
    auto docker = ConnectDockerHost("");
    ASSERT_TRUE(docker.ok());
    SandboxSpec spec = TestSpec("rt" + std::to_string(cases_));
    spec.runtime = runtime;
    spec.network = network;
    spec.image = Image();
    spec.limits.disk = "";  // the default: a host that probes its disk cap would start a probe
    auto r = CreateSandbox(spec);
    ASSERT_FALSE(r.ok()) << runtime << " was accepted";
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << r.error().ToString();
    for (const auto& w : words) EXPECT_THAT(r.error().message(), HasSubstr(w)) << runtime;
    EXPECT_EQ((*docker)->InspectContainer(ContainerNameFor(*spec.name)).error().code(),
              ErrorCode::kNotFound);
    EXPECT_EQ((*docker)->InspectVolume(ContainerNameFor(*spec.name)).error().code(),
              ErrorCode::kNotFound);
    auto derived = (*docker)->ListImages({"agvisor.agent.source=" + Image()});
    ASSERT_TRUE(derived.ok());
    EXPECT_TRUE(derived->empty()) << "an image was derived for a refused runtime";
  }

  static inline std::string dir_;
  static inline bool registered_ = false;
  static inline int cases_ = 0;
};

TEST_F(GvisorRuntimeTest, RuncBehindARunscNameIsRefused) {
  for (const char* role : {"link", "copy"}) {
    ExpectRefusedCreatingNothing(Name(role), "bridge",
                                 {"runtime '" + Name(role) + "' is refused", "runc version",
                                  "gVisor runtimes on this host: ", Name("ok")});
  }
}

TEST_F(GvisorRuntimeTest, RuncByItsOwnAndDefaultNamesIsRefused) {
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  auto info = (*docker)->Info();
  ASSERT_TRUE(info.ok());
  std::vector<std::string> names = {"runc", "io.containerd.runc.v2"};
  // The daemon's default runtime gets no exemption (here Docker's default is runc).
  if (info->default_runtime != "runsc") names.push_back(info->default_runtime);
  for (const auto& n : names) {
    ExpectRefusedCreatingNothing(n, "bridge", {"runtime '" + n + "' is refused"});
  }
  // A name Docker does not know is refused the same way, listing what is there.
  ExpectRefusedCreatingNothing("crun", "bridge",
                               {"has no runtime registered under that name", "runsc"});
}

TEST_F(GvisorRuntimeTest, NoneTwinMustBeGvisorToo) {
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  // The runtime itself is real gVisor: bridge sandboxes may use it.
  RuntimeCheckCache cache;
  auto bridge =
      RequireGvisorRuntime(cache, "", **docker, Name("ok"), "systrap", /*network_none=*/false);
  ASSERT_TRUE(bridge.ok()) << bridge.error().ToString();
  EXPECT_EQ(*bridge, Name("ok"));
  // Network none would run on its twin, which is runc: refused, not skipped.
  ExpectRefusedCreatingNothing(Name("ok"), "none",
                               {"network none runs on '" + Name("ok") + "-none'", "runc version"});
  // The host's own twin (setup-host registers runsc-none) passes.
  auto info = (*docker)->Info();
  ASSERT_TRUE(info.ok());
  auto none = RequireGvisorRuntime(cache, "", **docker, "runsc", "systrap", true);
  ASSERT_TRUE(none.ok()) << none.error().ToString();
  EXPECT_EQ(*none, info->runtimes.contains("runsc-none") ? "runsc-none" : "runsc");
}

TEST_F(GvisorRuntimeTest, DoctorListsWhichRuntimesAreGvisor) {
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  RuntimeCheckCache cache;
  auto ids = IdentifyHostRuntimes(cache, **docker);
  ASSERT_TRUE(ids.ok()) << ids.error().ToString();
  std::map<std::string, RuntimeIdentity> by_name;
  for (const auto& id : *ids) by_name[id.name] = id;
  EXPECT_TRUE(by_name.at("runsc").gvisor) << by_name.at("runsc").evidence;
  EXPECT_THAT(by_name.at("runsc").evidence, ::testing::StartsWith("runsc version "));
  EXPECT_FALSE(by_name.at("runc").gvisor);
  EXPECT_FALSE(by_name.at(Name("link")).gvisor);
  EXPECT_FALSE(by_name.at(Name("copy")).gvisor);
  EXPECT_TRUE(by_name.at(Name("ok")).gvisor);
}

TEST_F(GvisorRuntimeTest, CachedCheckCostsNothingMeasurable) {
  // Not a performance target: the figures are printed for bench/README. The bound only proves
  // that a cached check asks neither Docker nor a binary (each of those takes milliseconds).
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  RuntimeCheckCache cache;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(RequireGvisorRuntime(cache, "", **docker, "runsc", "systrap", false).ok());
  auto t1 = std::chrono::steady_clock::now();
  constexpr int kRounds = 1000;
  for (int i = 0; i < kRounds; ++i) {
    ASSERT_TRUE(RequireGvisorRuntime(cache, "", **docker, "runsc", "systrap", false).ok());
  }
  auto t2 = std::chrono::steady_clock::now();
  const double first_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double cached_us = std::chrono::duration<double, std::micro>(t2 - t1).count() / kRounds;
  std::printf("runtime check: first (GET /info and the identity) %.2f ms; cached %.2f us\n",
              first_ms, cached_us);
  EXPECT_LT(cached_us, 1000.0);
}

}  // namespace
}  // namespace agvisor
