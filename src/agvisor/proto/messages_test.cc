#include "agvisor/proto/messages.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <set>
#include <string>
#include <vector>

// The largest single allocation made while `g_track` is set: proves that a hostile list count
// is refused before anything is reserved. Replacing the global operator new is allowed by the
// standard ([replacement.functions]) and affects only this test binary.
namespace {
std::atomic<bool> g_track{false};
std::atomic<std::size_t> g_largest{0};
}  // namespace

// GCC's -Wmismatched-new-delete cannot see that operator delete below is the replaced one too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  if (g_track.load(std::memory_order_relaxed) && n > g_largest.load(std::memory_order_relaxed)) {
    g_largest.store(n, std::memory_order_relaxed);
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace agvisor::proto {
namespace {

using namespace std::string_literals;

// ---------------------------------------------------------------------------------------------
// Samples of every payload.

ExecRequest SampleExec() {
  ExecRequest e;
  e.argv = {"bash", "-lc", "echo hi; exit 3", ""};
  e.env = {"A=1", "PATH=/usr/bin"};
  e.cwd = "/work";
  e.user = "1000:1000";
  e.timeout_ms = 30'000;
  e.flags = kExecStdin | kExecPty | kExecBackground;
  e.rows = 24;
  e.cols = 80;
  return e;
}

Entry SampleEntry(std::string name, EntryKind kind) {
  Entry e;
  e.name = std::move(name);
  e.kind = kind;
  e.mode = 040755;
  e.size = 1ULL << 40;
  e.mtime_unix_ms = -1234;  // before 1970
  if (kind == EntryKind::kSymlink) e.link_target = "../target";
  return e;
}

// Encode -> Decode gives the same value, Decode -> Encode the same bytes, and every strict
// prefix and any trailing byte are refused.
template <typename T>
void ExpectStrictRoundTrip(const T& value) {
  const std::string bytes = value.Encode();
  auto decoded = T::Decode(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error().ToString();
  EXPECT_EQ(*decoded, value);
  EXPECT_EQ(decoded->Encode(), bytes);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto truncated = T::Decode(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(truncated.ok()) << "prefix of " << n << " bytes decoded";
    EXPECT_EQ(truncated.error().code(), ErrorCode::kInvalidArgument);
  }
  auto trailing = T::Decode(bytes + '\0');
  ASSERT_FALSE(trailing.ok());
  EXPECT_EQ(trailing.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(trailing.error().message().find("1 trailing bytes"), std::string::npos)
      << trailing.error().message();
}

TEST(PayloadTest, SessionRoundTrips) {
  ExpectStrictRoundTrip(Hello{});
  ExpectStrictRoundTrip(Hello{7, 0});
  ExpectStrictRoundTrip(Welcome{1, "agvisor-agent 0.1.0", 1'700'000'000'000ULL});
  ExpectStrictRoundTrip(Welcome{65535, "", 0});
  ExpectStrictRoundTrip(Window{0});
  ExpectStrictRoundTrip(Window{0xFFFFFFFF});
  ExpectStrictRoundTrip(ErrorPayload{WireError::kNotFound, "stat /x: no such file"});
  ExpectStrictRoundTrip(ErrorPayload{WireError::kVersion, ""});
  ExpectStrictRoundTrip(Ping{0x0102030405060708ULL});
  ExpectStrictRoundTrip(Pong{~0ULL});
}

TEST(PayloadTest, ExecRoundTrips) {
  ExpectStrictRoundTrip(SampleExec());
  ExpectStrictRoundTrip(ExecRequest{});
  ExpectStrictRoundTrip(Started{4294967295u});
  for (const Exit& e :
       {Exit{0, 0, false}, Exit{124, 0, true}, Exit{137, 9, false}, Exit{-1, 255, true, true}}) {
    // Version 3's layout round-trips strictly except for its 6-byte prefix, which is the
    // layout of versions 1-2 (decoded with prestarted = false).
    const std::string v3 = e.Encode();
    ASSERT_EQ(v3.size(), 7u);
    EXPECT_EQ(*Exit::Decode(v3), e);
    const std::string v2 = e.Encode(2);
    ASSERT_EQ(v2, v3.substr(0, 6));
    Exit old = e;
    old.prestarted = false;
    EXPECT_EQ(*Exit::Decode(v2), old);
    for (std::size_t n = 0; n < 6; ++n) EXPECT_FALSE(Exit::Decode(v2.substr(0, n)).ok());
    EXPECT_FALSE(Exit::Decode(v3 + '\0').ok());
  }
  ExpectStrictRoundTrip(Signal{15});
  ExpectStrictRoundTrip(Resize{50, 200});
}

TEST(PayloadTest, FileRoundTrips) {
  ExpectStrictRoundTrip(PathRequest{"/etc/passwd"});
  ExpectStrictRoundTrip(PathRequest{""});
  ExpectStrictRoundTrip(FileWrite{"/tmp/a b", 0600, kFileWriteParents});
  ExpectStrictRoundTrip(FileWrite{"/x", 0, 0});
  ExpectStrictRoundTrip(Mkdir{"/a/b/c", 0700, true});
  ExpectStrictRoundTrip(Remove{"/a", true});
  ExpectStrictRoundTrip(Remove{"/a", false});
  ExpectStrictRoundTrip(StatResult{SampleEntry("f", EntryKind::kFile)});
  ExpectStrictRoundTrip(StatResult{SampleEntry("l", EntryKind::kSymlink)});
  ExpectStrictRoundTrip(ListResult{});
  ExpectStrictRoundTrip(
      ListResult{{SampleEntry("a", EntryKind::kFile), SampleEntry("d", EntryKind::kDir),
                  SampleEntry("s", EntryKind::kSymlink), SampleEntry("", EntryKind::kOther)}});
}

TEST(PayloadTest, PortAndProcessRoundTrips) {
  ExpectStrictRoundTrip(PortOpen{8080});
  ExpectStrictRoundTrip(PortOpen{0});
  ExpectStrictRoundTrip(ProcListResult{});
  ExpectStrictRoundTrip(ProcListResult{{{42, "sleep", true, 0}, {7, "", false, -9}}});
  ExpectStrictRoundTrip(ProcAttach{42});
}

TEST(PayloadTest, ProcSignalIsPidAndSignal) {
  ExpectStrictRoundTrip(ProcSignal{});
  ExpectStrictRoundTrip(ProcSignal{0xfffffffe, 255});
  EXPECT_EQ(ProcSignal({0x01020304, 9}).Encode(), std::string("\x01\x02\x03\x04\x09"));
  EXPECT_FALSE(ProcSignal::Decode(std::string(4, '\0')).ok());
  EXPECT_FALSE(ProcSignal::Decode(std::string(6, '\0')).ok());
}

TEST(PayloadTest, IdleStateIsHoldsThenIdleMilliseconds) {
  ExpectStrictRoundTrip(IdleState{});
  ExpectStrictRoundTrip(IdleState{0, 90000});
  ExpectStrictRoundTrip(IdleState{3, 0});
  ExpectStrictRoundTrip(IdleState{0, ~0ULL});
  EXPECT_EQ((IdleState{2, 0}.Encode()), "\0\0\0\x02\0\0\0\0\0\0\0\0"s);
  // Busy and idle at once is not a state: refused, naming the field.
  std::string both = IdleState{0, 5}.Encode();
  both[3] = 1;
  auto r = IdleState::Decode(both);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("IDLE_STATE.idle_ms"), std::string::npos)
      << r.error().message();
  EXPECT_FALSE(IdleState::Decode(std::string(11, '\0')).ok());
  EXPECT_FALSE(IdleState::Decode(std::string(13, '\0')).ok());
}

TEST(PayloadTest, SetDeadlinesIsTwoU64Milliseconds) {
  ExpectStrictRoundTrip(SetDeadlines{});
  ExpectStrictRoundTrip(SetDeadlines{600000, 0});
  ExpectStrictRoundTrip(SetDeadlines{0, 30000});
  ExpectStrictRoundTrip(SetDeadlines{~0ULL, 1});
  const SetDeadlines d{0x0102030405060708ULL, 1500};
  EXPECT_EQ(d.Encode(), "\x01\x02\x03\x04\x05\x06\x07\x08\0\0\0\0\0\0\x05\xdc"s);
  auto short_one = SetDeadlines::Decode(std::string(15, '\0'));
  ASSERT_FALSE(short_one.ok());
  EXPECT_EQ(short_one.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(short_one.error().message().find("SET_DEADLINES"), std::string::npos)
      << short_one.error().message();
  EXPECT_FALSE(SetDeadlines::Decode(std::string(17, '\0')).ok());
}

TEST(PayloadTest, OutputIsFdThenRawBytes) {
  Output o{2, "err\0or"s};
  const std::string bytes = o.Encode();
  EXPECT_EQ(bytes,
            "\x02"
            "err\0or"s);
  EXPECT_EQ(*Output::Decode(bytes), o);
  auto view = Output::DecodeOutputView(bytes);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->first, 2);
  EXPECT_EQ(view->second, "err\0or"s);
  EXPECT_EQ(view->second.data(), bytes.data() + 1);  // no copy

  EXPECT_EQ(*Output::Decode("\x01"), (Output{1, ""}));
  EXPECT_FALSE(Output::Decode("").ok());
  for (char fd : {'\0', '\3', '\xFF'}) {
    auto bad = Output::Decode(std::string(1, fd) + "x");
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  }
}

TEST(PayloadTest, GoldenBytesFollowTheDocument) {
  EXPECT_EQ(Hello{}.Encode(), "\x00\x06\x00\x40\x00\x00"s);
  EXPECT_EQ((Hello{1, 65536}.Encode()), "\x00\x01\x00\x01\x00\x00"s);
  EXPECT_EQ((Exit{-2, 3, true}.Encode(2)), "\xFF\xFF\xFF\xFE\x03\x01"s);
  EXPECT_EQ((Exit{-2, 3, true, true}.Encode()), "\xFF\xFF\xFF\xFE\x03\x01\x01"s);
  ExecRequest e;
  e.argv = {"ls"};
  e.timeout_ms = 5;
  e.flags = kExecPty;
  e.rows = 1;
  e.cols = 2;
  EXPECT_EQ(e.Encode(),
            "\x00\x00\x00\x01\x00\x00\x00\x02ls"  // argv
            "\x00\x00\x00\x00"                    // env
            "\x00\x00\x00\x00"                    // cwd
            "\x00\x00\x00\x00"                    // user
            "\x00\x00\x00\x00\x00\x00\x00\x05"    // timeout_ms
            "\x02\x00\x01\x00\x02"s);             // flags rows cols
  EXPECT_EQ(StatResult{SampleEntry("s", EntryKind::kSymlink)}.Encode(),
            "\x00\x00\x00\x01s\x02\x00\x00\x41\xED"
            "\x00\x00\x01\x00\x00\x00\x00\x00"
            "\xFF\xFF\xFF\xFF\xFF\xFF\xFB\x2E"
            "\x00\x00\x00\x09../target"s);
  // Version 6 adds each item's keep_awake; a session of version 5 has the old layout.
  EXPECT_EQ((ProcListResult{{{1, "a", true, 2, true}}}.Encode()),
            "\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01"
            "a\x01\x00\x00\x00\x02\x01"s);
  EXPECT_EQ((ProcListResult{{{1, "a", true, 2, true}}}.Encode(5)),
            "\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01"
            "a\x01\x00\x00\x00\x02"s);
  ExecRequest keep;
  keep.argv = {"s"};
  keep.flags = kExecBackground | kExecKeepAwake;
  EXPECT_EQ(keep.Encode(),
            "\x00\x00\x00\x01\x00\x00\x00\x01s"  // argv
            "\x00\x00\x00\x00"                   // env
            "\x00\x00\x00\x00"                   // cwd
            "\x00\x00\x00\x00"                   // user
            "\x00\x00\x00\x00\x00\x00\x00\x00"   // timeout_ms
            "\x0C\x00\x00\x00\x00"s);            // flags (background | keep-awake) rows cols
}

// Version 6: EXEC's keep-awake bit and PROC_LIST_RESULT's keep_awake, decoded strictly in the
// layout of the session's version.
TEST(PayloadTest, KeepAwakeFlagAndListingByVersion) {
  ExecRequest e = SampleExec();
  e.flags = kExecBackground | kExecKeepAwake;
  auto back = ExecRequest::Decode(e.Encode());
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(back->flags & kExecKeepAwake, kExecKeepAwake);
  EXPECT_EQ(*back, e);

  const ProcListResult list{{{42, "sleep", true, 0, true}, {7, "x", false, 3, false}}};
  for (std::uint16_t v : {std::uint16_t{5}, std::uint16_t{6}}) {
    auto r = ProcListResult::Decode(list.Encode(v), v);
    ASSERT_TRUE(r.ok()) << v << ": " << r.error().ToString();
    ASSERT_EQ(r->procs.size(), 2u);
    EXPECT_EQ(r->procs[0].keep_awake, v >= 6) << v;  // absent (false) before version 6
    EXPECT_FALSE(r->procs[1].keep_awake);
    EXPECT_EQ(r->procs[1].exit_code, 3);
  }
  // A layout read as the other version's does not parse.
  EXPECT_FALSE(ProcListResult::Decode(list.Encode(6), 5).ok());
  EXPECT_FALSE(ProcListResult::Decode(list.Encode(5), 6).ok());
  // keep_awake is a strict bool.
  std::string one = ProcListResult{{{1, "", true, 0, true}}}.Encode();
  one.back() = '\x02';
  auto bad = ProcListResult::Decode(one);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("PROC_LIST_RESULT.proc.keep_awake"), std::string::npos)
      << bad.error().message();
}

TEST(PayloadTest, NonCanonicalValuesAreRefused) {
  auto expect_invalid = [](const auto& result, std::string_view needle) {
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(result.error().message().find(needle), std::string::npos) << result.error().message();
  };
  std::string exec = SampleExec().Encode();
  exec[exec.size() - 5] = '\x10';
  expect_invalid(ExecRequest::Decode(exec), "EXEC.flags: unknown bits 0x10");
  exec[exec.size() - 5] = '\xF4';
  expect_invalid(ExecRequest::Decode(exec), "EXEC.flags: unknown bits 0xF0");

  std::string fw = FileWrite{"/a", 0644, 0}.Encode();
  fw.back() = '\x02';
  expect_invalid(FileWrite::Decode(fw), "FILE_WRITE.flags");

  std::string mk = Mkdir{"/a", 0755, true}.Encode();
  mk.back() = '\x02';
  expect_invalid(Mkdir::Decode(mk), "MKDIR.parents");

  std::string rm = Remove{"/a", true}.Encode();
  rm.back() = '\xFF';
  expect_invalid(Remove::Decode(rm), "REMOVE.recursive");

  std::string ex = Exit{1, 0, true}.Encode(2);
  ex.back() = '\x02';
  expect_invalid(Exit::Decode(ex), "EXIT.timed_out");
  ex = Exit{1, 0, true}.Encode();
  ex.back() = '\x02';
  expect_invalid(Exit::Decode(ex), "EXIT.prestarted");

  std::string st = StatResult{SampleEntry("n", EntryKind::kFile)}.Encode();
  st[5] = '\x04';
  expect_invalid(StatResult::Decode(st), "STAT_RESULT.entry.kind");

  std::string pl = ProcListResult{{{1, "", true, 0}}}.Encode();
  pl[12] = '\x05';
  expect_invalid(ProcListResult::Decode(pl), "PROC_LIST_RESULT.proc.running");

  expect_invalid(ErrorPayload::Decode("\x00\x00\x00\x00\x00\x00"s), "ERROR.code: unknown code 0");
  expect_invalid(ErrorPayload::Decode("\x00\x0B\x00\x00\x00\x00"s), "unknown code 11");
  EXPECT_TRUE(ErrorPayload::Decode("\x00\x64\x00\x00\x00\x00"s).ok());  // kProtocol
}

TEST(PayloadTest, HostileCountsFailWithoutAllocating) {
  // Counts that claim up to 4 G items, in payloads of a few bytes.
  const std::vector<std::string> hostile = {
      "\xFF\xFF\xFF\xFF"s,
      "\xFF\xFF\xFF\xFF\x00\x00\x00\x00"s,
      "\x00\x00\x00\x00\x7F\xFF\xFF\xFF"s,  // env count, after an empty argv
      "\x10\x00\x00\x00"s + std::string(64, '\0'),
  };
  for (const std::string& p : hostile) {
    g_largest = 0;
    g_track = true;
    auto exec = ExecRequest::Decode(p);
    auto list = ListResult::Decode(p);
    auto procs = ProcListResult::Decode(p);
    g_track = false;
    EXPECT_FALSE(exec.ok());
    EXPECT_FALSE(list.ok());
    EXPECT_FALSE(procs.ok());
    EXPECT_LT(g_largest.load(), 4096u) << "a decoder reserved memory for a hostile count";
  }
  // A count that fits the bytes by the minimum item size but whose items are bigger: refused
  // while reading items, having reserved at most count * sizeof(item) for count <= bytes / 4.
  std::string tricky = "\x00\x00\x00\x02\x00\x00\x00\x09\x00\x00\x00\x00"s;
  EXPECT_FALSE(ExecRequest::Decode(tricky).ok());
}

TEST(PayloadTest, CheckPayloadCoversEveryType) {
  const std::vector<std::pair<Type, std::string>> good = {
      {Type::kHello, Hello{}.Encode()},
      {Type::kWelcome, Welcome{1, "v", 2}.Encode()},
      {Type::kPing, Ping{1}.Encode()},
      {Type::kPong, Pong{1}.Encode()},
      {Type::kWindow, Window{1}.Encode()},
      {Type::kError, ErrorPayload{WireError::kInternal, "x"}.Encode()},
      {Type::kClose, ""},
      {Type::kExec, SampleExec().Encode()},
      {Type::kStarted, Started{1}.Encode()},
      {Type::kStdin, "any bytes"},
      {Type::kStdin, ""},
      {Type::kStdinEof, ""},
      {Type::kOutput, Output{1, "x"}.Encode()},
      {Type::kExit, Exit{}.Encode()},
      {Type::kSignal, Signal{9}.Encode()},
      {Type::kResize, Resize{1, 1}.Encode()},
      {Type::kFileRead, PathRequest{"/a"}.Encode()},
      {Type::kFileWrite, FileWrite{"/a"}.Encode()},
      {Type::kStat, PathRequest{"/a"}.Encode()},
      {Type::kList, PathRequest{"/a"}.Encode()},
      {Type::kMkdir, Mkdir{"/a"}.Encode()},
      {Type::kRemove, Remove{"/a"}.Encode()},
      {Type::kTarRead, PathRequest{"/a"}.Encode()},
      {Type::kTarWrite, PathRequest{"/a"}.Encode()},
      {Type::kData, "\0\1\2"s},
      {Type::kEnd, ""},
      {Type::kOk, ""},
      {Type::kStatResult, StatResult{}.Encode()},
      {Type::kListResult, ListResult{}.Encode()},
      {Type::kPortOpen, PortOpen{22}.Encode()},
      {Type::kProcList, ""},
      {Type::kProcListResult, ProcListResult{}.Encode()},
      {Type::kProcAttach, ProcAttach{1}.Encode()},
      {Type::kProcSignal, ProcSignal{1, 15}.Encode()},
      {Type::kDetach, ""},
      {Type::kSetDeadlines, SetDeadlines{1, 2}.Encode()},
      {Type::kIdleQuery, ""},
      {Type::kIdleState, IdleState{0, 7}.Encode()},
      {Type::kWatch, WatchRequest{"/a", kWatchRecursive}.Encode()},
      {Type::kWatchEvents, WatchEvents{{{WatchEventKind::kCreate, false, "a", ""}}}.Encode()},
  };
  std::set<Type> covered;
  for (const auto& [type, payload] : good) {
    covered.insert(type);
    EXPECT_TRUE(CheckPayload(type, payload).ok()) << TypeName(type);
    if (type != Type::kStdin && type != Type::kData && type != Type::kOutput) {  // raw tails
      auto bad = CheckPayload(type, payload + "!");
      ASSERT_FALSE(bad.ok()) << TypeName(type);
      EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
    }
  }
  int known = 0;
  for (int raw = 0; raw < 256; ++raw) {
    if (IsKnownType(static_cast<std::uint8_t>(raw))) {
      ++known;
      EXPECT_TRUE(covered.count(static_cast<Type>(raw))) << raw;
    }
  }
  EXPECT_EQ(known, 39);
  auto empty = CheckPayload(Type::kOk, "x");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().message(), "OK: expected an empty payload, got 1 bytes");
  EXPECT_FALSE(CheckPayload(static_cast<Type>(0x99), "").ok());
}

// ---------------------------------------------------------------------------------------------
// Types and error codes

TEST(TypeTest, NamesAreUniqueAndSpelledAsInTheDocument) {
  std::set<std::string_view> names;
  for (int raw = 0; raw < 256; ++raw) {
    const auto type = static_cast<Type>(raw);
    if (IsKnownType(static_cast<std::uint8_t>(raw))) {
      EXPECT_TRUE(names.insert(TypeName(type)).second) << TypeName(type);
    } else {
      EXPECT_EQ(TypeName(type), "UNKNOWN");
    }
  }
  EXPECT_EQ(TypeName(Type::kStdinEof), "STDIN_EOF");
  EXPECT_EQ(TypeName(Type::kProcListResult), "PROC_LIST_RESULT");
  EXPECT_EQ(static_cast<int>(Type::kOk), 0x3A);
  EXPECT_EQ(static_cast<int>(Type::kProcAttach), 0x52);
  EXPECT_EQ(static_cast<int>(Type::kProcSignal), 0x53);
  EXPECT_EQ(static_cast<int>(Type::kDetach), 0x54);
  EXPECT_EQ(TypeName(Type::kProcSignal), "PROC_SIGNAL");
  EXPECT_EQ(static_cast<int>(Type::kSetDeadlines), 0x70);
  EXPECT_EQ(TypeName(Type::kSetDeadlines), "SET_DEADLINES");
  EXPECT_EQ(static_cast<int>(Type::kIdleQuery), 0x71);
  EXPECT_EQ(TypeName(Type::kIdleState), "IDLE_STATE");
  EXPECT_FALSE(IsKnownType(0x00));
  EXPECT_FALSE(IsKnownType(0x08));
  EXPECT_FALSE(IsKnownType(0x3D));
}

TEST(WireErrorTest, CodesMatchTheDocumentAndRoundTrip) {
  const ErrorCode all[] = {ErrorCode::kInvalidArgument,   ErrorCode::kNotFound,
                           ErrorCode::kConflict,          ErrorCode::kUnavailable,
                           ErrorCode::kTimeout,           ErrorCode::kPermissionDenied,
                           ErrorCode::kResourceExhausted, ErrorCode::kUnsupported,
                           ErrorCode::kSandboxDied,       ErrorCode::kInternal};
  int expected = 1;
  for (ErrorCode code : all) {
    const WireError wire = ToWireError(code);
    EXPECT_EQ(static_cast<int>(wire), expected++);
    EXPECT_EQ(FromWireError(wire), code);
    EXPECT_TRUE(IsKnownWireError(static_cast<std::uint16_t>(wire)));
  }
  EXPECT_EQ(static_cast<int>(WireError::kProtocol), 100);
  EXPECT_EQ(static_cast<int>(WireError::kVersion), 101);
  EXPECT_EQ(FromWireError(WireError::kProtocol), ErrorCode::kInternal);
  EXPECT_EQ(FromWireError(WireError::kVersion), ErrorCode::kUnsupported);
  EXPECT_FALSE(IsKnownWireError(0));
  EXPECT_FALSE(IsKnownWireError(11));
  EXPECT_FALSE(IsKnownWireError(102));
  EXPECT_EQ(WireErrorName(WireError::kVersion), "kVersion");
  EXPECT_EQ(WireErrorName(static_cast<WireError>(5000)), "kUnknown");
}

TEST(WireErrorTest, ErrorPayloadFromAndToError) {
  auto p = ErrorPayload::FromError(Error::NotFound("stat /nope: No such file or directory"));
  EXPECT_EQ(p.code, WireError::kNotFound);
  EXPECT_EQ(p.message, "stat /nope: No such file or directory");
  Error back = p.ToError();
  EXPECT_EQ(back.code(), ErrorCode::kNotFound);
  EXPECT_EQ(back.message(), p.message);

  auto big = ErrorPayload::FromError(Error::Internal(std::string(3 * kMaxPayload, 'x')));
  EXPECT_EQ(big.message.size(), ErrorPayload::kMaxErrorMessage);
  EXPECT_TRUE(FitsInFrame(big.Encode().size()));
}

// ---------------------------------------------------------------------------------------------
// Frames

TEST(FrameTest, AppendFrameGoldenBytes) {
  std::string out = "prefix";
  AppendFrame(out, Type::kPing, 3, Ping{0x0102030405060708ULL}.Encode());
  AppendFrame(out, Type::kClose, 0x01020304, "");
  EXPECT_EQ(out,
            "prefix"
            "\x00\x00\x00\x0D\x03\x00\x00\x00\x03\x01\x02\x03\x04\x05\x06\x07\x08"
            "\x00\x00\x00\x05\x07\x01\x02\x03\x04"s);
}

TEST(FrameTest, HeadersForWritevMatchAppendFrame) {
  const std::string data(1000, 'd');
  std::string whole;
  AppendFrame(whole, Type::kData, 5, data);
  char header[kFrameHeaderSize];
  EncodeHeader(header, Type::kData, 5, data.size());
  EXPECT_EQ(std::string(header, kFrameHeaderSize) + data, whole);

  std::string output_frame;
  AppendFrame(output_frame, Type::kOutput, 7, Output{2, data}.Encode());
  char oheader[kOutputHeaderSize];
  EncodeOutputHeader(oheader, 7, 2, data.size());
  EXPECT_EQ(std::string(oheader, kOutputHeaderSize) + data, output_frame);
}

TEST(FrameTest, TryAppendFrameRefusesOversizedPayloads) {
  std::string out = "keep";
  auto r = TryAppendFrame(out, Type::kExec, 1, std::string(kMaxPayload + 1, 'x'));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().message(),
            "EXEC: payload of 1048577 bytes exceeds the frame limit of 1048576");
  EXPECT_EQ(out, "keep");
  EXPECT_TRUE(TryAppendFrame(out, Type::kData, 1, std::string(kMaxPayload, 'x')).ok());
  EXPECT_EQ(out.size(), 4 + kFrameHeaderSize + kMaxPayload);
}

