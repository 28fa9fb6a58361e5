#include "agvisor/sandbox/sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/base/tar_stream.h"
#include "agvisor/desktop/password.h"
#include "agvisor/proto/exit_codes.h"
#include "agvisor/sandbox/desktop.h"
#include "agvisor/sandbox/egress_network.h"
#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/start_gate.h"
#include "agvisor/sandbox/step_trace.h"
#include "agvisor/sandbox/sweep.h"

namespace agvisor {
namespace {

std::string RandomSuffix() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mu);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08llx", static_cast<unsigned long long>(rng() & 0xffffffffULL));
  return buf;
}

EndReason ReasonFromState(const InstanceState& s) {
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

}  // namespace

void AppendOutputTail(std::string& s, std::string_view piece, bool& truncated) {
  s.append(piece);
  if (s.size() > 2 * kStreamTailBytes) {
    s.erase(0, s.size() - kStreamTailBytes);
    truncated = true;
  }
}

void FinishOutputTail(ExecResult& r) {
  for (std::string* s : {&r.out, &r.err}) {
    if (s->size() > kStreamTailBytes) {
      s->erase(0, s->size() - kStreamTailBytes);
      r.truncated = true;
    }
  }
}

// The agent's stderr (log lines) from the attach stream: the last few lines, for diagnostics.
struct Sandbox::LogRing {
  static constexpr std::size_t kLines = 20;
  mutable std::mutex mu;
  std::deque<std::string> lines;
  std::string partial;
  void Append(std::string_view bytes) {
    std::lock_guard lock(mu);
    for (char c : bytes) {
      if (c != '\n') {
        if (partial.size() < 1000) partial += c;
        continue;
      }
      lines.push_back(std::move(partial));
      partial.clear();
      if (lines.size() > kLines) lines.pop_front();
    }
  }
  std::vector<std::string> Snapshot() const {
    std::lock_guard lock(mu);
    std::vector<std::string> out(lines.begin(), lines.end());
    if (!partial.empty()) out.push_back(partial);
    return out;
  }
  std::string Tail() const {
    std::string s;
    for (const auto& l : Snapshot()) s += (s.empty() ? "" : " | ") + l;
    return s;
  }
};

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

Sandbox::Sandbox() : agent_log_(std::make_shared<LogRing>()) {}

Sandbox::~Sandbox() {
  // Closing the channel ends this client's session only; the sandbox keeps running.
  std::shared_ptr<channel::Channel> ch;
  {
    std::lock_guard lock(channel_mu_);
    ch = std::move(channel_);
  }
}

std::vector<std::string> Sandbox::AgentLog() const { return agent_log_->Snapshot(); }

Result<std::shared_ptr<channel::Channel>> Sandbox::Channel() {
  std::lock_guard lock(channel_mu_);
  if (channel_ && !channel_->broken()) return channel_;
  channel_.reset();
  channel_ = AGVISOR_TRY(OpenChannel());
  return channel_;
}

Result<std::shared_ptr<channel::Channel>> Sandbox::OpenChannel() {
  // One `docker exec -i agvisor-agent connect`: it relays to the agent's socket.
  auto connect = [&](std::uint16_t version) -> Result<std::shared_ptr<channel::Channel>> {
    auto log = agent_log_;
    auto stream = runtime_->OpenExecStream(container_id_, {std::string(kAgentPath), "connect"},
                                           [log](std::string_view b) { log->Append(b); });
    if (!stream.ok()) return DiagnoseExecFailure(stream.error());
    auto ch = channel::Channel::Open(std::move(*stream), {.version = version});
    if (!ch.ok()) {
      std::string tail = agent_log_->Tail();
      return DiagnoseExecFailure(
          ch.error().WithContext("connect to the agent of " + container_name_ +
                                 (tail.empty() ? std::string() : " (relay log: " + tail + ")")));
    }
    return *ch;
  };
  auto ch = connect(agent_protocol_);
  // A sandbox started by an older build runs an agent that speaks protocol version 1 only.
  if (!ch.ok() && ch.error().code() == ErrorCode::kUnsupported && agent_protocol_ > 1) {
    agent_protocol_ = 1;
    return connect(1);
  }
  return ch;
}

Error Sandbox::Diagnose(const Error& e) {
  if (e.code() != ErrorCode::kUnavailable) return e;
  // The channel broke: when the sandbox died (OOM, pids, expiry), Docker may record it a moment
  // after the stream ends, so give it that moment before asking.
  runtime_->WaitNotRunning(container_id_, std::chrono::seconds(2));
  return DiagnoseExecFailure(e);
}

Result<std::unique_ptr<Sandbox>> Sandbox::Create(const SandboxSpec& spec) {
  return Create(spec, {});
}

