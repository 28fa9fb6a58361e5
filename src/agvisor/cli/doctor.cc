#include "agvisor/cli/doctor.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <iostream>

#include "agvisor/cli/common.h"

namespace agvisor::cli {
namespace {

using Status = Check::Status;

std::string_view StatusWord(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kWarn:
      return "warn";
    case Status::kFail:
      return "FAIL";
    case Status::kInfo:
      return "info";
  }
  return "?";
}

}  // namespace

bool HostUsable(const std::vector<Check>& checks) {
  return std::none_of(checks.begin(), checks.end(),
                      [](const Check& c) { return c.status == Status::kFail; });
}

std::string FormatReport(const std::vector<Check>& checks) {
  std::string out;
  for (const auto& c : checks) {
    char head[64];
    std::snprintf(head, sizeof head, "%-5s %-19s ", std::string(StatusWord(c.status)).c_str(),
                  c.name.c_str());
    // A detail may quote what a sandbox printed (its interfaces, a probe's error): escaped.
    out += head + EscapeForTerminal(c.detail) + "\n";
    if (!c.fix.empty() && (c.status == Status::kWarn || c.status == Status::kFail)) {
      out += "      fix: " + EscapeForTerminal(c.fix) + "\n";
    }
  }
  out += HostUsable(checks) ? "this host can run agvisor sandboxes\n"
                            : "this host cannot run agvisor sandboxes: see FAIL above\n";
  return out;
}

std::string FormatJson(const std::vector<Check>& checks) {
  boost::json::array a;
  for (const auto& c : checks) {
    boost::json::object o;
    o["check"] = c.name;
    std::string s(StatusWord(c.status));
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    o["status"] = s;
    o["detail"] = c.detail;
    o["fix"] = c.fix;
    a.push_back(std::move(o));
  }
  boost::json::object root;
  root["usable"] = HostUsable(checks);
  root["checks"] = std::move(a);
  return boost::json::serialize(root);
}

void AddDoctor(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "doctor");
  cmd->callback([&g, exit_code] {
    auto place = g.GetPlace();
    auto checks = place.ok() ? (*place)->HostReport() : place.error();
    if (!checks.ok()) {
      *exit_code = ReportError(checks.error());
      return;
    }
    std::cout << (g.json ? FormatJson(*checks) + "\n" : FormatReport(*checks));
    *exit_code = HostUsable(*checks) ? kExitOk : kExitFailure;
  });
}

}  // namespace agvisor::cli
