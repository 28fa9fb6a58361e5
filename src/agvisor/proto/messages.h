// The agent channel protocol (docs/protocol.md): frame encoding, an incremental frame decoder,
// and one struct per payload layout with Encode / strict Decode.
//
// Shared by the in-sandbox agent (src/agvisor/agent, a static binary: this module depends on the
// standard library and agvisor::base only) and the host side (src/agvisor/channel). Pure: no I/O,
// no clocks, no globals. Fuzzed by proto_fuzz.cc; unit-tested at every split point in
// messages_test.cc.
//
// Error convention of this module: every decoding failure is kInvalidArgument with a message
// naming the message type and field ("EXEC.flags: unknown bits 0x08"). agvisor::ErrorCode has no
// protocol code; a peer that gets such an error from a Decode or from FrameDecoder answers with
// ERROR kProtocol on stream 0 and closes the session (see WireError).
//
// Decoding is strict, so every valid payload has exactly one encoding and Decode(p).Encode() == p:
// truncation, trailing bytes, booleans other than 0/1, unknown flag bits, unknown enum values
// (entry kind, output fd, error code) are all errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/proto/wire.h"

namespace agvisor::proto {

// ---------------------------------------------------------------------------------------------
// Constants

// The newest protocol version this build speaks, and the oldest it still accepts. Version 2 added
// PROC_SIGNAL and DETACH, 3 EXIT's `prestarted`, 4 WATCH and WATCH_EVENTS, 5 IDLE_QUERY and
// IDLE_STATE, 6 EXEC's keep-awake flag and PROC_LIST_RESULT's keep_awake; a session speaks the
// lower of the two sides' versions (WELCOME says which), so a host of this build still drives an
// agent of version 1 and the other way round.
inline constexpr std::uint16_t kProtocolVersion = 6;
inline constexpr std::uint16_t kMinProtocolVersion = 1;
// Largest payload of one frame (the bytes after type and stream).
inline constexpr std::size_t kMaxPayload = 1024 * 1024;
// u32 length + u8 type + u32 stream.
inline constexpr std::size_t kFrameHeaderSize = 9;
// The `length` field counts type + stream + payload.
inline constexpr std::uint32_t kMinFrameLength = 5;
inline constexpr std::uint32_t kMaxFrameLength = 5 + kMaxPayload;
// Flow-control credit per direction per stream unless HELLO says otherwise.
inline constexpr std::uint32_t kDefaultWindow = 4 * 1024 * 1024;
// Most process bytes one OUTPUT frame carries (its payload starts with the u8 fd).
inline constexpr std::size_t kMaxOutputChunk = kMaxPayload - 1;
// Stream 0 is the session itself; operation streams are chosen by the host (odd ids).
inline constexpr std::uint32_t kSessionStream = 0;

// ---------------------------------------------------------------------------------------------
// Frame types (docs/protocol.md, one per table row).

enum class Type : std::uint8_t {
  // Session.
  kHello = 0x01,
  kWelcome = 0x02,
  kPing = 0x03,
  kPong = 0x04,
  kWindow = 0x05,
  kError = 0x06,
  kClose = 0x07,
  // Exec.
  kExec = 0x10,
  kStarted = 0x11,
  kStdin = 0x12,
  kStdinEof = 0x13,
  kOutput = 0x14,
  kExit = 0x15,
  kSignal = 0x16,
  kResize = 0x17,
  // Files.
  kFileRead = 0x30,
  kFileWrite = 0x31,
  kStat = 0x32,
  kList = 0x33,
  kMkdir = 0x34,
  kRemove = 0x35,
  kTarRead = 0x36,
  kTarWrite = 0x37,
  kData = 0x38,
  kEnd = 0x39,
  kOk = 0x3A,
  kStatResult = 0x3B,
  kListResult = 0x3C,
  // Ports.
  kPortOpen = 0x40,
  // Processes.
  kProcList = 0x50,
  kProcListResult = 0x51,
  kProcAttach = 0x52,
  kProcSignal = 0x53,  // version 2
  kDetach = 0x54,      // version 2
  // Directory watches (version 4).
  kWatch = 0x60,
  kWatchEvents = 0x61,
  // Sandbox control.
  kSetDeadlines = 0x70,
  kIdleQuery = 0x71,  // version 5
  kIdleState = 0x72,  // version 5
};

// True iff `raw` is one of the Type values above.
bool IsKnownType(std::uint8_t raw);
// "HELLO", "STDIN_EOF", ... as spelled in docs/protocol.md; "UNKNOWN" for other values.
std::string_view TypeName(Type type);

// ---------------------------------------------------------------------------------------------
// Error codes carried by ERROR frames: agvisor::ErrorCode + 1, plus two protocol-only codes.

enum class WireError : std::uint16_t {
  kInvalidArgument = 1,
  kNotFound = 2,
  kConflict = 3,
  kUnavailable = 4,
  kTimeout = 5,
  kPermissionDenied = 6,
  kResourceExhausted = 7,
  kUnsupported = 8,
  kSandboxDied = 9,
  kInternal = 10,
  kProtocol = 100,  // the peer sent a frame that does not parse; the session is closed
  kVersion = 101,   // the agent does not speak the HELLO's version; the session is closed
};

// True iff `raw` is one of the WireError values above.
bool IsKnownWireError(std::uint16_t raw);
// "kNotFound", "kProtocol", ...; "kUnknown" for other values.
std::string_view WireErrorName(WireError code);
// Total: every ErrorCode has a wire code.
WireError ToWireError(ErrorCode code);
// kProtocol -> kInternal (one side has a bug), kVersion -> kUnsupported (host and agent
// binaries do not match); the others map to their namesake.
ErrorCode FromWireError(WireError code);

// ---------------------------------------------------------------------------------------------
// Frames

struct Frame {
  Type type = Type::kClose;
  std::uint32_t stream = 0;
  std::string payload;

