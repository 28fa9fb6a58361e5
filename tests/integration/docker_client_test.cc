// Integration tests of docker::Client against the real dockerd of this machine (runtime runsc,
// image agvisor/probe:latest: busybox only). Label `integration`: a missing daemon FAILS.
//
// Every container and volume carries agvisor.test=<this run's id>; TearDown force-removes all of
// them (also after a failed assertion). No sleeps: every wait is a blocking daemon call.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "agvisor/base/tar.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/docker/client.h"

namespace agvisor::docker {
namespace {

constexpr const char* kImage = "agvisor/probe:latest";
constexpr const char* kLabel = "agvisor.test";

const std::string& RunId() {
  static const std::string id = [] {
    std::random_device rd;
    return "dct-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000);
  }();
  return id;
}

std::string UniqueName(std::string_view what) {
  static std::atomic<int> n{0};
  return "agvisor-" + RunId() + "-" + std::string(what) + "-" + std::to_string(n++);
}

class DockerClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Client::Connect();
    // A missing daemon is a failure, never a skip (scripts/test provisions dockerd).
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    client_ = *c;
  }

  void TearDown() override {
    if (!client_) return;
    const std::string filter = std::string(kLabel) + "=" + RunId();
    if (auto list = client_->ListContainers(true, {filter}); list.ok()) {
      for (const auto& c : *list) (void)client_->RemoveContainer(c.id, true, true);
    }
    if (auto vols = client_->ListVolumes({filter}); vols.ok()) {
      for (const auto& v : *vols) (void)client_->RemoveVolume(v.name, true);
    }
  }

  ContainerConfig ProbeConfig() {
    ContainerConfig c;
    c.image = kImage;
    c.cmd = {"/bin/busybox", "sleep", "3600"};
    c.labels = {{kLabel, RunId()}};
    c.host_config.runtime = "runsc";
    c.host_config.network_mode = "none";
    return c;
  }

  // Creates and starts a sleeping probe container; returns its id.
  std::string StartProbe(const std::string& name = "") {
    auto id = client_->CreateContainer(ProbeConfig(), name);
    EXPECT_TRUE(id.ok()) << id.error().ToString();
    if (!id.ok()) return "";
    auto started = client_->StartContainer(*id);
    EXPECT_TRUE(started.ok()) << started.error().ToString();
    return *id;
  }

  ExecOutput Run(const std::string& container, std::vector<std::string> cmd,
                 std::optional<std::string> input = std::nullopt) {
    ExecConfig e;
    e.cmd = std::move(cmd);
    auto out = client_->RunExec(container, e, std::move(input));
    EXPECT_TRUE(out.ok()) << out.error().ToString();
    return out.ok() ? *out : ExecOutput{};
  }

  std::shared_ptr<Client> client_;
};

TEST_F(DockerClientTest, NegotiatesAndDescribesTheDaemon) {
  EXPECT_GE(client_->api_version(), kMinApiVersion);
  EXPECT_LE(client_->api_version(), kMaxApiVersion);
  ASSERT_TRUE(client_->Ping().ok());
  auto v = client_->Version();
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_FALSE(v->api_version.empty());
  EXPECT_EQ(v->os, "linux");
  auto info = client_->Info();
  ASSERT_TRUE(info.ok()) << info.error().ToString();
  EXPECT_EQ(info->runtimes.count("runsc"), 1u) << "runsc is not registered with dockerd";
  EXPECT_GT(info->ncpu, 0);
  EXPECT_FALSE(info->driver.empty());
}

