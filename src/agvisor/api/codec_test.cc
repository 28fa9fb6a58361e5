#include "agvisor/api/codec.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/json.hpp>
#include <csignal>

namespace agvisor::api {
namespace {

namespace json = boost::json;

json::object Obj(const std::string& s) { return json::parse(s).as_object(); }

TEST(CodecTest, ErrorStatusesAndBodies) {
  EXPECT_EQ(HttpStatusFor(ErrorCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kConflict), 409);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kSandboxDied), 410);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kUnsupported), 501);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kInternal), 500);
  auto o = Obj(ErrorJson(Error::NotFound("no sandbox 'x'")));
  EXPECT_EQ(o["error"].as_object()["code"].as_string(), "not_found");
  EXPECT_EQ(o["error"].as_object()["message"].as_string(), "no sandbox 'x'");
  auto back = DecodeErrorJson(ErrorJson(Error::SandboxDied("oom")));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->code(), ErrorCode::kSandboxDied);
  EXPECT_EQ(back->message(), "oom");
  EXPECT_FALSE(DecodeErrorJson("{\"x\":1}"));
  EXPECT_FALSE(DecodeErrorJson("not json"));
}

TEST(CodecTest, Base64RoundTripsEveryLength) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (std::size_t n = 0; n <= all.size(); n += 1) {
    auto s = all.substr(0, n);
    auto d = Base64Decode(Base64Encode(s), "x");
    ASSERT_TRUE(d.ok()) << n;
    EXPECT_EQ(*d, s);
  }
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(*Base64Decode("Zm8", "x"), "fo");  // padding optional
  EXPECT_EQ(Base64Decode("Zm 8", "stdin_b64").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Base64Decode("Z", "x").error().code(), ErrorCode::kInvalidArgument);
}

TEST(CodecTest, SanitizeUtf8) {
  EXPECT_EQ(SanitizeUtf8("héllo ✓ 😀"), "héllo ✓ 😀");
  EXPECT_EQ(SanitizeUtf8(std::string("a\xff"
                                     "b",
                                     3)),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(SanitizeUtf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");                  // overlong
  EXPECT_EQ(SanitizeUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  EXPECT_EQ(SanitizeUtf8("\xe2\x9c"), "\xef\xbf\xbd\xef\xbf\xbd");                  // truncated
}

TEST(CodecTest, SandboxIds) {
  EXPECT_EQ(SandboxIdFor("agvisor-work"), "work");
  EXPECT_EQ(SandboxIdFor("/agvisor-a1b2"), "a1b2");
  EXPECT_EQ(*ContainerNameForId("work"), "agvisor-work");
  EXPECT_EQ(ContainerNameForId("../x").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ContainerNameForId("").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ContainerNameForId("-x").error().code(), ErrorCode::kInvalidArgument);
}

TEST(CodecTest, CreateRequestsCarrySecretsAndPoolsRefuseThem) {
  SandboxSpec spec;
  spec.egress = egress::EgressRules{.allow_domains = {"api.example.com"}};
  spec.secrets = {{.name = "API_KEY", .hosts = {"api.example.com"}, .value = "sk-1"},
                  {.name = "GIT_TOKEN", .hosts = {"a.example", "b.example"}, .header = "x-t"}};
  auto r = ParseCreateRequest(CreateRequestJson(spec));
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->spec.secrets, spec.secrets);  // the second by name: no value
  EXPECT_FALSE(r->spec.brokered.has_value());
  EXPECT_FALSE(ParseCreateRequest(R"({"secrets":{"name":"A"}})").ok());
  EXPECT_FALSE(ParseCreateRequest(R"({"secrets":[{"name":"A","placeholder":"x"}]})").ok());
  EXPECT_FALSE(ParseCreatePoolRequest(R"({"name":"p","secrets":[]})").ok());
}

TEST(CodecTest, ParseCreateRequest) {
  auto r = ParseCreateRequest(R"({"image":"img:1","limits":{"cpus":0.5,"memory":"512m","pids":64,
    "disk":"none"},"network":"none","lifetime":600,"idle_ttl":60,"name":"w","labels":{"k":"v"}})");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->spec.image, "img:1");
  EXPECT_DOUBLE_EQ(r->spec.limits.cpus, 0.5);
  EXPECT_EQ(r->spec.limits.memory, "512m");
  EXPECT_EQ(r->spec.limits.pids, 64);
  EXPECT_EQ(r->spec.limits.disk, "none");
  EXPECT_EQ(r->spec.network, "none");
  EXPECT_EQ(r->spec.lifetime, 600);
  EXPECT_EQ(r->spec.idle_ttl, 60);
  EXPECT_EQ(r->spec.name, "w");
  EXPECT_EQ(r->spec.labels.at("k"), "v");
  EXPECT_FALSE(r->pool);
  // Defaults for an empty body.
  auto d = ParseCreateRequest("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->spec.network, "bridge");
  EXPECT_FALSE(d->spec.name);
  EXPECT_EQ(d->spec.warm_shells, kDefaultWarmShells);
  EXPECT_EQ(ParseCreateRequest(R"({"pool":"p"})")->pool, "p");
  // warm_shells: a count, sent back only when not the default.
  auto w = ParseCreateRequest(R"({"warm_shells":0})");
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_EQ(w->spec.warm_shells, 0);
  EXPECT_EQ(ParseCreateRequest(CreateRequestJson(w->spec))->spec.warm_shells, 0);
  EXPECT_EQ(CreateRequestJson(SandboxSpec{}).find("warm_shells"), std::string::npos);
  EXPECT_FALSE(ParseCreateRequest(R"({"warm_shells":"2"})").ok());
  // allow_setuid: off unless asked, sent only when on.
  EXPECT_FALSE(d->spec.allow_setuid);
  auto u = ParseCreateRequest(R"({"allow_setuid":true})");
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->spec.allow_setuid);
  EXPECT_TRUE(ParseCreateRequest(CreateRequestJson(u->spec))->spec.allow_setuid);
  EXPECT_EQ(CreateRequestJson(SandboxSpec{}).find("allow_setuid"), std::string::npos);
  EXPECT_FALSE(ParseCreateRequest(R"({"allow_setuid":"yes"})").ok());
  PoolOptions setuid_pool;
  setuid_pool.spec.allow_setuid = true;
  auto pool = ParseCreatePoolRequest(CreatePoolRequestJson("p", setuid_pool));
  ASSERT_TRUE(pool.ok()) << pool.error().message();
  EXPECT_TRUE(pool->options.spec.allow_setuid);
  // platform: a string (its value is ValidateSpec's to judge), sent back only when set; null or
  // absent = the default.
  auto p = ParseCreateRequest(R"({"platform":"ptrace"})");
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->spec.platform, "ptrace");
  EXPECT_EQ(ParseCreateRequest(CreateRequestJson(p->spec))->spec.platform, "ptrace");
  EXPECT_EQ(CreateRequestJson(SandboxSpec{}).find("platform"), std::string::npos);
  EXPECT_EQ(ParseCreateRequest(R"({"platform":null})")->spec.platform, "");
  EXPECT_EQ(d->spec.platform, "");
  EXPECT_FALSE(ParseCreateRequest(R"({"platform":1})").ok());
  EXPECT_FALSE(ParseCreateRequest(R"({"pool":"p","platform":"ptrace"})").ok());  // the pool's
  // idle_action: a word, sent back only when not destroy.
  auto a = ParseCreateRequest(R"({"idle_ttl":60,"idle_action":"stop","name":"n"})");
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(a->spec.idle_action, "stop");
  EXPECT_EQ(ParseCreateRequest(CreateRequestJson(a->spec))->spec.idle_action, "stop");
  EXPECT_EQ(CreateRequestJson(SandboxSpec{}).find("idle_action"), std::string::npos);
  EXPECT_FALSE(ParseCreateRequest(R"({"idle_action":1})").ok());
}

