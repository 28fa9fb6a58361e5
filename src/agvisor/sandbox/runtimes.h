// The runtime factory: the one place that turns a host address into the Runtime (runtime.h) that
// serves it, and the only code that knows the address forms. Its build target is the only one
// that links both runtimes (sandbox/docker_runtime/, sandbox/kube_runtime/); the sandbox core
// links neither. Used by the owners of runtimes: client/in_process.cc's LocalPlace (also for the
// host's own verbs: doctor, image build), agvisord, tests and benches.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/host_verbs.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor {

// A new Runtime for `host`: "" / unix:// / tcp:// / ssh:// → the Docker runtime (one client, so
// an ssh host costs one ssh process for the runtime's life); kube:[//CONTEXT][/NAMESPACE] → the
// Kubernetes runtime. Each call makes a new object: its owner makes it once and hands it on.
// Errors: kInvalidArgument (a malformed address), those of connecting (docker::Client::Connect's;
// for Kubernetes reading the kubeconfig and kube::Client::Connect's).
Result<std::shared_ptr<Runtime>> MakeRuntime(std::string_view host);

// A host's runtime, made by MakeRuntime on first use and then kept: for owners made before their
// host can be reached (LocalPlace, agvisord's service and gateway). Thread-safe; a failure is
// returned to that call and the next one tries again.
class LazyRuntime {
 public:
  explicit LazyRuntime(std::string host) : host_(std::move(host)) {}
  // Errors: MakeRuntime's.
  Result<std::shared_ptr<Runtime>> Get();
  const std::string& host() const { return host_; }

 private:
  const std::string host_;
  std::mutex mu_;
  std::shared_ptr<Runtime> runtime_;
};

// ---- The verbs of a host itself (client/place.h: Place::HostReport, BuildImage) ----
// Every check of `agvisor doctor` on `host`: a Docker host's (docker_runtime/docker_doctor.h:
// real sandboxes, timed) or a Kubernetes host's (kube_runtime/kube_doctor.h: no pod started).
// Needs no made runtime, so it reports what keeps one from being made (an unreachable daemon, a
// kubeconfig that does not load). Never fails: a failure is a kFail check.
std::vector<HostCheck> DiagnoseHost(std::string_view host);
// The name an image build of `kind` gets when none is given: agvisor/KIND:latest, or for
// kube-agent the one the Kubernetes runtime's pods use ($AGVISOR_KUBE_AGENT_IMAGE, else
// agvisor/agent:HASH of this build's agent).
std::string DefaultImageName(std::string_view kind);
// Builds an image where `host`'s sandboxes get theirs: a Docker host's daemon; for a Kubernetes
// host this machine's Docker (the nodes pull from a registry: push it there). The name defaults
// to DefaultImageName. Errors: BuildDockerImage's (docker_runtime/image_build.h).
Result<std::string> BuildHostImage(std::string_view host, ImageBuildOptions options);

// Whether `host` addresses a Kubernetes namespace ("kube:..."), without reaching it.
bool IsKubernetesHost(std::string_view host);

// Whether `host` is an address MakeRuntime takes, without reaching it (agvisord --check). Errors:
// kInvalidArgument (says which forms are accepted).
Result<void> CheckHostAddress(std::string_view host);

}  // namespace agvisor
