// Egress policies end to end (docs/egress.md): real runsc sandboxes behind a real agvisord, the
// enforcer resolving against a fake internet that lives in a network namespace this test makes
// (a DNS server, HTTP and HTTPS servers on 198.51.100.2, data/fake_internet.py, which also serve
// a git repository and a pip index the test writes). No traffic leaves this machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/egress_network.h"
#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/sshd.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadAll;
using testing::WaitFor;

constexpr const char* kInternet = "198.51.100.2";  // the fake internet's servers
constexpr const char* kHostSide = "198.51.100.1";

void Must(std::vector<std::string> argv) {
  auto r = RunCommand(argv);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  std::string line;
  for (const auto& a : argv) line += a + " ";
  ASSERT_TRUE(r->status.success()) << line << ": " << r->err;
}

// python3 inside the sandbox: prints what the snippet prints, or "error: ..." on an exception.
std::string Py(const std::string& body) {
  return "python3 -c '\nimport socket, sys, urllib.request, urllib.error\ntry:\n" + body +
         "\nexcept urllib.error.HTTPError as e:\n    print(\"http\", e.code)\n"
         "except Exception as e:\n    print(\"error:\", type(e).__name__, e)\n'";
}
const std::string kGetAllowed =
    Py("    print(urllib.request.urlopen(\"http://allowed.test/\", timeout=10).read().decode(), "
       "end=\"\")");
const std::string kGetDenied =
    Py("    print(urllib.request.urlopen(\"http://denied.test/\", timeout=10).read().decode())");
const std::string kGetRebind =
    Py("    print(urllib.request.urlopen(\"http://rebind.test/\", timeout=10).read().decode())");
// Without proxy variables: the in-sandbox resolver answers the enforcer's address, which reads
// the Host header.
const std::string kRawAllowed =
    Py("    s = socket.create_connection((\"allowed.test\", 80), 10)\n"
       "    s.sendall(b\"GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n\")\n"
       "    print(s.recv(4096).decode().split(\"\\r\\n\\r\\n\", 1)[1], end=\"\")");
// Straight to the fake internet's address, as a tool that ignores proxies would.
const std::string kDirect =
    Py("    socket.create_connection((\"198.51.100.2\", 80), 5)\n    print(\"connected\")");

class EgressTest : public ::testing::Test {
 protected:
  static inline std::string dir_, ns_, host_if_;
  static inline std::optional<Subprocess> internet_, daemon_;

  static std::string QuestionsLog() { return dir_ + "/questions.log"; }
  static std::string DaemonLog() { return dir_ + "/agvisord.log"; }
  static std::string CertFile() { return dir_ + "/cert.pem"; }
  // The operator's secrets file agvisord reads at start (--secrets-file, 0600).
  static std::string SecretsFile() { return dir_ + "/secrets"; }
  static inline std::string operator_value_;
  // What the fake internet serves besides "hello": a bare git repository (dumb HTTP) and a pip
  // simple index with one wheel.
  static std::string WebRoot() { return dir_ + "/www"; }

  // A run killed before its teardown (a ctest timeout, ^C) leaves its namespace and the veth
  // whose host side routes 198.51.100.0/24, so every later run's questions went to that dead
  // end ("DNS: no answer"). Namespaces of this test that no process is in are deleted (their
  // veth pair goes with them); one still in use (a run at the same time) is an error.
  static void RemoveLeftoverNamespaces() {
    auto list = RunCommand({"ip", "netns", "list"});
    ASSERT_TRUE(list.ok() && list->status.success()) << "ip netns list failed";
    std::istringstream lines(list->out);
    for (std::string line; std::getline(lines, line);) {
      const std::string name = line.substr(0, line.find(' '));
      if (!name.starts_with("agvt-inet-")) continue;
      auto pids = RunCommand({"ip", "netns", "pids", name});
      ASSERT_TRUE(pids.ok() && pids->status.success()) << "ip netns pids " << name << " failed";
      ASSERT_EQ(pids->out, "") << "the fake internet of another run is live in network namespace "
                               << name << " (run this test under flock /tmp/agvisor-egress.lock)";
      Must({"ip", "netns", "del", name});
    }
    auto used = RunCommand({"ip", "-o", "addr", "show", "to", std::string(kHostSide)});
    ASSERT_TRUE(used.ok() && used->status.success()) << "ip addr show failed";
    ASSERT_EQ(used->out, "") << kHostSide
                             << " is already on an interface (a leftover of another test?); "
                                "delete it with `ip addr del`";
  }

  static void SetUpTestSuite() {
    RemoveLeftoverNamespaces();
    const std::string tag = std::to_string(::getpid() % 100000);
    dir_ = fs::temp_directory_path() / ("agvisor-egress-" + tag);
    fs::create_directories(dir_);
    ns_ = "agvt-inet-" + tag;
    host_if_ = "agvt-h" + tag;
    const std::string ns_if = "agvt-n" + tag;
    Must({"ip", "netns", "add", ns_});
    Must({"ip", "link", "add", host_if_, "type", "veth", "peer", "name", ns_if});
    Must({"ip", "link", "set", ns_if, "netns", ns_});
    Must({"ip", "addr", "add", std::string(kHostSide) + "/24", "dev", host_if_});
    Must({"ip", "link", "set", host_if_, "up"});
    Must({"ip", "netns", "exec", ns_, "ip", "addr", "add", std::string(kInternet) + "/24", "dev",
          ns_if});
    Must({"ip", "netns", "exec", ns_, "ip", "link", "set", ns_if, "up"});
    Must({"ip", "netns", "exec", ns_, "ip", "link", "set", "lo", "up"});
    // A certificate for the HTTPS server, valid for the fake names (the sandbox trusts it
    // through a file the tests write into it).
    Must({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
          "/CN=allowed.test", "-addext", "subjectAltName=DNS:allowed.test,DNS:other.test",
          "-keyout", dir_ + "/key.pem", "-out", CertFile()});
    const std::string data = std::string(AGVISOR_SOURCE_DIR) + "/tests/integration/data/";
    Must({"python3", data + "simple_index.py", WebRoot()});
    // A repository with one commit, bare, with the files git's dumb HTTP client reads
    // (info/refs, objects/info/packs) written by update-server-info.
    const std::string work = dir_ + "/repo";
    Must({"git", "-c", "init.defaultBranch=main", "init", "-q", work});
    { std::ofstream(work + "/README") << "hello from the repository\n"; }
    Must({"git", "-C", work, "add", "README"});
    Must({"git", "-C", work, "-c", "user.name=test", "-c", "user.email=test@test", "commit", "-q",
          "-m", "first"});
    Must({"git", "clone", "-q", "--bare", work, WebRoot() + "/repo.git"});
    Must({"git", "-C", WebRoot() + "/repo.git", "update-server-info"});
    auto p = Subprocess::Spawn(
        {.argv = {"sh", "-c",
                  "exec ip netns exec \"$0\" python3 \"$1\" \"$2\" \"$3\" \"$5\" \"$6\" \"$7\" "
                  ">\"$4\" 2>&1",
                  ns_, data + "fake_internet.py", kInternet, QuestionsLog(), dir_ + "/internet.out",
                  CertFile(), dir_ + "/key.pem", WebRoot()}});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    internet_.emplace(std::move(*p));
    ASSERT_TRUE(WaitFor([] { return ReadAll(dir_ + "/internet.out").starts_with("ready"); },
                        std::chrono::seconds(20)))
        << ReadAll(dir_ + "/internet.out");
    operator_value_ = "op-value-" + testing::RunId() + tag;
    { std::ofstream(SecretsFile()) << "OPERATOR_TOKEN=" << operator_value_ << "\n"; }
    fs::permissions(SecretsFile(), fs::perms::owner_read | fs::perms::owner_write);
    StartDaemon();
  }