  bool operator==(const Frame&) const = default;
};

// True iff a payload of `size` bytes fits in one frame.
constexpr bool FitsInFrame(std::size_t size) { return size <= kMaxPayload; }

// Appends one frame (header + payload) to `out`.
// Precondition: FitsInFrame(payload.size()); a violation is a bug in the caller and aborts
// (writing a frame the peer must reject would kill the session far from the cause).
void AppendFrame(std::string& out, Type type, std::uint32_t stream, std::string_view payload);

// Like AppendFrame, for payloads built from caller input (argv, paths): kInvalidArgument
// "<TYPE>: payload of N bytes exceeds the frame limit of 1048576" instead of aborting; `out` is
// then unchanged.
Result<void> TryAppendFrame(std::string& out, Type type, std::uint32_t stream,
                            std::string_view payload);

// Writes just the 9-byte header of a frame whose payload (written separately, e.g. by writev
// straight from a read buffer) is `payload_size` bytes. Same precondition as AppendFrame.
void EncodeHeader(std::span<char, kFrameHeaderSize> out, Type type, std::uint32_t stream,
                  std::size_t payload_size);

// Header of an OUTPUT frame plus its u8 fd: the 10 bytes to put before `data_size` process
// bytes. Precondition: data_size <= kMaxOutputChunk.
inline constexpr std::size_t kOutputHeaderSize = kFrameHeaderSize + 1;
void EncodeOutputHeader(std::span<char, kOutputHeaderSize> out, std::uint32_t stream,
                        std::uint8_t fd, std::size_t data_size);

// Incremental frame decoder: feed it whatever chunks the transport returns, in order; it calls
// `on_frame` once per complete frame, in order. Correct at every split point (a header or payload
// may arrive one byte at a time). Holds at most one partial frame (<= 9 + 1 MiB bytes).
//
// Not re-entrant: `on_frame` must not call Feed on the same decoder.
class FrameDecoder {
 public:
  using OnFrame = std::function<void(Frame&&)>;

  // Consumes all of `bytes`. Errors (kInvalidArgument, after delivering every complete frame
  // that came before the bad one):
  //   - "frame length N out of range [5, 1048581]" as soon as the 4 length bytes are in;
  //   - "unknown frame type 0xNN" as soon as the type byte is in.
  // The decoder then stays failed: every later Feed returns the same error and consumes nothing.
  // Payload contents are not checked here: use CheckPayload or the payload's Decode.
  Result<void> Feed(std::string_view bytes, const OnFrame& on_frame);

