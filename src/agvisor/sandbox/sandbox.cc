#include "agvisor/sandbox/sandbox.h"

#include <cctype>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <random>
#include <thread>

#include "agvisor/base/tar.h"
#include "agvisor/docker/client.h"
#include "agvisor/proto/exit_codes.h"
#include "agvisor/sandbox/agent_blob.h"
#include "agvisor/sandbox/host_caps.h"

namespace agvisor {
namespace {

constexpr std::string_view kLabelManaged = "agvisor";
constexpr std::string_view kLabelName = "agvisor.name";
constexpr std::string_view kLabelIdleTtl = "agvisor.idle_ttl";
constexpr std::string_view kLabelMemory = "agvisor.memory";
constexpr std::string_view kWorkspace = "/workspace";

std::string RandomSuffix() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mu);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08llx", static_cast<unsigned long long>(rng() & 0xffffffffULL));
  return buf;
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

// The tar the agent travels in: /.agvisor/agvisor-agent, mode 0755, owned by root.
Result<std::string> AgentArchive() {
  TarWriter w;
  AGVISOR_RETURN_IF_ERROR(w.AddDirectory(kAgentDir.substr(1), 0755));
  AGVISOR_RETURN_IF_ERROR(w.AddFile(kAgentPath.substr(1), EmbeddedAgentBinary(), 0755));
  return w.Finish();
}

EndReason ReasonFromState(const docker::ContainerState& s) {
  if (s.running) return EndReason::kNone;
  if (s.oom_killed) return EndReason::kOutOfMemory;
  if (s.status == "created") return EndReason::kNone;
  switch (s.exit_code) {
    case agent::kInitExitLifetime:
      return EndReason::kLifetime;
    case agent::kInitExitIdle:
      return EndReason::kIdle;
    case agent::kInitExitSignal:
      return EndReason::kStopped;
    default:
      return EndReason::kKilled;
  }
}

// Keeps the last `limit` bytes of a stream, amortised (trims when twice the limit).
void AppendTail(std::string& s, std::string_view piece, bool& truncated) {
  s.append(piece);
  if (s.size() > 2 * kStreamTailBytes) {
    s.erase(0, s.size() - kStreamTailBytes);
    truncated = true;
  }
}

}  // namespace

std::string_view EndReasonName(EndReason r) {
  switch (r) {
    case EndReason::kNone:
      return "running";
    case EndReason::kStopped:
      return "stopped";
    case EndReason::kLifetime:
      return "lifetime reached";
    case EndReason::kIdle:
      return "idle_ttl reached";
    case EndReason::kOutOfMemory:
      return "out of memory";
    case EndReason::kKilled:
      return "killed";
    case EndReason::kGone:
      return "removed";
  }
  return "unknown";
}

Result<std::shared_ptr<docker::Client>> HostClient(std::string_view host) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<docker::Client>, std::less<>> clients;
  std::lock_guard lock(mu);
  if (auto it = clients.find(host); it != clients.end()) {
    if (auto c = it->second.lock()) return c;
  }
  // $AGVISOR_SSH_ARGS: extra ssh arguments for ssh:// hosts (e.g. "-i KEY -o Port=2222"),
  // split on spaces.
  http::ClientOptions options;
  if (const char* extra = std::getenv("AGVISOR_SSH_ARGS")) {
    std::string a = extra;
    std::size_t i = 0;
    while (i < a.size()) {
      std::size_t j = a.find(' ', i);
      if (j == std::string::npos) j = a.size();
      if (j > i) options.ssh_args.push_back(a.substr(i, j - i));
      i = j + 1;
    }
  }
  auto c = AGVISOR_TRY(docker::Client::Connect(host, options));
  clients[std::string(host)] = c;
  return c;
}

Sandbox::~Sandbox() = default;

