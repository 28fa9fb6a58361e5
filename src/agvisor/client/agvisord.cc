// The agvisord Place: each call is one of the daemon's routes (agvisord_api.h). Exec output
// streams over the exec WebSocket as it comes, so large output is never held; Upload and
// Download move tar streams through the archive routes.
#include "agvisor/client/agvisord.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <thread>

#include "agvisor/api/defaults.h"
#include "agvisor/base/subprocess.h"
#include "agvisor/client/agvisord_api.h"
#include "agvisor/http/client.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor::client {

Result<ProcessOptions> ProcessOptionsFor(const ExecOptions& o) {
  // A run needs a timeout (a started process takes 0 as none): the core's rule.
  AGVISOR_RETURN_IF_ERROR(ValidateExecTimeout(o.timeout, std::nullopt));
  ProcessOptions po;
  po.stdin = o.input.has_value();
  po.timeout = o.timeout;
  po.env = o.env;
  po.cwd = o.cwd;
  po.user = o.user;
  return po;
}

Result<ExecResult> RunToEnd(Command& command, const ExecOptions& o) {
  // stdin goes on a thread of its own: a command that answers before it read everything must
  // not wait for us to stop writing.
  std::thread feeder;
  if (o.input) {
    feeder = std::thread([&command, &o] {
      if (command.Write(*o.input).ok()) (void)command.CloseStdin();
    });
  }
  ExecOutputCollector output(o);
  auto exit = command.Wait(output.Callbacks());
  if (!exit.ok()) command.Close();  // unblocks the feeder
  if (feeder.joinable()) feeder.join();
  if (!exit.ok()) return exit.error();
  return output.Finish(*exit);
}

namespace {

class RemoteHandle final : public SandboxHandle {
 public:
  // `seen`: the sandbox is known to have existed (this client created it).
  RemoteHandle(std::shared_ptr<RemoteClient> client, std::string container_name, bool seen)
      : client_(std::move(client)),
        container_name_(std::move(container_name)),
        id_(api::SandboxIdFor(container_name_)),
        seen_(seen) {}

  const std::string& container_name() const override { return container_name_; }

  Result<ExecResult> Exec(const std::vector<std::string>& argv, const ExecOptions& o) override {
    const ProcessOptions po = AGVISOR_TRY(ProcessOptionsFor(o));
    std::unique_ptr<Command> stream = AGVISOR_TRY(Checked(client_->Exec(id_, argv, po)));
    auto r = RunToEnd(*stream, o);
    if (!r.ok()) return Diagnose(r.error());
    return r;
  }