  // True while part of a frame (at least one byte of it) is buffered: at EOF that means the peer
  // cut a frame short.
  bool mid_frame() const { return header_fill_ > 0; }
  bool failed() const { return failed_; }

 private:
  Result<void> Fail(std::string message);

  char header_[kFrameHeaderSize] = {};
  std::size_t header_fill_ = 0;   // header bytes seen of the current frame
  std::size_t payload_need_ = 0;  // payload bytes still missing once the header is complete
  Type type_ = Type::kClose;
  std::uint32_t stream_ = 0;
  std::string payload_;
  bool failed_ = false;
  std::string error_;
};

// Decodes `payload` strictly as the layout of `type` (an empty payload for CLOSE, STDIN_EOF,
// END, OK, PROC_LIST; anything for STDIN and DATA). kInvalidArgument naming the type and field
// if it does not parse exactly. For a receiver that wants to validate before dispatching.
Result<void> CheckPayload(Type type, std::string_view payload);

// kInvalidArgument "<TYPE>: expected an empty payload, got N bytes" unless payload is empty.
Result<void> ExpectEmpty(Type type, std::string_view payload);

// ---------------------------------------------------------------------------------------------
// Payloads. Each: Encode() -> payload bytes; static Decode(payload) -> the struct, or
// kInvalidArgument (truncated, trailing bytes, out-of-range enum / bool / flags; the message
// names the type and field). Field order and widths are those of docs/protocol.md.

// HELLO (host -> agent, stream 0, first frame).
struct Hello {
  std::uint16_t version = kProtocolVersion;
  std::uint32_t initial_window = kDefaultWindow;

  std::string Encode() const;
  static Result<Hello> Decode(std::string_view payload);
  bool operator==(const Hello&) const = default;
};

// WELCOME (agent -> host, stream 0).
struct Welcome {
  std::uint16_t version = kProtocolVersion;
  std::string agent_version;
  std::uint64_t boot_unix_ms = 0;

  std::string Encode() const;
  static Result<Welcome> Decode(std::string_view payload);
  bool operator==(const Welcome&) const = default;
};

// WINDOW (either direction): grants the peer `bytes` more payload credit on the frame's stream.
struct Window {
  std::uint32_t bytes = 0;

  std::string Encode() const;
  static Result<Window> Decode(std::string_view payload);
  bool operator==(const Window&) const = default;
};

// ERROR (agent -> host). Decode rejects codes that are not WireError values.
struct ErrorPayload {
  WireError code = WireError::kInternal;
  std::string message;

  std::string Encode() const;
  static Result<ErrorPayload> Decode(std::string_view payload);
  // Longest message FromError keeps (the rest is cut), so an ERROR frame always fits.
  static constexpr std::size_t kMaxErrorMessage = 64 * 1024;
  // From a host/agent Error: its code and message (cut to kMaxErrorMessage bytes).
  static ErrorPayload FromError(const Error& error);
  // The Error a host call returns for this payload: FromWireError(code), the message as is.
  Error ToError() const;
  bool operator==(const ErrorPayload&) const = default;
};

// PING / PONG (either direction; PONG echoes the token).
struct Ping {
  std::uint64_t token = 0;

  std::string Encode() const;
  static Result<Ping> Decode(std::string_view payload);
  bool operator==(const Ping&) const = default;
};
struct Pong {
  std::uint64_t token = 0;