Result<std::unique_ptr<Sandbox>> Sandbox::Create(const SandboxSpec& spec) {
  AGVISOR_RETURN_IF_ERROR(ValidateSpec(spec));
  auto docker = AGVISOR_TRY(HostClient(spec.host));
  const std::string image = spec.image.empty() ? std::string(kDefaultImage) : spec.image;
  const std::string cname = ContainerNameFor(spec.name ? *spec.name : RandomSuffix());

  auto handle = std::unique_ptr<Sandbox>(new Sandbox());
  handle->docker_ = docker;
  handle->host_ = spec.host;
  handle->container_name_ = cname;
  handle->name_ = spec.name;
  handle->idle_ttl_ = spec.idle_ttl;
  handle->memory_ = spec.limits.memory;

  // Root-disk cap: enforced where the host can; refused when asked for explicitly elsewhere.
  std::string disk = spec.limits.disk;
  std::map<std::string, std::string> annotations;
  if (disk != "none") {
    auto support = AGVISOR_TRY(ProbeDiskCap(spec.host, *docker, spec.runtime, image));
    if (support.supported) {
      annotations["dev.gvisor.flag.overlay2"] =
          "root:self,size=" + (disk.empty() ? std::string(kDefaultDisk) : disk);
    } else if (!disk.empty()) {
      return Error::Unsupported("limits.disk='" + disk +
                                "' cannot be enforced on this host: " + support.detail +
                                ". Pass disk='none' (CLI: --disk none) to run without a cap.");
    } else {
      handle->disk_warning_ = "the default " + std::string(kDefaultDisk) +
                              " root-disk cap is not enforced on this host (" + support.detail +
                              "); the sandbox's root file system is uncapped";
    }
  }

  docker::ContainerConfig c;
  c.image = image;
  c.entrypoint = {std::string(kAgentPath)};
  c.cmd = {"init"};
  if (spec.lifetime) c.cmd.insert(c.cmd.end(), {"--lifetime", std::to_string(*spec.lifetime)});
  if (spec.idle_ttl) c.cmd.insert(c.cmd.end(), {"--idle-ttl", std::to_string(*spec.idle_ttl)});
  c.labels = spec.labels;
  c.labels[std::string(kLabelManaged)] = "1";
  if (spec.name) c.labels[std::string(kLabelName)] = *spec.name;
  if (spec.idle_ttl) c.labels[std::string(kLabelIdleTtl)] = std::to_string(*spec.idle_ttl);
  c.labels[std::string(kLabelMemory)] = spec.limits.memory;
  auto& h = c.host_config;
  h.runtime = spec.runtime;
  h.nano_cpus = static_cast<std::int64_t>(std::llround(spec.limits.cpus * 1e9));
  h.memory = AGVISOR_TRY(ParseMemorySize("limits.memory", spec.limits.memory));
  h.memory_swap = h.memory;  // no swap
  h.pids_limit = spec.limits.pids;
  h.network_mode = spec.network;
  if (spec.limits.shm) {
    h.shm_size = AGVISOR_TRY(ParseMemorySize("limits.shm", *spec.limits.shm));
  } else if (spec.gui) {
    h.shm_size = 1LL << 30;
  }
  // The agent ends the container at lifetime/idle expiry even with no client: Docker then
  // removes it (a named sandbox's data stays in its volume).
  h.auto_remove = spec.lifetime.has_value() || spec.idle_ttl.has_value();
  h.security_opt = {"no-new-privileges"};
  h.annotations = std::move(annotations);
  if (spec.name) {
    c.working_dir = std::string(kWorkspace);
    h.mounts.push_back({.type = "volume", .source = cname, .target = std::string(kWorkspace)});
  }

  if (spec.name) {
    std::map<std::string, std::string> vlabels = spec.labels;
    vlabels[std::string(kLabelManaged)] = "1";
    vlabels[std::string(kLabelName)] = *spec.name;
    AGVISOR_RETURN_IF_ERROR(docker->CreateVolume(cname, vlabels));
  }
  const std::string archive = AGVISOR_TRY(AgentArchive());

  // A named sandbox may exist already, or another client may be creating it right now. Two
  // passes: a create that loses the race (409) looks again and attaches to the winner.
  for (int pass = 0; pass < 3; ++pass) {
    if (spec.name) {
      auto existing = docker->InspectContainer(cname);
      if (existing.ok()) {
        if (existing->labels.count(std::string(kLabelManaged)) == 0) {
          return Error::Conflict("a container named " + cname +
                                 " exists that agvisor did not create; rename or remove it");
        }
        const auto& st = existing->state;
        if (st.running) {
          handle->container_id_ = existing->id;
          handle->resumed_ = true;
          if (auto it = existing->labels.find(std::string(kLabelIdleTtl));
              it != existing->labels.end()) {
            handle->idle_ttl_ = std::stoll(it->second);
          }
          return handle;
        }
        if (st.status == "created" || st.status == "removing") {
          // Another client is between create and start (or Docker is auto-removing an expired
          // one): wait for it to settle, then look again.
          auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
          bool settled = false;
          while (std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            auto again = docker->InspectContainer(cname);
            if (!again.ok() || again->state.status != st.status) {
              settled = true;
              break;
            }
          }
          if (settled) continue;
        }
        // A stopped leftover: its data lives in the volume; replace the container.
        auto rm = docker->RemoveContainer(cname, /*force=*/true, /*remove_volumes=*/false);
        if (!rm.ok() && rm.error().code() != ErrorCode::kNotFound &&
            rm.error().code() != ErrorCode::kConflict) {
          return rm.error();
        }
      } else if (existing.error().code() != ErrorCode::kNotFound) {
        return existing.error();
      }
    }
    auto id = docker->CreateContainer(c, cname);
    if (!id.ok()) {
      if (id.error().code() == ErrorCode::kConflict && spec.name) continue;  // lost the race
      if (id.error().code() == ErrorCode::kNotFound) {
        std::string fix = image == kDefaultImage
                              ? "build it with `agvisor image build base` (scripts/setup-host "
                                "does this)"
                              : "pull or build it on that host first";
        return Error::NotFound("image " + image + " not found on " +
                               (spec.host.empty() ? std::string("this host") : spec.host) + ": " +
                               fix + " (" + id.error().message() + ")");
      }
      return id.error();
    }
    handle->container_id_ = *id;
    auto setup = [&]() -> Result<void> {
      AGVISOR_RETURN_IF_ERROR(docker->PutArchive(*id, "/", archive));
      return docker->StartContainer(*id);
    };
    if (auto r = setup(); !r.ok()) {
      (void)docker->RemoveContainer(*id, /*force=*/true, /*remove_volumes=*/false);
      return r.error().WithContext("start sandbox " + cname);
    }
    return handle;
  }
  return Error::Conflict("sandbox " + cname +
                         " is being created and removed by other clients at the same time; "
                         "try again");
}

