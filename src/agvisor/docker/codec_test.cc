#include "agvisor/docker/codec.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <sstream>

namespace agvisor::docker {
namespace {
namespace json = boost::json;

std::string ReadTestdata(const std::string& name) {
  std::ifstream in(std::string(AGVISOR_DOCKER_TESTDATA) + "/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing testdata " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Semantic JSON comparison: key order and whitespace do not matter.
void ExpectSameJson(std::string_view actual, const std::string& golden_file) {
  const std::string golden = ReadTestdata(golden_file);
  boost::system::error_code ec;
  const json::value a = json::parse(json::string_view(actual.data(), actual.size()), ec);
  ASSERT_FALSE(ec) << "actual is not JSON: " << actual;
  const json::value g = json::parse(golden, ec);
  ASSERT_FALSE(ec) << golden_file << " is not JSON";
  EXPECT_EQ(a, g) << "actual:\n"
                  << json::serialize(a) << "\ngolden " << golden_file << ":\n"
                  << json::serialize(g);
}

ContainerConfig FullConfig() {
  ContainerConfig c;
  c.image = "agvisor/probe:latest";
  c.cmd = {"/bin/busybox", "sleep", "3600"};
  c.entrypoint = {"/agvisor-agent", "serve"};
  c.env = {"A=1", "PATH=/bin"};
  c.working_dir = "/workspace";
  c.user = "1000:1000";
  c.labels = {{"agvisor", "1"}, {"agvisor.name", "demo"}};
  c.open_stdin = c.attach_stdin = c.attach_stdout = c.attach_stderr = c.stdin_once = true;
  c.network_disabled = true;
  HostConfig& h = c.host_config;
  h.runtime = "runsc";
  h.nano_cpus = 1'500'000'000;
  h.memory = 512LL << 20;
  h.memory_swap = 512LL << 20;
  h.pids_limit = 256;
  h.network_mode = "none";
  h.dns = {"172.18.0.1"};
  h.shm_size = 64LL << 20;
  h.auto_remove = true;
  h.binds = {"/host/data:/data:ro"};
  h.mounts = {Mount{"volume", "agvisor-demo", "/workspace", false}};
  h.cap_drop = {"ALL"};
  h.cap_add = {"CHOWN", "SETUID"};
  h.security_opt = {"no-new-privileges"};
  h.annotations = {{"dev.gvisor.spec.rootfs.overlay", "memory"}};
  h.init = true;
  h.log_driver = "none";
  return c;
}

// ---- Request building ----

TEST(CodecTest, ContainerCreateEveryFieldOn143) {
  auto body = EncodeContainerCreate(FullConfig(), ApiVersion{1, 43});
  ASSERT_TRUE(body.ok()) << body.error().ToString();
  ExpectSameJson(*body, "container_create_full.json");
}

TEST(CodecTest, ContainerCreateAnnotationsRefusedOn141) {
  auto body = EncodeContainerCreate(FullConfig(), ApiVersion{1, 41});
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(body.error().message().find("1.43"), std::string::npos) << body.error().message();
  EXPECT_NE(body.error().message().find("1.41"), std::string::npos) << body.error().message();
}

TEST(CodecTest, ContainerCreateWithoutAnnotationsWorksOn141) {
  ContainerConfig c = FullConfig();
  c.host_config.annotations.clear();
  auto body = EncodeContainerCreate(c, ApiVersion{1, 41});
  ASSERT_TRUE(body.ok()) << body.error().ToString();
  json::value v = json::parse(*body);
  EXPECT_FALSE(v.at("HostConfig").as_object().contains("Annotations"));
  EXPECT_EQ(v.at("HostConfig").at("Runtime"), "runsc");
}

TEST(CodecTest, ContainerCreateMinimalLeavesDefaultsOut) {
  ContainerConfig c;
  c.image = "agvisor/probe";
  auto body = EncodeContainerCreate(c, ApiVersion{1, 41});
  ASSERT_TRUE(body.ok());
  ExpectSameJson(*body, "container_create_minimal.json");
}

TEST(CodecTest, ContainerCreateRefusesBadInput) {
  ContainerConfig c;
  EXPECT_EQ(EncodeContainerCreate(c, ApiVersion{1, 41}).error().code(),
            ErrorCode::kInvalidArgument);  // no image
  c.image = "-oops";
  EXPECT_EQ(EncodeContainerCreate(c, ApiVersion{1, 41}).error().code(),
            ErrorCode::kInvalidArgument);
  c.image = "ok";
  c.host_config.mounts = {Mount{"nfs", "x", "/x", false}};
  EXPECT_EQ(EncodeContainerCreate(c, ApiVersion{1, 41}).error().code(),
            ErrorCode::kInvalidArgument);
  c.host_config.mounts = {Mount{"volume", "x", "relative", false}};
  EXPECT_EQ(EncodeContainerCreate(c, ApiVersion{1, 41}).error().code(),
            ErrorCode::kInvalidArgument);
}

TEST(CodecTest, ExecCreate) {
  ExecConfig e;
  e.cmd = {"/bin/sh", "-c", "echo hi; echo err >&2"};
  e.env = {"X=y"};
  e.working_dir = "/tmp";
  e.user = "nobody";
  e.attach_stdin = true;
  auto body = EncodeExecCreate(e);
  ASSERT_TRUE(body.ok());
  ExpectSameJson(*body, "exec_create.json");
  EXPECT_EQ(EncodeExecCreate(ExecConfig{}).error().code(), ErrorCode::kInvalidArgument);
}

TEST(CodecTest, ExecStart) {
  EXPECT_EQ(json::parse(EncodeExecStart(true)), json::parse(R"({"Detach":false,"Tty":true})"));
  EXPECT_EQ(json::parse(EncodeExecStart(false)), json::parse(R"({"Detach":false,"Tty":false})"));
}

TEST(CodecTest, VolumeCreate) {
  EXPECT_EQ(json::parse(EncodeVolumeCreate("v1", {{"agvisor", "1"}})),
            json::parse(R"({"Name":"v1","Driver":"local","Labels":{"agvisor":"1"}})"));
}

TEST(CodecTest, NetworkCreate) {
  NetworkConfig c{.name = "n1", .internal = true, .bridge_name = "agve-1", .labels = {{"a", "1"}}};
  EXPECT_EQ(json::parse(EncodeNetworkCreate(c)),
            json::parse(R"({"Name":"n1","Driver":"bridge","CheckDuplicate":true,"Internal":true,)"
                        R"("Options":{"com.docker.network.bridge.name":"agve-1"},)"
                        R"("Labels":{"a":"1"}})"));
  EXPECT_EQ(json::parse(EncodeNetworkCreate({.name = "n2"})),
            json::parse(R"({"Name":"n2","Driver":"bridge","CheckDuplicate":true,)"
                        R"("Internal":false,"Labels":{}})"));
}

TEST(CodecTest, DecodesNetworks) {
  auto n = DecodeNetwork(ReadTestdata("network_inspect.json"));
  ASSERT_TRUE(n.ok()) << n.error().ToString();
  EXPECT_EQ(n->name, "agv-capture-net");
  EXPECT_TRUE(n->internal);
  EXPECT_EQ(n->bridge_name, "agve-capture");
  EXPECT_EQ(n->subnet, "172.19.0.0/16");
  EXPECT_EQ(n->gateway, "172.19.0.1");
  EXPECT_EQ(n->labels.at("agvisor.capture"), "1");
  auto list = DecodeNetworkList("[" + ReadTestdata("network_inspect.json") + "]");
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].gateway, "172.19.0.1");
  EXPECT_FALSE(DecodeNetworkList("{}").ok());
  auto bare = DecodeNetwork(R"({"Id":"x","Name":"y","IPAM":{"Config":[]}})");
  ASSERT_TRUE(bare.ok()) << bare.error().ToString();
  EXPECT_EQ(bare->gateway, "");
  EXPECT_EQ(bare->bridge_name, "");
}

// A type error inside an array names the element: top-level lists "[i]", nested ones "Key[i]".
TEST(CodecTest, ArrayElementsAreNamedInTypeErrors) {
  auto containers = DecodeContainerList(R"([{"Id":"a"},{"Id":7}])");
  ASSERT_FALSE(containers.ok());
  EXPECT_EQ(containers.error().message(),
            "decode docker container list: field [1].Id: expected a string");
  auto inspect = DecodeContainerInspect(R"({"Id":"x","Mounts":[{"RW":true},{"RW":"yes"}]})");
  ASSERT_FALSE(inspect.ok());
  EXPECT_EQ(inspect.error().message(),
            "decode docker container inspect: field Mounts[1].RW: expected a boolean");
  auto volumes = DecodeVolumeList(R"({"Volumes":[{"Name":1}]})");
  ASSERT_FALSE(volumes.ok());
  EXPECT_EQ(volumes.error().message(),
            "decode docker volume list: field Volumes[0].Name: expected a string");
  auto images = DecodeImageList(R"({"Id":"a"})");
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.error().message(), "decode docker image list: expected a JSON array");
  auto networks = DecodeNetworkList(R"([{"Internal":"no"}])");
  ASSERT_FALSE(networks.ok());
  EXPECT_EQ(networks.error().message(),
            "decode docker network list: field [0].Internal: expected a boolean");
}

TEST(CodecTest, LabelFilterQueryIsEncoded) {
  const std::string filters = EncodeLabelFilters({"agvisor=1", "agvisor.name=a b&c"});
  EXPECT_EQ(json::parse(filters), json::parse(R"({"label":["agvisor=1","agvisor.name=a b&c"]})"));
  const std::string q = BuildQuery({{"all", "1"}, {"filters", filters}});
  EXPECT_EQ(q,
            "?all=1&filters=%7B%22label%22%3A%5B%22agvisor%3D1%22%2C%22agvisor.name%3Da%20b%26c%22%"
            "5D%7D");
  EXPECT_EQ(EncodeLabelFilters({}), "");
  EXPECT_EQ(BuildQuery({}), "");
}

TEST(CodecTest, PercentEncode) {
  EXPECT_EQ(PercentEncode("aZ09-._~"), "aZ09-._~");
  EXPECT_EQ(PercentEncode("/a b?#%"), "%2Fa%20b%3F%23%25");
  EXPECT_EQ(PercentEncode(std::string("\0\xff", 2)), "%00%FF");
}

TEST(CodecTest, VersionedPath) {
  EXPECT_EQ(VersionedPath(ApiVersion{1, 41}, "/containers/json"), "/v1.41/containers/json");
}

// ---- Validation ----

TEST(CodecTest, ContainerRefValidation) {
  for (const char* ok : {"agvisor-x", "a", "A_b.c-d", "e308e24e451d", "0abc"}) {
    EXPECT_TRUE(ValidateContainerRef(ok).ok()) << ok;
  }
  for (const char* bad :
       {"", "-x", ".x", "_x", "a/b", "../x", "a b", "a?b", "a%2F", "x\n", "a#b", "ä"}) {
    auto r = ValidateContainerRef(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_FALSE(ValidateContainerRef(std::string(256, 'a')).ok());
  EXPECT_TRUE(ValidateVolumeName("agvisor-demo").ok());
  EXPECT_FALSE(ValidateVolumeName("a/../b").ok());
}

TEST(CodecTest, ExecIdValidation) {
  EXPECT_TRUE(ValidateExecId(std::string(64, 'a')).ok());
  EXPECT_FALSE(ValidateExecId(std::string(63, 'a')).ok());
  EXPECT_FALSE(ValidateExecId(std::string(63, 'a') + "/").ok());
}

TEST(CodecTest, ImageRefValidation) {
  for (const char* ok : {"agvisor/probe", "agvisor/probe:latest", "localhost:5000/a/b:1.0",
                         "busybox@sha256:0123abcd", "ubuntu:24.04"}) {
    EXPECT_TRUE(ValidateImageRef(ok).ok()) << ok;
  }
  for (const char* bad : {"", "-rm", "/abs", "a/../b", "a b", "a?x", "a#b", "a//b", "a%2f"}) {
    EXPECT_FALSE(ValidateImageRef(bad).ok()) << bad;
  }
}

TEST(CodecTest, SignalValidation) {
  for (const char* ok : {"KILL", "SIGKILL", "9", "SIGRTMIN+3"})
    EXPECT_TRUE(ValidateSignal(ok).ok());
  for (const char* bad : {"", "kill", "SIG KILL", "9&x=1"}) EXPECT_FALSE(ValidateSignal(bad).ok());
}

TEST(CodecTest, RefusedValuesAreQuotedAsForATerminal) {
  // A caller's value in an error message cannot act on the terminal that prints it: C0 and C1
  // controls and bytes outside UTF-8 come out escaped (base/strings.h EscapeForTerminal).
  auto r = ValidateSignal(
      "\x1b]0;x\a\xc2\x9b"
      "2J\xff");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(),
            R"(signal "\e]0;x\x07\u009b2J\xff": expected a name (KILL, SIGTERM) or a number)");
}

// ---- Response decoding (samples captured from this machine's dockerd 20.10, API 1.41) ----

TEST(CodecTest, DecodesContainerStats) {
  // Captured from dockerd 20.10 (cgroup v1) for a runsc sandbox: 2 cpus, 512m.
  auto st = DecodeContainerStats(ReadTestdata("container_stats.json"));
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  EXPECT_EQ(st->online_cpus, 2);
  EXPECT_EQ(st->pids, 38u);
  EXPECT_EQ(st->pids_limit, 512u);
  EXPECT_EQ(st->memory_limit_bytes, 536870912u);
  EXPECT_GT(st->memory_bytes, 0u);
  EXPECT_LT(st->memory_bytes, st->memory_limit_bytes);
  // (cpu delta / system delta) * cpus * 100 of the two readings in the file.
  EXPECT_NEAR(st->cpu_percent, 3.7029, 0.001);
  EXPECT_FALSE(DecodeContainerStats("{\"memory_stats\": 3}").ok());
  // No previous sample (a container that just started): 0 %, not a division by zero.
  auto first = DecodeContainerStats(
      R"({"cpu_stats":{"cpu_usage":{"total_usage":5},"system_cpu_usage":10,"online_cpus":1},
          "precpu_stats":{},"memory_stats":{"usage":100,"limit":1000,"stats":{"inactive_file":30}},
          "pids_stats":{"current":2}})");
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_EQ(first->cpu_percent, 0.0);
  EXPECT_EQ(first->memory_bytes, 70u);
}