TEST(FrameDeathTest, AppendFrameAbortsOnOversizedPayload) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::string out;
  const std::string big(kMaxPayload + 1, 'x');
  EXPECT_DEATH(AppendFrame(out, Type::kData, 1, big), "exceeds");
  char header[kOutputHeaderSize];
  EXPECT_DEATH(EncodeOutputHeader(header, 1, 1, kMaxOutputChunk + 1), "exceeds");
}

// A stream of frames covering empty payloads, every size class and stream ids with all bytes set.
std::vector<Frame> SampleFrames() {
  return {
      {Type::kHello, 0, Hello{}.Encode()},
      {Type::kClose, 0xFFFFFFFF, ""},
      {Type::kExec, 1, SampleExec().Encode()},
      {Type::kStdin, 1, "input\n"},
      {Type::kStdinEof, 1, ""},
      {Type::kOutput, 1, Output{1, std::string(300, 'o')}.Encode()},
      {Type::kExit, 1, Exit{3, 0, false}.Encode()},
      {Type::kData, 0x80000001, std::string(1, '\0')},
      {Type::kEnd, 0x80000001, ""},
      {Type::kListResult, 3, ListResult{{SampleEntry("x", EntryKind::kDir)}}.Encode()},
  };
}

std::string Serialize(const std::vector<Frame>& frames) {
  std::string out;
  for (const Frame& f : frames) AppendFrame(out, f.type, f.stream, f.payload);
  return out;
}

