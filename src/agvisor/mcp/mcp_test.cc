// The MCP dispatcher against a fake Place: JSON-RPC framing and errors, version negotiation,
// the tool schemas, argument checks, results, progress, session tracking, the stdio loop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <condition_variable>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "agvisor/api/codec.h"
#include "agvisor/mcp/session.h"
#include "agvisor/mcp/stdio.h"

namespace agvisor::mcp {
namespace {
namespace json = boost::json;
using ::testing::HasSubstr;

// What the fake records, shared by the place and its handles.
struct World {
  std::mutex mu;
  std::vector<SandboxSpec> created;
  std::vector<std::pair<std::string, bool>> removed;  // (container, erase)
  std::map<std::string, std::string> files;
  std::vector<std::string> last_argv;
  std::optional<bool> last_keep_awake;  // of the last StartBackground
  ProcessOptions last_exec;             // of the last exec (started as a command)
  std::string last_stdin;               // what it was given on stdin
  std::condition_variable cv;
  bool exec_started = false;  // a "hang" exec is waiting for a signal
  std::optional<int> signalled;
  std::vector<std::pair<std::string, LimitsUpdate>> updated;
};

// An exec's command: says "hello ", "oops" (stderr), "world\xff" and exits 3; "hang" instead
// waits until it is signalled (exit 128+N).
class FakeCommand final : public client::Command {
 public:
  FakeCommand(bool hang, World& w) : hang_(hang), w_(w) {}
  Result<void> Write(std::string_view data) override {
    std::lock_guard lock(w_.mu);
    w_.last_stdin.append(data);
    return Ok();
  }
  Result<void> CloseStdin() override { return Ok(); }
  Result<void> Resize(std::uint16_t, std::uint16_t) override { return Ok(); }
  Result<void> Signal(int signal) override {
    std::lock_guard lock(w_.mu);
    w_.signalled = signal;
    w_.cv.notify_all();
    return Ok();
  }
  Result<ProcessExit> Wait(const channel::ExecCallbacks& cb) override {
    ProcessExit exit;
    if (hang_) {
      std::unique_lock lock(w_.mu);
      w_.exec_started = true;
      w_.cv.notify_all();
      w_.cv.wait(lock, [&] { return w_.signalled.has_value(); });
      exit.exit_code = 128 + *w_.signalled;
      return exit;
    }
    cb.on_stdout("hello ");
    cb.on_stderr("oops");
    cb.on_stdout("world\xff");
    exit.exit_code = 3;
    return exit;
  }
  void Close() override {}
  std::uint32_t pid() const override { return 7; }

