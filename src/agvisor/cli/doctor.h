// `agvisor doctor`: the checks of the host where the run's sandboxes live (Place::HostReport: a
// Docker host's or a Kubernetes one's, sandbox/runtimes.h DiagnoseHost), each saying what works,
// what does not and how to fix it. This file words them for a person or as JSON. Used by the CLI
// (the command in doctor.cc) and its tests.
#pragma once

#include <string>
#include <vector>

#include "agvisor/client/place.h"

namespace agvisor::cli {

using Check = client::HostCheck;

// True when sandboxes can run on the host (no kFail).
bool HostUsable(const std::vector<Check>& checks);
// The human report: one line per check ("ok  docker  ..."), fixes indented below.
std::string FormatReport(const std::vector<Check>& checks);
// The same as JSON: [{"check":..,"status":"ok|warn|fail|info","detail":..,"fix":..}].
std::string FormatJson(const std::vector<Check>& checks);

}  // namespace agvisor::cli
