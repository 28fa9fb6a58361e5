#include "agvisor/kube/codec.h"

#include <gtest/gtest.h>

namespace agvisor::kube {
namespace {

constexpr std::string_view kRunningPod = R"({
  "kind": "Pod", "apiVersion": "v1",
  "metadata": {"name": "agvisor-a1", "namespace": "default", "uid": "u-1",
               "creationTimestamp": "2026-12-02T04:41:50Z",
               "labels": {"agvisor": "1", "agvisor.name": "a1"},
               "annotations": {"agvisor.image": "agvisor/base:latest", "other": "x"}},
  "spec": {"containers": [{"name": "sandbox", "image": "agvisor/base:latest"}]},
  "status": {"phase": "Running",
             "initContainerStatuses": [{"name": "agvisor-agent",
               "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
             "containerStatuses": [{"name": "sandbox", "state": {"running": {"startedAt": "x"}}}]}
})";

TEST(KubeCodecTest, Pod) {
  auto p = DecodePod(kRunningPod);
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->name, "agvisor-a1");
  EXPECT_EQ(p->uid, "u-1");
  EXPECT_EQ(p->phase, "Running");
  EXPECT_EQ(p->image, "agvisor/base:latest");
  EXPECT_EQ(p->created_unix, 1796186510);
  EXPECT_FALSE(p->deleting);
  EXPECT_EQ(p->labels.at("agvisor.name"), "a1");
  EXPECT_EQ(p->annotations.at("agvisor.image"), "agvisor/base:latest");
  ASSERT_EQ(p->init_containers.size(), 1u);
  EXPECT_EQ(p->init_containers[0].state, "terminated");
  EXPECT_EQ(p->init_containers[0].reason, "Completed");
  ASSERT_NE(p->Container("sandbox"), nullptr);
  EXPECT_EQ(p->Container("sandbox")->state, "running");
  EXPECT_EQ(p->Container("nope"), nullptr);
}

TEST(KubeCodecTest, EndedAndDeletingPods) {
  auto p = DecodePod(R"({"metadata": {"name": "p", "deletionTimestamp": "2026-12-02T04:41:50Z"},
    "status": {"phase": "Failed", "containerStatuses": [{"name": "sandbox",
      "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}})");
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->deleting);
  EXPECT_EQ(p->Container("sandbox")->exit_code, 137);
  EXPECT_EQ(p->Container("sandbox")->reason, "OOMKilled");
  EXPECT_FALSE(DecodePod(R"({"kind": "Status"})").ok());
  EXPECT_FALSE(DecodePod(R"({"metadata": {}})").ok());
  EXPECT_FALSE(DecodePod("not json").ok());
  EXPECT_EQ(DecodePod("[]").error().code(), ErrorCode::kInternal);
}

TEST(KubeCodecTest, PodList) {
  auto l = DecodePodList(std::string(R"({"kind": "PodList", "items": [)") +
                         std::string(kRunningPod) + "]}");
  ASSERT_TRUE(l.ok()) << l.error().ToString();
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0].name, "agvisor-a1");
  auto empty = DecodePodList(R"({"kind": "PodList", "items": null})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_FALSE(DecodePodList(R"({"kind": "PodList"})").ok());
}

TEST(KubeCodecTest, ObjectLabelsMergeAgvisorAnnotations) {
  auto l = DecodeObjectLabels(
      R"({"metadata": {"labels": {"agvisor": "1", "a": "label"},
                       "annotations": {"agvisor.image": "x/y:z", "a": "annotation"}}})");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->at("agvisor.image"), "x/y:z");
  EXPECT_EQ(l->at("a"), "label");
  EXPECT_EQ(l->at("agvisor"), "1");
}

TEST(KubeCodecTest, ObjectUidAndDeleteOptionsNamingIt) {
  auto uid = DecodeObjectUid(R"({"kind": "NetworkPolicy", "metadata": {"uid": "u-1"}})");
  ASSERT_TRUE(uid.ok()) << uid.error().ToString();
  EXPECT_EQ(*uid, "u-1");
  EXPECT_EQ(DecodeObjectUid(R"({"metadata": {}})").error().code(), ErrorCode::kInternal);
  EXPECT_EQ(DeleteOptionsWithUid("u-1"),
            R"({"apiVersion":"v1","kind":"DeleteOptions","preconditions":{"uid":"u-1"}})");
}