TEST_F(DockerClientTest, ContainerLifecycle) {
  const std::string name = UniqueName("life");
  ContainerConfig config = ProbeConfig();
  auto id = client_->CreateContainer(config, name);
  ASSERT_TRUE(id.ok()) << id.error().ToString();

  // Files go in before start (gVisor's overlay may hide later ones).
  TarWriter tar;
  ASSERT_TRUE(tar.AddDirectory("agvisor-test").ok());
  ASSERT_TRUE(tar.AddFile("agvisor-test/hello.txt", "hello from the host\n").ok());
  auto put = client_->PutArchive(*id, "/", tar.Finish());
  ASSERT_TRUE(put.ok()) << put.error().ToString();

  ASSERT_TRUE(client_->StartContainer(*id).ok());
  EXPECT_TRUE(client_->StartContainer(*id).ok()) << "starting a running container is a no-op";

  auto info = client_->InspectContainer(name);
  ASSERT_TRUE(info.ok()) << info.error().ToString();
  EXPECT_EQ(info->id, *id);
  EXPECT_EQ(info->name, name);
  EXPECT_EQ(info->image_ref, kImage);
  EXPECT_TRUE(info->state.running);
  EXPECT_EQ(info->state.status, "running");
  EXPECT_GT(info->state.pid, 0);
  EXPECT_EQ(info->host_config.runtime, "runsc");
  EXPECT_EQ(info->host_config.network_mode, "none");
  EXPECT_EQ(info->labels.at(kLabel), RunId());

  ExecOutput hi = Run(*id, {"/bin/sh", "-c", "echo hi; echo err >&2"});
  EXPECT_EQ(hi.exit_code, 0);
  EXPECT_EQ(hi.out, "hi\n");
  EXPECT_EQ(hi.err, "err\n");

  ExecOutput three = Run(*id, {"/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(three.exit_code, 3);

  ExecOutput cat = Run(*id, {"/bin/busybox", "cat", "/agvisor-test/hello.txt"});
  EXPECT_EQ(cat.exit_code, 0);
  EXPECT_EQ(cat.out, "hello from the host\n");

  auto list = client_->ListContainers(false, {std::string(kLabel) + "=" + RunId()});
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  bool found = false;
  for (const auto& c : *list) {
    if (c.id != *id) continue;
    found = true;
    EXPECT_EQ(c.names, std::vector<std::string>{name});
    EXPECT_EQ(c.state, "running");
    EXPECT_EQ(c.labels.at(kLabel), RunId());
  }
  EXPECT_TRUE(found);
  auto other = client_->ListContainers(true, {std::string(kLabel) + "=no-such-run"});
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());

  const std::string renamed = name + "-renamed";
  ASSERT_TRUE(client_->RenameContainer(*id, renamed).ok());
  auto by_new = client_->InspectContainer(renamed);
  ASSERT_TRUE(by_new.ok()) << by_new.error().ToString();
  EXPECT_EQ(by_new->id, *id);
  EXPECT_EQ(client_->InspectContainer(name).error().code(), ErrorCode::kNotFound);

  ASSERT_TRUE(client_->KillContainer(*id, "KILL").ok());
  auto code = client_->WaitContainer(*id, "not-running");
  ASSERT_TRUE(code.ok()) << code.error().ToString();
  EXPECT_EQ(*code, 137);
  auto after = client_->InspectContainer(*id);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->state.running);
  EXPECT_EQ(after->state.status, "exited");
  EXPECT_EQ(after->state.exit_code, 137);

  auto kill_again = client_->KillContainer(*id);
  ASSERT_FALSE(kill_again.ok());
  EXPECT_EQ(kill_again.error().code(), ErrorCode::kConflict) << kill_again.error().ToString();
  EXPECT_TRUE(client_->StopContainer(*id, 1).ok()) << "stopping a stopped container is a no-op";

  ASSERT_TRUE(client_->RemoveContainer(*id, false, true).ok());
  auto gone = client_->InspectContainer(*id);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(gone.error().http_status(), 404);
  EXPECT_NE(gone.error().message().find("docker inspect container " + *id), std::string::npos)
      << gone.error().message();
}

TEST_F(DockerClientTest, NameConflictIsKConflict) {
  const std::string name = UniqueName("dup");
  auto first = client_->CreateContainer(ProbeConfig(), name);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  auto second = client_->CreateContainer(ProbeConfig(), name);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), ErrorCode::kConflict) << second.error().ToString();
  EXPECT_EQ(second.error().http_status(), 409);
  EXPECT_NE(second.error().message().find("docker create container " + name), std::string::npos);
}

TEST_F(DockerClientTest, MissingImageIsKNotFound) {
  ContainerConfig c = ProbeConfig();
  c.image = "agvisor/no-such-image:" + RunId();
  auto id = client_->CreateContainer(c, "");
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().code(), ErrorCode::kNotFound) << id.error().ToString();
}

