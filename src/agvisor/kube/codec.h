// Pure JSON codecs of the Kubernetes API objects agvisor reads: pods (metadata, phase, container
// states), Status objects (the API's errors, and the exit status on an exec's error stream),
// RuntimeClasses and object labels; and the label selector agvisor writes. No I/O: codec_test.cc
// pins them on captured-style documents. Used by kube::Client (client.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::kube {

using Labels = std::map<std::string, std::string>;

// One container's status, flattened.
struct ContainerState {
  std::string name;
  std::string state;    // "waiting", "running", "terminated", "" (no status yet)
  std::string reason;   // of waiting / terminated ("ErrImagePull", "OOMKilled", "Completed")
  std::string message;  // of waiting / terminated
  int exit_code = 0;    // terminated only
};

struct Pod {
  std::string name;
  std::string uid;
  Labels labels;
  Labels annotations;
  std::string phase;    // "Pending", "Running", "Succeeded", "Failed", "Unknown"
  std::string reason;   // status.reason ("DeadlineExceeded", "Evicted")
  std::string message;  // status.message
  std::string image;    // the first container's image (spec)
  std::vector<ContainerState> init_containers;
  std::vector<ContainerState> containers;
  std::int64_t created_unix = 0;  // metadata.creationTimestamp (0 = unknown)
  bool deleting = false;          // metadata.deletionTimestamp is set
  // The status of container `name` among `containers`, or null.
  const ContainerState* Container(std::string_view name) const;
};

// Errors: kInternal (not a Pod / PodList: names what was wrong).
Result<Pod> DecodePod(std::string_view json);
Result<std::vector<Pod>> DecodePodList(std::string_view json);
// metadata.labels and metadata.annotations of any object, merged (annotations win).
Result<Labels> DecodeObjectLabels(std::string_view json);
// metadata.uid of any object. Errors: kInternal (none).
Result<std::string> DecodeObjectUid(std::string_view json);
// DeleteOptions that delete only the object of metadata.uid `uid` (preconditions.uid).
std::string DeleteOptionsWithUid(std::string_view uid);
// A RuntimeClass's handler ("runsc"). Errors: kInternal.
Result<std::string> DecodeRuntimeClassHandler(std::string_view json);

// The error for an API answer of `http_status` whose body is (usually) a Status object: the code
// from the status (404 kNotFound, 409 kConflict, 400/422 kInvalidArgument, 401/403
// kPermissionDenied, 429/5xx kUnavailable, 504 kTimeout), the message "<what>: <Status.message>"
// (the body's start when it is not a Status), and the HTTP status kept (Error::http_status).
Error StatusError(int http_status, std::string_view body, std::string_view what);

// The exit status an exec's error stream (stream 3) carried: 0 for a Success status, the code of
// a NonZeroExitCode failure (details.causes[reason=ExitCode].message). Errors: kUnavailable (any
// other failure: the exec itself failed; its message), kInternal (not a Status).
Result<int> ExitCodeOfStatus(std::string_view json);

// "k1,k2=v2" from agvisor's label filters ("key" or "key=value"). Errors: kInvalidArgument (a
// filter with characters a selector cannot carry).
Result<std::string> LabelSelector(const std::vector<std::string>& filters);

// Whether `value` can be a label value (<= 63 of [A-Za-z0-9_.-], alphanumeric at both ends, or
// empty). Other values travel as annotations only (DecodeObjectLabels merges them back).
bool IsLabelValue(std::string_view value);

// RFC 3339 ("2026-12-02T04:41:50Z") to unix seconds; 0 when it is not one.
std::int64_t UnixSecondsOfRfc3339(std::string_view text);

}  // namespace agvisor::kube