TEST(CodecTest, ParseCreateRequestRefusals) {
  auto msg = [](std::string_view body) {
    auto r = ParseCreateRequest(body);
    EXPECT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    return r.error().message();
  };
  EXPECT_NE(msg("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(msg("[1]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(msg(R"({"imgae":"x"})").find("unknown field \"imgae\""), std::string::npos);
  EXPECT_NE(msg(R"({"limits":{"cpu":1}})").find("limits: unknown field \"cpu\""),
            std::string::npos);
  EXPECT_NE(msg(R"({"limits":{"cpus":"1"}})").find("limits.cpus: must be a number"),
            std::string::npos);
  EXPECT_NE(msg(R"({"lifetime":1.5})").find("lifetime: must be a whole number"), std::string::npos);
  EXPECT_NE(msg(R"({"labels":{"a":1}})").find("labels"), std::string::npos);
}

TEST(CodecTest, ParseExecRequest) {
  auto r = ParseExecRequest(
      R"({"argv":["ls","-l"],"timeout":5,"env":{"A":"1"},"cwd":"/tmp","user":"nobody",
         "stdin_b64":"AAE=","encoding":"base64"})",
      false);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->argv, (std::vector<std::string>{"ls", "-l"}));
  EXPECT_DOUBLE_EQ(r->timeout, 5);
  EXPECT_EQ(r->env, (std::vector<std::string>{"A=1"}));
  EXPECT_EQ(r->input, std::string("\0\1", 2));
  EXPECT_TRUE(r->base64);
  auto c = ParseExecRequest(R"({"command":"echo hi","stdin":"x","env":["B=2"]})", false);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->argv, (std::vector<std::string>{"sh", "-c", "echo hi"}));
  EXPECT_EQ(c->input, "x");
  EXPECT_DOUBLE_EQ(c->timeout, 120);
  EXPECT_FALSE(c->base64);

  EXPECT_FALSE(ParseExecRequest("{}", false).ok());
  EXPECT_FALSE(ParseExecRequest(R"({"argv":[]})", false).ok());
  EXPECT_FALSE(ParseExecRequest(R"({"argv":["a"],"command":"b"})", false).ok());
  // A number, whatever its range (the core's check: agvisord_test).
  EXPECT_TRUE(ParseExecRequest(R"({"argv":["a"],"timeout":0})", false).ok());
  EXPECT_FALSE(ParseExecRequest(R"({"argv":["a"],"timeout":"1"})", false).ok());
  EXPECT_FALSE(ParseExecRequest(R"({"argv":["a"],"stdin":"x","stdin_b64":"eA=="})", false).ok());
  EXPECT_FALSE(ParseExecRequest(R"({"argv":["a"],"encoding":"hex"})", false).ok());
  EXPECT_FALSE(ParseExecRequest(R"({"argv":["a"],"pty":true})", false).ok());  // WebSocket only
}

TEST(CodecTest, ParseExecRequestWebSocket) {
  auto r =
      ParseExecRequest(R"({"argv":["sh"],"pty":true,"rows":40,"cols":120,"stdin":false})", true);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_TRUE(r->pty);
  EXPECT_EQ(r->rows, 40);
  EXPECT_EQ(r->cols, 120);
  EXPECT_FALSE(r->stdin);
  EXPECT_DOUBLE_EQ(r->timeout, 0);  // none by default on a stream
  EXPECT_TRUE(ParseExecRequest(R"({"argv":["a"],"timeout":0})", true).ok());
  EXPECT_FALSE(ParseExecRequest(R"({"argv":["a"],"rows":0})", true).ok());
  EXPECT_FALSE(ParseExecRequest(R"({"argv":["a"],"stdin":"data"})", true).ok());
  EXPECT_FALSE(ParseExecRequest(R"({"argv":["a"],"encoding":"text"})", true).ok());
}

TEST(CodecTest, ParseDesktopInputRequest) {
  using A = DesktopInput::Action;
  auto move = ParseDesktopInputRequest(R"({"action":"move","x":3,"y":4})");
  ASSERT_TRUE(move.ok()) << move.error().ToString();
  EXPECT_EQ(move->action, A::kMove);
  EXPECT_EQ(move->x, 3);
  EXPECT_EQ(move->y, 4);
  auto click = ParseDesktopInputRequest(R"({"action":"click","x":1,"y":2})");
  ASSERT_TRUE(click.ok());
  EXPECT_EQ(click->button, "left");
  EXPECT_EQ(click->count, 1);
  auto drag = ParseDesktopInputRequest(
      R"({"action":"drag","x":1,"y":2,"to_x":30,"to_y":40,"button":"middle"})");
  ASSERT_TRUE(drag.ok());
  EXPECT_EQ(drag->action, A::kDrag);
  EXPECT_EQ(drag->to_x, 30);
  EXPECT_EQ(drag->to_y, 40);
  EXPECT_EQ(drag->button, "middle");
  auto scroll = ParseDesktopInputRequest(R"({"action":"scroll","x":1,"y":2,"dx":-3})");
  ASSERT_TRUE(scroll.ok());
  EXPECT_EQ(scroll->dy, 0);
  EXPECT_EQ(scroll->dx, -3);
  EXPECT_EQ(ParseDesktopInputRequest(R"({"action":"type","text":"h\u00e9\n"})")->text,
            "h\xc3\xa9\n");
  EXPECT_EQ(ParseDesktopInputRequest(R"({"action":"key","keys":"ctrl+c"})")->text, "ctrl+c");
  // Each refusal names the field (or the action) that was wrong.
  const std::pair<const char*, const char*> bad[] = {
      {"", "action"},
      {R"({"action":"explode"})", "none of move, click"},
      {R"({"action":7})", "action"},
      {R"({"action":"move","x":1})", "\"y\" is required"},
      {R"({"action":"move","x":-1,"y":0})", "x: must be 0..65535"},
      {R"({"action":"move","x":1e12,"y":0})", "x: must be 0..65535"},
      {R"({"action":"move","x":1.5,"y":0})", "x: must be a whole number"},
      {R"({"action":"move","x":1,"y":2,"text":"a"})", "unknown field \"text\""},
      {R"({"action":"drag","x":1,"y":2,"to_x":3})", "\"to_y\" is required"},
      {R"({"action":"click","x":1,"y":2,"count":0})", "count: must be 1..10"},
      {R"({"action":"scroll","x":1,"y":2,"dy":1000})", "dy: must be -100..100"},
      {R"({"action":"type"})", "\"text\" is required"},
      {R"({"action":"key","keys":["a"]})", "keys: must be a string"},
      {"[1]", "JSON object"},
  };
  for (const auto& [body, words] : bad) {
    auto r = ParseDesktopInputRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << body;
    EXPECT_NE(r.error().message().find(words), std::string::npos)
        << body << ": " << r.error().message();
  }
}

