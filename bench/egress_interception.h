// Brokered secrets' cost (docs/egress.md, "Secrets"): an intercepted connection (TLS terminated
// by the enforcer, the upstream verified, each request checked and rewritten) against a
// pass-through one (SNI only, spliced) through the same EgressProxy, in one run, on loopback in
// this process: connection setup, one request on a kept connection, and download throughput.
// Printed by `egress_bench` and by `agvisor_bench --suite egress`; not asserted.
#pragma once

namespace agvisor {

// Prints the rows; `runs` requests per side for each latency row.
void InterceptionRows(int runs);

}  // namespace agvisor