  Result<std::unique_ptr<Command>> Start(const std::vector<std::string>& argv,
                                         const ProcessOptions& o) override {
    return Checked(client_->Exec(id_, argv, o));
  }
  Result<std::uint32_t> StartBackground(const std::vector<std::string>& argv,
                                        const BackgroundOptions& o) override {
    return Checked(client_->StartProcess(id_, argv, o));
  }
  Result<std::vector<ProcessInfo>> ListProcesses() override {
    return Checked(client_->ListProcesses(id_));
  }
  Result<ProcessExit> AttachProcess(std::uint32_t pid, const channel::ExecCallbacks& cb) override {
    auto s = AGVISOR_TRY(Checked(client_->Attach(id_, pid)));
    return Checked(s->Wait(cb));
  }
  Result<void> Signal(std::uint32_t pid, int signal) override {
    return Checked(client_->SignalProcess(id_, pid, signal));
  }
  Result<void> Upload(std::string_view local_path, std::string_view sandbox_dir,
                      const UploadOptions& options) override {
    return PackLocalPath(
        local_path,
        [&](const channel::ByteSource& source) {
          return Checked(client_->PutArchive(id_, sandbox_dir, source));
        },
        options);
  }
  Result<void> Download(std::string_view sandbox_path, std::string_view local_dir,
                        const DownloadOptions& options) override {
    return UnpackIntoLocalDir(
        local_dir,
        [&](const channel::ByteSink& sink) { return client_->GetArchive(id_, sandbox_path, sink); },
        options);
  }
  Result<std::unique_ptr<ByteStream>> OpenPort(std::uint16_t port) override {
    return Checked(client_->OpenPort(id_, port));
  }
  Result<std::unique_ptr<DirWatch>> Watch(std::string_view path, bool recursive) override {
    return Checked(client_->Watch(id_, path, recursive));
  }
  Result<std::unique_ptr<Command>> Attach(std::uint32_t pid) override {
    return Checked(client_->Attach(id_, pid));
  }
  Result<std::string> ReadFile(std::string_view path) override {
    return Checked(client_->ReadFile(id_, path));
  }
  Result<std::string> ReadFilePrefix(std::string_view path, std::uint64_t max_bytes) override {
    return Checked(client_->ReadFile(id_, path, max_bytes));
  }
  Result<void> WriteFile(std::string_view path, std::string_view data,
                         std::uint32_t mode) override {
    return Checked(client_->WriteFile(id_, path, data, mode));
  }
  Result<FileEntry> Stat(std::string_view path) override {
    return Checked(client_->Stat(id_, path));
  }
  Result<std::vector<FileEntry>> ListDir(std::string_view path) override {
    return Checked(client_->ListDir(id_, path));
  }
  Result<void> Mkdir(std::string_view path, bool parents, std::uint32_t mode) override {
    return Checked(client_->Mkdir(id_, path, parents, mode));
  }
  Result<void> RemovePath(std::string_view path, bool recursive) override {
    return Checked(client_->RemovePath(id_, path, recursive));
  }
  Result<SandboxInfo> Info() override {
    auto v = AGVISOR_TRY(client_->GetSandbox(id_));
    v.info.host = ServerAddressString(client_->endpoint());
    return v.info;
  }
  Result<SnapshotResult> Snapshot(const SnapshotOptions& options) override {
    auto r = AGVISOR_TRY(Checked(client_->SnapshotSandbox(id_, options)));
    if (options.progress) options.progress(r.bytes);
    return r;
  }
  // Held in the client by sandbox id (its requests carry resume=false), released with the handle.
  void SetAutoResume(bool yes) override {
    auto_resume_ = yes;
    client_->set_auto_resume(id_, yes);
  }
  bool auto_resume() const override { return auto_resume_; }
  ~RemoteHandle() override {
    if (!auto_resume_) client_->set_auto_resume(id_, true);
  }

 private:
  // What a failure says when the sandbox ended: through the daemon a removed sandbox is "no
  // sandbox" (kNotFound) and a stopped one breaks or refuses the stream, where the library
  // says kSandboxDied and why; so does this, in the library's words (SandboxDiedError), from
  // one GET of the sandbox, on failures only.
  Error Diagnose(const Error& e) {
    if (e.code() != ErrorCode::kNotFound && e.code() != ErrorCode::kUnavailable &&
        e.code() != ErrorCode::kConflict) {
      return e;
    }
    auto v = client_->GetSandbox(id_);
    if (!v.ok() && v.error().code() != ErrorCode::kNotFound) return e;
    // Never seen and unknown to the daemon: there was no such sandbox (kNotFound, as in process).
    if (!v.ok() && !seen_) return e;
    if (v.ok() && v->info.running) return e;
    SandboxInfo gone;
    gone.end_reason = EndReason::kGone;
    SandboxInfo& info = v.ok() ? v->info : gone;
    info.container_name = container_name_;
    return SandboxDiedError(info, info.memory);
  }
  template <typename T>
  Result<T> Checked(Result<T> r) {
    if (r.ok()) {
      seen_ = true;
      return r;
    }
    return Diagnose(r.error());
  }