TEST(CodecTest, ExecResultJson) {
  ExecResult r;
  r.exit_code = 3;
  r.out = std::string("a\xff", 2);
  r.err = "e";
  auto text = Obj(ExecResultJson(r, false));
  EXPECT_EQ(text["exit_code"].as_int64(), 3);
  EXPECT_EQ(text["stdout"].as_string(), "a\xef\xbf\xbd");
  EXPECT_EQ(text["encoding"].as_string(), "text");
  auto b64 = Obj(ExecResultJson(r, true));
  EXPECT_EQ(b64["stdout"].as_string(), Base64Encode(r.out));
  EXPECT_EQ(b64["timed_out"].as_bool(), false);
  EXPECT_EQ(b64["prestarted"].as_bool(), false);
  r.prestarted = true;
  EXPECT_EQ(Obj(ExecResultJson(r, false))["prestarted"].as_bool(), true);
}

TEST(CodecTest, SandboxJson) {
  SandboxView v;
  v.id = "w";
  v.info.container_name = "agvisor-w";
  v.info.name = "w";
  v.info.state = "exited";
  v.info.end_reason = EndReason::kOutOfMemory;
  auto o = Obj(SandboxJson(v));
  EXPECT_EQ(o["id"].as_string(), "w");
  EXPECT_EQ(o["end_reason"].as_string(), "out_of_memory");
  EXPECT_FALSE(o.contains("resumed"));
  v.info.end_reason = EndReason::kNone;
  v.info.name.reset();
  v.resumed = true;
  o = Obj(SandboxJson(v));
  EXPECT_TRUE(o["end_reason"].is_null());
  EXPECT_TRUE(o["name"].is_null());
  EXPECT_TRUE(o["resumed"].as_bool());
  EXPECT_FALSE(o.contains("platform"));  // not recorded (made before it was)
  v.info.platform = "ptrace";
  o = Obj(SandboxJson(v));
  EXPECT_EQ(o["platform"].as_string(), "ptrace");
  auto back = ParseSandboxJson(SandboxJson(v));
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(back->info.platform, "ptrace");
  auto list = Obj(SandboxListJson({v, v}));
  EXPECT_EQ(list["sandboxes"].as_array().size(), 2u);
}

// A live resize: the request both ends speak, and the limits in the answer.
TEST(CodecTest, UpdateRequestAndLimitsInTheSandbox) {
  auto u = ParseUpdateRequest(R"({"cpus":1.5,"memory":"1g","pids":64})");
  ASSERT_TRUE(u.ok()) << u.error().ToString();
  EXPECT_EQ(u->cpus, 1.5);
  EXPECT_EQ(u->memory, "1g");
  EXPECT_EQ(u->pids, 64);
  u = ParseUpdateRequest(R"({"memory":"256m"})");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->cpus.has_value());
  EXPECT_FALSE(u->pids.has_value());
  auto back = ParseUpdateRequest(UpdateRequestJson({.cpus = 0.5, .pids = 9}));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->cpus, 0.5);
  EXPECT_FALSE(back->memory.has_value());
  EXPECT_EQ(back->pids, 9);
  for (const char* bad : {R"({"shm":"1g"})", R"({"memory":512})", R"({"pids":"x"})", "[1]"}) {
    auto r = ParseUpdateRequest(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << bad;
  }

  SandboxView v;
  v.id = "w";
  v.info.container_name = "agvisor-w";
  EXPECT_FALSE(Obj(SandboxJson(v)).contains("live_limits"));  // lists, ended sandboxes
  v.info.limits =
      LiveLimits{.cpus = 0.5, .memory_bytes = 1LL << 30, .pids = 64, .source = "cgroup"};
  auto o = Obj(SandboxJson(v));
  EXPECT_EQ(o["live_limits"].at("memory_bytes").as_int64(), 1LL << 30);
  auto parsed = ParseSandboxJson(SandboxJson(v));
  ASSERT_TRUE(parsed.ok());
  ASSERT_TRUE(parsed->info.limits.has_value());
  EXPECT_EQ(parsed->info.limits->cpus, 0.5);
  EXPECT_EQ(parsed->info.limits->memory_bytes, 1LL << 30);
  EXPECT_EQ(parsed->info.limits->pids, 64);
  EXPECT_EQ(parsed->info.limits->source, "cgroup");
}

