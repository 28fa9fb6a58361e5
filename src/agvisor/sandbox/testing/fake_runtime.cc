#include "agvisor/sandbox/testing/fake_runtime.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <thread>
#include <utility>

#include "agvisor/channel/transport.h"
#include "agvisor/sandbox/agent_paths.h"

namespace agvisor {
namespace {

// A local process's stdio as a transport; the process is killed and reaped with it.
class ProcessTransport : public channel::Transport {
 public:
  ProcessTransport(Subprocess process, std::unique_ptr<channel::FdTransport> fds)
      : process_(std::move(process)), fds_(std::move(fds)) {}
  Result<std::size_t> Read(std::span<char> buf) override { return fds_->Read(buf); }
  Result<void> Write(std::string_view data) override { return fds_->Write(data); }
  void Close() override { fds_->Close(); }

 private:
  Subprocess process_;
  std::unique_ptr<channel::FdTransport> fds_;
};

// A relay whose exec did not start: reading it gives `error` (kube::ExecStream's end then).
class FailedRelay : public channel::Transport {
 public:
  explicit FailedRelay(Error error) : error_(std::move(error)) {}
  Result<std::size_t> Read(std::span<char>) override { return error_; }
  Result<void> Write(std::string_view) override { return Ok(); }
  void Close() override {}

