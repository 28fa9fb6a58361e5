// Where the CLI's sandboxes live: a Docker host driven by the library (the default), or an
// agvisord reached with --server. RunCli picks one Backend per run (GlobalOptions::GetBackend);
// every subcommand is written once against these interfaces and does not know which it has.
//
// Internal to src/agvisor/cli. LocalBackend (backend_local.cc) wraps Sandbox; RemoteBackend
// (backend_remote.cc) wraps server::RemoteClient. Errors keep their agvisor::ErrorCode either
// way, so the exit codes of docs/cli.md hold through the daemon too.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/channel/channel.h"
#include "agvisor/docker/types.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor::server {
class RemoteClient;
}

namespace agvisor::cli {

// A connection to a TCP port inside a sandbox (port-forward, desktop viewers).
class PortConnection {
 public:
  virtual ~PortConnection() = default;
  // Up to buf.size() bytes; 0 = the sandbox side closed.
  virtual Result<std::size_t> Read(std::span<char> buf) = 0;
  virtual Result<void> Write(std::string_view data) = 0;
  // Half-close: the sandbox side reads end of file; reading goes on.
  virtual Result<void> CloseWrite() = 0;
  virtual void Close() = 0;
};
// The library's PortStream as a PortConnection.
std::unique_ptr<PortConnection> WrapPortStream(std::shared_ptr<PortStream> stream);

// A command the caller talks to while it runs (shell): stdin, window size, exit.
class RunningCommand {
 public:
  virtual ~RunningCommand() = default;
  virtual Result<void> Write(std::string_view data) = 0;
  virtual Result<void> CloseStdin() = 0;
  virtual Result<void> Resize(std::uint16_t rows, std::uint16_t cols) = 0;
  // Output to `callbacks` until the command exits.
  virtual Result<ProcessExit> Wait(const channel::ExecCallbacks& callbacks) = 0;
};

// One sandbox, by name.
class SandboxHandle {
 public:
  virtual ~SandboxHandle() = default;
  virtual const std::string& container_name() const = 0;
  // Runs argv to its end with Sandbox::Exec's semantics: live output through the options'
  // callbacks, exit code 124 on timeout, `input` as stdin. Errors: as Sandbox::Exec.
  virtual Result<ExecResult> Exec(const std::vector<std::string>& argv,
                                  const ExecOptions& options) = 0;
  virtual Result<std::unique_ptr<RunningCommand>> Start(const std::vector<std::string>& argv,
                                                        const ProcessOptions& options) = 0;
  virtual Result<std::uint32_t> StartBackground(const std::vector<std::string>& argv,
                                                const BackgroundOptions& options) = 0;
  virtual Result<std::vector<ProcessInfo>> ListProcesses() = 0;
  virtual Result<ProcessExit> AttachProcess(std::uint32_t pid,
                                            const channel::ExecCallbacks& callbacks) = 0;
  virtual Result<void> Signal(std::uint32_t pid, int signal) = 0;
  // As Sandbox::Upload / Download (a tar stream each way; downloads extracted by
  // UnpackIntoLocalDir's host rules, on this machine, with either backend).
  virtual Result<void> Upload(std::string_view local_path, std::string_view sandbox_dir) = 0;
  virtual Result<void> Download(std::string_view sandbox_path, std::string_view local_dir,
                                const DownloadOptions& options) = 0;
  virtual Result<std::unique_ptr<PortConnection>> OpenPort(std::uint16_t port) = 0;
};

// What create reports.
struct CreatedSandbox {
  std::unique_ptr<SandboxHandle> handle;
  std::optional<std::string> name;
  bool resumed = false;
  std::string disk_warning;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // As Sandbox::Create (the spec's host is the backend's).
  virtual Result<CreatedSandbox> Create(const SandboxSpec& spec) = 0;
  // A handle on "agvisor-..." (the local backend checks that it exists; the daemon's errors come
  // with the first operation).
  virtual Result<std::unique_ptr<SandboxHandle>> Open(std::string_view container_name) = 0;
  virtual Result<std::vector<SandboxInfo>> List() = 0;
  // As Sandbox::Remove.
  virtual Result<void> Remove(std::string_view container_name, bool erase_data) = 0;
  // One sample of Docker's stats for a running sandbox (about a second).
  virtual Result<docker::ContainerStats> Stats(const SandboxInfo& sandbox) = 0;
};

// The library on Docker host `host` ("" = $DOCKER_HOST or the local socket).
std::unique_ptr<Backend> MakeLocalBackend(std::string host);

// agvisord at `address` ("unix:/path" or "http://127.0.0.1:PORT"), authenticated with the token
// of `token_file`, else $AGVISOR_TOKEN_FILE, else $AGVISOR_TOKEN, else agvisord's default token
// file. Errors: kInvalidArgument (address), kNotFound (no token file), kUnavailable (nothing
// listens at the address: says how to start agvisord), kPermissionDenied.
Result<std::unique_ptr<Backend>> MakeRemoteBackend(const std::string& address,
                                                   const std::string& token_file);
// The client MakeRemoteBackend wraps, for calls only agvisord answers (egress).
Result<std::shared_ptr<server::RemoteClient>> ConnectRemote(const std::string& address,
                                                            const std::string& token_file);

}  // namespace agvisor::cli
