// End-to-end tests of the `agvisor` binary against the real dockerd + runsc: output, exit codes,
// --json, refusals, and `doctor` telling the truth about this host.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <chrono>
#include <fstream>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;

CommandOutput Agvisor(std::vector<std::string> args, std::string_view input = {}) {
  args.insert(args.begin(), AGVISOR_CLI_BINARY);
  auto r = RunCommand(std::move(args), input);
  EXPECT_TRUE(r.ok()) << r.error().ToString();
  return r.ok() ? *r : CommandOutput{};
}

// How many containers, running or not, carry `label` (KEY=VALUE); SIZE_MAX when Docker cannot
// say.
std::size_t ContainersLabelled(const std::string& label) {
  auto docker = ConnectDockerHost("");
  EXPECT_TRUE(docker.ok()) << docker.error().ToString();
  if (!docker.ok()) return SIZE_MAX;
  auto list = (*docker)->ListContainers(true, {label});
  EXPECT_TRUE(list.ok()) << list.error().ToString();
  return list.ok() ? list->size() : SIZE_MAX;
}

class CliTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    for (const char* n : {"cli", "cli-json", "cli-top", "cli-pause"}) {
      (void)RemoveSandbox(ContainerNameFor(testing::RunId() + "-" + n), "", true);
    }
  }
};

TEST_F(CliTest, RunPrintsOutputAndExitsWithTheCommandsCode) {
  const std::string mark = "test.run=" + testing::RunId() + "-exit5";
  auto r = Agvisor({"run", "--disk", "none", "--memory", "256m", "--label", mark, "--",
                    "echo out; echo err >&2; "
                    "exit 5"});
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.status.exit_code, 5);
  EXPECT_EQ(ContainersLabelled(mark), 0u) << "run removes its sandbox, whatever the exit code";
  auto argv = Agvisor({"run", "--disk", "none", "--", "printf", "%s|", "a b", "c"});
  EXPECT_EQ(argv.out, "a b|c|");
  EXPECT_EQ(argv.status.exit_code, 0);
  auto in = Agvisor({"run", "--disk", "none", "-i", "--", "wc -c"}, std::string(100000, 'x'));
  EXPECT_EQ(in.out, "100000\n");
  // A repeatable option right before `--` takes one value: the command after `--` is intact.
  auto labelled = Agvisor(
      {"run", "--disk", "none", "--label", "test.a=1", "-e", "X=2", "--", "sh", "-c", "echo $X"});
  EXPECT_EQ(labelled.out, "2\n") << labelled.err;
  EXPECT_EQ(labelled.status.exit_code, 0);
}

TEST_F(CliTest, TimeoutExits124) {
  const std::string mark = "test.run=" + testing::RunId() + "-timeout";
  auto r = Agvisor({"run", "--disk", "none", "-t", "1", "--label", mark, "--", "sleep 30"});
  EXPECT_EQ(r.status.exit_code, 124);
  EXPECT_THAT(r.err, HasSubstr("timed out"));
  EXPECT_EQ(ContainersLabelled(mark), 0u) << "run removes its sandbox after a timeout too";
}