Result<std::unique_ptr<Sandbox>> Sandbox::Create(
    const SandboxSpec& spec, const std::map<std::string, std::string>& system_labels) {
  AGVISOR_RETURN_IF_ERROR(ValidateSpec(spec));
  if (spec.egress) AGVISOR_RETURN_IF_ERROR(CheckEgressHost(spec.host));
  auto runtime = AGVISOR_TRY(RuntimeFor(spec.host));
  // gVisor only, decided from the runtime's binary, before anything is made on the host.
  InstanceDecisions decisions;
  decisions.runtime = AGVISOR_TRY(runtime->RequireGvisor(spec.runtime, spec.network == "none"));
  const std::string image = !spec.image.empty()
                                ? spec.image
                                : std::string(spec.gui ? kDefaultDesktopImage : kDefaultImage);
  const std::string cname = ContainerNameFor(spec.name ? *spec.name : RandomSuffix());

  auto handle = std::unique_ptr<Sandbox>(new Sandbox());
  handle->runtime_ = runtime;
  handle->host_ = spec.host;
  handle->container_name_ = cname;
  handle->name_ = spec.name;
  handle->idle_ttl_ = spec.idle_ttl;
  handle->memory_ = spec.limits.memory;

  // Root-disk cap: enforced where the host can; refused when asked for explicitly elsewhere.
  const std::string& disk = spec.limits.disk;
  decisions.name = cname;
  decisions.source_image = image;
  decisions.system_labels = system_labels;
  if (disk != "none") {
    auto support = AGVISOR_TRY(runtime->ProbeDiskCap(spec.runtime, image));
    if (support.supported) {
      decisions.disk_cap = disk.empty() ? std::string(kDefaultDisk) : disk;
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

  // What this call makes besides the instance (a named sandbox's new volume, an egress network)
  // is removed again when the create then fails on any path. A volume that was there is never
  // removed, nor one or a network an instance uses meanwhile (the runtime refuses: a winner of a
  // race keeps them).
  struct Leftovers {
    Runtime* runtime = nullptr;
    std::string volume, network;
    ~Leftovers() {
      if (!runtime) return;
      if (!network.empty()) (void)runtime->RemoveEgressNetwork(network);
      if (!volume.empty()) (void)runtime->RemoveVolume(volume);
    }
  } leftovers{.runtime = runtime.get()};
  if (spec.name) {
    Labels vlabels = spec.labels;
    vlabels[std::string(kLabelManaged)] = "1";
    vlabels[std::string(kLabelName)] = *spec.name;
    if (AGVISOR_TRY(runtime->EnsureVolume(cname, vlabels))) leftovers.volume = cname;
  }
  // The agent is in the image: one prepared from `image` per host and agent build.
  auto with_agent = runtime->PrepareImage(image);
  if (!with_agent.ok()) {
    if (with_agent.error().code() != ErrorCode::kNotFound) return with_agent.error();
    std::string fix = image == kDefaultImage
                          ? "build it with `agvisor image build base` (scripts/setup-host "
                            "does this)"
                      : image == kDefaultDesktopImage
                          ? "build it with `agvisor image build desktop` (scripts/setup-host "
                            "does this)"
                          : "pull or build it on that host first";
    return Error::NotFound("image " + image + " not found on " +
                           (spec.host.empty() ? std::string("this host") : spec.host) + ": " + fix +
                           " (" + with_agent.error().message() + ")");
  }
  decisions.image = *with_agent;
  InstanceSpec instance = AGVISOR_TRY(BuildInstanceSpec(spec, decisions));

  // A named sandbox may exist already, or another client may be creating it right now. Up to
  // three passes: a create that loses the race (kConflict) looks again and attaches to the winner.
  for (int pass = 0; pass < 3; ++pass) {
    if (spec.name) {
      auto existing = runtime->Inspect(cname);
      if (existing.ok()) {
        if (existing->labels.count(std::string(kLabelManaged)) == 0) {
          return Error::Conflict("a container named " + cname +
                                 " exists that agvisor did not create; rename or remove it");
        }
        const auto& st = existing->state;
        if (st.running) {
          // Re-attaching must not hand out a sandbox with another egress policy (or none) than
          // the one asked for: that would open what the caller meant to close.
          const auto label = existing->labels.find(std::string(kLabelEgress));
          const std::string have = label == existing->labels.end() ? "" : label->second;
          const std::string want =
              spec.egress ? egress::EncodeEgressRules(
                                AGVISOR_TRY(egress::EgressPolicy::Create(*spec.egress)).Rules())
                          : "";
          if (have != want) {
            return Error::Conflict(
                "sandbox " + cname + " is running with " +
                (have.empty() ? std::string("no egress policy") : "the egress policy " + have) +
                ", not the one asked for (" + (want.empty() ? std::string("none") : want) +
                "): stop it first, or use another name");
          }
          handle->container_id_ = existing->id;
          handle->resumed_ = true;
          leftovers.runtime = nullptr;  // the running one's network and volume
          if (auto it = existing->labels.find(std::string(kLabelIdleTtl));
              it != existing->labels.end()) {
            handle->idle_ttl_ = std::stoll(it->second);
          }
          if (spec.gui) AGVISOR_RETURN_IF_ERROR(desktop::WaitReady(*handle));
          return handle;
        }
        if (st.status == "created" || st.status == "removing") {
          // Another client is between create and start (or the runtime is removing an expired
          // one): wait for it to settle, then look again.
          auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
          bool settled = false;
          while (std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            auto again = runtime->Inspect(cname);
            if (!again.ok() || again->state.status != st.status) {
              settled = true;
              break;
            }
          }
          if (settled) continue;
        }
        // A stopped leftover: its data lives in the volume; replace the instance.
        AGVISOR_RETURN_IF_ERROR(runtime->Remove(cname));
      } else if (existing.error().code() != ErrorCode::kNotFound) {
        return existing.error();
      }
    }
    if (spec.egress) {
      // Its own network, whose gateway is the enforcer: up before the sandbox runs.
      const egress::EgressRules rules =
          AGVISOR_TRY(egress::EgressPolicy::Create(*spec.egress)).Rules();
      // Named before it is asked for: it may be made and then found without an enforcer.
      leftovers.network = cname;
      const SandboxNetwork net =
          AGVISOR_TRY(runtime->EnsureEgressNetwork(cname, rules, spec.labels));
      ApplyEgressNetwork(instance, net, rules);
    }
    if (spec.gui) {
      // A desktop's VNC password: new for every instance (docs/desktop.md).
      instance.pre_start_tar = AGVISOR_TRY(desktop::PasswordArchive(desktop::NewPassword()));
    }
    // At most a few starts at once per host, the rest queued (start_gate.h): past that the
    // runtime slows every start down. Held until the handshake is done.
    auto ticket = AGVISOR_TRY(HostStartGate(spec.host).Enter());
    StepTrace trace;
    if (ticket.waited().count() > 0) trace.Mark("wait for a start slot");
    auto log = handle->agent_log_;
    auto started =
        runtime->CreateAndStart(instance, trace, [log](std::string_view b) { log->Append(b); });
    if (!started.ok()) {
      if (started.error().code() == ErrorCode::kConflict && spec.name) continue;  // lost the race
      return started.error().WithContext("start sandbox " + cname);
    }
    handle->container_id_ = started->id;
    auto start = [&]() -> Result<void> {
      auto ch = channel::Channel::Open(std::move(started->stdio));
      trace.Mark("agent handshake");
      if (!ch.ok()) {
        std::string tail = handle->agent_log_->Tail();
        return ch.error().WithContext(
            "agent handshake" + (tail.empty() ? std::string() : " (agent log: " + tail + ")"));
      }
      {
        std::lock_guard lock(handle->channel_mu_);
        handle->channel_ = *ch;
      }
      if (!spec.gui) return Ok();
      ticket.Release();  // the desktop's seconds are not a start's
      auto ready = desktop::WaitReady(*handle);
      trace.Mark("desktop ready");
      return ready;
    };
    if (auto r = start(); !r.ok()) {
      (void)runtime->Remove(started->id);
      return r.error().WithContext("start sandbox " + cname);
    }
    leftovers.runtime = nullptr;  // it runs: the network and the volume are its own now
    // What killed clients left between create and start (once per host per process).
    SweepNeverStartedOnce(*runtime);
    return handle;
  }
  return Error::Conflict("sandbox " + cname +
                         " is being created and removed by other clients at the same time; "
                         "try again");
}

Result<std::unique_ptr<Sandbox>> Sandbox::Open(std::string_view container_name,
                                               std::string_view host) {
  auto runtime = AGVISOR_TRY(RuntimeFor(host));
  auto info = AGVISOR_TRY(runtime->Inspect(container_name));
  if (info.labels.count(std::string(kLabelManaged)) == 0) {
    return Error::NotFound("container " + std::string(container_name) +
                           " is not an agvisor sandbox");
  }
  auto handle = std::unique_ptr<Sandbox>(new Sandbox());
  handle->runtime_ = runtime;
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
  auto runtime = AGVISOR_TRY(RuntimeFor(host));
  auto list = AGVISOR_TRY(runtime->List({std::string(kLabelManaged)}));
  std::vector<SandboxInfo> out;
  for (const auto& s : list) {
    if (s.helper) continue;  // the runtime's own (adding the agent to an image), not a sandbox
    SandboxInfo i;
    i.container_name = s.name.empty() ? s.id.substr(0, 12) : s.name;
    if (auto it = s.labels.find(std::string(kLabelName)); it != s.labels.end()) i.name = it->second;
    if (auto it = s.labels.find(std::string(kLabelPool)); it != s.labels.end()) i.pool = it->second;
    i.container_id = s.id;
    auto image = s.labels.find(std::string(kLabelImage));
    i.image = image != s.labels.end() ? image->second : s.image;
    i.state = s.status;
    i.running = s.status == "running";
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
  auto info = runtime_->Inspect(container_id_.empty() ? container_name_ : container_id_);
  if (!info.ok()) {
    if (info.error().code() != ErrorCode::kNotFound) return info.error();
    i.state = "gone";
    i.end_reason = EndReason::kGone;
    return i;
  }
  i.container_id = info->id;
  auto image = info->labels.find(std::string(kLabelImage));
  i.image = image != info->labels.end() ? image->second : info->image_ref;
  i.state = info->state.status;
  i.running = info->state.running;
  i.exit_code = info->state.exit_code;
  i.end_reason = ReasonFromState(info->state);
  if (i.end_reason == EndReason::kKilled && i.exit_code == 128 + SIGKILL &&
      runtime_->EndedByMemoryLimit(info->id)) {
    i.end_reason = EndReason::kOutOfMemory;
  }
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

namespace {

// Checks env entries and the user string before anything is sent.
Result<void> ValidateExecEnvUser(const std::vector<std::string>& env, const std::string& user) {
  for (const auto& kv : env) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') {
      return Error::InvalidArgument("exec: env entry '" + kv + "' is not KEY=VALUE");
    }
  }
  for (char c : user) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-' &&
        c != ':') {
      return Error::InvalidArgument("exec: user '" + user +
                                    "' is invalid: use a name or uid, optionally :group or :gid");
    }
  }
  return Ok();
}

std::uint64_t TimeoutMs(double seconds) {
  return seconds > 0 ? static_cast<std::uint64_t>(std::llround(seconds * 1000)) : 0;
}

// The EXEC request shared by Exec, StartProcess and StartBackground, validated first. A timeout
// of 0 means none, where `timeout_optional`.
Result<proto::ExecRequest> BuildExecRequest(const std::vector<std::string>& argv,
                                            const std::vector<std::string>& env,
                                            const std::string& cwd, const std::string& user,
                                            double timeout, bool timeout_optional,
                                            std::optional<std::int64_t> idle_ttl) {
  if (argv.empty()) return Error::InvalidArgument("exec: empty command");
  if (!timeout_optional || timeout > 0) {
    AGVISOR_RETURN_IF_ERROR(ValidateExecTimeout(timeout, idle_ttl));
  }
  AGVISOR_RETURN_IF_ERROR(ValidateExecEnvUser(env, user));
  proto::ExecRequest req;
  req.argv = argv;
  req.env = env;
  req.cwd = cwd;
  req.user = user;
  // The agent enforces the timeout on the whole process tree (EXIT says timed_out, 124).
  req.timeout_ms = TimeoutMs(timeout);
  return req;
}

}  // namespace