  static void TearDownTestSuite() {
    testing::CleanupRun();
    StopDaemon();
    if (internet_) (void)internet_->Kill(SIGKILL);
    internet_.reset();
    (void)RunCommand({"ip", "link", "del", host_if_});
    (void)RunCommand({"ip", "netns", "del", ns_});
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // agvisord starts with the soft limit on open files that a systemd service gets (1,024), as
  // it would in production; it raises that to the hard limit itself. `env`: extra "K=V" entries
  // for agvisord (a test's firewall chain or state file).
  static void StartDaemon(std::vector<std::string> env = {}) {
    auto p = Subprocess::Spawn(
        {.argv = {"sh", "-c",
                  "exec prlimit --nofile=1024: \"$0\" --socket \"$1/agvisord.sock\" --token-file "
                  "\"$1/token\" --egress-resolver \"$2\" --egress-state-dir \"$1/state\" "
                  "--secrets-file \"$1/secrets\" --egress-upstream-ca \"$1/cert.pem\" 2>>\"$3\"",
                  AGVISORD_BINARY, dir_, kInternet, DaemonLog()},
         .env = std::move(env)});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    daemon_.emplace(std::move(*p));
    ASSERT_TRUE(
        WaitFor([] { return ReadAll(DaemonLog()).find("agvisord listening") != std::string::npos; },
                std::chrono::seconds(20)))
        << ReadAll(DaemonLog());
  }

  static void StopDaemon() {
    if (!daemon_) return;
    (void)daemon_->Kill(SIGTERM);
    auto st = daemon_->WaitFor(std::chrono::seconds(30));
    if (!st.ok()) (void)daemon_->Kill(SIGKILL);
    daemon_.reset();
  }

  static SandboxSpec Spec(std::vector<std::string> domains) {
    SandboxSpec s = testing::TestSpec();
    s.limits.memory = "256m";
    s.egress = egress::EgressRules{.allow_domains = std::move(domains)};
    return s;
  }

  // The CLI through the suite's agvisord.
  static CommandOutput Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {AGVISOR_CLI_BINARY, "--server",
                                     "unix:" + dir_ + "/agvisord.sock", "--token-file",
                                     dir_ + "/token"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? *r : CommandOutput{};
  }

  // Sandbox `name` made through agvisord's CLI (labelled for cleanup, 256m, no disk), allowed
  // allowed.test and other.test, with brokered `secrets` (each a --secret value).
  static CommandOutput CreateWithSecrets(const std::string& name,
                                         const std::vector<std::string>& secrets) {
    std::vector<std::string> args = {"create",
                                     "--name",
                                     name,
                                     "--label",
                                     std::string(testing::kRunLabel) + "=" + testing::RunId(),
                                     "--memory",
                                     "256m",
                                     "--disk",
                                     "none",
                                     "--allow-domain",
                                     "allowed.test",
                                     "--allow-domain",
                                     "other.test"};
    for (const std::string& secret : secrets) {
      args.push_back("--secret");
      args.push_back(secret);
    }
    return Cli(args);
  }
  // A caller's secret `value` in a file of the suite's (`file` under its directory): its path.
  static std::string KeyFile(const std::string& file, const std::string& value) {
    { std::ofstream(dir_ + "/" + file) << value << "\n"; }
    return dir_ + "/" + file;
  }
  // A shell command in sandbox `name` through the CLI: its stdout.
  static std::string ExecIn(const std::string& name, const std::string& cmd) {
    auto r = Cli({"exec", name, "--", "sh", "-c", cmd});
    EXPECT_TRUE(r.status.success()) << cmd << ": " << r.err;
    return r.out;
  }

  static std::string Run(Sandbox& sb, const std::string& cmd) {
    auto r = sb.ExecShell(cmd);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? r->out + r->err : "";
  }

  // An agvisord that just started serves `sb` within a period (250 ms); 30 s is for a loaded
  // host.
  static void ExpectServedAgain(Sandbox& sb) {
    std::string got;
    EXPECT_TRUE(WaitFor(
        [&] {
          got = Run(sb, kGetAllowed);
          return got == "hello from allowed.test\n";
        },
        std::chrono::seconds(30)))
        << got;
  }
};

// The policy's names work through the proxy variables and without them; every other name,
// address literal and rebinding name is refused, and no refused name is ever asked upstream.
TEST_F(EgressTest, AllowedNamesPassAndEverythingElseIsRefused) {
  auto sb = CreateSandbox(Spec({"allowed.test", "rebind.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  Sandbox& s = **sb;

  EXPECT_EQ(Run(s, kGetAllowed), "hello from allowed.test\n");
  EXPECT_EQ(Run(s, kRawAllowed), "hello from allowed.test\n");
  EXPECT_EQ(Run(s, kGetDenied), "http 403\n");
  // An allowed name that resolves to loopback (DNS rebinding) goes nowhere.
  EXPECT_EQ(Run(s, kGetRebind), "http 403\n");
  // No route but the enforcer: the address itself, and the host's resolver, are unreachable.
  EXPECT_THAT(Run(s, kDirect), HasSubstr("error:"));
  // The in-sandbox resolver: allowed names get the enforcer's address, others nothing.
  EXPECT_THAT(Run(s, "getent hosts allowed.test || echo none"), Not(HasSubstr("none")));
  EXPECT_EQ(Run(s, "getent hosts denied.test || echo none"), "none\n");
  EXPECT_EQ(Run(s, "getent hosts x1.denied.test || echo none"), "none\n");

  const std::string asked = ReadAll(QuestionsLog());
  EXPECT_THAT(asked, HasSubstr("allowed.test"));
  EXPECT_THAT(asked, Not(HasSubstr("denied.test"))) << asked;
  // Every decision is logged, with its reason.
  EXPECT_TRUE(WaitFor(
      [] { return ReadAll(DaemonLog()).find("no rule allows denied.test") != std::string::npos; },
      std::chrono::seconds(5)))
      << ReadAll(DaemonLog());
  EXPECT_THAT(ReadAll(DaemonLog()), HasSubstr("rebind.test"));
}

// HTTPS: through the proxy variables (CONNECT) and without them (the enforcer reads the SNI),
// verified end to end against the fake server's certificate (no TLS termination in between); a
// refused name gets no tunnel.
TEST_F(EgressTest, HttpsPassesByConnectAndBySniAndIsVerifiedEndToEnd) {
  auto sb = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  ASSERT_TRUE((*sb)->WriteFile("/tmp/ca.pem", ReadAll(CertFile())).ok());
  const std::string ctx =
      "    import ssl\n    ctx = ssl.create_default_context(cafile=\"/tmp/ca.pem\")\n";
  EXPECT_EQ(Run(**sb, Py(ctx + "    print(urllib.request.urlopen(\"https://allowed.test/\", "
                               "timeout=10, context=ctx).read().decode(), end=\"\")")),
            "hello from allowed.test\n");
  // Without proxy variables: a TLS connection to the name, resolved inside.
  EXPECT_EQ(
      Run(**sb,
          Py(ctx + "    s = ctx.wrap_socket(socket.create_connection((\"allowed.test\", "
                   "443), 10), server_hostname=\"allowed.test\")\n"
                   "    s.sendall(b\"GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n\")\n"
                   "    print(s.recv(4096).decode().split(\"\\r\\n\\r\\n\", 1)[1], end=\"\")")),
      "hello from allowed.test\n");
  // A refused name: the proxy answers CONNECT with 403, so urllib reports a tunnel error.
  EXPECT_THAT(Run(**sb, Py(ctx + "    print(urllib.request.urlopen(\"https://other.test/\", "
                                 "timeout=10, context=ctx).read().decode())")),
              HasSubstr("error:"));
  EXPECT_TRUE(WaitFor(
      [] {
        return ReadAll(DaemonLog()).find("connect other.test:443 denied") != std::string::npos;
      },
      std::chrono::seconds(5)))
      << ReadAll(DaemonLog());
}

// git over HTTPS: git's libcurl takes the proxy variables (CONNECT), the certificate is verified
// end to end; the same repository under a name the policy does not allow is refused.
TEST_F(EgressTest, GitClonesOverHttpsOnlyFromAllowedNames) {
  auto sb = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  ASSERT_TRUE((*sb)->WriteFile("/tmp/ca.pem", ReadAll(CertFile())).ok());
  const std::string git = "git -c http.sslCAInfo=/tmp/ca.pem clone -q ";
  EXPECT_EQ(Run(**sb, git + "https://allowed.test/repo.git /tmp/a && cat /tmp/a/README"),
            "hello from the repository\n");
  const std::string refused =
      Run(**sb, git + "https://other.test/repo.git /tmp/b; echo exit=$?; ls /tmp/b 2>&1");
  EXPECT_THAT(refused, HasSubstr("403")) << refused;
  EXPECT_THAT(refused, HasSubstr("exit=128")) << refused;
  EXPECT_THAT(refused, HasSubstr("No such file")) << refused;
}

// pip against a simple index over HTTPS (requests honours the proxy variables): Debian's pip
// wheel (python3-pip-whl on the host; the base image has no pip) run from the wheel itself.
TEST_F(EgressTest, PipInstallsFromAnAllowedIndexOnly) {
  std::string wheel;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/usr/share/python-wheels", ec)) {
    const std::string f = e.path().filename();
    if (f.starts_with("pip-") && f.ends_with(".whl")) wheel = e.path();
  }
  ASSERT_FALSE(wheel.empty()) << "no pip wheel on this host: apt-get install python3-pip-whl "
                                 "(scripts/setup-host --test-deps installs it)";
  auto sb = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  ASSERT_TRUE((*sb)->WriteFile("/tmp/ca.pem", ReadAll(CertFile())).ok());
  const std::string in_sandbox = "/tmp/" + fs::path(wheel).filename().string();
  ASSERT_TRUE((*sb)->WriteFile(in_sandbox, ReadAll(wheel)).ok());
  auto pip = [&](const std::string& name, const std::string& target) {
    return "python3 " + in_sandbox +
           "/pip install --disable-pip-version-check --no-cache-dir --root-user-action=ignore "
           "--retries 0 --timeout 10 --cert /tmp/ca.pem --index-url https://" +
           name + "/simple/ --target " + target + " demo";
  };
  EXPECT_EQ(Run(**sb, pip("allowed.test", "/tmp/a") +
                          " -q && python3 -c 'import sys; sys.path.insert(0, \"/tmp/a\"); "
                          "import demo; print(demo.GREETING)'"),
            "hello from demo\n");
  // pip only says why a page could not be fetched at its debug level (-vv).
  const std::string refused =
      Run(**sb, pip("other.test", "/tmp/b") +
                    " -vv >/tmp/pip.log 2>&1; echo exit=$?; grep -o 'other.test.*403 Forbidden' "
                    "/tmp/pip.log | head -n 1; ls /tmp/b 2>&1");
  EXPECT_THAT(refused, HasSubstr("exit=1\n")) << refused;
  EXPECT_THAT(refused, HasSubstr("403 Forbidden")) << refused;
  EXPECT_THAT(refused, HasSubstr("No such file")) << refused;
}

// 50 connections at once from 5 sandboxes, each with its own policy (sandboxes 0, 2, 4 allow
// allowed.test, 1 and 3 other.test): all 50 are served, and each sandbox's other name is refused
// in the middle of it.
TEST_F(EgressTest, FiftyParallelConnectionsFromFiveSandboxes) {
  // Each connection is opened (half through the proxy variables, half to the name resolved
  // inside) before any request is sent, plus one to the refused name through the proxy.
  const std::string script = R"py(import os, socket, sys, threading, urllib.parse
name, refused, n = sys.argv[1], sys.argv[2], 10
proxy = urllib.parse.urlsplit(os.environ["http_proxy"])
ready = threading.Barrier(n + 1)
got = [None] * (n + 1)
def fetch(i, host, via_proxy):
    try:
        if via_proxy:
            s, target = socket.create_connection((proxy.hostname, proxy.port), 30), "http://%s/" % host
        else:
            s, target = socket.create_connection((host, 80), 30), "/"
        ready.wait(30)
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (target, host)).encode())
        data = b""
        while True:
            more = s.recv(65536)
            if not more:
                break
            data += more
        got[i] = data.split(b"\r\n", 1)[0].decode() + " " + data.split(b"\r\n\r\n", 1)[-1].decode().strip()
    except Exception as e:
        got[i] = "error: %r" % e
        ready.abort()  # the others stop waiting
threads = [threading.Thread(target=fetch, args=(i, name, i % 2 == 0)) for i in range(n)]
threads.append(threading.Thread(target=fetch, args=(n, refused, True)))
for t in threads:
    t.start()
for t in threads:
    t.join()
ok = sum(1 for g in got[:n] if g == "HTTP/1.1 200 OK hello from " + name)
print("served", ok, "|", got[n].split(" ")[1], "|", [g for g in got[:n] if not g.startswith("HTTP/1.1 200")])
)py";
  constexpr int kSandboxes = 5;
  std::vector<std::unique_ptr<Sandbox>> boxes(kSandboxes);
  std::vector<std::string> names(kSandboxes), errors(kSandboxes), outputs(kSandboxes);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kSandboxes; ++i) {
      names[i] = i % 2 == 0 ? "allowed.test" : "other.test";
      threads.emplace_back([&, i] {
        auto sb = CreateSandbox(Spec({names[i]}));
        if (!sb.ok()) {
          errors[i] = sb.error().ToString();
          return;
        }
        auto w = (*sb)->WriteFile("/tmp/parallel.py", script);
        if (!w.ok()) errors[i] = w.error().ToString();
        boxes[i] = std::move(*sb);
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int i = 0; i < kSandboxes; ++i) ASSERT_TRUE(boxes[i]) << errors[i];
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kSandboxes; ++i) {
      threads.emplace_back([&, i] {
        const std::string refused = i % 2 == 0 ? "other.test" : "allowed.test";
        auto r = boxes[i]->ExecShell("python3 /tmp/parallel.py " + names[i] + " " + refused);
        outputs[i] = r.ok() ? r->out + r->err : r.error().ToString();
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int i = 0; i < kSandboxes; ++i) {
    EXPECT_EQ(outputs[i], "served 10 | 403 | []\n") << "sandbox " << i;
  }
}

// agvisord's metrics route carries the sandbox's enforcer counters: decisions and bytes.
TEST_F(EgressTest, MetricsCountDecisionsAndBytes) {
  auto sb = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  std::string token = ReadAll(dir_ + "/token");
  while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
  std::string id = (*sb)->container_name();
  if (id.starts_with(kNamePrefix)) id.erase(0, kNamePrefix.size());
  auto metrics = [&] {
    auto r = RunCommand({"curl", "-sS", "--unix-socket", dir_ + "/agvisord.sock", "-H",
                         "Authorization: Bearer " + token,
                         "http://agvisord/v1/sandboxes/" + id + "/metrics"});
    EXPECT_TRUE(r.ok() && r->status.success()) << (r.ok() ? r->err : r.error().ToString());
    return r.ok() ? r->out : "";
  };
  // The counter named `key` inside the "egress" object, or -1.
  auto counter = [](const std::string& body, const std::string& key) -> long long {
    std::smatch m;
    const std::regex re("\"egress\":\\{[^}]*\"" + key + "\":([0-9]+)");
    return std::regex_search(body, m, re) ? std::stoll(m[1]) : -1;
  };
  const std::string before = metrics();
  EXPECT_EQ(counter(before, "allowed"), 0) << before;
  EXPECT_EQ(counter(before, "denied"), 0) << before;
  EXPECT_EQ(counter(before, "bytes_down"), 0) << before;
  EXPECT_EQ(
      Run(**sb, Py("    print(len(urllib.request.urlopen(\"http://allowed.test/bytes/1000000\", "
                   "timeout=10).read()))")),
      "1000000\n");
  EXPECT_EQ(Run(**sb, kGetDenied), "http 403\n");
  std::string after;
  // The proxy counts a buffer's bytes once its write is done: the last add can come just after
  // the sandbox's read (5 s is for a loaded host).
  EXPECT_TRUE(WaitFor(
      [&] {
        after = metrics();
        return counter(after, "bytes_down") >= 1000000;
      },
      std::chrono::seconds(5)))
      << after;
  EXPECT_EQ(counter(after, "allowed"), 1) << after;
  EXPECT_EQ(counter(after, "denied"), 1) << after;
  EXPECT_GT(counter(after, "bytes_up"), 0) << after;
  EXPECT_THAT(after, HasSubstr("\"memory_bytes\":")) << after;  // Docker's sample is still there
}

// Two sandboxes with policies: each on its own internal network, neither reaches the other.
TEST_F(EgressTest, SandboxesWithPoliciesCannotReachEachOther) {
  auto a = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  auto b = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(b.ok()) << b.error().ToString();
  const std::string b_ip = Run(**b, Py("    print(socket.gethostbyname(socket.gethostname()))"));
  ASSERT_THAT(b_ip, Not(HasSubstr("error"))) << b_ip;
  auto reach =
      (*a)->ExecShell(Py("    socket.create_connection((\"" + b_ip.substr(0, b_ip.find('\n')) +
                         "\", 80), 5)\n    print(\"connected\")"));
  ASSERT_TRUE(reach.ok());
  EXPECT_THAT(reach->out, HasSubstr("error:"));
  EXPECT_EQ(Run(**a, kGetAllowed), "hello from allowed.test\n");
}

// With the enforcer down a sandbox reaches nothing (fail closed); it works again once agvisord
// is back, which finds the sandbox by its network's labels.
TEST_F(EgressTest, AStoppedEnforcerFailsClosedAndComesBack) {
  auto sb = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  EXPECT_EQ(Run(**sb, kGetAllowed), "hello from allowed.test\n");
  StopDaemon();
  EXPECT_THAT(Run(**sb, kGetAllowed), HasSubstr("error:"));
  EXPECT_THAT(Run(**sb, kRawAllowed), HasSubstr("error:"));
  EXPECT_THAT(Run(**sb, kDirect), HasSubstr("error:"));
  StartDaemon();
  ExpectServedAgain(**sb);
}

// The firewall openings of an agvisord killed with SIGKILL stay behind (nothing ran to take them
// out); the next agvisord deletes them before it serves, then opens its own (comment "agvisor
// egress SANDBOX pid PID").
TEST_F(EgressTest, AKilledEnforcersOpeningsAreClearedByTheNextOne) {
  auto sb = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  const std::string mark = "agvisor egress " + (*sb)->container_name() + " pid ";
  auto openings = [&] {
    auto r = RunCommand({"iptables", "-w", "-S", "AGVISOR-ALLOW"});
    std::vector<std::string> out;
    std::istringstream in(r.ok() ? r->out : "");
    for (std::string line; std::getline(in, line);) {
      if (line.find(mark) != std::string::npos) out.push_back(line);
    }
    return out;
  };
  auto of = [&](pid_t pid) { return mark + std::to_string(pid) + "\""; };
  const pid_t killed = daemon_->pid();
  ASSERT_EQ(openings().size(), 2u);  // tcp 80,443,3128 and udp 53
  (void)daemon_->Kill(SIGKILL);
  (void)daemon_->WaitFor(std::chrono::seconds(30));
  daemon_.reset();
  const auto left = openings();
  ASSERT_EQ(left.size(), 2u);
  EXPECT_THAT(left[0], HasSubstr(of(killed)));
  StartDaemon();
  const pid_t next = daemon_->pid();
  // Served again within a period (250 ms); 30 s is for a loaded host.
  EXPECT_TRUE(WaitFor(
      [&] {
        auto now = openings();
        return now.size() >= 2 && now[0].find(of(next)) != std::string::npos;
      },
      std::chrono::seconds(30)));
  const auto after = openings();
  EXPECT_EQ(after.size(), 2u);
  for (const std::string& line : after) {
    EXPECT_THAT(line, HasSubstr(of(next)));
    EXPECT_THAT(line, Not(HasSubstr(of(killed))));
  }
  EXPECT_EQ(Run(**sb, kGetAllowed), "hello from allowed.test\n");
}

// `agvisor egress NAME` shows the policy and the decisions, and changes the policy of a running
// sandbox: new connections follow it at once.
TEST_F(EgressTest, PolicyChangedLiveThroughTheCli) {
  auto sb = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  const std::string name = (*sb)->container_name();
  const auto cli = Cli;
  const std::string get_other =
      Py("    print(urllib.request.urlopen(\"http://other.test/\", timeout=10).read().decode(), "
         "end=\"\")");
  EXPECT_EQ(Run(**sb, get_other), "http 403\n");
  EXPECT_EQ(Run(**sb, kGetAllowed), "hello from allowed.test\n");

  auto shown = cli({"egress", name});
  ASSERT_EQ(shown.status.exit_code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("allow allowed.test"));
  EXPECT_THAT(shown.out, HasSubstr("other.test:80 denied (no rule allows other.test)"));
  EXPECT_THAT(shown.out, HasSubstr("1 denied"));

  // A connection to allowed.test held open across the change (one kept-alive request
  // answered, then waiting): the narrowed policy closes it.
  ASSERT_TRUE((*sb)
                  ->WriteFile("/tmp/held.py", R"py(import socket
s = socket.create_connection(("allowed.test", 80), 10)
s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: keep-alive\r\n\r\n")
s.settimeout(30)
first = s.recv(65536)
open("/tmp/held.out", "w").write("answered\n")
try:
    rest = s.recv(65536)
    open("/tmp/held.out", "w").write("closed\n" if not rest else "more\n")
except socket.timeout:
    open("/tmp/held.out", "w").write("still open\n")
)py")
                  .ok());
  ASSERT_EQ(Run(**sb, "python3 /tmp/held.py >/dev/null 2>&1 </dev/null & echo started"),
            "started\n");
  ASSERT_TRUE(WaitFor([&] { return Run(**sb, "cat /tmp/held.out 2>/dev/null") == "answered\n"; },
                      std::chrono::seconds(20)));
  auto changed = cli({"--json", "egress", name, "--allow-domain", "other.test", "--remove-domain",
                      "allowed.test"});
  ASSERT_EQ(changed.status.exit_code, 0) << changed.err;
  EXPECT_THAT(changed.out, HasSubstr("\"allow_domains\":[\"other.test\"]"));
  EXPECT_EQ(Run(**sb, get_other), "hello from other.test\n");
  EXPECT_EQ(Run(**sb, kGetAllowed), "http 403\n");
  std::string held;
  EXPECT_TRUE(WaitFor(
      [&] {
        held = Run(**sb, "cat /tmp/held.out");
        return held != "answered\n";
      },
      std::chrono::seconds(40)));
  EXPECT_EQ(held, "closed\n");
  EXPECT_THAT(ReadAll(DaemonLog()),
              HasSubstr("open connection closed, the policy changed: no rule allows allowed.test"));

  // A bad rule changes nothing and says what was wrong.
  auto bad = cli({"egress", name, "--allow-domain", "*.com"});
  EXPECT_NE(bad.status.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("*.com"));
  EXPECT_EQ(Run(**sb, get_other), "hello from other.test\n");
  // A sandbox without a policy has none to show.
  auto none = cli({"egress", "no-such-sandbox"});
  EXPECT_NE(none.status.exit_code, 0);
  EXPECT_THAT(none.err, HasSubstr("no egress policy"));
}

// Learn mode (docs/egress.md, "Learn mode"): a name no rule allows is reached and logged as
// learned, but what resolves to loopback or metadata, a private address, the host's own
// addresses and the enforcer's gateway stay refused; `agvisor egress NAME --suggest` prints the
// policy that allows what was reached, which then enforces it.
TEST_F(EgressTest, LearnModeNeverOpensTheHostAndSuggestsWhatWasReached) {
  SandboxSpec spec = Spec({"allowed.test"});
  spec.egress->mode = "learn";
  auto sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  const std::string name = (*sb)->container_name();
  auto get = [&](const std::string& url) {
    return Run(**sb, Py("    print(urllib.request.urlopen(\"" + url +
                        "\", timeout=10).read().decode(), end=\"\")"));
  };
  EXPECT_EQ(Run(**sb, kGetAllowed), "hello from allowed.test\n");
  EXPECT_EQ(get("http://other.test/"), "hello from other.test\n");  // learned
  // Without the proxy variables too: the in-sandbox resolver answers a learned name.
  EXPECT_THAT(Run(**sb, "getent hosts other.test || echo none"), Not(HasSubstr("none")));
  // Never: a name resolving to loopback or metadata, a private address, the host's own address
  // on the fake internet's link, the enforcer's own gateway (the host, on another port).
  const std::string gateway = Run(**sb,
                                  "python3 -c 'import os; print(os.environ[\"HTTP_PROXY\"]"
                                  ".split(\"//\")[1].split(\":\")[0], end=\"\")'");
  ASSERT_FALSE(gateway.empty());
  const std::vector<std::string> refused = {"http://rebind.test/",
                                            "http://meta.test/",
                                            "http://169.254.169.254/",
                                            "http://10.11.12.13/",
                                            std::string("http://") + kHostSide + "/",
                                            "http://" + gateway + ":8080/"};
  for (const std::string& url : refused) {
    EXPECT_EQ(get(url), "http 403\n") << url;
  }
  auto shown = Cli({"egress", name});
  ASSERT_EQ(shown.status.exit_code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("learn mode"));
  EXPECT_THAT(shown.out, HasSubstr("other.test:80 learned (no rule allows other.test)"));
  EXPECT_THAT(shown.out, HasSubstr("rebind.test:80 denied (resolves to a refused address: "
                                   "127.0.0.1 is loopback (no rule opens it))"));
  auto suggested = Cli({"egress", name, "--suggest"});
  ASSERT_EQ(suggested.status.exit_code, 0) << suggested.err;
  EXPECT_EQ(suggested.out, "--allow-domain allowed.test --allow-domain other.test\n");
  EXPECT_THAT(suggested.err, HasSubstr("--egress enforce"));
  // Pasted: enforced, what was reached still is, anything else is refused.
  auto enforced = Cli({"egress", name, "--egress", "enforce", "--allow-domain", "allowed.test",
                       "--allow-domain", "other.test"});
  ASSERT_EQ(enforced.status.exit_code, 0) << enforced.err;
  EXPECT_EQ(get("http://other.test/"), "hello from other.test\n");
  EXPECT_EQ(Run(**sb, kGetDenied), "http 403\n");
  EXPECT_EQ(Run(**sb, "getent hosts denied.test || echo none"), "none\n");
  // A mode that does not exist changes nothing and says what is accepted.
  auto bad = Cli({"egress", name, "--egress", "learning"});
  EXPECT_NE(bad.status.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("expected enforce"));
}

// Creating a running named sandbox again re-attaches only with the policy it was made with:
// never hands out one that is more open (or more closed) than asked.
TEST_F(EgressTest, ReattachingNeedsTheSamePolicy) {
  SandboxSpec spec = Spec({"allowed.test"});
  spec.name = testing::RunId() + "-same";
  auto first = CreateSandbox(spec);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  auto again = CreateSandbox(spec);
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_TRUE((*again)->resumed());
  SandboxSpec open = spec;
  open.egress.reset();
  auto opened = CreateSandbox(open);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(opened.error().message(), HasSubstr("allow=allowed.test"));
  SandboxSpec other = spec;
  other.egress = egress::EgressRules{.allow_domains = {"other.test"}};
  EXPECT_EQ(CreateSandbox(other).error().code(), ErrorCode::kConflict);
}

// No agvisord: a sandbox with a policy is refused (how to start it is in the message) and
// nothing is left behind.
TEST_F(EgressTest, WithoutAnEnforcerCreateIsRefusedAndLeavesNothing) {
  StopDaemon();
  SandboxSpec spec = Spec({"allowed.test"});
  spec.name = testing::RunId() + "-noenf";
  auto sb = CreateSandbox(spec);
  StartDaemon();
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kUnavailable) << sb.error().ToString();
  EXPECT_THAT(sb.error().message(), HasSubstr("agvisord"));
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  auto net = (*docker)->InspectNetwork(EgressNetworkName(ContainerNameFor(*spec.name)));
  ASSERT_FALSE(net.ok());
  EXPECT_EQ(net.error().code(), ErrorCode::kNotFound);
  (void)RemoveSandbox(ContainerNameFor(*spec.name), "", /*erase_data=*/true);
}

// A Docker host reached over ssh (a real sshd on loopback, so "the remote host" is this
// machine, where the test's agvisord runs): sets $AGVISOR_SSH_ARGS for the test's key while it
// lives, as a user's ~/.ssh/config would.
class SshHost {
 public:
  SshHost() {
    auto s = testing::TestSshd::Start();
    EXPECT_TRUE(s.ok()) << s.error().ToString();
    if (!s.ok()) return;
    sshd_ = std::move(*s);
    std::string args;
    for (const auto& a : sshd_->ssh_args()) args += (args.empty() ? "" : " ") + a;
    ::setenv("AGVISOR_SSH_ARGS", args.c_str(), 1);
  }
  ~SshHost() { ::unsetenv("AGVISOR_SSH_ARGS"); }
  bool ok() const { return sshd_ != nullptr; }
  std::string url() const { return sshd_->url(); }
  // agvisord's socket "there", as agvisor --server takes it.
  std::string server(const std::string& socket) const { return url() + socket; }

 private:
  std::unique_ptr<testing::TestSshd> sshd_;
};

// On an ssh:// Docker host the sandbox is served by the enforcer of the agvisord there: create
// waits for it over ssh, an allowed name works and another is refused, and `agvisor egress`
// reaches that agvisord over ssh to show and change the policy live.
TEST_F(EgressTest, OverSshTheHostsAgvisordEnforcesAndTheCliChangesThePolicy) {
  SshHost ssh;
  ASSERT_TRUE(ssh.ok());
  SandboxSpec spec = Spec({"allowed.test"});
  spec.host = ssh.url();
  auto sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  EXPECT_EQ(Run(**sb, kGetAllowed), "hello from allowed.test\n");
  EXPECT_EQ(Run(**sb, kRawAllowed), "hello from allowed.test\n");
  EXPECT_EQ(Run(**sb, kGetDenied), "http 403\n");

  const std::string name = (*sb)->container_name();
  auto cli = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {AGVISOR_CLI_BINARY, "--server",
                                     ssh.server(dir_ + "/agvisord.sock"), "--token-file",
                                     dir_ + "/token"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? *r : CommandOutput{};
  };
  auto shown = cli({"egress", name});
  ASSERT_EQ(shown.status.exit_code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("allow allowed.test"));
  EXPECT_THAT(shown.out, HasSubstr("denied.test:80 denied (no rule allows denied.test)"));

  auto changed = cli({"--json", "egress", name, "--allow-domain", "denied.test", "--remove-domain",
                      "allowed.test"});
  ASSERT_EQ(changed.status.exit_code, 0) << changed.err;
  EXPECT_THAT(changed.out, HasSubstr("\"allow_domains\":[\"denied.test\"]"));
  EXPECT_EQ(Run(**sb, Py("    print(urllib.request.urlopen(\"http://denied.test/\", "
                         "timeout=10).read().decode(), end=\"\")")),
            "hello from denied.test\n");
  EXPECT_EQ(Run(**sb, kGetAllowed), "http 403\n");
}

// No agvisord on the ssh:// host: create is refused saying to start it there (and leaves no
// network), and so is `agvisor egress` over ssh.
TEST_F(EgressTest, OverSshWithoutAgvisordThereCreateAndTheCliSayHowToStartIt) {
  SshHost ssh;
  ASSERT_TRUE(ssh.ok());
  StopDaemon();
  SandboxSpec spec = Spec({"allowed.test"});
  spec.host = ssh.url();
  spec.name = testing::RunId() + "-sshnoenf";
  auto sb = CreateSandbox(spec);
  auto cli = RunCommand({AGVISOR_CLI_BINARY, "--server", ssh.server(dir_ + "/agvisord.sock"),
                         "--token-file", dir_ + "/token", "egress", "agvisor-" + *spec.name});
  StartDaemon();
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code(), ErrorCode::kUnavailable) << sb.error().ToString();
  EXPECT_THAT(sb.error().message(), HasSubstr("on " + ssh.url()));
  EXPECT_THAT(sb.error().message(), HasSubstr("start it there"));
  EXPECT_THAT(sb.error().message(), HasSubstr("agvisord &"));
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  auto net = (*docker)->InspectNetwork(EgressNetworkName(ContainerNameFor(*spec.name)));
  EXPECT_EQ(net.error().code(), ErrorCode::kNotFound);
  (void)RemoveSandbox(ContainerNameFor(*spec.name), "", /*erase_data=*/true);

  ASSERT_TRUE(cli.ok()) << cli.error().ToString();
  EXPECT_NE(cli->status.exit_code, 0);
  EXPECT_THAT(cli->err, HasSubstr("is agvisord running on 127.0.0.1? start it there"));
}

