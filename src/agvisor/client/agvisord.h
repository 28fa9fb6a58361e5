// Sandboxes through agvisord: the Place of place.h over the daemon's API (agvisord_api.h), plus
// the calls only agvisord answers (egress policies: it runs the enforcers).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/api/codec.h"
#include "agvisor/base/error.h"
#include "agvisor/client/place.h"
#include "agvisor/egress/policy.h"

namespace agvisor::client {

class AgvisordPlace : public Place {
 public:
  // Sandbox `container_name`'s egress policy and its enforcer's recent decisions; SetEgress
  // replaces the policy (new connections follow it at once). Errors: the daemon's (kNotFound,
  // kInvalidArgument, ...), kUnavailable.
  virtual Result<api::EgressView> GetEgress(std::string_view container_name) = 0;
  virtual Result<api::EgressView> SetEgress(std::string_view container_name,
                                            const egress::EgressRules& rules) = 0;
  // The sandbox's egress log (docs/egress.md, "Log"): its last `last` records, oldest first
  // (1..api::kMaxEgressLogRecords). Errors: as GetEgress.
  virtual Result<std::vector<egress::Decision>> EgressLog(std::string_view container_name,
                                                          std::size_t last) = 0;
  // Follows it: `on_record` gets the last `last` records, then each new one as the enforcer
  // records it (with its line of JSON, api::DecisionJson's), until it returns false or the
  // sandbox's network is gone (Ok). Errors: as GetEgress; kUnavailable (the stream broke).
  virtual Result<void> FollowEgressLog(
      std::string_view container_name, std::size_t last,
      const std::function<bool(const egress::Decision& record, const std::string& json)>&
          on_record) = 0;
};

// agvisord at `address` ("unix:/path", "http://127.0.0.1:PORT" or "ssh://[USER@]HOST[:PORT]
// [/path/agvisord.sock]", agvisord_api.h ParseServerAddress), authenticated with the token of
// `token_file`, else $AGVISOR_TOKEN_FILE, else $AGVISOR_TOKEN (all read here), else agvisord's
// default token file (api/defaults.h; for an ssh address root's on that host, read there with
// `cat` over ssh). A non-empty `token` (the Python package's connect(token=...)) wins over all
// of these. Errors: kInvalidArgument (address), kNotFound (no token file), kUnavailable
// (nothing listens at the address, or ssh failed: says how to start agvisord),
// kPermissionDenied.
Result<std::unique_ptr<AgvisordPlace>> Agvisord(const std::string& address,
                                                const std::string& token_file,
                                                const std::string& token = "");

// The agvisord that enforces the egress policies of Docker host `docker_host` ("" =
// $DOCKER_HOST, else the local socket): the one on this machine (its default socket,
// api::DefaultSocketPath) for a local host, "ssh://[USER@]HOST[:PORT]" (root's default socket
// there) for an ssh:// host. Errors: kUnsupported for tcp:// (reach agvisord there with
// --server), kInvalidArgument (a malformed host), DefaultSocketPath's.
Result<std::string> EgressAgvisordAddress(std::string_view docker_host);

}  // namespace agvisor::client
