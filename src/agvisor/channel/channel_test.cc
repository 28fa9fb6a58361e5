// Channel against a scripted fake agent over an in-memory transport: handshake, dispatch,
// stream ids, flow control both ways, errors, transport loss. Byte-exact: the fake decodes every
// frame the host writes with proto::FrameDecoder.
#include "agvisor/channel/channel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "agvisor/channel/memory_transport.h"

namespace agvisor::channel {
namespace {

using proto::Frame;
using proto::Type;
using ::testing::HasSubstr;

// The agent end: decodes the host's frames and hands each to `on_frame`, which answers with
// Send. Answers HELLO with WELCOME itself unless told otherwise.
class FakeAgent {
 public:
  using Handler = std::function<void(FakeAgent&, const Frame&)>;

  FakeAgent(std::unique_ptr<MemoryTransport> end, Handler on_frame)
      : end_(std::move(end)), on_frame_(std::move(on_frame)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeAgent() {
    end_->Close();
    thread_.join();
  }
  void Send(Type type, std::uint32_t stream, std::string_view payload = {}) {
    std::string out;
    proto::AppendFrame(out, type, stream, payload);
    std::lock_guard lock(write_mu_);
    if (!end_->Write(out).ok()) closed_ = true;
  }
  // Bytes as they are, e.g. part of a frame.
  void SendRaw(std::string_view bytes) {
    std::lock_guard lock(write_mu_);
    if (!end_->Write(bytes).ok()) closed_ = true;
  }
  bool closed() const { return closed_; }
  void CloseTransport() { end_->Close(); }
  std::uint32_t window() const { return hello_.initial_window; }

  bool answer_hello = true;
  std::uint16_t welcome_version = 1;  // set before the host's HELLO

 private:
  void Loop() {
    proto::FrameDecoder decoder;
    char buf[4096];
    for (;;) {
      auto n = end_->Read(buf);
      if (!n.ok() || *n == 0) return;
      auto r = decoder.Feed(std::string_view(buf, *n), [this](Frame&& f) {
        if (f.type == Type::kHello) {
          hello_ = *proto::Hello::Decode(f.payload);
          if (answer_hello) {
            Send(Type::kWelcome, 0, proto::Welcome{welcome_version, "fake 1.0", 42}.Encode());
            return;
          }
        }
        on_frame_(*this, f);
      });
      EXPECT_TRUE(r.ok()) << "the host wrote a malformed frame: " << r.error().ToString();
    }
  }

  std::unique_ptr<MemoryTransport> end_;
  Handler on_frame_;
  proto::Hello hello_;
  std::mutex write_mu_;
  std::atomic<bool> closed_{false};
  std::thread thread_;
};

std::string Out(std::uint8_t fd, std::string_view bytes) {
  return proto::Output{fd, std::string(bytes)}.Encode();
}

// Answers EXEC with STARTED, its argv joined on stdout, "e" on stderr, EXIT argv.size().
void EchoExec(FakeAgent& a, const Frame& f) {
  if (f.type != Type::kExec) return;
  auto req = proto::ExecRequest::Decode(f.payload);
  ASSERT_TRUE(req.ok());
  a.Send(Type::kStarted, f.stream, proto::Started{100 + f.stream}.Encode());
  std::string joined;
  for (const auto& s : req->argv) joined += s + " ";
  a.Send(Type::kOutput, f.stream, Out(1, joined));
  a.Send(Type::kOutput, f.stream, Out(2, "e"));
  a.Send(Type::kExit, f.stream,
         proto::Exit{static_cast<std::int32_t>(req->argv.size()), 0, false}.Encode());
}

struct Collected {
  std::string out, err;
  ExecCallbacks callbacks() {
    return {[this](std::string_view b) { out.append(b); },
            [this](std::string_view b) { err.append(b); }};
  }
};

TEST(ChannelTest, HandshakeAndExecAtEverySplitPoint) {
  auto [host, agent_end] = MemoryTransport::Pair(/*max_read=*/1);
  FakeAgent agent(std::move(agent_end), EchoExec);
  auto ch = Channel::Open(std::move(host));
  ASSERT_TRUE(ch.ok()) << ch.error().ToString();
  EXPECT_EQ((*ch)->agent().agent_version, "fake 1.0");
  EXPECT_EQ((*ch)->agent().boot_unix_ms, 42u);
  EXPECT_EQ(agent.window(), proto::kDefaultWindow);
  Collected c;
  auto exit = (*ch)->Exec({.argv = {"a", "b", "c"}}, c.callbacks());
  ASSERT_TRUE(exit.ok()) << exit.error().ToString();
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_EQ(c.out, "a b c ");
  EXPECT_EQ(c.err, "e");
}

TEST(ChannelTest, VersionMismatchIsUnsupported) {
  {
    auto [host, agent_end] = MemoryTransport::Pair();
    FakeAgent agent(std::move(agent_end), [](FakeAgent& a, const Frame& f) {
      if (f.type == Type::kHello) a.Send(Type::kWelcome, 0, proto::Welcome{7, "new", 1}.Encode());
    });
    agent.answer_hello = false;
    auto ch = Channel::Open(std::move(host));
    ASSERT_FALSE(ch.ok());
    EXPECT_EQ(ch.error().code(), ErrorCode::kUnsupported);
    EXPECT_THAT(ch.error().message(), HasSubstr("version 7"));
  }
  {
    // An older agent answers with its lower version: accepted, and the channel speaks it.
    auto [host, agent_end] = MemoryTransport::Pair();
    FakeAgent agent(std::move(agent_end), [](FakeAgent& a, const Frame& f) {
      if (f.type == Type::kHello) a.Send(Type::kWelcome, 0, proto::Welcome{1, "old", 1}.Encode());
    });
    agent.answer_hello = false;
    auto ch = Channel::Open(std::move(host));
    ASSERT_TRUE(ch.ok()) << ch.error().ToString();
    EXPECT_EQ((*ch)->agent().version, 1);
  }
  {
    auto [host, agent_end] = MemoryTransport::Pair();
    auto ch = Channel::Open(std::move(host), {.version = 0});
    ASSERT_FALSE(ch.ok());
    EXPECT_EQ(ch.error().code(), ErrorCode::kInvalidArgument);
  }
  {
    auto [host, agent_end] = MemoryTransport::Pair();
    FakeAgent agent(std::move(agent_end), [](FakeAgent& a, const Frame& f) {
      if (f.type == Type::kHello) {
        a.Send(Type::kError, 0,
               proto::ErrorPayload{proto::WireError::kVersion, "I speak 7"}.Encode());
      }
    });
    agent.answer_hello = false;
    auto ch = Channel::Open(std::move(host));
    ASSERT_FALSE(ch.ok());
    EXPECT_EQ(ch.error().code(), ErrorCode::kUnsupported);
    EXPECT_THAT(ch.error().message(), HasSubstr("I speak 7"));
  }
}

TEST(ChannelTest, HandshakeTimesOutAndEofIsUnavailable) {
  {
    auto [host, agent_end] = MemoryTransport::Pair();
    FakeAgent agent(std::move(agent_end), [](FakeAgent&, const Frame&) {});
    agent.answer_hello = false;
    auto ch = Channel::Open(std::move(host), {.handshake_timeout = std::chrono::milliseconds(50)});
    ASSERT_FALSE(ch.ok());
    EXPECT_EQ(ch.error().code(), ErrorCode::kTimeout);
  }
  {
    auto [host, agent_end] = MemoryTransport::Pair();
    FakeAgent agent(std::move(agent_end), [](FakeAgent& a, const Frame&) { a.CloseTransport(); });
    agent.answer_hello = false;
    auto ch = Channel::Open(std::move(host));
    ASSERT_FALSE(ch.ok());
    EXPECT_EQ(ch.error().code(), ErrorCode::kUnavailable);
  }
}

TEST(ChannelTest, ManyThreadsGetDistinctOddStreams) {
  std::mutex mu;
  std::set<std::uint32_t> seen;
  auto [host, agent_end] = MemoryTransport::Pair();
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    if (f.type == Type::kExec) {
      std::lock_guard lock(mu);
      EXPECT_EQ(f.stream % 2, 1u);
      EXPECT_TRUE(seen.insert(f.stream).second) << "stream id reused: " << f.stream;
    }
    EchoExec(a, f);
  });
  auto ch = Channel::Open(std::move(host));
  ASSERT_TRUE(ch.ok());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        Collected c;
        std::string arg = std::to_string(t) + "-" + std::to_string(i);
        auto e = (*ch)->Exec({.argv = {arg}}, c.callbacks());
        if (e.ok() && e->exit_code == 1 && c.out == arg + " ") ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, 200);
  EXPECT_EQ(seen.size(), 200u);
}

