// Pure JSON codecs of the agvisord API (docs/openapi.yaml): request bodies in, typed values and
// kInvalidArgument errors out; typed values in, JSON text out. Plus the pieces of the wire that
// are not JSON: base64, the WebSocket stream tags, query flags, and the HTTP status of each
// agvisor::ErrorCode.
//
// Used by the daemon (server/service.cc) and its client (client/agvisord_api.cc); unit-tested in
// codec_test.cc. Boost.JSON stays inside codec.cc. Every parse error names the field, what was
// wrong and what is accepted.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/egress/decision_log.h"
#include "agvisor/egress/policy.h"
#include "agvisor/sandbox/spec.h"
#include "agvisor/sandbox/types.h"

namespace agvisor::api {

// ---- Errors ----
// The HTTP status of an error code: kInvalidArgument 400, kPermissionDenied 403 (401 is only for
// a missing or wrong bearer token), kNotFound 404, kConflict 409, kSandboxDied 410, kTimeout 504,
// kResourceExhausted 507, kUnsupported 501, kUnavailable 503, kInternal 500.
int HttpStatusFor(ErrorCode code);
// "invalid_argument", "not_found", ... (the "code" of an error body).
std::string_view ErrorSlug(ErrorCode code);
// The code of a slug; kInternal for an unknown one (a client decoding an error body).
ErrorCode ErrorCodeFromSlug(std::string_view slug);
// {"error":{"code":"not_found","message":"..."}}
std::string ErrorJson(ErrorCode code, std::string_view message);
inline std::string ErrorJson(const Error& e) { return ErrorJson(e.code(), e.message()); }
// The same with a code outside ErrorCode ("unauthenticated", "method_not_allowed", ...).
std::string ErrorJsonSlug(std::string_view slug, std::string_view message);
// Decodes an error body (any status); nullopt when it is not one.
std::optional<Error> DecodeErrorJson(std::string_view body);

// ---- Bytes in JSON ----
std::string Base64Encode(std::string_view bytes);
// Standard alphabet, padding optional, whitespace refused. Errors: kInvalidArgument naming `what`.
Result<std::string> Base64Decode(std::string_view text, std::string_view what);
// Valid UTF-8 as is; each invalid byte becomes U+FFFD (JSON strings must be UTF-8).
std::string SanitizeUtf8(std::string_view bytes);

// ---- Sandboxes ----
// The API id of a sandbox: its container name without "agvisor-" (named ones: their name).
std::string SandboxIdFor(std::string_view container_name);
// The container name of an id. Errors: kInvalidArgument (not a name/id: [A-Za-z0-9][A-Za-z0-9_.-]*,
// at most 63 characters).
Result<std::string> ContainerNameForId(std::string_view id);

struct CreateRequest {
  SandboxSpec spec;                 // host is the daemon's; never taken from the request
  std::optional<std::string> pool;  // take a warm sandbox from this pool
  // With `pool` (Pool::Acquire's AcquireOptions): how long to wait for a member being started
  // when none is ready, and whether a cold create may follow.
  std::chrono::milliseconds pool_wait{0};
  bool pool_cold_create = true;
};
// {"image", "gui", "limits": {"cpus", "memory", "pids", "shm", "disk"}, "network", "lifetime",
//  "idle_ttl", "name", "runtime", "labels": {k: v}, "pool"}; every field optional, unknown
// fields refused. With "pool" only "lifetime", "idle_ttl", "wait" (seconds >= 0) and
// "cold_create" (bool) may come. The spec is not validated here (Sandbox::Create does that).
Result<CreateRequest> ParseCreateRequest(std::string_view body);

// What the API says about one sandbox.
struct SandboxView {
  std::string id;
  SandboxInfo info;
  std::optional<bool> resumed;  // create only
  std::string disk_warning;     // create only, when set
};
std::string SandboxJson(const SandboxView& v);
std::string SandboxListJson(const std::vector<SandboxView>& views);
// "stopped", "lifetime", "idle", "out_of_memory", "killed", "gone"; "" for kNone.
std::string_view EndReasonSlug(EndReason reason);

// POST /v1/sandboxes/{id}/update (a live resize): {"cpus": 1.5, "memory": "1g", "pids": 256},
// each optional (at least one), unknown fields refused; the values are checked by
// ValidateLimitsUpdate. The answer is the Sandbox, with its "limits" now.
Result<LimitsUpdate> ParseUpdateRequest(std::string_view body);
std::string UpdateRequestJson(const LimitsUpdate& update);

// ---- Exec ----
struct ExecRequest {
  std::vector<std::string> argv;     // "argv": [...], or "command": "..." = sh -c command
  std::optional<std::string> input;  // "stdin" (text) or "stdin_b64"
  double timeout = 120;              // "timeout" seconds (range: the core's)
  std::vector<std::string> env;      // "env": {"K": "V"} or ["K=V"]
  std::string cwd;
  std::string user;
  bool base64 = false;  // "encoding": "text" (default) | "base64": output fields
  // WebSocket exec only:
  bool pty = false;
  std::uint16_t rows = 24, cols = 80;
  bool stdin = true;  // "stdin": false: the command reads /dev/null (no pty)
};
// For POST .../exec (`websocket` = false: "pty"/"rows"/"cols" refused) and for the first text
// message of .../exec/ws (`websocket` = true: "stdin"/"stdin_b64" data refused; "stdin" is a
// boolean there and a timeout of 0 means none).
Result<ExecRequest> ParseExecRequest(std::string_view body, bool websocket);
// {"exit_code", "timed_out", "stdout", "stderr", "encoding", "truncated", "stdout_dropped",
//  "stderr_dropped", "prestarted"}
std::string ExecResultJson(const ExecResult& r, bool base64);

// ---- Background processes ----
struct StartProcessRequest {
  std::vector<std::string> argv;
  BackgroundOptions options;
};
// {"argv" | "command", "stdin": bool, "timeout", "env", "cwd", "user", "keep_awake": bool}
Result<StartProcessRequest> ParseStartProcessRequest(std::string_view body);
std::string ProcessListJson(const std::vector<ProcessInfo>& procs);
// {"signal": 15} or {"signal": "TERM"} / "SIGTERM"; default SIGTERM for an empty body.
Result<int> ParseSignalRequest(std::string_view body);
// POST /v1/sandboxes/{id}/desktop/token: {"ttl": seconds} (optional, default 300, 1..86400);
// an empty body is the default.
Result<std::int64_t> ParseDesktopTokenRequest(std::string_view body);
// POST /v1/sandboxes/{id}/desktop/input: one action, named by "action", with its fields only:
//   move {x, y}; click {x, y, button?, count?}; drag {x, y, to_x, to_y, button?};
//   scroll {x, y, dy?, dx?}; type {text}; key {keys}.
// Coordinates are screen pixels (0..65535), button "left" (default), "middle" or "right", count
// (default 1), dy/dx wheel steps (default 0); the desktop verbs check their ranges and text.
// Errors: kInvalidArgument (no or an unknown action, a missing, unknown or mistyped field).
struct DesktopInput {
  enum class Action { kMove, kClick, kDrag, kScroll, kType, kKey };
  Action action = Action::kMove;
  int x = 0, y = 0, to_x = 0, to_y = 0;
  std::string button = "left";
  int count = 1;
  int dy = 0, dx = 0;
  std::string text;  // type: the text; key: the key combinations
};
Result<DesktopInput> ParseDesktopInputRequest(std::string_view body);
// "15", "TERM", "SIGTERM", "KILL", ... -> the number. Errors: kInvalidArgument.
Result<int> ParseSignal(std::string_view text);

// ---- Files ----
std::string FileEntryJson(const FileEntry& e);
std::string FileListJson(std::string_view path, const std::vector<FileEntry>& entries);

// ---- Pools ----
// A pool's name in the API and in a client::Place: [A-Za-z0-9][A-Za-z0-9_.-]*, at most 63
// characters. Errors: kInvalidArgument naming the name and the rule.
Result<void> ValidatePoolName(std::string_view name);
struct CreatePoolRequest {
  std::string name;  // the pool's name in the API ([A-Za-z0-9][A-Za-z0-9_.-]*)
  PoolOptions options;
};
// {"name", "size", "max_age" (seconds), "fill_parallelism", and the sandbox fields of
// CreateRequest except name, lifetime, idle_ttl and pool (those come with each create)}.
Result<CreatePoolRequest> ParseCreatePoolRequest(std::string_view body);
// {"name", "id", "size", "max_age", "image", "stats": {"ready", "starting", "acquired", "cold",
//  "started", "start_failures", "recycled", "discarded", "last_error"}}
std::string PoolJson(const PoolInfo& pool);
// Calls fn(name, value) for each field of a snapshot's result, named as in the "snapshot" JSON of
// POST .../snapshot and .../fork: the one list of them, for the API's codec, the CLI's --json,
// the MCP tool's answer and the Python package's dict.
template <typename Fn>
void ForEachSnapshotField(const SnapshotResult& r, Fn&& fn) {
  fn("image", r.image);
  fn("image_id", r.image_id);
  fn("bytes", r.bytes);
  fn("entries", r.entries);
  fn("file_bytes", r.file_bytes);
  fn("seconds", r.seconds);
  fn("layered", r.layered);  // a layer of what changed (bytes: its stream), or the whole fs
  fn("whiteouts", r.whiteouts);
  fn("image_layers", r.image_layers);
  fn("whole_because", r.whole_because);
}

// Calls fn(name, value) for each field of a snapshot as GET /v1/snapshots lists it: the one
// list of them, for the API's codec, the CLI's --json, the MCP tool and the Python package.
template <typename Fn>
void ForEachSnapshotInfoField(const SnapshotInfo& s, Fn&& fn) {
  fn("tag", s.tag);
  fn("image", s.image);
  fn("image_id", s.image_id);
  fn("of", s.of);
  fn("workspace", s.workspace);
  fn("created", s.created_unix);
  fn("size_bytes", s.size_bytes);
}

// Calls fn(name, value) for each member of `s`, named as in a pool's "stats" object, in that
// order: the one list of them, for PoolJson and the Python package's Pool.stats().
template <typename Fn>
void ForEachPoolStat(const PoolStats& s, Fn&& fn) {
  fn("ready", s.ready);
  fn("starting", s.starting);
  fn("acquired", s.acquired);
  fn("cold", s.cold);
  fn("started", s.started);
  fn("start_failures", s.start_failures);
  fn("recycled", s.recycled);
  fn("discarded", s.discarded);
  fn("last_error", s.last_error);
}
std::string PoolListJson(const std::vector<PoolInfo>& pools);
// A pool as the API describes it (PoolJson): what a client reads back. options has the size,
// max_age, image and platform the daemon reports.
using PoolView = PoolInfo;

// ---- Metrics ----
// A sandbox's traffic through its egress enforcer (the metrics route's "egress").
struct EgressTraffic {
  egress::DecisionCounters decisions;
  std::uint64_t bytes_up = 0;    // sandbox to destinations
  std::uint64_t bytes_down = 0;  // destinations to sandbox
  std::size_t open_connections = 0;
};
// {"id", "read", "cpu_percent", "online_cpus", "memory_bytes", "memory_limit_bytes", "pids",
//  "pids_limit"} and, when `egress` is given (a sandbox with a policy), "egress": {"allowed",
//  "denied", "bytes_up", "bytes_down", "open_connections"}.
std::string MetricsJson(std::string_view id, const SandboxStats& s,
                        const EgressTraffic* egress = nullptr);

// ---- Query parameters ----
// "1", "true", "yes" / "0", "false", "no", "" (present without a value = true); absent = dflt.
Result<bool> QueryBool(const std::map<std::string, std::string>& query, std::string_view key,
                       bool dflt);
// A required, absolute sandbox path ("path"). Errors: kInvalidArgument.
Result<std::string> QueryPath(const std::map<std::string, std::string>& query);
// An optional byte count or position ("offset", "length"): decimal digits, at most 2^62.
// Absent = nullopt. Errors: kInvalidArgument (names the parameter).
Result<std::optional<std::uint64_t>> QueryBytes(const std::map<std::string, std::string>& query,
                                                std::string_view key);
// An octal mode ("0644", "755"). Errors: kInvalidArgument.
Result<std::uint32_t> QueryMode(const std::map<std::string, std::string>& query,
                                std::uint32_t dflt);

// ---- WebSocket streams (docs/agvisord.md) ----
// Binary frames carry a 1-byte tag then the bytes: client -> server kTagStdin; server -> client
// kTagStdout / kTagStderr. Text frames are JSON control messages.
inline constexpr std::uint8_t kTagStdin = 0;
inline constexpr std::uint8_t kTagStdout = 1;
inline constexpr std::uint8_t kTagStderr = 2;

// A client control message: {"type": "eof"} | {"type": "resize", "rows", "cols"} |
// {"type": "signal", "signal": 15 | "TERM"}.
struct WsControl {
  enum class Type { kEof, kResize, kSignal } type = Type::kEof;
  std::uint16_t rows = 0, cols = 0;
  int signal = 0;
};
Result<WsControl> ParseWsControl(std::string_view text);
// A WebSocket's first message when its upgrade carried no Authorization header (a browser cannot
// set one): {"type": "auth", "token": "..."}; the token. Errors: kInvalidArgument (not that
// shape; the message never repeats what was sent, which may be a mistyped token).
Result<std::string> ParseWsAuthMessage(std::string_view text);
// {"type":"auth","token":"..."}
std::string WsAuthJson(std::string_view token);
// {"type":"started","pid":N}
std::string WsStartedJson(std::uint32_t pid);
// {"type":"exit","exit_code":N,"signal":S,"timed_out":B,"prestarted":B}: all of how it ended, so a
// client collects the same ExecResult as Sandbox::Exec (ExecOutputCollector).
std::string WsExitJson(const ProcessExit& exit);
// {"type":"error","error":{"code","message"}}
std::string WsErrorJson(const Error& e);
// A watch WebSocket's event: {"type":"event","kind":"create"|"modify"|"delete"|"move"|
// "overflow","path","is_dir"} plus "old_path" for a move (overflow: no path, no is_dir).
std::string WsWatchEventJson(const WatchEvent& event);
// {"type":"end"}: the watch is over (the watched directory went away).
std::string WsEndJson();

// ---- Snapshots and forks (POST /v1/sandboxes/{id}/snapshot, .../fork) ----
// {"image" (required), "workspace": bool, "max_bytes": N}. Errors: kInvalidArgument naming the
// field. The image is checked by Sandbox::Snapshot.
Result<SnapshotOptions> ParseSnapshotRequest(std::string_view body);
std::string SnapshotRequestJson(const SnapshotOptions& options);
// {"image", "image_id", "bytes", "entries", "file_bytes", "seconds"}
std::string SnapshotResultJson(const SnapshotResult& result);
// Errors: kInternal (not the documented shape).
Result<SnapshotResult> ParseSnapshotResultJson(std::string_view body);
// {"count" (required), "prefix", "image", "max_bytes", "spec": {a create request without
// "name" and "pool"}}. Errors: kInvalidArgument naming the field.
Result<ForkOptions> ParseForkRequest(std::string_view body);
std::string ForkRequestJson(const ForkOptions& options);
// GET /v1/snapshots: {"snapshots": [{ForEachSnapshotInfoField}...]}.
std::string SnapshotListJson(const std::vector<SnapshotInfo>& snapshots);
// Errors: kInternal (a malformed answer).
Result<std::vector<SnapshotInfo>> ParseSnapshotListJson(std::string_view body);
// {"snapshot": SnapshotResult, "sandboxes": [Sandbox...], "seconds"}
struct ForkView {
  SnapshotResult snapshot;
  std::vector<SandboxView> sandboxes;
  double seconds = 0;
};
std::string ForkResultJson(const ForkView& view);
// Errors: kInternal.
Result<ForkView> ParseForkResultJson(std::string_view body);

// ---- The client's side (client/agvisord_api.h) ----
// The body of POST /v1/sandboxes for `spec` (its host is not sent: the daemon has its own).
std::string CreateRequestJson(const SandboxSpec& spec);
// The body of POST /v1/sandboxes taking a member of pool `name` with `options`' deadlines.
std::string AcquireRequestJson(std::string_view name, const AcquireOptions& options);
// The body of POST /v1/pools.
std::string CreatePoolRequestJson(std::string_view name, const PoolOptions& options);
// A Pool object / the {"pools": [...]} list. Errors: kInternal (not the documented shape).
Result<PoolView> ParsePoolJson(std::string_view body);
Result<std::vector<PoolView>> ParsePoolListJson(std::string_view body);

// ---- Egress (GET/PUT /v1/sandboxes/{id}/egress) ----
// A sandbox's egress policy as its enforcer serves it, and its recent decisions.
struct EgressView {
  std::string container;
  std::string network;
  std::string gateway;
  egress::EgressRules rules;
  std::string describe;                   // EgressPolicy::Describe()
  std::vector<egress::Decision> recent;   // the enforcer's side
  std::vector<std::string> recent_lines;  // a client's side: one line per decision, oldest first
  std::string json;                       // a client's side: the answer as it came
  egress::DecisionCounters counters;
  // Learn mode (docs/egress.md): the smallest policy allowing what was reached
  // (egress::SuggestRules over the learned destinations), and how many destinations it drew on.
  egress::EgressRules suggested;
  std::uint64_t learned_destinations = 0;
  std::uint64_t learned_dropped = 0;  // learned connections past the destinations kept
};
// Its JSON (`recent`: records as DecisionJson's) and a client's reading of it (recent_lines:
// FormatDecision of each record, without the sandbox).
std::string EgressViewJson(std::string_view id, const EgressView& view);
Result<EgressView> ParseEgressViewJson(std::string_view body);

// ---- The egress log (docs/egress.md, "Log"; GET .../egress/log, .../egress/log/ws) ----
// One record as one line of JSON: {"time","seq","sandbox","via","name","port","allowed",
// "learned","reason","address","method","path","status","bytes_up","bytes_down","duration_ms",
// "secret","closes"} ("closes": a connection's close record, the seq it closes; 0 otherwise).
// Every string is valid UTF-8 (invalid bytes become U+FFFD) and every control character, DEL
// and the C1 controls included, is a \u escape: a line can go to a terminal as it is. The lines
// of agvisord's log files, the WebSocket's records and `agvisor egress --follow --json`.
std::string DecisionJson(const egress::Decision& d);
// One such line back (fields missing or of another type are left empty; strings bounded again
// by BoundDecision). Errors: kInvalidArgument (not a record: e.g. a line torn by a crash).
Result<egress::Decision> ParseDecisionJson(std::string_view line);
// GET .../egress/log: {"id", "records": [record...]}, oldest first.
std::string EgressLogJson(std::string_view id, const std::vector<egress::Decision>& records);
Result<std::vector<egress::Decision>> ParseEgressLogJson(std::string_view body);
// How many records one read of the log gives (`last`): by default, and at most.
inline constexpr std::size_t kDefaultEgressLogRecords = 50;
inline constexpr std::size_t kMaxEgressLogRecords = 1000;
// The log WebSocket's message for one record: {"type":"record","record":{...}}
// (WsServerMessage::Type::kRecord).
std::string WsEgressRecordJson(const egress::Decision& d);
// PUT body: {"allow_domains": [...], "allow_cidrs": [...], "ports": [...], "deny_domains": [...],
// "mode": "enforce"|"learn"} (each optional; what is left out is empty, the mode enforce; the
// mode's value is checked by the policy). Errors: kInvalidArgument naming the field.
Result<egress::EgressRules> ParseEgressRulesJson(std::string_view body);
std::string EgressRulesJson(const egress::EgressRules& rules);
// A Sandbox object / the {"sandboxes": [...]} list. Errors: kInternal (not the documented shape).
Result<SandboxView> ParseSandboxJson(std::string_view body);
Result<std::vector<SandboxView>> ParseSandboxListJson(std::string_view body);
// {"processes": [...]} -> the list. Errors: kInternal.
Result<std::vector<ProcessInfo>> ParseProcessListJson(std::string_view body);
// A FileEntry object (FileEntryJson) / the {"path", "entries": [...]} of FileListJson. The
// mode is the permission bits the daemon sends plus the type bits of the kind (S_IFREG,
// S_IFDIR, S_IFLNK; none for "other"), as st_mode. Errors: kInternal.
Result<FileEntry> ParseFileEntryJson(std::string_view body);
Result<std::vector<FileEntry>> ParseFileListJson(std::string_view body);
// The body of POST .../processes.
std::string StartProcessRequestJson(const std::vector<std::string>& argv,
                                    const BackgroundOptions& options);
// {"pid": N}. Errors: kInternal.
Result<std::uint32_t> ParsePidJson(std::string_view body);
// A Metrics object. Errors: kInternal.
Result<SandboxStats> ParseMetricsJson(std::string_view body);
// The first message of an exec WebSocket (timeout 0 = none).
std::string WsExecRequestJson(const std::vector<std::string>& argv, const ProcessOptions& options);
// A control message to the server: {"type":"eof"} | resize | signal.
std::string WsControlJson(const WsControl& control);
// A text message from the server: started, exit or error; event or end on a watch; record or
// end on an egress log.
struct WsServerMessage {
  enum class Type { kStarted, kExit, kError, kEvent, kEnd, kRecord } type = Type::kStarted;
  std::uint32_t pid = 0;                  // kStarted
  ProcessExit exit;                       // kExit
  Error error{ErrorCode::kInternal, ""};  // kError
  WatchEvent event;                       // kEvent
  egress::Decision record;                // kRecord (an egress log WebSocket's)
  std::string record_json;                // kRecord: the record as DecisionJson gives it
};
// Errors: kInternal (not one of the documented messages; an event whose kind is unknown or
// whose paths break proto::CheckWatchPath's rules).
Result<WsServerMessage> ParseWsServerMessage(std::string_view text);

}  // namespace agvisor::api