Result<ExecResult> Sandbox::Exec(const std::vector<std::string>& argv, const ExecOptions& o) {
  proto::ExecRequest req = AGVISOR_TRY(BuildExecRequest(argv, o.env, o.cwd, o.user, o.timeout,
                                                        /*timeout_optional=*/false, idle_ttl_));

  ExecResult res;
  const bool streaming = o.on_output || o.on_stdout || o.on_stderr;
  channel::ExecCallbacks cb;
  if (streaming) {
    cb.on_stdout = [&](std::string_view b) {
      AppendOutputTail(res.out, b, res.truncated);
      if (o.on_output) o.on_output(b);
      if (o.on_stdout) o.on_stdout(b);
    };
    cb.on_stderr = [&](std::string_view b) {
      AppendOutputTail(res.err, b, res.truncated);
      if (o.on_output) o.on_output(b);
      if (o.on_stderr) o.on_stderr(b);
    };
  } else {
    // Past the cap the bytes are still taken (the agent's window is granted back, so the command
    // runs on at full speed) and only counted.
    auto keep = [&](std::string& kept, std::uint64_t& dropped, std::string_view b) {
      std::size_t room = o.max_output_bytes == 0            ? b.size()
                         : kept.size() < o.max_output_bytes ? o.max_output_bytes - kept.size()
                                                            : 0;
      std::size_t n = std::min(room, b.size());
      kept.append(b.substr(0, n));
      if (n < b.size()) {
        dropped += b.size() - n;
        res.truncated = true;
      }
    };
    cb.on_stdout = [&](std::string_view b) { keep(res.out, res.stdout_dropped, b); };
    cb.on_stderr = [&](std::string_view b) { keep(res.err, res.stderr_dropped, b); };
  }
  std::size_t in_pos = 0;
  channel::ByteSource input = [&](std::span<char> buf) -> Result<std::size_t> {
    std::size_t n = std::min(buf.size(), o.input->size() - in_pos);
    std::memcpy(buf.data(), o.input->data() + in_pos, n);
    in_pos += n;
    return n;
  };
  auto ch = AGVISOR_TRY(Channel());
  auto exit = ch->Exec(std::move(req), cb, o.input ? &input : nullptr);
  if (!exit.ok()) return Diagnose(exit.error().WithContext("exec in " + container_name_));
  if (streaming) FinishOutputTail(res);
  res.exit_code = exit->exit_code;
  res.timed_out = exit->timed_out;
  res.prestarted = exit->prestarted;
  return res;
}

