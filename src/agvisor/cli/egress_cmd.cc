// `agvisor egress NAME`: a sandbox's egress policy and its enforcer's recent decisions, live
// changes to the policy, and its egress log (--last N, --follow; docs/egress.md, "Log"). Always
// through agvisord (it runs the enforcers): --server, else the agvisord of the Docker host
// (--host): this machine's default socket, or for an ssh:// host the one on that host, reached over
// ssh.
#include <algorithm>
#include <cstdio>

#include "agvisor/cli/cli.h"
#include "agvisor/cli/common.h"
#include "agvisor/client/agvisord.h"
#include "agvisor/egress/learn.h"

namespace agvisor::cli {
namespace {

struct EgressChange {
  egress::EgressRules add;  // add.mode: the new mode, "" to keep it
  std::vector<std::string> remove_domains;
  bool suggest = false;
  bool any() const {
    return !add.allow_domains.empty() || !add.allow_cidrs.empty() || !add.ports.empty() ||
           !add.deny_domains.empty() || !remove_domains.empty() || !add.mode.empty();
  }
};

void AddUnique(std::vector<std::string>& to, const std::vector<std::string>& more) {
  for (const auto& m : more) {
    if (std::find(to.begin(), to.end(), m) == to.end()) to.push_back(m);
  }
}

egress::EgressRules Apply(egress::EgressRules r, const EgressChange& c) {
  auto drop = [&](std::vector<std::string>& v) {
    std::erase_if(v, [&](const std::string& d) {
      return std::find(c.remove_domains.begin(), c.remove_domains.end(), d) !=
             c.remove_domains.end();
    });
  };
  drop(r.allow_domains);
  drop(r.deny_domains);
  AddUnique(r.allow_domains, c.add.allow_domains);
  AddUnique(r.deny_domains, c.add.deny_domains);
  AddUnique(r.allow_cidrs, c.add.allow_cidrs);
  for (std::uint16_t p : c.add.ports) {
    if (std::find(r.ports.begin(), r.ports.end(), p) == r.ports.end()) r.ports.push_back(p);
  }
  if (!c.add.mode.empty()) r.mode = c.add.mode;
  return r;
}

// --suggest: the policy on stdout as options, alone on its line (for a script or a paste); how
// to use it, and what it could not hold, on stderr. The names are the enforcer's normalised
// ones (letters, digits, '-', '.'): nothing a shell or a terminal reads specially.
void PrintSuggestion(const std::string& name, const api::EgressView& v) {
  std::printf("%s\n", egress::FormatEgressFlags(v.suggested).c_str());
  const std::string n = EscapeForTerminal(name);
  if (v.rules.mode == egress::kEgressModeLearn && v.learned_destinations == 0) {
    std::fprintf(stderr, "# %s has learned nothing yet: the line above is its rules as they are\n",
                 n.c_str());
  }
  std::fprintf(stderr,
               "# the smallest policy allowing what %s reached (%llu learned destinations): "
               "enforce it with `agvisor egress %s --egress enforce LINE`, or create with "
               "`agvisor create LINE`\n",
               n.c_str(), static_cast<unsigned long long>(v.learned_destinations), n.c_str());
  if (v.learned_dropped > 0) {
    std::fprintf(stderr,
                 "# %llu learned connections went to destinations past the %zu kept: they are "
                 "not in the line (see the decisions, or learn again with fewer)\n",
                 static_cast<unsigned long long>(v.learned_dropped),
                 egress::kMaxLearnedDestinations);
  }
}

// The decisions name what the sandbox asked for (SNI, Host, names it resolved): every field is
// escaped.
void Print(const std::string& name, const api::EgressView& v) {
  std::printf("sandbox %s: network %s, enforcer %s\n", EscapeForTerminal(name).c_str(),
              EscapeForTerminal(v.network).c_str(), EscapeForTerminal(v.gateway).c_str());
  std::printf("policy: %s\n", EscapeForTerminal(v.describe).c_str());
  std::printf("decisions: %llu allowed, %llu denied",
              static_cast<unsigned long long>(v.counters.allowed),
              static_cast<unsigned long long>(v.counters.denied));
  if (v.counters.learned > 0 || v.rules.mode == egress::kEgressModeLearn) {
    std::printf(", %llu learned (`--suggest` prints the policy they need)",
                static_cast<unsigned long long>(v.counters.learned));
  }
  std::printf("\n");
  if (!v.recent_lines.empty()) std::printf("recent (oldest first):\n");
  for (const auto& line : v.recent_lines) std::printf("  %s\n", EscapeForTerminal(line).c_str());
}

// One record of the egress log: its line of JSON (escaped by api::DecisionJson: no control
// byte) or FormatDecision's line without the sandbox, through the terminal's escaping (a path
// or a name the sandbox chose can hold anything). Flushed: a follower's reader sees it at once.
void PrintRecord(egress::Decision d, const std::string& json, bool as_json) {
  if (as_json) {
    std::printf("%s\n", json.c_str());
  } else {
    d.sandbox.clear();
    std::printf("%s\n", EscapeForTerminal(egress::FormatDecision(d)).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

void AddEgress(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "egress");
  auto name = std::make_shared<std::string>();
  auto change = std::make_shared<EgressChange>();
  cmd->add_option("NAME", *name, "the sandbox (name or container name)")->required();
  cmd->add_option("--allow-domain", change->add.allow_domains,
                  "also allow this name or *.wildcard (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--deny-domain", change->add.deny_domains,
                  "refuse this name even when an allow rule matches it (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--allow-cidr", change->add.allow_cidrs, "also allow this block (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--allow-port", change->add.ports, "also allow this port (repeatable)")
      ->allow_extra_args(false)
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--remove-domain", change->remove_domains,
                  "take this name out of the allow and deny rules (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--egress", change->add.mode,
                  "switch the mode: enforce, or learn (docs/egress.md, \"Learn mode\")");
  cmd->add_flag("--suggest", change->suggest,
                "print the smallest policy that allows what the sandbox reached in learn mode, "
                "as options to paste (after any change given with it)");
  auto last = std::make_shared<std::size_t>(0);
  auto follow = std::make_shared<bool>(false);
  cmd->add_option("--last", *last,
                  "print the last N records of the sandbox's egress log (default " +
                      std::to_string(api::kDefaultEgressLogRecords) + " with --follow)")
      ->check(CLI::Range(std::size_t{1}, api::kMaxEgressLogRecords));
  cmd->add_flag("--follow,-f", *follow,
                "print the egress log's records as the enforcer makes them, until interrupted or "
                "the sandbox is removed (with --json: one JSON object a line)");
  cmd->callback([&g, exit_code, name, change, last, follow] {
    auto run = [&]() -> Result<void> {
      std::string address = g.server;
      if (address.empty()) address = AGVISOR_TRY(client::EgressAgvisordAddress(g.host));
      auto place = client::Agvisord(address, g.token_file);
      if (!place.ok()) {
        return place.error().WithContext(
            "egress policies live in agvisord on the Docker host (it runs the enforcers); reach "
            "it with --server, or start it on that host");
      }
      const std::string container = ResolveContainerName(*name);
      if (*follow || *last > 0) {
        if (change->any()) {
          return Error::InvalidArgument(
              "--last and --follow read the egress log; change the policy in a command of its "
              "own");
        }
        const std::size_t n = *last > 0 ? *last : api::kDefaultEgressLogRecords;
        if (*follow) {
          return (*place)->FollowEgressLog(container, n,
                                           [&](const egress::Decision& d, const std::string& json) {
                                             PrintRecord(d, json, g.json);
                                             return true;
                                           });
        }
        for (const egress::Decision& d : AGVISOR_TRY((*place)->EgressLog(container, n))) {
          PrintRecord(d, api::DecisionJson(d), g.json);
        }
        return Ok();
      }
      api::EgressView v = AGVISOR_TRY((*place)->GetEgress(container));
      if (change->any()) v = AGVISOR_TRY((*place)->SetEgress(container, Apply(v.rules, *change)));
      if (g.json) {
        std::printf("%s\n", v.json.c_str());
      } else if (change->suggest) {
        PrintSuggestion(*name, v);
      } else {
        Print(*name, v);
      }
      return Ok();
    };
    if (auto r = run(); !r.ok()) *exit_code = ReportError(r.error());
  });
}

}  // namespace agvisor::cli