  std::string Encode() const;
  static Result<Pong> Decode(std::string_view payload);
  bool operator==(const Pong&) const = default;
};

// EXEC flags (u8). Decode rejects other bits.
inline constexpr std::uint8_t kExecStdin = 1;       // the host will send STDIN (else /dev/null)
inline constexpr std::uint8_t kExecPty = 2;         // run under a pty of rows x cols
inline constexpr std::uint8_t kExecBackground = 4;  // survives the session (PROC_LIST/ATTACH)
// Version 6, with kExecBackground only (the agent answers kInvalidArgument otherwise): while the
// process runs it is activity, so idle_ttl does not end the sandbox (agent/activity.h).
inline constexpr std::uint8_t kExecKeepAwake = 8;
inline constexpr std::uint8_t kExecKnownFlags =
    kExecStdin | kExecPty | kExecBackground | kExecKeepAwake;

// EXEC (host -> agent). Semantic checks (argv non-empty, env entries contain '=') belong to the
// agent, which answers them with ERROR kInvalidArgument; Decode checks the wire layout only.
struct ExecRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V", added to the agent's environment
  std::string cwd;               // "" = the default
  std::string user;              // "" = the default, a name, or "uid[:gid]"
  std::uint64_t timeout_ms = 0;  // 0 = none
  std::uint8_t flags = 0;        // kExec* bits
  std::uint16_t rows = 0;        // pty size
  std::uint16_t cols = 0;

  std::string Encode() const;
  static Result<ExecRequest> Decode(std::string_view payload);
  bool operator==(const ExecRequest&) const = default;
};

// STARTED (agent -> host).
struct Started {
  std::uint32_t pid = 0;

  std::string Encode() const;
  static Result<Started> Decode(std::string_view payload);
  bool operator==(const Started&) const = default;
};

// OUTPUT (agent -> host): u8 fd + raw process bytes. Decode rejects fds other than 1 and 2.
// Big outputs: write EncodeOutputHeader + the bytes with writev, or decode with DecodeOutputView.
// STDIN and DATA payloads are the raw bytes themselves: no struct.
struct Output {
  std::uint8_t fd = 1;  // 1 stdout (and pty), 2 stderr
  std::string bytes;

  std::string Encode() const;
  static Result<Output> Decode(std::string_view payload);
  // The fd and a view of the bytes inside `payload` (no copy); same errors as Decode.
  static Result<std::pair<std::uint8_t, std::string_view>> DecodeOutputView(
      std::string_view payload);
  bool operator==(const Output&) const = default;
};

// EXIT (agent -> host).
struct Exit {
  std::int32_t exit_code = 0;  // killed by signal N: 128 + N; timed out: 124
  std::uint8_t signal = 0;     // 0 = none
  bool timed_out = false;
  // Version 3: the command ran in a shell the agent had started beforehand (a ready shell,
  // agent/ready_shells.h), not in one started for it. Absent (false) in versions 1-2.
  bool prestarted = false;

  // Without `prestarted` for a session of version < 3.
  std::string Encode(std::uint16_t version = kProtocolVersion) const;
  // Takes both layouts: 6 bytes (versions 1-2) or 7 (version 3).
  static Result<Exit> Decode(std::string_view payload);
  bool operator==(const Exit&) const = default;
};

// SIGNAL (host -> agent): to the command's process group.
struct Signal {
  std::uint8_t signal = 0;

  std::string Encode() const;
  static Result<Signal> Decode(std::string_view payload);
  bool operator==(const Signal&) const = default;
};

// RESIZE (host -> agent): the pty's new size.
struct Resize {
  std::uint16_t rows = 0;
  std::uint16_t cols = 0;

  std::string Encode() const;
  static Result<Resize> Decode(std::string_view payload);
  bool operator==(const Resize&) const = default;
};

// FILE_READ, STAT, LIST, TAR_READ, TAR_WRITE (host -> agent): one `str path` (TAR_WRITE: the
// directory to extract under).
struct PathRequest {
  std::string path;

  std::string Encode() const;
  static Result<PathRequest> Decode(std::string_view payload);
  bool operator==(const PathRequest&) const = default;
};

// FILE_WRITE flags (u8). Decode rejects other bits.
inline constexpr std::uint8_t kFileWriteParents = 1;  // mkdir -p the parent directories
inline constexpr std::uint8_t kFileWriteKnownFlags = kFileWriteParents;

// FILE_WRITE (host -> agent); DATA* and END follow on the same stream.
struct FileWrite {
  std::string path;
  std::uint32_t mode = 0644;
  std::uint8_t flags = 0;  // kFileWrite* bits

  std::string Encode() const;
  static Result<FileWrite> Decode(std::string_view payload);
  bool operator==(const FileWrite&) const = default;
};