 private:
  bool hang_;
  World& w_;
};

class FakeHandle final : public client::SandboxHandle {
 public:
  FakeHandle(std::string name, World& w) : name_(std::move(name)), w_(w) {}
  const std::string& container_name() const override { return name_; }
  Result<ExecResult> Exec(const std::vector<std::string>&, const ExecOptions&) override {
    return Error::Unsupported("fake: MCP's exec starts a command (it may be cancelled)");
  }
  Result<std::unique_ptr<client::Command>> Start(const std::vector<std::string>& argv,
                                                 const ProcessOptions& o) override {
    {
      std::lock_guard lock(w_.mu);
      w_.last_argv = argv;
      w_.last_exec = o;
    }
    if (argv.back() == "missing") return Error::NotFound("exec: no such program 'missing'");
    return std::unique_ptr<client::Command>(
        std::make_unique<FakeCommand>(argv.back() == "hang", w_));
  }
  Result<std::uint32_t> StartBackground(const std::vector<std::string>& argv,
                                        const BackgroundOptions& o) override {
    std::lock_guard lock(w_.mu);
    w_.last_argv = argv;
    w_.last_keep_awake = o.keep_awake;
    return 42u;
  }
  Result<std::vector<ProcessInfo>> ListProcesses() override {
    return std::vector<ProcessInfo>{
        {.pid = 42, .argv0 = "sleep", .running = true, .keep_awake = true}};
  }
  Result<ProcessExit> AttachProcess(std::uint32_t, const channel::ExecCallbacks&) override {
    return Error::Unsupported("fake");
  }
  Result<void> Signal(std::uint32_t pid, int) override {
    if (pid != 42) return Error::NotFound("signal: no process " + std::to_string(pid));
    return Ok();
  }
  Result<void> Upload(std::string_view, std::string_view, const UploadOptions&) override {
    return Error::Unsupported("fake");
  }
  Result<void> Download(std::string_view, std::string_view, const DownloadOptions&) override {
    return Error::Unsupported("fake");
  }
  Result<std::unique_ptr<client::ByteStream>> OpenPort(std::uint16_t) override {
    return Error::Unsupported("fake");
  }
  Result<std::unique_ptr<client::Command>> Attach(std::uint32_t) override {
    return Error::Unsupported("fake");
  }
  Result<std::string> ReadFile(std::string_view path) override {
    std::lock_guard lock(w_.mu);
    auto it = w_.files.find(std::string(path));
    if (it == w_.files.end())
      return Error::NotFound("read " + std::string(path) + ": no such file");
    return it->second;
  }
  Result<std::string> ReadFilePrefix(std::string_view path, std::uint64_t max_bytes) override {
    return AGVISOR_TRY(ReadFile(path)).substr(0, max_bytes);
  }
  Result<void> WriteFile(std::string_view path, std::string_view data, std::uint32_t) override {
    std::lock_guard lock(w_.mu);
    w_.files[std::string(path)] = std::string(data);
    return Ok();
  }
  Result<FileEntry> Stat(std::string_view path) override {
    auto data = AGVISOR_TRY(ReadFile(path));
    FileEntry e;
    e.name = std::string(path);
    e.size = data.size();
    return e;
  }
  Result<std::vector<FileEntry>> ListDir(std::string_view) override {
    return std::vector<FileEntry>{{.name = "a.txt", .size = 3}};
  }
  Result<void> Mkdir(std::string_view, bool, std::uint32_t) override { return Ok(); }
  Result<void> RemovePath(std::string_view, bool) override { return Ok(); }
  Result<SandboxInfo> Info() override { return SandboxInfo{.container_name = name_}; }
  Result<std::unique_ptr<client::DirWatch>> Watch(std::string_view, bool) override {
    return Error::Unsupported("fake");
  }
  void SetAutoResume(bool yes) override { auto_resume_ = yes; }
  bool auto_resume() const override { return auto_resume_; }

 private:
  std::string name_;
  World& w_;
  bool auto_resume_ = true;
};

class FakePlace final : public client::Place {
 public:
  explicit FakePlace(World& w) : w_(w) {}
  Result<client::Created> Create(const SandboxSpec& spec) override {
    if (spec.image == "bad") return Error::InvalidArgument("image 'bad' is refused");
    std::lock_guard lock(w_.mu);
    w_.created.push_back(spec);
    client::Created c;
    c.handle =
        std::make_unique<FakeHandle>(spec.name ? ContainerNameFor(*spec.name)
                                               : "agvisor-anon" + std::to_string(w_.created.size()),
                                     w_);
    c.name = spec.name;
    return c;
  }
  Result<std::unique_ptr<client::SandboxHandle>> Open(std::string_view name) override {
    return std::unique_ptr<client::SandboxHandle>(
        std::make_unique<FakeHandle>(std::string(name), w_));
  }
  Result<std::vector<SandboxInfo>> List() override {
    return std::vector<SandboxInfo>{{.container_name = "agvisor-anon1", .state = "running"}};
  }
  Result<void> Remove(std::string_view name, bool erase) override {
    std::lock_guard lock(w_.mu);
    w_.removed.emplace_back(std::string(name), erase);
    return Ok();
  }
  Result<void> Pause(std::string_view) override { return Ok(); }
  Result<void> Resume(std::string_view) override { return Ok(); }
  Result<LiveLimits> Update(std::string_view name, const LimitsUpdate& u) override {
    std::lock_guard lock(w_.mu);
    w_.updated.emplace_back(std::string(name), u);
    return LiveLimits{.cpus = u.cpus.value_or(2),
                      .memory_bytes = u.memory ? 1LL << 30 : 2LL << 30,
                      .pids = u.pids.value_or(512),
                      .source = "fake"};
  }
  void SetAutoResume(bool) override {}
  Result<SandboxStats> Stats(const SandboxInfo&) override { return Error::Unsupported("fake"); }

 private:
  World& w_;
};

class McpTest : public ::testing::Test {
 protected:
  World world_;
  FakePlace place_{world_};
  Session session_{place_};

