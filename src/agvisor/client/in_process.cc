// The in-process Place: each call is the library's (Sandbox, Pool) on one host, through the one
// Runtime the place makes for it (MakeRuntime, on first use) and hands to every Sandbox and Pool.
#include <map>
#include <mutex>

#include "agvisor/api/codec.h"
#include "agvisor/client/place.h"
#include "agvisor/sandbox/pool.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/runtimes.h"
#include "agvisor/sandbox/sandbox.h"

namespace agvisor::client {
namespace {

class LocalPort final : public ByteStream {
 public:
  explicit LocalPort(std::shared_ptr<PortStream> s) : s_(std::move(s)) {}
  Result<std::size_t> Read(std::span<char> buf) override { return s_->Read(buf); }
  Result<void> Write(std::string_view data) override { return s_->Write(data); }
  Result<void> CloseWrite() override { return s_->CloseWrite(); }
  void Close() override { s_->Close(); }

 private:
  std::shared_ptr<PortStream> s_;
};

class LocalCommand final : public Command {
 public:
  LocalCommand(std::unique_ptr<Process> p, Sandbox& sb) : p_(std::move(p)), sb_(sb) {}
  Result<void> Write(std::string_view data) override { return p_->Write(data); }
  Result<void> CloseStdin() override { return p_->CloseStdin(); }
  Result<void> Resize(std::uint16_t rows, std::uint16_t cols) override {
    return p_->Resize(rows, cols);
  }
  Result<void> Signal(int signal) override { return p_->Signal(signal); }
  Result<ProcessExit> Wait(const channel::ExecCallbacks& cb) override {
    auto exit = p_->Wait(cb);
    if (exit.ok()) return exit;
    return sb_.Diagnose(exit.error());  // a broken session: did the sandbox die, and why?
  }
  // DETACH: a started command ends with its stream, a background one runs on.
  void Close() override { (void)p_->Detach(); }
  std::uint32_t pid() const override { return p_->pid(); }

 private:
  std::unique_ptr<Process> p_;
  Sandbox& sb_;
};

class LocalWatch final : public DirWatch {
 public:
  LocalWatch(std::unique_ptr<WatchStream> w, Sandbox& sb) : w_(std::move(w)), sb_(sb) {}
  Result<std::optional<std::vector<WatchEvent>>> Next(std::chrono::milliseconds timeout) override {
    auto r = w_->Next(timeout);
    if (r.ok() || r.error().code() != ErrorCode::kUnavailable) return r;
    return sb_.Diagnose(r.error());  // the channel broke: did the sandbox end, and why?
  }
  void Close() override { w_->Close(); }

