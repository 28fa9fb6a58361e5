// The CLI's backend through agvisord (--server): each call is one of the daemon's routes
// (server/remote_client.h). Exec output streams over the exec WebSocket as it comes, so large
// output is never held; cp moves tar streams through the archive routes.
#include <cstdlib>
#include <thread>

#include "agvisor/cli/backend.h"
#include "agvisor/server/codec.h"
#include "agvisor/server/daemon.h"
#include "agvisor/server/remote_client.h"

namespace agvisor::cli {
namespace {

using server::RemoteClient;
using server::RemoteStream;

class RemotePort final : public PortConnection {
 public:
  explicit RemotePort(std::unique_ptr<RemoteStream> s) : s_(std::move(s)) {}
  Result<std::size_t> Read(std::span<char> buf) override { return s_->Read(buf); }
  Result<void> Write(std::string_view data) override { return s_->Write(data); }
  Result<void> CloseWrite() override { return s_->CloseWrite(); }
  void Close() override { s_->Close(); }

 private:
  std::unique_ptr<RemoteStream> s_;
};

class RemoteCommand final : public RunningCommand {
 public:
  explicit RemoteCommand(std::unique_ptr<RemoteStream> s) : s_(std::move(s)) {}
  Result<void> Write(std::string_view data) override { return s_->WriteStdin(data); }
  Result<void> CloseStdin() override { return s_->CloseStdin(); }
  Result<void> Resize(std::uint16_t rows, std::uint16_t cols) override {
    return s_->Resize(rows, cols);
  }
  Result<ProcessExit> Wait(const channel::ExecCallbacks& cb) override { return s_->Wait(cb); }

 private:
  std::unique_ptr<RemoteStream> s_;
};

class RemoteHandle final : public SandboxHandle {
 public:
  RemoteHandle(std::shared_ptr<RemoteClient> client, std::string container_name)
      : client_(std::move(client)),
        container_name_(std::move(container_name)),
        id_(server::SandboxIdFor(container_name_)) {}

  const std::string& container_name() const override { return container_name_; }

  Result<ExecResult> Exec(const std::vector<std::string>& argv, const ExecOptions& o) override {
    // The library's rule (a run needs a timeout: 0 or less is refused), here before the server's
    // exec WebSocket, where 0 means none.
    AGVISOR_RETURN_IF_ERROR(ValidateExecTimeout(o.timeout, std::nullopt));
    ProcessOptions po;
    po.stdin = o.input.has_value();
    po.timeout = o.timeout;
    po.env = o.env;
    po.cwd = o.cwd;
    po.user = o.user;
    auto stream = AGVISOR_TRY(client_->Exec(id_, argv, po));
    // stdin goes on a thread of its own: a command that answers before it read everything must
    // not wait for us to stop writing.
    std::thread feeder;
    if (o.input) {
      RemoteStream* s = stream.get();
      feeder = std::thread([s, &o] {
        if (s->WriteStdin(*o.input).ok()) (void)s->CloseStdin();
      });
    }
    ExecResult res;
    const bool streaming = o.on_stdout || o.on_stderr || o.on_output;
    channel::ExecCallbacks cb;
    cb.on_stdout = [&](std::string_view b) {
      if (o.on_stdout) o.on_stdout(b);
      if (o.on_output) o.on_output(b);
      if (streaming) {
        AppendOutputTail(res.out, b, res.truncated);
      } else {
        res.out.append(b);
      }
    };
    cb.on_stderr = [&](std::string_view b) {
      if (o.on_stderr) o.on_stderr(b);
      if (o.on_output) o.on_output(b);
      if (streaming) {
        AppendOutputTail(res.err, b, res.truncated);
      } else {
        res.err.append(b);
      }
    };
    auto exit = stream->Wait(cb);
    if (!exit.ok()) stream->Close();  // unblocks the feeder
    if (feeder.joinable()) feeder.join();
    if (!exit.ok()) return exit.error();
    if (streaming) FinishOutputTail(res);
    res.exit_code = exit->exit_code;
    res.timed_out = exit->timed_out;
    return res;
  }