  json::object Call(std::string_view message, std::vector<json::object>* notes = nullptr) {
    std::string answer = session_.Handle(message, [notes](std::string_view n) {
      if (notes) notes->push_back(json::parse(n).as_object());
    });
    return json::parse(answer).as_object();
  }
  json::object Tool(std::string_view name, const json::object& args) {
    json::object req{{"jsonrpc", "2.0"},
                     {"id", 7},
                     {"method", "tools/call"},
                     {"params", {{"name", name}, {"arguments", args}}}};
    auto a = Call(json::serialize(req));
    EXPECT_EQ(a.at("id"), 7);
    return a.at("result").as_object();
  }
  static std::string Text(const json::object& result) {
    return std::string(result.at("content").as_array().at(0).at("text").as_string());
  }
};

TEST_F(McpTest, MalformedJsonIsAParseError) {
  auto a = Call("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ");
  EXPECT_TRUE(a.at("id").is_null());
  EXPECT_EQ(a.at("error").at("code"), -32700);
  EXPECT_THAT(std::string(a.at("error").at("message").as_string()), HasSubstr("malformed JSON"));
}

TEST_F(McpTest, UnknownMethodAndBadRequests) {
  auto a = Call(R"({"jsonrpc":"2.0","id":"x","method":"resources/list"})");
  EXPECT_EQ(a.at("id"), "x");
  EXPECT_EQ(a.at("error").at("code"), -32601);
  EXPECT_THAT(std::string(a.at("error").at("message").as_string()),
              HasSubstr("unknown method 'resources/list'"));
}

TEST_F(McpTest, BatchesAndNotifications) {
  EXPECT_EQ(session_.Handle(R"({"jsonrpc":"2.0","method":"notifications/initialized"})"), "");
  auto a = json::parse(session_.Handle(
      R"([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"x"},5])"));
  ASSERT_TRUE(a.is_array());
  ASSERT_EQ(a.as_array().size(), 2u);
  EXPECT_EQ(a.as_array()[0].at("result"), json::object{});
  EXPECT_EQ(a.as_array()[1].at("error").at("code"), -32600);
}

TEST_F(McpTest, InitializeNegotiatesTheVersion) {
  auto a = Call(
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})");
  EXPECT_EQ(a.at("result").at("protocolVersion"), "2025-03-26");
  EXPECT_EQ(a.at("result").at("serverInfo").at("name"), "agvisor");
  EXPECT_TRUE(a.at("result").at("capabilities").as_object().contains("tools"));
  EXPECT_EQ(session_.protocol_version(), "2025-03-26");
  a = Call(
      R"({"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"1999-01-01"}})");
  EXPECT_EQ(a.at("result").at("protocolVersion"), json::value(kProtocolVersions[0]));
}