TEST(CodecTest, DecodesContainerInspect) {
  auto c = DecodeContainerInspect(ReadTestdata("container_inspect.json"));
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->id, "e308e24e451d7e5359b196bde2f1c0678f1b8d8016d407c49777275b448c783a");
  EXPECT_EQ(c->name, "agv-capture");
  EXPECT_EQ(c->image_ref, "agvisor/probe:latest");
  EXPECT_EQ(c->image.rfind("sha256:", 0), 0u);
  EXPECT_EQ(c->labels.at("agvisor.capture"), "1");
  EXPECT_EQ(c->cmd, (std::vector<std::string>{"/bin/busybox", "sleep", "1000"}));
  EXPECT_EQ(c->state.status, "running");
  EXPECT_TRUE(c->state.running);
  EXPECT_FALSE(c->state.oom_killed);
  EXPECT_EQ(c->state.exit_code, 0);
  EXPECT_EQ(c->state.pid, 5894);
  EXPECT_EQ(c->state.started_at, "2026-11-30T03:04:32.999415261Z");
  EXPECT_EQ(c->state.finished_at, "0001-01-01T00:00:00Z");
  EXPECT_EQ(c->host_config.runtime, "runsc");
  EXPECT_EQ(c->host_config.network_mode, "none");
  EXPECT_EQ(c->host_config.shm_size, 67108864);
  EXPECT_FALSE(c->tty);
  EXPECT_FALSE(c->network_disabled);  // Docker writes NetworkDisabled only when true
  std::string with = ReadTestdata("container_inspect.json");
  const std::string key = "\"OpenStdin\": false,";
  ASSERT_NE(with.find(key), std::string::npos);
  with.replace(with.find(key), key.size(), key + " \"NetworkDisabled\": true,");
  auto d = DecodeContainerInspect(with);
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  EXPECT_TRUE(d->network_disabled);
}