Result<std::unique_ptr<Process>> Sandbox::StartProcess(const std::vector<std::string>& argv,
                                                       const ProcessOptions& o) {
  proto::ExecRequest req = AGVISOR_TRY(BuildExecRequest(argv, o.env, o.cwd, o.user, o.timeout,
                                                        /*timeout_optional=*/true, idle_ttl_));
  if (o.stdin) req.flags |= proto::kExecStdin;
  if (o.pty) {
    req.flags |= proto::kExecPty;
    req.rows = o.rows;
    req.cols = o.cols;
  }
  auto ch = AGVISOR_TRY(Channel());
  auto p = ch->Start(req);
  if (!p.ok()) return Diagnose(p.error());
  return std::move(*p);
}

// ---- Background processes ----

Result<std::uint32_t> Sandbox::StartBackground(const std::vector<std::string>& argv,
                                               const BackgroundOptions& o) {
  proto::ExecRequest req = AGVISOR_TRY(BuildExecRequest(argv, o.env, o.cwd, o.user, o.timeout,
                                                        /*timeout_optional=*/true, idle_ttl_));
  req.flags = proto::kExecBackground;
  if (o.stdin) req.flags |= proto::kExecStdin;
  // Destroying the Process detaches it (DETACH, or the end of a protocol 1 agent's own
  // session), and it keeps running.
  auto ch = AGVISOR_TRY(ProcessChannel());
  auto p = ch->Start(req);
  if (!p.ok()) return Diagnose(p.error().WithContext("start in " + container_name_));
  auto pid = (*p)->WaitStarted();
  if (!pid.ok()) return Diagnose(pid.error().WithContext("start in " + container_name_));
  return *pid;
}