 private:
  std::unique_ptr<WatchStream> w_;
  Sandbox& sb_;
};

class LocalHandle final : public SandboxHandle {
 public:
  explicit LocalHandle(std::shared_ptr<Sandbox> sb) : sb_(std::move(sb)) {}
  const std::string& container_name() const override { return sb_->container_name(); }
  Result<ExecResult> Exec(const std::vector<std::string>& argv, const ExecOptions& o) override {
    return sb_->Exec(argv, o);
  }
  Result<std::unique_ptr<Command>> Start(const std::vector<std::string>& argv,
                                         const ProcessOptions& o) override {
    auto p = AGVISOR_TRY(sb_->StartProcess(argv, o));
    // Started (its pid known) before it is handed out, as through agvisord: a command that
    // cannot start fails here.
    if (auto pid = p->WaitStarted(); !pid.ok()) return sb_->Diagnose(pid.error());
    return std::unique_ptr<Command>(std::make_unique<LocalCommand>(std::move(p), *sb_));
  }
  Result<std::uint32_t> StartBackground(const std::vector<std::string>& argv,
                                        const BackgroundOptions& o) override {
    return sb_->StartBackground(argv, o);
  }
  Result<std::vector<ProcessInfo>> ListProcesses() override { return sb_->ListProcesses(); }
  Result<ProcessExit> AttachProcess(std::uint32_t pid, const channel::ExecCallbacks& cb) override {
    return sb_->AttachProcess(pid, cb);
  }
  Result<void> Signal(std::uint32_t pid, int signal) override { return sb_->Signal(pid, signal); }
  Result<void> Upload(std::string_view local_path, std::string_view sandbox_dir,
                      const UploadOptions& options) override {
    return sb_->Upload(local_path, sandbox_dir, options);
  }
  Result<void> Download(std::string_view sandbox_path, std::string_view local_dir,
                        const DownloadOptions& options) override {
    return sb_->Download(sandbox_path, local_dir, options);
  }
  Result<std::unique_ptr<ByteStream>> OpenPort(std::uint16_t port) override {
    auto s = AGVISOR_TRY(sb_->OpenPort(port));
    return WrapPortStream(std::shared_ptr<PortStream>(std::move(s)));
  }
  Result<std::unique_ptr<DirWatch>> Watch(std::string_view path, bool recursive) override {
    auto w = AGVISOR_TRY(sb_->Watch(path, recursive));
    return std::unique_ptr<DirWatch>(std::make_unique<LocalWatch>(std::move(w), *sb_));
  }
  Result<std::unique_ptr<Command>> Attach(std::uint32_t pid) override {
    auto p = AGVISOR_TRY(sb_->AttachProcess(pid));
    return std::unique_ptr<Command>(std::make_unique<LocalCommand>(std::move(p), *sb_));
  }
  Result<std::string> ReadFile(std::string_view path) override { return sb_->ReadFile(path); }
  Result<std::string> ReadFilePrefix(std::string_view path, std::uint64_t max_bytes) override {
    std::string data;
    AGVISOR_RETURN_IF_ERROR(sb_->ReadFileTo(
        path,
        [&data](std::string_view bytes) -> Result<void> {
          data.append(bytes);
          return Ok();
        },
        0, max_bytes));
    return data;
  }
  Result<void> WriteFile(std::string_view path, std::string_view data,
                         std::uint32_t mode) override {
    return sb_->WriteFile(path, data, mode);
  }
  Result<FileEntry> Stat(std::string_view path) override { return sb_->Stat(path); }
  Result<std::vector<FileEntry>> ListDir(std::string_view path) override {
    return sb_->ListDir(path);
  }
  Result<void> Mkdir(std::string_view path, bool parents, std::uint32_t mode) override {
    return sb_->Mkdir(path, parents, mode);
  }
  Result<void> RemovePath(std::string_view path, bool recursive) override {
    return sb_->Remove(path, recursive);
  }
  Result<SandboxInfo> Info() override { return sb_->Info(); }
  Result<SnapshotResult> Snapshot(const SnapshotOptions& options) override {
    return sb_->Snapshot(options);
  }
  void SetAutoResume(bool yes) override { sb_->set_auto_resume(yes); }
  bool auto_resume() const override { return sb_->auto_resume(); }
  Result<void> RefuseIfPaused() override { return sb_->RefuseIfPaused(); }
  Result<void> ReadFileTo(std::string_view path, const channel::ByteSink& sink,
                          std::uint64_t offset, std::optional<std::uint64_t> length) override {
    return sb_->ReadFileTo(path, sink, offset, length);
  }
  Result<void> UploadTar(std::string_view sandbox_dir, const channel::ByteSource& source) override {
    return sb_->UploadTar(sandbox_dir, source);
  }
  Result<void> DownloadTar(std::string_view sandbox_path, const channel::ByteSink& sink) override {
    return sb_->DownloadTar(sandbox_path, sink);
  }

 private:
  std::shared_ptr<Sandbox> sb_;
};

class LocalPlace final : public Place {
 public:
  LocalPlace(std::string host, std::shared_ptr<SecretBroker> broker)
      : host_(std::move(host)), broker_(std::move(broker)) {}
  // The place's pools go with it (their members not handed out are removed).
  ~LocalPlace() override {
    std::map<std::string, std::shared_ptr<Pool>, std::less<>> pools;
    {
      std::lock_guard lock(mu_);
      pools.swap(pools_);
    }
    for (auto& [name, pool] : pools) pool->Close();
  }

