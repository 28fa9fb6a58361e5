// `agvisor top`: CPU, memory and pids of the running sandboxes of a place, from its runtime's
// stats (Place::Stats: one sample each, taken in parallel: Docker needs about a second per
// sample; the Kubernetes runtime has none yet and says so per row).
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "agvisor/cli/common.h"
#include "agvisor/sandbox/types.h"

namespace agvisor::cli {
namespace {

struct Row {
  SandboxInfo info;
  Result<SandboxStats> stats = Error::Unavailable("not sampled");
};

std::string Mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// One sample of every running sandbox; returns false after reporting an error.
bool Sample(GlobalOptions& g, std::vector<Row>& rows, int* exit_code) {
  auto place = g.GetPlace();
  if (!place.ok()) {
    *exit_code = ReportError(place.error());
    return false;
  }
  auto list = (*place)->List();
  if (!list.ok()) {
    *exit_code = ReportError(list.error());
    return false;
  }
  rows.clear();
  for (auto& i : *list) {
    if (i.running) rows.push_back({.info = std::move(i)});
  }
  std::vector<std::thread> threads;
  for (Row& r : rows) {
    threads.emplace_back([&r, b = *place] { r.stats = b->Stats(r.info); });
  }
  for (auto& t : threads) t.join();
  return true;
}

void Print(const GlobalOptions& g, const std::vector<Row>& rows) {
  if (g.json) {
    boost::json::array a;
    for (const Row& r : rows) {
      boost::json::object o;
      o["container"] = r.info.container_name;
      o["name"] = r.info.name ? boost::json::value(*r.info.name) : boost::json::value(nullptr);
      if (r.stats.ok()) {
        o["cpu_percent"] = r.stats->cpu_percent;
        o["memory_bytes"] = r.stats->memory_bytes;
        o["memory_limit_bytes"] = r.stats->memory_limit_bytes;
        o["pids"] = r.stats->pids;
        o["pids_limit"] = r.stats->pids_limit;
      } else {
        o["error"] = r.stats.error().message();
      }
      a.push_back(std::move(o));
    }
    std::cout << boost::json::serialize(a) << "\n";
    return;
  }
  std::printf("%-32s %-20s %7s %23s %11s\n", "CONTAINER", "NAME", "CPU %", "MEMORY / LIMIT",
              "PIDS");
  for (const Row& r : rows) {
    const std::string shown_name = r.info.name ? EscapeForTerminal(*r.info.name) : "-";
    const std::string container = EscapeForTerminal(r.info.container_name);
    const char* name = shown_name.c_str();
    if (!r.stats.ok()) {
      // Ended between the list and the sample, most often.
      std::printf("%-32s %-20s %s\n", container.c_str(), name,
                  EscapeForTerminal(r.stats.error().message()).c_str());
      continue;
    }
    const std::string mem = Mib(r.stats->memory_bytes) + " / " + Mib(r.stats->memory_limit_bytes);
    const std::string pids = std::to_string(r.stats->pids) + " / " +
                             (r.stats->pids_limit ? std::to_string(r.stats->pids_limit) : "-");
    std::printf("%-32s %-20s %7.1f %23s %11s\n", container.c_str(), name, r.stats->cpu_percent,
                mem.c_str(), pids.c_str());
  }
  if (rows.empty()) std::printf("(no running sandboxes)\n");
}

}  // namespace

void AddTop(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "top");
  auto watch = std::make_shared<double>(0);
  cmd->add_option("-w,--watch", *watch, "repeat every this many seconds until Ctrl-C (0 = once)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([&g, exit_code, watch] {
    std::vector<Row> rows;
    for (;;) {
      if (!Sample(g, rows, exit_code)) return;
      if (*watch > 0 && !g.json) std::printf("\033[H\033[2J");
      Print(g, rows);
      if (*watch <= 0) return;
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(*watch));
    }
  });
}

}  // namespace agvisor::cli