// MKDIR (host -> agent).
struct Mkdir {
  std::string path;
  std::uint32_t mode = 0755;
  bool parents = false;

  std::string Encode() const;
  static Result<Mkdir> Decode(std::string_view payload);
  bool operator==(const Mkdir&) const = default;
};

// REMOVE (host -> agent).
struct Remove {
  std::string path;
  bool recursive = false;

  std::string Encode() const;
  static Result<Remove> Decode(std::string_view payload);
  bool operator==(const Remove&) const = default;
};

// `entry` kind (u8). Decode rejects other values.
enum class EntryKind : std::uint8_t { kFile = 0, kDir = 1, kSymlink = 2, kOther = 3 };
// "file", "dir", "symlink" or "other": how agvisord's API and the Python package name a kind.
std::string_view EntryKindName(EntryKind kind);

// One `entry` of STAT_RESULT / LIST_RESULT. Not a frame payload by itself.
struct Entry {
  std::string name;
  EntryKind kind = EntryKind::kFile;
  std::uint32_t mode = 0;  // permission bits (and the rest of st_mode, as the agent sees it)
  std::uint64_t size = 0;
  std::int64_t mtime_unix_ms = 0;
  std::string link_target;  // symlinks only; "" otherwise

  // Smallest encoding (two empty strings): bounds a LIST_RESULT count.
  static constexpr std::size_t kMinEncodedSize = 4 + 1 + 4 + 8 + 8 + 4;
  void AppendTo(Writer& w) const;
  static Result<Entry> ReadFrom(Reader& r);
  bool operator==(const Entry&) const = default;
};

// STAT_RESULT (agent -> host).
struct StatResult {
  Entry entry;

  std::string Encode() const;
  static Result<StatResult> Decode(std::string_view payload);
  bool operator==(const StatResult&) const = default;
};

// LIST_RESULT (agent -> host). A directory whose listing does not fit in one frame (about 20k
// short names) is the agent's to report (ERROR kResourceExhausted): check FitsInFrame.
struct ListResult {
  std::vector<Entry> entries;

  std::string Encode() const;
  static Result<ListResult> Decode(std::string_view payload);
  bool operator==(const ListResult&) const = default;
};

// PORT_OPEN (host -> agent): a TCP port on the sandbox's 127.0.0.1.
struct PortOpen {
  std::uint16_t port = 0;

  std::string Encode() const;
  static Result<PortOpen> Decode(std::string_view payload);
  bool operator==(const PortOpen&) const = default;
};

// One item of PROC_LIST_RESULT.
struct ProcInfo {
  std::uint32_t pid = 0;
  std::string argv0;
  bool running = false;
  std::int32_t exit_code = 0;  // meaningful once !running
  // Version 6: started with kExecKeepAwake. Absent (false) in versions 1-5.
  bool keep_awake = false;

  static constexpr std::size_t kMinEncodedSize = 4 + 4 + 1 + 4;
  void AppendTo(Writer& w, std::uint16_t version) const;
  static Result<ProcInfo> ReadFrom(Reader& r, std::uint16_t version);
  bool operator==(const ProcInfo&) const = default;
};

// PROC_LIST_RESULT (agent -> host). PROC_LIST itself has an empty payload.
struct ProcListResult {
  std::vector<ProcInfo> procs;

  // The layout of a session of `version`: each item's keep_awake from version 6 on.
  std::string Encode(std::uint16_t version = kProtocolVersion) const;
  static Result<ProcListResult> Decode(std::string_view payload,
                                       std::uint16_t version = kProtocolVersion);
  bool operator==(const ProcListResult&) const = default;
};

// PROC_ATTACH (host -> agent).
struct ProcAttach {
  std::uint32_t pid = 0;

  std::string Encode() const;
  static Result<ProcAttach> Decode(std::string_view payload);
  bool operator==(const ProcAttach&) const = default;
};

// PROC_SIGNAL (host -> agent, opens a stream; answered by OK, or ERROR kNotFound): a signal to a
// background process's group without attaching to it, whoever is attached. Version 2.
struct ProcSignal {
  std::uint32_t pid = 0;
  std::uint8_t signal = 0;