  Result<std::unique_ptr<RunningCommand>> Start(const std::vector<std::string>& argv,
                                                const ProcessOptions& o) override {
    auto s = AGVISOR_TRY(client_->Exec(id_, argv, o));
    return std::unique_ptr<RunningCommand>(std::make_unique<RemoteCommand>(std::move(s)));
  }
  Result<std::uint32_t> StartBackground(const std::vector<std::string>& argv,
                                        const BackgroundOptions& o) override {
    return client_->StartProcess(id_, argv, o);
  }
  Result<std::vector<ProcessInfo>> ListProcesses() override { return client_->ListProcesses(id_); }
  Result<ProcessExit> AttachProcess(std::uint32_t pid, const channel::ExecCallbacks& cb) override {
    auto s = AGVISOR_TRY(client_->Attach(id_, pid));
    return s->Wait(cb);
  }
  Result<void> Signal(std::uint32_t pid, int signal) override {
    return client_->SignalProcess(id_, pid, signal);
  }
  Result<void> Upload(std::string_view local_path, std::string_view sandbox_dir) override {
    return PackLocalPath(local_path, [&](const channel::ByteSource& source) {
      return client_->PutArchive(id_, sandbox_dir, source);
    });
  }
  Result<void> Download(std::string_view sandbox_path, std::string_view local_dir,
                        const DownloadOptions& options) override {
    return UnpackIntoLocalDir(
        local_dir,
        [&](const channel::ByteSink& sink) { return client_->GetArchive(id_, sandbox_path, sink); },
        options);
  }
  Result<std::unique_ptr<PortConnection>> OpenPort(std::uint16_t port) override {
    auto s = AGVISOR_TRY(client_->OpenPort(id_, port));
    return std::unique_ptr<PortConnection>(std::make_unique<RemotePort>(std::move(s)));
  }

 private:
  std::shared_ptr<RemoteClient> client_;
  std::string container_name_;
  std::string id_;
};

class RemoteBackend final : public Backend {
 public:
  explicit RemoteBackend(std::shared_ptr<RemoteClient> client) : client_(std::move(client)) {}

  Result<CreatedSandbox> Create(const SandboxSpec& spec) override {
    auto v = AGVISOR_TRY(client_->CreateSandbox(spec));
    CreatedSandbox c;
    c.name = v.info.name;
    c.resumed = v.resumed.value_or(false);
    c.disk_warning = v.disk_warning;
    c.handle = std::make_unique<RemoteHandle>(client_, v.info.container_name);
    return c;
  }
  Result<std::unique_ptr<SandboxHandle>> Open(std::string_view container_name) override {
    return std::unique_ptr<SandboxHandle>(
        std::make_unique<RemoteHandle>(client_, std::string(container_name)));
  }
  Result<std::vector<SandboxInfo>> List() override {
    auto views = AGVISOR_TRY(client_->ListSandboxes());
    std::vector<SandboxInfo> out;
    for (auto& v : views) {
      v.info.host = server::ServerAddressString(client_->endpoint());
      out.push_back(std::move(v.info));
    }
    return out;
  }
  Result<void> Remove(std::string_view container_name, bool erase_data) override {
    return client_->RemoveSandbox(server::SandboxIdFor(container_name), erase_data);
  }
  Result<docker::ContainerStats> Stats(const SandboxInfo& sandbox) override {
    return client_->Metrics(server::SandboxIdFor(sandbox.container_name));
  }

 private:
  std::shared_ptr<RemoteClient> client_;
};

}  // namespace

Result<std::shared_ptr<server::RemoteClient>> ConnectRemote(const std::string& address,
                                                            const std::string& token_file) {
  auto endpoint = AGVISOR_TRY(server::ParseServerAddress(address));
  server::RemoteToken token;
  const char* env_file = std::getenv("AGVISOR_TOKEN_FILE");
  const char* env_token = std::getenv("AGVISOR_TOKEN");
  if (!token_file.empty()) {
    token = AGVISOR_TRY(server::ReadTokenFile(token_file));
  } else if (env_file && *env_file) {
    token = AGVISOR_TRY(server::ReadTokenFile(env_file));
  } else if (env_token && *env_token) {
    token = {env_token, "the token in $AGVISOR_TOKEN"};
  } else {
    token = AGVISOR_TRY(server::ReadTokenFile(server::DefaultTokenPath()));
  }
  std::shared_ptr<RemoteClient> client =
      AGVISOR_TRY(RemoteClient::Connect(endpoint, std::move(token)));
  return client;
}

Result<std::unique_ptr<Backend>> MakeRemoteBackend(const std::string& address,
                                                   const std::string& token_file) {
  auto client = AGVISOR_TRY(ConnectRemote(address, token_file));
  return std::unique_ptr<Backend>(std::make_unique<RemoteBackend>(std::move(client)));
}

}  // namespace agvisor::cli