TEST(ChannelTest, StdinNeverExceedsCreditAndEndsWithEof) {
  constexpr std::uint32_t kWindow = 1000;
  std::atomic<std::int64_t> credit{kWindow};
  std::atomic<bool> over{false};
  std::string received;
  auto [host, agent_end] = MemoryTransport::Pair(7);
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    switch (f.type) {
      case Type::kExec:
        EXPECT_EQ(proto::ExecRequest::Decode(f.payload)->flags & proto::kExecStdin,
                  proto::kExecStdin);
        break;
      case Type::kStdin:
        credit -= static_cast<std::int64_t>(f.payload.size());
        if (credit < 0) over = true;
        received += f.payload;
        // Grant back in small steps, as a slow consumer would.
        credit += static_cast<std::int64_t>(f.payload.size());
        a.Send(Type::kWindow, f.stream,
               proto::Window{static_cast<std::uint32_t>(f.payload.size())}.Encode());
        break;
      case Type::kStdinEof:
        a.Send(Type::kOutput, f.stream, Out(1, std::to_string(received.size())));
        a.Send(Type::kExit, f.stream, proto::Exit{0, 0, false}.Encode());
        break;
      default:
        break;
    }
  });
  auto ch = Channel::Open(std::move(host), {.initial_window = kWindow});
  ASSERT_TRUE(ch.ok());
  std::string input(100000, 'x');
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<char>('a' + i % 26);
  std::size_t pos = 0;
  ByteSource src = [&](std::span<char> buf) -> Result<std::size_t> {
    std::size_t n = std::min<std::size_t>(buf.size(), input.size() - pos);
    std::copy_n(input.data() + pos, n, buf.data());
    pos += n;
    return n;
  };
  Collected c;
  auto exit = (*ch)->Exec({.argv = {"cat"}}, c.callbacks(), &src);
  ASSERT_TRUE(exit.ok()) << exit.error().ToString();
  EXPECT_FALSE(over) << "the host sent more STDIN than its credit";
  EXPECT_EQ(c.out, "100000");
  EXPECT_EQ(received, input);
}

