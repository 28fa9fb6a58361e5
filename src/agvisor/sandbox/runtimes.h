// The runtime factory: the one place that turns a host address into the Runtime (runtime.h) that
// serves it, and the only code that knows the address forms. Its build target is the only one
// that links both runtimes (sandbox/docker_runtime/, sandbox/kube_runtime/); the sandbox core
// links neither. Used by the owners of runtimes: client/in_process.cc's LocalPlace, agvisord, the
// CLI's host verbs, tests and benches.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
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

// Whether `host` addresses a Kubernetes namespace ("kube:..."), without reaching it.
bool IsKubernetesHost(std::string_view host);

// Whether `host` is an address MakeRuntime takes, without reaching it (agvisord --check). Errors:
// kInvalidArgument (says which forms are accepted).
Result<void> CheckHostAddress(std::string_view host);

}  // namespace agvisor
