// The agvisord Place: each call is one of the daemon's routes (agvisord_api.h). Exec output
// streams over the exec WebSocket as it comes, so large output is never held; Upload and
// Download move tar streams through the archive routes.
#include "agvisor/client/agvisord.h"

#include <cstdlib>
#include <functional>
#include <thread>

#include "agvisor/api/defaults.h"
#include "agvisor/client/agvisord_api.h"

namespace agvisor::client {
namespace {

class RemoteHandle final : public SandboxHandle {
 public:
  RemoteHandle(std::shared_ptr<RemoteClient> client, std::string container_name)
      : client_(std::move(client)),
        container_name_(std::move(container_name)),
        id_(api::SandboxIdFor(container_name_)) {}

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
    std::unique_ptr<Command> stream = AGVISOR_TRY(client_->Exec(id_, argv, po));
    // stdin goes on a thread of its own: a command that answers before it read everything must
    // not wait for us to stop writing.
    std::thread feeder;
    if (o.input) {
      Command* s = stream.get();
      feeder = std::thread([s, &o] {
        if (s->Write(*o.input).ok()) (void)s->CloseStdin();
      });
    }
    ExecResult res;
    const bool streaming = o.on_stdout || o.on_stderr || o.on_output;
    // Each stream's bytes to its own callback and on_output, then kept (a tail when streaming).
    auto take = [&](std::string& kept, const std::function<void(std::string_view)>& own,
                    std::string_view b) {
      if (own) own(b);
      if (o.on_output) o.on_output(b);
      if (streaming) {
        AppendOutputTail(kept, b, res.truncated);
      } else {
        kept.append(b);
      }
    };
    channel::ExecCallbacks cb;
    cb.on_stdout = [&](std::string_view b) { take(res.out, o.on_stdout, b); };
    cb.on_stderr = [&](std::string_view b) { take(res.err, o.on_stderr, b); };
    auto exit = stream->Wait(cb);
    if (!exit.ok()) stream->Close();  // unblocks the feeder
    if (feeder.joinable()) feeder.join();
    if (!exit.ok()) return exit.error();
    if (streaming) FinishOutputTail(res);
    res.exit_code = exit->exit_code;
    res.timed_out = exit->timed_out;
    return res;
  }

  Result<std::unique_ptr<Command>> Start(const std::vector<std::string>& argv,
                                         const ProcessOptions& o) override {
    return client_->Exec(id_, argv, o);
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
  Result<std::unique_ptr<ByteStream>> OpenPort(std::uint16_t port) override {
    return client_->OpenPort(id_, port);
  }

 private:
  std::shared_ptr<RemoteClient> client_;
  std::string container_name_;
  std::string id_;
};

class RemotePlace final : public AgvisordPlace {
 public:
  explicit RemotePlace(std::shared_ptr<RemoteClient> client) : client_(std::move(client)) {}

  Result<Created> Create(const SandboxSpec& spec) override {
    auto v = AGVISOR_TRY(client_->CreateSandbox(spec));
    Created c;
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
      v.info.host = ServerAddressString(client_->endpoint());
      out.push_back(std::move(v.info));
    }
    return out;
  }
  Result<void> Remove(std::string_view container_name, bool erase_data) override {
    return client_->RemoveSandbox(api::SandboxIdFor(container_name), erase_data);
  }
  Result<docker::ContainerStats> Stats(const SandboxInfo& sandbox) override {
    return client_->Metrics(api::SandboxIdFor(sandbox.container_name));
  }
  Result<api::EgressView> GetEgress(std::string_view container_name) override {
    return client_->GetEgress(api::SandboxIdFor(container_name));
  }
  Result<api::EgressView> SetEgress(std::string_view container_name,
                                    const egress::EgressRules& rules) override {
    return client_->SetEgress(api::SandboxIdFor(container_name), rules);
  }

 private:
  std::shared_ptr<RemoteClient> client_;
};

}  // namespace

Result<std::unique_ptr<AgvisordPlace>> Agvisord(const std::string& address,
                                                const std::string& token_file) {
  auto endpoint = AGVISOR_TRY(ParseServerAddress(address));
  RemoteToken token;
  const char* env_file = std::getenv("AGVISOR_TOKEN_FILE");
  const char* env_token = std::getenv("AGVISOR_TOKEN");
  if (!token_file.empty()) {
    token = AGVISOR_TRY(ReadTokenFile(token_file));
  } else if (env_file && *env_file) {
    token = AGVISOR_TRY(ReadTokenFile(env_file));
  } else if (env_token && *env_token) {
    token = {env_token, "the token in $AGVISOR_TOKEN"};
  } else {
    token = AGVISOR_TRY(ReadTokenFile(api::DefaultTokenPath()));
  }
  std::shared_ptr<RemoteClient> client =
      AGVISOR_TRY(RemoteClient::Connect(endpoint, std::move(token)));
  return std::unique_ptr<AgvisordPlace>(std::make_unique<RemotePlace>(std::move(client)));
}

}  // namespace agvisor::client