Result<std::unique_ptr<Sandbox>> Sandbox::Open(std::string_view container_name,
                                               std::string_view host) {
  auto docker = AGVISOR_TRY(HostClient(host));
  auto info = AGVISOR_TRY(docker->InspectContainer(container_name));
  if (info.labels.count(std::string(kLabelManaged)) == 0) {
    return Error::NotFound("container " + std::string(container_name) +
                           " is not an agvisor sandbox");
  }
  auto handle = std::unique_ptr<Sandbox>(new Sandbox());
  handle->docker_ = docker;
  handle->host_ = host;
  handle->container_name_ = info.name;
  handle->container_id_ = info.id;
  if (auto it = info.labels.find(std::string(kLabelName)); it != info.labels.end()) {
    handle->name_ = it->second;
  }
  if (auto it = info.labels.find(std::string(kLabelIdleTtl)); it != info.labels.end()) {
    handle->idle_ttl_ = std::stoll(it->second);
  }
  if (auto it = info.labels.find(std::string(kLabelMemory)); it != info.labels.end()) {
    handle->memory_ = it->second;
  }
  return handle;
}

Result<std::vector<SandboxInfo>> Sandbox::List(std::string_view host) {
  auto docker = AGVISOR_TRY(HostClient(host));
  auto list = AGVISOR_TRY(docker->ListContainers(/*all=*/true, {std::string(kLabelManaged)}));
  std::vector<SandboxInfo> out;
  for (const auto& s : list) {
    SandboxInfo i;
    i.container_name = s.names.empty() ? s.id.substr(0, 12) : s.names.front();
    if (auto it = s.labels.find(std::string(kLabelName)); it != s.labels.end()) i.name = it->second;
    i.container_id = s.id;
    i.image = s.image;
    i.state = s.state;
    i.running = s.state == "running";
    i.host = std::string(host);
    out.push_back(std::move(i));
  }
  return out;
}

Result<SandboxInfo> Sandbox::Info() { return InfoLocked(); }

Result<SandboxInfo> Sandbox::InfoLocked() {
  SandboxInfo i;
  i.container_name = container_name_;
  i.name = name_;
  i.host = host_;
  auto info = docker_->InspectContainer(container_id_.empty() ? container_name_ : container_id_);
  if (!info.ok()) {
    if (info.error().code() != ErrorCode::kNotFound) return info.error();
    i.state = "gone";
    i.end_reason = EndReason::kGone;
    return i;
  }
  i.container_id = info->id;
  i.image = info->image_ref;
  i.state = info->state.status;
  i.running = info->state.running;
  i.exit_code = info->state.exit_code;
  i.end_reason = ReasonFromState(info->state);
  return i;
}

