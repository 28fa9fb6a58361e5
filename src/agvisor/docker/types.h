// Plain value types of the Docker Engine API client: what goes into a request (ContainerConfig,
// ExecConfig) and what comes back (ContainerInfo, ExecInfo, SystemInfo, ...).
//
// Used by docker/codec.h (which turns them into and out of JSON), docker/client.h, and sandbox/
// (which fills a ContainerConfig from a SandboxSpec). Only std types: Boost.JSON stays in the .cc
// files. Field names follow the Engine API's (https://docs.docker.com/engine/api/v1.41/) in
// snake_case; each says when it is sent. Nothing here knows about sandboxes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/base/resource_sample.h"

namespace agvisor::docker {

// ---- Requests -------------------------------------------------------------------------------

// A mount in HostConfig.Mounts. Only the fields agvisor needs.
struct Mount {
  std::string type = "volume";  // "volume", "bind" or "tmpfs"
  std::string source;           // the volume name (volume), host path (bind); empty for tmpfs
  std::string target;           // absolute path inside the container
  bool read_only = false;
};

// HostConfig of POST /containers/create. Zero / empty / nullopt fields are left out of the JSON,
// so the daemon's defaults apply.
struct HostConfig {
  std::string runtime;         // "runsc", ...; empty = the daemon's default runtime
  std::int64_t nano_cpus = 0;  // 1e9 = one CPU
  std::int64_t memory = 0;     // bytes
  std::optional<std::int64_t>
      memory_swap;  // memory+swap bytes; == memory means no swap; -1 = no cap
  std::optional<std::int64_t> pids_limit;  // > 0 caps; -1 = unlimited
  std::string network_mode;                // "bridge", "none", "host", a network name
  std::vector<std::string> dns;            // HostConfig.Dns: resolver addresses
  std::int64_t shm_size = 0;               // bytes of /dev/shm
  bool auto_remove = false;                // the daemon removes the container when it exits
  std::vector<std::string> binds;          // "host:container[:ro]" / "volume:container[:ro]"
  std::vector<Mount> mounts;
  std::vector<std::string> cap_drop;  // "ALL", "NET_RAW", ...
  std::vector<std::string> cap_add;
  std::vector<std::string> security_opt;  // "no-new-privileges", ...
  bool readonly_rootfs = false;
  // OCI annotations passed to the runtime (e.g. runsc's dev.gvisor.* settings). Needs Engine API
  // >= 1.43: EncodeContainerCreate refuses a non-empty map on older daemons (kUnsupported).
  std::map<std::string, std::string> annotations;
  bool privileged = false;  // always sent
  bool init = false;        // run docker-init as PID 1; sent only when true
  // LogConfig.Type: "none" keeps a container's stdout out of any log file (e.g. a binary
  // protocol on PID 1's stdio); empty = the daemon's default driver (not sent).
  std::string log_driver;
};

// Body of POST /containers/create (Config + HostConfig).
struct ContainerConfig {
  std::string image;                    // required
  std::vector<std::string> cmd;         // empty = the image's CMD
  std::vector<std::string> entrypoint;  // empty = the image's ENTRYPOINT
  std::vector<std::string> env;         // "K=V"
  std::string working_dir;
  std::string user;  // "uid[:gid]" or a name
  std::map<std::string, std::string> labels;
  bool tty = false;
  bool open_stdin = false;
  bool attach_stdin = false;
  bool attach_stdout = false;
  bool attach_stderr = false;
  bool stdin_once = false;
  // Config.NetworkDisabled: the container gets a network namespace with only `lo`, set up
  // without libnetwork (no prestart hook: ~150 ms less per start here). Sent only when true.
  bool network_disabled = false;
  HostConfig host_config;
};

// Body of POST /containers/{id}/exec. Privileged execs are not offered.
struct ExecConfig {
  std::vector<std::string> cmd;  // required
  std::vector<std::string> env;  // "K=V", added to the container's
  std::string working_dir;       // empty = the container's
  std::string user;              // empty = the container's
  bool tty = false;
  bool attach_stdin = false;
  bool attach_stdout = true;
  bool attach_stderr = true;
};

// ---- Responses ------------------------------------------------------------------------------

// State of GET /containers/{id}/json.
struct ContainerState {
  std::string status;  // "created", "running", "paused", "restarting", "removing", "exited", "dead"
  bool running = false;
  bool paused = false;
  bool restarting = false;
  bool oom_killed = false;
  bool dead = false;
  int exit_code = 0;
  std::string error;  // e.g. the runtime's message when start failed
  std::int64_t pid = 0;
  std::string started_at;   // RFC 3339; "0001-01-01T00:00:00Z" = never
  std::string finished_at;  // RFC 3339; "0001-01-01T00:00:00Z" = never
};

// The mounts of an inspected container.
struct MountPoint {
  std::string type;
  std::string name;  // volume name (volumes only)
  std::string source;
  std::string destination;
  bool rw = true;
};

// GET /containers/{id}/json, the parts agvisor reads.
struct ContainerInfo {
  std::string id;
  std::string name;       // without Docker's leading '/'
  std::string image;      // the image id ("sha256:...")
  std::string image_ref;  // Config.Image: the name it was created from
  std::string created;    // RFC 3339
  // GraphDriver.Data.MergedDir: the root file system as the daemon's host mounts it while the
  // container runs (overlay2), the image's files as the container started with them; "" with
  // other storage drivers.
  std::string merged_dir;
  std::map<std::string, std::string> labels;
  std::vector<std::string> cmd;
  std::vector<std::string> entrypoint;
  std::vector<std::string> env;
  bool tty = false;
  bool open_stdin = false;
  bool network_disabled = false;  // Config.NetworkDisabled (absent = false)
  ContainerState state;
  struct Host {
    std::string runtime;
    std::string network_mode;
    std::int64_t nano_cpus = 0;
    std::int64_t memory = 0;
    std::int64_t memory_swap = 0;
    std::int64_t pids_limit = 0;  // 0 or -1 = unlimited
    std::int64_t shm_size = 0;
    bool auto_remove = false;
    bool readonly_rootfs = false;
    bool privileged = false;
    std::map<std::string, std::string> annotations;  // API >= 1.43 only
  } host_config;
  std::vector<MountPoint> mounts;
};

// One entry of GET /containers/json.
struct ContainerSummary {
  std::string id;
  std::vector<std::string> names;  // without Docker's leading '/'
  std::string image;
  std::map<std::string, std::string> labels;
  std::string state;         // "running", "exited", ...
  std::string status;        // human text: "Up 3 seconds"
  std::int64_t created = 0;  // unix seconds
};

// GET /exec/{id}/json.
struct ExecInfo {
  std::string id;
  std::string container_id;
  bool running = false;
  std::optional<int> exit_code;  // nullopt while running or never started
  std::int64_t pid = 0;
};

// GET /volumes/{name} (and entries of GET /volumes).
struct VolumeInfo {
  std::string name;
  std::string driver;
  std::string mountpoint;
  std::string created_at;
  std::string scope;
  std::map<std::string, std::string> labels;
  // Bytes used (UsageData.Size): only in GET /system/df, which walks the disk to count them
  // (-1 there: not computed); unset in other answers.
  std::optional<std::int64_t> size;
};

// POST /networks/create: a bridge network. Only the fields agvisor needs.
struct NetworkConfig {
  std::string name;
  bool internal = false;    // no route out of the bridge (Docker drops forwarded traffic)
  std::string bridge_name;  // com.docker.network.bridge.name (<= 15 chars); "" = br-<id>
  std::map<std::string, std::string> labels;
};

// GET /networks/{id}: the parts agvisor reads.
struct NetworkInfo {
  std::string id;
  std::string name;
  std::string driver;  // "bridge", "macvlan", "ipvlan", "overlay", "null", "host", ...
  bool internal = false;
  std::string bridge_name;  // Options["com.docker.network.bridge.name"], "" when not set
  std::string subnet;       // the first IPAM config's, e.g. "172.18.0.0/16"
  std::string gateway;      // the first IPAM config's, e.g. "172.18.0.1"
  std::map<std::string, std::string> labels;
};

// GET /images/{name}/json, the parts agvisor reads.
struct ImageInfo {
  std::string id;  // "sha256:..."
  std::vector<std::string> repo_tags;
  std::string created;
  std::int64_t size = 0;
  std::string architecture;
  std::string os;
  std::vector<std::string> cmd;
  std::vector<std::string> entrypoint;
  std::vector<std::string> env;
  std::string working_dir;
  std::string user;
  std::map<std::string, std::string> labels;
  std::vector<std::string> layers;  // RootFS.Layers: the layers' diff ids, lowest first
};

// One entry of GET /images/json.
struct ImageSummary {
  std::string id;  // "sha256:..."
  std::vector<std::string> repo_tags;
  std::map<std::string, std::string> labels;
  std::int64_t created = 0;  // unix seconds
  std::int64_t size = 0;
};

// GET /version.
struct VersionInfo {
  std::string version;          // the engine's, e.g. "20.10.24+dfsg1"
  std::string api_version;      // the newest API the daemon speaks, "1.41"
  std::string min_api_version;  // the oldest, "1.12"
  std::string os;
  std::string arch;
  std::string kernel;
};

// A runtime registered with the daemon (daemon.json "runtimes").
struct RuntimeInfo {
  std::string path;
  std::vector<std::string> args;  // runtimeArgs
};

// GET /info, the parts agvisor reads (capability probing, `agvisor doctor`).
struct SystemInfo {
  std::map<std::string, RuntimeInfo> runtimes;
  std::string default_runtime;
  std::string cgroup_version;  // "1" or "2"
  std::string cgroup_driver;   // "cgroupfs", "systemd"
  std::string driver;          // storage driver, "overlay2"
  std::string kernel_version;
  std::string operating_system;
  int ncpu = 0;
  std::int64_t mem_total = 0;
  std::string docker_root_dir;
  std::string server_version;
  std::vector<std::string> security_options;  // "name=seccomp,profile=default", ...
};

// GET /containers/{id}/stats?stream=false: one sample, with what agvisor derives from it
// (DecodeContainerStats): cpu_percent over the interval between the previous sample
// (precpu_stats) and this one, as `docker stats` computes it (0 when the daemon sent no previous
// sample); cpu_total_ns from cpu_stats.cpu_usage.total_usage; memory_bytes is usage minus the
// inactive page cache (cgroup v1 total_inactive_file, v2 inactive_file).
using ContainerStats = ResourceSample;

// One decoded line of the JSON-lines progress stream of image import/pull.
struct ProgressMessage {
  std::string id;        // layer id, when the line is about one layer
  std::string status;    // "Pulling fs layer", "sha256:..." (import's result), ...
  std::string progress;  // the daemon's progress bar text
};

}  // namespace agvisor::docker