TEST(ChannelTest, OutputIsGrantedBackAsTheConsumerTakesIt) {
  constexpr std::uint32_t kWindow = 64 * 1024;
  constexpr std::size_t kTotal = 2 * 1024 * 1024;
  std::mutex mu;
  std::condition_variable cv;
  std::int64_t credit = kWindow;
  std::uint32_t stream = 0;
  auto [host, agent_end] = MemoryTransport::Pair();
  FakeAgent agent(std::move(agent_end), [&](FakeAgent&, const Frame& f) {
    std::lock_guard lock(mu);
    if (f.type == Type::kExec) stream = f.stream;
    if (f.type == Type::kWindow) credit += proto::Window::Decode(f.payload)->bytes;
    cv.notify_all();
  });
  auto ch = Channel::Open(std::move(host), {.initial_window = kWindow});
  ASSERT_TRUE(ch.ok());
  // The producer: sends OUTPUT only within credit, as the agent does.
  std::thread producer([&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return stream != 0; });
    std::size_t sent = 0;
    while (sent < kTotal) {
      cv.wait(lock, [&] { return credit >= 4096; });
      std::string chunk(4096, static_cast<char>('0' + (sent / 4096) % 10));
      credit -= static_cast<std::int64_t>(chunk.size());  // process bytes, not the fd byte
      sent += chunk.size();
      agent.Send(Type::kOutput, stream, Out(1, chunk));
    }
    agent.Send(Type::kExit, stream, proto::Exit{0, 0, false}.Encode());
  });
  std::size_t got = 0;
  auto exit =
      (*ch)->Exec({.argv = {"yes"}}, {[&](std::string_view b) { got += b.size(); }, nullptr});
  producer.join();
  ASSERT_TRUE(exit.ok()) << exit.error().ToString();
  EXPECT_EQ(got, kTotal);
}

// A consumer that takes nothing until the channel broke: the host grants no WINDOW meanwhile.
ByteSink BlockUntilBroken(const std::shared_ptr<Channel>& ch) {
  return [ch](std::string_view) -> Result<void> {
    for (int i = 0; i < 500 && !ch->broken(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Ok();
  };
}

TEST(ChannelTest, DataBeyondTheGrantedWindowEndsTheChannel) {
  constexpr std::uint32_t kWindow = 64 * 1024;
  auto [host, agent_end] = MemoryTransport::Pair();
  // A hostile agent: answers FILE_READ with twice the window at once, ignoring flow control.
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    if (f.type != Type::kFileRead) return;
    for (int i = 0; i < 4; ++i) a.Send(Type::kData, f.stream, std::string(kWindow / 2, 'x'));
  });
  auto ch = Channel::Open(std::move(host), {.initial_window = kWindow});
  ASSERT_TRUE(ch.ok());
  auto r = (*ch)->ReadFileTo("/f", BlockUntilBroken(*ch));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message(), HasSubstr("window the host granted"));
  EXPECT_TRUE((*ch)->broken());
}