TEST(CodecTest, Processes) {
  auto r = ParseStartProcessRequest(R"({"command":"sleep 9","stdin":true,"timeout":0})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->argv.back(), "sleep 9");
  EXPECT_TRUE(r->options.stdin);
  EXPECT_FALSE(ParseStartProcessRequest(R"({"argv":["x"],"timeout":"-1"})").ok());
  auto l = Obj(ProcessListJson({{7, "sleep", true, 0}, {8, "true", false, 0}}));
  auto a = l["processes"].as_array();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(a[0].as_object()["exit_code"].is_null());
  EXPECT_EQ(a[1].as_object()["exit_code"].as_int64(), 0);
}

TEST(CodecTest, Signals) {
  EXPECT_EQ(*ParseSignalRequest(""), SIGTERM);
  EXPECT_EQ(*ParseSignalRequest(R"({"signal":9})"), 9);
  EXPECT_EQ(*ParseSignalRequest(R"({"signal":"SIGINT"})"), SIGINT);
  EXPECT_EQ(*ParseSignalRequest(R"({"signal":"KILL"})"), SIGKILL);
  EXPECT_EQ(*ParseSignal("15"), 15);
  EXPECT_FALSE(ParseSignal("SIGFOO").ok());
  EXPECT_FALSE(ParseSignal("0").ok());
  EXPECT_FALSE(ParseSignalRequest(R"({"signal":99})").ok());
}

TEST(CodecTest, Query) {
  std::map<std::string, std::string> q = {{"a", "1"},     {"b", "false"}, {"c", ""},
                                          {"d", "maybe"}, {"path", "/x"}, {"mode", "0755"}};
  EXPECT_TRUE(*QueryBool(q, "a", false));
  EXPECT_FALSE(*QueryBool(q, "b", true));
  EXPECT_TRUE(*QueryBool(q, "c", false));
  EXPECT_TRUE(*QueryBool(q, "missing", true));
  EXPECT_FALSE(QueryBool(q, "d", true).ok());
  EXPECT_EQ(*QueryPath(q), "/x");
  EXPECT_EQ(*QueryMode(q, 0644), 0755u);
  EXPECT_EQ(*QueryMode({}, 0644), 0644u);
  EXPECT_FALSE(QueryMode({{"mode", "9"}}, 0).ok());
  EXPECT_FALSE(QueryPath({}).ok());
  EXPECT_FALSE(QueryPath({{"path", "rel"}}).ok());
}

TEST(CodecTest, FilesJson) {
  FileEntry e;
  e.name = "f";
  e.kind = FileKind::kSymlink;
  e.mode = 0120777;
  e.size = 3;
  e.link_target = "/t";
  auto o = Obj(FileEntryJson(e));
  EXPECT_EQ(o["kind"].as_string(), "symlink");
  EXPECT_EQ(o["mode"].as_int64(), 0777);
  EXPECT_EQ(o["link_target"].as_string(), "/t");
  auto l = Obj(FileListJson("/d", {e}));
  EXPECT_EQ(l["path"].as_string(), "/d");
  EXPECT_EQ(l["entries"].as_array().size(), 1u);
}

TEST(CodecTest, ParseCreatePoolRequest) {
  auto r = ParseCreatePoolRequest(R"({"name":"p","size":1,"image":"i","limits":{"memory":"1g"}})");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->name, "p");
  EXPECT_EQ(r->options.size, 1);
  EXPECT_EQ(r->options.fill_parallelism, 1);  // the default, capped by the size
  EXPECT_EQ(r->options.spec.image, "i");
  EXPECT_EQ(r->options.spec.limits.memory, "1g");
  EXPECT_EQ(r->options.spec.platform, "");
  auto pt = ParseCreatePoolRequest(R"({"name":"p","size":1,"platform":"ptrace"})");
  ASSERT_TRUE(pt.ok()) << pt.error().ToString();
  EXPECT_EQ(pt->options.spec.platform, "ptrace");                             // every member's
  EXPECT_FALSE(ParseCreatePoolRequest(R"({"size":1})").ok());                 // no name
  EXPECT_FALSE(ParseCreatePoolRequest(R"({"name":"a/b"})").ok());             // bad name
  EXPECT_FALSE(ParseCreatePoolRequest(R"({"name":"p","lifetime":5})").ok());  // per create
  EXPECT_FALSE(ParseCreateRequest(R"({"pool":"p","image":"x"})").ok());
  EXPECT_TRUE(ParseCreateRequest(R"({"pool":"p","lifetime":60,"idle_ttl":10})").ok());
}

// The client's pool requests (client::Agvisord) read back as the daemon parses them, and a pool
// list as the daemon writes it.
TEST(CodecTest, PoolRequestsAndAnswersRoundTrip) {
  PoolOptions o;
  o.spec.image = "i";
  o.spec.limits.memory = "1g";
  o.spec.platform = "ptrace";
  o.size = 3;
  o.max_age = std::chrono::seconds(60);
  o.fill_parallelism = 2;
  auto pr = ParseCreatePoolRequest(CreatePoolRequestJson("warm", o));
  ASSERT_TRUE(pr.ok()) << pr.error().ToString();
  EXPECT_EQ(pr->name, "warm");
  EXPECT_EQ(pr->options.size, 3);
  EXPECT_EQ(pr->options.max_age.count(), 60);
  EXPECT_EQ(pr->options.fill_parallelism, 2);
  EXPECT_EQ(pr->options.spec.image, "i");
  EXPECT_EQ(pr->options.spec.limits.memory, "1g");
  EXPECT_EQ(pr->options.spec.platform, "ptrace");

  auto cr = ParseCreateRequest(AcquireRequestJson("warm", {.lifetime = 60,
                                                           .idle_ttl = 10,
                                                           .wait = std::chrono::milliseconds(1500),
                                                           .cold_create = false}));
  ASSERT_TRUE(cr.ok()) << cr.error().ToString();
  EXPECT_EQ(cr->pool, "warm");
  EXPECT_EQ(cr->spec.lifetime, 60);
  EXPECT_EQ(cr->spec.idle_ttl, 10);
  EXPECT_EQ(cr->pool_wait.count(), 1500);
  EXPECT_FALSE(cr->pool_cold_create);
  auto plain = ParseCreateRequest(AcquireRequestJson("warm", {}));
  ASSERT_TRUE(plain.ok()) << plain.error().ToString();
  EXPECT_EQ(plain->pool_wait.count(), 0);
  EXPECT_TRUE(plain->pool_cold_create);
  EXPECT_FALSE(ParseCreateRequest(R"({"wait":1})").ok());  // only with a pool
  EXPECT_FALSE(ParseCreateRequest(R"({"pool":"p","wait":-1})").ok());
  EXPECT_FALSE(ParseCreateRequest(R"({"pool":"p","cold_create":"no"})").ok());

  auto list = ParsePoolListJson(
      R"({"pools":[{"name":"warm","id":"abc","size":3,"max_age":60,"image":"i",)"
      R"("platform":"ptrace","stats":{"ready":2,"starting":1,"acquired":5,"cold":1,)"
      R"("started":7,"start_failures":1,"recycled":0,"discarded":0,"last_error":"x"}}]})");
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  const PoolView& v = list->front();
  EXPECT_EQ(v.name, "warm");
  EXPECT_EQ(v.id, "abc");
  EXPECT_EQ(v.options.size, 3);
  EXPECT_EQ(v.stats.ready, 2);
  EXPECT_EQ(v.stats.acquired, 5u);
  EXPECT_EQ(v.stats.start_failures, 1u);
  EXPECT_EQ(v.stats.last_error, "x");
  EXPECT_FALSE(ParsePoolListJson(R"({"pools":[{"id":"abc"}]})").ok());  // no name
  EXPECT_FALSE(ValidatePoolName("a/b").ok());
  EXPECT_TRUE(ValidatePoolName("py-0123abcd").ok());
}

