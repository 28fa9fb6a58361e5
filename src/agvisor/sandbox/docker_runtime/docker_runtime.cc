#include "agvisor/sandbox/docker_runtime/docker_runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <thread>

#include "agvisor/docker/client.h"
#include "agvisor/sandbox/agent_paths.h"
#include "agvisor/sandbox/docker_runtime/agent_image.h"
#include "agvisor/sandbox/docker_runtime/cgroup_limits.h"
#include "agvisor/sandbox/docker_runtime/egress_bridge.h"
#include "agvisor/sandbox/docker_runtime/host_caps.h"
#include "agvisor/sandbox/docker_runtime/runtime_check.h"
#include "agvisor/sandbox/docker_runtime/sentry_pids.h"
#include "agvisor/sandbox/docker_runtime/snapshot_layers.h"
#include "agvisor/sandbox/instance_spec.h"

namespace agvisor {
namespace {

// Docker's RFC 3339 times ("2026-12-02T04:41:50.123456789Z", always UTC) to whole seconds since
// the epoch; 0 when it is not one.
std::int64_t UnixSecondsOf(const std::string& rfc3339) {
  std::tm tm{};
  const char* end = ::strptime(rfc3339.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return 0;
  return static_cast<std::int64_t>(::timegm(&tm));
}

// A process's stdio over a Docker stream (PID 1's attach, or an exec): its stdin and its
// demultiplexed stdout; stderr goes to `on_stderr`.
class DockerStreamTransport : public channel::Transport {
 public:
  DockerStreamTransport(std::unique_ptr<docker::ExecStream> stream, StderrSink on_stderr)
      : stream_(std::move(stream)), on_stderr_(std::move(on_stderr)) {}
  ~DockerStreamTransport() override { Close(); }
  Result<std::size_t> Read(std::span<char> buf) override {
    return stream_->ReadStdout(buf, on_stderr_);
  }
  Result<void> Write(std::string_view data) override {
    auto r = stream_->Write(data);
    if (!r.ok()) return Error::Unavailable(r.error().message());
    return Ok();
  }
  void Close() override { stream_->Close(); }

 private:
  std::unique_ptr<docker::ExecStream> stream_;
  StderrSink on_stderr_;
};

// Whether a create failed only because Docker does not know the twin after all (unregistered
// since the runtime list was read): "Unknown runtime specified X" up to Docker 22; "unknown or
// invalid runtime name: X" later.
bool MissingTwin(const Error& e, const std::string& twin) {
  if (e.code() != ErrorCode::kInvalidArgument) return false;
  const std::string& m = e.message();
  const bool unknown = m.find("nknown runtime") != std::string::npos ||
                       m.find("invalid runtime name") != std::string::npos;
  return unknown && m.find(twin) != std::string::npos;
}

}  // namespace

docker::ContainerConfig ToContainerConfig(const InstanceSpec& spec) {
  docker::ContainerConfig c;
  c.image = spec.image;
  if (!spec.argv.empty()) {
    c.entrypoint = {spec.argv.front()};
    c.cmd.assign(spec.argv.begin() + 1, spec.argv.end());
  }
  c.env = spec.env;
  c.working_dir = spec.working_dir;
  c.labels = spec.labels;
  // PID 1's stdio carries the creating client's channel (docs/protocol.md): stdin kept open
  // across attaches, never closed by a detaching client, never written to a log file.
  c.open_stdin = true;
  c.attach_stdin = c.attach_stdout = c.attach_stderr = true;
  c.stdin_once = false;
  // With the twin, the agent puts the localhost lines Docker would have written into the then
  // empty /etc/hosts (agent/hosts.h).
  c.network_disabled = spec.runtime != PlatformRuntimeOf(spec.requested_runtime, spec.platform);
  auto& h = c.host_config;
  h.runtime = spec.runtime;
  h.nano_cpus = static_cast<std::int64_t>(std::llround(spec.cpus * 1e9));
  h.memory = spec.memory_bytes;
  h.memory_swap = h.memory;  // no swap
  h.pids_limit = spec.pids;
  h.network_mode = spec.network;
  h.dns = spec.dns;
  h.shm_size = spec.shm_bytes;
  h.auto_remove = spec.remove_on_exit;
  // Setuid programs start with the caller's rights unless the spec lets them work (sudo).
  if (!spec.allow_setuid) h.security_opt = {"no-new-privileges"};
  h.cap_drop = {"ALL"};
  h.cap_add.assign(kSandboxCapabilities.begin(), kSandboxCapabilities.end());
  h.log_driver = "none";
  if (spec.disk_cap) h.annotations["dev.gvisor.flag.overlay2"] = "root:self,size=" + *spec.disk_cap;
  if (spec.workspace) {
    h.mounts.push_back(
        {.type = "volume", .source = *spec.workspace, .target = std::string(kWorkspace)});
  }
  return c;
}

Result<std::shared_ptr<docker::Client>> ConnectDockerHost(std::string_view host) {
  http::ClientOptions options;
  options.ssh_args = HostSshArgs();  // $AGVISOR_SSH_ARGS
  return docker::Client::Connect(host, options);
}

DockerRuntime::DockerRuntime(std::string host, std::shared_ptr<docker::Client> client)
    : host_(std::move(host)), client_(std::move(client)) {}

DockerRuntime::~DockerRuntime() = default;

Result<StartedInstance> DockerRuntime::CreateAndStart(const InstanceSpec& spec, StepTrace& trace,
                                                      StderrSink on_stderr) {
  if (spec.network != "none") {
    // A network the sandbox firewall does not cover, one not made for sandboxes, or an egress
    // network this create did not make, is refused; so is any network on a host known to be
    // without the firewall (egress_network.h).
    if (spec.network != "bridge") {
      AGVISOR_RETURN_IF_ERROR(CheckJoinableNetwork(*client_, spec.network, spec.egress_network_id));
    }
    AGVISOR_RETURN_IF_ERROR(RequireFirewall(host_, Firewall()));
  }
  docker::ContainerConfig c = ToContainerConfig(spec);
  bool remade = false;
  for (;;) {
    auto id = client_->CreateContainer(c, spec.name);
    trace.Mark("create container");
    if (!id.ok()) {
      if (c.network_disabled && MissingTwin(id.error(), spec.runtime)) {
        ForgetHostRuntimes(runtimes_);
        // No twin on this host: network none on the platform's runtime.
        c.host_config.runtime = PlatformRuntimeOf(spec.requested_runtime, spec.platform);
        c.network_disabled = false;
        continue;
      }
      if (id.error().code() == ErrorCode::kNotFound && !remade) {
        // The prepared image this process knew was removed meanwhile (pruned by a client with
        // another agent build, or by hand): make it again, once.
        remade = true;
        ForgetAgentImage(agent_images_, c.image);
        c.image = AGVISOR_TRY(EnsureAgentImage(agent_images_, *client_, spec.source_image));
        continue;
      }
      return id.error();
    }
    auto start = [&]() -> Result<StartedInstance> {
      auto stream = AGVISOR_TRY(client_->AttachContainer(*id, true, true, true));
      trace.Mark("attach");
      AGVISOR_RETURN_IF_ERROR(client_->StartContainer(*id));
      trace.Mark("start");
      return StartedInstance{.id = *id,
                             .stdio = std::make_unique<DockerStreamTransport>(
                                 std::move(stream), std::move(on_stderr))};
    };
    auto started = start();
    if (!started.ok())
      (void)client_->RemoveContainer(*id, /*force=*/true, /*remove_volumes=*/false);
    return started;
  }
}

Result<std::string> DockerRuntime::RequireGvisor(std::string_view runtime,
                                                 std::string_view platform, bool network_none) {
  return RequireGvisorRuntime(runtimes_, host_, *client_, runtime, platform, network_none);
}

Result<std::string> DockerRuntime::DefaultPlatform(std::string_view runtime, std::string* warning) {
  auto platform = AGVISOR_TRY(DefaultPlatformOf(runtimes_, host_, *client_, runtime));
  if (!platform.fallback_reason.empty() && !platform_fallback_warned_.exchange(true)) {
    *warning = platform.fallback_reason;
  }
  return platform.platform;
}

Result<DiskCapSupport> DockerRuntime::ProbeDiskCap(std::string_view runtime,
                                                   std::string_view image) {
  return agvisor::ProbeDiskCap(disk_caps_, *client_, runtime, image);
}

Result<HostCapacity> DockerRuntime::Capacity() {
  auto info = AGVISOR_TRY(client_->Info());
  return HostCapacity{.memory_bytes = info.mem_total, .source = "docker info MemTotal"};
}

Result<std::string> DockerRuntime::PrepareImage(std::string_view image) {
  return EnsureAgentImage(agent_images_, *client_, image);
}

Result<InstanceInfo> DockerRuntime::Inspect(std::string_view ref) {
  auto c = AGVISOR_TRY(client_->InspectContainer(ref));
  return InstanceInfo{.id = std::move(c.id),
                      .name = std::move(c.name),
                      .image_ref = std::move(c.image_ref),
                      .labels = std::move(c.labels),
                      .state = {.status = c.state.status,
                                .running = c.state.running,
                                .exit_code = c.state.exit_code,
                                .oom_killed = c.state.oom_killed},
                      .created_unix = UnixSecondsOf(c.created)};
}

Result<void> DockerRuntime::Pause(std::string_view id) { return client_->PauseContainer(id); }

Result<void> DockerRuntime::Unpause(std::string_view id) { return client_->UnpauseContainer(id); }

Result<LiveLimits> DockerRuntime::Resize(std::string_view id, const ResizeSpec& spec) {
  const std::string shown = host_.empty() ? "this machine's Docker" : host_;
  // Docker's own update (POST /containers/{id}/update) asks the runtime, and runsc 20240729 has
  // no `update` subcommand ("exit status 128"): the cgroup files are written here instead, which
  // needs them on this machine.
  if (client_->endpoint().kind != http::Endpoint::Kind::kUnix) {
    return Error::Unsupported(
        "resize " + std::string(id) + " on " + shown +
        ": a live resize writes the sandbox's cgroup files on the Docker host, which this "
        "client cannot reach over " +
        (client_->endpoint().kind == http::Endpoint::Kind::kSsh ? "ssh" : "tcp") +
        " (runsc has no update command for Docker to call); resize it through the agvisord on "
        "that host (agvisor --server ssh://HOST/... update)");
  }
  auto c = AGVISOR_TRY(client_->InspectContainer(id));
  if (!c.state.running) {
    return Error::Conflict("resize " + c.name + ": it is " + c.state.status + ", not running");
  }
  auto paths = FindContainerCgroup(c.id, c.state.pid);
  if (!paths.ok()) {
    if (paths.error().code() != ErrorCode::kNotFound) return paths.error();
    return Error::Unsupported("resize " + c.name + " on " + shown + ": " + paths.error().message() +
                              "; the Docker socket leads to another machine or cgroup namespace "
                              "(resize through the agvisord next to that Docker)");
  }
  auto r = ApplyCgroupResize(*paths, spec);
  if (!r.ok()) return r.error().WithContext(c.name);
  return r;
}

Result<SandboxStats> DockerRuntime::Stats(std::string_view id) {
  auto sample = AGVISOR_TRY(client_->GetContainerStats(id));
  // Docker's pids are the host cgroup's (gVisor's host tasks): in the sandbox's terms by its
  // platform, and the processes now exactly from gVisor where this machine runs it.
  auto c = AGVISOR_TRY(client_->InspectContainer(id));
  auto platform = c.labels.find(std::string(kLabelPlatform));
  SandboxPidsInStats(platform == c.labels.end() ? "" : platform->second, sample);
  if (client_->endpoint().kind == http::Endpoint::Kind::kUnix && c.state.running) {
    if (auto inside = ReadSentryPids(c.id, c.state.pid); inside.ok()) {
      sample.pids = static_cast<std::uint64_t>(*inside);
    }
  }
  return sample;
}

Result<LiveLimits> DockerRuntime::ReadLimits(std::string_view id) {
  auto c = AGVISOR_TRY(client_->InspectContainer(id));
  if (!c.state.running) {
    return Error::Conflict("limits of " + c.name + ": it is " + c.state.status + ", not running");
  }
  if (client_->endpoint().kind == http::Endpoint::Kind::kUnix) {
    if (auto paths = FindContainerCgroup(c.id, c.state.pid); paths.ok()) {
      if (auto l = ReadCgroupLimits(*paths); l.ok()) return l;
    }
  }
  const auto& h = c.host_config;
  return LiveLimits{.cpus = static_cast<double>(h.nano_cpus) / 1e9,
                    .memory_bytes = h.memory,
                    .pids = h.pids_limit > 0 ? h.pids_limit : 0,
                    .source = "created"};
}

Result<std::vector<InstanceSummary>> DockerRuntime::List(
    const std::vector<std::string>& label_filters) {
  auto list = AGVISOR_TRY(client_->ListContainers(/*all=*/true, label_filters));
  std::vector<InstanceSummary> out;
  out.reserve(list.size());
  for (auto& c : list) {
    InstanceSummary s;
    s.id = std::move(c.id);
    if (!c.names.empty()) s.name = std::move(c.names.front());
    s.image = std::move(c.image);
    s.status = std::move(c.state);
    s.created_unix = c.created;
    // Adding the agent to an image (agent_image.h), not a sandbox.
    auto it = c.labels.find("agvisor.agent");
    s.helper = it != c.labels.end() && it->second == "filler";
    s.labels = std::move(c.labels);
    out.push_back(std::move(s));
  }
  return out;
}

Result<bool> DockerRuntime::Remove(std::string_view ref) {
  auto r = client_->RemoveContainer(ref, /*force=*/true, /*remove_volumes=*/false);
  if (!r.ok() && r.error().code() != ErrorCode::kNotFound &&
      r.error().code() != ErrorCode::kConflict) {
    // Docker cannot kill a paused runsc sandbox ("PID ... is zombie and can not be killed",
    // measured with runsc 20240729), and the failed kill already leaves it listed as not paused
    // ("docker unpause" then says "is not paused"; a second forced removal succeeds, measured
    // with the docker CLI). So: thaw it whatever Inspect says, and try again, 5 s in all.
    for (int attempt = 0; attempt < 25; ++attempt) {
      (void)client_->UnpauseContainer(ref);
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      r = client_->RemoveContainer(ref, /*force=*/true, /*remove_volumes=*/false);
      if (r.ok() || r.error().code() == ErrorCode::kNotFound ||
          r.error().code() == ErrorCode::kConflict) {
        break;
      }
    }
  }
  if (r.ok()) return true;
  if (r.error().code() == ErrorCode::kNotFound) return false;
  if (r.error().code() == ErrorCode::kConflict) return true;  // removal already in progress
  return r.error();
}

void DockerRuntime::WaitNotRunning(std::string_view id, std::chrono::milliseconds timeout) {
  (void)client_->WaitContainer(id, "not-running", timeout);
}

// Docker sets State.OOMKilled only when the runtime's OOM event arrives before the exit; under
// runsc it sometimes comes just after (seen on a loaded host), and then only the event log says
// so. Asked once, and again half a second later when the event may still be on its way.
bool DockerRuntime::EndedByMemoryLimit(std::string_view id) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    auto actions = client_->ContainerEventActions(id, now - 600, now);
    if (!actions.ok()) return false;
    if (std::find(actions->begin(), actions->end(), "oom") != actions->end()) return true;
  }
  return false;
}

