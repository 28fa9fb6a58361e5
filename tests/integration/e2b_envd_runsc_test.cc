// envd's services (src/agvisor/e2b/envd_service.h) against a real sandbox on runsc, without the
// HTTP layer: the events and answers the E2B SDK reads, byte for byte as Connect envelopes. The
// SDK itself runs against agvisord in web/test/e2b/envd.test.mjs.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "agvisor/client/place.h"
#include "agvisor/e2b/envd_service.h"
#include "tests/integration/test_env.h"

namespace agvisor::e2b::envd {
namespace {

using agvisor::testing::CleanupRun;
using agvisor::testing::TestSpec;

struct Event {
  int flags = 0;
  std::string json;
};

// A stream's writer that records its envelopes (thread-safe) and can play a client that left.
class Recorder {
 public:
  StreamWriter Writer() {
    return [this](std::string_view bytes) -> Result<void> {
      std::lock_guard lock(mu_);
      if (gone_) return Error::Unavailable("client gone");
      reader_.Feed(bytes);
      while (true) {
        auto m = reader_.Next();
        if (!m.ok() || !*m) break;
        events_.push_back({(*m)->flags, (*m)->data});
      }
      cv_.notify_all();
      return Ok();
    };
  }
  // Waits until an event's JSON contains `text`.
  bool WaitFor(std::string_view text, std::chrono::seconds timeout = std::chrono::seconds(20)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const auto& e : events_) {
        if (e.json.find(text) != std::string::npos) return true;
      }
      return false;
    });
  }
  void Leave() {
    std::lock_guard lock(mu_);
    gone_ = true;
  }
  std::vector<Event> events() {
    std::lock_guard lock(mu_);
    return events_;
  }
  std::string All() {
    std::string all;
    for (const auto& e : events()) all += e.json + "\n";
    return all;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  connect::EnvelopeReader reader_{1 << 24};
  std::vector<Event> events_;
  bool gone_ = false;
};

class EnvdRunscTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto sb = CreateSandbox(TestSpec());
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    handle_ = new std::shared_ptr<client::SandboxHandle>(
        client::WrapSandbox(std::shared_ptr<Sandbox>(sb->release())));
    state_ = new EnvdState();
  }
  static void TearDownTestSuite() {
    delete state_;
    delete handle_;
    CleanupRun();
  }
  Caller Root() { return Caller{*handle_, "root", state_}; }
  static std::shared_ptr<client::SandboxHandle>* handle_;
  static EnvdState* state_;
};
std::shared_ptr<client::SandboxHandle>* EnvdRunscTest::handle_ = nullptr;
EnvdState* EnvdRunscTest::state_ = nullptr;

TEST_F(EnvdRunscTest, StartStreamsStartDataAndEnd) {
  Recorder r;
  CallStream(
      Root(), "/process.Process/Start",
      R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo out; echo err >&2; exit 3"]},)"
      R"("stdin":false})",
      {}, r.Writer());
  auto ev = r.events();
  ASSERT_GE(ev.size(), 4u) << r.All();
  EXPECT_NE(ev[0].json.find(R"({"event":{"start":{"pid":)"), std::string::npos) << r.All();
  EXPECT_NE(r.All().find(R"("stdout":"b3V0Cg==")"), std::string::npos) << r.All();
  EXPECT_NE(r.All().find(R"("stderr":"ZXJyCg==")"), std::string::npos) << r.All();
  EXPECT_NE(r.All().find(R"("exitCode":3,"exited":true,"status":"exit status 3")"),
            std::string::npos)
      << r.All();
  EXPECT_EQ(ev.back().flags, connect::kFlagEndStream);
  EXPECT_EQ(ev.back().json, "{}");
}

TEST_F(EnvdRunscTest, ABackgroundProcessByTagOutlivesItsStream) {
  Recorder first;
  std::thread t([&] {
    CallStream(Root(), "/process.Process/Start",
               R"({"process":{"cmd":"/bin/sh","args":["-c","echo ready; exec sleep 60"]},)"
               R"("tag":"sleeper","stdin":false})",
               {}, first.Writer());
  });
  ASSERT_TRUE(first.WaitFor("\"stdout\"")) << first.All();
  auto list = CallUnary(Root(), "/process.Process/List", "{}");
  ASSERT_FALSE(list.error) << list.error->message;
  EXPECT_NE(list.json.find(R"("tag":"sleeper")"), std::string::npos) << list.json;
  // The client leaves (noticed at the next write: a keep-alive or output): the process runs on.
  first.Leave();
  auto again = CallUnary(Root(), "/process.Process/SendInput",
                         R"({"process":{"tag":"sleeper"},"input":{"stdin":"eA=="}})");
  Recorder second;
  std::thread t2([&] {
    CallStream(Root(), "/process.Process/Connect", R"({"process":{"tag":"sleeper"}})", {},
               second.Writer());
  });
  ASSERT_TRUE(second.WaitFor("\"start\"")) << second.All();
  t.join();
  auto kill = CallUnary(Root(), "/process.Process/SendSignal",
                        R"({"process":{"tag":"sleeper"},"signal":"SIGNAL_SIGKILL"})");
  ASSERT_FALSE(kill.error) << kill.error->message;
  ASSERT_TRUE(second.WaitFor("\"end\"")) << second.All();
  t2.join();
  EXPECT_NE(second.All().find("signal: killed"), std::string::npos) << second.All();
  (void)again;
  auto gone = CallUnary(Root(), "/process.Process/SendSignal",
                        R"({"process":{"tag":"sleeper"},"signal":"SIGNAL_SIGKILL"})");
  ASSERT_TRUE(gone.error);
  EXPECT_EQ(gone.error->code, connect::Code::kNotFound);
}