TEST_F(DockerClientTest, AnnotationsFollowTheApiVersion) {
  ContainerConfig c = ProbeConfig();
  c.host_config.annotations = {{"dev.gvisor.flag.debug", "false"}};
  auto id = client_->CreateContainer(c, "");
  if (client_->api_version() < kAnnotationsApiVersion) {
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.error().code(), ErrorCode::kUnsupported) << id.error().ToString();
  } else {
    EXPECT_TRUE(id.ok()) << id.error().ToString();
  }
}

TEST_F(DockerClientTest, ExecFiveMegabytesOfStdinRoundTrip) {
  const std::string id = StartProbe();
  ASSERT_FALSE(id.empty());
  std::string input(5 * 1024 * 1024, '\0');
  std::mt19937 rng(7);
  for (char& ch : input) ch = static_cast<char>(rng());
  ExecOutput out = Run(id, {"/bin/busybox", "cat"}, input);
  EXPECT_EQ(out.exit_code, 0);
  ASSERT_EQ(out.out.size(), input.size());
  EXPECT_TRUE(out.out == input) << "output differs from input";
  EXPECT_EQ(out.err, "");
}

TEST_F(DockerClientTest, ExecThatIgnoresItsStdinDoesNotHang) {
  const std::string id = StartProbe();
  ASSERT_FALSE(id.empty());
  ExecOutput out = Run(id, {"/bin/sh", "-c", "echo early; exit 3"}, std::string(4 << 20, 'x'));
  EXPECT_EQ(out.exit_code, 3);
  EXPECT_EQ(out.out, "early\n");
}

TEST_F(DockerClientTest, ExecStreamInteractive) {
  const std::string id = StartProbe();
  ASSERT_FALSE(id.empty());
  ExecConfig e;
  e.cmd = {"/bin/sh", "-c", "read line; echo got:$line; echo to-err >&2; read rest; exit 5"};
  e.attach_stdin = true;
  auto exec_id = client_->CreateExec(id, e);
  ASSERT_TRUE(exec_id.ok()) << exec_id.error().ToString();
  auto stream = client_->StartExec(*exec_id, false);
  ASSERT_TRUE(stream.ok()) << stream.error().ToString();
  ASSERT_TRUE((*stream)->Write("ping\n").ok());
  std::string out, err;
  // Read until the first line arrived: the process answers before its stdin ends.
  while (out.find('\n') == std::string::npos) {
    auto piece = (*stream)->Read();
    ASSERT_TRUE(piece.ok()) << piece.error().ToString();
    ASSERT_TRUE(piece->has_value()) << "EOF before the answer";
    ((*piece)->stream == StreamKind::kStderr ? err : out) += (*piece)->bytes;
  }
  EXPECT_EQ(out, "got:ping\n");
  ASSERT_TRUE((*stream)->CloseStdin().ok());
  for (;;) {
    auto piece = (*stream)->Read();
    ASSERT_TRUE(piece.ok()) << piece.error().ToString();
    if (!piece->has_value()) break;
    ((*piece)->stream == StreamKind::kStderr ? err : out) += (*piece)->bytes;
  }
  EXPECT_EQ(err, "to-err\n");
  (*stream)->Close();
  auto info = client_->InspectExec(*exec_id);
  ASSERT_TRUE(info.ok()) << info.error().ToString();
  EXPECT_FALSE(info->running);
  EXPECT_EQ(info->exit_code, 5);
}

