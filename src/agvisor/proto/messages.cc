#include "agvisor/proto/messages.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

namespace agvisor::proto {
namespace {

void StoreU32(char* out, std::uint32_t v) {
  for (int i = 3; i >= 0; --i) {
    out[i] = static_cast<char>(static_cast<std::uint8_t>(v));
    v >>= 8;
  }
}

std::uint32_t LoadU32(const char* in) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<std::uint8_t>(in[i]);
  return v;
}

// A frame the peer must reject would end the session far from the cause: stop here instead.
void CheckFits(std::size_t payload_size) {
  if (!FitsInFrame(payload_size)) {
    std::fprintf(stderr, "agvisor::proto: frame payload of %zu bytes exceeds %zu (caller bug)\n",
                 payload_size, kMaxPayload);
    std::abort();
  }
}

std::string Hex2(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v & 0xFFu);
  return buf;
}

template <typename T>
Result<void> Check(const Result<T>& decoded) {
  if (!decoded.ok()) return decoded.error();
  return Ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Types and error codes

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kHello:
      return "HELLO";
    case Type::kWelcome:
      return "WELCOME";
    case Type::kPing:
      return "PING";
    case Type::kPong:
      return "PONG";
    case Type::kWindow:
      return "WINDOW";
    case Type::kError:
      return "ERROR";
    case Type::kClose:
      return "CLOSE";
    case Type::kExec:
      return "EXEC";
    case Type::kStarted:
      return "STARTED";
    case Type::kStdin:
      return "STDIN";
    case Type::kStdinEof:
      return "STDIN_EOF";
    case Type::kOutput:
      return "OUTPUT";
    case Type::kExit:
      return "EXIT";
    case Type::kSignal:
      return "SIGNAL";
    case Type::kResize:
      return "RESIZE";
    case Type::kFileRead:
      return "FILE_READ";
    case Type::kFileWrite:
      return "FILE_WRITE";
    case Type::kStat:
      return "STAT";
    case Type::kList:
      return "LIST";
    case Type::kMkdir:
      return "MKDIR";
    case Type::kRemove:
      return "REMOVE";
    case Type::kTarRead:
      return "TAR_READ";
    case Type::kTarWrite:
      return "TAR_WRITE";
    case Type::kData:
      return "DATA";
    case Type::kEnd:
      return "END";
    case Type::kOk:
      return "OK";
    case Type::kStatResult:
      return "STAT_RESULT";
    case Type::kListResult:
      return "LIST_RESULT";
    case Type::kPortOpen:
      return "PORT_OPEN";
    case Type::kProcList:
      return "PROC_LIST";
    case Type::kProcListResult:
      return "PROC_LIST_RESULT";
    case Type::kProcAttach:
      return "PROC_ATTACH";
    case Type::kProcSignal:
      return "PROC_SIGNAL";
    case Type::kDetach:
      return "DETACH";
    case Type::kSetDeadlines:
      return "SET_DEADLINES";
    case Type::kIdleQuery:
      return "IDLE_QUERY";
    case Type::kIdleState:
      return "IDLE_STATE";
    case Type::kWatch:
      return "WATCH";
    case Type::kWatchEvents:
      return "WATCH_EVENTS";
  }
  return "UNKNOWN";
}

bool IsKnownType(std::uint8_t raw) { return TypeName(static_cast<Type>(raw)) != "UNKNOWN"; }

std::string_view WireErrorName(WireError code) {
  switch (code) {
    case WireError::kInvalidArgument:
      return "kInvalidArgument";
    case WireError::kNotFound:
      return "kNotFound";
    case WireError::kConflict:
      return "kConflict";
    case WireError::kUnavailable:
      return "kUnavailable";
    case WireError::kTimeout:
      return "kTimeout";
    case WireError::kPermissionDenied:
      return "kPermissionDenied";
    case WireError::kResourceExhausted:
      return "kResourceExhausted";
    case WireError::kUnsupported:
      return "kUnsupported";
    case WireError::kSandboxDied:
      return "kSandboxDied";
    case WireError::kInternal:
      return "kInternal";
    case WireError::kProtocol:
      return "kProtocol";
    case WireError::kVersion:
      return "kVersion";
  }
  return "kUnknown";
}