TEST(CodecTest, DecodesContainerList) {
  auto l = DecodeContainerList(ReadTestdata("container_list.json"));
  ASSERT_TRUE(l.ok()) << l.error().ToString();
  ASSERT_EQ(l->size(), 1u);
  const ContainerSummary& s = (*l)[0];
  EXPECT_EQ(s.id.substr(0, 12), "e308e24e451d");
  EXPECT_EQ(s.names, std::vector<std::string>{"agv-capture"});
  EXPECT_EQ(s.image, "agvisor/probe:latest");
  EXPECT_EQ(s.labels.at("agvisor.capture"), "1");
  EXPECT_EQ(s.state, "running");
  EXPECT_EQ(s.status, "Up Less than a second");
  EXPECT_EQ(s.created, 1796007872);
  auto empty = DecodeContainerList("[]");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(CodecTest, DecodesExecInspect) {
  auto e = DecodeExecInspect(ReadTestdata("exec_inspect.json"));
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  EXPECT_FALSE(e->running);
  EXPECT_EQ(e->exit_code, 3);
  EXPECT_EQ(e->pid, 6088);
  EXPECT_EQ(e->container_id.substr(0, 12), "e308e24e451d");
  auto running = DecodeExecInspect(R"({"ID":"x","Running":true,"ExitCode":null,"Pid":7})");
  ASSERT_TRUE(running.ok());
  EXPECT_TRUE(running->running);
  EXPECT_FALSE(running->exit_code.has_value());
}

TEST(CodecTest, DecodesVersion) {
  auto v = DecodeVersion(ReadTestdata("version.json"));
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_EQ(v->version, "20.10.24+dfsg1");
  EXPECT_EQ(v->api_version, "1.41");
  EXPECT_EQ(v->min_api_version, "1.12");
  EXPECT_EQ(v->os, "linux");
  EXPECT_EQ(v->arch, "amd64");
  EXPECT_EQ(v->kernel, "6.18.44-fc-v657");
  EXPECT_EQ(DecodeVersion("{}").error().code(), ErrorCode::kInternal);
}

TEST(CodecTest, DecodesInfo) {
  auto i = DecodeInfo(ReadTestdata("info.json"));
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  ASSERT_EQ(i->runtimes.count("runsc"), 1u);
  EXPECT_EQ(i->runtimes.at("runsc").path, "/usr/bin/runsc");
  EXPECT_EQ(i->runtimes.at("runsc").args, std::vector<std::string>{"--network=host"});
  EXPECT_EQ(i->runtimes.at("runc").path, "runc");
  EXPECT_TRUE(i->runtimes.at("runc").args.empty());
  EXPECT_EQ(i->default_runtime, "runc");
  EXPECT_EQ(i->cgroup_version, "1");
  EXPECT_EQ(i->cgroup_driver, "cgroupfs");
  EXPECT_EQ(i->driver, "overlay2");
  EXPECT_EQ(i->operating_system, "Debian GNU/Linux 12 (bookworm)");
  EXPECT_EQ(i->ncpu, 2);
  EXPECT_EQ(i->mem_total, 25276510208);
  EXPECT_EQ(i->docker_root_dir, "/var/lib/docker");
  EXPECT_EQ(i->server_version, "20.10.24+dfsg1");
  EXPECT_EQ(i->security_options, std::vector<std::string>{"name=seccomp,profile=default"});
}

TEST(CodecTest, DecodesVolumes) {
  auto v = DecodeVolume(ReadTestdata("volume_inspect.json"));
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_EQ(v->name, "agv-capture-vol");
  EXPECT_EQ(v->driver, "local");
  EXPECT_EQ(v->labels.at("agvisor.capture"), "1");
  EXPECT_EQ(v->mountpoint, "/var/lib/docker/volumes/agv-capture-vol/_data");
  auto l = DecodeVolumeList(ReadTestdata("volume_list.json"));
  ASSERT_TRUE(l.ok()) << l.error().ToString();
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0].name, "agv-capture-vol");
  auto none = DecodeVolumeList(R"({"Volumes":null,"Warnings":null})");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE((*l)[0].size.has_value()) << "GET /volumes does not size them";
  // GET /system/df (as Docker 20.10 answers it, trimmed): sizes, -1 where not computed.
  auto df = DecodeDiskUsageVolumes(
      R"({"LayersSize":1,"Images":[],"Containers":[],"Volumes":[{"Name":"agvisor-kept","Labels":{"agvisor":"1"},"UsageData":{"Size":4096,"RefCount":0}},{"Name":"other","Labels":null,"UsageData":{"Size":-1,"RefCount":1}}],"BuildCache":[]})");
  ASSERT_TRUE(df.ok()) << df.error().ToString();
  ASSERT_EQ(df->size(), 2u);
  EXPECT_EQ((*df)[0].size, 4096);
  EXPECT_EQ((*df)[0].labels.at("agvisor"), "1");
  EXPECT_EQ((*df)[1].size, -1);
}

