// `agvisor doctor --host kube://...`: what a cluster offers the Kubernetes runtime
// (kube_runtime.h), checked without starting a pod and without a made runtime (the kubeconfig
// may not load). Reached through the factory's DiagnoseHost (runtimes.h); the checks are the
// Docker host's type (sandbox/host_verbs.h), formatted alike by cli/doctor.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agvisor/sandbox/host_verbs.h"

namespace agvisor {

// The checks of `host` (a kube: address), in order: "kubernetes" (the credentials' source, the
// context, the API server and its version), "namespace" (agvisor's pods listed there),
// "runtime class" (the one sandboxes use exists with a gVisor handler, as every create checks),
// "rbac" (a SelfSubjectAccessReview per permission the runtime uses; a warning when the server
// serves none), "network policy" (what every sandbox pod's policy allows, as a warning: whether
// the CNI enforces it cannot be seen from outside; a FAIL when $AGVISOR_KUBE_BLOCKED_CIDRS or
// $AGVISOR_KUBE_DNS do not parse), "agent image" and "sandbox image" (kInfo: what the nodes must
// pull). Stops after "kubernetes" when the server cannot be reached. Never fails: a failure is a
// kFail check.
std::vector<HostCheck> DiagnoseKubeHost(std::string_view host);

// The permissions the Kubernetes runtime's calls need, as RBAC rules would grant them:
// "GROUP/RESOURCE VERB" with "core" for the core group ("core/pods create"). deploy/rbac.yaml
// grants exactly these.
std::vector<std::string> KubeRuntimePermissions();

}  // namespace agvisor