TEST_F(EnvdRunscTest, StdinReachesTheProcessAndClosingItEndsCat) {
  Recorder r;
  std::thread t([&] {
    CallStream(Root(), "/process.Process/Start", R"({"process":{"cmd":"/bin/cat"},"stdin":true})",
               {}, r.Writer());
  });
  ASSERT_TRUE(r.WaitFor("\"start\"")) << r.All();
  auto pid_at = r.All().find("\"pid\":") + 6;
  std::string pid = r.All().substr(pid_at, r.All().find('}', pid_at) - pid_at);
  auto in = CallUnary(Root(), "/process.Process/SendInput",
                      R"({"process":{"pid":)" + pid + R"(},"input":{"stdin":"aGVsbG8K"}})");
  ASSERT_FALSE(in.error) << in.error->message;
  ASSERT_TRUE(r.WaitFor(R"("stdout":"aGVsbG8K")")) << r.All();
  auto closed =
      CallUnary(Root(), "/process.Process/CloseStdin", R"({"process":{"pid":)" + pid + "}}");
  ASSERT_FALSE(closed.error) << closed.error->message;
  ASSERT_TRUE(r.WaitFor("exit status 0")) << r.All();
  t.join();
}

TEST_F(EnvdRunscTest, APtyEchoesAndResizes) {
  Recorder r;
  std::thread t([&] {
    CallStream(Root(), "/process.Process/Start",
               R"({"process":{"cmd":"/bin/sh"},"pty":{"size":{"cols":100,"rows":30}}})", {},
               r.Writer());
  });
  ASSERT_TRUE(r.WaitFor("\"start\"")) << r.All();
  auto pid_at = r.All().find("\"pid\":") + 6;
  std::string pid = r.All().substr(pid_at, r.All().find('}', pid_at) - pid_at);
  auto resize =
      CallUnary(Root(), "/process.Process/Update",
                R"({"process":{"pid":)" + pid + R"(},"pty":{"size":{"cols":91,"rows":7}}})");
  ASSERT_FALSE(resize.error) << resize.error->message;
  // "stty size; exit\n"
  auto in =
      CallUnary(Root(), "/process.Process/SendInput",
                R"({"process":{"pid":)" + pid + R"(},"input":{"pty":"c3R0eSBzaXplOyBleGl0Cg=="}})");
  ASSERT_FALSE(in.error) << in.error->message;
  ASSERT_TRUE(r.WaitFor("\"end\"")) << r.All();
  t.join();
  EXPECT_NE(r.All().find("\"pty\":"), std::string::npos) << r.All();
}