TEST(CodecTest, DecodesImageInspect) {
  auto i = DecodeImageInspect(ReadTestdata("image_inspect.json"));
  ASSERT_TRUE(i.ok()) << i.error().ToString();
  EXPECT_EQ(i->id, "sha256:cf3ce6ba1b08a68e47bce95c5293aa2f838f4b311d74fccb34c532a1097874aa");
  EXPECT_EQ(i->repo_tags, std::vector<std::string>{"agvisor/probe:latest"});
  EXPECT_EQ(i->size, 1982270);
  EXPECT_EQ(i->architecture, "amd64");
  EXPECT_TRUE(i->cmd.empty());
}

TEST(CodecTest, DecodesEventActions) {
  // As dockerd 20.10 sent them for a container killed by its memory limit (trimmed).
  auto a = DecodeEventActions(
      "{\"status\":\"start\",\"id\":\"c1\",\"Type\":\"container\",\"Action\":\"start\"}\n"
      "{\"Type\":\"container\",\"Action\":\"oom\",\"Actor\":{\"ID\":\"c1\"}}\n"
      "{\"status\":\"die\",\"Type\":\"container\",\"Action\":\"die\"}\n");
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(*a, (std::vector<std::string>{"start", "oom", "die"}));
  auto none = DecodeEventActions("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(DecodeEventActions("{\"Action\":\"start\"}\nnot json\n").ok());
}