Result<std::vector<ProcessInfo>> Sandbox::ListProcesses() {
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->ListProcesses();
  if (!r.ok()) return Diagnose(r.error());
  return r;
}

Result<std::shared_ptr<channel::Channel>> Sandbox::ProcessChannel() {
  auto ch = AGVISOR_TRY(Channel());
  if (ch->agent().version < 2) return OpenChannel();
  return ch;
}

Result<std::unique_ptr<Process>> Sandbox::AttachProcess(std::uint32_t pid) {
  // Destroying the Process (its last owner) detaches.
  auto ch = AGVISOR_TRY(ProcessChannel());
  auto p = ch->AttachProcess(pid);
  if (!p.ok()) return Diagnose(p.error());
  return std::move(*p);
}

Result<ProcessExit> Sandbox::AttachProcess(std::uint32_t pid,
                                           const channel::ExecCallbacks& callbacks) {
  auto p = AGVISOR_TRY(AttachProcess(pid));
  auto exit = p->Wait(callbacks);
  if (!exit.ok()) {
    return Diagnose(exit.error().WithContext("attach to process " + std::to_string(pid) + " in " +
                                             container_name_));
  }
  return *exit;
}

Result<void> Sandbox::Signal(std::uint32_t pid, int signal) {
  // Protocol 2: PROC_SIGNAL, whoever is attached. Protocol 1 signals by attaching, which fails
  // (kConflict) while another client is attached.
  auto ch = AGVISOR_TRY(ProcessChannel());
  auto r = ch->SignalProcess(pid, signal);
  if (r.ok()) return Ok();
  if (ch->agent().version >= 2 || r.error().code() != ErrorCode::kConflict) {
    return Diagnose(r.error().WithContext("in " + container_name_));
  }
  // A protocol 1 agent, and another client is attached to it: kill(1) inside, as the default user,
  // does the same (the process group first; a pty child's own group may not exist yet).
  const std::string sig = std::to_string(signal), p = std::to_string(pid);
  auto k = Exec({"sh", "-c", "kill -" + sig + " -" + p + " 2>/dev/null || kill -" + sig + " " + p},
                {.timeout = 30});
  if (!k.ok()) return k.error().WithContext("signal process " + p);
  if (k->exit_code != 0) {
    return Error::PermissionDenied("signal process " + p + " in " + container_name_ +
                                   " (attached to another client, so through kill(1)): " + k->err);
  }
  return Ok();
}

namespace {

Result<void> CheckAbsolute(std::string_view op, std::string_view path) {
  if (path.empty() || path.front() != '/') {
    return Error::InvalidArgument(std::string(op) + ": sandbox path '" + std::string(path) +
                                  "' must be absolute");
  }
  return Ok();
}

// Regular files at least this large are read (ReadFile) or downloaded (DownloadTar) by a
// `docker exec` of `agvisor-agent read-file`: Docker's exec stream, the transport ceiling,
// instead of the channel over PID 1's attached stdio, which moved bulk data at 0.55-0.85 of it
// (bench/). The exec costs ~100 ms to start and the STAT before it one channel round trip; at
// this size the faster stream has paid for both. (A directory's size is not known up front: its
// tar takes the channel.)
constexpr std::uint64_t kBulkReadBytes = 32u << 20;

bool IsBulk(const Result<FileEntry>& st) {
  return st.ok() && st->kind == proto::EntryKind::kFile && st->size >= kBulkReadBytes;
}

}  // namespace

