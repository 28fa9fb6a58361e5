// What a sandbox is asked to be: resource limits and the rest of its specification, and the
// validation that runs before anything is created on a host.
//
// Used by Sandbox (sandbox.h), the CLI, the daemon and the Python binding. The rules are the
// seed's (zero, negative and malformed limits refused; strict name and runtime charsets; image
// names starting with '-' refused), with messages that say which value was wrong, why, and what
// is allowed. Everything that ends up in a Docker request passes through here first.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/egress/policy.h"

namespace agvisor {

// The default root-disk cap. Enforced where the host can; elsewhere a sandbox created with the
// default runs uncapped and says so (see Limits::disk).
inline constexpr std::string_view kDefaultDisk = "5g";
// The image used when SandboxSpec::image is empty: built offline by `agvisor image build base`.
inline constexpr std::string_view kDefaultImage = "agvisor/base:latest";
// The image of `gui` sandboxes when SandboxSpec::image is empty: `agvisor image build desktop`.
inline constexpr std::string_view kDefaultDesktopImage = "agvisor/desktop:latest";
// The least memory a desktop is allowed (Xvnc, the xfce components and a browser tab).
inline constexpr std::string_view kMinDesktopMemory = "1g";
// Shells the agent keeps started for `sh -c` execs (SandboxSpec::warm_shells), and the most.
inline constexpr int kDefaultWarmShells = 2;
inline constexpr int kMaxWarmShells = 16;
// gVisor platforms (SandboxSpec::platform): how the sentry intercepts the sandbox's system calls.
// systrap is runsc's own default; ptrace costs an idle sandbox near-zero host CPU where systrap's
// stub threads keep waking (~4% of a CPU per idle or paused sandbox: gVisor issue 13361). KVM is
// not offered (it hung at start on the hosts this was built on).
inline constexpr std::string_view kPlatformSystrap = "systrap";
inline constexpr std::string_view kPlatformPtrace = "ptrace";
// The platform of a sandbox that asks for none: ptrace, decided by density (bench/README.md,
// "Density" and "gVisor platform"), where the host has it; else systrap, with one warning per
// host (Runtime::DefaultPlatform).
inline constexpr std::string_view kDefaultPlatform = kPlatformPtrace;
// The prefix of every sandbox's container and volume name.
inline constexpr std::string_view kNamePrefix = "agvisor-";

// A brokered secret (docs/egress.md, "Secrets"): the sandbox sees only a placeholder in env
// `name`; agvisord's egress enforcer puts the value in for requests to `hosts` (in the header
// `header`, or Authorization's Bearer/token/Basic user or password when ""). The value never
// enters the sandbox, a label, a container env var, a log line or a state file.
struct SecretSpec {
  std::string name;                // the env var inside (egress::ValidateSecret's rule)
  std::vector<std::string> hosts;  // exact names in canonical form, each allowed by the policy
  std::string header;              // "" = Authorization; else a header name ("x-api-key")
  // The caller's value (read by the caller from its own file; it travels only over agvisord's
  // authenticated API). Unset: the operator's secrets file on agvisord's host, by `name` (what
  // MCP and any caller that must not hold the value use).
  std::optional<std::string> value;
  bool operator==(const SecretSpec&) const = default;
};
inline constexpr std::size_t kMaxSecrets = 16;  // per sandbox

// What a sandbox gets for its secrets once a broker (agvisord's, client::InProcess with a
// SecretBroker) holds their values: set by the broker only, never by a caller or a codec.
struct BrokeredSecrets {
  std::vector<std::pair<std::string, std::string>> env;  // NAME -> agvsec_<random>
  std::string ca_pem;  // the sandbox CA's certificate, installed by the agent at start
  // The network label that names the bindings (EncodeSecretBindings): how the enforcer finds
  // them when it serves the sandbox's network, and rebinds the operator's after a restart.
  std::string label;
  bool operator==(const BrokeredSecrets&) const = default;
};

// The most Limits::pids: scaled to the host's tasks (HostPidsCap), it stays under the kernel's
// PID_MAX_LIMIT (4194304, the most a pids cgroup takes) on every platform.
inline constexpr std::int64_t kMaxPids = 65536;

// Resource limits, enforced by gVisor and the host's cgroups.
struct Limits {
  double cpus = 2.0;          // CPU cores; fractions allowed (0.5)
  std::string memory = "2g";  // RAM cap in Docker syntax ("512m", "1.5g"); swap disabled
  // Processes and threads inside the sandbox, at most kMaxPids. The host's cap is scaled from it
  // by the platform (HostPidsCap, instance_spec.h): gVisor's own host tasks are not counted.
  std::int64_t pids = 512;
  std::optional<std::string> shm;  // /dev/shm size; unset = Docker's 64m (1g for desktops)
  // Root file system cap, a whole number plus k/m/g/t ("5g"):
  //   ""      the default (kDefaultDisk) where the host can enforce it, else uncapped + a warning
  //   "none"  uncapped on purpose
  //   "10g"   an explicit cap: refused (kUnsupported) on a host that cannot enforce it
  std::string disk;
};

// A live resize of a running sandbox (Sandbox::Update, docs/lifecycle.md "Live resize"): the
// limits to change, in Limits' syntax; unset ones stay as they are. shm and disk cannot change
// while a sandbox runs (Docker mounts /dev/shm and gVisor sizes its overlay at start).
struct LimitsUpdate {
  std::optional<double> cpus;
  std::optional<std::string> memory;  // also the memory+swap cap: still no swap
  std::optional<std::int64_t> pids;
};

// The limits a running sandbox has now, as its runtime reports them (Sandbox::Info, Update).
struct LiveLimits {
  double cpus = 0;                // CPU cores of quota; 0 = no quota
  std::int64_t memory_bytes = 0;  // 0 = no cap
  std::int64_t pids = 0;          // 0 = no cap
  // Where they were read: "cgroup" (the host's cgroup files of the sandbox, now: a live resize
  // shows) or "created" (the runtime's record of create time, where the cgroup files are out of
  // reach, e.g. an ssh:// host; a resize is refused there anyway).
  std::string source;
};

struct SandboxSpec {
  std::string image;  // "" = kDefaultImage
  // A desktop sandbox (docs/desktop.md): image kDefaultDesktopImage unless set, memory at least
  // kMinDesktopMemory, shm 1g unless set; Create returns once the desktop is drawn.
  bool gui = false;
  Limits limits;
  std::string network = "bridge";  // "bridge", "none" or a network of `agvisor network create`
  std::optional<std::int64_t> lifetime;  // seconds until the sandbox ends itself
  std::optional<std::int64_t> idle_ttl;  // seconds without activity until it ends itself
  // What idle_ttl does (docs/lifecycle.md "Idle policy"): "destroy" (the container ends and is
  // removed; a named one's /workspace volume stays) or "stop" (the container ends and stays,
  // listed as exited; needs a name: the next create of it starts afresh on the same
  // /workspace). "pause" is refused for now (kUnsupported, saying why). Needs idle_ttl.
  std::string idle_action = "destroy";
  std::optional<std::string> name;  // makes it resumable; /workspace is kept in a volume
  std::string host;                 // "" = local Docker ($DOCKER_HOST); "ssh://user@host"
  std::string runtime = "runsc";    // a Docker runtime that is gVisor
  // Extra labels for the container and volume (e.g. a tenant id). Keys: lower-case letters,
  // digits, '.', '-', '_' (the "agvisor" prefix is reserved); values: printable, <= 256 bytes.
  std::map<std::string, std::string> labels;
  // An egress policy (docs/egress.md): the sandbox reaches only what it allows, through the
  // enforcer agvisord runs on the Docker host; nothing else (deny by default, fail closed).
  // Needs network "bridge" (the sandbox gets an internal network of its own). `egress->mode`
  // "learn" lets through what no rule allows and logs it (docs/egress.md, "Learn mode"); checked
  // here with the rules (ValidateSpec), whichever door it came through.
  std::optional<egress::EgressRules> egress;
  // Shells the agent starts beforehand so an exec of `sh -c CMD` with the default user, cwd
  // and env skips the shell's own start (docs/agent.md "Ready shells"); 0 = off, at most
  // kMaxWarmShells. They show in `ps` inside as `sh -s agvisor-agent ready shell ...`.
  int warm_shells = kDefaultWarmShells;
  // The gVisor platform: "systrap" or "ptrace". "" = a named sandbox's own (the
  // one it was first made on, kept on its volume; systrap for one made before agvisor recorded
  // it), systrap for a desktop (gui), else kDefaultPlatform where the host has it
  // (Runtime::DefaultPlatform). The runtime maps
  // it to a runtime
  // of its own (Docker: runsc-ptrace, which scripts/setup-host registers); recorded on the
  // sandbox (label agvisor.platform) and reported by ls and inspect.
  std::string platform;
  // Brokered secrets (docs/egress.md, "Secrets"): need an egress policy that allows each
  // secret's hosts, and agvisord (the in-process library refuses them: kUnsupported saying how
  // to start it).
  std::vector<SecretSpec> secrets;
  // Set by the secret broker from `secrets` (never by a caller): the placeholders and the CA.
  std::optional<BrokeredSecrets> brokered;
  // For images that expect sudo (E2B's `base`, docs/e2b.md): no no-new-privileges (Docker), or
  // allowPrivilegeEscalation (Kubernetes), so setuid programs gain their owner's rights where the
  // host's gVisor honours setuid bits (runsc 20240729 does not: gVisor issue 212). Off by default.
  // It gives a caller nothing it lacks (exec's user root is root inside already), gVisor holds
  // root in, the capability set stays the same (docs/security.md, "Capabilities").
  bool allow_setuid = false;
};

// Sizes in Docker's syntax: a number (decimals allowed) with an optional b/k/m/g/t suffix (case
// insensitive, binary multiples). Errors: kInvalidArgument naming `what` and the accepted form.
Result<std::int64_t> ParseMemorySize(std::string_view what, std::string_view text);
// runsc's overlay size syntax: a whole number with an optional k/m/g/t suffix, > 0.
Result<std::int64_t> ParseDiskSize(std::string_view what, std::string_view text);

// Each returns kInvalidArgument with a message naming the field, the value and the rule.
Result<void> ValidateLimits(const Limits& limits);
// The least memory a sandbox may be given: Docker's own floor at create (6 MiB), which a resize
// keeps too (gVisor's sentry alone uses more: a sandbox resized below what it uses is refused by
// the host's kernel, see Sandbox::Update).
inline constexpr std::int64_t kMinMemoryBytes = 6LL << 20;
// kInvalidArgument naming the field: nothing set, or a value ValidateLimits would refuse, or
// memory under kMinMemoryBytes.
Result<void> ValidateLimitsUpdate(const LimitsUpdate& update);
Result<void> ValidateName(std::string_view name);  // [A-Za-z0-9][A-Za-z0-9_.-]{0,62}
// The runtime's name only (Docker's charset); that it is gVisor is checked on the host by
// RequireGvisorRuntime (runtime_check.h), from what its binary is.
Result<void> ValidateRuntime(std::string_view runtime);
Result<void> ValidateImage(std::string_view image);
Result<void> ValidateNetwork(std::string_view network);
Result<void> ValidateLabels(const std::map<std::string, std::string>& labels);
Result<void> ValidatePlatform(std::string_view platform);  // "", "systrap" or "ptrace"
Result<void> ValidateSpec(const SandboxSpec& spec);
// The secrets of a spec against its policy (ValidateSpec runs it): each as the enforcer takes
// it (egress::ValidateSecret: name, value when given, hosts, header; no repeats), none named
// like a variable agvisor or the system sets, hosts in canonical form and allowed by the policy
// on 443, at most kMaxSecrets. kInvalidArgument naming the secret (never its value) and the fix.
Result<void> ValidateSecrets(const std::vector<SecretSpec>& secrets,
                             const std::optional<egress::EgressRules>& egress);

// The bindings of brokered secrets as a network label, without their values:
// "NAME|PLACEHOLDER|HOST,HOST|HEADER|SOURCE;..." (SOURCE "caller" or "operator"). Round-trips
// through DecodeSecretBindings (kInvalidArgument for anything else).
struct SecretBinding {
  std::string name;
  std::string placeholder;
  std::vector<std::string> hosts;
  std::string header;
  bool from_operator = false;  // the value is the operator's file's, by name
  bool operator==(const SecretBinding&) const = default;
};
std::string EncodeSecretBindings(const std::vector<SecretBinding>& bindings);
Result<std::vector<SecretBinding>> DecodeSecretBindings(std::string_view label);

// The broker of brokered secrets: agvisord's (server/secret_vault.h), handed to its in-process
// place (client::InProcess). Broker resolves the values (a caller's, or the operator's file by
// name), makes the placeholders and the sandbox CA, and keeps them for the enforcer that will
// serve the sandbox's network; Release forgets them when the create did not make a sandbox.
// Errors: kNotFound (no such secret in the operator's file), kInvalidArgument.
class SecretBroker {
 public:
  virtual ~SecretBroker() = default;
  virtual Result<BrokeredSecrets> Broker(const std::vector<SecretSpec>& secrets) = 0;
  virtual void Release(const BrokeredSecrets& brokered) = 0;
};
// A sandbox's deadlines, at create (ValidateSpec), when a pool hands a member out
// (Pool::Acquire) and when they are set again (Sandbox::SetDeadlines): each > 0 seconds, or
// unset for none. kInvalidArgument naming the value.
Result<void> ValidateDeadlines(std::optional<std::int64_t> lifetime,
                               std::optional<std::int64_t> idle_ttl);
// The one check of a caller's timeout, run by the core before anything is sent (Sandbox::Exec,
// StartProcess, StartBackground) and by client::ProcessOptionsFor; doors only parse a number.
// A run to its end (Exec) needs one: > 0 and finite, and ending before idle_ttl could expire
// the sandbox under the command. kInvalidArgument naming the value and the fix.
Result<void> ValidateExecTimeout(double timeout_seconds, std::optional<std::int64_t> idle_ttl);
// A started process's (ProcessOptions, BackgroundOptions): 0 = none, else as ValidateExecTimeout.
Result<void> ValidateProcessTimeout(double timeout_seconds, std::optional<std::int64_t> idle_ttl);

// The container (and volume) name of a sandbox: "agvisor-<name>".
std::string ContainerNameFor(std::string_view name);

}  // namespace agvisor