TEST_F(EnvdRunscTest, FilesystemCallsAndFiles) {
  auto c = Root();
  auto w = WriteFiles(c, {{"/tmp/e2b/a/b.txt", "hello"}, {"/tmp/e2b/c.txt", ""}});
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_EQ((*w)[0].name, "b.txt");
  auto stat = CallUnary(c, "/filesystem.Filesystem/Stat", R"({"path":"/tmp/e2b/a/b.txt"})");
  ASSERT_FALSE(stat.error) << stat.error->message;
  EXPECT_NE(stat.json.find(R"("type":"FILE_TYPE_FILE")"), std::string::npos) << stat.json;
  EXPECT_NE(stat.json.find(R"("size":"5")"), std::string::npos) << stat.json;
  auto list = CallUnary(c, "/filesystem.Filesystem/ListDir", R"({"path":"/tmp/e2b","depth":2})");
  ASSERT_FALSE(list.error) << list.error->message;
  EXPECT_NE(list.json.find(R"("path":"/tmp/e2b/a/b.txt")"), std::string::npos) << list.json;
  auto mk = CallUnary(c, "/filesystem.Filesystem/MakeDir", R"({"path":"/tmp/e2b/d"})");
  ASSERT_FALSE(mk.error) << mk.error->message;
  auto again = CallUnary(c, "/filesystem.Filesystem/MakeDir", R"({"path":"/tmp/e2b/d"})");
  ASSERT_TRUE(again.error);
  EXPECT_EQ(again.error->code, connect::Code::kAlreadyExists);
  auto mv = CallUnary(c, "/filesystem.Filesystem/Move",
                      R"({"source":"/tmp/e2b/a/b.txt","destination":"/tmp/e2b/d/moved.txt"})");
  ASSERT_FALSE(mv.error) << mv.error->message;
  EXPECT_NE(mv.json.find(R"("name":"moved.txt")"), std::string::npos) << mv.json;
  std::string got;
  std::uint64_t size = 99;
  auto read = ReadFileTo(
      c, "/tmp/e2b/d/moved.txt",
      [&](std::uint64_t n) -> Result<void> {
        size = n;
        return Ok();
      },
      channel::AppendingSink(got));
  ASSERT_TRUE(read.ok()) << read.error().ToString();
  EXPECT_EQ(got, "hello");
  EXPECT_EQ(size, 5u);
  auto rm = CallUnary(c, "/filesystem.Filesystem/Remove", R"({"path":"/tmp/e2b/d"})");
  ASSERT_FALSE(rm.error) << rm.error->message;
  auto missing = CallUnary(c, "/filesystem.Filesystem/Stat", R"({"path":"/tmp/e2b/d"})");
  ASSERT_TRUE(missing.error);
  EXPECT_EQ(missing.error->code, connect::Code::kNotFound);
  auto nofile = ReadFileTo(
      c, "/tmp/e2b/nope", [](std::uint64_t) -> Result<void> { return Ok(); },
      channel::AppendingSink(got));
  EXPECT_EQ(nofile.error().code(), ErrorCode::kNotFound);
}

TEST_F(EnvdRunscTest, WatchDirAndTheWatcherApi) {
  auto c = Root();
  ASSERT_TRUE(WriteFiles(c, {{"/tmp/ew/keep", ""}}).ok());
  auto created = CallUnary(c, "/filesystem.Filesystem/CreateWatcher", R"({"path":"/tmp/ew"})");
  ASSERT_FALSE(created.error) << created.error->message;
  auto id_at = created.json.find("\"watcherId\":\"") + 13;
  std::string id = created.json.substr(id_at, created.json.find('"', id_at) - id_at);
  Recorder r;
  StreamOptions o;
  o.keepalive = std::chrono::milliseconds(200);
  std::thread t([&] {
    CallStream(c, "/filesystem.Filesystem/WatchDir", R"({"path":"/tmp/ew","includeEntry":true})", o,
               r.Writer());
  });
  ASSERT_TRUE(r.WaitFor(R"({"start":{}})")) << r.All();
  ASSERT_TRUE(WriteFiles(c, {{"/tmp/ew/new.txt", "x"}}).ok());
  ASSERT_TRUE(r.WaitFor(R"("name":"new.txt","type":"EVENT_TYPE_CREATE")")) << r.All();
  r.Leave();
  t.join();  // the keep-alive finds the client gone and ends the watch
  auto events =
      CallUnary(c, "/filesystem.Filesystem/GetWatcherEvents", R"({"watcherId":")" + id + "\"}");
  ASSERT_FALSE(events.error) << events.error->message;
  EXPECT_NE(events.json.find("new.txt"), std::string::npos) << events.json;
  auto removed =
      CallUnary(c, "/filesystem.Filesystem/RemoveWatcher", R"({"watcherId":")" + id + "\"}");
  ASSERT_FALSE(removed.error);
  auto again =
      CallUnary(c, "/filesystem.Filesystem/GetWatcherEvents", R"({"watcherId":")" + id + "\"}");
  ASSERT_TRUE(again.error);
  EXPECT_EQ(again.error->code, connect::Code::kNotFound);
}

// Hostile requests end cleanly with an error, whatever their bytes.
TEST_F(EnvdRunscTest, MalformedRequestsEndWithAnError) {
  for (std::string_view bad : {"", "{", "[]", R"({"process":{"cmd":""}})",
                               R"({"process":{"cmd":"/bin/true","args":[1]}})"}) {
    Recorder r;
    CallStream(Root(), "/process.Process/Start", bad, {}, r.Writer());
    auto ev = r.events();
    ASSERT_EQ(ev.size(), 1u) << bad;
    EXPECT_EQ(ev[0].flags, connect::kFlagEndStream);
    EXPECT_NE(ev[0].json.find("invalid_argument"), std::string::npos) << ev[0].json;
  }
  auto missing = CallUnary(Root(), "/process.Process/SendInput",
                           R"({"process":{"pid":999999},"input":{"stdin":"eA=="}})");
  ASSERT_TRUE(missing.error);
  EXPECT_EQ(missing.error->code, connect::Code::kNotFound) << missing.error->message;
}

}  // namespace
}  // namespace agvisor::e2b::envd