Error Sandbox::DiagnoseExecFailure(const Error& e) {
  auto info = InfoLocked();
  if (!info.ok() || info->running) return e;
  std::string why;
  switch (info->end_reason) {
    case EndReason::kOutOfMemory:
      why = "it ran out of memory (limits.memory=" + memory_ +
            "); under gVisor that ends the whole sandbox";
      break;
    case EndReason::kGone:
      why = "its container no longer exists (it expired, was stopped, or hit a limit)";
      break;
    case EndReason::kKilled:
      why = "it was killed (exit code " + std::to_string(info->exit_code) +
            "; the pids limit or an outside kill)";
      break;
    default:
      why = std::string(EndReasonName(info->end_reason));
  }
  std::string again = persistent() ? "; create it again with the same name to get a fresh "
                                     "container on the same /workspace"
                                   : "";
  return Error::SandboxDied("sandbox " + container_name_ + " is not running: " + why + again);
}

Result<ExecResult> Sandbox::ExecShell(std::string_view command, const ExecOptions& options) {
  return Exec({"sh", "-c", std::string(command)}, options);
}

Result<ExecResult> Sandbox::Exec(const std::vector<std::string>& argv, const ExecOptions& o) {
  if (argv.empty()) return Error::InvalidArgument("exec: empty command");
  AGVISOR_RETURN_IF_ERROR(ValidateExecTimeout(o.timeout, idle_ttl_));
  docker::ExecConfig ec;
  ec.cmd = {std::string(kAgentPath), "exec", "--timeout", Seconds(o.timeout)};
  if (!o.cwd.empty()) ec.cmd.insert(ec.cmd.end(), {"--cwd", o.cwd});
  for (const auto& kv : o.env) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') {
      return Error::InvalidArgument("exec: env entry '" + kv + "' is not KEY=VALUE");
    }
    ec.cmd.insert(ec.cmd.end(), {"--env", kv});
  }
  ec.cmd.push_back("--");
  ec.cmd.insert(ec.cmd.end(), argv.begin(), argv.end());
  for (char c : o.user) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-' &&
        c != ':') {
      return Error::InvalidArgument("exec: user '" + o.user +
                                    "' is invalid: use a name or uid, optionally :group or :gid");
    }
  }
  ec.user = o.user;
  ec.attach_stdin = o.input.has_value();

  auto exec_id = docker_->CreateExec(container_id_, ec);
  if (!exec_id.ok()) return DiagnoseExecFailure(exec_id.error());
  auto stream = docker_->StartExec(*exec_id, /*tty=*/false);
  if (!stream.ok()) return DiagnoseExecFailure(stream.error());

  // When the sandbox dies under a command (out of memory kills all of it under gVisor), Docker
  // may keep the exec's stream open: a watchdog checks the container while the command runs
  // and closes the stream, so Read returns and the death is reported.
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  bool exec_done = false;
  bool sandbox_died = false;
  std::thread watchdog([&] {
    std::unique_lock lock(watch_mu);
    while (!watch_cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return exec_done; })) {
      lock.unlock();
      auto info = docker_->InspectContainer(container_id_);
      bool dead = !info.ok() ? info.error().code() == ErrorCode::kNotFound : !info->state.running;
      lock.lock();
      if (dead && !exec_done) {
        sandbox_died = true;
        (*stream)->Close();
        return;
      }
    }
  });
  // stdin goes from its own thread, so a command that writes before it reads cannot deadlock.
  std::thread writer;
  if (o.input) {
    writer = std::thread([&s = **stream, &in = *o.input] {
      if (s.Write(in).ok()) (void)s.CloseStdin();
    });
  }
  ExecResult res;
  const bool streaming = o.on_output || o.on_stdout || o.on_stderr;
  Result<void> read_status = Ok();
  for (;;) {
    auto piece = (*stream)->Read();
    if (!piece.ok()) {
      read_status = piece.error();
      break;
    }
    if (!piece->has_value()) break;  // EOF
    const auto& [kind, bytes] = **piece;
    const bool is_err = kind == docker::StreamKind::kStderr;
    if (streaming) {
      AppendTail(is_err ? res.err : res.out, bytes, res.truncated);
      if (o.on_output) o.on_output(bytes);
      if (is_err && o.on_stderr) o.on_stderr(bytes);
      if (!is_err && o.on_stdout) o.on_stdout(bytes);
    } else {
      (is_err ? res.err : res.out).append(bytes);
    }
  }
  {
    std::lock_guard lock(watch_mu);
    exec_done = true;
  }
  watch_cv.notify_all();
  watchdog.join();
  (*stream)->Close();
  if (writer.joinable()) writer.join();
  if (res.truncated) {
    for (std::string* s : {&res.out, &res.err}) {
      if (s->size() > kStreamTailBytes) s->erase(0, s->size() - kStreamTailBytes);
    }
  }
  if (sandbox_died) {
    return DiagnoseExecFailure(Error::SandboxDied("sandbox ended during exec"));
  }
  if (!read_status.ok()) return DiagnoseExecFailure(read_status.error());
  auto ei = docker_->InspectExec(*exec_id);
  if (!ei.ok()) return DiagnoseExecFailure(ei.error());
  if (!ei->exit_code) {
    return DiagnoseExecFailure(
        Error::Internal("exec in " + container_name_ + " ended without an exit code"));
  }
  res.exit_code = *ei->exit_code;
  // gVisor reports an exec cut short by the sandbox dying (OOM: "WaitPID failed: EOF") with
  // odd codes; tell that apart from the command's own code by asking whether it still runs.
  if (res.exit_code >= 126 && res.exit_code != agent::kExecExitTimeout) {
    // runsc's own words when the sandbox died under the exec; Docker may not have noticed yet,
    // so give it a moment to see the container stop.
    if (res.err.find("containerManager.WaitPID") != std::string::npos) {
      (void)docker_->WaitContainer(container_id_, "not-running", std::chrono::seconds(5));
    }
    auto info = InfoLocked();
    if (info.ok() && !info->running) {
      return DiagnoseExecFailure(
          Error::Internal("exec ended with " + std::to_string(res.exit_code)));
    }
  }
  res.timed_out = res.exit_code == agent::kExecExitTimeout;
  return res;
}