TEST(CodecTest, MetricsJson) {
  SandboxStats s;
  s.cpu_percent = 12.3456;
  s.memory_bytes = 1000;
  s.memory_limit_bytes = 4000;
  s.pids = 7;
  s.online_cpus = 2;
  auto o = Obj(MetricsJson("w", s));
  EXPECT_EQ(o["id"].as_string(), "w");
  EXPECT_DOUBLE_EQ(o["cpu_percent"].as_double(), 12.35);
  EXPECT_EQ(o["memory_bytes"].to_number<std::uint64_t>(), 1000u);
  EXPECT_EQ(o["memory_limit_bytes"].to_number<std::uint64_t>(), 4000u);
  EXPECT_EQ(o["pids"].to_number<std::uint64_t>(), 7u);
  EXPECT_FALSE(o.contains("egress"));  // only sandboxes with a policy have one
  EgressTraffic t{.decisions = {.allowed = 3, .denied = 2},
                  .bytes_up = 10,
                  .bytes_down = 20,
                  .open_connections = 1};
  auto e = Obj(MetricsJson("w", s, &t))["egress"].as_object();
  EXPECT_EQ(e["allowed"].to_number<std::uint64_t>(), 3u);
  EXPECT_EQ(e["denied"].to_number<std::uint64_t>(), 2u);
  EXPECT_EQ(e["bytes_up"].to_number<std::uint64_t>(), 10u);
  EXPECT_EQ(e["bytes_down"].to_number<std::uint64_t>(), 20u);
  EXPECT_EQ(e["open_connections"].to_number<std::uint64_t>(), 1u);
}

// Learn mode through the API: the mode in the create body and the PUT body (its value is the
// policy's to check), and the view's learned decisions and suggestion.
TEST(CodecTest, EgressModeAndTheLearnedSuggestion) {
  SandboxSpec spec;
  spec.egress = egress::EgressRules{.allow_domains = {"pypi.org"}, .mode = "learn"};
  auto r = ParseCreateRequest(CreateRequestJson(spec));
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->spec.egress->mode, "learn");
  EXPECT_EQ(ParseEgressRulesJson(R"({"mode":"enforce"})")->mode, "enforce");
  EXPECT_EQ(ParseEgressRulesJson(R"({"mode":"nonsense"})")->mode, "nonsense");  // ValidateSpec's
  EXPECT_EQ(ParseEgressRulesJson(R"({"mode":1})").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ParseEgressRulesJson(R"({"learn":true})").error().code(), ErrorCode::kInvalidArgument);
  EgressView v;
  v.rules = {.allow_domains = {"pypi.org"}, .ports = {80, 443}, .mode = "learn"};
  v.counters = {.allowed = 1, .denied = 2, .learned = 3};
  v.suggested = {.allow_domains = {"github.com", "pypi.org"}, .ports = {443, 8443}};
  v.learned_destinations = 2;
  v.learned_dropped = 7;
  egress::Decision d;
  d.via = "connect";
  d.name = "github.com";
  d.port = 443;
  d.allowed = true;
  d.learned = true;
  d.reason = "no rule allows github.com";
  v.recent = {d};
  auto back = ParseEgressViewJson(EgressViewJson("w", v));
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(back->rules.mode, "learn");
  EXPECT_EQ(back->counters, v.counters);
  EXPECT_EQ(back->suggested.allow_domains, v.suggested.allow_domains);
  EXPECT_EQ(back->suggested.ports, v.suggested.ports);
  EXPECT_EQ(back->suggested.mode, "enforce");
  EXPECT_EQ(back->learned_destinations, 2u);
  EXPECT_EQ(back->learned_dropped, 7u);
  ASSERT_EQ(back->recent_lines.size(), 1u);
  EXPECT_NE(
      back->recent_lines[0].find("connect github.com:443 learned (no rule allows github.com)"),
      std::string::npos)
      << back->recent_lines[0];
}

