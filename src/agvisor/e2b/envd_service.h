// envd's methods over client::SandboxHandle, independent of the HTTP server's types: the Process
// service (envd_process.cc), the Filesystem service and the /files routes (envd_fs.cc). envd.cc
// reads the request, calls these and writes their answers. Every method acts on the caller's one
// sandbox (its handle) as its user (commands run as that user; file contents are read and
// written by commands of that user, so that ownership and permissions are the user's).
//
// What envd keeps between calls (the processes started through it with their configs and tags,
// the streams attached to them, the watchers) lives in an EnvdState the daemon keeps as long as
// its E2B mount.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/client/place.h"
#include "agvisor/e2b/connect.h"
#include "agvisor/e2b/envd_messages.h"
#include "agvisor/e2b/envd_stream.h"

namespace agvisor::e2b::envd {

class EnvdState;

// Who calls, on which sandbox.
struct Caller {
  std::shared_ptr<client::SandboxHandle> handle;
  std::string user = "user";  // Basic auth's user, or the default
  EnvdState* state = nullptr;
  // The sandbox's environment (the create request's envVars): a process's own envs win.
  std::map<std::string, std::string> envs;
};

// A unary method's answer: 200 and the JSON message, or the error.
struct UnaryAnswer {
  std::optional<connect::RpcError> error;
  std::string json;
};

// The bound of one request message (a unary body, a stream's envelope).
inline constexpr std::size_t kMaxMessageBytes = 4u << 20;
// Processes and watchers tracked per sandbox at most; more: resource_exhausted.
inline constexpr std::size_t kMaxTrackedPerSandbox = 1024;

// Whether `method` ("/process.Process/Start", ...) is one envd serves, and whether it streams.
enum class MethodKind { kUnknown, kUnary, kServerStream, kClientStream };
MethodKind KindOf(std::string_view method);

// A unary method. Errors are in the answer (not_found, invalid_argument, ...).
UnaryAnswer CallUnary(const Caller& caller, std::string_view method, std::string_view json);
// A server-stream method: writes its envelopes and the end-stream envelope.
void CallStream(const Caller& caller, std::string_view method, std::string_view json,
                const StreamOptions& options, const StreamWriter& write);

// A path as envd takes it: absolute as is, relative to the user's home ("/root" for root,
// "/home/USER" otherwise), "~" and "~/..." as the home. Errors: kInvalidArgument (empty, a NUL).
Result<std::string> ResolvePath(std::string_view path, std::string_view user);

// ---- /files ----
// GET /files: the file's bytes to `begin` (called once before the first byte, with its size)
// and `write`. Errors: kNotFound, kInvalidArgument (a directory), the sandbox's.
Result<void> ReadFileTo(const Caller& caller, std::string_view path,
                        const std::function<Result<void>(std::uint64_t size)>& begin,
                        const channel::ByteSink& write);
// POST /files: writes each file (its path, its bytes) as the caller's user, parents made, and
// returns what envd reports for them.
struct UploadFile {
  std::string path;
  std::string_view data;
};
Result<std::vector<EntryInfo>> WriteFiles(const Caller& caller,
                                          const std::vector<UploadFile>& files);

// What envd keeps for one daemon. Thread-safe.
class EnvdState {
 public:
  EnvdState();
  ~EnvdState();
  EnvdState(const EnvdState&) = delete;
  EnvdState& operator=(const EnvdState&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace agvisor::e2b::envd
