// Engine API version numbers and the negotiation of the one a Client speaks.
//
// Used by docker/client.cc (Connect) and docker/codec.cc (features gated on the version, e.g.
// HostConfig.Annotations needs 1.43). Pure: unit-tested in api_version_test.cc.
//
// The rule (as the docker CLI does it): speak min(daemon's ApiVersion, our newest). A daemon whose
// newest is older than our oldest, or whose oldest is newer than our newest, is refused with
// kUnsupported naming both ranges.
#pragma once

#include <compare>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::docker {

struct ApiVersion {
  int major = 1;
  int minor = 41;

  // "1.41" -> {1, 41}. Errors: kInvalidArgument (not "<digits>.<digits>").
  static Result<ApiVersion> Parse(std::string_view text);
  std::string ToString() const;  // "1.41"
  auto operator<=>(const ApiVersion&) const = default;
};

// The range this client implements.
inline constexpr ApiVersion kMinApiVersion{1, 41};
inline constexpr ApiVersion kMaxApiVersion{1, 45};
// The first version with HostConfig.Annotations.
inline constexpr ApiVersion kAnnotationsApiVersion{1, 43};

// Chooses the version to speak with a daemon that reports `daemon_api` (/version ApiVersion) and
// `daemon_min_api` (MinAPIVersion; empty = unknown).
// Errors: kUnsupported (no overlap, naming both ranges), kInvalidArgument (unparsable versions).
Result<ApiVersion> NegotiateApiVersion(std::string_view daemon_api,
                                       std::string_view daemon_min_api);

}  // namespace agvisor::docker
