#include "agvisor/sandbox/sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "agvisor/base/subprocess.h"
#include "agvisor/base/tar_stream.h"
#include "agvisor/proto/exit_codes.h"
#include "agvisor/sandbox/desktop.h"
#include "agvisor/sandbox/egress_network.h"
#include "agvisor/sandbox/idle_pause.h"
#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/runtime_local.h"
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

// The sandboxes paused through `runtime` (RuntimeLocal): a call on any of its handles resumes
// one first. The count is read without the lock, so nothing is paid while none is paused.
// `labels` and `created_unix` (when known) let a resume before its lifetime's end skip the
// runtime's inspect (RuntimeLocal::paused).
void MarkPaused(Runtime& runtime, const std::string& id, bool paused,
                const Labels* labels = nullptr, std::int64_t created_unix = 0) {
  RuntimeLocal& p = runtime.local();
  std::lock_guard lock(p.mu);
  if (paused) {
    p.paused[id] =
        labels == nullptr
            ? 0
            : LifetimeEnd(*labels, created_unix).value_or(std::numeric_limits<std::int64_t>::max());
  } else {
    p.paused.erase(id);
  }
  p.paused_count = static_cast<int>(p.paused.size());
}
bool PausedByUs(Runtime& runtime, std::string_view id) {
  RuntimeLocal& p = runtime.local();
  if (p.paused_count.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(p.mu);
  return p.paused.count(id) != 0;
}
// Whether a resume of `id` may go straight to the runtime's unpause at `now_unix`: paused here,
// with its lifetime's end known and not reached.
bool ResumableWithoutInspect(Runtime& runtime, std::string_view id, std::int64_t now_unix) {
  RuntimeLocal& p = runtime.local();
  if (p.paused_count.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(p.mu);
  auto it = p.paused.find(id);
  return it != p.paused.end() && now_unix < it->second;
}

std::int64_t UnixNow() { return static_cast<std::int64_t>(std::time(nullptr)); }

// The memory each sandbox was last resized to through `runtime` (container id -> "256m"), for
// the out-of-memory message of any of its handles: the container's label keeps the create-time
// value (labels cannot change on a running container). Bounded.
void RecordResizedMemory(Runtime& runtime, const std::string& id, const std::string& memory) {
  RuntimeLocal& r = runtime.local();
  std::lock_guard lock(r.mu);
  if (r.resized_memory.size() >= 4096 && !r.resized_memory.count(id)) {
    r.resized_memory.erase(r.resized_memory.begin());
  }
  r.resized_memory[id] = memory;
}
std::optional<std::string> ResizedMemory(Runtime& runtime, std::string_view id) {
  RuntimeLocal& r = runtime.local();
  std::lock_guard lock(r.mu);
  auto it = r.resized_memory.find(id);
  if (it == r.resized_memory.end()) return std::nullopt;
  return it->second;
}

}  // namespace

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
  AGVISOR_RETURN_IF_ERROR(WakeIfPausedHere());
  std::lock_guard lock(channel_mu_);
  if (channel_ && !channel_->broken()) return channel_;
  channel_.reset();
  channel_ = AGVISOR_TRY(OpenChannel());
  if (idle_pause_ && !container_id_.empty()) ShareIdleChannel(*runtime_, container_id_, channel_);
  return channel_;
}