bool IsKnownWireError(std::uint16_t raw) {
  return WireErrorName(static_cast<WireError>(raw)) != "kUnknown";
}

WireError ToWireError(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return WireError::kInvalidArgument;
    case ErrorCode::kNotFound:
      return WireError::kNotFound;
    case ErrorCode::kConflict:
      return WireError::kConflict;
    case ErrorCode::kUnavailable:
      return WireError::kUnavailable;
    case ErrorCode::kTimeout:
      return WireError::kTimeout;
    case ErrorCode::kPermissionDenied:
      return WireError::kPermissionDenied;
    case ErrorCode::kResourceExhausted:
      return WireError::kResourceExhausted;
    case ErrorCode::kUnsupported:
      return WireError::kUnsupported;
    case ErrorCode::kSandboxDied:
      return WireError::kSandboxDied;
    case ErrorCode::kInternal:
      return WireError::kInternal;
  }
  return WireError::kInternal;
}

ErrorCode FromWireError(WireError code) {
  switch (code) {
    case WireError::kInvalidArgument:
      return ErrorCode::kInvalidArgument;
    case WireError::kNotFound:
      return ErrorCode::kNotFound;
    case WireError::kConflict:
      return ErrorCode::kConflict;
    case WireError::kUnavailable:
      return ErrorCode::kUnavailable;
    case WireError::kTimeout:
      return ErrorCode::kTimeout;
    case WireError::kPermissionDenied:
      return ErrorCode::kPermissionDenied;
    case WireError::kResourceExhausted:
      return ErrorCode::kResourceExhausted;
    case WireError::kUnsupported:
      return ErrorCode::kUnsupported;
    case WireError::kSandboxDied:
      return ErrorCode::kSandboxDied;
    case WireError::kInternal:
      return ErrorCode::kInternal;
    case WireError::kProtocol:
      return ErrorCode::kInternal;
    case WireError::kVersion:
      return ErrorCode::kUnsupported;
  }
  return ErrorCode::kInternal;
}

// ---------------------------------------------------------------------------------------------
// Frames

void EncodeHeader(std::span<char, kFrameHeaderSize> out, Type type, std::uint32_t stream,
                  std::size_t payload_size) {
  CheckFits(payload_size);
  StoreU32(out.data(), static_cast<std::uint32_t>(kMinFrameLength + payload_size));
  out[4] = static_cast<char>(type);
  StoreU32(out.data() + 5, stream);
}

void EncodeOutputHeader(std::span<char, kOutputHeaderSize> out, std::uint32_t stream,
                        std::uint8_t fd, std::size_t data_size) {
  EncodeHeader(out.first<kFrameHeaderSize>(), Type::kOutput, stream, data_size + 1);
  out[kFrameHeaderSize] = static_cast<char>(fd);
}

void AppendFrame(std::string& out, Type type, std::uint32_t stream, std::string_view payload) {
  char header[kFrameHeaderSize];
  EncodeHeader(header, type, stream, payload.size());
  out.reserve(out.size() + kFrameHeaderSize + payload.size());
  out.append(header, kFrameHeaderSize);
  out.append(payload);
}

Result<void> TryAppendFrame(std::string& out, Type type, std::uint32_t stream,
                            std::string_view payload) {
  if (!FitsInFrame(payload.size())) {
    return Error::InvalidArgument(
        std::string(TypeName(type)) + ": payload of " + std::to_string(payload.size()) +
        " bytes exceeds the frame limit of " + std::to_string(kMaxPayload));
  }
  AppendFrame(out, type, stream, payload);
  return Ok();
}

Result<void> FrameDecoder::Fail(std::string message) {
  failed_ = true;
  error_ = std::move(message);
  return Error::InvalidArgument(error_);
}