  std::shared_ptr<RemoteClient> client_;
  std::string container_name_;
  std::string id_;
  std::atomic<bool> seen_;
  std::atomic<bool> auto_resume_{true};
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
    c.handle = std::make_unique<RemoteHandle>(client_, v.info.container_name, /*seen=*/true);
    return c;
  }
  Result<std::unique_ptr<SandboxHandle>> Open(std::string_view container_name) override {
    return std::unique_ptr<SandboxHandle>(
        std::make_unique<RemoteHandle>(client_, std::string(container_name), /*seen=*/false));
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
  Result<void> Pause(std::string_view container_name) override {
    return client_->PauseSandbox(api::SandboxIdFor(container_name), /*pause=*/true);
  }
  Result<void> Resume(std::string_view container_name) override {
    return client_->PauseSandbox(api::SandboxIdFor(container_name), /*pause=*/false);
  }
  Result<LiveLimits> Update(std::string_view container_name, const LimitsUpdate& update) override {
    AGVISOR_RETURN_IF_ERROR(ValidateLimitsUpdate(update));  // before any request
    return client_->UpdateSandbox(api::SandboxIdFor(container_name), update);
  }
  Result<Forked> Fork(std::string_view container_name, const ForkOptions& options) override {
    auto v = AGVISOR_TRY(client_->ForkSandbox(api::SandboxIdFor(container_name), options));
    if (options.progress) options.progress(v.snapshot.bytes);
    Forked out;
    out.snapshot = std::move(v.snapshot);
    out.seconds = v.seconds;
    for (auto& s : v.sandboxes) {
      Created c;
      c.name = s.info.name;
      c.disk_warning = s.disk_warning;
      c.handle = std::make_unique<RemoteHandle>(client_, s.info.container_name, /*seen=*/true);
      out.sandboxes.push_back(std::move(c));
    }
    return out;
  }
  void SetAutoResume(bool yes) override { client_->set_auto_resume(yes); }

  Result<PoolInfo> CreatePool(std::string_view name, const PoolOptions& options) override {
    AGVISOR_RETURN_IF_ERROR(api::ValidatePoolName(name));  // before any request
    return client_->CreatePool(name, options);
  }
  Result<Created> Acquire(std::string_view name, const AcquireOptions& options) override {
    auto v = AGVISOR_TRY(client_->AcquireFromPool(name, options));
    Created c;
    c.disk_warning = v.disk_warning;
    c.handle = std::make_unique<RemoteHandle>(client_, v.info.container_name, /*seen=*/true);
    return c;
  }
  Result<std::vector<PoolInfo>> ListPools() override { return client_->ListPools(); }
  // The daemon has no wait route: its pool list, polled until the pool is full.
  Result<void> WaitPoolReady(std::string_view name, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::optional<PoolInfo> pool;
      for (auto& p : AGVISOR_TRY(ListPools())) {
        if (p.name == name) pool = std::move(p);
      }
      if (!pool) return Error::NotFound("no pool '" + std::string(name) + "' in agvisord");
      if (pool->stats.ready >= pool->options.size) return Ok();
      if (std::chrono::steady_clock::now() >= deadline) {
        return Error::Timeout("pool '" + std::string(name) +
                              "': " + std::to_string(pool->stats.ready) + " of " +
                              std::to_string(pool->options.size) + " members ready after " +
                              std::to_string(timeout.count()) + " ms" +
                              (pool->stats.last_error.empty()
                                   ? ""
                                   : " (last start error: " + pool->stats.last_error + ")"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  Result<void> ClosePool(std::string_view name) override { return client_->DeletePool(name); }

  Result<SandboxStats> Stats(const SandboxInfo& sandbox) override {
    return client_->Metrics(api::SandboxIdFor(sandbox.container_name));
  }
  Result<api::EgressView> GetEgress(std::string_view container_name) override {
    return client_->GetEgress(api::SandboxIdFor(container_name));
  }
  Result<api::EgressView> SetEgress(std::string_view container_name,
                                    const egress::EgressRules& rules) override {
    return client_->SetEgress(api::SandboxIdFor(container_name), rules);
  }
  Result<std::vector<egress::Decision>> EgressLog(std::string_view container_name,
                                                  std::size_t last) override {
    return client_->EgressLog(api::SandboxIdFor(container_name), last);
  }
  Result<void> FollowEgressLog(
      std::string_view container_name, std::size_t last,
      const std::function<bool(const egress::Decision&, const std::string&)>& on_record) override {
    return client_->FollowEgressLog(api::SandboxIdFor(container_name), last, on_record);
  }
  // The host's own verbs have no route in agvisord: they run on the daemon's host.
  Result<std::vector<HostCheck>> HostReport() override { return OnTheHost("doctor"); }
  Result<std::string> BuildImage(const ImageBuildOptions& options) override {
    return OnTheHost("image build " + options.kind);
  }
  Result<std::string> CreateNetwork(std::string_view name) override {
    return OnTheHost("network create " + std::string(name));
  }
  Result<std::map<std::string, std::int64_t>> VolumeSizes() override {
    return OnTheHost("ls --size");
  }

 private:
  Error OnTheHost(const std::string& verb) const {
    return Error::Unsupported("`agvisor " + verb +
                              "` works on the host where sandboxes run, not through agvisord (" +
                              ServerAddressString(client_->endpoint()) +
                              " has no route for it): run it on the daemon's host without "
                              "--server (and unset AGVISOR_SERVER)");
  }
  std::shared_ptr<RemoteClient> client_;
};

// agvisord's token on an ssh:// host: root's default token file there, read with `cat` over ssh
// (the token never touches a file here).
Result<RemoteToken> ReadRemoteToken(const http::Endpoint& ep) {
  http::ClientOptions options;
  options.ssh_args = HostSshArgs();
  const std::string where = ServerAddressString(ep);
  auto r = RunCommand(
      http::SshRemoteCommandLine(ep, options, std::string("cat ") + api::kRootTokenPath));
  if (!r.ok()) return r.error().WithContext("read agvisord's token on " + ep.host + " over ssh");
  std::string t = r->out;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  if (!r->status.success() || t.empty()) {
    std::string said = r->err;
    while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
    std::string who = ep.user.empty() ? ep.host : ep.user + "@" + ep.host;
    if (ep.port != 0) who = "-p " + std::to_string(ep.port) + " " + who;
    return Error::Unavailable(
        "cannot read agvisord's token " + std::string(api::kRootTokenPath) + " on " + ep.host +
        " over ssh (" + r->status.ToString() + (said.empty() ? "" : ": " + said) +
        "): agvisord writes it when it starts; is it running there? start it (`ssh " + who +
        "`, then as root `agvisord &`), or pass its token with --token-file or $AGVISOR_TOKEN");
  }
  return RemoteToken{std::move(t), "the token file " + std::string(api::kRootTokenPath) + " on " +
                                       ep.host + " (read over ssh)"};
}

}  // namespace

Result<std::string> EgressAgvisordAddress(std::string_view docker_host) {
  const http::Endpoint ep = AGVISOR_TRY(http::ParseEndpoint(docker_host));
  switch (ep.kind) {
    case http::Endpoint::Kind::kUnix:
      return "unix:" + AGVISOR_TRY(api::DefaultSocketPath());
    case http::Endpoint::Kind::kSsh: {
      std::string s = "ssh://" + (ep.user.empty() ? "" : ep.user + "@") + ep.host;
      if (ep.port != 0) s += ":" + std::to_string(ep.port);
      return s;  // ParseServerAddress gives it root's default socket there
    }
    case http::Endpoint::Kind::kTcp:
    case http::Endpoint::Kind::kHttps:  // never a Docker host (docker::Client refuses it)
      break;
  }
  return Error::Unsupported("egress policies of the tcp:// Docker host " + ep.ToString() +
                            " live in the agvisord on that host: reach it with --server "
                            "ssh://USER@HOST (or through your own tunnel and --server)");
}

Result<std::unique_ptr<AgvisordPlace>> Agvisord(const std::string& address,
                                                const std::string& token_file,
                                                const std::string& given_token) {
  auto endpoint = AGVISOR_TRY(ParseServerAddress(address));
  RemoteToken token;
  const char* env_file = std::getenv("AGVISOR_TOKEN_FILE");
  const char* env_token = std::getenv("AGVISOR_TOKEN");
  if (!given_token.empty()) {
    token = {given_token, "the token given to connect()"};
  } else if (!token_file.empty()) {
    token = AGVISOR_TRY(ReadTokenFile(token_file));
  } else if (env_file && *env_file) {
    token = AGVISOR_TRY(ReadTokenFile(env_file));
  } else if (env_token && *env_token) {
    token = {env_token, "the token in $AGVISOR_TOKEN"};
  } else if (endpoint.kind == http::Endpoint::Kind::kSsh) {
    token = AGVISOR_TRY(ReadRemoteToken(endpoint));
  } else {
    token = AGVISOR_TRY(ReadTokenFile(api::DefaultTokenPath()));
  }
  std::shared_ptr<RemoteClient> client =
      AGVISOR_TRY(RemoteClient::Connect(endpoint, std::move(token)));
  return std::unique_ptr<AgvisordPlace>(std::make_unique<RemotePlace>(std::move(client)));
}

}  // namespace agvisor::client