TEST_F(McpTest, EveryToolHasADescriptionAndAnObjectSchema) {
  auto a = Call(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
  std::set<std::string> names;
  for (const auto& t : a.at("result").at("tools").as_array()) {
    const std::string name(t.at("name").as_string());
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_GT(t.at("description").as_string().size(), 20u) << name;
    const auto& s = t.at("inputSchema").as_object();
    EXPECT_EQ(s.at("type"), "object") << name;
    EXPECT_EQ(s.at("additionalProperties"), false) << name;
    for (const auto& p : s.at("properties").as_object()) {
      EXPECT_TRUE(p.value().as_object().contains("type")) << name << "." << p.key();
    }
  }
  for (const char* want :
       {"create_sandbox",     "list_sandboxes", "stop_sandbox",     "delete_sandbox",
        "update_sandbox",     "exec",           "read_file",        "write_file",
        "list_files",         "start_process",  "list_processes",   "kill_process",
        "desktop_screenshot", "desktop_click",  "desktop_move",     "desktop_type",
        "desktop_key",        "desktop_scroll", "snapshot_sandbox", "egress_log"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
}

TEST_F(McpTest, BadArgumentsAreToolErrorsNamingTheArgument) {
  auto r = Tool("exec", {{"sandbox", "box"}, {"command", "true"}, {"timeout", "10"}});
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_EQ(Text(r), "agvisor: exec: argument 'timeout' must be a number (got a string)");
  r = Tool("exec", {{"command", "true"}});
  EXPECT_EQ(Text(r), "agvisor: exec: argument 'sandbox' is required");
  r = Tool("exec", {{"sandbox", "box"}, {"comand", "true"}});
  EXPECT_THAT(Text(r), HasSubstr("exec: unknown argument 'comand' (known: "));
  r = Tool("exec", {{"sandbox", "box"}});
  EXPECT_THAT(Text(r), HasSubstr("give exactly one of 'command'"));
  r = Tool("exec", {{"sandbox", "box"}, {"command", "true"}, {"timeout", 0}});
  EXPECT_THAT(Text(r), HasSubstr("'timeout' must be more than 0"));
  r = Tool("exec", {{"sandbox", "box"}, {"command", "true"}, {"env", {{"A", 1}}}});
  EXPECT_THAT(Text(r), HasSubstr("argument 'env'.A must be a string"));
  r = Tool("desktop_click", {{"sandbox", "box"}, {"x", 1}, {"y", 2}, {"button", "up"}});
  EXPECT_THAT(Text(r), HasSubstr("must be one of \"left\", \"middle\", \"right\""));
  r = Tool("exec", {{"sandbox", "no/such"}, {"command", "true"}});
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_TRUE(world_.last_argv.empty());  // refused before anything ran
}

TEST_F(McpTest, UpdateSandboxPassesOnlyTheLimitsGiven) {
  auto r = Tool("update_sandbox", {{"sandbox", "box"}, {"memory", "1g"}, {"cpus", 0.5}});
  ASSERT_FALSE(r.contains("isError")) << Text(r);
  EXPECT_EQ(r.at("structuredContent").at("sandbox"), "agvisor-box");
  EXPECT_EQ(r.at("structuredContent").at("memory_bytes"), 1LL << 30);
  ASSERT_EQ(world_.updated.size(), 1u);
  EXPECT_EQ(world_.updated[0].first, "agvisor-box");
  EXPECT_EQ(world_.updated[0].second.memory, "1g");
  EXPECT_EQ(world_.updated[0].second.cpus, 0.5);
  EXPECT_FALSE(world_.updated[0].second.pids.has_value());
  r = Tool("update_sandbox", {{"sandbox", "box"}, {"pids", 0}});
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_EQ(world_.updated.size(), 1u);
}

TEST_F(McpTest, UnknownToolIsAnInvalidParamsError) {
  auto a = Call(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm_rf"}})");
  EXPECT_EQ(a.at("error").at("code"), -32602);
  EXPECT_THAT(std::string(a.at("error").at("message").as_string()),
              HasSubstr("unknown tool 'rm_rf'"));
}

TEST_F(McpTest, LibraryErrorsReadAsTheCliPrintsThem) {
  auto r = Tool("exec", {{"sandbox", "box"}, {"argv", {"missing"}}});
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_EQ(Text(r), "agvisor: exec: no such program 'missing'");
  r = Tool("create_sandbox", {{"image", "bad"}});
  EXPECT_EQ(Text(r), "agvisor: image 'bad' is refused");
}

TEST_F(McpTest, CreateTakesSecretsByNameOnly) {
  // Secrets by name only: the model names one of the operator's, never passes a value.
  auto r = Tool("create_sandbox",
                {{"egress", {{"allow_domains", {"api.example.com"}}}},
                 {"secrets", {{{"name", "API_KEY"}, {"hosts", {"api.example.com"}}}}}});
  ASSERT_FALSE(r.contains("isError")) << Text(r);
  ASSERT_EQ(world_.created[0].secrets.size(), 1u);
  EXPECT_EQ(world_.created[0].secrets[0].name, "API_KEY");
  EXPECT_FALSE(world_.created[0].secrets[0].value.has_value());
  r = Tool("create_sandbox",
           {{"egress", {{"allow_domains", {"api.example.com"}}}},
            {"secrets", {{{"name", "K"}, {"hosts", {"api.example.com"}}, {"value", "sk-x"}}}}});
  EXPECT_TRUE(r.contains("isError")) << Text(r);
  EXPECT_EQ(world_.created.size(), 1u);
}

TEST_F(McpTest, CreateTracksAndGivesADefaultLifetime) {
  auto r = Tool("create_sandbox", {{"memory", "512m"}, {"cpus", 0.5}});
  ASSERT_FALSE(r.contains("isError")) << Text(r);
  EXPECT_EQ(r.at("structuredContent").at("sandbox"), "agvisor-anon1");
  EXPECT_EQ(r.at("structuredContent").at("lifetime"), SessionOptions::kDefaultLifetime);
  ASSERT_EQ(world_.created.size(), 1u);
  EXPECT_EQ(world_.created[0].lifetime, SessionOptions::kDefaultLifetime);
  EXPECT_EQ(world_.created[0].limits.memory, "512m");
  r = Tool("create_sandbox",
           {{"name", "keep"}, {"lifetime", 60}, {"egress", {{"allow_domains", {"pypi.org"}}}}});
  ASSERT_FALSE(r.contains("isError")) << Text(r);
  EXPECT_EQ(world_.created[1].lifetime, 60);
  ASSERT_TRUE(world_.created[1].egress.has_value());
  EXPECT_EQ(world_.created[1].egress->allow_domains, std::vector<std::string>{"pypi.org"});
  EXPECT_EQ(session_.Tracked(), (std::vector<std::string>{"agvisor-anon1", "agvisor-keep"}));
  // Deleted by hand: no longer the session's to end.
  Tool("delete_sandbox", {{"sandbox", "keep"}});
  EXPECT_EQ(session_.EndSandboxes(), 1u);
  EXPECT_EQ(world_.removed, (std::vector<std::pair<std::string, bool>>{{"agvisor-keep", true},
                                                                       {"agvisor-anon1", false}}));
  EXPECT_TRUE(session_.Tracked().empty());
}

TEST_F(McpTest, ExecStreamsProgressWhenAskedAndReturnsTheResult) {
  std::vector<json::object> notes;
  auto a = Call(
      R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec","_meta":{"progressToken":"p1"},"arguments":{"sandbox":"agvisor-box","command":"echo hi","stdin":"in","env":{"A":"b"},"cwd":"/tmp"}}})",
      &notes);
  const auto& r = a.at("result").as_object();
  ASSERT_FALSE(r.contains("isError")) << Text(r);
  EXPECT_EQ(world_.last_argv, (std::vector<std::string>{"sh", "-c", "echo hi"}));
  EXPECT_TRUE(world_.last_exec.stdin);
  EXPECT_EQ(world_.last_stdin, "in");
  EXPECT_EQ(world_.last_exec.env, std::vector<std::string>{"A=b"});
  EXPECT_EQ(world_.last_exec.cwd, "/tmp");
  const auto& s = r.at("structuredContent").as_object();
  EXPECT_EQ(s.at("exit_code"), 3);
  EXPECT_EQ(s.at("stdout"), "hello world\xef\xbf\xbd");  // invalid UTF-8 replaced
  EXPECT_EQ(s.at("stderr"), "oops");
  EXPECT_EQ(s.at("truncated"), false);
  EXPECT_EQ(json::parse(Text(r)), s);
  ASSERT_EQ(notes.size(), 3u);
  double last = 0;
  for (const auto& n : notes) {
    EXPECT_EQ(n.at("method"), "notifications/progress");
    EXPECT_EQ(n.at("params").at("progressToken"), "p1");
    const double p = n.at("params").at("progress").to_number<double>();
    EXPECT_GT(p, last);  // progress only grows
    last = p;
  }
  EXPECT_EQ(notes[1].at("params").at("message"), "oops");
  // Without a token: no notifications.
  notes.clear();
  Call(
      R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"exec","arguments":{"sandbox":"box","command":"x"}}})",
      &notes);
  EXPECT_TRUE(notes.empty());
}