  std::string Encode() const;
  static Result<ProcSignal> Decode(std::string_view payload);
  bool operator==(const ProcSignal&) const = default;
};

// SET_DEADLINES (host -> agent, opens a stream; answered by OK): replaces the sandbox's lifetime
// and idle-ttl (docs/protocol.md). The lifetime counts from the moment the agent receives it and
// the idle clock restarts then; 0 = none. A warm pool starts members with a safety lifetime and
// gives each the caller's limits when it is handed out.
struct SetDeadlines {
  std::uint64_t lifetime_ms = 0;
  std::uint64_t idle_ttl_ms = 0;

  std::string Encode() const;
  static Result<SetDeadlines> Decode(std::string_view payload);
  bool operator==(const SetDeadlines&) const = default;
};

// IDLE_STATE (agent -> host, the answer to IDLE_QUERY, which has no payload; version 5): how long
// the sandbox has been idle, as the agent's activity clock counts it (docs/agent.md, "Activity"),
// for a host that freezes idle sandboxes (idle_action pause, docs/lifecycle.md). Asking is not
// activity. The host treats both figures as the sandbox's claim: a hostile agent can only get
// itself paused early or kept awake, as its own processes could.
struct IdleState {
  std::uint32_t holds = 0;    // operations in flight (0: idle)
  std::uint64_t idle_ms = 0;  // 0 while holds > 0

  std::string Encode() const;
  // Strict: idle_ms is 0 when holds > 0.
  static Result<IdleState> Decode(std::string_view payload);
  bool operator==(const IdleState&) const = default;
};

// WATCH flags (u8). Decode rejects other bits.
inline constexpr std::uint8_t kWatchRecursive = 1;  // every directory below the root, new ones too
inline constexpr std::uint8_t kWatchKnownFlags = kWatchRecursive;

// WATCH (host -> agent, opens a stream; version 4): inotify on the directory `path` (absolute).
// The agent answers OK once the watch is in place (or ERROR: kNotFound, kInvalidArgument for a
// path that is not a directory, kResourceExhausted for more directories than it watches), then
// sends WATCH_EVENTS as they happen, within the stream's window, until the host sends CLOSE or
// the root goes away (END). docs/protocol.md, "Watch".
struct WatchRequest {
  std::string path;
  std::uint8_t flags = 0;  // kWatch* bits

  std::string Encode() const;
  static Result<WatchRequest> Decode(std::string_view payload);
  bool operator==(const WatchRequest&) const = default;
};

// What happened to one entry (u8). Decode rejects other values.
enum class WatchEventKind : std::uint8_t {
  kCreate = 1,
  kModify = 2,
  kDelete = 3,
  kMove = 4,      // `old_path` -> `path`, both inside the watch (inotify paired them by cookie)
  kOverflow = 5,  // events were lost (a slow consumer, or the kernel's queue): rescan; no path
};
// "create", "modify", "delete", "move", "overflow": how the CLI, agvisord and Python name them.
std::string_view WatchEventKindName(WatchEventKind kind);

// Longest path an event carries (bytes): the kernel's PATH_MAX. The agent reports an entry with a
// longer relative path as an overflow instead.
inline constexpr std::size_t kMaxWatchPath = 4096;

// kInvalidArgument "<what>: ..." unless `path` is a path an event may carry: relative to the
// watched root, 1..kMaxWatchPath bytes, no NUL, no empty, "." or ".." component, no leading or
// trailing '/'. Shared by the decoder and anyone re-checking a path (agvisord's codec).
Result<void> CheckWatchPath(std::string_view path, std::string_view what);

// One event of WATCH_EVENTS. Not a frame payload by itself.
struct WatchEvent {
  WatchEventKind kind = WatchEventKind::kCreate;
  bool is_dir = false;
  std::string path;      // relative to the watched root; "" for kOverflow only
  std::string old_path;  // kMove only (else "")

