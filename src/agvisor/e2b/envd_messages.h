// The envd messages the E2B SDK sends and reads (spec/envd process.proto and filesystem.proto of
// e2b-dev/E2B), in proto3's JSON mapping: field names in lowerCamelCase (the proto names are
// accepted too), 64-bit integers as strings, bytes as base64, enums by name, oneofs as the one
// field present, timestamps as RFC 3339. Pure: decoders of requests, encoders of answers. Used
// by envd.cc; the JSON library stays in the .cc.
//
// Decoders refuse what a hostile caller could send wrong (a wrong type, a selector with both or
// neither of pid and tag, an unknown signal, a bad base64) with kInvalidArgument naming the
// field; unknown fields are ignored, as protojson's DiscardUnknown does.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::e2b::envd {

// ---- Process ----
struct ProcessSelector {
  std::optional<std::uint32_t> pid;  // exactly one of pid and tag is set
  std::optional<std::string> tag;
};
struct ProcessConfig {
  std::string cmd;
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;
  std::optional<std::string> cwd;
};
struct PtySize {
  std::uint32_t cols = 0;
  std::uint32_t rows = 0;
};
struct StartRequest {
  ProcessConfig process;
  std::optional<PtySize> pty;
  std::optional<std::string> tag;
  std::optional<bool> stdin;  // absent: true (older SDKs); the SDK sends false by default
};
struct SendInputRequest {
  ProcessSelector process;
  bool pty = false;  // the input's oneof: pty, else stdin
  std::string data;
};
struct SendSignalRequest {
  ProcessSelector process;
  int signal = 0;  // 9 or 15 (the proto's Signal enum)
};
struct UpdateRequest {
  ProcessSelector process;
  std::optional<PtySize> pty;
};
// Errors of every decoder: kInvalidArgument naming the field.
// A request without fields (ListRequest): any JSON object.
Result<void> DecodeEmptyRequest(std::string_view json);
Result<StartRequest> DecodeStartRequest(std::string_view json);
// ConnectRequest and CloseStdinRequest: {"process": selector}.
Result<ProcessSelector> DecodeSelectorRequest(std::string_view json);
Result<SendInputRequest> DecodeSendInputRequest(std::string_view json);
Result<SendSignalRequest> DecodeSendSignalRequest(std::string_view json);
Result<UpdateRequest> DecodeUpdateRequest(std::string_view json);

// The events of Start and Connect (StartResponse / ConnectResponse: {"event": ProcessEvent}).
enum class Output { kStdout, kStderr, kPty };
std::string StartEventJson(std::uint32_t pid);
std::string DataEventJson(Output output, std::string_view bytes);
struct EndEvent {
  std::int32_t exit_code = 0;
  bool exited = true;  // false: ended by a signal
  std::string status;  // "exit status 0", "signal: killed"
  std::optional<std::string> error;
};
std::string EndEventJson(const EndEvent& end);
std::string ProcessKeepaliveJson();
// How envd words a process's end, from its exit code (128+N for signal N) and signal.
EndEvent EndEventFor(std::int32_t exit_code, int signal);

struct ListedProcess {
  ProcessConfig config;
  std::uint32_t pid = 0;
  std::optional<std::string> tag;
};
std::string ListResponseJson(const std::vector<ListedProcess>& processes);

// ---- Filesystem ----
struct WatchRequest {
  std::string path;
  bool recursive = false;
  bool include_entry = false;
  bool allow_network_mounts = false;
};
// Stat, MakeDir, Remove: {"path"}. kInvalidArgument when empty.
Result<std::string> DecodePathRequest(std::string_view json);
// Move: {"source","destination"}.
Result<std::pair<std::string, std::string>> DecodeMoveRequest(std::string_view json);
// ListDir: {"path","depth"}; depth 0 reads as 1.
Result<std::pair<std::string, std::uint32_t>> DecodeListDirRequest(std::string_view json);
// WatchDir and CreateWatcher.
Result<WatchRequest> DecodeWatchRequest(std::string_view json);
// GetWatcherEvents and RemoveWatcher: {"watcherId"}.
Result<std::string> DecodeWatcherIdRequest(std::string_view json);

enum class FileType : std::uint8_t { kUnspecified = 0, kFile = 1, kDirectory = 2, kSymlink = 3 };
struct EntryInfo {
  std::string name;
  FileType type = FileType::kUnspecified;
  std::string path;
  std::int64_t size = 0;
  std::uint32_t mode = 0;   // permission bits (and setuid/setgid/sticky)
  std::string permissions;  // "-rwxr-xr-x", "drwxr-xr-x" (Go's FileMode.String)
  std::string owner;
  std::string group;
  std::optional<std::int64_t> modified_unix_ns;
  std::optional<std::string> symlink_target;
};
// The Go FileMode.String() form of a type and permission bits ("drwxr-xr-x").
std::string PermissionString(FileType type, std::uint32_t mode);
// {"entry": EntryInfo}: Stat, MakeDir and Move answers.
std::string EntryResponseJson(const EntryInfo& entry);
std::string ListDirResponseJson(const std::vector<EntryInfo>& entries);
// The /files routes' answer: [{"name","type":"file"|"dir","path"}].
std::string WriteInfoJson(const std::vector<EntryInfo>& entries);

enum class EventType : std::uint8_t {
  kCreate = 1,
  kWrite = 2,
  kRemove = 3,
  kRename = 4,
  kChmod = 5
};
struct FilesystemEvent {
  std::string name;  // relative to the watched directory
  EventType type = EventType::kCreate;
  std::optional<EntryInfo> entry;
};
std::string WatchStartJson();
std::string WatchEventJson(const FilesystemEvent& event);
std::string WatchKeepaliveJson();
std::string CreateWatcherResponseJson(std::string_view watcher_id);
std::string WatcherEventsResponseJson(const std::vector<FilesystemEvent>& events);

// ---- The /files upload body ----
// One part of a multipart/form-data body: the file's name (the SDK's path) and its bytes (a view
// into the body).
struct FormFile {
  std::string filename;
  std::string_view data;
};
// The parts of a multipart/form-data `body` whose Content-Type is `content_type` (the boundary
// taken from it), at most `max_parts`. Errors: kInvalidArgument (no boundary, a part without a
// filename, a body that does not end with the closing boundary, more parts than max_parts).
Result<std::vector<FormFile>> ParseMultipart(std::string_view content_type, std::string_view body,
                                             std::size_t max_parts);

}  // namespace agvisor::e2b::envd