Result<std::unique_ptr<channel::Transport>> DockerRuntime::OpenExecStream(
    std::string_view id, const std::vector<std::string>& argv, StderrSink on_stderr) {
  docker::ExecConfig ec;
  ec.cmd = argv;
  ec.attach_stdin = true;
  auto exec_id = AGVISOR_TRY(client_->CreateExec(id, ec));
  auto stream = AGVISOR_TRY(client_->StartExec(exec_id, /*tty=*/false));
  return std::unique_ptr<channel::Transport>(
      std::make_unique<DockerStreamTransport>(std::move(stream), std::move(on_stderr)));
}

Result<int> DockerRuntime::RunExec(std::string_view id, const std::vector<std::string>& argv,
                                   const OutputSink& on_stdout, const StderrSink& on_stderr) {
  docker::ExecConfig ec;
  ec.cmd = argv;
  // Docker keeps an exec running (and drains its output) after its client went away: stdin is
  // held open so the process can watch it, and closed with the stream when `on_stdout` stops.
  ec.attach_stdin = true;
  return client_->StreamExec(id, ec, std::nullopt, [&](docker::StreamPiece& p) -> Result<void> {
    if (p.stream != docker::StreamKind::kStderr) return on_stdout(p.bytes);
    on_stderr(p.bytes);
    return Ok();
  });
}

