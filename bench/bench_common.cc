// bench_common.h.
#include "bench_common.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace agvisor {

void Die(const std::string& what) {
  std::fprintf(stderr, "agvisor_bench: %s\n", what.c_str());
  std::exit(1);
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string LoadAverage() {
  const std::string load = ReadAll("/proc/loadavg");
  return load.substr(0, load.find(' '));
}

std::int64_t FieldKb(const std::string& text, const std::string& name) {
  auto at = text.find("\n" + name + ":");
  if (at == std::string::npos) at = text.rfind(name + ":", 0) == 0 ? 0 : std::string::npos;
  if (at == std::string::npos) return 0;
  return std::atoll(text.c_str() + text.find(':', at) + 1);
}

std::int64_t CpuTicks(int pid) {
  const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  // After "(comm) ": state is field 3, utime 14, stime 15 (proc(5)).
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  std::int64_t used = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i >= 14) used += std::atoll(field.c_str());
  }
  return used;
}

std::map<std::string, HostProcesses> ContainerTrees(const std::vector<std::string>& container_ids) {
  std::map<int, std::vector<int>> children;
  std::map<int, std::string> argv0;
  std::map<std::string, int> shim_of;
  DIR* d = ::opendir("/proc");
  if (!d) Die("opendir /proc");
  while (dirent* e = ::readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state;
    std::sscanf(stat.c_str() + close + 2, "%c %d", &state, &ppid);
    children[ppid].push_back(pid);
    const std::string cmd = ReadAll("/proc/" + std::to_string(pid) + "/cmdline");
    argv0[pid] = cmd.substr(0, cmd.find('\0'));
    if (argv0[pid].find("containerd-shim") == std::string::npos) continue;
    // The shim's argv holds "-id" and the container's id as separate words.
    const auto id_at = cmd.find(std::string("-id") + '\0');
    if (id_at == std::string::npos) continue;
    const std::string id = cmd.substr(id_at + 4, cmd.find('\0', id_at + 4) - (id_at + 4));
    shim_of[id] = pid;
  }
  ::closedir(d);
  std::map<std::string, HostProcesses> trees;
  for (const auto& id : container_ids) {
    HostProcesses& tree = trees[id];
    auto it = shim_of.find(id);
    if (it == shim_of.end()) continue;
    std::vector<int> todo = {it->second};
    while (!todo.empty()) {
      const int pid = todo.back();
      todo.pop_back();
      tree.emplace_back(pid, argv0[pid]);
      for (int child : children[pid]) todo.push_back(child);
    }
  }
  return trees;
}

}  // namespace agvisor
