// The loopback Kubernetes API test double (tests/kube/double_process.h) as a gtest environment,
// for the suites that run on the Kubernetes runtime: kube_runtime_test, and the shared suites'
// kube variants (AGVISOR_TEST_OVER_KUBE=1: sandbox_lifecycle_kube_test, sandbox_channel_kube_test,
// desktop_kube_test, rdp_kube_test, gateway_desktop_kube_test).
// SetUp starts the double (agent image and RuntimeClasses made), puts its kubeconfig in
// $KUBECONFIG and points $AGVISOR_TEST_HOST (testing::TestSpec) at kKubeHost. TearDown stops it:
// it removes its containers and volumes.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "tests/kube/double_process.h"

namespace agvisor::testing {

// Whether the suite runs as its kube variant (the CTest entries that set AGVISOR_TEST_OVER_KUBE).
inline bool OverKube() {
  const char* v = std::getenv("AGVISOR_TEST_OVER_KUBE");
  return v && std::string(v) == "1";
}

class KubeDoubleEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* script = std::getenv("AGVISOR_KUBE_DOUBLE");
    auto d = KubeDoubleProcess::Start(script && *script ? script : AGVISOR_KUBE_DOUBLE);
    ASSERT_TRUE(d.ok()) << d.error().ToString();
    double_ = std::move(*d);
    ::setenv("KUBECONFIG", double_->kubeconfig().c_str(), 1);
    ::setenv("AGVISOR_TEST_HOST", kKubeHost, 1);
  }
  void TearDown() override { double_.reset(); }

 private:
  std::unique_ptr<KubeDoubleProcess> double_;
};

// Registers the double for a shared suite's kube variant; nullptr when the suite runs on Docker.
inline ::testing::Environment* AddKubeDoubleIfAsked() {
  return OverKube() ? ::testing::AddGlobalTestEnvironment(new KubeDoubleEnv) : nullptr;
}

}  // namespace agvisor::testing