TEST_F(DockerClientTest, AttachBeforeStartSeesEveryByteOfPidOne) {
  ContainerConfig c = ProbeConfig();
  c.cmd = {"/bin/busybox", "sh", "-c", "echo early >&2; exec /bin/busybox cat"};
  c.open_stdin = c.attach_stdin = c.attach_stdout = c.attach_stderr = true;
  c.stdin_once = false;  // so a client that detaches never ends PID 1's stdin
  c.host_config.log_driver = "none";
  auto id = client_->CreateContainer(c, "");
  ASSERT_TRUE(id.ok()) << id.error().ToString();
  auto info = client_->InspectContainer(*id);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->open_stdin);
  auto stream = client_->AttachContainer(*id, true, true, true);
  ASSERT_TRUE(stream.ok()) << stream.error().ToString();
  ASSERT_TRUE(client_->StartContainer(*id).ok());
  std::string err;
  auto on_err = [&](std::string_view b) { err.append(b); };
  // 300 KB through PID 1's stdin and back through the demuxed stdout, in place.
  std::string sent(300000, 'q');
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>('a' + i % 23);
  std::thread writer([&] { EXPECT_TRUE((*stream)->Write(sent).ok()); });
  std::string got;
  char buf[7000];
  while (got.size() < sent.size()) {
    auto n = (*stream)->ReadStdout(buf, on_err);
    ASSERT_TRUE(n.ok()) << n.error().ToString();
    ASSERT_GT(*n, 0u) << "EOF after " << got.size() << " bytes";
    got.append(buf, *n);
  }
  writer.join();
  EXPECT_TRUE(got == sent);
  EXPECT_EQ(err, "early\n");
  // The container ending ends the attach stream.
  ASSERT_TRUE(client_->KillContainer(*id, "KILL").ok());
  for (;;) {
    auto n = (*stream)->ReadStdout(buf, on_err);
    ASSERT_TRUE(n.ok()) << n.error().ToString();
    if (*n == 0) break;
  }
  EXPECT_EQ(client_->AttachContainer("no-such-container-x", true, true, true).error().code(),
            ErrorCode::kNotFound);
}

TEST_F(DockerClientTest, TtyExecIsRaw) {
  const std::string id = StartProbe();
  ASSERT_FALSE(id.empty());
  ExecConfig e;
  e.cmd = {"/bin/sh", "-c", "echo out; echo err >&2"};
  e.tty = true;
  auto out = client_->RunExec(id, e);
  ASSERT_TRUE(out.ok()) << out.error().ToString();
  EXPECT_EQ(out->exit_code, 0);
  EXPECT_NE(out->out.find("out"), std::string::npos) << out->out;
  EXPECT_NE(out->out.find("err"), std::string::npos) << out->out;
  EXPECT_EQ(out->err, "");
}

TEST_F(DockerClientTest, ConcurrentExecsOnOneClient) {
  const std::string id = StartProbe();
  ASSERT_FALSE(id.empty());
  std::vector<std::thread> threads;
  std::vector<ExecOutput> results(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      ExecConfig e;
      e.cmd = {"/bin/sh", "-c", "echo " + std::to_string(i)};
      auto r = client_->RunExec(id, e);
      if (r.ok()) results[i] = *r;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(results[i].exit_code, 0) << i;
    EXPECT_EQ(results[i].out, std::to_string(i) + "\n");
  }
}

TEST_F(DockerClientTest, ContainerLogsOfAFinishedContainer) {
  ContainerConfig c = ProbeConfig();
  c.cmd = {"/bin/sh", "-c", "echo to-out; echo to-err >&2; exit 4"};
  auto id = client_->CreateContainer(c, "");
  ASSERT_TRUE(id.ok()) << id.error().ToString();
  ASSERT_TRUE(client_->StartContainer(*id).ok());
  auto code = client_->WaitContainer(*id, "not-running");
  ASSERT_TRUE(code.ok()) << code.error().ToString();
  EXPECT_EQ(*code, 4);
  auto logs = client_->ContainerLogs(*id);
  ASSERT_TRUE(logs.ok()) << logs.error().ToString();
  EXPECT_NE(logs->find("to-out\n"), std::string::npos) << *logs;
  EXPECT_NE(logs->find("to-err\n"), std::string::npos) << *logs;
  auto only_out = client_->ContainerLogs(*id, true, false);
  ASSERT_TRUE(only_out.ok());
  EXPECT_EQ(*only_out, "to-out\n");
}

