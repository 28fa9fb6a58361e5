// Sandbox's processes (sandbox.h): Exec and ExecShell with their output limits, PTY and
// background processes, attaching to and signalling them, all over the agent channel.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agvisor/sandbox/sandbox.h"

namespace agvisor {

namespace {

// A collected stream past this much is bulk output: ExecOutputCollector::Take reserves for it.
constexpr std::size_t kBulkOutputBytes = 1024 * 1024;
constexpr std::size_t kBulkReserveBytes = 64 * 1024 * 1024;

}  // namespace

ExecOutputCollector::ExecOutputCollector(const ExecOptions& options)
    : options_(options), streaming_(options.on_output || options.on_stdout || options.on_stderr) {}

void ExecOutputCollector::Take(std::string& kept, std::uint64_t& dropped,
                               const std::function<void(std::string_view)>& own,
                               std::string_view piece) {
  if (streaming_) {
    if (own) own(piece);
    if (options_.on_output) options_.on_output(piece);
    kept.append(piece);
    if (kept.size() > 2 * kStreamTailBytes) {
      kept.erase(0, kept.size() - kStreamTailBytes);
      result_.truncated = true;
    }
    return;
  }
  // Past the cap the bytes are still taken (the agent's window is granted back, so the command
  // runs on at full speed) and only counted.
  const std::size_t cap = options_.max_output_bytes;
  const std::size_t room = cap == 0 ? piece.size() : cap - std::min(cap, kept.size());
  const std::size_t n = std::min(room, piece.size());
  if (kept.size() + n > kept.capacity() && kept.size() >= kBulkOutputBytes) {
    // Bulk output: room up to kBulkReserveBytes (or the cap) at once, then doubling. Only the
    // pages written are backed, and the bytes are written once instead of again at every
    // doubling into fresh pages: 50 MB collected in 512 KiB pieces took 55 ms of CPU and 28,000
    // page faults doubling, 23 ms and 12,600 reserved (bench/collect_growth; bench/README,
    // "Output on ptrace").
    const std::size_t most = cap == 0 ? kBulkReserveBytes : std::min(cap, kBulkReserveBytes);
    kept.reserve(std::max({kept.size() + n, 2 * kept.capacity(), most}));
  }
  kept.append(piece.substr(0, n));
  if (n < piece.size()) {
    dropped += piece.size() - n;
    result_.truncated = true;
  }
}

channel::ExecCallbacks ExecOutputCollector::Callbacks() {
  channel::ExecCallbacks cb;
  cb.on_stdout = [this](std::string_view b) {
    Take(result_.out, result_.stdout_dropped, options_.on_stdout, b);
  };
  cb.on_stderr = [this](std::string_view b) {
    Take(result_.err, result_.stderr_dropped, options_.on_stderr, b);
  };
  return cb;
}

ExecResult ExecOutputCollector::Finish(const proto::Exit& exit) {
  if (streaming_) {
    for (std::string* s : {&result_.out, &result_.err}) {
      if (s->size() > kStreamTailBytes) {
        s->erase(0, s->size() - kStreamTailBytes);
        result_.truncated = true;
      }
    }
  }
  result_.exit_code = exit.exit_code;
  result_.timed_out = exit.timed_out;
  result_.prestarted = exit.prestarted;
  return std::move(result_);
}

// The agent's stderr (log lines) from the attach stream: the last few lines, for diagnostics.

Result<ExecResult> Sandbox::ExecShell(std::string_view command, const ExecOptions& options) {
  return Exec({"sh", "-c", std::string(command)}, options);
}

namespace {

// Checks env entries and the user string before anything is sent.
Result<void> ValidateExecEnvUser(const std::vector<std::string>& env, const std::string& user) {
  for (const auto& kv : env) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') {
      return Error::InvalidArgument("exec: env entry '" + kv + "' is not KEY=VALUE");
    }
  }
  for (char c : user) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-' &&
        c != ':') {
      return Error::InvalidArgument("exec: user '" + user +
                                    "' is invalid: use a name or uid, optionally :group or :gid");
    }
  }
  return Ok();
}

std::uint64_t TimeoutMs(double seconds) {
  return seconds > 0 ? static_cast<std::uint64_t>(std::llround(seconds * 1000)) : 0;
}

// The EXEC request shared by Exec, StartProcess and StartBackground, validated first (every door
// passes here). A timeout of 0 means none, where `timeout_optional`.
Result<proto::ExecRequest> BuildExecRequest(const std::vector<std::string>& argv,
                                            const std::vector<std::string>& env,
                                            const std::string& cwd, const std::string& user,
                                            double timeout, bool timeout_optional,
                                            std::optional<std::int64_t> idle_ttl) {
  if (argv.empty()) return Error::InvalidArgument("exec: the command is empty: name a program");
  AGVISOR_RETURN_IF_ERROR(timeout_optional ? ValidateProcessTimeout(timeout, idle_ttl)
                                           : ValidateExecTimeout(timeout, idle_ttl));
  AGVISOR_RETURN_IF_ERROR(ValidateExecEnvUser(env, user));
  proto::ExecRequest req;
  req.argv = argv;
  req.env = env;
  req.cwd = cwd;
  req.user = user;
  // The agent enforces the timeout on the whole process tree (EXIT says timed_out, 124).
  req.timeout_ms = TimeoutMs(timeout);
  return req;
}

}  // namespace