TEST(CodecTest, WsControl) {
  EXPECT_EQ(ParseWsControl(R"({"type":"eof"})")->type, WsControl::Type::kEof);
  auto r = ParseWsControl(R"({"type":"resize","rows":30,"cols":100})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rows, 30);
  EXPECT_EQ(r->cols, 100);
  EXPECT_EQ(ParseWsControl(R"({"type":"signal","signal":"INT"})")->signal, SIGINT);
  EXPECT_FALSE(ParseWsControl(R"({"type":"resize","rows":30})").ok());
  EXPECT_FALSE(ParseWsControl(R"({"type":"dance"})").ok());
  EXPECT_FALSE(ParseWsControl(R"({})").ok());
  auto exit = Obj(WsExitJson({137, 9, false}));
  EXPECT_EQ(exit["type"].as_string(), "exit");
  EXPECT_EQ(exit["exit_code"].as_int64(), 137);
  EXPECT_EQ(exit["signal"].as_int64(), 9);
  EXPECT_EQ(Obj(WsStartedJson(5))["pid"].as_int64(), 5);
  EXPECT_EQ(Obj(WsErrorJson(Error::NotFound("x")))["error"].as_object()["code"].as_string(),
            "not_found");
}

TEST(CodecTest, WsAuthMessage) {
  EXPECT_EQ(*ParseWsAuthMessage(WsAuthJson("s3cret")), "s3cret");
  EXPECT_EQ(*ParseWsAuthMessage(R"({"token":"t","type":"auth"})"), "t");
  for (const char* bad : {"", "s3cret", "[]", R"({"type":"auth"})", R"({"type":"auth","token":""})",
                          R"({"type":"auth","token":5})", R"({"type":"eof","token":"s3cret"})",
                          R"({"type":"auth","token":"s3cret","x":1})"}) {
    auto r = ParseWsAuthMessage(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    // What was sent may be a mistyped token: never in the message (it reaches logs).
    EXPECT_EQ(r.error().message().find("s3cret"), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().message().find(R"({"type":"auth","token")"), std::string::npos)
        << r.error().message();
  }
}

// The client's encoders are read back by the server's parsers, and the server's encoders by the
// client's parsers: the two sides of the wire agree.
TEST(CodecTest, ClientCreateRequestRoundTrips) {
  SandboxSpec spec;
  spec.image = "img:1";
  spec.gui = true;
  spec.limits.cpus = 0.5;
  spec.limits.memory = "1g";
  spec.limits.pids = 64;
  spec.limits.shm = "128m";
  spec.limits.disk = "none";
  spec.network = "none";
  spec.lifetime = 600;
  spec.idle_ttl = 60;
  spec.name = "box";
  spec.host = "ssh://never-sent";
  spec.labels = {{"tenant", "a b"}};
  auto body = CreateRequestJson(spec);
  EXPECT_EQ(body.find("never-sent"), std::string::npos) << body;
  auto r = ParseCreateRequest(body);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->spec.image, "img:1");
  EXPECT_TRUE(r->spec.gui);
  EXPECT_DOUBLE_EQ(r->spec.limits.cpus, 0.5);
  EXPECT_EQ(r->spec.limits.memory, "1g");
  EXPECT_EQ(r->spec.limits.pids, 64);
  EXPECT_EQ(r->spec.limits.shm, "128m");
  EXPECT_EQ(r->spec.limits.disk, "none");
  EXPECT_EQ(r->spec.network, "none");
  EXPECT_EQ(r->spec.lifetime, 600);
  EXPECT_EQ(r->spec.idle_ttl, 60);
  EXPECT_EQ(r->spec.name, "box");
  EXPECT_EQ(r->spec.labels.at("tenant"), "a b");
  // The defaults stay defaults (no disk key: the host decides).
  auto d = ParseCreateRequest(CreateRequestJson(SandboxSpec{}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->spec.limits.disk, "");
  EXPECT_FALSE(d->spec.name.has_value());
}

TEST(CodecTest, ClientParsesServerAnswers) {
  SandboxView v{"box", {}, true, "uncapped"};
  v.info.container_name = "agvisor-box";
  v.info.name = "box";
  v.info.state = "exited";
  v.info.end_reason = EndReason::kOutOfMemory;
  v.info.exit_code = 137;
  auto back = ParseSandboxJson(SandboxJson(v));
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(back->id, "box");
  EXPECT_EQ(back->info.container_name, "agvisor-box");
  EXPECT_EQ(back->info.name, "box");
  EXPECT_EQ(back->info.end_reason, EndReason::kOutOfMemory);
  EXPECT_EQ(back->info.exit_code, 137);
  EXPECT_EQ(back->resumed, true);
  EXPECT_EQ(back->disk_warning, "uncapped");
  auto list = ParseSandboxListJson(SandboxListJson({v, v}));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);
  EXPECT_FALSE(ParseSandboxJson("{\"x\":1}").ok());
  EXPECT_EQ(ParseSandboxListJson("<html>").error().code(), ErrorCode::kInternal);

  std::vector<ProcessInfo> procs = {{7, "sleep", true, 0, true}, {9, "sh", false, 3}};
  auto p = ParseProcessListJson(ProcessListJson(procs));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, procs);
  EXPECT_EQ(Obj(ProcessListJson(procs))["processes"].as_array()[0].at("keep_awake"), true);
  EXPECT_EQ(*ParsePidJson("{\"pid\":42}"), 42u);
  EXPECT_FALSE(ParsePidJson("{}").ok());

  auto sp = ParseStartProcessRequest(
      StartProcessRequestJson({"sh", "-c", "x"}, {.timeout = 5, .env = {"A=1"}, .cwd = "/w"}));
  ASSERT_TRUE(sp.ok()) << sp.error().ToString();
  EXPECT_EQ(sp->argv, (std::vector<std::string>{"sh", "-c", "x"}));
  EXPECT_EQ(sp->options.timeout, 5);
  EXPECT_EQ(sp->options.env, std::vector<std::string>{"A=1"});
  EXPECT_EQ(sp->options.cwd, "/w");
  EXPECT_FALSE(sp->options.keep_awake);
  // keep_awake: sent only when set (an older agvisord refuses a field it does not know), a
  // strict bool.
  EXPECT_EQ(StartProcessRequestJson({"x"}, {}).find("keep_awake"), std::string::npos);
  auto awake = ParseStartProcessRequest(StartProcessRequestJson({"x"}, {.keep_awake = true}));
  ASSERT_TRUE(awake.ok()) << awake.error().ToString();
  EXPECT_TRUE(awake->options.keep_awake);
  auto not_bool = ParseStartProcessRequest(R"({"argv": ["x"], "keep_awake": 1})");
  ASSERT_FALSE(not_bool.ok());
  EXPECT_EQ(not_bool.error().code(), ErrorCode::kInvalidArgument);

  SandboxStats st;
  st.cpu_percent = 50.5;
  st.memory_bytes = 1 << 20;
  st.memory_limit_bytes = 512 << 20;
  st.pids = 3;
  st.pids_limit = 512;
  auto m = ParseMetricsJson(MetricsJson("box", st));
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->cpu_percent, 50.5);
  EXPECT_EQ(m->memory_bytes, 1u << 20);
  EXPECT_EQ(m->memory_limit_bytes, 512u << 20);
  EXPECT_EQ(m->pids_limit, 512u);
}

TEST(CodecTest, ClientWebSocketMessages) {
  ProcessOptions o;
  o.pty = true;
  o.rows = 40;
  o.cols = 120;
  o.timeout = 3;
  o.env = {"TERM=xterm"};
  auto er = ParseExecRequest(WsExecRequestJson({"bash"}, o), /*websocket=*/true);
  ASSERT_TRUE(er.ok()) << er.error().ToString();
  EXPECT_TRUE(er->pty);
  EXPECT_EQ(er->rows, 40);
  EXPECT_EQ(er->cols, 120);
  EXPECT_EQ(er->timeout, 3);
  EXPECT_EQ(er->env, std::vector<std::string>{"TERM=xterm"});
  o = {};
  o.stdin = false;
  er = ParseExecRequest(WsExecRequestJson({"true"}, o), true);
  ASSERT_TRUE(er.ok());
  EXPECT_FALSE(er->stdin);
  EXPECT_EQ(er->timeout, 0);

  for (WsControl c : {WsControl{WsControl::Type::kEof}, WsControl{WsControl::Type::kResize, 5, 6},
                      WsControl{WsControl::Type::kSignal, 0, 0, SIGINT}}) {
    auto back = ParseWsControl(WsControlJson(c));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->type, c.type);
    EXPECT_EQ(back->rows, c.rows);
    EXPECT_EQ(back->signal, c.signal);
  }

  auto started = ParseWsServerMessage(WsStartedJson(12));
  ASSERT_TRUE(started.ok());
  EXPECT_EQ(started->type, WsServerMessage::Type::kStarted);
  EXPECT_EQ(started->pid, 12u);
  auto exit = ParseWsServerMessage(WsExitJson({124, 9, true}));
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->type, WsServerMessage::Type::kExit);
  EXPECT_EQ(exit->exit, (ProcessExit{124, 9, true}));
  // Which path ran crosses the wire too (the in-process ExecResult has it).
  auto warm = ParseWsServerMessage(WsExitJson({0, 0, false, true}));
  ASSERT_TRUE(warm.ok());
  EXPECT_EQ(warm->exit, (ProcessExit{0, 0, false, true}));
  auto err = ParseWsServerMessage(WsErrorJson(Error::SandboxDied("oom")));
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->type, WsServerMessage::Type::kError);
  EXPECT_EQ(err->error.code(), ErrorCode::kSandboxDied);
  EXPECT_EQ(err->error.message(), "oom");
  EXPECT_FALSE(ParseWsServerMessage(R"({"type":"dance"})").ok());
}