TEST(CodecTest, DecodesImageList) {
  auto l = DecodeImageList(ReadTestdata("image_list.json"));
  ASSERT_TRUE(l.ok()) << l.error().ToString();
  ASSERT_EQ(l->size(), 1u);
  const ImageSummary& i = (*l)[0];
  EXPECT_EQ(i.id, "sha256:717897219c747b8cb8eb86b48da40ae4aa64f7f65677df770c655253cbb30f53");
  EXPECT_EQ(i.repo_tags,
            std::vector<std::string>{"agvisor/with-agent:d9244287e3fe-e046bb2ebedc2d3e"});
  EXPECT_EQ(i.labels.at("agvisor.agent.source"), "agvisor/base:latest");
  EXPECT_EQ(i.created, 1796019007);
  EXPECT_EQ(i.size, 266125927);
  EXPECT_FALSE(DecodeImageList("{}").ok());
  auto empty = DecodeImageList("[]");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(CodecTest, DecodesIdAndWait) {
  auto id = DecodeIdResponse(R"({"Id":"abc","Warnings":[]})");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, "abc");
  EXPECT_FALSE(DecodeIdResponse("{}").ok());
  auto code = DecodeWaitResponse(R"({"Error":null,"StatusCode":137})", "c");
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 137);
  auto err = DecodeWaitResponse(R"({"Error":{"Message":"boom"},"StatusCode":-1})", "c1");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message().find("c1: boom"), std::string::npos);
}

