// E2B sandbox ids and agvisor's sandboxes: which sandboxes the E2B door sees, and under what id.
//
// E2B's SDK puts a sandbox id into host names (`getHost(port)` is "PORT-ID.DOMAIN"), so an id
// must be a DNS label. The mapping is the identity on the name after agvisor's prefix: the
// sandbox "agvisor-3f9c01ab" has the E2B id "3f9c01ab". Sandboxes that E2B's create makes are
// unnamed (an 8-hex-digit suffix, always a label); a named sandbox is visible to E2B when its
// name is a label (lower-case letters, digits and '-', not at either end, at most 63), and
// invisible otherwise (`my_box`, `Box`, `a.b` have no E2B id).
//
// Used by e2b/mount.cc and the REST API (e2b/api.cc). Pure; unit-tested in ids_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"

namespace agvisor::e2b {

// Whether `id` is a DNS label (RFC 1123, lower case only): 1-63 of [a-z0-9-], no '-' first or
// last.
bool IsSandboxId(std::string_view id);

// The container name of the sandbox with E2B id `id` ("agvisor-" + id). Errors:
// kInvalidArgument (not a DNS label: says what an id looks like).
Result<std::string> ContainerForId(std::string_view id);

// The E2B id of the sandbox `container_name` ("agvisor-..."), or nullopt when E2B cannot see it
// (no agvisor prefix, or a suffix that is not a DNS label).
std::optional<std::string> IdForContainer(std::string_view container_name);

// A host name the SDK's getHost(port) made, "PORT-ID.DOMAIN[:LISTEN_PORT]" (the Host header of a
// request for a sandbox's port, docs/e2b.md "Ports").
struct SandboxHost {
  std::uint16_t port = 0;
  std::string id;
};
// Parses `host` (a Host header); `domain` ("" = any) is what must follow the first label, ports
// ignored and without case. nullopt: not such a host (the request is agvisord's own).
std::optional<SandboxHost> ParseSandboxHost(std::string_view host, std::string_view domain);

// The domain sandboxes report when agvisord has no --e2b-domain: `host` (the Host header the
// client reached agvisord by), an address literal replaced by "localhost" with the port kept
// ("127.0.0.1:8080" -> "localhost:8080": "8000-ID.127.0.0.1" is no host name a URL parser
// takes, it ends in a number). "" for a Host that is not a plain host[:port].
std::string DomainFromHost(std::string_view host);

}  // namespace agvisor::e2b
