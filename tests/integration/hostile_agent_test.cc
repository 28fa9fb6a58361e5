// The hostile-agent suite (label `integration`, real dockerd + runsc): root inside a sandbox can
// replace /.agvisor/agvisor-agent, so every byte the host reads back is the sandbox's choice. A
// Python stand-in for the agent (kHostileAgent) answers the handshake and then misbehaves:
// garbage, a frame length far past the limit, a frame that stalls half-way, output without end
// that ignores flow control, a STAT that claims 1 TB, and watch events whose path is absolute or
// 5000 bytes long. For each, the library, the CLI and
// agvisord return an error (or the few bytes really sent) within a stated bound, and agvisord's
// RSS stays within kRssBound of its idle RSS while a second client keeps being served. An honest
// sandbox adds the bulk cases: a 4 TB sparse file through GET files (a client that stops after
// 512 MiB, and a `length`), and 256 MiB of collected exec output through POST exec (capped,
// dropped bytes counted: 256 times the cap, 4 times the RSS bound). The issue asks for "a few GB"
// and 2 GB: the mechanism is the same at any size (memory is bounded per chunk), and on this 2-core
// machine, loaded, bytes moved at ~13-100 MB/s inside gVisor (exec output at 7 MB/s at load 12-14),
// so the sizes are cut: ~0.6 GB of file bytes, 256 MiB of exec output (37 s at 7 MB/s: a third of
// its 110 s timeout), a 15 s keep-alive wait for the stalled frame, ~15 s for the endless output.
// ~3 minutes at load 11-13.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <thread>

#include "agvisor/api/codec.h"
#include "agvisor/base/subprocess.h"
#include "agvisor/client/agvisord.h"
#include "tests/integration/test_env.h"

namespace agvisor::testing {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

// How far agvisord's RSS may grow over its idle RSS while it serves everything below.
constexpr long kRssBoundKiB = 64 * 1024;

// Stands in for agvisor-agent. `connect` (the relay a new handle starts) answers HELLO with a
// well-formed WELCOME, then misbehaves on every request as /tmp/hostile-mode says (read again per
// request, so one sandbox serves every case); `read-file` (the bulk read path) too.
constexpr std::string_view kHostileAgent = R"PY(#!/usr/bin/python3
import os, struct, sys, time
inp, out = sys.stdin.buffer, sys.stdout.buffer
def mode():
    try:
        with open('/tmp/hostile-mode') as f:
            return f.read().strip()
    except OSError:
        return ''
def put(t, s, p=b''):
    out.write(struct.pack('>IBI', 5 + len(p), t, s) + p)
    out.flush()
def take(n):
    b = b''
    while len(b) < n:
        c = inp.read(n - len(b))
        if not c:
            sys.exit(0)
        b += c
    return b
def drain():
    while inp.read(65536):
        pass
    sys.exit(0)
def sstr(b):
    return struct.pack('>I', len(b)) + b
if sys.argv[1:2] == ['read-file']:
    if mode() == 'lie':
        out.write(b'abc')
    sys.exit(0)
take(struct.unpack('>I', take(4))[0])
put(0x02, 0, struct.pack('>H', 4) + sstr(b'hostile') + struct.pack('>Q', 0))
while True:
    n, t, s = struct.unpack('>IBI', take(9))
    p = take(n - 5)
    if t == 0x03:
        put(0x04, 0, p)
        continue
    if s == 0 or t in (0x05, 0x07):
        continue
    m = mode()
    if m == 'garbage':
        out.write(os.urandom(1 << 16))
        out.flush()
        drain()
    elif m == 'huge':
        out.write(struct.pack('>IBI', 0xffffffff, 0x38, s))
        out.flush()
        drain()
    elif m == 'stall':
        out.write(struct.pack('>IBI', 1000, 0x38, s) + b'x' * 10)
        out.flush()
        drain()
    elif m == 'flood':
        chunk = bytes(1 << 19)
        if t == 0x10:
            put(0x11, s, struct.pack('>I', 7))
            while True:
                put(0x14, s, b'\x01' + chunk)
        while True:
            put(0x38, s, chunk)
    elif m == 'watchbad':
        if t == 0x60:
            put(0x3A, s)
            put(0x61, s, struct.pack('>I', 1) + b'\x01\x00' + sstr(b'/etc/shadow') + sstr(b''))
        else:
            put(0x06, s, struct.pack('>H', 8) + sstr(b'hostile agent: unsupported'))
    elif m == 'watchbig':
        if t == 0x60:
            put(0x3A, s)
            put(0x61, s, struct.pack('>I', 1) + b'\x01\x00' + sstr(b'a' * 5000) + sstr(b''))
        else:
            put(0x06, s, struct.pack('>H', 8) + sstr(b'hostile agent: unsupported'))
    elif m == 'lie':
        if t == 0x32:
            put(0x3B, s, sstr(b'f') + struct.pack('>BIQq', 0, 0o100644, 1 << 40, 0) + sstr(b''))
        elif t == 0x30:
            put(0x38, s, b'abc')
            put(0x39, s)
        else:
            put(0x06, s, struct.pack('>H', 8) + sstr(b'hostile agent: unsupported'))
)PY";

long VmRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct HttpResult {
  int status = 0;
  std::string body;
  double seconds = 0;
};

// agvisord on a temp socket, its RSS sampled every 50 ms for the whole suite.
class Daemon {
 public:
  explicit Daemon(std::string dir) : dir_(std::move(dir)) {}
  ~Daemon() {
    stop_ = true;
    if (sampler_.joinable()) sampler_.join();
    if (proc_) (void)proc_->Kill(SIGKILL);
  }
  std::string socket() const { return dir_ + "/agvisord.sock"; }
  std::string log_file() const { return dir_ + "/agvisord.log"; }
  std::string token() const {
    std::string t = ReadAll(dir_ + "/token");
    while (!t.empty() && t.back() == '\n') t.pop_back();
    return t;
  }
  pid_t pid() const { return proc_->pid(); }
  bool alive() const { return ::kill(proc_->pid(), 0) == 0 && VmRssKiB(proc_->pid()) > 0; }
  long peak_kib() const { return peak_.load(); }
  void ResetPeak() { peak_ = VmRssKiB(pid()); }

  void Start() {
    auto p = Subprocess::Spawn(
        {.argv = {"sh", "-c", "exec \"$0\" --socket \"$1\" --token-file \"$2\" 2>>\"$3\"",
                  AGVISORD_BINARY, socket(), dir_ + "/token", log_file()}});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    proc_.emplace(std::move(*p));
    ASSERT_TRUE(
        WaitFor([&] { return ReadAll(log_file()).find("agvisord listening") != std::string::npos; },
                seconds(20)))
        << ReadAll(log_file());
    sampler_ = std::thread([this] {
      while (!stop_) {
        long rss = VmRssKiB(proc_->pid());
        long seen = peak_.load();
        while (rss > seen && !peak_.compare_exchange_weak(seen, rss)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }

  // curl over the unix socket; `args` go before the URL.
  HttpResult Curl(const std::string& method, const std::string& target,
                  std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {
        "curl",           "-sS",           "-X",     method, "-w",
        "\n%{http_code}", "--unix-socket", socket(), "-H",   "Authorization: Bearer " + token()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("http://agvisord" + target);
    const auto start = Clock::now();
    auto r = RunCommand(argv);
    HttpResult out;
    out.seconds = Since(start);
    if (!r.ok()) {
      ADD_FAILURE() << r.error().ToString();
      return out;
    }
    auto nl = r->out.rfind('\n');
    out.body = r->out.substr(0, nl == std::string::npos ? 0 : nl);
    out.status = nl == std::string::npos ? 0 : std::atoi(r->out.substr(nl + 1).c_str());
    return out;
  }

  HttpResult Post(const std::string& target, const std::string& body) {
    return Curl("POST", target, {"-H", "Content-Type: application/json", "--data-binary", body});
  }

 private:
  std::string dir_;
  std::optional<Subprocess> proc_;
  std::thread sampler_;
  std::atomic<bool> stop_{false};
  std::atomic<long> peak_{0};
};

struct CliResult {
  int exit_code = -1;
  std::string err;
  double seconds = 0;
};

// The agvisor CLI (in-process library backend); stdout goes to /dev/null (it may be endless).
CliResult Cli(std::vector<std::string> args) {
  std::vector<std::string> argv = {"sh", "-c", "exec \"$0\" \"$@\" >/dev/null", AGVISOR_CLI_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto start = Clock::now();
  auto r = RunCommand(argv);
  CliResult out;
  out.seconds = Since(start);
  if (!r.ok()) {
    ADD_FAILURE() << r.error().ToString();
    return out;
  }
  out.exit_code = r->status.signaled() ? 128 + r->status.signal : r->status.exit_code;
  out.err = r->err;
  return out;
}

class HostileAgentTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/agvisor-hostile-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = new std::string(tmpl);
    daemon_ = new Daemon(*dir_);
    daemon_->Start();
    auto honest = CreateSandbox(TestSpec());
    ASSERT_TRUE(honest.ok()) << honest.error().ToString();
    honest_ = honest->release();
    auto hostile = CreateSandbox(TestSpec());
    ASSERT_TRUE(hostile.ok()) << hostile.error().ToString();
    hostile_ = hostile->release();
    // Root inside replaces the agent binary (PID 1 runs on: its creating handle still works).
    ASSERT_TRUE(hostile_->WriteFile("/.agvisor/hostile", kHostileAgent, 0755).ok());
    auto mv = hostile_->ExecShell(
        "mv -f /.agvisor/hostile /.agvisor/agvisor-agent && echo garbage > /tmp/hostile-mode");
    ASSERT_TRUE(mv.ok() && mv->exit_code == 0) << (mv.ok() ? mv->err : mv.error().ToString());
    // The daemon warmed up (a handle on each sandbox, a request of each kind served once):
    // idle RSS is measured after that.
    ASSERT_EQ(
        daemon_->Curl("GET", "/v1/sandboxes/" + HonestId() + "/files?path=/etc/hostname").status,
        200);
    idle_kib_ = VmRssKiB(daemon_->pid());
    std::cerr << "agvisord idle RSS: " << idle_kib_ / 1024 << " MiB\n";
    daemon_->ResetPeak();
  }
  static void TearDownTestSuite() {
    if (daemon_) {
      std::cerr << "agvisord RSS: idle " << idle_kib_ / 1024 << " MiB, peak "
                << daemon_->peak_kib() / 1024 << " MiB\n";
      EXPECT_LT(daemon_->peak_kib() - idle_kib_, kRssBoundKiB)
          << "agvisord's RSS grew past its bound over the suite";
    }
    delete honest_;
    delete hostile_;
    delete daemon_;
    CleanupRun();
    if (dir_) std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  // The suite's peak so far, per test: which case grew agvisord.
  void TearDown() override {
    std::cerr << "  agvisord RSS peak so far: " << daemon_->peak_kib() / 1024 << " MiB (idle "
              << idle_kib_ / 1024 << " MiB)\n";
  }

  static std::string HonestId() { return api::SandboxIdFor(honest_->container_name()); }
  static std::string HostileId() { return api::SandboxIdFor(hostile_->container_name()); }
  static void SetMode(const std::string& mode) {
    ASSERT_TRUE(hostile_ != nullptr);
    auto r = hostile_->ExecShell("echo " + mode + " > /tmp/hostile-mode");
    ASSERT_TRUE(r.ok() && r->exit_code == 0);
  }

  // While a hostile case runs: the daemon answers another client's exec on the honest sandbox.
  static void ExpectOthersServed() {
    auto r = daemon_->Post("/v1/sandboxes/" + HonestId() + "/exec", R"({"command":"echo ok"})");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.body.find("ok\\n"), std::string::npos) << r.body;
    // An exec takes ~20 ms here; 10 s proves it did not wait behind the hostile case.
    EXPECT_LT(r.seconds, 10) << "another client waited behind the hostile sandbox";
    EXPECT_TRUE(daemon_->alive());
  }

  // The three clients at once (their waits overlap): the library on a fresh handle, the CLI,
  // agvisord. Each must fail with a message within `bound` seconds.
  struct Outcomes {
    std::optional<Error> library;
    double library_s = 0;
    CliResult cli;
    HttpResult http;
  };
  static Outcomes RunAll(const std::function<Result<void>(Sandbox&)>& library_op,
                         std::vector<std::string> cli_args, const std::string& method,
                         const std::string& target, std::vector<std::string> curl_args = {}) {
    Outcomes o;
    auto lib = std::async(std::launch::async, [&] {
      const auto start = Clock::now();
      auto sb = OpenSandbox(hostile_->container_name());
      std::optional<Error> e;
      if (!sb.ok()) {
        e = sb.error();
      } else if (auto r = library_op(**sb); !r.ok()) {
        e = r.error();
      }
      o.library_s = Since(start);
      return e;
    });
    auto cli = std::async(std::launch::async, [&] { return Cli(cli_args); });
    auto http =
        std::async(std::launch::async, [&] { return daemon_->Curl(method, target, curl_args); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ExpectOthersServed();
    o.library = lib.get();
    o.cli = cli.get();
    o.http = http.get();
    std::cerr << "  times to error: library " << o.library_s << " s, cli " << o.cli.seconds
              << " s, agvisord " << o.http.seconds << " s\n";
    EXPECT_TRUE(daemon_->alive()) << ReadAll(daemon_->log_file());
    return o;
  }
  static void ExpectAllFailed(const Outcomes& o, double bound, const std::string& what) {
    ASSERT_TRUE(o.library.has_value()) << what << ": the library call succeeded";
    EXPECT_FALSE(o.library->message().empty());
    EXPECT_LT(o.library_s, bound) << what << " (library): " << o.library->ToString();
    EXPECT_NE(o.cli.exit_code, 0) << what << " (cli)";
    EXPECT_NE(o.cli.err.find("agvisor:"), std::string::npos) << o.cli.err;
    EXPECT_LT(o.cli.seconds, bound) << what << " (cli): " << o.cli.err;
    EXPECT_GE(o.http.status, 500) << what << " (agvisord): " << o.http.body;
    EXPECT_NE(o.http.body.find("\"error\""), std::string::npos) << o.http.body;
    EXPECT_LT(o.http.seconds, bound) << what << " (agvisord): " << o.http.body;
    std::cerr << "  library: " << o.library->ToString() << "\n  cli: " << o.cli.err
              << "  agvisord: " << o.http.body << "\n";
  }

  static std::string* dir_;
  static Daemon* daemon_;
  static Sandbox* honest_;
  static Sandbox* hostile_;
  static long idle_kib_;
};

std::string* HostileAgentTest::dir_ = nullptr;
Daemon* HostileAgentTest::daemon_ = nullptr;
Sandbox* HostileAgentTest::honest_ = nullptr;
Sandbox* HostileAgentTest::hostile_ = nullptr;
long HostileAgentTest::idle_kib_ = 0;

Result<void> StatOp(Sandbox& sb) {
  auto r = sb.Stat("/etc/hostname");
  if (!r.ok()) return r.error();
  return Ok();
}

TEST_F(HostileAgentTest, GarbageBytesAreAProtocolError) {
  SetMode("garbage");
  auto o = RunAll(StatOp, {"exec", hostile_->container_name(), "--", "true"}, "GET",
                  "/v1/sandboxes/" + HostileId() + "/files/stat?path=/etc/hostname");
  // Each takes a relay exec (~0.1-0.5 s) and one frame: 10 s proves no wait for a timeout.
  ExpectAllFailed(o, 10, "garbage");
}

TEST_F(HostileAgentTest, AFrameLengthPastTheLimitIsAProtocolError) {
  SetMode("huge");
  auto o = RunAll(StatOp, {"exec", hostile_->container_name(), "--", "true"}, "GET",
                  "/v1/sandboxes/" + HostileId() + "/files/stat?path=/etc/hostname");
  // Refused from the header alone (nothing of 4 GB is awaited or allocated).
  ExpectAllFailed(o, 10, "huge length");
  EXPECT_NE(o.library->message().find("protocol error"), std::string::npos)
      << o.library->ToString();
}

TEST_F(HostileAgentTest, AFrameThatStallsHalfwayIsSilence) {
  SetMode("stall");
  auto o = RunAll(StatOp, {"exec", hostile_->container_name(), "--", "true"}, "GET",
                  "/v1/sandboxes/" + HostileId() + "/files/stat?path=/etc/hostname");
  // The channel's keep-alive timeout is 15 s; 45 s (3x) proves the wait ended there.
  ExpectAllFailed(o, 45, "stall");
}

TEST_F(HostileAgentTest, EndlessOutputIgnoringFlowControlEndsByTheDeadline) {
  SetMode("flood");
  auto o = RunAll(
      [](Sandbox& sb) -> Result<void> {
        auto r = sb.Exec({"true"}, {.timeout = 2});
        if (!r.ok()) return r.error();
        return Ok();
      },
      {"exec", "-t", "2", hostile_->container_name(), "--", "true"}, "POST",
      "/v1/sandboxes/" + HostileId() + "/exec",
      {"-H", "Content-Type: application/json", "--data-binary",
       R"({"argv":["true"],"timeout":2})"});
  // Ends by a window violation, or at the latest at the 2 s timeout + 10 s grace; 36 s is 3x.
  ExpectAllFailed(o, 36, "flood");
}

// Watch events are checked on the host: an absolute path (a sandbox naming a host-looking file)
// and a path past the 4096-byte bound are refused by the library, the CLI and agvisord's watch
// WebSocket, each with an error naming the problem, and agvisord serves others meanwhile.
TEST_F(HostileAgentTest, GarbageWatchEventsAreRefused) {
  for (const std::string mode : {"watchbad", "watchbig"}) {
    SetMode(mode);
    const auto start = Clock::now();
    auto sb = OpenSandbox(hostile_->container_name());
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    auto w = (*sb)->Watch("/tmp");
    ASSERT_TRUE(w.ok()) << w.error().ToString();
    Result<std::optional<std::vector<WatchEvent>>> got = std::optional<std::vector<WatchEvent>>();
    while (got.ok() && Since(start) < 30) got = (*w)->Next(std::chrono::milliseconds(500));
    ASSERT_FALSE(got.ok()) << mode << ": the library took the events";
    // One frame decides: 10 s (a relay exec and a frame) proves no wait for a timeout.
    EXPECT_LT(Since(start), 10) << mode;
    EXPECT_NE(got.error().message().find(mode == "watchbad" ? "path is absolute" : "exceeds 4096"),
              std::string::npos)
        << got.error().ToString();
    std::cerr << "  " << mode << ": library: " << got.error().ToString() << "\n";

    auto cli = Cli({"watch", hostile_->container_name(), "/tmp"});
    EXPECT_NE(cli.exit_code, 0) << mode;
    EXPECT_NE(cli.err.find("agvisor:"), std::string::npos) << cli.err;
    EXPECT_LT(cli.seconds, 10) << cli.err;
    std::cerr << "  " << mode << ": cli: " << cli.err;

    auto place = client::Agvisord("unix:" + daemon_->socket(), *dir_ + "/token");
    ASSERT_TRUE(place.ok()) << place.error().ToString();
    auto h = (*place)->Open(hostile_->container_name());
    ASSERT_TRUE(h.ok()) << h.error().ToString();
    const auto ws_start = Clock::now();
    auto rw = (*h)->Watch("/tmp", true);
    Result<std::optional<std::vector<WatchEvent>>> remote =
        std::optional<std::vector<WatchEvent>>();
    if (!rw.ok()) {
      remote = rw.error();
    } else {
      while (remote.ok() && Since(ws_start) < 30) {
        remote = (*rw)->Next(std::chrono::milliseconds(500));
      }
    }
    ASSERT_FALSE(remote.ok()) << mode << ": agvisord passed the events on";
    EXPECT_LT(Since(ws_start), 10) << mode;
    std::cerr << "  " << mode << ": agvisord: " << remote.error().ToString() << "\n";
    ExpectOthersServed();
  }
}

TEST_F(HostileAgentTest, AStatOf1TbSizesNothing) {
  SetMode("lie");
  const auto start = Clock::now();
  auto sb = OpenSandbox(hostile_->container_name());
  ASSERT_TRUE(sb.ok()) << sb.error().ToString();
  auto data = (*sb)->ReadFile("/etc/hostname");
  // The 1 TB claim picks the bulk path; what counts is what came: three bytes.
  ASSERT_TRUE(data.ok()) << data.error().ToString();
  EXPECT_EQ(*data, "abc");
  EXPECT_LT(Since(start), 10);
  auto r = daemon_->Curl("GET", "/v1/sandboxes/" + HostileId() + "/files?path=/etc/hostname");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "abc");
  EXPECT_LT(r.seconds, 10);
  ExpectOthersServed();
}

TEST_F(HostileAgentTest, FourTerabyteSparseFileStreamsUntilTheClientStops) {
  auto t = honest_->ExecShell("truncate -s 4T /tmp/sparse && stat -c %s /tmp/sparse");
  ASSERT_TRUE(t.ok() && t->exit_code == 0) << (t.ok() ? t->err : t.error().ToString());
  ASSERT_EQ(t->out, "4398046511104\n");
  const std::string url = "http://agvisord/v1/sandboxes/" + HonestId() + "/files?path=/tmp/sparse";
  // A client that stops after 512 MiB (head closes the pipe, curl ends, the daemon's write
  // fails and it stops reading from the sandbox).
  const auto start = Clock::now();
  auto r = RunCommand({"sh", "-c",
                       "curl -sS --unix-socket \"$0\" -H \"Authorization: Bearer $1\" \"$2\" "
                       "2>/dev/null | head -c 536870912 | wc -c",
                       daemon_->socket(), daemon_->token(), url});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "536870912\n");
  std::cerr << "  512 MiB of a 4 TB file in " << Since(start) << " s\n";
  ExpectOthersServed();
  // And the sandbox stops being read: the agent's read-file ends once nobody takes its bytes
  // (10 s: Docker notices the closed stream at its next write).
  EXPECT_TRUE(WaitFor(
      [&] {
        auto ps = honest_->ExecShell(
            "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | "
            "grep -c '[r]ead-file.* /tmp/sparse'");
        return ps.ok() && ps->out == "0\n";
      },
      seconds(10)))
      << "the sandbox is still being read after the client stopped";
  // A client that asks for less: `length` (and `offset`, skipped by reading).
  auto part = RunCommand({"sh", "-c",
                          "curl -sS --unix-socket \"$0\" -H \"Authorization: Bearer $1\" "
                          "\"$2&offset=1048576&length=67108864\" | wc -c",
                          daemon_->socket(), daemon_->token(), url});
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->out, "67108864\n");
  ASSERT_TRUE(honest_->WriteFile("/tmp/small", "hello world").ok());
  auto small = daemon_->Curl(
      "GET", "/v1/sandboxes/" + HonestId() + "/files?path=/tmp/small&offset=2&length=3");
  EXPECT_EQ(small.status, 200);
  EXPECT_EQ(small.body, "llo");
  auto bad =
      daemon_->Curl("GET", "/v1/sandboxes/" + HonestId() + "/files?path=/tmp/small&length=-1");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("length"), std::string::npos) << bad.body;
}

TEST_F(HostileAgentTest, QuarterGigabyteOfCollectedExecOutputIsCappedNotBuffered) {
  const auto start = Clock::now();
  // dd with 1 MiB blocks: head's small reads crawl inside gVisor on a loaded machine.
  auto r = daemon_->Post(
      "/v1/sandboxes/" + HonestId() + "/exec",
      R"({"command":"dd if=/dev/zero bs=1M count=256 status=none; echo done >&2","timeout":110})");
  std::cerr << "  256 MiB of exec output collected in " << Since(start) << " s\n";
  ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
  auto o = json::parse(r.body).as_object();
  // Not killed for it: the command ran to its end.
  EXPECT_EQ(o["exit_code"].as_int64(), 0);
  EXPECT_EQ(o["stderr"].as_string(), "done\n");
  EXPECT_EQ(o["stdout"].as_string().size(), 1u << 20);
  EXPECT_EQ(o["stdout_dropped"].as_int64(), (std::int64_t{1} << 28) - (1 << 20));
  EXPECT_EQ(o["stderr_dropped"].as_int64(), 0);
  EXPECT_TRUE(o["truncated"].as_bool());
}

}  // namespace
}  // namespace agvisor::testing