// Issue 33: a notifications/cancelled for an exec in flight was ignored (the command ran on to
// its timeout); it kills the command now, and the call says so.
TEST_F(McpTest, CancelledNotificationStopsTheExecInFlight) {
  std::string answer;
  std::thread call([&] {
    answer = session_.Handle(
        R"({"jsonrpc":"2.0","id":"run-1","method":"tools/call","params":{"name":"exec","arguments":{"sandbox":"box","argv":["hang"],"timeout":600}}})");
  });
  {
    std::unique_lock lock(world_.mu);
    world_.cv.wait(lock, [&] { return world_.exec_started; });
  }
  // Another id: nothing happens; then the call's own.
  EXPECT_EQ(
      session_.Handle(
          R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"run-2"}})"),
      "");
  EXPECT_EQ(
      session_.Handle(
          R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"run-1","reason":"user"}})"),
      "");
  call.join();
  EXPECT_EQ(world_.signalled, SIGKILL);
  auto a = json::parse(answer).as_object();
  EXPECT_EQ(a.at("id"), "run-1");
  EXPECT_EQ(a.at("result").at("isError"), true);
  EXPECT_THAT(Text(a.at("result").as_object()), HasSubstr("cancelled by the client"));
}

TEST_F(McpTest, MessagesWithoutJsonRpc20AreRefused) {
  for (const char* m :
       {R"({"id":1,"method":"ping"})", R"({"jsonrpc":"1.0","id":1,"method":"ping"})"}) {
    auto a = Call(m);
    EXPECT_EQ(a.at("error").at("code"), -32600) << m;
    EXPECT_THAT(std::string(a.at("error").at("message").as_string()),
                HasSubstr("\"jsonrpc\": \"2.0\""));
  }
}

