// The loopback Kubernetes API test double (tests/kube/kube_double.py) as a gtest environment, for
// the suites that run on the Kubernetes runtime: kube_runtime_test, and the shared suites' kube
// variants (AGVISOR_TEST_OVER_KUBE=1: sandbox_lifecycle_kube_test, sandbox_channel_kube_test).
// SetUp starts the double with its kubeconfig in $KUBECONFIG, imports the agent image from this
// build's agent (as docs/kubernetes.md says), makes the RuntimeClasses `gvisor` (handler runsc)
// and `plain` (handler runc), and points $AGVISOR_TEST_HOST (testing::TestSpec) at kKubeHost.
// TearDown stops the double, which removes its containers and volumes.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "agvisor/base/subprocess.h"
#include "agvisor/sandbox/agent_blob.h"
#include "agvisor/sandbox/kube_runtime/pod_manifest.h"

namespace agvisor::testing {

// The context and namespace the double's kubeconfig names.
inline constexpr const char* kKubeHost = "kube://agvisor-double/default";

// Whether the suite runs as its kube variant (the CTest entries that set AGVISOR_TEST_OVER_KUBE).
inline bool OverKube() {
  const char* v = std::getenv("AGVISOR_TEST_OVER_KUBE");
  return v && std::string(v) == "1";
}

class KubeDoubleEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/agvisor-kube-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    kubeconfig_ = dir_ + "/kubeconfig";

    // The agent image: the agent and busybox (the installer's cp).
    const std::string root = dir_ + "/agent-root";
    ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((root + "/bin").c_str(), 0755), 0);
    {
      std::ofstream out(root + "/agvisor-agent", std::ios::binary);
      const auto blob = EmbeddedAgentBinary();
      out.write(blob.data(), static_cast<std::streamsize>(blob.size()));
    }
    ASSERT_EQ(::chmod((root + "/agvisor-agent").c_str(), 0755), 0);
    auto image = Sh("cp /bin/busybox " + root + "/bin/busybox && tar -C " + root +
                    " -c . | docker import - " + AgentImageRefForKube());
    ASSERT_TRUE(image.ok() && image->status.success())
        << (image.ok() ? image->err : image.error().ToString());

    const char* script = std::getenv("AGVISOR_KUBE_DOUBLE");
    std::string path = script && *script ? script : AGVISOR_KUBE_DOUBLE;
    auto p = Subprocess::Spawn(
        {.argv = {"/usr/bin/python3", path, "--kubeconfig", kubeconfig_, "--namespace", "default"},
         .pipe_stdout = true});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    double_ = std::make_unique<Subprocess>(std::move(*p));
    std::string line;
    char c;
    while (::read(double_->stdout_fd().get(), &c, 1) == 1 && c != '\n') line += c;
    ASSERT_EQ(line.rfind("READY https://127.0.0.1:", 0), 0u) << "the double said: " << line;
    ::setenv("KUBECONFIG", kubeconfig_.c_str(), 1);
    ::setenv("AGVISOR_TEST_HOST", kKubeHost, 1);

    // --validate=false: the double serves no OpenAPI documents (tests/kube/README.md).
    auto rc = Sh("kubectl --kubeconfig " + kubeconfig_ + " apply --validate=false -f -",
                 "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gvisor\n"
                 "handler: runsc\n---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\n"
                 "metadata:\n  name: plain\nhandler: runc\n");
    ASSERT_TRUE(rc.ok() && rc->status.success()) << (rc.ok() ? rc->err : rc.error().ToString());
  }

  void TearDown() override {
    if (double_) {
      (void)double_->Kill(SIGTERM);  // it removes its containers and volumes
      (void)double_->WaitFor(std::chrono::seconds(60));
    }
    (void)Sh("rm -rf " + dir_);
  }

  const std::string& kubeconfig() const { return kubeconfig_; }

 private:
  static Result<CommandOutput> Sh(const std::string& script, std::string_view input = {}) {
    return RunCommand({"sh", "-c", script}, input);
  }

  std::string dir_, kubeconfig_;
  std::unique_ptr<Subprocess> double_;
};

// Registers the double for a shared suite's kube variant; nullptr when the suite runs on Docker.
inline ::testing::Environment* AddKubeDoubleIfAsked() {
  return OverKube() ? ::testing::AddGlobalTestEnvironment(new KubeDoubleEnv) : nullptr;
}

}  // namespace agvisor::testing