Result<std::shared_ptr<channel::Channel>> Sandbox::OpenChannel() {
  // One `docker exec -i agvisor-agent connect`: it relays to the agent's socket.
  auto connect = [&](std::uint16_t version) -> Result<std::shared_ptr<channel::Channel>> {
    auto log = agent_log_;
    auto open = [&] {
      return runtime_->OpenExecStream(container_id_, {std::string(kAgentPath), "connect"},
                                      [log](std::string_view b) { log->Append(b); });
    };
    auto stream = open();
    // Paused by another process (this one's pauses were resumed by Channel()): the runtime
    // refuses the exec; resume and try again.
    if (!stream.ok() && AGVISOR_TRY(WakeIfPaused(stream.error()))) stream = open();
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

namespace {
// A runtime was given, and `host` (a spec's; "" = any) is its host.
Result<void> CheckRuntimeFor(const std::shared_ptr<Runtime>& runtime, std::string_view host) {
  if (!runtime) return Error::InvalidArgument("sandbox: no runtime given (MakeRuntime makes one)");
  if (host.empty() || host == runtime->host()) return Ok();
  return Error::InvalidArgument("spec.host '" + std::string(host) +
                                "' is not the host of the runtime it was given ('" +
                                runtime->host() + "'): create it through that host's place");
}
}  // namespace

Result<std::unique_ptr<Sandbox>> Sandbox::Create(std::shared_ptr<Runtime> runtime,
                                                 const SandboxSpec& spec) {
  return Create(std::move(runtime), spec, {});
}

Result<std::unique_ptr<Sandbox>> Sandbox::Create(
    std::shared_ptr<Runtime> runtime, const SandboxSpec& spec,
    const std::map<std::string, std::string>& system_labels) {
  AGVISOR_RETURN_IF_ERROR(ValidateSpec(spec));
  AGVISOR_RETURN_IF_ERROR(CheckRuntimeFor(runtime, spec.host));
  if (spec.egress) AGVISOR_RETURN_IF_ERROR(runtime->CheckEgressSupport());
  if (!spec.secrets.empty() && !spec.brokered) {
    return Error::Unsupported(
        "secrets are brokered by agvisord's egress enforcer, which keeps their values out of the "
        "sandbox; this create runs in process without it. Start agvisord on the Docker host "
        "(`agvisord &`, as root) and create through it: `agvisor --server unix:///run/"
        "agvisord.sock create ...`, or agvisor.connect() in Python");
  }
  // gVisor only, decided from the runtime's binary, before anything is made on the host.
  const std::string cname = ContainerNameFor(spec.name ? *spec.name : RandomSuffix());
  InstanceDecisions decisions;
  // The platform: the one asked for; for a named sandbox its own (recorded on its volume), which
  // an explicit other one may not change (its processes and data were made there).
  std::optional<std::string> recorded;
  if (spec.name) {
    if (auto labels = AGVISOR_TRY(runtime->VolumeLabels(cname))) {
      auto it = labels->find(std::string(kLabelPlatform));
      // A volume from before agvisor recorded the platform: its sandbox ran on systrap.
      recorded = it != labels->end() ? it->second : std::string(kPlatformSystrap);
    }
  }
  std::string platform_warning;
  if (!spec.platform.empty()) {
    if (recorded && *recorded != spec.platform) {
      return Error::Conflict("sandbox " + *spec.name + " was made on gVisor platform '" +
                             *recorded + "', not '" + spec.platform +
                             "': resume it without a platform (or with its own), or delete it "
                             "to make it anew on another");
    }
    decisions.platform = spec.platform;
  } else if (recorded && ValidatePlatform(*recorded).ok() && !recorded->empty()) {
    decisions.platform = *recorded;
  } else if (spec.gui) {
    // A desktop stays on systrap: it is many threads (Xvnc, the xfce components, a browser),
    // each a traced host thread on ptrace, and it is never idle for long (bench/README.md,
    // "Density": a desktop on ptrace was killed mid-click in desktop_test).
    decisions.platform = std::string(kPlatformSystrap);
  } else {
    decisions.platform = AGVISOR_TRY(runtime->DefaultPlatform(spec.runtime, &platform_warning));
  }
  decisions.runtime =
      AGVISOR_TRY(runtime->RequireGvisor(spec.runtime, decisions.platform, spec.network == "none"));
  // "snapshot:TAG" is a snapshot in this process's snapshot repository (snapshot.h).
  const std::string image = !spec.image.empty()
                                ? AGVISOR_TRY(ResolveSnapshotImage(spec.image))
                                : std::string(spec.gui ? kDefaultDesktopImage : kDefaultImage);

  auto handle = std::unique_ptr<Sandbox>(new Sandbox());
  handle->runtime_ = runtime;
  handle->host_ = runtime->host();
  handle->container_name_ = cname;
  handle->name_ = spec.name;
  handle->idle_ttl_ = spec.idle_ttl;
  handle->idle_pause_ = spec.idle_action == "pause";
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
  if (!platform_warning.empty()) {
    handle->disk_warning_ += (handle->disk_warning_.empty() ? "" : "; ") + platform_warning;
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
    vlabels[std::string(kLabelPlatform)] = decisions.platform;
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
                          ? "build it with `sudo agvisor image build desktop` (about 4 minutes; "
                            "`agvisor create --gui` does it on first use, scripts/setup-host "
                            "--desktop too)"
                          : "pull it (`docker pull " + image +
                                "`) or build it (`agvisor image build KIND` makes "
                                "agvisor/KIND:latest; or `docker build`) on that host first";
    return Error::NotFound("image " + image + " not found on " +
                           (runtime->host().empty() ? std::string("this host") : runtime->host()) +
                           ": " + fix + " (" + with_agent.error().message() + ")");
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
        if (st.status == "paused" &&
            LifetimeOver(existing->labels, existing->created_unix, UnixNow())) {
          // Paused past its lifetime: ended as its agent would have, then made afresh below.
          MarkPaused(*runtime, existing->id, false);
          AGVISOR_RETURN_IF_ERROR(runtime->Remove(existing->id));
          continue;
        }
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
          handle->idle_pause_ = IdlePauseTtl(existing->labels).has_value();
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
      Labels net_labels = spec.labels;
      if (spec.brokered) net_labels[std::string(kLabelEgressSecrets)] = spec.brokered->label;
      const SandboxNetwork net =
          AGVISOR_TRY(runtime->EnsureEgressNetwork(cname, rules, net_labels));
      ApplyEgressNetwork(instance, net, rules);
      if (spec.brokered) ApplyBrokeredSecrets(instance, *spec.brokered);
    }
    // At most a few starts at once per host, the rest queued (start_gate.h): past that the
    // runtime slows every start down. Held until the handshake is done.
    auto ticket = AGVISOR_TRY(runtime->start_gate().Enter());
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
      if (!ch.ok() && started->reopen) {
        // A relay that did not start (its runtime's error text read as a frame, or nothing):
        // one more, and the agent's answer to it decides.
        auto again = started->reopen();
        if (again.ok()) ch = channel::Channel::Open(std::move(*again));
        trace.Mark("agent handshake, second relay");
      }
      if (!ch.ok()) {
        std::string tail = handle->agent_log_->Tail();
        return ch.error().WithContext(
            "agent handshake" + (tail.empty() ? std::string() : " (agent log: " + tail + ")"));
      }
      {
        std::lock_guard lock(handle->channel_mu_);
        handle->channel_ = *ch;
      }
      if (handle->idle_pause_) ShareIdleChannel(*runtime, started->id, *ch);
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
    // What killed clients left between create and start (once per runtime object).
    SweepNeverStartedOnce(*runtime);
    return handle;
  }
  return Error::Conflict("sandbox " + cname +
                         " is being created and removed by other clients at the same time; "
                         "try again");
}

Error NoSuchSandbox(std::string_view container_name) {
  std::string_view name = container_name;
  if (name.starts_with(kNamePrefix)) name.remove_prefix(kNamePrefix.size());
  return Error::NotFound("no sandbox named " + std::string(name) + " (`agvisor ls` lists them)");
}

Result<std::unique_ptr<Sandbox>> Sandbox::Open(std::shared_ptr<Runtime> runtime,
                                               std::string_view container_name) {
  AGVISOR_RETURN_IF_ERROR(CheckRuntimeFor(runtime, ""));
  auto inspected = runtime->Inspect(container_name);
  if (!inspected.ok() && inspected.error().code() == ErrorCode::kNotFound) {
    return NoSuchSandbox(container_name);
  }
  auto info = AGVISOR_TRY(std::move(inspected));
  // A container of that name that agvisor did not make is no sandbox either.
  if (info.labels.count(std::string(kLabelManaged)) == 0) return NoSuchSandbox(container_name);
  auto handle = std::unique_ptr<Sandbox>(new Sandbox());
  handle->runtime_ = runtime;
  handle->host_ = runtime->host();
  handle->container_name_ = info.name;
  handle->container_id_ = info.id;
  if (auto it = info.labels.find(std::string(kLabelName)); it != info.labels.end()) {
    handle->name_ = it->second;
  }
  if (auto it = info.labels.find(std::string(kLabelIdleTtl)); it != info.labels.end()) {
    handle->idle_ttl_ = std::stoll(it->second);
  }
  handle->idle_pause_ = IdlePauseTtl(info.labels).has_value();
  if (auto it = info.labels.find(std::string(kLabelMemory)); it != info.labels.end()) {
    handle->memory_ = it->second;
  }
  return handle;
}

Result<std::vector<SandboxInfo>> Sandbox::List(const std::shared_ptr<Runtime>& runtime) {
  AGVISOR_RETURN_IF_ERROR(CheckRuntimeFor(runtime, ""));
  // The volumes are asked for beside the containers: one of Docker's answers' time, not two
  // (each ~0.1-0.2 s on Docker 20.10 with 300 sandboxes, the volume list even with no volume).
  auto volumes_asked = std::async(std::launch::async,
                                  [&runtime] { return runtime->VolumesWithLabel(kLabelManaged); });
  auto list = AGVISOR_TRY(runtime->List({std::string(kLabelManaged)}));
  // idle_action pause: the listing client freezes the ones idle long enough (idle_pause.h).
  const std::vector<std::string> frozen = PauseIdleSandboxes(*runtime, list);
  for (const auto& s : list) {
    if (std::find(frozen.begin(), frozen.end(), s.id) != frozen.end()) {
      MarkPaused(*runtime, s.id, true, &s.labels, s.created_unix);
    }
  }
  std::vector<SandboxInfo> out;
  for (auto s : list) {
    if (std::find(frozen.begin(), frozen.end(), s.id) != frozen.end()) s.status = "paused";
    if (s.helper) continue;  // the runtime's own (adding the agent to an image), not a sandbox
    SandboxInfo i;
    i.container_name = s.name.empty() ? s.id.substr(0, 12) : s.name;
    if (auto it = s.labels.find(std::string(kLabelName)); it != s.labels.end()) i.name = it->second;
    if (auto it = s.labels.find(std::string(kLabelPool)); it != s.labels.end()) i.pool = it->second;
    if (auto it = s.labels.find(std::string(kLabelPlatform)); it != s.labels.end()) {
      i.platform = it->second;
    }
    i.container_id = s.id;
    i.created_unix = s.created_unix;
    if (auto it = s.labels.find(std::string(kLabelCpus)); it != s.labels.end()) i.cpus = it->second;
    if (auto it = s.labels.find(std::string(kLabelMemory)); it != s.labels.end()) {
      i.memory = it->second;
    }
    auto image = s.labels.find(std::string(kLabelImage));
    i.image = image != s.labels.end() ? image->second : s.image;
    i.state = s.status;
    i.running = s.status == "running" || s.status == "paused";
    i.host = runtime->host();
    if (s.status == "paused" && LifetimeOver(s.labels, s.created_unix, UnixNow())) {
      // Its frozen agent cannot end it: the listing client does (docs/lifecycle.md).
      auto r = runtime->Remove(s.id);
      if (r.ok()) {
        MarkPaused(*runtime, s.id, false);
        i.state = "removed";
        i.running = false;
        i.end_reason = EndReason::kLifetime;
      }
    }
    out.push_back(std::move(i));
  }
  // Named sandboxes that were stopped (or expired): no container, their /workspace volume kept.
  // Listed so that a user finds what to resume (`create --name`) or erase (`rm`).
  auto volumes = AGVISOR_TRY(volumes_asked.get());
  for (auto& [volume, labels] : volumes) {
    const bool has_container = std::any_of(
        out.begin(), out.end(), [&](const SandboxInfo& s) { return s.container_name == volume; });
    auto name = labels.find(std::string(kLabelName));
    if (has_container || name == labels.end()) continue;
    SandboxInfo i;
    i.container_name = volume;
    i.name = name->second;
    if (auto it = labels.find(std::string(kLabelPlatform)); it != labels.end()) {
      i.platform = it->second;
    }
    i.state = "stopped";
    i.end_reason = EndReason::kStopped;
    i.host = runtime->host();
    out.push_back(std::move(i));
  }
  return out;
}

Result<SandboxInfo> Sandbox::Info() {
  auto i = AGVISOR_TRY(InfoLocked());
  i.idle_ttl = idle_ttl_;
  if (i.running) {
    // Best effort: a sandbox that ended between the two calls just shows no limits.
    if (auto l = runtime_->ReadLimits(i.container_id); l.ok()) {
      l->pids = SandboxPidsOf(i.platform, l->pids);  // the host's cap, in the caller's terms
      i.limits = std::move(*l);
    }
  }
  return i;
}

Result<LiveLimits> Sandbox::Update(const LimitsUpdate& update) {
  AGVISOR_RETURN_IF_ERROR(ValidateLimitsUpdate(update));
  const std::string ref = container_id_.empty() ? container_name_ : container_id_;
  ResizeSpec r{.cpus = update.cpus, .sandbox_pids = update.pids};
  if (update.memory) r.memory_bytes = AGVISOR_TRY(ParseMemorySize("limits.memory", *update.memory));
  // The host's pids cap is scaled by the platform the sandbox was made on (its label), both ways.
  auto info = runtime_->Inspect(ref);
  if (!info.ok()) return DiagnoseExecFailure(info.error());
  std::string platform;
  if (auto it = info->labels.find(std::string(kLabelPlatform)); it != info->labels.end()) {
    platform = it->second;
  }
  if (update.pids) r.pids = HostPidsCap(platform, *update.pids);
  auto live = runtime_->Resize(ref, r);
  if (!live.ok()) {
    const ErrorCode code = live.error().code();
    // Not running (or gone): why, as kSandboxDied, as for any other call.
    if (code == ErrorCode::kNotFound || code == ErrorCode::kConflict) {
      return DiagnoseExecFailure(live.error());
    }
    return live.error();
  }
  if (update.memory) RecordResizedMemory(*runtime_, container_id_, *update.memory);
  live->pids = SandboxPidsOf(platform, live->pids);
  return live;
}

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
  if (auto it = info->labels.find(std::string(kLabelPlatform)); it != info->labels.end()) {
    i.platform = it->second;
  }
  i.created_unix = info->created_unix;
  if (auto it = info->labels.find(std::string(kLabelCpus)); it != info->labels.end()) {
    i.cpus = it->second;
  }
  if (auto it = info->labels.find(std::string(kLabelMemory)); it != info->labels.end()) {
    i.memory = it->second;
  }
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

Error SandboxDiedError(const SandboxInfo& info, std::string_view memory) {
  std::string why;
  switch (info.end_reason) {
    case EndReason::kOutOfMemory:
      why = "it ran out of memory" +
            (memory.empty() ? std::string() : " (limits.memory=" + std::string(memory) + ")") +
            "; under gVisor that ends the whole sandbox";
      break;
    case EndReason::kGone:
      why = "its container no longer exists (it expired, was stopped, or hit a limit)";
      break;
    case EndReason::kKilled:
      why = "it was killed (exit code " + std::to_string(info.exit_code) +
            "; the pids limit or an outside kill)";
      break;
    default:
      why = std::string(EndReasonName(info.end_reason));
  }
  std::string again = info.name ? "; create it again with the same name to get a fresh "
                                  "container on the same /workspace"
                                : "";
  return Error::SandboxDied("sandbox " + info.container_name + " is not running: " + why + again);
}

Error Sandbox::DiagnoseExecFailure(const Error& e) {
  auto info = InfoLocked();
  if (!info.ok() || info->running) return e;
  info->container_name = container_name_;
  info->name = name_;
  return SandboxDiedError(*info, info->end_reason == EndReason::kOutOfMemory
                                     ? ResizedMemory(*runtime_, container_id_).value_or(memory_)
                                     : memory_);
}

Result<void> Sandbox::Remove(const std::shared_ptr<Runtime>& runtime,
                             std::string_view container_name, bool erase_data) {
  AGVISOR_RETURN_IF_ERROR(CheckRuntimeFor(runtime, ""));
  bool had_container = AGVISOR_TRY(runtime->Remove(container_name));
  AGVISOR_RETURN_IF_ERROR(runtime->RemoveEgressNetwork(container_name));
  bool had_volume = false;
  if (erase_data) had_volume = AGVISOR_TRY(runtime->RemoveVolume(container_name));
  if (!had_container && !had_volume) return NoSuchSandbox(container_name);
  return Ok();
}

Result<void> Sandbox::SetDeadlines(std::optional<std::int64_t> lifetime,
                                   std::optional<std::int64_t> idle_ttl) {
  if (auto v = ValidateDeadlines(lifetime, idle_ttl); !v.ok()) {
    return v.error().WithContext("set deadlines");
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

Error Sandbox::PausedError() const {
  const std::string& shown = name_ ? *name_ : container_name_;
  return Error::Conflict(
      "sandbox " + shown + " is paused and this call was asked not to resume it: " +
      "resume it first (`agvisor resume " + shown +
      "`, sb.resume(), POST /v1/sandboxes/{id}/resume) or let the call resume it");
}

Result<void> Sandbox::WakeIfPausedHere() {
  if (PausedByUs(*runtime_, container_id_)) {
    if (!auto_resume_) return PausedError();
    return Resume();
  }
  if (!idle_pause_ || !idle_ttl_) return Ok();
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  const std::int64_t last = last_call_ns_.exchange(now);
  // The agent's idle clock starts no earlier than this handle's previous call: until idle_ttl
  // (less a second for the lister's own delay) has passed since, no lister can have frozen it.
  const std::int64_t safe_ns = (*idle_ttl_ * 1000 - 1000) * 1'000'000;
  if (last != 0 && now - last < safe_ns) return Ok();
  auto info = runtime_->Inspect(container_id_);
  if (!info.ok() || info->state.status != "paused") return Ok();  // the call reports the rest
  if (!auto_resume_) return PausedError();
  return Resume();
}

Result<bool> Sandbox::WakeIfPaused(const Error& e) {
  if (e.code() != ErrorCode::kConflict) return false;
  auto info = runtime_->Inspect(container_id_);
  if (!info.ok() || info->state.status != "paused") return false;
  if (!auto_resume_) return PausedError();
  AGVISOR_RETURN_IF_ERROR(Resume());
  return true;
}

Result<void> Sandbox::RefuseIfPaused() {
  auto info = runtime_->Inspect(container_id_);
  if (!info.ok()) {
    if (info.error().code() == ErrorCode::kNotFound) return Ok();  // the call reports it
    return info.error();
  }
  if (info->state.status == "paused") return PausedError();
  return Ok();
}

Result<void> Sandbox::Pause() {
  auto r = runtime_->Pause(container_id_);
  if (!r.ok()) {
    if (r.error().code() != ErrorCode::kConflict && r.error().code() != ErrorCode::kNotFound) {
      return r.error();
    }
    // Already paused (done), or not running (why, as kSandboxDied).
    auto info = AGVISOR_TRY(InfoLocked());
    if (info.state != "paused") return DiagnoseExecFailure(r.error());
  }
  // The labels and creation time, read now so that the resume (on the path of the call that
  // wakes it) need not ask the runtime first (docs/lifecycle.md, "Where a resume's time goes").
  auto known = runtime_->Inspect(container_id_);
  if (known.ok()) {
    MarkPaused(*runtime_, container_id_, true, &known->labels, known->created_unix);
  } else {
    MarkPaused(*runtime_, container_id_, true);
  }
  return Ok();
}

Result<void> Sandbox::Resume() {
  if (ResumableWithoutInspect(*runtime_, container_id_, UnixNow())) {
    // Paused here before its lifetime's end: the unpause alone. When it fails (not paused any
    // more, or not running), the checks below say what is the case.
    if (runtime_->Unpause(container_id_).ok()) {
      MarkPaused(*runtime_, container_id_, false);
      return Ok();
    }
  }
  auto info = runtime_->Inspect(container_id_);
  if (!info.ok() && info.error().code() != ErrorCode::kNotFound) return info.error();
  if (!info.ok() || !info->state.running) {
    MarkPaused(*runtime_, container_id_, false);
    return DiagnoseExecFailure(Error::Conflict("resume " + container_name_ + ": not running"));
  }
  if (info->state.status != "paused") {
    MarkPaused(*runtime_, container_id_, false);
    return Ok();
  }
  if (LifetimeOver(info->labels, info->created_unix, UnixNow())) {
    // Past its lifetime: ended, not resumed (on runsc the runtime thaws it only to remove it).
    AGVISOR_RETURN_IF_ERROR(runtime_->Remove(container_id_));
    MarkPaused(*runtime_, container_id_, false);
    std::string again = persistent() ? "; create it again with the same name to get a fresh "
                                       "container on the same /workspace"
                                     : "";
    return Error::SandboxDied("sandbox " + container_name_ + " is not running: " +
                              std::string(EndReasonName(EndReason::kLifetime)) +
                              " while paused (ended on resume)" + again);
  }
  auto r = runtime_->Unpause(container_id_);
  // kConflict: another client resumed it meanwhile.
  if (!r.ok() && r.error().code() != ErrorCode::kConflict) return r.error();
  MarkPaused(*runtime_, container_id_, false);
  return Ok();
}

}  // namespace agvisor