TEST(CodecTest, MalformedResponsesAreInternalErrorsNotExceptions) {
  for (const char* bad :
       {"", "{", "nope", "[1,2]", R"({"Id": 5})", R"({"State": "x"})",
        R"({"Config": {"Labels": {"a": 1}}})", R"({"State":{"Running":"yes"}})"}) {
    auto r = DecodeContainerInspect(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInternal) << bad;
  }
  auto r = DecodeContainerInspect(R"({"State":{"Running":"yes"}})");
  EXPECT_NE(r.error().message().find("State.Running"), std::string::npos) << r.error().message();
  EXPECT_FALSE(DecodeContainerList("{}").ok());
  EXPECT_FALSE(DecodeContainerList(R"([{"Names": 3}])").ok());
}

// ---- Daemon errors ----

TEST(CodecTest, DaemonErrorCodesFollowStatus) {
  struct Case {
    int status;
    const char* body;
    ErrorCode code;
  } cases[] = {
      {400, R"({"message":"No command specified"})", ErrorCode::kInvalidArgument},
      {401, R"({"message":"unauthorized"})", ErrorCode::kPermissionDenied},
      {403, R"({"message":"forbidden"})", ErrorCode::kPermissionDenied},
      {404, R"({"message":"No such container: nonexist"})", ErrorCode::kNotFound},
      {409, R"({"message":"Conflict. The container name \"/x\" is already in use"})",
       ErrorCode::kConflict},
      {500, R"({"message":"something broke"})", ErrorCode::kInternal},
      {500,
       R"({"message":"Get \"http://localhost:1/v2/\": dial tcp 127.0.0.1:1: connect: connection refused"})",
       ErrorCode::kUnavailable},
      {500, R"({"message":"No such image: x:latest"})", ErrorCode::kNotFound},
      {500, R"({"message":"write /x: no space left on device"})", ErrorCode::kResourceExhausted},
      {503, R"({"message":"daemon shutting down"})", ErrorCode::kUnavailable},
  };
  for (const Case& c : cases) {
    const Error e = DecodeDaemonError(c.status, c.body, "inspect container", "nonexist");
    EXPECT_EQ(e.code(), c.code) << c.status << " " << c.body << " -> " << e.ToString();
    EXPECT_EQ(e.http_status(), c.status);
    EXPECT_EQ(e.message().rfind("docker inspect container nonexist: ", 0), 0u) << e.message();
  }
  const Error e = DecodeDaemonError(404, R"({"message":"No such container: nonexist"})",
                                    "inspect container", "nonexist");
  EXPECT_EQ(e.message(), "docker inspect container nonexist: No such container: nonexist");
}