// Issue 33: list_files's description named fields its result did not have ("type", "mtime").
// Each field the description names in "entries (...)" is in every entry, and no other.
TEST_F(McpTest, ListFilesDescriptionNamesTheFieldsOfItsResult) {
  auto tools = json::parse(ToolListJson()).at("tools").as_array();
  std::string description;
  for (const auto& t : tools) {
    if (t.at("name") == "list_files") description = std::string(t.at("description").as_string());
  }
  const auto open = description.find("the fields ");
  ASSERT_NE(open, std::string::npos) << description;
  std::set<std::string> named;
  const std::string list = description.substr(open + 11, description.rfind('.') - open - 11);
  for (std::size_t pos = 0; pos <= list.size();) {
    auto end = std::min(list.find(';', pos), list.size());
    std::string item = list.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(' '));
    named.insert(item.substr(0, item.find(' ')));
    pos = end + 1;
  }
  world_.files["/w/a.txt"] = "abc";
  auto r = Tool("list_files", {{"sandbox", "box"}, {"path", "/w"}});
  const auto& entry = r.at("structuredContent").at("entries").at(0).as_object();
  std::set<std::string> got;
  for (const auto& kv : entry) got.insert(std::string(kv.key()));
  got.insert("link_target");  // symlinks only: the description says so
  EXPECT_EQ(got, named) << description;
  EXPECT_THAT(description, HasSubstr("link_target (symlinks only)"));
}

TEST_F(McpTest, FilesRoundTripTextAndBinary) {
  auto r = Tool("write_file", {{"sandbox", "box"}, {"path", "/w/a.txt"}, {"content", "héllo"}});
  ASSERT_FALSE(r.contains("isError")) << Text(r);
  r = Tool("read_file", {{"sandbox", "box"}, {"path", "/w/a.txt"}});
  EXPECT_EQ(r.at("structuredContent").at("content"), "héllo");
  EXPECT_EQ(r.at("structuredContent").at("encoding"), "utf-8");
  r = Tool("write_file",
           {{"sandbox", "box"}, {"path", "/b"}, {"content", "AP8A"}, {"encoding", "base64"}});
  EXPECT_EQ(world_.files["/b"], std::string("\0\xff\0", 3));
  r = Tool("read_file", {{"sandbox", "box"}, {"path", "/b"}});
  EXPECT_EQ(r.at("structuredContent").at("encoding"), "base64");
  EXPECT_EQ(r.at("structuredContent").at("content"), "AP8A");
  r = Tool("read_file", {{"sandbox", "box"}, {"path", "/none"}});
  EXPECT_EQ(Text(r), "agvisor: read /none: no such file");
  r = Tool("list_files", {{"sandbox", "box"}, {"path", "/w"}});
  EXPECT_EQ(r.at("structuredContent").at("entries").at(0).at("name"), "a.txt");
}

TEST_F(McpTest, BackgroundProcesses) {
  auto r = Tool("start_process", {{"sandbox", "box"}, {"argv", {"sleep", "100"}}});
  EXPECT_EQ(r.at("structuredContent").at("pid"), 42);
  EXPECT_EQ(world_.last_keep_awake, false);
  r = Tool("start_process", {{"sandbox", "box"}, {"argv", {"sleep", "100"}}, {"keep_awake", true}});
  EXPECT_EQ(r.at("structuredContent").at("pid"), 42);
  EXPECT_EQ(world_.last_keep_awake, true);
  r = Tool("list_processes", {{"sandbox", "box"}});
  EXPECT_EQ(r.at("structuredContent").at("processes").at(0).at("argv0"), "sleep");
  EXPECT_EQ(r.at("structuredContent").at("processes").at(0).at("keep_awake"), true);
  r = Tool("kill_process", {{"sandbox", "box"}, {"pid", 42}, {"signal", "KILL"}});
  EXPECT_EQ(r.at("structuredContent").at("signal"), 9);
  r = Tool("kill_process", {{"sandbox", "box"}, {"pid", 42}, {"signal", "NOPE"}});
  EXPECT_EQ(r.at("isError"), true);
}