TEST(ChannelTest, OutputBeyondTheWindowEndsTheChannelToo) {
  constexpr std::uint32_t kWindow = 64 * 1024;
  auto [host, agent_end] = MemoryTransport::Pair();
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    if (f.type != Type::kExec) return;
    a.Send(Type::kStarted, f.stream, proto::Started{7}.Encode());
    // Exactly the window is allowed; one byte more is not.
    a.Send(Type::kOutput, f.stream, Out(1, std::string(kWindow, 'o')));
    a.Send(Type::kOutput, f.stream, Out(2, "!"));
  });
  auto ch = Channel::Open(std::move(host), {.initial_window = kWindow});
  ASSERT_TRUE(ch.ok());
  std::shared_ptr<Channel> c = *ch;
  auto exit = c->Exec({.argv = {"flood"}},
                      {[&](std::string_view) { (void)BlockUntilBroken(c)(""); }, nullptr});
  ASSERT_FALSE(exit.ok());
  EXPECT_THAT(exit.error().message(), HasSubstr("1 bytes on stream"));
}

TEST(ChannelTest, EndlessEmptyFramesEndTheChannel) {
  auto [host, agent_end] = MemoryTransport::Pair();
  // Empty DATA frames carry no window bytes; their number is bounded instead.
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    if (f.type != Type::kFileRead) return;
    for (int i = 0; i < 100000 && !a.closed(); ++i) a.Send(Type::kData, f.stream);
  });
  auto ch = Channel::Open(std::move(host));
  ASSERT_TRUE(ch.ok());
  auto r = (*ch)->ReadFileTo("/f", BlockUntilBroken(*ch));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("unread frames"));
}

TEST(ChannelTest, BigFramesOutsideTheWindowAreBoundedToo) {
  auto [host, agent_end] = MemoryTransport::Pair();
  // One DATA byte the host's sink sits on, then frames no window counts, 512 KiB each: without
  // a byte bound 64Ki of them (32 GiB) would be queued before the frame-count bound.
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    if (f.type != Type::kFileRead) return;
    a.Send(Type::kData, f.stream, "x");
    const std::string big(512 * 1024, 'e');
    for (int i = 0; i < 64 && !a.closed(); ++i) a.Send(Type::kClose, f.stream, big);
  });
  auto ch = Channel::Open(std::move(host));
  ASSERT_TRUE(ch.ok());
  auto r = (*ch)->ReadFileTo("/f", BlockUntilBroken(*ch));
  ASSERT_FALSE(r.ok());
  // The frames queued before the bound are still read (here: an unexpected CLOSE), but the
  // channel is over, and says why to the next operation.
  ASSERT_TRUE((*ch)->broken());
  auto next = (*ch)->Stat("/g");
  ASSERT_FALSE(next.ok());
  EXPECT_THAT(next.error().message(), HasSubstr("outside the window"));
}

TEST(ChannelTest, AFrameTrickledWithoutEndIsSilence) {
  auto [host, agent_end] = MemoryTransport::Pair();
  std::atomic<bool> stop{false};
  std::thread trickle;
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    if (f.type != Type::kStat || trickle.joinable()) return;
    // A header announcing 1000 bytes, then one byte per 10 ms: never a whole frame.
    trickle = std::thread([&a, &stop, id = f.stream] {
      std::string frame;
      proto::AppendFrame(frame, Type::kData, id, std::string(1000, 'x'));
      for (std::size_t i = 0; i < frame.size() && !stop; ++i) {
        a.SendRaw(frame.substr(i, 1));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  });
  ChannelOptions o;
  o.keepalive_interval = std::chrono::milliseconds(20);
  o.keepalive_timeout = std::chrono::milliseconds(300);
  auto ch = Channel::Open(std::move(host), o);
  ASSERT_TRUE(ch.ok());
  auto st = (*ch)->Stat("/f");
  stop = true;
  if (trickle.joinable()) trickle.join();
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.error().message(), HasSubstr("no answer"));
}

