// libFuzzer target for the host side of the agent channel: what a hostile sandbox can send back.
// The agent runs inside the sandbox, so every byte the Channel reads is untrusted; whatever they
// are, the host must not crash, must not hang, and must end every operation in flight.
//
// One run: a Channel is opened over an in-memory transport (the handshake is genuine, in protocol
// version 1 or 2 as the input says), then eleven operations are started, each on its own thread
// and each waiting until its request was written, so they hold streams 1, 3, ..., 21 in a fixed
// order (exec with stdin, file read, list, tar read, port, process list, attach, file write, set
// deadlines, signal a process, an attach detached from another thread) plus a PING on stream 0.
// Then the
// agent's side is played from the input, followed by end of stream, and every operation must
// return. The input is either raw bytes (first byte even) or, to reach deep states quickly, a
// program of frames: each step picks a type, a stream among the live ones and a payload that is
// valid for the type or raw.
//
// Built with -DAGVISOR_FUZZ=ON and clang (the `fuzz` preset); scripts/test runs it briefly:
// `channel_fuzz -max_total_time=N -timeout=20`. A hang shows as a libFuzzer timeout.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agvisor/channel/channel.h"
#include "agvisor/channel/transport.h"
#include "agvisor/proto/messages.h"

namespace agvisor::channel {
namespace {

using proto::Type;

// Reads: WELCOME, then (once released) the agent's bytes in chunks of `chunk`, then end.
// Writes: counted and dropped.
class ScriptTransport : public Transport {
 public:
  ScriptTransport(std::string welcome, std::string script, std::size_t chunk)
      : welcome_(std::move(welcome)), script_(std::move(script)), chunk_(chunk) {}

  Result<std::size_t> Read(std::span<char> buf) override {
    std::unique_lock lock(mu_);
    if (!welcome_.empty()) return Take(welcome_, buf, welcome_.size());
    cv_.wait(lock, [&] { return released_ || closed_; });
    if (closed_ || script_.empty()) return std::size_t{0};
    return Take(script_, buf, chunk_);
  }
  Result<void> Write(std::string_view) override {
    std::lock_guard lock(mu_);
    if (closed_) return Error::Unavailable("fuzz transport: closed");
    ++writes_;
    cv_.notify_all();
    return Ok();
  }
  void Close() override { Raise(closed_); }

  // Waits until more than `n` writes happened (or the transport closed); returns the count.
  int WaitWrites(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return writes_ > n || closed_; });
    return writes_;
  }
  int writes() {
    std::lock_guard lock(mu_);
    return writes_;
  }
  void Release() { Raise(released_); }

 private:
  // Sets `flag` (closed_ or released_) and wakes the waiters.
  void Raise(bool& flag) {
    std::lock_guard lock(mu_);
    flag = true;
    cv_.notify_all();
  }
  static std::size_t Take(std::string& from, std::span<char> buf, std::size_t limit) {
    std::size_t n = std::min({buf.size(), from.size(), limit});
    from.copy(buf.data(), n);
    from.erase(0, n);
    return n;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::string welcome_, script_;
  std::size_t chunk_;
  bool released_ = false, closed_ = false;
  int writes_ = 0;
};

// Reads the fuzz input as a stream of small integers and byte strings.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size)
      : p_(reinterpret_cast<const char*>(data)), n_(size) {}
  bool empty() const { return n_ == 0; }
  std::uint8_t U8() { return n_ == 0 ? 0 : (--n_, static_cast<std::uint8_t>(*p_++)); }
  std::uint32_t U32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | U8();
    return v;
  }
  std::string Bytes(std::size_t max) {
    std::size_t len = std::min<std::size_t>({U8(), max, n_});
    std::string s(p_, len);
    p_ += len;
    n_ -= len;
    return s;
  }
  std::string Rest() {
    std::string s(p_, n_);
    p_ += n_;
    n_ = 0;
    return s;
  }

 private:
  const char* p_;
  std::size_t n_;
};

proto::Entry SomeEntry(Input& in) {
  proto::Entry e;
  e.name = in.Bytes(16);
  e.kind = static_cast<proto::EntryKind>(in.U8() % 4);
  e.mode = in.U32();
  e.size = in.U32();
  e.mtime_unix_ms = static_cast<std::int32_t>(in.U32());
  if (e.kind == proto::EntryKind::kSymlink) e.link_target = in.Bytes(16);
  return e;
}

