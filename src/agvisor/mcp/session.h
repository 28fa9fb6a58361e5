// The Model Context Protocol server of agvisor (docs/mcp.md): JSON-RPC 2.0 messages in, answers
// out, with the tools of tools.cc over a client::Place (in process or agvisord). Transports are
// thin: `agvisor mcp` (stdio.h, newline-delimited messages on stdin/stdout) and agvisord's /mcp
// (server/mcp_route.h, streamable HTTP). Both hand every message they receive to one Session.
//
// What a session answers: initialize (protocol version negotiation: the client's version when
// it is one of kProtocolVersions, else the newest), ping, tools/list (each tool's JSON Schema and
// description), tools/call. A tool's failure is a result with isError true whose text is what
// the CLI prints for the same error ("agvisor: <message>"); arguments are checked against the
// tool's schema first (a wrong type or an unknown argument names the argument and the rule).
// Malformed JSON, a message without "jsonrpc": "2.0", unknown methods and unknown tools are
// JSON-RPC errors (-32700, -32600, -32601, -32602). notifications/cancelled stops the tools/call
// it names (an exec's process group is killed; the call answers with an error saying so).
//
// Sandboxes created through a session are tracked: EndSandboxes() removes them (stdio: when stdin
// closes, i.e. the client went away). Each also carries a lifetime (SessionOptions::
// default_lifetime unless the caller gave one) so it ends even when the server is killed.
//
// Thread-safe: Handle may run on many threads at once (a long exec does not hold up a ping).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/client/handle_cache.h"
#include "agvisor/client/place.h"

namespace agvisor::mcp {
namespace internal {
class Cancellation;
}

// Newest first; the first is what a session offers when the client asks for another one.
inline constexpr std::string_view kProtocolVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                         "2024-11-05"};

struct SessionOptions {
  // Seconds of life given to a sandbox created without "lifetime": it ends itself then even if
  // nothing removes it (agvisor mcp killed with SIGKILL, an HTTP client that never comes back).
  std::int64_t default_lifetime = kDefaultLifetime;
  static constexpr std::int64_t kDefaultLifetime = 3600;
  std::string server_version = "0.1.0";
  // The egress log of a sandbox (the egress_log tool; docs/egress.md, "Log"): the answer of
  // GET .../egress/log for its last `last` records (api::EgressLogJson), by container name. Set
  // where an agvisord runs the enforcers (its /mcp route; `agvisor mcp --server`); unset, the
  // tool says the log is agvisord's.
  std::function<Result<std::string>(const std::string& container, std::size_t last)> egress_log;
};

// The most bytes of each of stdout and stderr an exec's result carries: the last ones
// (sandbox.h kStreamTailBytes), with "truncated": true when older output was dropped.
inline constexpr std::size_t kExecOutputCap = kStreamTailBytes;
// The largest file read_file returns (larger ones: an error saying how to read parts).
inline constexpr std::uint64_t kReadFileCap = 8u << 20;

// Sends one serialized JSON-RPC notification to the client while a call runs (progress). Called
// on the thread of the Handle that makes it.
using Notify = std::function<void(std::string_view message)>;

class Session {
 public:
  // `shared`: handles kept beyond this session (agvisord's, on `place`, shared with its other
  // doors); null: the session keeps its own.
  Session(client::Place& place, SessionOptions options = {}, client::HandleCache* shared = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // One received message (a request, a notification, a response, or a batch of them), as text.
  // Returns the serialized answer to send back, or "" when there is none (notifications,
  // responses). Never fails: errors are JSON-RPC error answers.
  std::string Handle(std::string_view message, const Notify& notify = nullptr);

  // What a transport needs to know of a message before handling it: whether it holds at least
  // one request (HTTP answers 202 Accepted otherwise), whether one is `initialize`, and whether
  // one asks for progress (`_meta.progressToken`: HTTP then answers as an event stream).
  struct Peek {
    bool valid_json = false;
    bool has_request = false;
    bool initialize = false;
    bool wants_progress = false;
  };
  static Peek Inspect(std::string_view message);

  // Removes every sandbox this session created and has not removed (named ones keep their
  // volume, as `agvisor stop`); returns how many. Later calls on them fail.
  std::size_t EndSandboxes();
  // The container names of the sandboxes this session created and has not removed.
  std::vector<std::string> Tracked() const;
  // The protocol version agreed at initialize ("" before it).
  std::string protocol_version() const;

  // For tools.cc: the handle of `container_name` (opened once, then kept), tracking.
  Result<std::shared_ptr<client::SandboxHandle>> HandleFor(const std::string& container_name);
  void Track(const std::string& container_name, std::shared_ptr<client::SandboxHandle> handle);
  void Forget(const std::string& container_name);
  client::Place& place() { return place_; }
  // For session.cc: the tools/call requests in flight by their serialized id, so that
  // notifications/cancelled reaches the one it names.
  void Begin(const std::string& id, std::shared_ptr<internal::Cancellation> c);
  void End(const std::string& id);
  void Cancel(const std::string& id);
  const SessionOptions& options() const { return options_; }

 private:
  client::Place& place_;
  SessionOptions options_;
  client::HandleCache* shared_;
  mutable std::mutex mu_;
  std::string protocol_version_;
  std::map<std::string, std::shared_ptr<client::SandboxHandle>> handles_;
  std::set<std::string> tracked_;
  std::map<std::string, std::shared_ptr<internal::Cancellation>> in_flight_;
};

// The tools' descriptions and schemas, as tools/list answers them ({"tools": [...]}), for tests.
std::string ToolListJson();

}  // namespace agvisor::mcp