TEST(ChannelTest, AnExecWithoutExitEndsAtItsTimeoutPlusGrace) {
  auto [host, agent_end] = MemoryTransport::Pair();
  // Alive (answers PING) but never ends the command: output without end, no EXIT.
  std::atomic<bool> stop{false};
  std::thread flood;
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    if (f.type == Type::kPing) a.Send(Type::kPong, 0, f.payload);
    if (f.type != Type::kExec) return;
    a.Send(Type::kStarted, f.stream, proto::Started{5}.Encode());
    flood = std::thread([&a, &stop, id = f.stream] {
      while (!stop && !a.closed()) {
        a.Send(Type::kOutput, id, Out(1, "y\n"));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  });
  ChannelOptions o;
  o.keepalive_interval = std::chrono::milliseconds(20);
  o.exec_deadline_grace = std::chrono::milliseconds(300);
  auto ch = Channel::Open(std::move(host), o);
  ASSERT_TRUE(ch.ok());
  const auto start = std::chrono::steady_clock::now();
  Collected c;
  auto exit = (*ch)->Exec({.argv = {"yes"}, .timeout_ms = 200}, c.callbacks());
  const auto took = std::chrono::steady_clock::now() - start;
  stop = true;
  if (flood.joinable()) flood.join();
  ASSERT_FALSE(exit.ok());
  EXPECT_EQ(exit.error().code(), ErrorCode::kTimeout);
  EXPECT_THAT(exit.error().message(), HasSubstr("did not end the command"));
  EXPECT_TRUE((*ch)->broken());
  // At 200 + 300 ms; the bound (3 s) only proves the wait ended near the deadline, not at the
  // keepalive timeout (15 s) or never.
  EXPECT_LT(took, std::chrono::seconds(3));
  EXPECT_FALSE(c.out.empty());
}

TEST(ChannelTest, TransportLossFailsInFlightAndLaterOperations) {
  auto [host, agent_end] = MemoryTransport::Pair();
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    if (f.type == Type::kExec) {
      a.Send(Type::kStarted, f.stream, proto::Started{9}.Encode());
      a.CloseTransport();  // the sandbox died under the command
    }
  });
  auto ch = Channel::Open(std::move(host));
  ASSERT_TRUE(ch.ok());
  Collected c;
  auto exit = (*ch)->Exec({.argv = {"sleep"}}, c.callbacks());
  ASSERT_FALSE(exit.ok());
  EXPECT_EQ(exit.error().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE((*ch)->broken());
  EXPECT_EQ((*ch)->Stat("/x").error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ((*ch)->Ping().error().code(), ErrorCode::kUnavailable);
}

TEST(ChannelTest, KeepAliveDeclaresASilentAgentLost) {
  auto [host, agent_end] = MemoryTransport::Pair();
  FakeAgent agent(std::move(agent_end), [](FakeAgent&, const Frame&) {});  // never answers
  ChannelOptions o;
  o.keepalive_interval = std::chrono::milliseconds(20);
  o.keepalive_timeout = std::chrono::milliseconds(200);
  auto ch = Channel::Open(std::move(host), o);
  ASSERT_TRUE(ch.ok());
  Collected c;
  auto exit = (*ch)->Exec({.argv = {"hang"}}, c.callbacks());
  ASSERT_FALSE(exit.ok());
  EXPECT_EQ(exit.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(exit.error().message(), HasSubstr("no answer"));
}

TEST(ChannelTest, AgentErrorsKeepTheirCodeAndTheChannelLives) {
  auto [host, agent_end] = MemoryTransport::Pair();
  FakeAgent agent(std::move(agent_end), [](FakeAgent& a, const Frame& f) {
    if (f.type == Type::kStat) {
      a.Send(Type::kError, f.stream,
             proto::ErrorPayload{proto::WireError::kNotFound, "no such file"}.Encode());
    } else if (f.type == Type::kExec) {
      a.Send(Type::kError, f.stream,
             proto::ErrorPayload{proto::WireError::kPermissionDenied, "denied"}.Encode());
    } else if (f.type == Type::kPing) {
      a.Send(Type::kPong, 0, f.payload);
    }
  });
  auto ch = Channel::Open(std::move(host));
  ASSERT_TRUE(ch.ok());
  auto st = (*ch)->Stat("/nope");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(st.error().message(), HasSubstr("/nope"));
  Collected c;
  auto ex = (*ch)->Exec({.argv = {"x"}}, c.callbacks());
  EXPECT_EQ(ex.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_TRUE((*ch)->Ping().ok());
  EXPECT_FALSE((*ch)->broken());
}

TEST(ChannelTest, FilesRoundTrip) {
  std::map<std::string, std::string> files;
  std::map<std::uint32_t, std::string> writing;  // stream -> path
  struct Reading {
    std::uint32_t stream = 0;
    std::string body;
    std::size_t pos = 0;
    std::uint64_t credit = 0;
  } reading;
  auto pump = [&](FakeAgent& a) {
    while (reading.stream != 0 && reading.credit > 0) {
      const std::size_t n = std::min<std::size_t>(
          {1000, static_cast<std::size_t>(reading.credit), reading.body.size() - reading.pos});
      if (n > 0)
        a.Send(Type::kData, reading.stream, std::string_view(reading.body).substr(reading.pos, n));
      reading.pos += n;
      reading.credit -= n;
      if (reading.pos == reading.body.size()) {
        a.Send(Type::kEnd, reading.stream);
        reading.stream = 0;
      }
    }
  };
  auto [host, agent_end] = MemoryTransport::Pair(3);
  FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
    switch (f.type) {
      case Type::kFileWrite:
        writing[f.stream] = proto::FileWrite::Decode(f.payload)->path;
        files[writing[f.stream]].clear();
        break;
      case Type::kData:
        files[writing[f.stream]] += f.payload;
        a.Send(Type::kWindow, f.stream,
               proto::Window{static_cast<std::uint32_t>(f.payload.size())}.Encode());
        break;
      case Type::kEnd:
        a.Send(Type::kOk, f.stream);
        break;
      case Type::kFileRead:
        // Sent within the credit the host grants, as the agent does (the host ends a channel
        // whose agent sends more).
        reading = {f.stream, files[proto::PathRequest::Decode(f.payload)->path], 0, a.window()};
        pump(a);
        break;
      case Type::kWindow:
        if (f.stream == reading.stream) {
          reading.credit += proto::Window::Decode(f.payload)->bytes;
          pump(a);
        }
        break;
      case Type::kList: {
        proto::ListResult r;
        for (const auto& [p, b] : files) r.entries.push_back({.name = p, .size = b.size()});
        a.Send(Type::kListResult, f.stream, r.Encode());
        break;
      }
      case Type::kMkdir:
      case Type::kRemove:
        a.Send(Type::kOk, f.stream);
        break;
      default:
        break;
    }
  });
  auto ch = Channel::Open(std::move(host), {.initial_window = 4096});
  ASSERT_TRUE(ch.ok());
  std::string body(50000, '\0');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 7);
  ASSERT_TRUE((*ch)->WriteFile("/w/f", body).ok());
  auto back = (*ch)->ReadFile("/w/f");
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(*back, body);
  auto list = (*ch)->List("/w");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].size, body.size());
  EXPECT_TRUE((*ch)->Mkdir("/w/d", 0755, true).ok());
  EXPECT_TRUE((*ch)->Remove("/w/d", true).ok());
}