 private:
  Error error_;
};

bool Matches(const Labels& labels, const std::string& filter) {
  const auto eq = filter.find('=');
  if (eq == std::string::npos) return labels.count(filter) > 0;
  auto it = labels.find(filter.substr(0, eq));
  return it != labels.end() && it->second == filter.substr(eq + 1);
}

}  // namespace

FakeRuntime::FakeRuntime(std::string host, std::string agent_binary)
    : host_(std::move(host)), agent_binary_(std::move(agent_binary)) {
  // Instances talk over pipes: a write to a killed agent's stdin must fail with EPIPE, not end the
  // test process (seen: SIGPIPE in a test that kills an agent). Docker's transports are sockets
  // written with MSG_NOSIGNAL, so the library itself needs no such setting.
  ::signal(SIGPIPE, SIG_IGN);
  char tmpl[] = "/tmp/agvisor-fake-XXXXXX";
  if (::mkdtemp(tmpl) != nullptr) dir_ = tmpl;
}

FakeRuntime::~FakeRuntime() {
  instances_.clear();  // kills and reaps the agents
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::vector<FakeRuntime::Call> FakeRuntime::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

int FakeRuntime::CallCount(std::string_view op) const {
  std::lock_guard lock(mu_);
  int n = 0;
  for (const auto& c : calls_) n += c.op == op;
  return n;
}

std::set<std::string> FakeRuntime::Snapshot() const {
  std::lock_guard lock(mu_);
  std::set<std::string> s;
  for (const auto& [name, i] : instances_) s.insert("instance " + name);
  for (const auto& [name, l] : volumes_) s.insert("volume " + name);
  for (const auto& name : networks_) s.insert("network " + name);
  return s;
}

std::optional<Error> FakeRuntime::Record(std::string_view op, std::string_view object) {
  calls_.push_back({std::string(op), std::string(object)});
  auto it = failures_.find(std::string(op));
  if (it == failures_.end() || it->second.empty()) return std::nullopt;
  Error e = it->second.front();
  it->second.pop_front();
  return e;
}

FakeRuntime::Instance* FakeRuntime::Find(std::string_view ref) {
  Reap();
  for (auto& [name, i] : instances_) {
    if (name == ref || i.id == ref) return &i;
  }
  return nullptr;
}

void FakeRuntime::Reap() {
  for (auto it = instances_.begin(); it != instances_.end();) {
    Refresh(it->second);
    const bool gone = it->second.remove_on_exit && it->second.state.status == "exited";
    it = gone ? instances_.erase(it) : std::next(it);
  }
}

void FakeRuntime::Refresh(Instance& i) {
  if (!i.agent) return;
  auto st = i.agent->TryWait();
  if (!st.ok() || !st->has_value()) return;
  const ExitStatus& s = **st;
  i.state = {.status = "exited",
             .running = false,
             .exit_code = s.signaled() ? 128 + s.signal : s.exit_code,
             .oom_killed = false};
  i.agent.reset();
}

Result<std::string> FakeRuntime::AddInstance(const std::string& name, InstanceOptions o) {
  std::lock_guard lock(mu_);
  if (instances_.count(name)) return Error::Conflict("fake: instance " + name + " exists");
  Instance i;
  i.id = "fake" + std::to_string(next_id_++);
  i.name = name;
  i.image = o.image;
  i.labels = std::move(o.labels);
  i.state = {.status = o.status, .running = o.status == "running", .exit_code = o.exit_code};
  i.created_unix = o.created_unix ? o.created_unix : static_cast<std::int64_t>(std::time(nullptr));
  i.helper = o.helper;
  i.socket = dir_ + "/" + i.id + ".sock";
  if (i.state.running) {
    i.agent.emplace(
        AGVISOR_TRY(Subprocess::Spawn({.argv = {agent_binary_, "init", "--socket", i.socket}})));
    // Ready once its socket is there (the agent makes it before serving).
    for (int n = 0; n < 500 && !std::filesystem::exists(i.socket); ++n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::string id = i.id;
  instances_.emplace(name, std::move(i));
  return id;
}

void FakeRuntime::SetState(const std::string& name, std::string status, int exit_code,
                           bool oom_killed) {
  std::lock_guard lock(mu_);
  auto it = instances_.find(name);
  if (it == instances_.end()) return;
  Instance& i = it->second;
  if (status != "running") i.agent.reset();
  i.state = {.status = std::move(status),
             .running = i.agent.has_value(),
             .exit_code = exit_code,
             .oom_killed = oom_killed};
}

void FakeRuntime::KillAgent(const std::string& name, int signal) {
  std::lock_guard lock(mu_);
  auto it = instances_.find(name);
  if (it == instances_.end() || !it->second.agent) return;
  (void)it->second.agent->Kill(signal);
  (void)it->second.agent->Wait();
  it->second.agent.reset();
  it->second.state = {.status = "exited", .running = false, .exit_code = 128 + signal};
}

void FakeRuntime::SetEndedByMemoryLimit(const std::string& name, bool yes) {
  std::lock_guard lock(mu_);
  if (auto it = instances_.find(name); it != instances_.end()) it->second.memory_limit = yes;
}

void FakeRuntime::AddVolume(const std::string& name, Labels labels) {
  std::lock_guard lock(mu_);
  volumes_[name] = std::move(labels);
}

void FakeRuntime::AddImage(const std::string& ref, ImageConfig config) {
  std::lock_guard lock(mu_);
  images_[ref] = std::move(config);
}

void FakeRuntime::AddNetwork(const std::string& instance_name) {
  std::lock_guard lock(mu_);
  networks_.insert(instance_name);
}

bool FakeRuntime::HasInstance(const std::string& name) const {
  std::lock_guard lock(mu_);
  return instances_.count(name) > 0;
}

bool FakeRuntime::HasVolume(const std::string& name) const {
  std::lock_guard lock(mu_);
  return volumes_.count(name) > 0;
}

std::optional<InstanceSpec> FakeRuntime::CreatedSpec(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = created_.find(name);
  if (it == created_.end()) return std::nullopt;
  return it->second;
}

bool FakeRuntime::HasNetwork(const std::string& instance_name) const {
  std::lock_guard lock(mu_);
  return networks_.count(instance_name) > 0;
}

void FakeRuntime::FailNext(std::string op, Error error, int times) {
  std::lock_guard lock(mu_);
  for (int n = 0; n < times; ++n) failures_[op].push_back(error);
}

void FakeRuntime::FailNextFirstRelay() {
  std::lock_guard lock(mu_);
  fail_next_first_relay_ = true;
}

void FakeRuntime::FailNextRelaysWith(Error error, int reopens_failing) {
  std::lock_guard lock(mu_);
  relay_error_ = std::move(error);
  relay_error_reopens_ = reopens_failing;
}

void FakeRuntime::BreakNextAgent() {
  std::lock_guard lock(mu_);
  break_next_agent_ = true;
}

Result<std::string> FakeRuntime::RequireGvisor(std::string_view runtime, std::string_view platform,
                                               bool network_none) {
  std::lock_guard lock(mu_);
  if (auto e = Record("RequireGvisor", runtime)) return *e;
  if (runtime != "runsc") {
    return Error::InvalidArgument("sandboxes run only on gVisor: runtime " + std::string(runtime) +
                                  " on the fake host is not gVisor");
  }
  // The fake host registers the platforms as setup-host does: runsc, runsc-ptrace, and twins.
  std::string name(runtime);
  if (platform != "systrap") name += "-" + std::string(platform);
  return network_none ? name + "-none" : name;
}

Result<DiskCapSupport> FakeRuntime::ProbeDiskCap(std::string_view runtime, std::string_view) {
  std::lock_guard lock(mu_);
  if (auto e = Record("ProbeDiskCap", runtime)) return *e;
  return DiskCapSupport{.supported = false, .detail = "the fake runtime has no disk caps"};
}

Result<HostCapacity> FakeRuntime::Capacity() {
  std::lock_guard lock(mu_);
  if (auto e = Record("Capacity", host_)) return *e;
  return HostCapacity{.memory_bytes = 8LL << 30, .source = "fake"};
}

Result<std::string> FakeRuntime::PrepareImage(std::string_view image) {
  std::lock_guard lock(mu_);
  if (auto e = Record("PrepareImage", image)) return *e;
  return "fake/with-agent:" + std::string(image);
}

Result<StartedInstance> FakeRuntime::CreateAndStart(const InstanceSpec& spec, StepTrace& trace,
                                                    StderrSink) {
  std::lock_guard lock(mu_);
  if (auto e = Record("CreateAndStart", spec.name)) return *e;
  created_[spec.name] = spec;
  Reap();
  if (instances_.count(spec.name)) {
    return Error::Conflict("create container " + spec.name + ": the name is already in use");
  }
  if (spec.workspace && !volumes_.count(*spec.workspace)) {
    return Error::NotFound("create container " + spec.name + ": no volume " + *spec.workspace);
  }
  if (spec.argv.empty() || spec.argv[0] != kAgentPath) {
    return Error::InvalidArgument("fake: PID 1 must be the agent, not " +
                                  (spec.argv.empty() ? std::string("nothing") : spec.argv[0]));
  }
  Instance i;
  i.id = "fake" + std::to_string(next_id_++);
  i.name = spec.name;
  i.image = spec.image;
  i.labels = spec.labels;
  i.created_unix = static_cast<std::int64_t>(std::time(nullptr));
  i.remove_on_exit = spec.remove_on_exit;
  i.limits = {
      .cpus = spec.cpus, .memory_bytes = spec.memory_bytes, .pids = spec.pids, .source = "fake"};
  i.socket = dir_ + "/" + i.id + ".sock";
  std::vector<std::string> argv = spec.argv;
  argv[0] = agent_binary_;
  argv.insert(argv.begin() + 2, {"--socket", i.socket});
  if (std::exchange(break_next_agent_, false)) argv.push_back("--no-such-option");
  trace.Mark("create container");
  auto agent = AGVISOR_TRY(
      Subprocess::Spawn({.argv = std::move(argv), .pipe_stdin = true, .pipe_stdout = true}));
  auto stdio = AGVISOR_TRY(
      channel::FdTransport::Create(std::move(agent.stdout_fd()), std::move(agent.stdin_fd())));
  trace.Mark("start");
  i.agent.emplace(std::move(agent));
  i.state = {.status = "running", .running = true};
  StartedInstance started{.id = i.id, .stdio = std::move(stdio)};
  if (std::exchange(fail_next_first_relay_, false)) {
    int text[2], sink[2];
    if (::pipe2(text, O_CLOEXEC) != 0 || ::pipe2(sink, O_CLOEXEC) != 0) {
      return Error::FromErrno("fake: pipe", errno);
    }
    const std::string failed = "OCI runtime exec failed: exec failed: fake\r\n";
    (void)!::write(text[1], failed.data(), failed.size());
    ::close(text[1]);
    ::close(sink[0]);
    started.stdio = AGVISOR_TRY(channel::FdTransport::Create(UniqueFd(text[0]), UniqueFd(sink[1])));
    started.reopen = [this, name = spec.name] {
      return OpenExecStream(name, {std::string(kAgentPath), "connect", "--wait", "30"}, nullptr);
    };
  }
  if (relay_error_) {
    Error error = *std::exchange(relay_error_, std::nullopt);
    auto failing = std::make_shared<int>(std::exchange(relay_error_reopens_, 0));
    started.stdio = std::make_unique<FailedRelay>(error);
    started.reopen = [this, name = spec.name, error,
                      failing]() -> Result<std::unique_ptr<channel::Transport>> {
      if (*failing > 0) {
        --*failing;
        return std::unique_ptr<channel::Transport>(std::make_unique<FailedRelay>(error));
      }
      return OpenExecStream(name, {std::string(kAgentPath), "connect", "--wait", "30"}, nullptr);
    };
  }
  instances_.emplace(spec.name, std::move(i));
  return started;
}

Result<InstanceInfo> FakeRuntime::Inspect(std::string_view ref) {
  std::lock_guard lock(mu_);
  if (auto e = Record("Inspect", ref)) return *e;
  Instance* i = Find(ref);
  if (!i) return Error::NotFound("inspect container " + std::string(ref) + ": no such container");
  return InstanceInfo{.id = i->id,
                      .name = i->name,
                      .image_ref = i->image,
                      .labels = i->labels,
                      .state = i->state,
                      .created_unix = i->created_unix};
}

namespace {
Error NoImages(std::string_view what) {
  return Error::Unsupported(std::string(what) +
                            ": the fake runtime makes no images (snapshots need a Docker host)");
}
}  // namespace

Result<ImageConfig> FakeRuntime::ImageConfigOf(std::string_view image) {
  std::lock_guard lock(mu_);
  if (auto e = Record("ImageConfigOf", image)) return *e;
  if (auto it = images_.find(std::string(image)); it != images_.end()) return it->second;
  return NoImages("inspect image " + std::string(image));
}
Result<std::string> FakeRuntime::ImportImage(std::string_view ref, const ImageConfig&,
                                             const channel::ByteSource&,
                                             const std::function<void(std::string_view)>&) {
  std::lock_guard lock(mu_);
  if (auto e = Record("ImportImage", ref)) return *e;
  return NoImages("import image " + std::string(ref));
}
Result<std::vector<ImageEntry>> FakeRuntime::ImagesWithLabel(std::string_view label) {
  return NoImages("list images labelled " + std::string(label));
}
Result<bool> FakeRuntime::RemoveImage(std::string_view ref) {
  return NoImages("remove image " + std::string(ref));
}

Result<void> FakeRuntime::Pause(std::string_view id) {
  std::lock_guard lock(mu_);
  if (auto e = Record("Pause", id)) return *e;
  Instance* i = Find(id);
  if (!i) return Error::NotFound("pause container " + std::string(id) + ": no such container");
  Refresh(*i);
  if (!i->agent || i->state.status != "running") {
    return Error::Conflict("pause container " + std::string(id) + ": it is " + i->state.status);
  }
  AGVISOR_RETURN_IF_ERROR(i->agent->Kill(SIGSTOP));
  i->state.status = "paused";
  return Ok();
}

Result<void> FakeRuntime::Unpause(std::string_view id) {
  std::lock_guard lock(mu_);
  if (auto e = Record("Unpause", id)) return *e;
  Instance* i = Find(id);
  if (!i) return Error::NotFound("unpause container " + std::string(id) + ": no such container");
  if (!i->agent || i->state.status != "paused") {
    return Error::Conflict("unpause container " + std::string(id) + ": it is not paused");
  }
  AGVISOR_RETURN_IF_ERROR(i->agent->Kill(SIGCONT));
  i->state.status = "running";
  return Ok();
}

Result<std::vector<InstanceSummary>> FakeRuntime::List(
    const std::vector<std::string>& label_filters) {
  std::lock_guard lock(mu_);
  if (auto e = Record("List", "")) return *e;
  std::vector<InstanceSummary> out;
  Reap();
  for (auto& [name, i] : instances_) {
    bool all = true;
    for (const auto& f : label_filters) all = all && Matches(i.labels, f);
    if (!all) continue;
    out.push_back({.id = i.id,
                   .name = i.name,
                   .image = i.image,
                   .status = i.state.status,
                   .labels = i.labels,
                   .created_unix = i.created_unix,
                   .helper = i.helper});
  }
  return out;
}

Result<bool> FakeRuntime::Remove(std::string_view ref) {
  std::lock_guard lock(mu_);
  if (auto e = Record("Remove", ref)) return *e;
  Instance* i = Find(ref);
  if (!i) return false;
  instances_.erase(i->name);  // kills and reaps its agent
  return true;
}

void FakeRuntime::WaitNotRunning(std::string_view id, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      Instance* i = Find(id);
      if (!i || !i->state.running) return;
    }
    if (std::chrono::steady_clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<LiveLimits> FakeRuntime::Resize(std::string_view id, const ResizeSpec& spec) {
  std::lock_guard lock(mu_);
  if (auto e = Record("Resize", id)) return *e;
  Instance* i = Find(id);
  if (!i) return Error::NotFound("resize container " + std::string(id) + ": no such container");
  Refresh(*i);
  if (!i->state.running) {
    return Error::Conflict("resize container " + std::string(id) + ": it is " + i->state.status);
  }
  if (spec.cpus) i->limits.cpus = *spec.cpus;
  if (spec.memory_bytes) i->limits.memory_bytes = *spec.memory_bytes;
  if (spec.pids) i->limits.pids = *spec.pids;
  return i->limits;
}

Result<SandboxStats> FakeRuntime::Stats(std::string_view id) {
  return Error::Unsupported("stats of container " + std::string(id) +
                            ": the fake runtime has none");
}

Result<LiveLimits> FakeRuntime::ReadLimits(std::string_view id) {
  std::lock_guard lock(mu_);
  if (auto e = Record("ReadLimits", id)) return *e;
  Instance* i = Find(id);
  if (!i) return Error::NotFound("limits of container " + std::string(id) + ": no such container");
  Refresh(*i);
  if (!i->state.running) {
    return Error::Conflict("limits of container " + std::string(id) + ": it is " + i->state.status);
  }
  return i->limits;
}

bool FakeRuntime::EndedByMemoryLimit(std::string_view id) {
  std::lock_guard lock(mu_);
  Record("EndedByMemoryLimit", id);
  Instance* i = Find(id);
  return i && i->memory_limit;
}

std::vector<std::string> FakeRuntime::LocalArgv(const Instance& i,
                                                const std::vector<std::string>& argv) {
  std::vector<std::string> out = argv;
  if (!out.empty() && out[0] == kAgentPath) {
    out[0] = agent_binary_;
    if (out.size() > 1 && out[1] == "connect") out.insert(out.begin() + 2, {"--socket", i.socket});
  }
  return out;
}

Result<std::vector<std::string>> FakeRuntime::ExecArgv(std::string_view op, std::string_view id,
                                                       const std::vector<std::string>& argv) {
  std::lock_guard lock(mu_);
  if (auto e = Record(op, id)) return *e;
  Instance* i = Find(id);
  if (!i) return Error::NotFound("exec in container " + std::string(id) + ": no such container");
  if (!i->state.running) {
    return Error::Conflict("exec in container " + std::string(id) + ": it is not running");
  }
  if (i->state.status == "paused") {  // Docker's words
    return Error::Conflict("exec in container " + std::string(id) + ": container " +
                           std::string(id) + " is paused, unpause the container before exec");
  }
  return LocalArgv(*i, argv);
}

Result<std::unique_ptr<channel::Transport>> FakeRuntime::OpenExecStream(
    std::string_view id, const std::vector<std::string>& argv, StderrSink) {
  std::vector<std::string> local = AGVISOR_TRY(ExecArgv("OpenExecStream", id, argv));
  // The relay's own log lines go to the test's stderr.
  auto p = AGVISOR_TRY(
      Subprocess::Spawn({.argv = std::move(local), .pipe_stdin = true, .pipe_stdout = true}));
  auto fds =
      AGVISOR_TRY(channel::FdTransport::Create(std::move(p.stdout_fd()), std::move(p.stdin_fd())));
  return std::unique_ptr<channel::Transport>(
      std::make_unique<ProcessTransport>(std::move(p), std::move(fds)));
}

Result<int> FakeRuntime::RunExec(std::string_view id, const std::vector<std::string>& argv,
                                 const OutputSink& on_stdout, const StderrSink& on_stderr) {
  std::vector<std::string> local = AGVISOR_TRY(ExecArgv("RunExec", id, argv));
  auto p = AGVISOR_TRY(Subprocess::Spawn(
      {.argv = std::move(local), .pipe_stdin = true, .pipe_stdout = true, .pipe_stderr = true}));
  pollfd fds[2] = {{p.stdout_fd().get(), POLLIN, 0}, {p.stderr_fd().get(), POLLIN, 0}};
  int open = 2;
  char buf[65536];
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return Error::FromErrno("fake exec: poll", errno);
    }
    for (int n = 0; n < 2; ++n) {
      if (fds[n].fd < 0 || fds[n].revents == 0) continue;
      const ssize_t got = ::read(fds[n].fd, buf, sizeof buf);
      if (got <= 0) {
        fds[n].fd = -1;
        --open;
        continue;
      }
      const std::string_view bytes(buf, static_cast<std::size_t>(got));
      if (n == 0) {
        AGVISOR_RETURN_IF_ERROR(on_stdout(bytes));  // `p` is killed and reaped on return
      } else {
        on_stderr(bytes);
      }
    }
  }
  p.stdin_fd() = UniqueFd();
  auto st = AGVISOR_TRY(p.Wait());
  return st.signaled() ? 128 + st.signal : st.exit_code;
}

Result<bool> FakeRuntime::EnsureVolume(std::string_view name, const Labels& labels) {
  std::lock_guard lock(mu_);
  if (auto e = Record("EnsureVolume", name)) return *e;
  return volumes_.emplace(std::string(name), labels).second;
}

// A read: not recorded, so the steps tests pin stay those that change the host.
Result<std::optional<Labels>> FakeRuntime::VolumeLabels(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = volumes_.find(std::string(name));
  if (it == volumes_.end()) return std::optional<Labels>();
  return std::optional<Labels>(it->second);
}

// A read: not recorded.
Result<std::map<std::string, Labels>> FakeRuntime::VolumesWithLabel(std::string_view label) {
  std::lock_guard lock(mu_);
  std::map<std::string, Labels> out;
  for (const auto& [name, labels] : volumes_) {
    if (labels.count(std::string(label))) out[name] = labels;
  }
  return out;
}

Result<bool> FakeRuntime::RemoveVolume(std::string_view name) {
  std::lock_guard lock(mu_);
  if (auto e = Record("RemoveVolume", name)) return *e;
  return volumes_.erase(std::string(name)) > 0;
}

Result<SandboxNetwork> FakeRuntime::EnsureEgressNetwork(std::string_view name,
                                                        const egress::EgressRules&, const Labels&) {
  std::lock_guard lock(mu_);
  if (auto e = Record("EnsureEgressNetwork", name)) return *e;
  networks_.insert(std::string(name));
  return SandboxNetwork{.name = std::string(name) + "-egress",
                        .id = std::string(name) + "-egress",
                        .gateway = "127.0.0.1"};
}

Result<void> FakeRuntime::RemoveEgressNetwork(std::string_view name) {
  std::lock_guard lock(mu_);
  if (auto e = Record("RemoveEgressNetwork", name)) return *e;
  networks_.erase(std::string(name));
  return Ok();
}

}  // namespace agvisor