// Feeds `chunks` in order; returns the frames, asserting success.
std::vector<Frame> FeedAll(FrameDecoder& decoder, const std::vector<std::string_view>& chunks) {
  std::vector<Frame> got;
  for (std::string_view chunk : chunks) {
    auto r = decoder.Feed(chunk, [&](Frame&& f) { got.push_back(std::move(f)); });
    EXPECT_TRUE(r.ok()) << r.error().ToString();
  }
  return got;
}

TEST(FrameDecoderTest, WholeStreamAtOnce) {
  const auto frames = SampleFrames();
  const std::string wire = Serialize(frames);
  FrameDecoder d;
  EXPECT_EQ(FeedAll(d, {wire}), frames);
  EXPECT_FALSE(d.mid_frame());
  EXPECT_FALSE(d.failed());
}

TEST(FrameDecoderTest, EverySplitPointInTwoAndThreePieces) {
  const auto frames = SampleFrames();
  const std::string wire = Serialize(frames);
  const std::string_view w = wire;
  for (std::size_t i = 0; i <= w.size(); ++i) {
    FrameDecoder d;
    ASSERT_EQ(FeedAll(d, {w.substr(0, i), w.substr(i)}), frames) << "split at " << i;
    ASSERT_FALSE(d.mid_frame());
  }
  // Three pieces: every first split, second split every 7 bytes after it (O(n^2 / 7)).
  for (std::size_t i = 0; i <= w.size(); ++i) {
    for (std::size_t j = i; j <= w.size(); j += 7) {
      FrameDecoder d;
      ASSERT_EQ(FeedAll(d, {w.substr(0, i), w.substr(i, j - i), w.substr(j)}), frames)
          << "splits at " << i << ", " << j;
    }
  }
}