  Result<Created> Create(const SandboxSpec& spec) override {
    SandboxSpec s = spec;
    s.host = host_;
    s.brokered.reset();  // only this place's broker sets it
    auto rt = AGVISOR_TRY(runtime());
    if (!s.secrets.empty() && broker_) {
      // The spec is checked before the broker resolves anything; the values then stay with the
      // broker: the spec the core and the runtime see carries names and placeholders only.
      AGVISOR_RETURN_IF_ERROR(ValidateSpec(s));
      s.brokered = AGVISOR_TRY(broker_->Broker(s.secrets));
      for (SecretSpec& secret : s.secrets) secret.value.reset();
    }
    auto made = Sandbox::Create(std::move(rt), s);
    if (s.brokered && (!made.ok() || (*made)->resumed())) {
      // No sandbox of this create serves them (a running one keeps its own).
      broker_->Release(*s.brokered);
    }
    auto sb = AGVISOR_TRY(std::move(made));
    Created c;
    c.name = sb->name();
    c.resumed = sb->resumed();
    c.disk_warning = sb->disk_warning();
    c.handle = std::make_unique<LocalHandle>(std::move(sb));
    return c;
  }
  Result<std::unique_ptr<SandboxHandle>> Open(std::string_view container_name) override {
    auto sb = AGVISOR_TRY(OpenSandbox(container_name));
    sb->set_auto_resume(auto_resume_);
    return std::unique_ptr<SandboxHandle>(std::make_unique<LocalHandle>(std::move(sb)));
  }
  Result<std::vector<SandboxInfo>> List() override { return Sandbox::List(AGVISOR_TRY(runtime())); }
  Result<void> Remove(std::string_view container_name, bool erase_data) override {
    return Sandbox::Remove(AGVISOR_TRY(runtime()), container_name, erase_data);
  }
  Result<void> Pause(std::string_view container_name) override {
    auto sb = AGVISOR_TRY(OpenSandbox(container_name));
    return sb->Pause();
  }
  Result<void> Resume(std::string_view container_name) override {
    auto sb = AGVISOR_TRY(OpenSandbox(container_name));
    return sb->Resume();
  }
  Result<LiveLimits> Update(std::string_view container_name, const LimitsUpdate& update) override {
    AGVISOR_RETURN_IF_ERROR(ValidateLimitsUpdate(update));  // before any request
    auto sb = AGVISOR_TRY(OpenSandbox(container_name));
    return sb->Update(update);
  }
  Result<Forked> Fork(std::string_view container_name, const ForkOptions& options) override {
    auto sb = AGVISOR_TRY(OpenSandbox(container_name));
    sb->set_auto_resume(auto_resume_);
    ForkOptions o = options;
    o.spec.host = host_;
    auto r = AGVISOR_TRY(agvisor::Fork(*sb, o));
    Forked out;
    out.snapshot = std::move(r.snapshot);
    out.seconds = r.seconds;
    for (auto& f : r.sandboxes) {
      Created c;
      c.name = f->name();
      c.disk_warning = f->disk_warning();
      c.handle = std::make_unique<LocalHandle>(std::move(f));
      out.sandboxes.push_back(std::move(c));
    }
    return out;
  }
  void SetAutoResume(bool yes) override { auto_resume_ = yes; }

  Result<PoolInfo> CreatePool(std::string_view name, const PoolOptions& options) override {
    AGVISOR_RETURN_IF_ERROR(api::ValidatePoolName(name));
    PoolOptions o = options;
    o.spec.host = host_;
    if (AGVISOR_TRY(FindPool(name, /*must_exist=*/false))) return PoolExists(name);
    auto rt = AGVISOR_TRY(runtime());
    std::shared_ptr<Pool> pool = AGVISOR_TRY(Pool::Create(std::move(rt), std::move(o)));
    std::lock_guard lock(mu_);
    if (!pools_.emplace(std::string(name), pool).second) {
      pool->Close();
      return PoolExists(name);
    }
    return pool->Info(std::string(name));
  }
  Result<Created> Acquire(std::string_view name, const AcquireOptions& options) override {
    std::shared_ptr<Pool> pool = AGVISOR_TRY(FindPool(name, /*must_exist=*/true));
    std::unique_ptr<Sandbox> sb = AGVISOR_TRY(pool->Acquire(options));
    sb->set_auto_resume(auto_resume_);
    Created c;
    c.disk_warning = sb->disk_warning();
    c.handle = std::make_unique<LocalHandle>(std::move(sb));
    return c;
  }
  Result<std::vector<PoolInfo>> ListPools() override {
    std::lock_guard lock(mu_);
    std::vector<PoolInfo> out;
    for (const auto& [name, pool] : pools_) out.push_back(pool->Info(name));
    return out;
  }
  Result<void> WaitPoolReady(std::string_view name, std::chrono::milliseconds timeout) override {
    std::shared_ptr<Pool> pool = AGVISOR_TRY(FindPool(name, /*must_exist=*/true));
    return pool->WaitReady(timeout);
  }
  Result<void> ClosePool(std::string_view name) override {
    std::shared_ptr<Pool> pool;
    {
      std::lock_guard lock(mu_);
      auto it = pools_.find(name);
      if (it == pools_.end()) return NoPool(name);
      pool = std::move(it->second);
      pools_.erase(it);
    }
    pool->Close();  // outside the lock: it waits for starts in flight
    return Ok();
  }