TEST(ChannelTest, PortStreamEchoesAndCloses) {
  auto [host, agent_end] = MemoryTransport::Pair();
  FakeAgent agent(std::move(agent_end), [](FakeAgent& a, const Frame& f) {
    if (f.type == Type::kPortOpen) {
      if (proto::PortOpen::Decode(f.payload)->port == 1) {
        a.Send(Type::kError, f.stream,
               proto::ErrorPayload{proto::WireError::kUnavailable, "refused"}.Encode());
      } else {
        a.Send(Type::kOk, f.stream);
      }
    } else if (f.type == Type::kData) {
      a.Send(Type::kData, f.stream, "echo:" + f.payload);
    } else if (f.type == Type::kClose) {
      a.Send(Type::kClose, f.stream);
    }
  });
  auto ch = Channel::Open(std::move(host));
  ASSERT_TRUE(ch.ok());
  EXPECT_EQ((*ch)->OpenPort(1).error().code(), ErrorCode::kUnavailable);
  auto port = (*ch)->OpenPort(8080);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE((*port)->Write("hi").ok());
  char buf[3];
  std::string got;
  while (got.size() < 7) {
    auto n = (*port)->Read(buf);
    ASSERT_TRUE(n.ok());
    ASSERT_GT(*n, 0u);
    got.append(buf, *n);
  }
  EXPECT_EQ(got, "echo:hi");
  ASSERT_TRUE((*port)->CloseWrite().ok());
  auto n = (*port)->Read(buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

// ---- Watch (protocol 4): the host checks every event a (possibly hostile) agent sends ----

// A fake agent of protocol 4 that answers WATCH with OK and then `events` (raw payloads) as
// WATCH_EVENTS frames, and CLOSE with END.
struct WatchAgent {
  explicit WatchAgent(std::vector<std::string> events, std::uint16_t version = 4)
      : pair(MemoryTransport::Pair()),
        agent(std::move(pair.second), [events, version](FakeAgent& a, const Frame& f) {
          if (f.type == Type::kHello) {
            a.Send(Type::kWelcome, 0, proto::Welcome{version, "fake 4", 1}.Encode());
          } else if (f.type == Type::kWatch) {
            a.Send(Type::kOk, f.stream);
            for (const auto& p : events) a.Send(Type::kWatchEvents, f.stream, p);
          } else if (f.type == Type::kClose) {
            a.Send(Type::kEnd, f.stream);
          }
        }) {
    agent.answer_hello = false;
  }
  std::pair<std::unique_ptr<MemoryTransport>, std::unique_ptr<MemoryTransport>> pair;
  FakeAgent agent;
};

std::string OneEvent(std::uint8_t kind, std::string_view path, std::string_view old_path = "") {
  std::string out;
  proto::Writer w(out);
  w.AppendU32(1);
  w.AppendU8(kind);
  w.AppendU8(0);
  w.AppendStr(path);
  w.AppendStr(old_path);
  return out;
}

TEST(ChannelWatchTest, EventsArriveInOrderAndCloseEndsTheWatch) {
  proto::WatchEvents batch{{{proto::WatchEventKind::kCreate, true, "d", ""},
                            {proto::WatchEventKind::kMove, false, "d/b", "d/a"}}};
  WatchAgent fake({batch.Encode()});
  auto ch = Channel::Open(std::move(fake.pair.first));
  ASSERT_TRUE(ch.ok());
  auto w = (*ch)->Watch("/workspace", true);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  auto got = (*w)->Next(std::chrono::seconds(5));
  ASSERT_TRUE(got.ok() && got->has_value()) << (got.ok() ? "ended" : got.error().ToString());
  EXPECT_EQ(**got, batch.events);
  // Nothing more within the timeout: an empty list, the watch still open.
  auto none = (*w)->Next(std::chrono::milliseconds(50));
  ASSERT_TRUE(none.ok() && none->has_value());
  EXPECT_TRUE((*none)->empty());
  // Close from another thread wakes a waiting Next, which says the watch is over.
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (*w)->Close();
  });
  auto ended = (*w)->Next(std::chrono::seconds(30));
  closer.join();
  ASSERT_TRUE(ended.ok());
  EXPECT_FALSE(ended->has_value());
  EXPECT_FALSE((*ch)->broken());
}

