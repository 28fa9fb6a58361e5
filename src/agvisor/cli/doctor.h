// `agvisor doctor`: checks a Docker host (or a Kubernetes one: sandbox/kube_runtime/kube_doctor.h)
// and says exactly what works, what does not, and how to fix it. Used by the CLI (cmd in doctor.cc)
// and its tests.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace agvisor::cli {

struct Check {
  enum class Status { kOk, kWarn, kFail, kInfo };
  std::string name;  // "docker", "runtime", "sandbox", ...
  Status status = Status::kOk;
  std::string detail;  // what was found
  std::string fix;     // for kWarn/kFail: what to do
};

// Runs every check against `host` ("" = local; a kube: address: DiagnoseKubeHost's checks). Never
// fails: a failure is a kFail check.
std::vector<Check> RunDoctor(std::string_view host);
// True when sandboxes can run on the host (no kFail).
bool HostUsable(const std::vector<Check>& checks);
// The human report: one line per check ("ok  docker  ..."), fixes indented below.
std::string FormatReport(const std::vector<Check>& checks);
// The same as JSON: [{"check":..,"status":"ok|warn|fail|info","detail":..,"fix":..}].
std::string FormatJson(const std::vector<Check>& checks);

}  // namespace agvisor::cli