Result<void> FrameDecoder::Feed(std::string_view bytes, const OnFrame& on_frame) {
  if (failed_) return Error::InvalidArgument(error_);
  auto emit = [&] {
    Frame frame{type_, stream_, std::move(payload_)};
    payload_ = std::string();
    header_fill_ = 0;
    payload_need_ = 0;
    on_frame(std::move(frame));
  };
  while (!bytes.empty()) {
    if (header_fill_ < kFrameHeaderSize) {
      const std::size_t before = header_fill_;
      const std::size_t n = std::min(kFrameHeaderSize - header_fill_, bytes.size());
      std::memcpy(header_ + header_fill_, bytes.data(), n);
      header_fill_ += n;
      bytes.remove_prefix(n);
      // Check each field as soon as it is complete, so the failure point does not depend on how
      // the stream was split.
      if (before < 4 && header_fill_ >= 4) {
        const std::uint32_t length = LoadU32(header_);
        if (length < kMinFrameLength || length > kMaxFrameLength) {
          return Fail("frame length " + std::to_string(length) + " out of range [" +
                      std::to_string(kMinFrameLength) + ", " + std::to_string(kMaxFrameLength) +
                      "]");
        }
      }
      if (before < 5 && header_fill_ >= 5) {
        const auto raw = static_cast<std::uint8_t>(header_[4]);
        if (!IsKnownType(raw)) return Fail("unknown frame type " + Hex2(raw));
        type_ = static_cast<Type>(raw);
      }
      if (header_fill_ < kFrameHeaderSize) break;  // `bytes` is used up
      stream_ = LoadU32(header_ + 5);
      payload_need_ = LoadU32(header_) - kMinFrameLength;
      if (bytes.size() >= payload_need_) {  // the whole payload is here: one copy
        payload_.assign(bytes.data(), payload_need_);
        bytes.remove_prefix(payload_need_);
        emit();
        continue;
      }
      payload_.clear();
      payload_.reserve(payload_need_);  // <= kMaxPayload, checked above
    }
    const std::size_t n = std::min(payload_need_, bytes.size());
    payload_.append(bytes.data(), n);
    payload_need_ -= n;
    bytes.remove_prefix(n);
    if (payload_need_ == 0) emit();
  }
  return Ok();
}

Result<void> ExpectEmpty(Type type, std::string_view payload) {
  if (!payload.empty()) {
    return Error::InvalidArgument(std::string(TypeName(type)) +
                                  ": expected an empty payload, got " +
                                  std::to_string(payload.size()) + " bytes");
  }
  return Ok();
}

Result<void> CheckPayload(Type type, std::string_view p) {
  auto checked = VisitPayloadType(type, [&]<typename P>(std::type_identity<P>) -> Result<void> {
    if constexpr (std::is_same_v<P, RawPayload>) {
      return Ok();
    } else if constexpr (std::is_same_v<P, EmptyPayload>) {
      return ExpectEmpty(type, p);
    } else if constexpr (std::is_same_v<P, Output>) {
      return Check(Output::DecodeOutputView(p));  // the same rules, without copying the bytes
    } else {
      return Check(P::Decode(p));
    }
  });
  if (!checked) {
    return Error::InvalidArgument("unknown frame type " + Hex2(static_cast<unsigned>(type)));
  }
  return *std::move(checked);
}

// ---------------------------------------------------------------------------------------------
// Payloads

std::string Hello::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendU16(version);
  w.AppendU32(initial_window);
  return out;
}