Result<int> DockerRuntime::RunExecWithInput(std::string_view id,
                                            const std::vector<std::string>& argv, std::string input,
                                            const OutputSink& on_stdout,
                                            const StderrSink& on_stderr) {
  docker::ExecConfig ec;
  ec.cmd = argv;
  ec.attach_stdin = true;  // held open after the input, as RunExec holds it
  return client_->StreamExec(
      id, ec, std::move(input),
      [&](docker::StreamPiece& p) -> Result<void> {
        if (p.stream != docker::StreamKind::kStderr) return on_stdout(p.bytes);
        on_stderr(p.bytes);
        return Ok();
      },
      /*keep_stdin_open=*/true);
}

Result<SnapshotBase> DockerRuntime::SnapshotBaseOf(std::string_view id,
                                                   const std::vector<std::string>& excludes) {
  const std::string what = "layered snapshot of " + std::string(id);
  // The image's files are read where Docker keeps them: this machine's Docker only.
  if (client_->endpoint().kind != http::Endpoint::Kind::kUnix) {
    return Error::Unsupported(what +
                              ": the image's files are on the Docker host, which this "
                              "client does not reach over ssh or tcp");
  }
  const docker::ContainerInfo c = AGVISOR_TRY(client_->InspectContainer(id));
  if (c.merged_dir.empty()) {
    return Error::Unsupported(what +
                              ": Docker's storage driver shows no merged root (overlay2 "
                              "does)");
  }
  const docker::ImageInfo image = AGVISOR_TRY(client_->InspectImage(c.image));
  SnapshotBase base;
  base.layers = AGVISOR_TRY(
      SnapshotLayersOf(image.layers, image.labels.contains(std::string(kAgentImageLabel))));
  const auto since = SecondsDotNanos(c.created);
  if (!since) return Error::Unsupported(what + ": Docker's creation time '" + c.created + "'");
  base.since = *since;
  auto tree = ListImageTree(c.merged_dir, excludes, &base.tree_entries);
  if (!tree.ok()) {
    const ErrorCode code = tree.error().code();
    // Another machine's or namespace's Docker behind a local socket, or a user who may not
    // read Docker's directories: the whole file system goes instead.
    if (code == ErrorCode::kNotFound || code == ErrorCode::kPermissionDenied) {
      return Error::Unsupported(what + ": " + tree.error().message());
    }
    return tree.error().WithContext(what);
  }
  base.tree = std::move(tree).value();
  return base;
}