namespace {

// Removes a container; gone already (404) or being removed (409) count as done. Returns whether
// a container was there.
Result<bool> RemoveContainerIfAny(docker::Client& docker, std::string_view ref) {
  auto r = docker.RemoveContainer(ref, /*force=*/true, /*remove_volumes=*/false);
  if (r.ok()) return true;
  if (r.error().code() == ErrorCode::kNotFound) return false;
  if (r.error().code() == ErrorCode::kConflict) return true;  // removal already in progress
  return r.error();
}

// Removes a volume. Docker releases it a moment after its container is gone: retry while it
// says "in use". Returns whether a volume was there.
Result<bool> RemoveVolumeIfAny(docker::Client& docker, std::string_view name) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (;;) {
    // Not forced: a forced removal of a volume still in use returns success and keeps it.
    auto r = docker.RemoveVolume(name, /*force=*/false);
    if (r.ok()) return true;
    if (r.error().code() == ErrorCode::kNotFound) return false;
    if (r.error().code() != ErrorCode::kConflict || std::chrono::steady_clock::now() > deadline) {
      return r.error();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

Result<void> Sandbox::Remove(std::string_view container_name, std::string_view host,
                             bool erase_data) {
  auto docker = AGVISOR_TRY(HostClient(host));
  bool had_container = AGVISOR_TRY(RemoveContainerIfAny(*docker, container_name));
  bool had_volume = false;
  if (erase_data) had_volume = AGVISOR_TRY(RemoveVolumeIfAny(*docker, container_name));
  if (!had_container && !had_volume) {
    return Error::NotFound("no sandbox " + std::string(container_name) + " on " +
                           (host.empty() ? std::string("this host") : std::string(host)) +
                           " (`agvisor ls` lists them)");
  }
  return Ok();
}

Result<void> Sandbox::Stop() {
  AGVISOR_RETURN_IF_ERROR(RemoveContainerIfAny(*docker_, container_name_));
  return Ok();
}

Result<void> Sandbox::Delete() {
  AGVISOR_RETURN_IF_ERROR(Stop());
  if (persistent()) AGVISOR_RETURN_IF_ERROR(RemoveVolumeIfAny(*docker_, container_name_));
  return Ok();
}

}  // namespace agvisor