// A payload for `type`: valid for it (most of the time) or raw bytes.
std::string Payload(Type type, Input& in) {
  if (in.U8() % 8 == 0) return in.Bytes(64);
  switch (type) {
    case Type::kPong:
      return proto::Pong{static_cast<std::uint64_t>(in.U8() % 4)}.Encode();
    case Type::kWindow:
      return proto::Window{in.U32()}.Encode();
    case Type::kError: {
      static constexpr proto::WireError kCodes[] = {
          proto::WireError::kNotFound, proto::WireError::kConflict, proto::WireError::kUnavailable,
          proto::WireError::kProtocol, proto::WireError::kInternal};
      return proto::ErrorPayload{kCodes[in.U8() % 5], in.Bytes(32)}.Encode();
    }
    case Type::kStarted:
      return proto::Started{in.U32()}.Encode();
    case Type::kOutput:
      return proto::Output{static_cast<std::uint8_t>(1 + in.U8() % 2), in.Bytes(255)}.Encode();
    case Type::kExit:
      return proto::Exit{static_cast<std::int32_t>(in.U32()),
                         static_cast<std::uint8_t>(in.U8() % 65), in.U8() % 2 == 1}
          .Encode();
    case Type::kData:
      return in.Bytes(255);
    case Type::kStatResult:
      return proto::StatResult{SomeEntry(in)}.Encode();
    case Type::kListResult: {
      proto::ListResult l;
      for (int i = in.U8() % 4; i > 0; --i) l.entries.push_back(SomeEntry(in));
      return l.Encode();
    }
    case Type::kProcListResult: {
      proto::ProcListResult l;
      for (int i = in.U8() % 4; i > 0; --i) {
        l.procs.push_back({in.U32(), in.Bytes(16), in.U8() % 2 == 1,
                           static_cast<std::int32_t>(in.U32()), in.U8() % 2 == 1});
      }
      return l.Encode();
    }
    case Type::kIdleState:  // holds and idle_ms both set half the time: not a valid state
      return proto::IdleState{in.U8() % 2u, static_cast<std::uint64_t>(in.U32()) << 8}.Encode();
    default:
      return "";  // CLOSE, END, OK, and the host's own types sent back
  }
}

std::string Program(Input& in) {
  static constexpr Type kTypes[] = {
      Type::kPong,       Type::kWindow,     Type::kError,          Type::kClose,   Type::kStarted,
      Type::kOutput,     Type::kExit,       Type::kData,           Type::kEnd,     Type::kOk,
      Type::kStatResult, Type::kListResult, Type::kProcListResult, Type::kWelcome, Type::kExec,
      Type::kPing,       Type::kIdleState};
  std::string out;
  while (!in.empty()) {
    Type type = kTypes[in.U8() % std::size(kTypes)];
    std::uint8_t s = in.U8();
    // Mostly the live streams 0..21; sometimes any id.
    std::uint32_t stream = s < 200 ? (s % 12 == 0 ? 0 : 2 * (s % 12) - 1) : in.U32();
    std::string payload = Payload(type, in);
    if (payload.size() > proto::kMaxPayload) continue;
    proto::AppendFrame(out, type, stream, payload);
  }
  return out;
}

void RunOnce(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const std::uint8_t mode = in.U8();
  const std::size_t chunk = 1 + in.U8() * 37u;
  // The version the agent answers: both the host's code paths (PROC_SIGNAL and DETACH, or the
  // version 1 ways) meet the same hostile bytes.
  const auto version =
      static_cast<std::uint16_t>(proto::kMinProtocolVersion + in.U8() % proto::kProtocolVersion);
  std::string script = (mode % 2 == 0) ? in.Rest() : Program(in);

  std::string welcome;
  proto::AppendFrame(welcome, Type::kWelcome, proto::kSessionStream,
                     proto::Welcome{version, "fuzz", 0}.Encode());
  auto owned = std::make_unique<ScriptTransport>(std::move(welcome), std::move(script), chunk);
  ScriptTransport* t = owned.get();
  ChannelOptions options;
  options.initial_window = 64 * 1024;
  options.keepalive_interval = std::chrono::milliseconds(60000);
  auto ch = Channel::Open(std::move(owned), options);
  if (!ch.ok()) std::abort();  // the handshake above is valid: opening must work
  std::shared_ptr<Channel> c = *ch;

  const ByteSink sink = [](std::string_view) -> Result<void> { return Ok(); };
  std::vector<std::function<void()>> ops = {
      [&] {
        proto::ExecRequest r;
        r.argv = {"cat"};
        std::string in_bytes(100, 'i');
        std::size_t pos = 0;
        ByteSource src = [&](std::span<char> b) -> Result<std::size_t> {
          std::size_t n = std::min(b.size(), in_bytes.size() - pos);
          in_bytes.copy(b.data(), n, pos);
          pos += n;
          return n;
        };
        (void)c->Exec(r, {[](std::string_view) {}, [](std::string_view) {}}, &src);
      },
      [&] { (void)c->ReadFile("/etc/hostname"); },
      [&] { (void)c->List("/"); },
      [&] { (void)c->TarRead("/w", sink); },
      [&] {
        auto p = c->OpenPort(80);
        if (!p.ok()) return;
        char b[256];
        (void)(*p)->Write("GET /");
        while (true) {
          auto n = (*p)->Read(b);
          if (!n.ok() || *n == 0) break;
        }
      },
      [&] { (void)c->ListProcesses(); },
      [&] {
        auto p = c->AttachProcess(7);
        if (p.ok()) (void)(*p)->Wait({});
      },
      [&] { (void)c->WriteFile("/x", std::string(300, 'w')); },
      [&] { (void)c->SetDeadlines(std::chrono::milliseconds(1000), std::nullopt); },
      [&] { (void)c->SignalProcess(9, 15); },
      [&] {
        auto p = c->AttachProcess(11);
        if (!p.ok()) return;
        std::thread detach([&] { (void)(*p)->Detach(); });
        (void)(*p)->Wait({});
        detach.join();
      },
      [&] { (void)c->Ping(std::chrono::milliseconds(60000)); },
  };
  std::vector<std::thread> threads;
  for (auto& op : ops) {
    int before = t->writes();
    threads.emplace_back(op);
    t->WaitWrites(before);  // its request is out: stream ids follow the order above
  }
  t->Release();
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace agvisor::channel

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  agvisor::channel::RunOnce(data, size);
  return 0;
}