Result<std::string> Sandbox::ReadFile(std::string_view path) {
  // Grown as bytes arrive, never sized from the STAT: that size is the sandbox's word.
  std::string data;
  AGVISOR_RETURN_IF_ERROR(ReadFileTo(path, [&](std::string_view b) -> Result<void> {
    data.append(b);
    return Ok();
  }));
  return data;
}

Result<void> Sandbox::ReadFileTo(std::string_view path, const channel::ByteSink& sink,
                                 std::uint64_t offset, std::optional<std::uint64_t> length) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("read file", path));
  if (length && *length == 0) {
    // Nothing to send, but the file must exist: a STAT answers that.
    auto st = Stat(path);
    if (!st.ok()) return st.error();
    return Ok();
  }
  // The range: skip `offset` bytes, pass `length`, then stop the read (a sink error of our own,
  // told apart by `done`).
  std::uint64_t skip = offset;
  std::optional<std::uint64_t> left = length;
  bool done = false;
  channel::ByteSink ranged = [&](std::string_view b) -> Result<void> {
    if (skip > 0) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(skip, b.size()));
      skip -= n;
      b.remove_prefix(n);
    }
    if (left) b = b.substr(0, static_cast<std::size_t>(std::min<std::uint64_t>(*left, b.size())));
    if (!b.empty()) AGVISOR_RETURN_IF_ERROR(sink(b));
    if (left) {
      *left -= b.size();
      if (*left == 0) {
        done = true;
        return Error::Internal("read file: range complete");
      }
    }
    return Ok();
  };
  auto ch = AGVISOR_TRY(Channel());
  // A STAT that fails (no such file, ...) leaves the answer to FILE_READ, with its own wording.
  // Its size only picks the transport; nothing is allocated from it.
  auto st = ch->Stat(path);
  if (IsBulk(st)) {
    auto bulk = ReadByExec(path, /*tar=*/false, ranged);
    if (done) return Ok();
    if (!bulk.ok()) return bulk.error();
    if (*bulk) return Ok();
    // An agent without read-file (a sandbox made by an older agvisor): the channel does it.
  }
  auto r = ch->ReadFileTo(path, ranged);
  if (done) return Ok();
  if (!r.ok()) return ch->broken() ? Diagnose(r.error()) : r.error();
  return Ok();
}

Result<bool> Sandbox::ReadByExec(std::string_view path, bool tar, const channel::ByteSink& sink) {
  // Docker keeps an exec running (and drains its output) after its client went away: the agent
  // watches its stdin, held open by the runtime and closed when the sink stops the read.
  std::vector<std::string> cmd = {std::string(kAgentPath), "read-file", "--watch-stdin"};
  if (tar) cmd.emplace_back("--tar");
  cmd.emplace_back(path);
  const std::string what = (tar ? "download " : "read file ") + std::string(path);
  std::string err;
  std::optional<Error> sink_error;
  auto code = runtime_->RunExec(
      container_id_, cmd,
      [&](std::string_view bytes) -> Result<void> {
        auto r = sink(bytes);
        if (!r.ok()) sink_error = r.error();
        return r;
      },
      [&](std::string_view bytes) {
        if (err.size() < 64 * 1024) err.append(bytes);
      });
  if (sink_error) return *sink_error;
  if (!code.ok()) {
    Error died = DiagnoseExecFailure(code.error());
    if (died.code() == ErrorCode::kSandboxDied) return died;
    return Diagnose(code.error());  // a broken stream: gives Docker a moment to record a death
  }
  if (*code == 0) return true;
  // An older agent: no read-file, or no --tar (then nothing was written either).
  if (*code == agent::kExitUsage) return false;
  // The agent's message, without its "agvisor-agent: read-file: " prefix and final newline.
  constexpr std::string_view kPrefix = "agvisor-agent: read-file: ";
  std::string_view msg = err;
  if (msg.starts_with(kPrefix)) msg.remove_prefix(kPrefix.size());
  while (!msg.empty() && msg.back() == '\n') msg.remove_suffix(1);
  const int wire = *code - agent::kReadFileExitErrorBase;
  if (wire >= 1 && proto::IsKnownWireError(static_cast<std::uint16_t>(wire))) {
    return proto::ErrorPayload{static_cast<proto::WireError>(wire), std::string(msg)}
        .ToError()
        .WithContext(what);
  }
  // Killed (the sandbox ended under it?) or another failure of the exec.
  Error e =
      Error::Unavailable(what + ": agvisor-agent read-file exited with code " +
                         std::to_string(*code) + (msg.empty() ? "" : ": " + std::string(msg)));
  return Diagnose(e);
}