TEST(ChannelWatchTest, HostileEventsBreakTheChannelWithTheReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {OneEvent(1, "/etc/shadow"), "path is absolute"},
      {OneEvent(1, std::string("a\0b", 3)), "NUL"},
      {OneEvent(1, "../../escape"), "'..' component"},
      {OneEvent(1, std::string(proto::kMaxWatchPath + 1, 'a')), "exceeds 4096"},
      {OneEvent(9, "a"), "unknown value 0x09"},
      {OneEvent(2, "a", "b"), "moves only"},
      {"\xff\xff\xff\xff", "cannot fit"},
  };
  for (const auto& [payload, why] : cases) {
    WatchAgent fake({payload});
    auto ch = Channel::Open(std::move(fake.pair.first));
    ASSERT_TRUE(ch.ok());
    auto w = (*ch)->Watch("/w", false);
    ASSERT_TRUE(w.ok()) << w.error().ToString();
    auto got = (*w)->Next(std::chrono::seconds(5));
    ASSERT_FALSE(got.ok()) << why;
    EXPECT_EQ(got.error().code(), ErrorCode::kInternal);
    EXPECT_THAT(got.error().message(), HasSubstr("malformed WATCH_EVENTS")) << why;
    EXPECT_THAT(got.error().message(), HasSubstr(why));
    EXPECT_TRUE((*ch)->broken());
  }
}

TEST(ChannelWatchTest, EventsBeyondTheWindowEndTheChannel) {
  constexpr std::uint32_t kWindow = 64 * 1024;
  // Each batch ~40 KiB: the second passes the 64 KiB the host granted.
  proto::WatchEvents big;
  for (int i = 0; i < 1000; ++i) {
    big.events.push_back({proto::WatchEventKind::kCreate, false,
                          "file-" + std::to_string(i) + std::string(20, 'x'), ""});
  }
  WatchAgent fake({big.Encode(), big.Encode(), big.Encode()});
  auto ch = Channel::Open(std::move(fake.pair.first), {.initial_window = kWindow});
  ASSERT_TRUE(ch.ok());
  auto w = (*ch)->Watch("/w", true);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  Result<std::optional<std::vector<proto::WatchEvent>>> got =
      std::optional<std::vector<proto::WatchEvent>>();
  for (int i = 0; i < 4; ++i) {
    got = (*w)->Next(std::chrono::seconds(5));
    if (!got.ok()) break;
  }
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(got.error().message(), HasSubstr("window the host granted"));
}

TEST(ChannelWatchTest, AnOlderAgentIsRefusedBeforeAnythingIsSent) {
  WatchAgent fake({}, /*version=*/3);
  auto ch = Channel::Open(std::move(fake.pair.first));
  ASSERT_TRUE(ch.ok());
  auto w = (*ch)->Watch("/w", true);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(w.error().message(), HasSubstr("protocol version 3"));
  EXPECT_FALSE((*ch)->broken());
}