// The client reads back what the daemon's file routes write: every kind, the link target, the
// permission bits; and a reply of another shape is an error, not an empty entry.
TEST(CodecTest, FileEntriesRoundTrip) {
  FileEntry link{.name = "l",
                 .kind = FileKind::kSymlink,
                 .mode = 0100777,
                 .size = 3,
                 .mtime_unix_ms = 1234567,
                 .link_target = "/etc"};
  FileEntry dir{.name = "d", .kind = FileKind::kDir, .mode = 0755};
  auto one = ParseFileEntryJson(FileEntryJson(link));
  ASSERT_TRUE(one.ok()) << one.error().message();
  EXPECT_EQ(one->kind, FileKind::kSymlink);
  EXPECT_EQ(one->mode, static_cast<std::uint32_t>(S_IFLNK | 0777));
  EXPECT_EQ(one->size, 3u);
  EXPECT_EQ(one->mtime_unix_ms, 1234567);
  EXPECT_EQ(one->link_target, "/etc");
  auto list = ParseFileListJson(FileListJson("/x", {dir, link}));
  ASSERT_TRUE(list.ok()) << list.error().message();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "d");
  EXPECT_EQ((*list)[0].kind, FileKind::kDir);
  EXPECT_EQ((*list)[0].mode, static_cast<std::uint32_t>(S_IFDIR | 0755));
  EXPECT_EQ(ParseFileListJson("{\"path\":\"/x\"}").error().code(), ErrorCode::kInternal);
  EXPECT_EQ(ParseFileEntryJson("[]").error().code(), ErrorCode::kInternal);
}

TEST(CodecTest, WatchMessagesRoundTripAndBadEventsAreRefused) {
  const std::vector<WatchEvent> events = {
      {WatchEventKind::kCreate, true, "src", ""},
      {WatchEventKind::kModify, false, "src/a.py", ""},
      {WatchEventKind::kMove, false, "b.txt", "a.txt"},
      {WatchEventKind::kDelete, false, "b.txt", ""},
      {WatchEventKind::kOverflow, false, "", ""},
  };
  for (const auto& e : events) {
    auto m = ParseWsServerMessage(WsWatchEventJson(e));
    ASSERT_TRUE(m.ok()) << m.error().ToString();
    EXPECT_EQ(m->type, WsServerMessage::Type::kEvent);
    EXPECT_EQ(m->event, e) << WsWatchEventJson(e);
  }
  EXPECT_EQ(WsWatchEventJson(events[2]),
            R"({"type":"event","kind":"move","path":"b.txt","is_dir":false,"old_path":"a.txt"})");
  EXPECT_EQ(WsWatchEventJson(events[4]), R"({"type":"event","kind":"overflow"})");
  EXPECT_EQ(ParseWsServerMessage(WsEndJson())->type, WsServerMessage::Type::kEnd);
  // What a client refuses, even from its daemon: unknown kinds and paths off the rules.
  for (const char* bad :
       {R"({"type":"event","kind":"chmod","path":"a"})",
        R"({"type":"event","kind":"create","path":"/etc/passwd"})",
        R"({"type":"event","kind":"create","path":"../x"})", R"({"type":"event","kind":"create"})",
        R"({"type":"event","kind":"move","path":"a"})"}) {
    auto m = ParseWsServerMessage(bad);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_EQ(m.error().code(), ErrorCode::kInternal);
  }
}