  Result<SandboxStats> Stats(const SandboxInfo& sandbox) override {
    // The host's runtime, shared by every sample (top calls this from many threads): on an
    // ssh:// host a new client would be a new ssh connection.
    return AGVISOR_TRY(runtime())->Stats(sandbox.container_id);
  }
  // The host's own verbs run where the factory says (runtimes.h); the doctor needs no made
  // runtime, so it can say why one cannot be made.
  Result<std::vector<HostCheck>> HostReport() override { return DiagnoseHost(host_); }
  Result<std::string> BuildImage(const ImageBuildOptions& options) override {
    return BuildHostImage(host_, options);
  }
  Result<std::string> CreateNetwork(std::string_view name) override {
    return AGVISOR_TRY(runtime())->CreateSharedNetwork(name);
  }
  Result<std::map<std::string, std::int64_t>> VolumeSizes() override {
    return AGVISOR_TRY(runtime())->VolumeSizes();
  }

 private:
  static Error NoPool(std::string_view name) {
    return Error::NotFound("no pool '" + std::string(name) +
                           "' in this place (ListPools names them; CreatePool makes one)");
  }
  static Error PoolExists(std::string_view name) {
    return Error::Conflict("pool '" + std::string(name) +
                           "' exists in this place (ClosePool it first, or pick another name)");
  }
  // Pool `name`, or nullptr (kNotFound when `must_exist`).
  Result<std::shared_ptr<Pool>> FindPool(std::string_view name, bool must_exist) {
    std::lock_guard lock(mu_);
    auto it = pools_.find(name);
    if (it != pools_.end()) return it->second;
    if (must_exist) return NoPool(name);
    return std::shared_ptr<Pool>();
  }
  // The host's runtime, shared by every sandbox and pool of this place.
  Result<std::shared_ptr<Runtime>> runtime() { return runtime_.Get(); }
  Result<std::unique_ptr<Sandbox>> OpenSandbox(std::string_view container_name) {
    return Sandbox::Open(AGVISOR_TRY(runtime()), container_name);
  }

  std::string host_;
  std::shared_ptr<SecretBroker> broker_;  // agvisord's, or null: secrets are refused
  bool auto_resume_ = true;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Pool>, std::less<>> pools_;  // guarded by mu_
  LazyRuntime runtime_{host_};                                       // after host_
};

}  // namespace

std::unique_ptr<ByteStream> WrapPortStream(std::shared_ptr<PortStream> stream) {
  return std::make_unique<LocalPort>(std::move(stream));
}

std::unique_ptr<SandboxHandle> WrapSandbox(std::shared_ptr<Sandbox> sandbox) {
  return std::make_unique<LocalHandle>(std::move(sandbox));
}

std::unique_ptr<Place> InProcess(std::string host) {
  return std::make_unique<LocalPlace>(std::move(host), nullptr);
}

std::unique_ptr<Place> InProcess(std::string host, std::shared_ptr<SecretBroker> broker) {
  return std::make_unique<LocalPlace>(std::move(host), std::move(broker));
}

std::string DefaultImageName(std::string_view kind) { return agvisor::DefaultImageName(kind); }

}  // namespace agvisor::client