Result<ExecResult> Sandbox::Exec(const std::vector<std::string>& argv, const ExecOptions& o) {
  proto::ExecRequest req = AGVISOR_TRY(BuildExecRequest(argv, o.env, o.cwd, o.user, o.timeout,
                                                        /*timeout_optional=*/false,
                                                        idle_pause_ ? std::nullopt : idle_ttl_));

  ExecOutputCollector output(o);
  std::size_t in_pos = 0;
  channel::ByteSource input = [&](std::span<char> buf) -> Result<std::size_t> {
    std::size_t n = std::min(buf.size(), o.input->size() - in_pos);
    std::memcpy(buf.data(), o.input->data() + in_pos, n);
    in_pos += n;
    return n;
  };
  auto ch = AGVISOR_TRY(Channel());
  auto exit = ch->Exec(std::move(req), output.Callbacks(), o.input ? &input : nullptr);
  if (!exit.ok()) return Diagnose(exit.error().WithContext("exec in " + container_name_));
  return output.Finish(*exit);
}

Result<std::unique_ptr<Process>> Sandbox::StartProcess(const std::vector<std::string>& argv,
                                                       const ProcessOptions& o) {
  proto::ExecRequest req = AGVISOR_TRY(BuildExecRequest(argv, o.env, o.cwd, o.user, o.timeout,
                                                        /*timeout_optional=*/true,
                                                        idle_pause_ ? std::nullopt : idle_ttl_));
  if (o.stdin) req.flags |= proto::kExecStdin;
  if (o.pty) {
    req.flags |= proto::kExecPty;
    req.rows = o.rows;
    req.cols = o.cols;
  }
  auto ch = AGVISOR_TRY(Channel());
  auto p = ch->Start(req);
  if (!p.ok()) return Diagnose(p.error());
  return std::move(*p);
}

// ---- Background processes ----

Result<std::uint32_t> Sandbox::StartBackground(const std::vector<std::string>& argv,
                                               const BackgroundOptions& o) {
  proto::ExecRequest req = AGVISOR_TRY(BuildExecRequest(argv, o.env, o.cwd, o.user, o.timeout,
                                                        /*timeout_optional=*/true,
                                                        idle_pause_ ? std::nullopt : idle_ttl_));
  req.flags = proto::kExecBackground;
  if (o.stdin) req.flags |= proto::kExecStdin;
  if (o.keep_awake) req.flags |= proto::kExecKeepAwake;
  // Destroying the Process detaches it (DETACH, or the end of a protocol 1 agent's own
  // session), and it keeps running.
  auto ch = AGVISOR_TRY(ProcessChannel());
  auto p = ch->Start(req);
  if (!p.ok()) return Diagnose(p.error().WithContext("start in " + container_name_));
  auto pid = (*p)->WaitStarted();
  if (!pid.ok()) return Diagnose(pid.error().WithContext("start in " + container_name_));
  return *pid;
}

Result<std::vector<ProcessInfo>> Sandbox::ListProcesses() {
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->ListProcesses();
  if (!r.ok()) return Diagnose(r.error());
  return r;
}

Result<std::shared_ptr<channel::Channel>> Sandbox::ProcessChannel() {
  auto ch = AGVISOR_TRY(Channel());
  if (ch->agent().version < 2) return OpenChannel();
  return ch;
}

Result<std::unique_ptr<Process>> Sandbox::AttachProcess(std::uint32_t pid) {
  // Destroying the Process (its last owner) detaches.
  auto ch = AGVISOR_TRY(ProcessChannel());
  auto p = ch->AttachProcess(pid);
  if (!p.ok()) return Diagnose(p.error());
  return std::move(*p);
}

Result<ProcessExit> Sandbox::AttachProcess(std::uint32_t pid,
                                           const channel::ExecCallbacks& callbacks) {
  auto p = AGVISOR_TRY(AttachProcess(pid));
  auto exit = p->Wait(callbacks);
  if (!exit.ok()) {
    return Diagnose(exit.error().WithContext("attach to process " + std::to_string(pid) + " in " +
                                             container_name_));
  }
  return *exit;
}

Result<void> Sandbox::Signal(std::uint32_t pid, int signal) {
  // Protocol 2: PROC_SIGNAL, whoever is attached. Protocol 1 signals by attaching, which fails
  // (kConflict) while another client is attached.
  auto ch = AGVISOR_TRY(ProcessChannel());
  auto r = ch->SignalProcess(pid, signal);
  if (r.ok()) return Ok();
  if (ch->agent().version >= 2 || r.error().code() != ErrorCode::kConflict) {
    return Diagnose(r.error().WithContext("in " + container_name_));
  }
  // A protocol 1 agent, and another client is attached to it: kill(1) inside, as the default user,
  // does the same (the process group first; a pty child's own group may not exist yet).
  const std::string sig = std::to_string(signal), p = std::to_string(pid);
  auto k = Exec({"sh", "-c", "kill -" + sig + " -" + p + " 2>/dev/null || kill -" + sig + " " + p},
                {.timeout = 30});
  if (!k.ok()) return k.error().WithContext("signal process " + p);
  if (k->exit_code != 0) {
    return Error::PermissionDenied("signal process " + p + " in " + container_name_ +
                                   " (attached to another client, so through kill(1)): " + k->err);
  }
  return Ok();
}

}  // namespace agvisor