TEST_F(DockerClientTest, Volumes) {
  const std::string name = UniqueName("vol");
  auto v = client_->CreateVolume(name, {{kLabel, RunId()}, {"purpose", "test"}});
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_EQ(v->name, name);
  auto inspected = client_->InspectVolume(name);
  ASSERT_TRUE(inspected.ok()) << inspected.error().ToString();
  EXPECT_EQ(inspected->labels.at("purpose"), "test");
  EXPECT_EQ(inspected->driver, "local");
  auto list = client_->ListVolumes({std::string(kLabel) + "=" + RunId(), "purpose=test"});
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, name);

  // In use by a container: removal is refused with kConflict.
  ContainerConfig c = ProbeConfig();
  c.host_config.mounts = {Mount{.type = "volume", .source = name, .target = "/data"}};
  auto cid = client_->CreateContainer(c, "");
  ASSERT_TRUE(cid.ok()) << cid.error().ToString();
  auto busy = client_->RemoveVolume(name);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code(), ErrorCode::kConflict) << busy.error().ToString();
  ASSERT_TRUE(client_->RemoveContainer(*cid, true).ok());

  ASSERT_TRUE(client_->RemoveVolume(name).ok());
  auto gone = client_->InspectVolume(name);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kNotFound);
}

TEST_F(DockerClientTest, Images) {
  auto probe = client_->InspectImage(kImage);
  ASSERT_TRUE(probe.ok()) << probe.error().ToString();
  EXPECT_EQ(probe->id.rfind("sha256:", 0), 0u);
  EXPECT_GT(probe->size, 0);
  auto missing = client_->InspectImage("agvisor/no-such-image:" + RunId());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound) << missing.error().ToString();
  EXPECT_EQ(missing.error().http_status(), 404);
}

TEST_F(DockerClientTest, EventsOfAContainer) {
  const double since =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      1;
  const std::string id = StartProbe();
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(client_->KillContainer(id, "KILL").ok());
  ASSERT_TRUE(client_->WaitContainer(id, "not-running", std::chrono::seconds(30)).ok());
  const double until =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto actions = client_->ContainerEventActions(id, since, until);
  ASSERT_TRUE(actions.ok()) << actions.error().ToString();
  auto at = [&](std::string_view a) { return std::find(actions->begin(), actions->end(), a); };
  ASSERT_NE(at("start"), actions->end());
  ASSERT_NE(at("die"), actions->end());
  EXPECT_LT(at("start"), at("die"));
  EXPECT_EQ(at("oom"), actions->end());
}

TEST_F(DockerClientTest, CommitANeverStartedContainerAndListByLabel) {
  auto cid = client_->CreateContainer(ProbeConfig(), "");
  ASSERT_TRUE(cid.ok()) << cid.error().ToString();
  TarWriter tar;
  ASSERT_TRUE(tar.AddFile("committed", RunId() + "\n").ok());
  ASSERT_TRUE(client_->PutArchive(*cid, "/", tar.Finish()).ok());
  const std::string repo = "agvisor-test/commit";
  auto id = client_->CommitContainer(*cid, repo, RunId(),
                                     {"LABEL agvisor.test.commit=" + RunId() + " other=\"a b\""});
  ASSERT_TRUE(id.ok()) << id.error().ToString();
  ASSERT_TRUE(client_->RemoveContainer(*cid, true).ok());
  auto list = client_->ListImages({"agvisor.test.commit=" + RunId()});
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].id, *id);
  EXPECT_EQ((*list)[0].repo_tags, std::vector<std::string>{repo + ":" + RunId()});
  EXPECT_EQ((*list)[0].labels.at("other"), "a b");
  // The file is in the image: a container of it sees it.
  ContainerConfig c = ProbeConfig();
  c.image = repo + ":" + RunId();
  c.cmd = {"/bin/busybox", "cat", "/committed"};
  auto run = client_->CreateContainer(c, "");
  ASSERT_TRUE(run.ok()) << run.error().ToString();
  ASSERT_TRUE(client_->StartContainer(*run).ok());
  auto code = client_->WaitContainer(*run, "not-running", std::chrono::seconds(30));
  ASSERT_TRUE(code.ok()) << code.error().ToString();
  EXPECT_EQ(*code, 0);
  ASSERT_TRUE(client_->RemoveContainer(*run, true).ok());
  ASSERT_TRUE(client_->RemoveImage(*id).ok());
  EXPECT_FALSE(client_->CommitContainer("no-such-container-" + RunId(), repo, "x").ok());
  EXPECT_EQ(client_->CommitContainer(*cid, "-bad", "x").error().code(),
            ErrorCode::kInvalidArgument);
}