// The egress log's record: every field round-trips, and whatever bytes a sandbox put in a path
// (a terminal escape, a C1 CSI, DEL, invalid UTF-8, a quote, a line end) come out as one line of
// valid JSON that holds no control byte a terminal would act on.
TEST(CodecTest, EgressRecordIsOneSafeLineAndRoundTrips) {
  egress::Decision d;
  d.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1764601445123));
  d.seq = 7;
  d.sandbox = "agvisor-box";
  d.via = "https";
  d.name = "api.test";
  d.port = 443;
  d.allowed = true;
  d.reason = "bound host api.test";
  d.address = "198.51.100.2";
  d.method = "POST";
  d.path =
      "/a\x1b[31m\xc2\x9b"
      "2J\x7f\xff\"\n";
  d.status = 201;
  d.bytes_up = 310;
  d.bytes_down = 5120;
  d.duration = std::chrono::milliseconds(12);
  d.secret = "API_KEY";
  d.closes = 5;
  const std::string line = DecisionJson(d);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  for (std::size_t i = 0; i < line.size(); ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    EXPECT_TRUE(c >= 0x20 && c != 0x7f) << "byte " << int(c) << " at " << i << ": " << line;
    if (c == 0xc2 && i + 1 < line.size()) {
      EXPECT_GT(static_cast<unsigned char>(line[i + 1]), 0x9f) << "a C1 control at " << i;
    }
  }
  EXPECT_NE(line.find(R"("path":"/a\u001b[31m\u009b2J\u007f)"
                      "\xef\xbf\xbd"
                      R"(\"\n")"),
            std::string::npos)
      << line;
  auto back = ParseDecisionJson(line);
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(back->time, d.time);
  EXPECT_EQ(back->seq, 7u);
  EXPECT_EQ(back->sandbox, d.sandbox);
  EXPECT_EQ(back->via, "https");
  EXPECT_EQ(back->name, "api.test");
  EXPECT_EQ(back->port, 443);
  EXPECT_TRUE(back->allowed);
  EXPECT_EQ(back->reason, d.reason);
  EXPECT_EQ(back->address, d.address);
  EXPECT_EQ(back->method, "POST");
  EXPECT_EQ(back->path,
            "/a\x1b[31m\xc2\x9b"
            "2J\x7f\xef\xbf\xbd\"\n");  // 0xff: U+FFFD
  EXPECT_EQ(back->status, 201);
  EXPECT_EQ(back->bytes_up, 310u);
  EXPECT_EQ(back->bytes_down, 5120u);
  EXPECT_EQ(back->duration, std::chrono::milliseconds(12));
  EXPECT_EQ(back->secret, "API_KEY");
  EXPECT_EQ(back->closes, 5u);
  // A line torn by a crash, or anything else, is not a record.
  EXPECT_EQ(ParseDecisionJson(line.substr(0, line.size() / 2)).error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(ParseDecisionJson(R"({"seq":1})").ok());
  // The route's list and the WebSocket's message carry the same record.
  auto list = ParseEgressLogJson(EgressLogJson("box", {d, d}));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].path, back->path);
  auto msg = ParseWsServerMessage(WsEgressRecordJson(d));
  ASSERT_TRUE(msg.ok());
  EXPECT_EQ(msg->type, WsServerMessage::Type::kRecord);
  EXPECT_EQ(msg->record.secret, "API_KEY");
  EXPECT_EQ(msg->record_json, line);
  // The view's recent lines are FormatDecision's, without the sandbox.
  d.closes = 0;  // a request's record
  EgressView v;
  v.recent = {d};
  auto view = ParseEgressViewJson(EgressViewJson("box", v));
  ASSERT_TRUE(view.ok());
  ASSERT_EQ(view->recent_lines.size(), 1u);
  EXPECT_TRUE(view->recent_lines[0].starts_with(
      "2025-12-01T15:04:05.123Z https api.test:443 allowed (bound host api.test) -> "
      "198.51.100.2 POST /a"))
      << view->recent_lines[0];
}

}  // namespace
TEST(CodecTest, SnapshotAndForkRequestsAndAnswersRoundTrip) {
  auto s = ParseSnapshotRequest(R"({"image":"snap/a:1","workspace":true,"max_bytes":1024})");
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  EXPECT_EQ(s->image, "snap/a:1");
  EXPECT_TRUE(s->include_workspace);
  EXPECT_EQ(s->max_bytes, 1024u);
  auto back = ParseSnapshotRequest(SnapshotRequestJson(*s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->image, "snap/a:1");
  EXPECT_EQ(ParseSnapshotRequest(R"({"workspace":true})").error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ParseSnapshotRequest(R"({"image":"a","max_bytes":0})").error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ParseSnapshotRequest(R"({"image":"a","bogus":1})").error().code(),
            ErrorCode::kInvalidArgument);

  SnapshotResult r{"snap/a:1", "sha256:ab", 1000, 7, 900, 1.5};
  auto rr = ParseSnapshotResultJson(SnapshotResultJson(r));
  ASSERT_TRUE(rr.ok());
  EXPECT_EQ(rr->image_id, "sha256:ab");
  EXPECT_EQ(rr->bytes, 1000u);
  EXPECT_EQ(rr->entries, 7u);
  EXPECT_DOUBLE_EQ(rr->seconds, 1.5);
  EXPECT_FALSE(rr->layered);
  // Whether it is a layer, and why not, reach every door's JSON.
  EXPECT_NE(SnapshotResultJson(r).find(R"("layered":false)"), std::string::npos);
  r.layered = true;
  r.whiteouts = 3;
  r.image_layers = 4;
  rr = ParseSnapshotResultJson(SnapshotResultJson(r));
  ASSERT_TRUE(rr.ok());
  EXPECT_TRUE(rr->layered);
  EXPECT_EQ(rr->whiteouts, 3u);
  EXPECT_EQ(rr->image_layers, 4u);
  SnapshotResult whole = r;
  whole.layered = false;
  whole.whole_because = "asked for the whole file system";
  EXPECT_EQ(ParseSnapshotResultJson(SnapshotResultJson(whole))->whole_because,
            "asked for the whole file system");

  ForkOptions f;
  f.count = 3;
  f.prefix = "p";
  f.image = "snap/f:1";
  f.spec.limits.memory = "1g";
  f.spec.lifetime = 60;
  auto fb = ParseForkRequest(ForkRequestJson(f));
  ASSERT_TRUE(fb.ok()) << fb.error().ToString();
  EXPECT_EQ(fb->count, 3);
  EXPECT_EQ(fb->prefix, "p");
  EXPECT_EQ(fb->image, "snap/f:1");
  EXPECT_EQ(fb->spec.limits.memory, "1g");
  EXPECT_EQ(fb->spec.lifetime, 60);
  EXPECT_FALSE(fb->spec.name.has_value());
  EXPECT_EQ(ParseForkRequest(R"({"prefix":"p"})").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ParseForkRequest(R"({"count":1,"spec":{"name":"x"}})").error().code(),
            ErrorCode::kInvalidArgument);

  ForkView v;
  v.snapshot = r;
  v.seconds = 4;
  SandboxView sv;
  sv.id = "p-1";
  sv.info.container_name = "agvisor-p-1";
  sv.info.name = "p-1";
  v.sandboxes.push_back(sv);
  auto vb = ParseForkResultJson(ForkResultJson(v));
  ASSERT_TRUE(vb.ok()) << vb.error().ToString();
  ASSERT_EQ(vb->sandboxes.size(), 1u);
  EXPECT_EQ(vb->sandboxes[0].info.container_name, "agvisor-p-1");
  EXPECT_EQ(vb->snapshot.image, "snap/a:1");
  EXPECT_EQ(ParseForkResultJson("{}").error().code(), ErrorCode::kInternal);
  EXPECT_TRUE(vb->snapshot.layered);
}

TEST(CodecTest, SnapshotListRoundTrips) {
  std::vector<SnapshotInfo> list = {{.tag = "v1",
                                     .image = "agvisor/snapshot:v1",
                                     .image_id = "sha256:ab",
                                     .of = "box",
                                     .workspace = true,
                                     .created_unix = 1700000000,
                                     .size_bytes = 123}};
  auto back = ParseSnapshotListJson(SnapshotListJson(list));
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].tag, "v1");
  EXPECT_EQ((*back)[0].image, "agvisor/snapshot:v1");
  EXPECT_EQ((*back)[0].image_id, "sha256:ab");
  EXPECT_EQ((*back)[0].of, "box");
  EXPECT_TRUE((*back)[0].workspace);
  EXPECT_EQ((*back)[0].created_unix, 1700000000);
  EXPECT_EQ((*back)[0].size_bytes, 123);
  EXPECT_EQ(ParseSnapshotListJson(R"({"snapshots":[1]})").error().code(), ErrorCode::kInternal);
  EXPECT_EQ(ParseSnapshotListJson("{}").error().code(), ErrorCode::kInternal);
}

}  // namespace agvisor::api