TEST(KubeCodecTest, RuntimeClass) {
  auto h = DecodeRuntimeClassHandler(
      R"({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"},
          "handler": "runsc"})");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, "runsc");
  EXPECT_FALSE(DecodeRuntimeClassHandler(R"({"kind": "RuntimeClass"})").ok());
}

TEST(KubeCodecTest, StatusErrors) {
  const std::string conflict =
      R"({"kind": "Status", "apiVersion": "v1", "status": "Failure",
          "message": "pods \"agvisor-a\" already exists", "reason": "AlreadyExists", "code": 409})";
  Error e = StatusError(409, conflict, "create pod agvisor-a");
  EXPECT_EQ(e.code(), ErrorCode::kConflict);
  EXPECT_EQ(e.message(), "create pod agvisor-a: pods \"agvisor-a\" already exists");
  EXPECT_EQ(e.http_status(), 409);
  EXPECT_EQ(StatusError(404, "{}", "get").code(), ErrorCode::kNotFound);
  EXPECT_EQ(StatusError(422, "{}", "create").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(StatusError(400, "", "x").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(StatusError(403, "{}", "x").code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(StatusError(403, "{}", "x").message().find("RBAC"), std::string::npos);
  EXPECT_EQ(StatusError(401, "{}", "x").code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(StatusError(503, "{}", "x").code(), ErrorCode::kUnavailable);
  EXPECT_EQ(StatusError(429, "{}", "x").code(), ErrorCode::kUnavailable);
  EXPECT_EQ(StatusError(504, "{}", "x").code(), ErrorCode::kTimeout);
  // Not a Status: the body's start, control characters blanked, bounded.
  Error raw = StatusError(500, std::string("oops\nline") + std::string(5000, 'x'), "x");
  EXPECT_EQ(raw.message().rfind("x: oops line", 0), 0u);
  EXPECT_LT(raw.message().size(), 400u);
}

TEST(KubeCodecTest, ExecStatus) {
  EXPECT_EQ(*ExitCodeOfStatus(R"({"metadata": {}, "status": "Success"})"), 0);
  auto code = ExitCodeOfStatus(
      R"({"metadata": {}, "status": "Failure", "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
          "reason": "NonZeroExitCode",
          "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}})");
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 3);
  auto failed = ExitCodeOfStatus(
      R"j({"status": "Failure", "message": "container not found (\"x\")", "reason": "InternalError"})j");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(failed.error().message().find("container not found"), std::string::npos);
  EXPECT_FALSE(ExitCodeOfStatus(R"({"status": "Failure", "reason": "NonZeroExitCode",
      "details": {"causes": [{"reason": "ExitCode", "message": "-1"}]}})")
                   .ok());
  EXPECT_FALSE(ExitCodeOfStatus("[").ok());
}

TEST(KubeCodecTest, SelectorsAndLabelValues) {
  auto s = LabelSelector({"agvisor", "agvisor.name=a1"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "agvisor,agvisor.name=a1");
  EXPECT_FALSE(LabelSelector({"a,b"}).ok());
  EXPECT_FALSE(LabelSelector({"a=b c"}).ok());
  EXPECT_TRUE(IsLabelValue(""));
  EXPECT_TRUE(IsLabelValue("2g"));
  EXPECT_TRUE(IsLabelValue("agvisor-x.y_z"));
  EXPECT_FALSE(IsLabelValue("agvisor/base:latest"));
  EXPECT_FALSE(IsLabelValue("-x"));
  EXPECT_FALSE(IsLabelValue(std::string(64, 'a')));
  EXPECT_EQ(UnixSecondsOfRfc3339("1970-01-01T00:01:00Z"), 60);
  EXPECT_EQ(UnixSecondsOfRfc3339("garbage"), 0);
}

}  // namespace
}  // namespace agvisor::kube