Result<Hello> Hello::Decode(std::string_view payload) {
  Reader r(payload, "HELLO");
  Hello h;
  h.version = AGVISOR_TRY(r.ReadU16("version"));
  h.initial_window = AGVISOR_TRY(r.ReadU32("initial_window"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return h;
}

std::string Welcome::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendU16(version);
  w.AppendStr(agent_version);
  w.AppendU64(boot_unix_ms);
  return out;
}

Result<Welcome> Welcome::Decode(std::string_view payload) {
  Reader r(payload, "WELCOME");
  Welcome m;
  m.version = AGVISOR_TRY(r.ReadU16("version"));
  m.agent_version = AGVISOR_TRY(r.ReadStr("agent_version"));
  m.boot_unix_ms = AGVISOR_TRY(r.ReadU64("boot_unix_ms"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string Window::Encode() const {
  std::string out;
  Writer(out).AppendU32(bytes);
  return out;
}

Result<Window> Window::Decode(std::string_view payload) {
  Reader r(payload, "WINDOW");
  Window m;
  m.bytes = AGVISOR_TRY(r.ReadU32("bytes"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string ErrorPayload::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendU16(static_cast<std::uint16_t>(code));
  w.AppendStr(message);
  return out;
}

Result<ErrorPayload> ErrorPayload::Decode(std::string_view payload) {
  Reader r(payload, "ERROR");
  ErrorPayload m;
  const std::uint16_t raw = AGVISOR_TRY(r.ReadU16("code"));
  if (!IsKnownWireError(raw)) return r.Invalid("code", "unknown code " + std::to_string(raw));
  m.code = static_cast<WireError>(raw);
  m.message = AGVISOR_TRY(r.ReadStr("message"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

ErrorPayload ErrorPayload::FromError(const Error& error) {
  ErrorPayload m;
  m.code = ToWireError(error.code());
  m.message = error.message().substr(0, kMaxErrorMessage);
  return m;
}

Error ErrorPayload::ToError() const { return Error(FromWireError(code), message); }

std::string Ping::Encode() const {
  std::string out;
  Writer(out).AppendU64(token);
  return out;
}

Result<Ping> Ping::Decode(std::string_view payload) {
  Reader r(payload, "PING");
  Ping m;
  m.token = AGVISOR_TRY(r.ReadU64("token"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string Pong::Encode() const {
  std::string out;
  Writer(out).AppendU64(token);
  return out;
}

Result<Pong> Pong::Decode(std::string_view payload) {
  Reader r(payload, "PONG");
  Pong m;
  m.token = AGVISOR_TRY(r.ReadU64("token"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

namespace {

void AppendStrList(Writer& w, const std::vector<std::string>& list) {
  w.AppendU32(static_cast<std::uint32_t>(list.size()));
  for (const std::string& s : list) w.AppendStr(s);
}

Result<std::vector<std::string>> ReadStrList(Reader& r, std::string_view field) {
  const std::uint32_t count = AGVISOR_TRY(r.ReadCount(field, 4));
  std::vector<std::string> list;
  list.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) list.push_back(AGVISOR_TRY(r.ReadStr(field)));
  return list;
}

// A u32 count, then each record's AppendTo (`args`: a layout's version, for records that have
// one).
template <typename T, typename... Args>
void AppendRecords(Writer& w, const std::vector<T>& records, Args... args) {
  w.AppendU32(static_cast<std::uint32_t>(records.size()));
  for (const T& record : records) record.AppendTo(w, args...);
}

// What AppendRecords wrote; `field` names the list in messages. The count is checked against
// the bytes left (T::kMinEncodedSize each) before anything is allocated.
template <typename T, typename... Args>
Result<std::vector<T>> ReadRecords(Reader& r, std::string_view field, Args... args) {
  const std::uint32_t count = AGVISOR_TRY(r.ReadCount(field, T::kMinEncodedSize));
  std::vector<T> records;
  records.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) records.push_back(AGVISOR_TRY(T::ReadFrom(r, args...)));
  return records;
}

}  // namespace

std::string ExecRequest::Encode() const {
  std::string out;
  Writer w(out);
  AppendStrList(w, argv);
  AppendStrList(w, env);
  w.AppendStr(cwd);
  w.AppendStr(user);
  w.AppendU64(timeout_ms);
  w.AppendU8(flags);
  w.AppendU16(rows);
  w.AppendU16(cols);
  return out;
}

Result<ExecRequest> ExecRequest::Decode(std::string_view payload) {
  Reader r(payload, "EXEC");
  ExecRequest m;
  m.argv = AGVISOR_TRY(ReadStrList(r, "argv"));
  m.env = AGVISOR_TRY(ReadStrList(r, "env"));
  m.cwd = AGVISOR_TRY(r.ReadStr("cwd"));
  m.user = AGVISOR_TRY(r.ReadStr("user"));
  m.timeout_ms = AGVISOR_TRY(r.ReadU64("timeout_ms"));
  m.flags = AGVISOR_TRY(r.ReadU8("flags"));
  if ((m.flags & ~kExecKnownFlags) != 0) {
    return r.Invalid("flags", "unknown bits " + Hex2(m.flags & ~kExecKnownFlags));
  }
  m.rows = AGVISOR_TRY(r.ReadU16("rows"));
  m.cols = AGVISOR_TRY(r.ReadU16("cols"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string Started::Encode() const {
  std::string out;
  Writer(out).AppendU32(pid);
  return out;
}

Result<Started> Started::Decode(std::string_view payload) {
  Reader r(payload, "STARTED");
  Started m;
  m.pid = AGVISOR_TRY(r.ReadU32("pid"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string Output::Encode() const {
  std::string out;
  out.reserve(1 + bytes.size());
  Writer w(out);
  w.AppendU8(fd);
  w.AppendBytes(bytes);
  return out;
}

Result<std::pair<std::uint8_t, std::string_view>> Output::DecodeOutputView(
    std::string_view payload) {
  Reader r(payload, "OUTPUT");
  const std::uint8_t fd = AGVISOR_TRY(r.ReadU8("fd"));
  if (fd != 1 && fd != 2) return r.Invalid("fd", "must be 1 or 2, got " + std::to_string(fd));
  return std::pair<std::uint8_t, std::string_view>(fd, r.ReadRest());
}

Result<Output> Output::Decode(std::string_view payload) {
  auto [fd, bytes] = AGVISOR_TRY(DecodeOutputView(payload));
  Output m;
  m.fd = fd;
  m.bytes.assign(bytes);
  return m;
}

std::string Exit::Encode(std::uint16_t version) const {
  std::string out;
  Writer w(out);
  w.AppendI32(exit_code);
  w.AppendU8(signal);
  w.AppendBool(timed_out);
  if (version >= 3) w.AppendBool(prestarted);
  return out;
}

Result<Exit> Exit::Decode(std::string_view payload) {
  Reader r(payload, "EXIT");
  Exit m;
  m.exit_code = AGVISOR_TRY(r.ReadI32("exit_code"));
  m.signal = AGVISOR_TRY(r.ReadU8("signal"));
  m.timed_out = AGVISOR_TRY(r.ReadBool("timed_out"));
  if (!r.AtEnd()) m.prestarted = AGVISOR_TRY(r.ReadBool("prestarted"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string Signal::Encode() const {
  std::string out;
  Writer(out).AppendU8(signal);
  return out;
}

Result<Signal> Signal::Decode(std::string_view payload) {
  Reader r(payload, "SIGNAL");
  Signal m;
  m.signal = AGVISOR_TRY(r.ReadU8("signal"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string Resize::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendU16(rows);
  w.AppendU16(cols);
  return out;
}

Result<Resize> Resize::Decode(std::string_view payload) {
  Reader r(payload, "RESIZE");
  Resize m;
  m.rows = AGVISOR_TRY(r.ReadU16("rows"));
  m.cols = AGVISOR_TRY(r.ReadU16("cols"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string PathRequest::Encode() const {
  std::string out;
  Writer(out).AppendStr(path);
  return out;
}

Result<PathRequest> PathRequest::Decode(std::string_view payload) {
  Reader r(payload, "PATH_REQUEST");
  PathRequest m;
  m.path = AGVISOR_TRY(r.ReadStr("path"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string FileWrite::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendStr(path);
  w.AppendU32(mode);
  w.AppendU8(flags);
  return out;
}

Result<FileWrite> FileWrite::Decode(std::string_view payload) {
  Reader r(payload, "FILE_WRITE");
  FileWrite m;
  m.path = AGVISOR_TRY(r.ReadStr("path"));
  m.mode = AGVISOR_TRY(r.ReadU32("mode"));
  m.flags = AGVISOR_TRY(r.ReadU8("flags"));
  if ((m.flags & ~kFileWriteKnownFlags) != 0) {
    return r.Invalid("flags", "unknown bits " + Hex2(m.flags & ~kFileWriteKnownFlags));
  }
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string Mkdir::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendStr(path);
  w.AppendU32(mode);
  w.AppendBool(parents);
  return out;
}

Result<Mkdir> Mkdir::Decode(std::string_view payload) {
  Reader r(payload, "MKDIR");
  Mkdir m;
  m.path = AGVISOR_TRY(r.ReadStr("path"));
  m.mode = AGVISOR_TRY(r.ReadU32("mode"));
  m.parents = AGVISOR_TRY(r.ReadBool("parents"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string Remove::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendStr(path);
  w.AppendBool(recursive);
  return out;
}

Result<Remove> Remove::Decode(std::string_view payload) {
  Reader r(payload, "REMOVE");
  Remove m;
  m.path = AGVISOR_TRY(r.ReadStr("path"));
  m.recursive = AGVISOR_TRY(r.ReadBool("recursive"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string_view EntryKindName(EntryKind kind) {
  // Indexed by the wire value (0..3, as Entry::ReadFrom checks).
  static constexpr std::string_view kNames[] = {"file", "dir", "symlink", "other"};
  const auto i = static_cast<std::size_t>(kind);
  return i < std::size(kNames) ? kNames[i] : "other";
}

void Entry::AppendTo(Writer& w) const {
  w.AppendStr(name);
  w.AppendU8(static_cast<std::uint8_t>(kind));
  w.AppendU32(mode);
  w.AppendU64(size);
  w.AppendI64(mtime_unix_ms);
  w.AppendStr(link_target);
}

Result<Entry> Entry::ReadFrom(Reader& r) {
  Entry e;
  e.name = AGVISOR_TRY(r.ReadStr("entry.name"));
  const std::uint8_t kind = AGVISOR_TRY(r.ReadU8("entry.kind"));
  if (kind > static_cast<std::uint8_t>(EntryKind::kOther)) {
    return r.Invalid("entry.kind", "must be 0..3, got " + std::to_string(kind));
  }
  e.kind = static_cast<EntryKind>(kind);
  e.mode = AGVISOR_TRY(r.ReadU32("entry.mode"));
  e.size = AGVISOR_TRY(r.ReadU64("entry.size"));
  e.mtime_unix_ms = AGVISOR_TRY(r.ReadI64("entry.mtime_unix_ms"));
  e.link_target = AGVISOR_TRY(r.ReadStr("entry.link_target"));
  return e;
}

std::string StatResult::Encode() const {
  std::string out;
  Writer w(out);
  entry.AppendTo(w);
  return out;
}

Result<StatResult> StatResult::Decode(std::string_view payload) {
  Reader r(payload, "STAT_RESULT");
  StatResult m;
  m.entry = AGVISOR_TRY(Entry::ReadFrom(r));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string ListResult::Encode() const {
  std::string out;
  Writer w(out);
  AppendRecords(w, entries);
  return out;
}

Result<ListResult> ListResult::Decode(std::string_view payload) {
  Reader r(payload, "LIST_RESULT");
  ListResult m;
  m.entries = AGVISOR_TRY(ReadRecords<Entry>(r, "entries"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string PortOpen::Encode() const {
  std::string out;
  Writer(out).AppendU16(port);
  return out;
}

Result<PortOpen> PortOpen::Decode(std::string_view payload) {
  Reader r(payload, "PORT_OPEN");
  PortOpen m;
  m.port = AGVISOR_TRY(r.ReadU16("port"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

void ProcInfo::AppendTo(Writer& w, std::uint16_t version) const {
  w.AppendU32(pid);
  w.AppendStr(argv0);
  w.AppendBool(running);
  w.AppendI32(exit_code);
  if (version >= 6) w.AppendBool(keep_awake);
}

Result<ProcInfo> ProcInfo::ReadFrom(Reader& r, std::uint16_t version) {
  ProcInfo p;
  p.pid = AGVISOR_TRY(r.ReadU32("proc.pid"));
  p.argv0 = AGVISOR_TRY(r.ReadStr("proc.argv0"));
  p.running = AGVISOR_TRY(r.ReadBool("proc.running"));
  p.exit_code = AGVISOR_TRY(r.ReadI32("proc.exit_code"));
  if (version >= 6) p.keep_awake = AGVISOR_TRY(r.ReadBool("proc.keep_awake"));
  return p;
}

std::string ProcListResult::Encode(std::uint16_t version) const {
  std::string out;
  Writer w(out);
  AppendRecords(w, procs, version);
  return out;
}

Result<ProcListResult> ProcListResult::Decode(std::string_view payload, std::uint16_t version) {
  Reader r(payload, "PROC_LIST_RESULT");
  ProcListResult m;
  m.procs = AGVISOR_TRY(ReadRecords<ProcInfo>(r, "procs", version));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string ProcAttach::Encode() const {
  std::string out;
  Writer(out).AppendU32(pid);
  return out;
}

Result<ProcAttach> ProcAttach::Decode(std::string_view payload) {
  Reader r(payload, "PROC_ATTACH");
  ProcAttach m;
  m.pid = AGVISOR_TRY(r.ReadU32("pid"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string ProcSignal::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendU32(pid);
  w.AppendU8(signal);
  return out;
}

Result<ProcSignal> ProcSignal::Decode(std::string_view payload) {
  Reader r(payload, "PROC_SIGNAL");
  ProcSignal m;
  m.pid = AGVISOR_TRY(r.ReadU32("pid"));
  m.signal = AGVISOR_TRY(r.ReadU8("signal"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string SetDeadlines::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendU64(lifetime_ms);
  w.AppendU64(idle_ttl_ms);
  return out;
}

Result<SetDeadlines> SetDeadlines::Decode(std::string_view payload) {
  Reader r(payload, "SET_DEADLINES");
  SetDeadlines m;
  m.lifetime_ms = AGVISOR_TRY(r.ReadU64("lifetime_ms"));
  m.idle_ttl_ms = AGVISOR_TRY(r.ReadU64("idle_ttl_ms"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string IdleState::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendU32(holds);
  w.AppendU64(idle_ms);
  return out;
}

Result<IdleState> IdleState::Decode(std::string_view payload) {
  Reader r(payload, "IDLE_STATE");
  IdleState m;
  m.holds = AGVISOR_TRY(r.ReadU32("holds"));
  m.idle_ms = AGVISOR_TRY(r.ReadU64("idle_ms"));
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  if (m.holds > 0 && m.idle_ms != 0) {
    return Error::InvalidArgument("IDLE_STATE.idle_ms: must be 0 while holds is " +
                                  std::to_string(m.holds));
  }
  return m;
}

std::string WatchRequest::Encode() const {
  std::string out;
  Writer w(out);
  w.AppendStr(path);
  w.AppendU8(flags);
  return out;
}

Result<WatchRequest> WatchRequest::Decode(std::string_view payload) {
  Reader r(payload, "WATCH");
  WatchRequest m;
  m.path = AGVISOR_TRY(r.ReadStr("path"));
  m.flags = AGVISOR_TRY(r.ReadU8("flags"));
  if ((m.flags & ~kWatchKnownFlags) != 0) {
    return r.Invalid("flags", "unknown bits " + Hex2(m.flags & ~kWatchKnownFlags));
  }
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

std::string_view WatchEventKindName(WatchEventKind kind) {
  switch (kind) {
    case WatchEventKind::kCreate:
      return "create";
    case WatchEventKind::kModify:
      return "modify";
    case WatchEventKind::kDelete:
      return "delete";
    case WatchEventKind::kMove:
      return "move";
    case WatchEventKind::kOverflow:
      return "overflow";
  }
  return "unknown";
}

namespace {

// What is wrong with `path` as an event's path, or "" (CheckWatchPath's rules).
std::string WatchPathProblem(std::string_view path) {
  if (path.empty()) return "empty path";
  if (path.size() > kMaxWatchPath) {
    return "path of " + std::to_string(path.size()) + " bytes exceeds " +
           std::to_string(kMaxWatchPath);
  }
  if (path.find('\0') != std::string_view::npos) return "path contains a NUL byte";
  if (path.front() == '/') return "path is absolute, expected one relative to the watched root";
  std::size_t start = 0;
  for (;;) {
    const std::size_t slash = path.find('/', start);
    const std::string_view part =
        path.substr(start, slash == std::string_view::npos ? path.npos : slash - start);
    if (part.empty() || part == "." || part == "..") {
      return "path has an empty, '.' or '..' component";
    }
    if (slash == std::string_view::npos) return "";
    start = slash + 1;
  }
}

}  // namespace

Result<void> CheckWatchPath(std::string_view path, std::string_view what) {
  std::string problem = WatchPathProblem(path);
  if (problem.empty()) return Ok();
  return Error::InvalidArgument(std::string(what) + ": " + problem);
}

void WatchEvent::AppendTo(Writer& w) const {
  w.AppendU8(static_cast<std::uint8_t>(kind));
  w.AppendU8(is_dir ? 1 : 0);
  w.AppendStr(path);
  w.AppendStr(old_path);
}

Result<WatchEvent> WatchEvent::ReadFrom(Reader& r) {
  WatchEvent e;
  const std::uint8_t kind = AGVISOR_TRY(r.ReadU8("event.kind"));
  if (kind < static_cast<std::uint8_t>(WatchEventKind::kCreate) ||
      kind > static_cast<std::uint8_t>(WatchEventKind::kOverflow)) {
    return r.Invalid("event.kind", "unknown value " + Hex2(kind));
  }
  e.kind = static_cast<WatchEventKind>(kind);
  const std::uint8_t flags = AGVISOR_TRY(r.ReadU8("event.flags"));
  if ((flags & ~1u) != 0) return r.Invalid("event.flags", "unknown bits " + Hex2(flags & ~1u));
  e.is_dir = (flags & 1u) != 0;
  // Views first: a path longer than the bound is refused before it is copied.
  std::string_view path = AGVISOR_TRY(r.ReadStrView("event.path"));
  std::string_view old_path = AGVISOR_TRY(r.ReadStrView("event.old_path"));
  if (e.kind == WatchEventKind::kOverflow) {
    if (!path.empty() || !old_path.empty() || e.is_dir) {
      return r.Invalid("event", "an overflow event carries no path and no is_dir");
    }
    return e;
  }
  if (std::string p = WatchPathProblem(path); !p.empty()) return r.Invalid("event.path", p);
  if (e.kind == WatchEventKind::kMove) {
    if (std::string p = WatchPathProblem(old_path); !p.empty()) {
      return r.Invalid("event.old_path", p);
    }
  } else if (!old_path.empty()) {
    return r.Invalid("event.old_path",
                     "set on a " + std::string(WatchEventKindName(e.kind)) + " event (moves only)");
  }
  e.path = std::string(path);
  e.old_path = std::string(old_path);
  return e;
}

std::string WatchEvents::Encode() const {
  std::string out;
  Writer w(out);
  AppendRecords(w, events);
  return out;
}

Result<WatchEvents> WatchEvents::Decode(std::string_view payload) {
  Reader r(payload, "WATCH_EVENTS");
  WatchEvents m;
  m.events = AGVISOR_TRY(ReadRecords<WatchEvent>(r, "events"));
  if (m.events.empty()) return r.Invalid("events", "empty list");
  AGVISOR_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

}  // namespace agvisor::proto