TEST_F(DockerClientTest, ImportImageFromAStreamedTar) {
  TarWriter tar;
  ASSERT_TRUE(tar.AddDirectory("etc").ok());
  ASSERT_TRUE(tar.AddFile("etc/agvisor-import", RunId() + "\n").ok());
  const std::string bytes = tar.Finish();
  std::size_t sent = 0;
  // Small pieces: the body goes out chunked, several chunks.
  http::BodySource source = [&](std::span<char> buf) -> Result<std::size_t> {
    const std::size_t n = std::min({buf.size(), bytes.size() - sent, std::size_t{700}});
    std::copy_n(bytes.data() + sent, n, buf.data());
    sent += n;
    return n;
  };
  std::vector<std::string> lines;
  const std::string repo = "agvisor-test/import";
  auto id = client_->ImportImage(repo, RunId(), source,
                                 [&](std::string_view l) { lines.emplace_back(l); });
  ASSERT_TRUE(id.ok()) << id.error().ToString();
  EXPECT_EQ(id->rfind("sha256:", 0), 0u) << *id;
  EXPECT_FALSE(lines.empty());
  const std::string ref = repo + ":" + RunId();
  auto info = client_->InspectImage(ref);
  ASSERT_TRUE(info.ok()) << info.error().ToString();
  EXPECT_EQ(info->id, *id);
  ASSERT_TRUE(client_->RemoveImage(ref).ok());
  EXPECT_EQ(client_->InspectImage(ref).error().code(), ErrorCode::kNotFound);
}

TEST_F(DockerClientTest, PullWithoutARegistryFailsClearly) {
  // Loopback port 1: nothing listens; the daemon's connection is refused at once.
  auto r = client_->PullImage("localhost:1/agvisor-none:latest", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable) << r.error().ToString();
  EXPECT_NE(r.error().message().find("docker pull image localhost:1/agvisor-none:latest"),
            std::string::npos)
      << r.error().message();
}

TEST_F(DockerClientTest, MalformedArgumentsNeverReachTheDaemon) {
  for (const char* bad : {"../../images/x", "a/b", "x?force=1", "-x", ""}) {
    auto r = client_->InspectContainer(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_EQ(r.error().http_status(), 0) << bad;
  }
  EXPECT_EQ(client_->InspectVolume("../x").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(client_->InspectExec("nothex").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(client_->InspectImage("-rm").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(client_->KillContainer("x", "KILL&x=1").error().code(), ErrorCode::kInvalidArgument);
}

// ---- No daemon: a clear kUnavailable, fast, no hang ----

TEST(DockerClientNoDaemonTest, MissingSocketIsUnavailableQuickly) {
  const std::string path = "/tmp/agvisor-no-daemon-" + std::to_string(::getpid()) + ".sock";
  const auto start = std::chrono::steady_clock::now();
  auto c = Client::Connect("unix://" + path);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kUnavailable) << c.error().ToString();
  EXPECT_NE(c.error().message().find(path), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("dockerd"), std::string::npos) << c.error().message();
  // No retry loop, no hang: 1 ms at most on a loaded 2-core host (load average 17-19).
  EXPECT_LT(took, std::chrono::seconds(3));
}

TEST(DockerClientNoDaemonTest, SocketNobodyAcceptsOnIsUnavailableQuickly) {
  // A bound but not listening socket: connect() is refused (a daemon that died uncleanly).
  const std::string path = "/tmp/agvisor-dead-daemon-" + std::to_string(::getpid()) + ".sock";
  ::unlink(path.c_str());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(fd.valid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const auto start = std::chrono::steady_clock::now();
  auto c = Client::Connect("unix://" + path);
  const auto took = std::chrono::steady_clock::now() - start;
  ::unlink(path.c_str());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kUnavailable) << c.error().ToString();
  EXPECT_LT(took, std::chrono::seconds(3));  // as above: under 1 ms loaded
}

}  // namespace
}  // namespace agvisor::docker