TEST(CodecTest, DaemonErrorWithNonJsonBody) {
  const Error e = DecodeDaemonError(502, "Bad Gateway\n", "ping", "");
  EXPECT_EQ(e.message(), "docker ping: Bad Gateway");
  EXPECT_EQ(e.code(), ErrorCode::kInternal);
  const Error empty = DecodeDaemonError(500, "", "ping", "");
  EXPECT_EQ(empty.message(), "docker ping: HTTP status 500");
}

// ---- Progress streams ----

TEST(CodecTest, ProgressLinesAtEverySplit) {
  const std::string body = ReadTestdata("pull_progress.jsonl");
  for (std::size_t split = 0; split <= body.size(); ++split) {
    ProgressDecoder d("pull image", "busybox:latest");
    std::vector<ProgressMessage> got;
    auto on = [&](const ProgressMessage& m) { got.push_back(m); };
    ASSERT_TRUE(d.Feed(std::string_view(body).substr(0, split), on).ok());
    ASSERT_TRUE(d.Feed(std::string_view(body).substr(split), on).ok());
    ASSERT_TRUE(d.Finish(on).ok());
    ASSERT_EQ(got.size(), 4u) << split;
    EXPECT_EQ(got[1].status, "Downloading");
    EXPECT_EQ(got[1].id, "abc123");
    EXPECT_EQ(got[1].progress, "[=====>     ] 100B/200B");
    EXPECT_EQ(d.last_status(), "Status: Downloaded newer image for busybox:latest");
  }
}

TEST(CodecTest, ProgressErrorLineIsAnError) {
  ProgressDecoder d("pull image", "busybox:nope");
  int seen = 0;
  auto r = d.Feed(ReadTestdata("pull_error.jsonl"), [&](const ProgressMessage&) { ++seen; });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(
      r.error().message(),
      "docker pull image busybox:nope: manifest for busybox:nope not found: manifest unknown");
  EXPECT_FALSE(d.Finish(nullptr).ok());  // stays failed
}

TEST(CodecTest, ImportProgressGivesImageId) {
  ProgressDecoder d("import image", "x:latest");
  ASSERT_TRUE(d.Feed(ReadTestdata("import_progress.jsonl"), nullptr).ok());
  ASSERT_TRUE(d.Finish(nullptr).ok());
  EXPECT_EQ(d.last_status(),
            "sha256:cf3ce6ba1b08a68e47bce95c5293aa2f838f4b311d74fccb34c532a1097874aa");
}

TEST(CodecTest, ProgressLastLineWithoutNewlineAndGarbage) {
  ProgressDecoder d("import image", "x");
  ASSERT_TRUE(d.Feed(R"({"status":"done"})", nullptr).ok());
  ASSERT_TRUE(d.Finish(nullptr).ok());
  EXPECT_EQ(d.last_status(), "done");
  ProgressDecoder bad("import image", "x");
  auto r = bad.Feed("not json\n", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInternal);
}

}  // namespace
}  // namespace agvisor::docker
