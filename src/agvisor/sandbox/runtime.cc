// Runtime's own part: the process-local bookkeeping every runtime carries (runtime_local.h).
#include "agvisor/sandbox/runtime.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "agvisor/sandbox/runtime_local.h"

namespace agvisor {
namespace {

StartGateLimits LimitsFromEnvOrDefault() {
  auto limits = StartGateLimitsFromEnv();
  if (limits.ok()) return *limits;
  std::fprintf(stderr, "agvisor: %s; using the default start limits\n",
               limits.error().message().c_str());
  return StartGateLimits{};
}

}  // namespace

RuntimeLocal::RuntimeLocal(const std::string& host) : start_gate(host, LimitsFromEnvOrDefault()) {}

Runtime::Runtime() = default;
Runtime::~Runtime() = default;

RuntimeLocal& Runtime::local() {
  // host() is virtual, so the part is made on first use rather than in the constructor.
  std::call_once(local_once_, [this] { local_ = std::make_unique<RuntimeLocal>(host()); });
  return *local_;
}

StartGate& Runtime::start_gate() { return local().start_gate; }

Result<void> Runtime::CheckEgressSupport() {
  return Error::Unsupported("egress policies: the " + traits().kind +
                            " runtime has no enforcer; use network none, or a Docker host");
}

Result<std::string> Runtime::CreateSharedNetwork(std::string_view name) {
  return Error::Unsupported("network " + std::string(name) + ": the " + traits().kind +
                            " runtime has no shared networks");
}

Result<SnapshotBase> Runtime::SnapshotBaseOf(std::string_view id,
                                             const std::vector<std::string>& excludes) {
  (void)excludes;
  return Error::Unsupported("layered snapshot of " + std::string(id) + ": the " + traits().kind +
                            " runtime makes no layers");
}

Result<int> Runtime::RunExecWithInput(std::string_view id, const std::vector<std::string>& argv,
                                      std::string input, const OutputSink& on_stdout,
                                      const StderrSink& on_stderr) {
  (void)argv, (void)input, (void)on_stdout, (void)on_stderr;
  return Error::Unsupported("exec with input in " + std::string(id) + ": the " + traits().kind +
                            " runtime has none");
}

Result<std::string> Runtime::LoadLayeredImage(std::string_view ref, const ImageConfig& config,
                                              const std::vector<std::string>& base_layers,
                                              const channel::ByteSource& layer) {
  (void)config, (void)base_layers, (void)layer;
  return Error::Unsupported("layered image " + std::string(ref) + ": the " + traits().kind +
                            " runtime makes no layers");
}

Result<std::map<std::string, std::int64_t>> Runtime::VolumeSizes() {
  return Error::Unsupported("volume sizes: the " + traits().kind +
                            " runtime does not count its volumes");
}

std::vector<std::string> HostSshArgs() {
  std::vector<std::string> args;
  const char* extra = std::getenv("AGVISOR_SSH_ARGS");
  if (extra == nullptr) return args;
  std::string_view a = extra;
  std::size_t i = 0;
  while (i < a.size()) {
    std::size_t j = a.find(' ', i);
    if (j == std::string_view::npos) j = a.size();
    if (j > i) args.emplace_back(a.substr(i, j - i));
    i = j + 1;
  }
  return args;
}

}  // namespace agvisor
