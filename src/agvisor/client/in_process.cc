// The in-process Place: each call is the library's (Sandbox) on one host, through the one Runtime
// the place makes for it (MakeRuntime, on first use) and hands to every Sandbox.
#include <mutex>

#include "agvisor/client/place.h"
#include "agvisor/docker/client.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/runtimes.h"

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
  explicit LocalHandle(std::unique_ptr<Sandbox> sb) : sb_(std::move(sb)) {}
  const std::string& container_name() const override { return sb_->container_name(); }
  Result<ExecResult> Exec(const std::vector<std::string>& argv, const ExecOptions& o) override {
    return sb_->Exec(argv, o);
  }
  Result<std::unique_ptr<Command>> Start(const std::vector<std::string>& argv,
                                         const ProcessOptions& o) override {
    auto p = AGVISOR_TRY(sb_->StartProcess(argv, o));
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
  Sandbox* library() override { return sb_.get(); }

 private:
  std::unique_ptr<Sandbox> sb_;
};

class LocalPlace final : public Place {
 public:
  explicit LocalPlace(std::string host) : host_(std::move(host)) {}

  Result<Created> Create(const SandboxSpec& spec) override {
    SandboxSpec s = spec;
    s.host = host_;
    auto rt = AGVISOR_TRY(runtime());
    auto sb = AGVISOR_TRY(Sandbox::Create(std::move(rt), s));
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
  Result<docker::ContainerStats> Stats(const SandboxInfo& sandbox) override {
    std::shared_ptr<docker::Client> docker;
    {
      // One client for every sample (top calls this from many threads): on an ssh:// host a new
      // one would be a new ssh connection.
      std::lock_guard lock(mu_);
      if (!docker_) docker_ = AGVISOR_TRY(ConnectDockerHost(host_));
      docker = docker_;
    }
    return docker->GetContainerStats(sandbox.container_id);
  }

 private:
  // The host's runtime, shared by every sandbox of this place.
  Result<std::shared_ptr<Runtime>> runtime() { return runtime_.Get(); }
  Result<std::unique_ptr<Sandbox>> OpenSandbox(std::string_view container_name) {
    return Sandbox::Open(AGVISOR_TRY(runtime()), container_name);
  }

  std::string host_;
  bool auto_resume_ = true;
  std::mutex mu_;
  std::shared_ptr<docker::Client> docker_;
  LazyRuntime runtime_{host_};  // after host_
};

}  // namespace

std::unique_ptr<ByteStream> WrapPortStream(std::shared_ptr<PortStream> stream) {
  return std::make_unique<LocalPort>(std::move(stream));
}

std::unique_ptr<SandboxHandle> WrapSandbox(std::unique_ptr<Sandbox> sandbox) {
  return std::make_unique<LocalHandle>(std::move(sandbox));
}

std::unique_ptr<Place> InProcess(std::string host) {
  return std::make_unique<LocalPlace>(std::move(host));
}

}  // namespace agvisor::client
