// The loopback Kubernetes API test double (kube_double.py, this folder) as a process of the
// caller, ready for the Kubernetes runtime: started with a kubeconfig of its own, the agent image
// imported from this build's agent (images::BuildKubeAgentImage, as `agvisor image build
// kube-agent` does), and
// the RuntimeClasses `gvisor` (handler runsc) and `plain` (handler runc) made with the real
// kubectl. Its SelfSubjectAccessReviews answer by deploy/rbac.yaml (kube_double.py --rbac), so
// `agvisor doctor` checks that Role against the permissions the runtime uses. Used by the
// integration tests' environment (tests/integration/kube_double.h) and by `agvisor_bench --suite
// kube`. Destroying it stops the double, which removes every container and volume it made, and
// removes its directory.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include "agvisor/base/error.h"
#include "agvisor/base/subprocess.h"
#include "agvisor/docker/client.h"
#include "agvisor/images/kube_agent_image.h"
#include "agvisor/sandbox/agent_blob.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/kube_runtime/pod_manifest.h"

namespace agvisor::testing {

// The context and namespace the double's kubeconfig names.
inline constexpr const char* kKubeHost = "kube://agvisor-double/default";

class KubeDoubleProcess {
 public:
  // `script`: kube_double.py. `quiet`: its request log goes to log() rather than to this
  // process's stderr. Errors: kUnavailable naming the step that failed, with its output.
  static Result<std::unique_ptr<KubeDoubleProcess>> Start(const std::string& script,
                                                          bool quiet = false) {
    std::unique_ptr<KubeDoubleProcess> d(new KubeDoubleProcess);
    char tmpl[] = "/tmp/agvisor-kube-double-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return Error::Unavailable("mkdtemp failed");
    d->dir_ = tmpl;
    d->kubeconfig_ = d->dir_ + "/kubeconfig";

    // What `agvisor image build kube-agent` makes, on the local dockerd the double runs pods on;
    // its tag is the agent's hash, so one that exists holds this agent (importing it again
    // would leave the old one behind untagged).
    auto docker = AGVISOR_TRY(ConnectDockerHost(""));
    if (!docker->InspectImage(AgentImageRefForKube()).ok()) {
      auto imported = images::BuildKubeAgentImage(*docker, EmbeddedAgentBinary(),
                                                  {.name = AgentImageRefForKube()});
      if (!imported.ok()) return imported.error().WithContext("import the agent image");
    }

    d->log_ = quiet ? d->dir_ + "/double.log" : "/dev/stderr";
    // deploy/ of the same checkout as the script (tests/kube/kube_double.py).
    const std::string rbac = script.substr(0, script.rfind('/') + 1) + "../../deploy/rbac.yaml";
    if (::access(rbac.c_str(), R_OK) != 0) {
      return Error::Unavailable("no " + rbac + " beside the double's script " + script);
    }
    auto p = AGVISOR_TRY(Subprocess::Spawn(
        {.argv = {"sh", "-c",
                  "exec /usr/bin/python3 \"$0\" --kubeconfig \"$1\" --namespace default "
                  "--rbac \"$3\" 2>>\"$2\"",
                  script, d->kubeconfig_, d->log_, rbac},
         .pipe_stdout = true}));
    d->double_ = std::make_unique<Subprocess>(std::move(p));
    std::string line;
    char c;
    while (::read(d->double_->stdout_fd().get(), &c, 1) == 1 && c != '\n') line += c;
    if (line.rfind("READY https://127.0.0.1:", 0) != 0) {
      return Error::Unavailable("the Kubernetes API test double did not start; it said: " + line);
    }
    d->url_ = line.substr(6);
    // --validate=false: the double serves no OpenAPI documents (tests/kube/README.md).
    AGVISOR_RETURN_IF_ERROR(
        Sh("make the RuntimeClasses",
           "kubectl --kubeconfig " + d->kubeconfig_ + " apply --validate=false -f -",
           "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gvisor\n"
           "handler: runsc\n---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\n"
           "metadata:\n  name: plain\nhandler: runc\n"));
    return d;
  }

  ~KubeDoubleProcess() {
    if (double_) {
      (void)double_->Kill(SIGTERM);  // it removes its containers and volumes
      (void)double_->WaitFor(std::chrono::seconds(60));
    }
    if (!dir_.empty()) (void)RunCommand({"rm", "-rf", dir_});
  }

  KubeDoubleProcess(const KubeDoubleProcess&) = delete;
  KubeDoubleProcess& operator=(const KubeDoubleProcess&) = delete;

  // Its kubeconfig (context agvisor-double): put it in $KUBECONFIG for kKubeHost.
  const std::string& kubeconfig() const { return kubeconfig_; }
  // "https://127.0.0.1:PORT".
  const std::string& url() const { return url_; }
  // Where its request log goes.
  const std::string& log() const { return log_; }

 private:
  KubeDoubleProcess() = default;

  static Result<void> Sh(std::string_view step, const std::string& script,
                         std::string_view input = {}) {
    auto r = RunCommand({"sh", "-c", script}, input);
    if (!r.ok()) return r.error().WithContext(std::string(step));
    if (!r->status.success()) return Error::Unavailable(std::string(step) + ": " + r->err);
    return Ok();
  }

  std::string dir_, kubeconfig_, url_, log_;
  std::unique_ptr<Subprocess> double_;
};

}  // namespace agvisor::testing