// Keep-awake (version 6): never sent to an older agent (kUnsupported, no EXEC on the wire), and
// each agent's process list read in the layout of its version.
TEST(ChannelKeepAwakeTest, RefusedBelowVersion6AndListsReadByVersion) {
  const proto::ProcListResult list{{{42, "sleep", true, 0, true}}};
  for (std::uint16_t version : {std::uint16_t{5}, std::uint16_t{6}}) {
    auto [host, agent_end] = MemoryTransport::Pair();
    std::atomic<int> execs{0};
    FakeAgent agent(std::move(agent_end), [&](FakeAgent& a, const Frame& f) {
      if (f.type == Type::kExec) {
        ++execs;
        a.Send(Type::kStarted, f.stream, proto::Started{42}.Encode());
      }
      if (f.type == Type::kProcList) a.Send(Type::kProcListResult, f.stream, list.Encode(version));
    });
    agent.welcome_version = version;
    auto ch = Channel::Open(std::move(host));
    ASSERT_TRUE(ch.ok()) << ch.error().ToString();
    proto::ExecRequest req;
    req.argv = {"sleep", "9"};
    req.flags = proto::kExecBackground | proto::kExecKeepAwake;
    auto p = (*ch)->Start(req);
    if (version < 6) {
      ASSERT_FALSE(p.ok());
      EXPECT_EQ(p.error().code(), ErrorCode::kUnsupported);
      EXPECT_THAT(p.error().message(), HasSubstr("keep_awake"));
    } else {
      ASSERT_TRUE(p.ok()) << p.error().ToString();
      auto pid = (*p)->WaitStarted();
      ASSERT_TRUE(pid.ok()) << pid.error().ToString();
      EXPECT_EQ(*pid, 42u);
    }
    auto procs = (*ch)->ListProcesses();
    ASSERT_TRUE(procs.ok()) << version << ": " << procs.error().ToString();
    ASSERT_EQ(procs->size(), 1u);
    EXPECT_EQ((*procs)[0].keep_awake, version >= 6);
    EXPECT_EQ(execs.load(), version >= 6 ? 1 : 0);
  }
}

// IDLE_QUERY (idle_action pause): the answer as sent; an agent that sends a state that cannot be
// (busy and idle at once) or none at all is refused without hanging the asking sweep; an older
// agent is not asked.
TEST(ChannelIdleTest, QueryAnsweredMalformedSilentAndOld) {
  {
    auto [host, agent_end] = MemoryTransport::Pair();
    FakeAgent agent(std::move(agent_end), [](FakeAgent& a, const Frame& f) {
      if (f.type == Type::kIdleQuery)
        a.Send(Type::kIdleState, f.stream, proto::IdleState{0, 4321}.Encode());
    });
    agent.welcome_version = 5;
    auto ch = Channel::Open(std::move(host));
    ASSERT_TRUE(ch.ok()) << ch.error().ToString();
    auto st = (*ch)->QueryIdle();
    ASSERT_TRUE(st.ok()) << st.error().ToString();
    EXPECT_EQ(st->holds, 0u);
    EXPECT_EQ(st->idle_ms, 4321u);
  }
  {
    auto [host, agent_end] = MemoryTransport::Pair();
    FakeAgent agent(std::move(agent_end), [](FakeAgent& a, const Frame& f) {
      if (f.type != Type::kIdleQuery) return;
      std::string bad = proto::IdleState{0, 5}.Encode();
      bad[3] = 1;  // holds 1 with idle_ms 5
      a.Send(Type::kIdleState, f.stream, bad);
    });
    agent.welcome_version = 5;
    auto ch = Channel::Open(std::move(host));
    ASSERT_TRUE(ch.ok());
    auto st = (*ch)->QueryIdle();
    EXPECT_FALSE(st.ok());
  }
  {
    auto [host, agent_end] = MemoryTransport::Pair();
    FakeAgent agent(std::move(agent_end), [](FakeAgent& a, const Frame& f) {
      if (f.type == Type::kPing) a.Send(Type::kPong, 0, f.payload);  // alive, never answers
    });
    agent.welcome_version = 5;
    ChannelOptions o;
    o.keepalive_interval = std::chrono::milliseconds(20);
    auto ch = Channel::Open(std::move(host), o);
    ASSERT_TRUE(ch.ok());
    const auto start = std::chrono::steady_clock::now();
    auto st = (*ch)->QueryIdle(std::chrono::milliseconds(200));
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code(), ErrorCode::kTimeout);
    EXPECT_THAT(st.error().message(), HasSubstr("did not answer IDLE_QUERY within 200 ms"));
    EXPECT_TRUE((*ch)->broken());
    EXPECT_LT(took, std::chrono::seconds(3));  // near the 200 ms, not the keepalive or never
  }
  {
    auto [host, agent_end] = MemoryTransport::Pair();
    std::atomic<bool> asked{false};
    FakeAgent agent(std::move(agent_end), [&](FakeAgent&, const Frame& f) {
      if (f.type == Type::kIdleQuery) asked = true;
    });
    agent.welcome_version = 4;
    auto ch = Channel::Open(std::move(host));
    ASSERT_TRUE(ch.ok());
    auto st = (*ch)->QueryIdle();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code(), ErrorCode::kUnsupported);
    EXPECT_THAT(st.error().message(), HasSubstr("protocol version 4"));
    EXPECT_FALSE(asked);
  }
}

}  // namespace
}  // namespace agvisor::channel