  // kind, flags, two empty strings: bounds a WATCH_EVENTS count.
  static constexpr std::size_t kMinEncodedSize = 1 + 1 + 4 + 4;
  void AppendTo(Writer& w) const;
  // Strict: the kind is known, flags has only bit 0 (is_dir), the paths pass CheckWatchPath
  // where the kind has them and are empty where it has not.
  static Result<WatchEvent> ReadFrom(Reader& r);
  // Bytes AppendTo writes.
  std::size_t EncodedSize() const { return kMinEncodedSize + path.size() + old_path.size(); }
  bool operator==(const WatchEvent&) const = default;
};

// WATCH_EVENTS (agent -> host, version 4): one or more events, oldest first. Its whole payload
// counts against the stream's window (as DATA's does), so a consumer that stops reading stops
// the agent, whose bounded queue then ends in one kOverflow event.
struct WatchEvents {
  std::vector<WatchEvent> events;  // at least one

  std::string Encode() const;
  static Result<WatchEvents> Decode(std::string_view payload);
  bool operator==(const WatchEvents&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Which payload each frame type carries: the one table CheckPayload and the fuzzer (and any other
// code that must treat every type) dispatch through, so that none of them can miss a type.

// Tags for the types without a payload struct.
struct RawPayload {};    // STDIN, DATA: any bytes
struct EmptyPayload {};  // CLOSE, STDIN_EOF, END, OK, PROC_LIST, DETACH, IDLE_QUERY

// fn(std::type_identity<P>{}) with P the payload struct of `type` (or RawPayload /
// EmptyPayload); nullopt for a byte that is no known type.
template <typename Fn>
auto VisitPayloadType(Type type, Fn&& fn)
    -> std::optional<decltype(fn(std::type_identity<Hello>{}))> {
  switch (type) {
    case Type::kHello:
      return fn(std::type_identity<Hello>{});
    case Type::kWelcome:
      return fn(std::type_identity<Welcome>{});
    case Type::kPing:
      return fn(std::type_identity<Ping>{});
    case Type::kPong:
      return fn(std::type_identity<Pong>{});
    case Type::kWindow:
      return fn(std::type_identity<Window>{});
    case Type::kError:
      return fn(std::type_identity<ErrorPayload>{});
    case Type::kExec:
      return fn(std::type_identity<ExecRequest>{});
    case Type::kStarted:
      return fn(std::type_identity<Started>{});
    case Type::kOutput:
      return fn(std::type_identity<Output>{});
    case Type::kExit:
      return fn(std::type_identity<Exit>{});
    case Type::kSignal:
      return fn(std::type_identity<Signal>{});
    case Type::kResize:
      return fn(std::type_identity<Resize>{});
    case Type::kFileRead:
    case Type::kStat:
    case Type::kList:
    case Type::kTarRead:
    case Type::kTarWrite:
      return fn(std::type_identity<PathRequest>{});
    case Type::kFileWrite:
      return fn(std::type_identity<FileWrite>{});
    case Type::kMkdir:
      return fn(std::type_identity<Mkdir>{});
    case Type::kRemove:
      return fn(std::type_identity<Remove>{});
    case Type::kStatResult:
      return fn(std::type_identity<StatResult>{});
    case Type::kListResult:
      return fn(std::type_identity<ListResult>{});
    case Type::kPortOpen:
      return fn(std::type_identity<PortOpen>{});
    case Type::kProcListResult:
      return fn(std::type_identity<ProcListResult>{});
    case Type::kProcAttach:
      return fn(std::type_identity<ProcAttach>{});
    case Type::kProcSignal:
      return fn(std::type_identity<ProcSignal>{});
    case Type::kSetDeadlines:
      return fn(std::type_identity<SetDeadlines>{});
    case Type::kIdleState:
      return fn(std::type_identity<IdleState>{});
    case Type::kWatch:
      return fn(std::type_identity<WatchRequest>{});
    case Type::kWatchEvents:
      return fn(std::type_identity<WatchEvents>{});
    case Type::kStdin:
    case Type::kData:
      return fn(std::type_identity<RawPayload>{});
    case Type::kClose:
    case Type::kStdinEof:
    case Type::kEnd:
    case Type::kOk:
    case Type::kProcList:
    case Type::kDetach:
    case Type::kIdleQuery:
      return fn(std::type_identity<EmptyPayload>{});
  }
  return std::nullopt;
}

}  // namespace agvisor::proto