TEST(FrameDecoderTest, ByteByByteReportsMidFrame) {
  const auto frames = SampleFrames();
  const std::string wire = Serialize(frames);
  FrameDecoder d;
  std::vector<Frame> got;
  std::size_t boundary = 0;  // offset of the next frame start
  std::size_t next = 0;
  for (std::size_t i = 0; i < wire.size(); ++i) {
    ASSERT_TRUE(d.Feed(std::string_view(wire).substr(i, 1), [&](Frame&& f) {
                   got.push_back(std::move(f));
                 }).ok());
    if (got.size() > next) {
      boundary += kFrameHeaderSize + frames[next].payload.size();
      ++next;
    }
    EXPECT_EQ(d.mid_frame(), i + 1 != boundary) << i;
  }
  EXPECT_EQ(got, frames);
}

TEST(FrameDecoderTest, RandomChunkingsIncludingAMaxSizeFrame) {
  auto frames = SampleFrames();
  std::string big(kMaxPayload, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131);
  frames.insert(frames.begin() + 3, Frame{Type::kData, 9, big});
  frames.push_back(Frame{Type::kOutput, 11, "\x02" + std::string(kMaxOutputChunk, 'e')});
  const std::string wire = Serialize(frames);
  std::mt19937 rng(12345);
  for (int round = 0; round < 16; ++round) {
    // Small chunks on some rounds, big ones on others.
    std::uniform_int_distribution<std::size_t> size(1, round % 2 ? 17 : 300'000);
    std::vector<std::string_view> chunks;
    for (std::size_t pos = 0; pos < wire.size();) {
      const std::size_t n = std::min(size(rng), wire.size() - pos);
      chunks.push_back(std::string_view(wire).substr(pos, n));
      pos += n;
    }
    FrameDecoder d;
    ASSERT_EQ(FeedAll(d, chunks), frames) << "round " << round;
    ASSERT_FALSE(d.mid_frame());
  }
}

TEST(FrameDecoderTest, EmptyFeedIsHarmless) {
  FrameDecoder d;
  int calls = 0;
  EXPECT_TRUE(d.Feed("", [&](Frame&&) { ++calls; }).ok());
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(d.mid_frame());
}

// Feeds `wire` split at `split`; returns the error and the frames delivered before it.
std::pair<Result<void>, std::vector<Frame>> FeedExpectingError(std::string_view wire,
                                                               std::size_t split) {
  FrameDecoder d;
  std::vector<Frame> got;
  auto sink = [&](Frame&& f) { got.push_back(std::move(f)); };
  Result<void> r = d.Feed(wire.substr(0, split), sink);
  if (r.ok()) r = d.Feed(wire.substr(split), sink);
  EXPECT_TRUE(d.failed());
  // Failed for good: the same error, nothing consumed.
  auto again = d.Feed(Serialize({{Type::kOk, 1, ""}}), sink);
  EXPECT_FALSE(again.ok());
  if (!r.ok()) {
    EXPECT_EQ(again.error().message(), r.error().message());
  }
  return {std::move(r), std::move(got)};
}

TEST(FrameDecoderTest, LengthOutOfRangeFailsAtEverySplitAfterGoodFrames) {
  const auto good = SampleFrames();
  const std::string prefix = Serialize(good);
  struct Case {
    std::string header;
    std::string message;
  };
  const Case cases[] = {
      {"\x00\x00\x00\x00"s, "frame length 0 out of range [5, 1048581]"},
      {"\x00\x00\x00\x04"s, "frame length 4 out of range [5, 1048581]"},
      {"\x00\x10\x00\x06"s, "frame length 1048582 out of range [5, 1048581]"},
      {"\xFF\xFF\xFF\xFF"s, "frame length 4294967295 out of range [5, 1048581]"},
  };
  for (const Case& c : cases) {
    const std::string wire = prefix + c.header + "\x01\x00\x00\x00\x00junk"s;
    for (std::size_t split = 0; split <= wire.size(); ++split) {
      auto [r, got] = FeedExpectingError(wire, split);
      ASSERT_FALSE(r.ok()) << split;
      EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(r.error().message(), c.message);
      EXPECT_EQ(got, good) << split;
    }
  }
}

TEST(FrameDecoderTest, UnknownTypeFailsAsSoonAsTheTypeByteArrives) {
  const auto good = SampleFrames();
  const std::string wire = Serialize(good) + "\x00\x00\x00\x05\x99"s;  // no stream bytes yet
  for (std::size_t split = 0; split <= wire.size(); ++split) {
    auto [r, got] = FeedExpectingError(wire, split);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message(), "unknown frame type 0x99");
    EXPECT_EQ(got, good);
  }
}