Result<std::string> DockerRuntime::LoadLayeredImage(std::string_view ref, const ImageConfig& config,
                                                    const std::vector<std::string>& base_layers,
                                                    const channel::ByteSource& layer) {
  return agvisor::LoadLayeredImage(*client_, ref, config, base_layers, layer);
}

Result<std::optional<Labels>> DockerRuntime::VolumeLabels(std::string_view name) {
  auto v = client_->InspectVolume(name);
  if (!v.ok()) {
    if (v.error().code() == ErrorCode::kNotFound) return std::optional<Labels>();
    return v.error();
  }
  return std::optional<Labels>(std::move(v->labels));
}

namespace {

// A value for a Dockerfile line of the import's `changes`: in double quotes, with '\\', '"'
// and '$' escaped (the daemon expands variables in ENV, WORKDIR, USER and LABEL: an escaped '$'
// stays a '$'). The changes are joined with newlines before they are parsed, so a value with a
// newline (or any control character) could add a line of its own: refused.
Result<std::string> Quoted(std::string_view what, std::string_view value) {
  std::string out = "\"";
  for (char c : value) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Error::InvalidArgument("snapshot: " + std::string(what) +
                                    " holds a control character (a newline?), which an image "
                                    "import cannot carry; change it before the snapshot");
    }
    if (c == '\\' || c == '"' || c == '$') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

bool NameChars(std::string_view s, std::string_view extra) {
  if (s.empty() || s.size() > 255) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || extra.find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<std::vector<std::string>> ImportChanges(const ImageConfig& config) {
  std::vector<std::string> out;
  for (const std::string& kv : config.env) {
    const auto eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    if (eq == std::string::npos || !NameChars(key, "") || (key[0] >= '0' && key[0] <= '9')) {
      return Error::InvalidArgument("snapshot: environment entry '" + kv.substr(0, 64) +
                                    "' is not NAME=VALUE with a plain NAME");
    }
    out.push_back("ENV " + key + "=" +
                  AGVISOR_TRY(Quoted("environment variable " + key, kv.substr(eq + 1))));
  }
  if (!config.working_dir.empty()) {
    out.push_back("WORKDIR " + AGVISOR_TRY(Quoted("the working directory", config.working_dir)));
  }
  if (!config.user.empty()) {
    out.push_back("USER " + AGVISOR_TRY(Quoted("the user", config.user)));
  }
  for (const auto& [k, v] : config.labels) {
    if (!NameChars(k, ".-/")) {
      return Error::InvalidArgument("snapshot: label name '" + k.substr(0, 64) +
                                    "' has characters other than letters, digits and ._-/");
    }
    out.push_back("LABEL " + k + "=" + AGVISOR_TRY(Quoted("label " + k, v)));
  }
  return out;
}

Result<ImageConfig> DockerRuntime::ImageConfigOf(std::string_view image) {
  auto info = AGVISOR_TRY(client_->InspectImage(image));
  return ImageConfig{.env = std::move(info.env),
                     .working_dir = std::move(info.working_dir),
                     .user = std::move(info.user),
                     .labels = std::move(info.labels)};
}

Result<std::string> DockerRuntime::ImportImage(
    std::string_view ref, const ImageConfig& config, const channel::ByteSource& tar,
    const std::function<void(std::string_view)>& progress) {
  // "repo:tag": the tag is after the last ':' that follows the last '/' (a registry's port is
  // not a tag).
  const auto slash = ref.rfind('/');
  const auto colon = ref.rfind(':');
  if (colon == std::string_view::npos || (slash != std::string_view::npos && colon < slash)) {
    return Error::InvalidArgument("import image " + std::string(ref) + ": needs a tag (repo:tag)");
  }
  auto changes = AGVISOR_TRY(ImportChanges(config));
  return client_->ImportImage(ref.substr(0, colon), ref.substr(colon + 1), tar, progress, changes);
}

Result<std::vector<ImageEntry>> DockerRuntime::ImagesWithLabel(std::string_view label) {
  auto images = AGVISOR_TRY(client_->ListImages({std::string(label)}));
  std::vector<ImageEntry> out;
  for (auto& i : images) {
    // Docker 20.10 lists an untagged image with the tag "<none>:<none>".
    std::erase(i.repo_tags, "<none>:<none>");
    out.push_back(ImageEntry{.id = std::move(i.id),
                             .tags = std::move(i.repo_tags),
                             .labels = std::move(i.labels),
                             .created_unix = i.created,
                             .size_bytes = i.size});
  }
  return out;
}

Result<std::vector<ImageEntry>> DockerRuntime::DerivedImagesOf(std::string_view image_id) {
  // Every agent build's image with the agent of `image_id` (its name says whose), in use or not.
  const std::string prefix = AgentImageRefPrefix(image_id);
  std::vector<ImageEntry> out;
  for (ImageEntry& e : AGVISOR_TRY(ImagesWithLabel(kAgentImageLabel))) {
    if (std::any_of(e.tags.begin(), e.tags.end(),
                    [&](const std::string& t) { return t.starts_with(prefix); })) {
      out.push_back(std::move(e));
    }
  }
  return out;
}

Result<bool> DockerRuntime::RemoveImage(std::string_view ref) {
  auto r = client_->RemoveImage(ref, /*force=*/false);
  if (r.ok() || r.error().code() == ErrorCode::kNotFound) {
    // A derived image removed by its name is made again when next needed.
    ForgetAgentImage(agent_images_, ref);
  }
  if (r.ok()) return true;
  if (r.error().code() == ErrorCode::kNotFound) return false;
  return r.error();
}

Result<bool> DockerRuntime::EnsureVolume(std::string_view name, const Labels& labels) {
  auto had = client_->InspectVolume(name);
  if (!had.ok() && had.error().code() != ErrorCode::kNotFound) return had.error();
  AGVISOR_RETURN_IF_ERROR(client_->CreateVolume(name, labels));
  return !had.ok();
}

// Docker releases a volume a moment after its container is gone: retry while it says "in use".
Result<std::map<std::string, Labels>> DockerRuntime::VolumesWithLabel(std::string_view label) {
  auto list = AGVISOR_TRY(client_->ListVolumes({std::string(label)}));
  std::map<std::string, Labels> out;
  for (auto& v : list) out[v.name] = std::move(v.labels);
  return out;
}

Result<bool> DockerRuntime::RemoveVolume(std::string_view name) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (;;) {
    // Not forced: a forced removal of a volume still in use returns success and keeps it.
    auto r = client_->RemoveVolume(name, /*force=*/false);
    if (r.ok()) return true;
    if (r.error().code() == ErrorCode::kNotFound) return false;
    if (r.error().code() != ErrorCode::kConflict || std::chrono::steady_clock::now() > deadline) {
      return r.error();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Result<SandboxNetwork> DockerRuntime::EnsureEgressNetwork(std::string_view name,
                                                          const egress::EgressRules& rules,
                                                          const Labels& labels) {
  // Before anything is made: without the firewall an egress sandbox reaches its gateway's ports.
  AGVISOR_RETURN_IF_ERROR(RequireFirewall(host_, Firewall()));
  auto net = AGVISOR_TRY(agvisor::EnsureEgressNetwork(*client_, name, rules, labels));
  // Up before the sandbox runs: with no enforcer the sandbox would start cut off.
  AGVISOR_RETURN_IF_ERROR(WaitForEnforcer(host_, net.gateway, std::chrono::seconds(10)));
  return SandboxNetwork{.name = net.name, .id = net.id, .gateway = net.gateway};
}

Result<void> DockerRuntime::CheckEgressSupport() {
  const http::Endpoint& ep = client_->endpoint();
  if (ep.kind != http::Endpoint::Kind::kTcp) return Ok();
  return Error::Unsupported("egress policies on " + ep.ToString() +
                            ": agvisor cannot check the enforcer of a tcp:// Docker host; reach "
                            "that host over ssh://USER@HOST (with agvisord running there)");
}

FirewallStatus DockerRuntime::Firewall() {
  if (client_->endpoint().kind != http::Endpoint::Kind::kSsh) return HostFirewallStatus(host_);
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(firewall_mu_);
    if (firewall_ && now - firewall_->second < std::chrono::minutes(1)) return firewall_->first;
  }
  FirewallStatus status = HostFirewallStatus(host_);
  std::lock_guard lock(firewall_mu_);
  firewall_.emplace(status, now);
  return status;
}

Result<std::string> DockerRuntime::CreateSharedNetwork(std::string_view name) {
  return CreateUserNetwork(*client_, name);
}

Result<std::map<std::string, std::int64_t>> DockerRuntime::VolumeSizes() {
  std::map<std::string, std::int64_t> out;
  for (const auto& v : AGVISOR_TRY(client_->VolumeSizes())) out[v.name] = v.size.value_or(-1);
  return out;
}

Result<void> DockerRuntime::RemoveEgressNetwork(std::string_view name) {
  return agvisor::RemoveEgressNetwork(*client_, name);
}

}  // namespace agvisor
