// Pure encoders and decoders of the Docker Engine API: request bodies and targets in, typed
// values and agvisor::Error out. No I/O.
//
// Used by docker/client.cc; unit-tested against golden JSON captured from a real dockerd
// (codec_test.cc, tests/testdata/docker/). Boost.JSON is used inside codec.cc only; its
// exceptions never escape (malformed JSON is an Error).
//
// Error codes:
//   Validate*         kInvalidArgument (the string could inject into a URL or is not a name)
//   Encode*           kInvalidArgument (missing required fields), kUnsupported (a field the
//                     negotiated API version lacks, naming the versions)
//   Decode*           kInternal (the daemon's answer is not the JSON we expect)
//   DecodeDaemonError the code follows the HTTP status (see there)
//   ProgressDecoder   the error of an {"error": ...} line (code from its text), kInternal
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/docker/api_version.h"
#include "agvisor/docker/types.h"

namespace agvisor::docker {

// ---- Validation of strings that go into URL paths and queries -------------------------------

// A container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*, at most 255 chars) or id (hex). `what` names the
// argument in the message ("container").
Result<void> ValidateContainerRef(std::string_view ref, std::string_view what = "container");
// Volume names share the container name charset.
Result<void> ValidateVolumeName(std::string_view name);
// Exec ids are 64 hex digits.
Result<void> ValidateExecId(std::string_view id);
// An image reference: [a-zA-Z0-9][a-zA-Z0-9_.:/@+-]*, no "..", at most 512 chars. Refuses a
// leading '-' (it would be an option to a CLI).
Result<void> ValidateImageRef(std::string_view ref);
// "KILL", "SIGKILL", "9", "SIGRTMIN+3".
Result<void> ValidateSignal(std::string_view signal);

// ---- Targets and query strings --------------------------------------------------------------

// Percent-encodes everything but RFC 3986 unreserved characters.
std::string PercentEncode(std::string_view s);
// "?k1=v1&k2=v2" with keys and values percent-encoded; "" when `params` is empty.
std::string BuildQuery(const std::vector<std::pair<std::string, std::string>>& params);
// The `filters` JSON of list calls: {"label":["agvisor=1","k"]} (not yet percent-encoded);
// "" when `labels` is empty.
std::string EncodeLabelFilters(const std::vector<std::string>& labels);
// "/v1.41" + path.
std::string VersionedPath(ApiVersion version, std::string_view path);

// ---- Request bodies -------------------------------------------------------------------------

// POST /containers/create.
Result<std::string> EncodeContainerCreate(const ContainerConfig& config, ApiVersion version);
// POST /containers/{id}/exec.
Result<std::string> EncodeExecCreate(const ExecConfig& config);
// POST /exec/{id}/start: {"Detach":false,"Tty":tty}.
std::string EncodeExecStart(bool tty);
// POST /volumes/create.
std::string EncodeVolumeCreate(std::string_view name,
                               const std::map<std::string, std::string>& labels);
// The bridge driver's option that names the host's bridge interface.
inline constexpr std::string_view kBridgeNameOption = "com.docker.network.bridge.name";
// POST /networks/create body (a bridge network).
std::string EncodeNetworkCreate(const NetworkConfig& c);

// An image made of layers the daemon has plus one new layer, for POST /images/load
// (Client::LoadImage): the daemon reuses a layer it has by its chain of diff ids and reads only
// the new layer's file (checked on Engine API 1.41, Docker 20.10: an absent file of a layer the
// daemon has is not read; a wrong diff id is refused, "invalid diffID for layer N").
struct LayeredImage {
  std::string repo_tag;                  // "repo:tag"
  std::vector<std::string> base_layers;  // the daemon's layers' diff ids, lowest first
  std::string layer_diff_id;             // "sha256:<hex of the new layer's tar>"
  std::string architecture;              // "amd64"
  std::string os;                        // "linux"
  std::string created;                   // RFC 3339
  std::vector<std::string> env;
  std::string working_dir;
  std::string user;
  std::map<std::string, std::string> labels;
};
// The image's configuration (its id is the sha256 of these bytes).
std::string EncodeLayeredImageConfig(const LayeredImage& image);
// manifest.json of the archive: `config_name` and the layers' file names in it, the new
// layer's (`layer_name`) last; the base layers get names that the archive leaves out.
std::string EncodeLayeredImageManifest(const LayeredImage& image, std::string_view config_name,
                                       std::string_view layer_name);

// ---- Response bodies ------------------------------------------------------------------------

// {"Id": "..."} of create calls (container, exec).
Result<std::string> DecodeIdResponse(std::string_view body);
Result<ContainerInfo> DecodeContainerInspect(std::string_view body);
Result<std::vector<ContainerSummary>> DecodeContainerList(std::string_view body);
Result<ExecInfo> DecodeExecInspect(std::string_view body);
Result<VersionInfo> DecodeVersion(std::string_view body);
Result<SystemInfo> DecodeInfo(std::string_view body);
Result<VolumeInfo> DecodeVolume(std::string_view body);
// {"Volumes": [...], "Warnings": ...}
Result<std::vector<VolumeInfo>> DecodeVolumeList(std::string_view body);
// GET /system/df: its volumes, each with its size.
Result<std::vector<VolumeInfo>> DecodeDiskUsageVolumes(std::string_view body);
Result<ImageInfo> DecodeImageInspect(std::string_view body);
// GET /events with an `until`: one JSON object per line; their "Action"s in order.
Result<std::vector<std::string>> DecodeEventActions(std::string_view body);
// GET /images/json: a JSON array.
Result<std::vector<ImageSummary>> DecodeImageList(std::string_view body);
// GET /networks/{id}
Result<NetworkInfo> DecodeNetwork(std::string_view body);
// GET /networks: an array of what GET /networks/{id} answers.
Result<std::vector<NetworkInfo>> DecodeNetworkList(std::string_view body);
// One sample of GET /containers/{id}/stats?stream=false, with cpu_percent and memory_bytes
// derived as `docker stats` does.
Result<ContainerStats> DecodeContainerStats(std::string_view body);
// POST /containers/{id}/wait: {"StatusCode": n, "Error": {"Message": "..."}}. A non-empty
// Error.Message is a kInternal error naming `container`.
Result<int> DecodeWaitResponse(std::string_view body, std::string_view container);

// An error answer of the daemon: `body` is {"message": "..."} (or anything: then its text), the
// result's message is "docker <operation> <object>: <daemon message>" and http_status is set.
// Codes: 400 kInvalidArgument, 401/403 kPermissionDenied, 404 kNotFound, 409 kConflict,
// 503 kUnavailable, 500 (and anything else) kInternal unless the daemon's message says otherwise
// ("No such ..." kNotFound, "connection refused"/"no such host" kUnavailable, "already in use"
// kConflict, "permission denied" kPermissionDenied, "no space left"/"out of memory"
// kResourceExhausted, "unknown runtime"/"invalid" kInvalidArgument).
Error DecodeDaemonError(int http_status, std::string_view body, std::string_view operation,
                        std::string_view object);

// The JSON-lines progress stream of POST /images/create (import and pull). Incremental: feed
// chunks as they arrive. Each complete line is decoded; `on_message` gets every status line; an
// {"error": ..., "errorDetail": {...}} line fails Feed/Finish with "docker <operation> <object>:
// <error>" (the stream then stays failed).
class ProgressDecoder {
 public:
  using OnMessage = std::function<void(const ProgressMessage&)>;
  ProgressDecoder(std::string operation, std::string object)
      : operation_(std::move(operation)), object_(std::move(object)) {}

  Result<void> Feed(std::string_view chunk, const OnMessage& on_message);
  // Decodes a last line without '\n'.
  Result<void> Finish(const OnMessage& on_message);
  // The last status seen (import puts the new image id there: "sha256:...").
  const std::string& last_status() const { return last_status_; }

 private:
  Result<void> DecodeLine(std::string_view line, const OnMessage& on_message);
  std::string operation_;
  std::string object_;
  std::string partial_;
  std::string last_status_;
  std::optional<Error> error_;
};

}  // namespace agvisor::docker
