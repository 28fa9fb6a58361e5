// `agvisor_bench --suite kube` (bench/README.md, "Kubernetes runtime"): create to ready, exec
// round trip and pool acquire through the Kubernetes runtime against the loopback Kubernetes API
// test double (tests/kube/kube_double.py, whose pods are runsc containers on the local dockerd)
// and through the Docker runtime on the same dockerd, side by side in one run; then the double's
// own cost: a bare API call and a bare pods/exec against the Engine API's inspect and exec.
#pragma once

#include <string>

namespace agvisor {

// Prints the suite's tables. `creates` cold creates, `runs` exec round trips, `acquires` pool
// acquires per runtime. Exits the process with a message when the double cannot start.
void KubeSuite(const std::string& image, int creates, int runs, int acquires);

}  // namespace agvisor