// Plain HTTP kept alive: a second request on the same connection naming another host would
// reach the allowed name's server (the fake internet answers by Host, as a CDN does). The
// enforcer answers the first and refuses the second with 403; the server never sees it.
TEST_F(EgressTest, ASecondRequestOnOneConnectionIsCheckedToo) {
  auto sb = CreateSandbox(Spec({"allowed.test", "other.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  // Both requests in one segment, on one connection to allowed.test's address; prints what
  // came back until the connection ends (or 8 s pass).
  auto two_requests = [&](const std::string& second) {
    return Run(**sb, Py("    s = socket.create_connection((\"allowed.test\", 80), 10)\n"
                        "    s.settimeout(8)\n"
                        "    ask = \"GET / HTTP/1.1\\r\\nHost: %s\\r\\nConnection: "
                        "keep-alive\\r\\n\\r\\n\"\n"
                        "    s.sendall((ask % \"allowed.test\" + ask % \"" +
                        second +
                        "\").encode())\n"
                        "    data = b\"\"\n"
                        "    while True:\n"
                        "        try:\n"
                        "            more = s.recv(65536)\n"
                        "        except socket.timeout:\n"
                        "            break\n"
                        "        if not more:\n"
                        "            break\n"
                        "        data += more\n"
                        "    print(data.decode())"));
  };
  const std::string got = two_requests("denied.test");
  EXPECT_THAT(got, HasSubstr("hello from allowed.test")) << got;
  EXPECT_THAT(got, HasSubstr("HTTP/1.1 403 Forbidden")) << got;
  EXPECT_THAT(got, Not(HasSubstr("hello from denied.test"))) << got;
  // Another name that the policy allows is refused the same way: the connection was dialled
  // for allowed.test only.
  const std::string other = two_requests("other.test");
  EXPECT_THAT(other, HasSubstr("HTTP/1.1 403 Forbidden")) << other;
  EXPECT_THAT(other, Not(HasSubstr("hello from other.test"))) << other;
}

// utime + stime of a process, in clock ticks.
long long CpuTicks(pid_t pid) {
  std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream in(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return utime + stime;
}

// Issue 32: agvisord under a systemd service's soft limit (1,024 open files) with one sandbox
// holding 300 TLS connections to an allowed name. agvisord raises its limit and caps tunnels
// so that the API keeps its room: the health route answers within a second, agvisord idles
// (under 10% of a core over 10 s: no accept loop spinning on EMFILE), and another sandbox's
// create and allowed request work.
TEST_F(EgressTest, OneSandboxHoldingManyTunnelsCannotStarveAgvisord) {
  EXPECT_THAT(ReadAll(DaemonLog()), HasSubstr("\"soft_at_start\":1024"));
  auto sb = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  ASSERT_TRUE((*sb)->WriteFile("/tmp/ca.pem", ReadAll(CertFile())).ok());
  ASSERT_TRUE((*sb)
                  ->WriteFile("/tmp/hold.py", R"py(import os, socket, ssl, time
open("/tmp/hold.pid", "w").write(str(os.getpid()))
ctx = ssl.create_default_context(cafile="/tmp/ca.pem")
held, failed = [], set()
for i in range(300):
    try:
        s = socket.create_connection(("allowed.test", 443), 10)
        held.append(ctx.wrap_socket(s, server_hostname="allowed.test"))
    except Exception as e:
        failed.add(type(e).__name__)
with open("/tmp/hold.out", "w") as f:
    f.write("held %d %s\n" % (len(held), sorted(failed)))
time.sleep(60)
)py")
                  .ok());
  ASSERT_EQ(Run(**sb, "python3 /tmp/hold.py >/dev/null 2>&1 </dev/null & echo started"),
            "started\n");
  std::string held;
  ASSERT_TRUE(WaitFor(
      [&] {
        held = Run(**sb, "cat /tmp/hold.out 2>/dev/null");
        return held.starts_with("held");
      },
      std::chrono::seconds(60)))
      << held;
  std::istringstream words(held.substr(5));
  int n = 0;
  words >> n;
  // The load is there (past the old per-sandbox cap of 256 too) where the hard limit leaves
  // room for it (docs/egress.md, "Limits": a quarter of the tunnels per sandbox).
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  if (nofile.rlim_max >= 8192) {
    EXPECT_GE(n, 250) << held;
  }

  std::string token = ReadAll(dir_ + "/token");
  while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
  auto health =
      RunCommand({"curl", "-sS", "-m", "5", "-o", "/dev/null", "-w", "%{http_code} %{time_total}",
                  "--unix-socket", dir_ + "/agvisord.sock", "http://agvisord/v1/health"});
  ASSERT_TRUE(health.ok());
  std::istringstream answer(health->out);
  std::string code;
  double seconds = 99;
  answer >> code >> seconds;
  EXPECT_EQ(code, "200") << health->out << health->err;
  EXPECT_LT(seconds, 1.0) << health->out;

  const pid_t pid = daemon_->pid();
  const long long before = CpuTicks(pid);
  std::this_thread::sleep_for(std::chrono::seconds(10));
  const double cpu = static_cast<double>(CpuTicks(pid) - before) /
                     static_cast<double>(::sysconf(_SC_CLK_TCK)) / 10.0;
  EXPECT_LT(cpu, 0.10) << "agvisord used " << cpu * 100 << "% of a core";

  auto second = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  EXPECT_EQ(Run(**second, kGetAllowed), "hello from allowed.test\n");
  (void)Run(**sb, "kill $(cat /tmp/hold.pid)");
}

// Issue 32, point 3: a CIDR rule over loopback or over the host's own address opens neither. The
// enforcer dials from the host, so before this rule a host service on 127.0.0.2 (and one on an
// address of the host) answered the sandbox. A rule over every address is refused at create.
TEST_F(EgressTest, ACidrRuleNeverOpensTheHostItself) {
  const std::string server =
      "import http.server, sys\n"
      "class H(http.server.BaseHTTPRequestHandler):\n"
      "    def do_GET(self):\n"
      "        self.send_response(200); self.end_headers(); self.wfile.write(b'host service')\n"
      "s = http.server.HTTPServer((sys.argv[1], 0), H)\n"
      "open(sys.argv[2] + '.tmp', 'w').write(str(s.server_port))\n"
      "__import__('os').rename(sys.argv[2] + '.tmp', sys.argv[2])\n"
      "s.serve_forever()\n";
  std::vector<Subprocess> servers;
  std::vector<std::string> urls;
  std::vector<std::uint16_t> ports;
  for (const char* address : {"127.0.0.2", kHostSide}) {
    const std::string port_file = dir_ + "/port-" + address;
    auto p = Subprocess::Spawn({.argv = {"python3", "-c", server, address, port_file}});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    servers.push_back(std::move(*p));
    ASSERT_TRUE(WaitFor([&] { return !ReadAll(port_file).empty(); }, std::chrono::seconds(10)));
    const std::string port = ReadAll(port_file);
    ports.push_back(static_cast<std::uint16_t>(std::stoi(port)));
    urls.push_back("http://" + std::string(address) + ":" + port + "/");
    // The service answers from the host: what the sandbox must not get.
    auto direct = RunCommand({"python3", "-c",
                              "import urllib.request, sys; "
                              "print(urllib.request.urlopen(sys.argv[1]).read().decode())",
                              urls.back()});
    ASSERT_TRUE(direct.ok() && direct->status.success());
    ASSERT_EQ(direct->out, "host service\n");
  }
  SandboxSpec spec = Spec({"allowed.test"});
  spec.egress->allow_cidrs = {"127.0.0.0/8", std::string(kHostSide) + "/32"};
  spec.egress->ports = ports;
  auto sb = CreateSandbox(spec);
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  for (const std::string& url : urls) {
    EXPECT_EQ(Run(**sb, Py("    print(urllib.request.urlopen(\"" + url +
                           "\", timeout=10).read().decode())")),
              "http 403\n")
        << url;
  }
  EXPECT_TRUE(WaitFor(
      [] {
        return ReadAll(DaemonLog()).find("is loopback (no rule opens it)") != std::string::npos;
      },
      std::chrono::seconds(5)));
  for (Subprocess& p : servers) (void)p.Kill(SIGKILL);

  SandboxSpec all = Spec({"allowed.test"});
  all.egress->allow_cidrs = {"0.0.0.0/0"};
  auto refused = CreateSandbox(all);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(refused.error().message(), HasSubstr("default bridge network already reaches the "
                                                   "open internet"));
}

// Issue 32, point 8: a named sandbox made again while the egress network of its predecessor
// lingers (the container removed by Docker alone, so nothing removed the network, and
// agvisord still holds a live change that widened that policy) starts with the policy it is
// created with.
TEST_F(EgressTest, ANamedSandboxMadeAgainStartsWithThePolicyItIsCreatedWith) {
  SandboxSpec spec = Spec({"allowed.test"});
  spec.name = testing::RunId() + "-again";
  const std::string get_other =
      Py("    print(urllib.request.urlopen(\"http://other.test/\", timeout=10).read().decode(), "
         "end=\"\")");
  auto first = CreateSandbox(spec);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  const std::string name = (*first)->container_name();
  auto widened = Cli({"egress", name, "--allow-domain", "other.test"});
  ASSERT_EQ(widened.status.exit_code, 0) << widened.err;
  ASSERT_EQ(Run(**first, get_other), "hello from other.test\n");
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  ASSERT_TRUE((*docker)->RemoveContainer(name, /*force=*/true).ok());
  ASSERT_TRUE((*docker)->InspectNetwork(EgressNetworkName(name)).ok());  // it lingers

  auto again = CreateSandbox(spec);
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_FALSE((*again)->resumed());
  EXPECT_EQ(Run(**again, get_other), "http 403\n");
  EXPECT_EQ(Run(**again, kGetAllowed), "hello from allowed.test\n");
  auto shown = Cli({"--json", "egress", name});
  EXPECT_THAT(shown.out, HasSubstr("\"allow_domains\":[\"allowed.test\"]"));
}

// Issue 32, point 5: another sandbox's egress network is not a network to join: its enforcer
// serves that sandbox's policy.
TEST_F(EgressTest, AnotherSandboxsEgressNetworkCannotBeJoined) {
  auto owner = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(owner.ok()) << owner.error().ToString();
  SandboxSpec intruder = testing::TestSpec();
  intruder.network = EgressNetworkName((*owner)->container_name());
  auto r = CreateSandbox(intruder);
  ASSERT_FALSE(r.ok()) << "joined " << intruder.network;
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(),
              HasSubstr("egress network of sandbox " + (*owner)->container_name()));
}

// Issue 32, point 5: the egress network an earlier sandbox of this name left (its container
// removed without agvisor) carries that sandbox's name as its owner, and its enforcer may serve a
// live-changed policy for it: a new sandbox of the name without a policy that names it is refused,
// by name and by id. Only the create that makes an egress network joins it.
TEST_F(EgressTest, ALeftoverEgressNetworkOfTheSameNameCannotBeJoined) {
  SandboxSpec spec = Spec({"allowed.test"});
  spec.name = testing::RunId() + "-left";
  const std::string cname = ContainerNameFor(*spec.name);
  struct Cleanup {
    std::string name;
    ~Cleanup() { (void)RemoveSandbox(name, "", /*erase_data=*/true); }
  } cleanup{cname};
  auto first = CreateSandbox(spec);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  auto rm = RunCommand({"docker", "rm", "-f", cname});
  ASSERT_TRUE(rm.ok() && rm->status.success());
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  auto left = (*docker)->InspectNetwork(EgressNetworkName(cname));
  ASSERT_TRUE(left.ok()) << left.error().ToString();
  for (const std::string& network : {left->name, left->id}) {
    SandboxSpec again = testing::TestSpec();
    again.name = spec.name;
    again.network = network;
    auto r = CreateSandbox(again);
    ASSERT_FALSE(r.ok()) << "joined the leftover " << network;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << r.error().ToString();
    EXPECT_THAT(r.error().message(), HasSubstr("egress network of sandbox " + cname));
    EXPECT_THAT(r.error().message(), HasSubstr("only the create that makes"));
  }
}

// Issue 32, point 4: agvisord checks the sandbox firewall's hooks itself. With one missing (here:
// the egress chain pointed at one that does not exist, so the host's real rules stay as they
// are) it serves no egress network, says so in its log and in the host's firewall state, and
// creates are refused at once naming the fix; with the real rules it records "protected" and
// serves.
TEST_F(EgressTest, WithoutTheFirewallNothingIsServedAndCreatesAreRefused) {
  const std::string state = dir_ + "/firewall.state";
  auto existing = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(existing.ok()) << existing.error().ToString();
  ASSERT_EQ(Run(**existing, kGetAllowed), "hello from allowed.test\n");
  StopDaemon();
  StartDaemon(
      {"AGVISOR_TEST_FIREWALL_CHAIN=AGVISOR-EGRESS-NOT-THERE", "AGVISOR_FIREWALL_STATE=" + state});
  ASSERT_TRUE(WaitFor([&] { return ReadAll(state).find("state unprotected") != std::string::npos; },
                      std::chrono::seconds(10)))
      << ReadAll(state);
  EXPECT_THAT(ReadAll(state), HasSubstr("AGVISOR-EGRESS-NOT-THERE"));
  EXPECT_THAT(ReadAll(DaemonLog()), HasSubstr("run scripts/sandbox-firewall block"));
  EXPECT_THAT(Run(**existing, kGetAllowed), HasSubstr("error:"));  // cut off, not open

  ASSERT_EQ(::setenv("AGVISOR_FIREWALL_STATE", state.c_str(), 1), 0);
  struct Unset {
    ~Unset() { ::unsetenv("AGVISOR_FIREWALL_STATE"); }
  } unset;
  for (SandboxSpec spec : {Spec({"allowed.test"}), testing::TestSpec()}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = CreateSandbox(spec);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
    EXPECT_THAT(r.error().message(), HasSubstr("scripts/sandbox-firewall block"));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));  // no 10 s wait
  }
  SandboxSpec none = testing::TestSpec();
  none.network = "none";
  EXPECT_TRUE(CreateSandbox(none).ok());  // no network: nothing to protect
  // The opt-out of a host that isolates sandboxes by other means: recorded for this boot, and
  // never overwritten by agvisord.
  auto external = RunCommand({AGVISOR_SOURCE_DIR "/scripts/sandbox-firewall", "external"});
  ASSERT_TRUE(external.ok()) << external.error().ToString();
  EXPECT_TRUE(external->status.success()) << external->err;
  EXPECT_THAT(ReadAll(state), HasSubstr("state external"));
  EXPECT_TRUE(CreateSandbox(testing::TestSpec()).ok());
  fs::remove(state);

  StopDaemon();
  StartDaemon({"AGVISOR_FIREWALL_STATE=" + state});
  ASSERT_TRUE(WaitFor([&] { return ReadAll(state).find("state protected") != std::string::npos; },
                      std::chrono::seconds(10)))
      << ReadAll(state);
  auto served = CreateSandbox(Spec({"allowed.test"}));
  ASSERT_TRUE(served.ok()) << served.error().ToString();
  EXPECT_EQ(Run(**served, kGetAllowed), "hello from allowed.test\n");
  ExpectServedAgain(**existing);
}

// Brokered secrets (issue 35): through agvisord's API (the CLI with --server), a caller's value
// read from the caller's file and the operator's by name. The sandbox sees placeholders only:
// neither value is in its environment, any process's /proc/PID/environ, any file of its root
// file system, the container's env or labels, its network's labels or agvisord's log. Its CA
// bundle and the trust variables are in place; a refused request's 403 says what allows it; after
// agvisord's restart the operator's secret is brokered again and the caller's is gone (logged).
TEST_F(EgressTest, SecretsStayOutOfTheSandboxAndComeBackOnlyFromTheOperatorsFile) {
  const std::string caller_value = "sk-caller-" + testing::RunId();
  const std::string name = testing::RunId() + "-secrets";
  auto made =
      CreateWithSecrets(name, {"API_KEY=@" + KeyFile("api_key", caller_value) + ":allowed.test",
                               "OPERATOR_TOKEN:allowed.test:header=x-token"});
  ASSERT_TRUE(made.status.success()) << made.err;
  auto exec = [&](const std::string& cmd) { return ExecIn(name, cmd); };
  const std::string env = exec("env");
  EXPECT_THAT(env, ::testing::ContainsRegex("API_KEY=agvsec_[0-9a-f]{32}\n"));
  EXPECT_THAT(env, ::testing::ContainsRegex("OPERATOR_TOKEN=agvsec_[0-9a-f]{32}\n"));
  EXPECT_THAT(env, HasSubstr("SSL_CERT_FILE=/.agvisor/ca-bundle.pem\n"));
  EXPECT_THAT(env, HasSubstr("NODE_EXTRA_CA_CERTS=/.agvisor/sandbox-ca.pem\n"));
  EXPECT_THAT(env, Not(HasSubstr("AGVISOR_SANDBOX_CA")));  // the agent's own, dropped
  EXPECT_THAT(exec("grep -c 'BEGIN CERTIFICATE' /.agvisor/sandbox-ca.pem"), "1\n");

  // The values reach the upstream, put in by the enforcer (HTTPS through CONNECT, the sandbox
  // verifying the enforcer's leaf with its bundle): the caller's as Bearer, the operator's in
  // its header. Sent to another allowed host (plain HTTP, not bound), the placeholder arrives
  // unchanged. The upstream logs what it got; it never answers it back.
  const std::string send_both =
      "python3 -c 'import os, urllib.request\n"
      "r = urllib.request.Request(os.environ[\"URL\"], headers={\"Authorization\": \"Bearer \" + "
      "os.environ[\"API_KEY\"], \"x-token\": os.environ[\"OPERATOR_TOKEN\"]})\n"
      "print(urllib.request.urlopen(r, timeout=10).read().decode(), end=\"\")'";
  EXPECT_EQ(exec("URL=https://allowed.test/auth " + send_both), "checked\n");
  EXPECT_EQ(exec("URL=http://other.test/auth " + send_both), "checked\n");
  const std::string upstream = ReadAll(QuestionsLog() + ".http");
  EXPECT_THAT(upstream, HasSubstr("Authorization: Bearer " + caller_value + "\r\n"));
  EXPECT_THAT(upstream, HasSubstr("X-Token: " + operator_value_ + "\r\n"));
  EXPECT_THAT(upstream, ::testing::ContainsRegex("Host: other.test\r\n(.*\r\n)*Authorization: "
                                                 "Bearer agvsec_[0-9a-f]{32}\r\n"));
  // git and pip with the placeholder as the password in their URL: they send it as Basic
  // (after the server's 401), and the enforcer puts the value in; the server checks it.
  { std::ofstream(QuestionsLog() + ".token") << caller_value; }
  EXPECT_EQ(exec("git clone -q https://x-access-token:$API_KEY@allowed.test/private/repo.git "
                 "/tmp/g && cat /tmp/g/README"),
            "hello from the repository\n");
  std::string wheel;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/usr/share/python-wheels", ec)) {
    const std::string f = e.path().filename();
    if (f.starts_with("pip-") && f.ends_with(".whl")) wheel = e.path();
  }
  ASSERT_FALSE(wheel.empty()) << "no pip wheel on this host: apt-get install python3-pip-whl";
  ASSERT_TRUE(Cli({"cp", wheel, name + ":/tmp/"}).status.success());
  EXPECT_EQ(exec("python3 /tmp/" + fs::path(wheel).filename().string() +
                 "/pip install -q --disable-pip-version-check --no-cache-dir "
                 "--root-user-action=ignore --retries 0 --timeout 10 --index-url "
                 "https://user:$API_KEY@allowed.test/private/simple/ --target /tmp/p demo && "
                 "python3 -c 'import sys; sys.path.insert(0, \"/tmp/p\"); import demo; "
                 "print(demo.GREETING)'"),
            "hello from demo\n");
  // After all that traffic, neither value is anywhere the sandbox or the host's records hold.
  for (const std::string& value : {caller_value, operator_value_}) {
    // Every process's environment, every file of the root file system (but /proc and /sys).
    EXPECT_EQ(
        exec("cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -c -F '" + value + "' || true"),
        "0\n");
    EXPECT_EQ(exec("grep -rlsF '" + value + "' / --exclude-dir=proc --exclude-dir=sys || true"),
              "");
    EXPECT_THAT(env, Not(HasSubstr(value)));
    auto container = RunCommand({"docker", "inspect", "agvisor-" + name});
    ASSERT_TRUE(container.ok() && container->status.success());
    EXPECT_THAT(container->out, HasSubstr("agvsec_"));
    EXPECT_THAT(container->out, Not(HasSubstr(value)));
    auto network = RunCommand({"docker", "network", "inspect", "agvisor-" + name + "-egress"});
    ASSERT_TRUE(network.ok() && network->status.success());
    EXPECT_THAT(network->out, HasSubstr("agvisor.egress.secrets"));
    EXPECT_THAT(network->out, Not(HasSubstr(value)));
    EXPECT_THAT(ReadAll(DaemonLog()), Not(HasSubstr(value)));
  }
  // A refused name: 403 with the one line an agent can act on, in a header and the body.
  const std::string refused = exec(
      "python3 -c 'import urllib.request, urllib.error\ntry:\n"
      "    urllib.request.urlopen(\"http://denied.test/\", timeout=10)\n"
      "except urllib.error.HTTPError as e:\n"
      "    print(e.code, e.headers[\"X-Agvisor-Egress\"])\n    print(e.read().decode())'");
  EXPECT_THAT(refused, HasSubstr("403 agvisor egress policy of sandbox " + name +
                                 " refused denied.test:80 (no rule allows denied.test); an "
                                 "operator allows it with `agvisor egress " +
                                 name + " --allow-domain denied.test`"));
  // agvisord restarts: the caller's value was in its memory only and is gone (logged); the
  // operator's comes back from the file, bound to the same placeholder, with a new CA that
  // agvisord adds to the sandbox's bundle.
  const std::string count_certs = "grep -c 'BEGIN CERTIFICATE' /.agvisor/ca-bundle.pem";
  const int certs_before = std::stoi("0" + exec(count_certs));
  const std::string ca_before = exec("cat /.agvisor/sandbox-ca.pem");
  StopDaemon();
  StartDaemon();
  EXPECT_TRUE(WaitFor(
      [] {
        return ReadAll(DaemonLog()).find("the sandbox's new CA is installed") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << ReadAll(DaemonLog());
  EXPECT_EQ(std::stoi("0" + exec(count_certs)), certs_before + 1);
  EXPECT_NE(exec("cat /.agvisor/sandbox-ca.pem"), ca_before);
  // The operator's value is put in again (the sandbox trusts the new CA); the caller's
  // placeholder now goes as it is.
  std::filesystem::remove(QuestionsLog() + ".http");
  EXPECT_EQ(exec("URL=https://allowed.test/auth " + send_both), "checked\n");
  const std::string after = ReadAll(QuestionsLog() + ".http");
  EXPECT_THAT(after, HasSubstr("X-Token: " + operator_value_ + "\r\n"));
  EXPECT_THAT(after, ::testing::ContainsRegex("Authorization: Bearer agvsec_[0-9a-f]{32}\r\n"));
  EXPECT_THAT(after, Not(HasSubstr(caller_value)));
  const std::string log = ReadAll(DaemonLog());
  EXPECT_THAT(log, HasSubstr("is gone with agvisord's restart"));
  EXPECT_THAT(log, HasSubstr("\"secret\":\"API_KEY\""));
  EXPECT_THAT(log, Not(HasSubstr(caller_value)));
  EXPECT_THAT(log, Not(HasSubstr(operator_value_)));
  EXPECT_TRUE(Cli({"rm", name}).status.success());
}

// MCP names a secret of the operator's file, never a value: `agvisor mcp --server` (stdio) makes
// a sandbox whose env holds the placeholder, and the value reaches the upstream.
TEST_F(EgressTest, McpNamesTheOperatorsSecret) {
  auto mcp =
      Subprocess::Spawn({.argv = {AGVISOR_CLI_BINARY, "--server", "unix:" + dir_ + "/agvisord.sock",
                                  "--token-file", dir_ + "/token", "mcp"},
                         .pipe_stdin = true,
                         .pipe_stdout = true});
  ASSERT_TRUE(mcp.ok()) << mcp.error().ToString();
  std::string pending;
  // Sends one request and returns the answer's line (the one with its id).
  auto call = [&](int id, const std::string& method, const std::string& params) {
    const std::string line = R"({"jsonrpc":"2.0","id":)" + std::to_string(id) + R"(,"method":")" +
                             method + R"(","params":)" + params + "}\n";
    EXPECT_EQ(::write(mcp->stdin_fd().get(), line.data(), line.size()),
              static_cast<ssize_t>(line.size()));
    const std::string tag = R"("id":)" + std::to_string(id) + ",";
    for (;;) {
      for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        std::string got = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (got.find(tag) != std::string::npos) return got;
      }
      char buf[65536];
      ssize_t n = ::read(mcp->stdout_fd().get(), buf, sizeof buf);
      if (n <= 0) return std::string("EOF");
      pending.append(buf, static_cast<std::size_t>(n));
    }
  };
  EXPECT_THAT(
      call(
          1, "initialize",
          R"({"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}})"),
      HasSubstr("protocolVersion"));
  const std::string created = call(
      2, "tools/call",
      R"({"name":"create_sandbox","arguments":{"memory":"256m","egress":{"allow_domains":["allowed.test"]},"secrets":[{"name":"OPERATOR_TOKEN","hosts":["allowed.test"],"header":"x-token"}]}})");
  // The answer's text is the result as JSON inside a JSON string: the id is "agvisor-" and hex.
  const std::size_t at = created.find("agvisor-");
  ASSERT_NE(at, std::string::npos) << created;
  const std::string id = created.substr(
      at, created.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", at) - at);
  // MCP takes no labels: should a check below stop the test (the session then killed, not
  // ended), its sandbox and network are removed here.
  struct Remove {
    std::string id;
    ~Remove() {
      (void)RunCommand({"docker", "rm", "-f", id});
      (void)RunCommand({"docker", "network", "rm", id + "-egress"});
    }
  } remove{id};
  std::filesystem::remove(QuestionsLog() + ".http");
  const std::string ran = call(
      3, "tools/call",
      R"({"name":"exec","arguments":{"sandbox":")" + id +
          R"(","command":"echo $OPERATOR_TOKEN; python3 -c 'import os, urllib.request; print(urllib.request.urlopen(urllib.request.Request(\"https://allowed.test/auth\", headers={\"x-token\": os.environ[\"OPERATOR_TOKEN\"]}), timeout=10).read().decode())'"}})");
  EXPECT_THAT(ran, ::testing::ContainsRegex("agvsec_[0-9a-f]{32}")) << ran;
  EXPECT_THAT(ran, HasSubstr("checked")) << ran;
  EXPECT_THAT(ran, Not(HasSubstr(operator_value_)));
  EXPECT_THAT(ReadAll(QuestionsLog() + ".http"), HasSubstr("X-Token: " + operator_value_));
  // The egress log through MCP (agvisord's, read by `agvisor --server mcp`): the request, the
  // secret by name, never its value.
  const std::string log =
      call(4, "tools/call",
           R"({"name":"egress_log","arguments":{"sandbox":")" + id + R"(","last":20}})");
  EXPECT_THAT(log, HasSubstr(R"(\"path\":\"/auth\",\"status\":200)")) << log;
  EXPECT_THAT(log, HasSubstr(R"(\"secret\":\"OPERATOR_TOKEN\")")) << log;
  EXPECT_THAT(log, Not(HasSubstr(operator_value_)));
  mcp->stdin_fd().reset();  // the session ends: its sandbox is removed
  EXPECT_TRUE(mcp->WaitFor(std::chrono::seconds(60)).ok());
}