Result<void> Sandbox::WriteFile(std::string_view path, std::string_view data, std::uint32_t mode) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("write file", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->WriteFile(path, data, mode, /*make_parents=*/true);
  if (!r.ok()) return Diagnose(r.error());
  return Ok();
}

Result<FileEntry> Sandbox::Stat(std::string_view path) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("stat", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->Stat(path);
  if (!r.ok()) return Diagnose(r.error());
  return r;
}

Result<std::vector<FileEntry>> Sandbox::ListDir(std::string_view path) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("list", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->List(path);
  if (!r.ok()) return Diagnose(r.error());
  return r;
}

Result<void> Sandbox::Mkdir(std::string_view path, bool parents, std::uint32_t mode) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("mkdir", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->Mkdir(path, mode, parents);
  if (!r.ok()) return Diagnose(r.error());
  return Ok();
}

Result<void> Sandbox::Remove(std::string_view path, bool recursive) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("remove", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->Remove(path, recursive);
  if (!r.ok()) return Diagnose(r.error());
  return Ok();
}

namespace {

// Reads all of fd (a tar process's stdout) as a ByteSource.
channel::ByteSource FdSource(int fd) {
  return [fd](std::span<char> buf) -> Result<std::size_t> {
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno != EINTR) return Error::FromErrno("read from tar", errno);
    }
  };
}

Result<void> TarFinished(Subprocess& tar, std::string_view what) {
  std::string err;
  if (tar.stderr_fd()) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(tar.stderr_fd().get(), buf, sizeof buf)) > 0) {
      if (err.size() < 4096) err.append(buf, static_cast<std::size_t>(n));
    }
  }
  auto st = AGVISOR_TRY(tar.Wait());
  if (!st.success()) {
    return Error::Internal(std::string(what) + ": tar " + st.ToString() +
                           (err.empty() ? "" : ": " + err));
  }
  return Ok();
}

}  // namespace

Result<void> PackLocalPath(std::string_view local_path,
                           const std::function<Result<void>(const channel::ByteSource&)>& send) {
  std::error_code ec;
  std::filesystem::path local(local_path);
  if (!std::filesystem::exists(std::filesystem::symlink_status(local, ec))) {
    return Error::NotFound("upload: no such local file or directory: " + std::string(local_path));
  }
  local = std::filesystem::absolute(local, ec).lexically_normal();
  if (local.filename().empty()) local = local.parent_path();
  const std::string parent = local.has_parent_path() ? local.parent_path().string() : "/";
  // The system's tar packs (links, modes, long names); the agent extracts under sandbox_dir.
  auto tar = AGVISOR_TRY(
      Subprocess::Spawn({.argv = {"tar", "-C", parent, "-cf", "-", "--", local.filename().string()},
                         .pipe_stdout = true,
                         .pipe_stderr = true}));
  auto r = send(FdSource(tar.stdout_fd().get()));
  if (!r.ok()) {
    (void)tar.Kill(SIGKILL);
    return r.error();
  }
  return TarFinished(tar, "upload " + std::string(local_path));
}

Result<void> Sandbox::Upload(std::string_view local_path, std::string_view sandbox_dir) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("upload", sandbox_dir));
  return PackLocalPath(local_path, [&](const channel::ByteSource& source) {
    return UploadTar(sandbox_dir, source);
  });
}

Result<void> Sandbox::UploadTar(std::string_view sandbox_dir, const channel::ByteSource& source) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("upload", sandbox_dir));
  auto ch = AGVISOR_TRY(Channel());
  if (auto m = ch->Mkdir(sandbox_dir, 0755, true); !m.ok()) return Diagnose(m.error());
  auto r = ch->TarWrite(sandbox_dir, source);
  // An error of `source` leaves the channel intact: not a death to diagnose.
  if (!r.ok()) return ch->broken() ? Diagnose(r.error()) : r.error();
  return Ok();
}

Result<void> Sandbox::DownloadTar(std::string_view sandbox_path, const channel::ByteSink& sink) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("download", sandbox_path));
  auto ch = AGVISOR_TRY(Channel());
  // A STAT that fails leaves the answer to TAR_READ, with its own wording.
  if (IsBulk(ch->Stat(sandbox_path))) {
    auto bulk = ReadByExec(sandbox_path, /*tar=*/true, sink);
    if (!bulk.ok()) return bulk.error();
    if (*bulk) return Ok();
    // An agent without read-file --tar: the channel does it.
  }
  auto r = ch->TarRead(sandbox_path, sink);
  if (!r.ok()) return ch->broken() ? Diagnose(r.error()) : r.error();
  return Ok();
}