TEST_F(McpTest, DesktopVerbsGoThroughTheHandle) {
  // The verbs need only the handle (client/desktop.h): on a sandbox without a desktop they say
  // so, and bad input is refused before anything runs.
  auto r = Tool("desktop_screenshot", {{"sandbox", "box"}});
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_THAT(Text(r), HasSubstr("has no desktop"));
  r = Tool("desktop_click", {{"sandbox", "box"}, {"x", 1}, {"y", 1}, {"button", "fourth"}});
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_THAT(Text(r), HasSubstr("'button'"));
}

TEST_F(McpTest, OlderProtocolsGetNoStructuredContent) {
  Call(
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}})");
  auto r = Tool("list_sandboxes", {});
  EXPECT_FALSE(r.contains("structuredContent"));
  EXPECT_THAT(Text(r), HasSubstr("agvisor-anon1"));
}

// egress_log reads agvisord's log through the session's option (agvisord's /mcp, `agvisor mcp
// --server`), with the route's JSON; without it, the error says where the log is.
TEST_F(McpTest, EgressLogReadsTheEnforcersRecordsWhereAgvisordKeepsThem) {
  auto r = Tool("egress_log", {{"sandbox", "box"}});
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_THAT(Text(r), HasSubstr("kept by agvisord"));
  SessionOptions o;
  std::vector<std::pair<std::string, std::size_t>> asked;
  o.egress_log = [&](const std::string& container, std::size_t last) {
    asked.emplace_back(container, last);
    egress::Decision d{.name = "api.test", .path = "/v1/models", .secret = "API_KEY"};
    return Result<std::string>(api::EgressLogJson("box", {d}));
  };
  Session with_log(place_, o);
  json::object req{
      {"jsonrpc", "2.0"},
      {"id", 1},
      {"method", "tools/call"},
      {"params", {{"name", "egress_log"}, {"arguments", {{"sandbox", "box"}, {"last", 5}}}}}};
  auto a = json::parse(with_log.Handle(json::serialize(req))).as_object();
  const auto& res = a.at("result").as_object();
  ASSERT_FALSE(res.contains("isError") && res.at("isError") == true) << json::serialize(a);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (std::pair<std::string, std::size_t>{"agvisor-box", 5}));
  const std::string text = Text(res);
  EXPECT_THAT(text, HasSubstr("\"path\":\"/v1/models\""));
  EXPECT_THAT(text, HasSubstr("\"secret\":\"API_KEY\""));
  EXPECT_EQ(Tool("egress_log", {{"sandbox", "box"}, {"last", 1001}}).at("isError"), true);
}

TEST(McpStdioTest, ServesLinesAndEndsTheSessionsSandboxesAtEof) {
  World world;
  FakePlace place(world);
  int in[2], out[2];
  ASSERT_EQ(::pipe(in), 0);
  ASSERT_EQ(::pipe(out), 0);
  std::thread server([&] {
    auto r = ServeStdio(place, {}, in[0], out[1]);
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(*r, 1u);
    ::close(out[1]);
  });
  const std::string msgs =
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})"
      "\n"
      R"({"jsonrpc":"2.0","method":"notifications/initialized"})"
      "\n"
      "not json\n"
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_sandbox"}})"
      "\n";
  ASSERT_EQ(::write(in[1], msgs.data(), msgs.size()), static_cast<ssize_t>(msgs.size()));
  // Three answers (the notification has none), in any order for the calls.
  std::string got;
  char buf[4096];
  while (std::count(got.begin(), got.end(), '\n') < 3) {
    ssize_t n = ::read(out[0], buf, sizeof buf);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<std::size_t>(n));
  }
  EXPECT_THAT(got, HasSubstr("\"protocolVersion\":\"2025-06-18\""));
  EXPECT_THAT(got, HasSubstr("-32700"));
  EXPECT_THAT(got, HasSubstr("agvisor-anon1"));
  ::close(in[1]);  // the client goes away
  server.join();
  ::close(in[0]);
  ::close(out[0]);
  ASSERT_EQ(world.removed.size(), 1u);
  EXPECT_EQ(world.removed[0], (std::pair<std::string, bool>{"agvisor-anon1", false}));
}

}  // namespace
}  // namespace agvisor::mcp