TEST_F(CliTest, BadInputExits2WithAClearMessage) {
  auto r = Agvisor({"run", "--memory", "0", "--", "true"});
  EXPECT_EQ(r.status.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("limits.memory"));
  r = Agvisor({"create", "--name", "bad,name"});
  EXPECT_EQ(r.status.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("name 'bad,name' is invalid"));
  // The core's timeout check, before a sandbox is made.
  r = Agvisor({"run", "-t", "0", "--", "true"});
  EXPECT_EQ(r.status.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("timeout must be > 0 seconds, got 0"));
  r = Agvisor({"run", "--disk", "3g", "--", "true"});
  EXPECT_EQ(r.status.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot be enforced"));
  // Issue 33: Docker's "docker inspect container ...: No such container" was printed; every
  // verb on a missing sandbox says the core's one sentence (NoSuchSandbox).
  const std::string none =
      "agvisor: no sandbox named no-such-sandbox-xyz (`agvisor ls` lists them)\n";
  r = Agvisor({"exec", "no-such-sandbox-xyz", "--", "true"});
  EXPECT_NE(r.status.exit_code, 0);
  EXPECT_EQ(r.err, none);
  for (std::vector<std::string> verb :
       {std::vector<std::string>{"cp", "/etc/hostname", "no-such-sandbox-xyz:/tmp"},
        {"ps", "no-such-sandbox-xyz"},
        {"stop", "no-such-sandbox-xyz"},
        {"pause", "no-such-sandbox-xyz"}}) {
    r = Agvisor(verb);
    EXPECT_EQ(r.status.exit_code, 1) << verb[0];
    EXPECT_EQ(r.err, none) << verb[0];
  }
  r = Agvisor({"frobnicate"});
  EXPECT_EQ(r.status.exit_code, 2);
}

TEST_F(CliTest, RuntimeThatIsNotGvisorIsRefusedBeforeAnythingRuns) {
  // The report: `agvisor run --runtime runc -- cat /proc/version` printed the host's
  // kernel. Now the runtime's binary is asked what it is first (docs/security.md, "Runtime").
  const std::string mark = "test.run=" + testing::RunId() + "-runc";
  auto r = Agvisor({"run", "--runtime", "runc", "--disk", "none", "--label", mark, "--", "cat",
                    "/proc/version"});
  EXPECT_EQ(r.status.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "") << "something ran under runc";
  EXPECT_THAT(r.err, HasSubstr("runtime 'runc' is refused"));
  EXPECT_THAT(r.err, HasSubstr("gVisor runtimes on this host: "));
  EXPECT_EQ(ContainersLabelled(mark), 0u);
}

TEST_F(CliTest, CreateExecLsStopRmNamedSandbox) {
  const std::string name = testing::RunId() + "-cli";
  auto c = Agvisor({"create", "--name", name, "--disk", "none", "--memory", "256m"});
  ASSERT_EQ(c.status.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, "agvisor-" + name + "\n");
  EXPECT_EQ(Agvisor({"exec", name, "--", "echo data > f; pwd"}).out, "/workspace\n");
  auto ls = Agvisor({"--json", "ls"});
  ASSERT_EQ(ls.status.exit_code, 0);
  auto parsed = boost::json::parse(ls.out);
  bool found = false;
  for (const auto& v : parsed.as_array()) {
    if (v.at("container").as_string() == "agvisor-" + name) {
      found = true;
      EXPECT_EQ(v.at("name").as_string(), name);
      EXPECT_TRUE(v.at("running").as_bool());
    }
  }
  EXPECT_TRUE(found) << ls.out;
  EXPECT_EQ(Agvisor({"stop", name}).status.exit_code, 0);
  EXPECT_NE(Agvisor({"exec", name, "--", "true"}).status.exit_code, 0);
  // Issue 33: a stopped named sandbox vanished from ls; it is listed as stopped, with the verbs.
  auto stopped = Agvisor({"ls"});
  EXPECT_THAT(stopped.out, ::testing::ContainsRegex("agvisor-" + name + " +" + name + " +stopped"));
  EXPECT_THAT(stopped.err, HasSubstr("`agvisor create --name NAME` resumes on it"));
  auto stopped_json = boost::json::parse(Agvisor({"--json", "ls"}).out);
  bool listed_stopped = false;
  for (const auto& v : stopped_json.as_array()) {
    if (v.at("container").as_string() == "agvisor-" + name) {
      listed_stopped = v.at("state").as_string() == "stopped" && !v.at("running").as_bool();
    }
  }
  EXPECT_TRUE(listed_stopped) << boost::json::serialize(stopped_json);
  // Its volume's size only with --size (Docker walks the volume): /workspace holds "data\n".
  EXPECT_THAT(stopped.out, ::testing::Not(HasSubstr("SIZE")));
  auto sized = Agvisor({"--json", "ls", "--size"});
  ASSERT_EQ(sized.status.exit_code, 0) << sized.err;
  const auto sized_json = boost::json::parse(sized.out);
  for (const auto& v : sized_json.as_array()) {
    if (v.at("container").as_string() == "agvisor-" + name) {
      ASSERT_TRUE(v.at("volume_bytes").is_int64()) << sized.out;
      EXPECT_GE(v.at("volume_bytes").as_int64(), 5);
    }
  }
  EXPECT_THAT(
      Agvisor({"ls", "--size"}).out,
      ::testing::ContainsRegex("agvisor-" + name + " +" + name + " +stopped +[a-z]+ +0\\.0 MiB"));
  auto again = Agvisor({"--json", "create", "--name", name, "--disk", "none"});
  ASSERT_EQ(again.status.exit_code, 0);
  EXPECT_THAT(again.out, HasSubstr("\"resumed\":false"));
  EXPECT_EQ(Agvisor({"exec", name, "--", "cat f"}).out, "data\n");
  EXPECT_EQ(Agvisor({"rm", name}).status.exit_code, 0);
  EXPECT_THAT(Agvisor({"ls"}).out, ::testing::Not(HasSubstr("agvisor-" + name + " ")));
  auto gone = Agvisor({"rm", name});
  EXPECT_EQ(gone.status.exit_code, 1);
  EXPECT_THAT(gone.err, HasSubstr("no sandbox"));
}

// pause / resume: ls shows the state, exec resumes it first, --no-resume refuses (exec: 125)
// naming how to resume, and a paused sandbox's data is there after.
TEST_F(CliTest, PauseShowsInLsExecResumesAndNoResumeRefuses) {
  const std::string name = testing::RunId() + "-cli-pause";
  ASSERT_EQ(
      Agvisor({"create", "--name", name, "--disk", "none", "--memory", "256m"}).status.exit_code,
      0);
  EXPECT_EQ(Agvisor({"exec", name, "--", "echo kept > f"}).status.exit_code, 0);
  // Our line of `agvisor ls` (other sandboxes of the host may be listed too).
  auto ls_line = [&] {
    std::string out = Agvisor({"ls"}).out;
    auto at = out.find("agvisor-" + name + " ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  auto p = Agvisor({"pause", name});
  ASSERT_EQ(p.status.exit_code, 0) << p.err;
  EXPECT_THAT(ls_line(), HasSubstr(" paused "));
  auto refused = Agvisor({"--no-resume", "exec", name, "--", "cat f"});
  EXPECT_EQ(refused.status.exit_code, 125);  // exec's own failure, as for any exec error
  EXPECT_THAT(refused.err, HasSubstr("is paused"));
  EXPECT_THAT(refused.err, HasSubstr("agvisor resume " + name));
  EXPECT_EQ(Agvisor({"exec", name, "--", "cat f"}).out, "kept\n");  // resumed first
  EXPECT_EQ(Agvisor({"pause", name}).status.exit_code, 0);
  EXPECT_EQ(Agvisor({"resume", name}).status.exit_code, 0);
  EXPECT_EQ(Agvisor({"resume", name}).status.exit_code, 0);  // running: left as it is
  EXPECT_THAT(ls_line(), HasSubstr(" running "));
  EXPECT_EQ(Agvisor({"rm", name}).status.exit_code, 0);
}

// `agvisor update`: a live resize, printed; bad values refused before any host is reached
// (exit 2); the raised memory lets through what the create-time cap would have ended.
TEST_F(CliTest, UpdateResizesLiveAndRefusesBadValues) {
  const std::string name = testing::RunId() + "-cli-update";
  ASSERT_EQ(
      Agvisor({"create", "--name", name, "--disk", "none", "--memory", "256m"}).status.exit_code,
      0);
  auto none = Agvisor({"update", name});
  EXPECT_EQ(none.status.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("at least one of cpus, memory and pids"));
  auto bad = Agvisor({"update", name, "--memory", "lots"});
  EXPECT_EQ(bad.status.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("limits.memory"));
  auto up = Agvisor({"update", name, "--memory", "1g", "--cpus", "0.5"});
  ASSERT_EQ(up.status.exit_code, 0) << up.err;
  EXPECT_EQ(up.out, "agvisor-" + name + ": cpus 0.5, memory 1024m, pids 512\n");
  auto json = Agvisor({"--json", "update", name, "--pids", "300"});
  ASSERT_EQ(json.status.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"pids\":300"));
  EXPECT_THAT(json.out, HasSubstr("\"memory_bytes\":1073741824"));
  auto big = Agvisor({"exec", name, "--", "python3 -c 'b = b\"x\" * (400 << 20); print(\"ok\")'"});
  EXPECT_EQ(big.out, "ok\n") << big.err;
  auto gone = Agvisor({"update", "no-such-" + name, "--pids", "9"});
  EXPECT_NE(gone.status.exit_code, 0);
  EXPECT_EQ(Agvisor({"rm", name}).status.exit_code, 0);
}

// `agvisor top` reports each running sandbox's use against its limits; a busy one shows it.
TEST_F(CliTest, TopShowsUseAgainstLimits) {
  const std::string name = testing::RunId() + "-cli-top";
  auto c = Agvisor({"create", "--name", name, "--disk", "none", "--memory", "384m", "--pids", "200",
                    "--label", std::string(testing::kRunLabel) + "=" + testing::RunId()});
  ASSERT_EQ(c.status.exit_code, 0) << c.err;
  // ~64 MiB held and one core busy for the duration of the sample.
  auto busy = Agvisor(
      {"exec", "-d", name, "--", "python3", "-c", "b = bytearray(64 << 20)\nwhile True: pass"});
  ASSERT_EQ(busy.status.exit_code, 0) << busy.err;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto top = Agvisor({"--json", "top"});
  ASSERT_EQ(top.status.exit_code, 0) << top.err;
  bool found = false;
  const boost::json::value parsed = boost::json::parse(top.out);
  for (const auto& v : parsed.as_array()) {
    if (v.at("container").as_string() != "agvisor-" + name) continue;
    found = true;
    EXPECT_EQ(v.at("memory_limit_bytes").to_number<std::int64_t>(), 384LL << 20);
    EXPECT_EQ(v.at("pids_limit").to_number<std::int64_t>(), 200);
    EXPECT_GT(v.at("memory_bytes").to_number<std::int64_t>(), 60LL << 20);
    EXPECT_GT(v.at("cpu_percent").to_number<double>(), 30.0);
    EXPECT_GT(v.at("pids").to_number<std::int64_t>(), 0);
  }
  EXPECT_TRUE(found) << top.out;
  auto table = Agvisor({"top"});
  EXPECT_EQ(table.status.exit_code, 0);
  EXPECT_THAT(table.out, HasSubstr("agvisor-" + name));
  EXPECT_THAT(table.out, HasSubstr("/ 384.0 MiB"));
  EXPECT_EQ(Agvisor({"rm", name}).status.exit_code, 0);
}

// doctor must tell the truth about this host: what it says is checked against what the daemon
// reports, independently.
TEST_F(CliTest, DoctorTellsTheTruthAboutThisHost) {
  auto r = Agvisor({"--json", "doctor"});
  ASSERT_EQ(r.status.exit_code, 0) << r.out << r.err;
  auto report = boost::json::parse(r.out).as_object();
  EXPECT_TRUE(report.at("usable").as_bool());
  std::map<std::string, boost::json::object> checks;
  for (const auto& c : report.at("checks").as_array()) {
    checks[std::string(c.at("check").as_string())] = c.as_object();
  }
  for (const char* name :
       {"docker", "runtime", "runsc network mode", "network none runtime", "image", "sandbox",
        "network bridge", "sandbox firewall", "network none", "disk cap", "cgroups"}) {
    EXPECT_TRUE(checks.count(name)) << "missing check " << name;
  }
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  auto info = (*docker)->Info();
  ASSERT_TRUE(info.ok());
  const auto& args = info->runtimes.at("runsc").args;
  bool hostinet = std::find(args.begin(), args.end(), "--network=host") != args.end();
  const auto& net = checks["runsc network mode"];
  EXPECT_EQ(net.at("status").as_string(), hostinet ? "warn" : "ok");
  if (hostinet) {
    EXPECT_THAT(std::string(net.at("detail").as_string()), HasSubstr("hostinet"));
  }
  // scripts/setup-host registers runsc-none (runsc --network=none) after probing it.
  EXPECT_EQ(checks["network none runtime"].at("status").as_string(), "ok");
  const auto& disk = checks["disk cap"];
  if ((*docker)->api_version() < docker::kAnnotationsApiVersion) {
    EXPECT_EQ(disk.at("status").as_string(), "warn");
    EXPECT_THAT(std::string(disk.at("detail").as_string()),
                HasSubstr("API is " + (*docker)->api_version().ToString()));
  }
  EXPECT_THAT(std::string(checks["cgroups"].at("detail").as_string()),
              HasSubstr("cgroup v" + info->cgroup_version));
  EXPECT_EQ(checks["network none"].at("detail").as_string(), "works; interfaces inside: lo ");
  EXPECT_EQ(checks["sandbox"].at("status").as_string(), "ok");
  // The density lines (issue 36) read this machine.
  std::ifstream pid_max_file("/proc/sys/kernel/pid_max");
  std::string pid_max;
  pid_max_file >> pid_max;
  ASSERT_TRUE(checks.count("host limits"));
  EXPECT_THAT(std::string(checks["host limits"].at("detail").as_string()),
              HasSubstr("kernel.pid_max " + pid_max + " ("));
  // (The count of networks is not compared: other work on the host makes networks meanwhile.)
  ASSERT_TRUE(checks.count("egress networks"));
  EXPECT_THAT(std::string(checks["egress networks"].at("detail").as_string()),
              HasSubstr("Docker's address pools hold "));
}

TEST_F(CliTest, DoctorFailsWithAFixWhenDockerIsUnreachable) {
  auto r = Agvisor({"--host", "unix:///tmp/agvisor-no-daemon-here.sock", "doctor"});
  EXPECT_EQ(r.status.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("FAIL  docker"));
  EXPECT_THAT(r.out, HasSubstr("fix: "));
  EXPECT_THAT(r.out, HasSubstr("cannot run agvisor sandboxes"));
}

}  // namespace
}  // namespace agvisor