Result<void> UnpackIntoLocalDir(
    std::string_view local_dir,
    const std::function<Result<void>(const channel::ByteSink&)>& receive,
    const DownloadOptions& options) {
  namespace fs = std::filesystem;
  const std::string what = "download into " + std::string(local_dir);
  if (local_dir.empty()) return Error::InvalidArgument("download: empty local directory");
  // The directories this download makes for local_dir itself, deepest first: a failed download
  // removes them again (rmdir: only while empty).
  std::vector<fs::path> made;
  std::error_code ec;
  for (fs::path p = fs::absolute(fs::path(local_dir), ec).lexically_normal();
       !ec && !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
    made.push_back(p);
    if (p == p.parent_path()) break;
  }
  ec.clear();
  fs::create_directories(fs::path(local_dir), ec);
  if (ec) {
    return Error::FromErrno("download: create local directory " + std::string(local_dir),
                            ec.value());
  }
  auto remove_made = [&made] {
    for (const auto& p : made) {
      if (::rmdir(p.c_str()) != 0) break;
    }
  };
  TarReaderOptions ro;
  ro.host_rules = true;
  ro.max_bytes = options.max_bytes;
  auto reader_r = TarStreamReader::Open(local_dir, ro);
  if (!reader_r.ok()) {
    remove_made();
    return reader_r.error().WithContext(what);
  }
  std::unique_ptr<TarStreamReader> reader = std::move(reader_r).value();
  bool refused = false;  // the error is the reader's (an entry), not the transport's
  auto r = receive([&](std::string_view b) -> Result<void> {
    auto p = reader->Push(b);
    if (!p.ok()) refused = true;
    return p;
  });
  if (r.ok()) {
    r = reader->Finish();
    if (!r.ok()) refused = true;
  }
  if (!r.ok()) {
    reader.reset();  // removes what the archive created (the reader's host rules)
    remove_made();
    return refused ? r.error().WithContext(what) : r.error();
  }
  return Ok();
}

Result<void> Sandbox::Download(std::string_view sandbox_path, std::string_view local_dir,
                               const DownloadOptions& options) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("download", sandbox_path));
  return UnpackIntoLocalDir(
      local_dir, [&](const channel::ByteSink& sink) { return DownloadTar(sandbox_path, sink); },
      options);
}

Result<std::unique_ptr<PortStream>> Sandbox::OpenPort(std::uint16_t port) {
  if (port == 0) return Error::InvalidArgument("open port: port must be 1..65535");
  auto ch = AGVISOR_TRY(Channel());
  auto p = ch->OpenPort(port);
  if (!p.ok()) {
    // kUnavailable from the agent (nothing listens) leaves the channel intact: not a death.
    if (!ch->broken()) return p.error();
    return Diagnose(p.error());
  }
  return std::move(*p);
}

Result<void> Sandbox::Remove(std::string_view container_name, std::string_view host,
                             bool erase_data) {
  auto runtime = AGVISOR_TRY(RuntimeFor(host));
  bool had_container = AGVISOR_TRY(runtime->Remove(container_name));
  AGVISOR_RETURN_IF_ERROR(runtime->RemoveEgressNetwork(container_name));
  bool had_volume = false;
  if (erase_data) had_volume = AGVISOR_TRY(runtime->RemoveVolume(container_name));
  if (!had_container && !had_volume) {
    return Error::NotFound("no sandbox " + std::string(container_name) + " on " +
                           (host.empty() ? std::string("this host") : std::string(host)) +
                           " (`agvisor ls` lists them)");
  }
  return Ok();
}

Result<void> Sandbox::SetDeadlines(std::optional<std::int64_t> lifetime,
                                   std::optional<std::int64_t> idle_ttl) {
  if ((lifetime && *lifetime <= 0) || (idle_ttl && *idle_ttl <= 0)) {
    return Error::InvalidArgument(
        "set deadlines: lifetime and idle_ttl must be > 0 seconds (leave one unset for none)");
  }
  auto ch = AGVISOR_TRY(Channel());
  auto ms = [](std::optional<std::int64_t> s) -> std::optional<std::chrono::milliseconds> {
    if (!s) return std::nullopt;
    return std::chrono::milliseconds(*s * 1000);
  };
  auto r = ch->SetDeadlines(ms(lifetime), ms(idle_ttl));
  if (!r.ok()) return Diagnose(r.error().WithContext("in " + container_name_));
  idle_ttl_ = idle_ttl;
  return Ok();
}

bool Sandbox::ChannelOpen() const {
  std::lock_guard lock(channel_mu_);
  return channel_ && !channel_->broken();
}

Result<void> Sandbox::Stop() {
  AGVISOR_RETURN_IF_ERROR(runtime_->Remove(container_name_));
  std::lock_guard lock(channel_mu_);
  if (channel_) channel_->Shutdown("the sandbox was stopped");
  return Ok();
}

Result<void> Sandbox::Delete() {
  AGVISOR_RETURN_IF_ERROR(Stop());
  if (persistent()) AGVISOR_RETURN_IF_ERROR(runtime_->RemoveVolume(container_name_));
  return Ok();
}

}  // namespace agvisor
