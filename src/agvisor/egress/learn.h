// Learn mode's product (docs/egress.md, "Learn mode"): the smallest policy that would have
// allowed what a sandbox reached while learning, in the form a user pastes.
//
// Used by agvisord's egress view (server/egress_host.h: GET /v1/sandboxes/{id}/egress carries
// it as "suggested") and `agvisor egress NAME --suggest`. Pure.
#pragma once

#include <string>

#include "agvisor/base/error.h"
#include "agvisor/egress/decision_log.h"
#include "agvisor/egress/policy.h"

namespace agvisor::egress {

// `current` (the operator's rules, kept as they are) plus what `seen` needs and they lack, to
// be enforced (mode ""): each learned name exactly (no wildcard is made up: a name below one
// that was seen may be another service), an IP literal as its /32 or /128, and, when a port
// was outside the policy's ports, every port the policy allowed plus those seen (written out:
// naming any port replaces the default 80 and 443). Destinations the rules already allow, or a
// deny rule refuses, add nothing. The result is canonical (EgressPolicy::Rules) with `ports`
// left empty when it is the default (80 and 443, written out or not). Errors: kInvalidArgument when
// `current` is not a policy or the result has more than kMaxEgressRules rules.
Result<EgressRules> SuggestRules(const EgressRules& current, const LearnedDestinations& seen);

// The rules as the options `agvisor create` and `agvisor egress NAME` take, on one line:
// "--allow-domain pypi.org --allow-domain '*.pythonhosted.org' --allow-port 443 ..." (a
// wildcard in single quotes for the shell; "--egress learn" in learn mode). "" for no rules.
std::string FormatEgressFlags(const EgressRules& rules);

}  // namespace agvisor::egress