TEST(FrameDecoderTest, MaxPayloadBoundary) {
  std::string wire;
  AppendFrame(wire, Type::kData, 1, std::string(kMaxPayload, 'm'));
  EXPECT_EQ(wire.substr(0, 4), "\x00\x10\x00\x05"s);
  FrameDecoder d;
  auto got = FeedAll(d, {wire});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload.size(), kMaxPayload);

  std::string over = "\x00\x10\x00\x06\x38\x00\x00\x00\x01"s;
  FrameDecoder d2;
  auto r = d2.Feed(over, [](Frame&&) { ADD_FAILURE() << "no frame expected"; });
  EXPECT_FALSE(r.ok());
}

TEST(FrameDecoderTest, TruncatedStreamLeavesMidFrame) {
  std::string wire;
  AppendFrame(wire, Type::kPing, 0, Ping{1}.Encode());
  FrameDecoder d;
  int calls = 0;
  ASSERT_TRUE(
      d.Feed(std::string_view(wire).substr(0, wire.size() - 1), [&](Frame&&) { ++calls; }).ok());
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(d.mid_frame());
  ASSERT_TRUE(
      d.Feed(std::string_view(wire).substr(wire.size() - 1), [&](Frame&&) { ++calls; }).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(d.mid_frame());
}

}  // namespace
}  // namespace agvisor::proto
