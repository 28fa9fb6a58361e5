#include "agvisor/sandbox/docker_runtime/cgroup_limits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "agvisor/base/fs.h"
#include "agvisor/base/strings.h"

namespace agvisor {
namespace {

constexpr std::int64_t kDefaultCpuPeriodUs = 100000;  // Docker's and the kernel's
constexpr std::int64_t kMinCpuQuotaUs = 1000;         // the kernel's floor (1 ms)
constexpr std::string_view kCgroupRoot = "/sys/fs/cgroup";

// A cgroup file's number: digits only (after trimming the newline); nullopt for "max", "-1",
// anything else.
std::optional<std::int64_t> Number(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::int64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

// v1 reads an unlimited memory cap as the page counter's maximum (9223372036854771712 on
// x86_64 with 4 KiB pages): anything from 2^62 up is "none".
std::int64_t MemoryCap(std::optional<std::int64_t> n) {
  if (!n || *n >= (std::int64_t{1} << 62)) return 0;
  return *n;
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::optional<std::string> ReadCgroupFile(const std::string& dir, std::string_view file) {
  return ReadSmallFile(dir + "/" + std::string(file), 4096);
}

// Writes `value` to `dir`/`file` in one write(2), as the kernel's cgroup files want. Returns the
// errno (0 = done).
int WriteCgroupFile(const std::string& dir, const std::string& file, const std::string& value) {
  const std::string path = dir + "/" + file;
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, value.data(), value.size());
  int err = n < 0 ? errno : (static_cast<std::size_t>(n) == value.size() ? 0 : EIO);
  ::close(fd);
  return err;
}

std::string MiB(std::int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

std::vector<CgroupWrite> PlanCgroupResize(const CgroupPaths& p, const CgroupNow& now,
                                          const ResizeSpec& spec) {
  std::vector<CgroupWrite> out;
  const std::int64_t period = now.cpu_period_us > 0 ? now.cpu_period_us : kDefaultCpuPeriodUs;
  const auto quota = [&](double cpus) {
    auto q = static_cast<std::int64_t>(std::llround(cpus * static_cast<double>(period)));
    return std::to_string(q < kMinCpuQuotaUs ? kMinCpuQuotaUs : q);
  };
  if (p.version == CgroupVersion::kV1) {
    if (spec.memory_bytes) {
      const std::string v = std::to_string(*spec.memory_bytes);
      // The kernel refuses memory > memsw (EINVAL): which goes first depends on the direction.
      const bool raising = now.memory_limit == 0 ? false : *spec.memory_bytes > now.memory_limit;
      CgroupWrite mem{p.memory, "memory.limit_in_bytes", v};
      CgroupWrite memsw{p.memory, "memory.memsw.limit_in_bytes", v};
      if (p.has_memsw && raising) out.push_back(memsw);
      out.push_back(mem);
      if (p.has_memsw && !raising) out.push_back(memsw);
    }
    if (spec.cpus) {
      if (now.cpu_period_us <= 0) {
        out.push_back({p.cpu, "cpu.cfs_period_us", std::to_string(kDefaultCpuPeriodUs)});
      }
      out.push_back({p.cpu, "cpu.cfs_quota_us", quota(*spec.cpus)});
    }
  } else {
    if (spec.memory_bytes)
      out.push_back({p.memory, "memory.max", std::to_string(*spec.memory_bytes)});
    if (spec.cpus) {
      out.push_back({p.cpu, "cpu.max", quota(*spec.cpus) + " " + std::to_string(period)});
    }
  }
  if (spec.pids) out.push_back({p.pids, "pids.max", std::to_string(*spec.pids)});
  return out;
}

LiveLimits ParseCgroupLimits(CgroupVersion version,
                             const std::map<std::string, std::string>& files) {
  auto num = [&](const char* f) -> std::optional<std::int64_t> {
    auto it = files.find(f);
    if (it == files.end()) return std::nullopt;
    return Number(it->second);
  };
  LiveLimits l;
  l.source = "cgroup";
  l.pids = num("pids.max").value_or(0);
  if (version == CgroupVersion::kV1) {
    l.memory_bytes = MemoryCap(num("memory.limit_in_bytes"));
    auto quota = num("cpu.cfs_quota_us");  // "-1" = none: not a Number
    auto period = num("cpu.cfs_period_us");
    if (quota && period && *period > 0) {
      l.cpus = static_cast<double>(*quota) / static_cast<double>(*period);
    }
  } else {
    l.memory_bytes = MemoryCap(num("memory.max"));
    if (auto it = files.find("cpu.max"); it != files.end()) {
      auto parts = Split(it->second, ' ');
      if (parts.size() == 2) {
        auto quota = Number(parts[0]);
        auto period = Number(parts[1]);
        if (quota && period && *period > 0) {
          l.cpus = static_cast<double>(*quota) / static_cast<double>(*period);
        }
      }
    }
  }
  return l;
}

Result<CgroupPaths> FindContainerCgroup(std::string_view id, std::int64_t pid) {
  bool hex = id.size() == 64;
  for (char c : id) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) {
    return Error::InvalidArgument("find the cgroup of container '" + std::string(id) +
                                  "': not a full container id");
  }
  const std::string root(kCgroupRoot);
  CgroupPaths p;
  // cgroup v1 has a directory per controller; v2 (unified) one tree with cgroup.controllers.
  const bool v1 = IsDir(root + "/memory") && Exists(root + "/memory/memory.limit_in_bytes");
  if (!v1 && !Exists(root + "/cgroup.controllers")) {
    return Error::NotFound("find the cgroup of container " + std::string(id.substr(0, 12)) +
                           ": no cgroup v1 memory controller or cgroup v2 tree under " + root);
  }
  p.version = v1 ? CgroupVersion::kV1 : CgroupVersion::kV2;
  // Where /proc/<pid>/cgroup says the container's process is, per controller ("" for v2).
  std::map<std::string, std::string> from_proc;
  if (pid > 0) {
    if (auto text = ReadSmallFile("/proc/" + std::to_string(pid) + "/cgroup", 64 * 1024)) {
      for (const auto& line : Split(*text, '\n')) {
        // "hierarchy-id:controller,controller:/path"
        auto first = line.find(':');
        auto second = first == std::string::npos ? first : line.find(':', first + 1);
        if (second == std::string::npos) continue;
        const std::string path(line.substr(second + 1));
        if (path.find(id) == std::string::npos) continue;  // not the container's
        for (const auto& c : Split(line.substr(first + 1, second - first - 1), ',')) {
          from_proc[std::string(c)] = path;
        }
      }
    }
  }
  const std::string sid(id);
  auto dir_of = [&](const std::string& controller) -> std::string {
    const std::string base = v1 ? root + "/" + controller : root;
    std::vector<std::string> candidates;
    if (auto it = from_proc.find(v1 ? controller : ""); it != from_proc.end()) {
      candidates.push_back(base + it->second);
    }
    candidates.push_back(base + "/docker/" + sid);                          // cgroupfs driver
    candidates.push_back(base + "/system.slice/docker-" + sid + ".scope");  // systemd driver
    for (const auto& c : candidates) {
      if (c.find(sid) != std::string::npos && IsDir(c)) return c;
    }
    return "";
  };
  p.memory = dir_of("memory");
  p.cpu = dir_of("cpu");
  p.pids = dir_of("pids");
  if (p.memory.empty() || p.cpu.empty() || p.pids.empty()) {
    return Error::NotFound("find the cgroup of container " + sid.substr(0, 12) +
                           ": its memory, cpu and pids cgroup directories are not on this "
                           "machine (under " +
                           root + ")");
  }
  p.has_memsw = v1 && Exists(p.memory + "/memory.memsw.limit_in_bytes");
  return p;
}

Result<LiveLimits> ReadCgroupLimits(const CgroupPaths& p) {
  std::map<std::string, std::string> files;
  auto take = [&](const std::string& dir, const char* file) {
    if (auto v = ReadCgroupFile(dir, file)) files[file] = *v;
  };
  if (p.version == CgroupVersion::kV1) {
    take(p.memory, "memory.limit_in_bytes");
    take(p.cpu, "cpu.cfs_quota_us");
    take(p.cpu, "cpu.cfs_period_us");
  } else {
    take(p.memory, "memory.max");
    take(p.cpu, "cpu.max");
  }
  take(p.pids, "pids.max");
  if (files.empty()) {
    return Error::NotFound("read the cgroup limits in " + p.memory +
                           ": the files are gone (the container ended)");
  }
  return ParseCgroupLimits(p.version, files);
}

Result<LiveLimits> ApplyCgroupResize(const CgroupPaths& p, const ResizeSpec& spec) {
  constexpr auto kReclaimWait = std::chrono::seconds(2);
  CgroupNow now;
  if (p.version == CgroupVersion::kV1) {
    now.memory_limit =
        MemoryCap(Number(ReadCgroupFile(p.memory, "memory.limit_in_bytes").value_or("")));
    now.cpu_period_us = Number(ReadCgroupFile(p.cpu, "cpu.cfs_period_us").value_or("")).value_or(0);
  } else {
    now.memory_limit = MemoryCap(Number(ReadCgroupFile(p.memory, "memory.max").value_or("")));
    const std::string cpu_max = ReadCgroupFile(p.cpu, "cpu.max").value_or("");
    auto parts = Split(cpu_max, ' ');
    if (parts.size() == 2) now.cpu_period_us = Number(parts[1]).value_or(0);
  }
  if (spec.pids) {
    // The pids cgroup counts gVisor's host tasks (HostPidsCap, instance_spec.h), and the sandbox
    // ends when gVisor cannot make one (measured: runsc exited 2 at the next burst of processes
    // after pids.max was set below pids.current). A cap at or below what runs now would end it
    // at its next process: refused, nothing written.
    auto current = Number(ReadCgroupFile(p.pids, "pids.current").value_or(""));
    if (current && *spec.pids <= *current) {
      const std::string asked = spec.sandbox_pids
                                    ? "pids " + std::to_string(*spec.sandbox_pids) + " (a cap of " +
                                          std::to_string(*spec.pids) + " host tasks for gVisor)"
                                    : "a pids cap of " + std::to_string(*spec.pids) + " host tasks";
      return Error::Conflict("resize: " + asked + " is not above the " + std::to_string(*current) +
                             " host tasks gVisor runs for the sandbox now; the sandbox would end "
                             "at its next process: give more (nothing was changed)");
    }
  }
  const auto plan = PlanCgroupResize(p, now, spec);
  // What each file held, for putting back the ones written when a later one fails.
  std::vector<std::pair<const CgroupWrite*, std::string>> done;
  for (const auto& w : plan) {
    auto old = ReadCgroupFile(w.dir, w.file);
    // A memory cap below the usage is EBUSY until the kernel reclaims enough. gVisor gives freed
    // memory back to the host a little after the free (measured: 287 MiB in use as a 400 MiB
    // allocation's exec returned, 29 MiB 100 ms later), so a cap just after a big free is
    // tried again for up to kReclaimWait before it is refused.
    const auto give_up = std::chrono::steady_clock::now() + kReclaimWait;
    int err = WriteCgroupFile(w.dir, w.file, w.value);
    while (err == EBUSY && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      err = WriteCgroupFile(w.dir, w.file, w.value);
    }
    if (err == 0) {
      if (old) {
        auto trimmed = *old;
        while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
        done.emplace_back(&w, trimmed);
      }
      continue;
    }
    // Undo in reverse order (the reverse of an order the kernel accepted going forward).
    for (auto it = done.rbegin(); it != done.rend(); ++it) {
      (void)WriteCgroupFile(it->first->dir, it->first->file, it->second);
    }
    const std::string what = "resize: write " + w.value + " to " + w.dir + "/" + w.file;
    switch (err) {
      case EBUSY: {
        const char* usage_file =
            p.version == CgroupVersion::kV1 ? "memory.usage_in_bytes" : "memory.current";
        auto used = Number(ReadCgroupFile(p.memory, usage_file).value_or(""));
        return Error::Conflict(
            "resize: memory " + MiB(spec.memory_bytes.value_or(0)) +
            " is below what the sandbox uses now (" + (used ? MiB(*used) : "unknown") +
            ", gVisor's own memory included) and the host's kernel could not reclaim it; free "
            "memory inside the sandbox or give it more (nothing was changed)");
      }
      case EINVAL:
        return Error::InvalidArgument(what + ": the kernel refused the value (EINVAL)");
      case EACCES:
      case EPERM:
      case EROFS:
        return Error::PermissionDenied(what + ": " + std::strerror(err) +
                                       " (a live resize writes the host's cgroup files: run as "
                                       "root, or through agvisord)");
      case ENOENT:
      case ENODEV:
        return Error::NotFound(what + ": the file is gone (the sandbox ended)");
      default:
        return Error::FromErrno(what, err);
    }
  }
  return ReadCgroupLimits(p);
}

}  // namespace agvisor