// The egress log (docs/egress.md, "Log") end to end: a follower (`agvisor egress NAME --follow`,
// the WebSocket route underneath) sees an intercepted request with its status, bytes, time and
// secret by name, a refusal as it happens, and a plain-HTTP request whose path holds a C1 CSI
// and an invalid byte, escaped so that nothing reaches the terminal; `--json --last` reads the
// same records back; agvisord's file is 0600 in a 0700 directory and holds no secret value;
// removing the sandbox ends the follower and deletes the file.
TEST_F(EgressTest, EgressLogRecordsRequestsAndIsFollowedLive) {
  const std::string value = "sk-log-" + testing::RunId();
  const std::string name = testing::RunId() + "-log";
  auto made = CreateWithSecrets(name, {"API_KEY=@" + KeyFile("log_key", value) + ":allowed.test"});
  ASSERT_TRUE(made.status.success()) << made.err;
  auto exec = [&](const std::string& cmd) { return ExecIn(name, cmd); };
  const std::string out = dir_ + "/follow.out";
  auto follower = Subprocess::Spawn(
      {.argv = {"sh", "-c",
                "exec \"$0\" --server \"unix:$1/agvisord.sock\" --token-file \"$1/token\" egress "
                "\"$2\" --follow --last 100 >\"$3\" 2>&1",
                AGVISOR_CLI_BINARY, dir_, name, out}});
  ASSERT_TRUE(follower.ok()) << follower.error().ToString();
  // An intercepted request (the secret put in: a record with its status, bytes and time).
  EXPECT_EQ(exec("python3 -c 'import os, urllib.request\n"
                 "r = urllib.request.Request(\"https://allowed.test/auth\", headers={"
                 "\"Authorization\": \"Bearer \" + os.environ[\"API_KEY\"]})\n"
                 "print(urllib.request.urlopen(r, timeout=10).read().decode(), end=\"\")'"),
            "checked\n");
  EXPECT_TRUE(WaitFor([&] { return ReadAll(out).find("GET /auth 200") != std::string::npos; },
                      std::chrono::seconds(10)))
      << ReadAll(out);
  // The follower is reading now: what comes next arrives live.
  EXPECT_THAT(exec(kGetDenied), HasSubstr("http 403"));
  EXPECT_EQ(exec(Py("    s = socket.create_connection((\"other.test\", 80), 10)\n"
                    "    s.sendall(b\"GET /x\\xc2\\x9b31mred\\xff HTTP/1.1\\r\\nHost: "
                    "other.test\\r\\nConnection: close\\r\\n\\r\\n\")\n"
                    "    print(s.recv(4096).split(b\" \")[1].decode())")),
            "404\n");  // the fake internet serves files there: none of that name
  // Connections whose bytes the enforcer does not read: a plain-HTTP connection kept for a
  // second request, TLS by SNI (pass-through) and a CONNECT tunnel. Each gets a close record
  // with its bytes each way and duration; the kept connection's second request, one of its own.
  EXPECT_EQ(
      exec(Py("    s = socket.create_connection((\"other.test\", 80), 10)\n"
              "    s.sendall(b\"GET / HTTP/1.1\\r\\nHost: other.test\\r\\n"
              "Connection: keep-alive\\r\\n\\r\\n\")\n"
              "    a = s.recv(4096)\n"
              "    s.sendall(b\"GET /second HTTP/1.1\\r\\nHost: other.test\\r\\n"
              "Connection: close\\r\\n\\r\\n\")\n"
              "    while True:\n"
              "        m = s.recv(4096)\n"
              "        if not m:\n"
              "            break\n"
              "        a += m\n"
              "    s.close()\n"
              "    import ssl\n"
              "    c = ssl._create_unverified_context()\n"
              "    t = c.wrap_socket(socket.create_connection((\"other.test\", 443), 10), "
              "server_hostname=\"other.test\")\n"
              "    t.sendall(b\"GET / HTTP/1.1\\r\\nHost: other.test\\r\\n"
              "Connection: close\\r\\n\\r\\n\")\n"
              "    b = t.recv(4096)\n"
              "    t.close()\n"
              "    u = urllib.request.urlopen(\"https://other.test/\", timeout=10, "
              "context=c).read().decode()\n"
              "    print(a.count(b\"HTTP/1.1 \"), b.split(b\" \")[1].decode(), u, end=\"\")")),
      "2 200 hello from other.test\n");
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string got = ReadAll(out);
        return got.find("denied.test:80 denied") != std::string::npos &&
               got.find("other.test:80 allowed") != std::string::npos &&
               got.find("tls other.test:443 closed") != std::string::npos &&
               got.find("connect other.test:443 closed") != std::string::npos &&
               got.find("connect allowed.test:443 closed") != std::string::npos;
      },
      std::chrono::seconds(10)))
      << ReadAll(out);
  const std::string followed = ReadAll(out);
  // Bytes each way and the time open, on every kind of connection (they were 0 before).
  for (const std::string kind : {"http other.test:80", "tls other.test:443",
                                 "connect other.test:443", "connect allowed.test:443"}) {
    EXPECT_THAT(followed,
                ::testing::ContainsRegex(kind + " closed #[0-9]+ -> 198.51.100.2 up=[1-9][0-9]* "
                                                "down=[1-9][0-9]* [0-9]+ms"))
        << kind;
  }
  EXPECT_THAT(followed, ::testing::ContainsRegex("http other.test:80 allowed \\(allowed by "
                                                 "other.test\\) -> 198.51.100.2 GET /second -"));
  EXPECT_THAT(followed, ::testing::ContainsRegex(
                            "https allowed.test:443 allowed \\(bound host allowed.test\\) -> "
                            "198.51.100.2 GET /auth 200 up=[1-9][0-9]* down=[1-9][0-9]* "
                            "[0-9]+ms secret=API_KEY"));
  EXPECT_THAT(followed, HasSubstr("http denied.test:80 denied (no rule allows denied.test)"));
  // The hostile path: shown escaped; no C1 control (or ESC) reaches the terminal.
  EXPECT_THAT(followed, HasSubstr("GET /x\\u009b31mred"));
  EXPECT_EQ(followed.find("\xc2\x9b"), std::string::npos);
  EXPECT_EQ(followed.find('\x1b'), std::string::npos);
  EXPECT_THAT(followed, Not(HasSubstr(value)));
  // --json --last: the same records as JSON lines, every control escaped.
  auto json = Cli({"--json", "egress", name, "--last", "100"});
  ASSERT_TRUE(json.status.success()) << json.err;
  EXPECT_THAT(json.out,
              ::testing::ContainsRegex("\"method\":\"GET\",\"path\":\"/auth\",\"status\":200,"
                                       "\"bytes_up\":[1-9][0-9]*,\"bytes_down\":[1-9][0-9]*,"
                                       "\"duration_ms\":[0-9]+,\"secret\":\"API_KEY\""));
  EXPECT_THAT(json.out, HasSubstr(R"("path":"/x\u009b31mred)"));
  // A close record names the decision it closes, and is no decision of its own.
  std::smatch opened;
  ASSERT_TRUE(
      std::regex_search(json.out, opened,
                        std::regex(R"re("seq":([0-9]+),[^\n]*"via":"tls","name":"other.test",)re"
                                   R"re("port":443,"allowed":true[^\n]*"closes":0})re")))
      << json.out;
  EXPECT_TRUE(std::regex_search(
      json.out,
      std::regex(R"re("via":"tls","name":"other.test",[^\n]*"closes":)re" + opened[1].str() + "}")))
      << json.out;
  EXPECT_EQ(json.out.find("\xc2\x9b"), std::string::npos);
  EXPECT_THAT(json.out, Not(HasSubstr(value)));
  // agvisord's file of it: private, no value; gone with the sandbox, and the follower ends.
  std::string file;
  for (const auto& e : fs::directory_iterator(dir_ + "/state/log")) {
    if (ReadAll(e.path()).find("agvisor-" + name) != std::string::npos) file = e.path();
  }
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(fs::status(file).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(fs::status(dir_ + "/state/log").permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_THAT(ReadAll(file), HasSubstr("\"secret\":\"API_KEY\""));
  EXPECT_THAT(ReadAll(file), Not(HasSubstr(value)));
  EXPECT_TRUE(Cli({"rm", name}).status.success());
  auto ended = follower->WaitFor(std::chrono::seconds(20));
  EXPECT_TRUE(ended.ok() && ended->success()) << ReadAll(out);
  if (!ended.ok()) (void)follower->Kill(SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return !fs::exists(file); }, std::chrono::seconds(10))) << file;
}

// The in-process library has no enforcer to hold a value: a create with a secret and no
// agvisord is refused before anything is made, saying how to start agvisord.
TEST_F(EgressTest, SecretsInProcessAreRefusedNamingAgvisord) {
  const std::string key_file = dir_ + "/in_process_key";
  { std::ofstream(key_file) << "sk-in-process\n"; }
  auto r = RunCommand({AGVISOR_CLI_BINARY, "create", "--allow-domain", "allowed.test", "--secret",
                       "API_KEY=@" + key_file + ":allowed.test"});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->status.success());
  EXPECT_THAT(r->err, HasSubstr("Start agvisord on the Docker host"));
  EXPECT_THAT(r->err, Not(HasSubstr("sk-in-process")));
}

TEST_F(EgressTest, PoliciesThatCannotWorkAreRefusedUpFront) {
  SandboxSpec none = Spec({"allowed.test"});
  none.network = "none";
  auto r = CreateSandbox(none);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), HasSubstr("nothing to allow"));
  auto bad = CreateSandbox(Spec({"*.com"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(bad.error().message(), HasSubstr("egress policy"));
}

}  // namespace
}  // namespace agvisor
