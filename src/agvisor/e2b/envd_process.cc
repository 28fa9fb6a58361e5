// envd's Process service (process.proto) over client::SandboxHandle.
//
// A command without a pty is started as a background process of the agent and then attached to:
// it outlives its stream (the SDK's disconnect() leaves it running; Connect attaches again by
// pid or tag) as envd's processes do. A pty command is a started command of the agent (the
// agent's background processes have no pty): it ends with its stream.
#include <atomic>
#include <csignal>

#include "agvisor/e2b/envd_service.h"
#include "agvisor/e2b/envd_state.h"

namespace agvisor::e2b::envd {
namespace {

std::string Key(const Caller& c) { return c.handle->container_name(); }

// The sandbox's environment with the process's own on top, as "K=V".
std::vector<std::string> EnvList(const Caller& c, const std::map<std::string, std::string>& own) {
  auto all = own;
  all.insert(c.envs.begin(), c.envs.end());  // keeps the process's value of a key
  std::vector<std::string> out;
  for (const auto& [k, v] : all) out.push_back(k + "=" + v);
  return out;
}

// The pid a selector names: a pid as is, a tag through the processes started here.
Result<std::uint32_t> PidOf(const Caller& c, const ProcessSelector& s) {
  if (s.pid) return *s.pid;
  auto& st = c.state->impl();
  std::lock_guard lock(st.mu);
  auto it = st.processes.find(Key(c));
  if (it != st.processes.end()) {
    for (const auto& [pid, p] : it->second) {
      if (p.tag == s.tag) return pid;
    }
  }
  return Error::NotFound("process with tag \"" + *s.tag + "\": none is running in this sandbox");
}

std::shared_ptr<client::Command> AttachedTo(const Caller& c, std::uint32_t pid, bool* pty) {
  auto& st = c.state->impl();
  std::lock_guard lock(st.mu);
  auto* p = FindEntry(st.processes, Key(c), pid);
  if (!p) return nullptr;
  if (pty) *pty = p->pty;
  return p->attached;
}

// How a stream of a process ended, for Release.
enum class StreamEnd {
  kDetached,  // this stream let go (its client left or its deadline passed): the process runs on
  kExited,    // the process exited
  kLost,      // the attachment broke under it: another stream took over, or the sandbox is gone
};

// After a stream of `pid` attached as `command` ended: forgets the process once it exited or was
// lost while still this stream's, or only detaches `command` from it.
void Release(const Caller& c, std::uint32_t pid, const std::shared_ptr<client::Command>& command,
             StreamEnd end) {
  auto& st = c.state->impl();
  std::lock_guard lock(st.mu);
  auto* p = FindEntry(st.processes, Key(c), pid);
  if (!p) return;
  if (end == StreamEnd::kExited || (end == StreamEnd::kLost && p->attached == command)) {
    return EraseEntry(st.processes, Key(c), pid);
  }
  if (p->attached == command) p->attached.reset();
}

// Streams `command`'s output as process events until it ends, the client goes or the client's
// deadline passes (the SDK's timeoutMs bounds the connection, not the command): a background
// process runs on, a pty command ends.
void StreamCommand(const Caller& c, std::uint32_t pid, std::shared_ptr<client::Command> command,
                   bool pty, const StreamOptions& options, const StreamWriter& write) {
  StreamEnd end = StreamEnd::kLost;
  std::atomic<bool> detached{false};
  PumpStream(
      write, options, ProcessKeepaliveJson(),
      [&](EventQueue& q) {
        q.Push(StartEventJson(pid));
        auto out = [&q, pty](Output which) {
          return [&q, which, pty](std::string_view bytes) {
            q.Push(DataEventJson(pty ? Output::kPty : which, bytes));
          };
        };
        auto exit = command->Wait({out(Output::kStdout), out(Output::kStderr)});
        if (!exit.ok()) {
          if (detached) end = StreamEnd::kDetached;
          q.Finish(connect::FromError(exit.error()));
          return;
        }
        end = StreamEnd::kExited;
        q.Push(EndEventJson(EndEventFor(exit->exit_code, exit->signal)));
        q.Finish(std::nullopt);
      },
      [&](bool) {
        detached = true;
        command->Close();
      });
  // A pty command ends with its stream.
  Release(c, pid, command, pty ? StreamEnd::kExited : end);
}

Result<void> Track(const Caller& c, std::uint32_t pid, TrackedProcess p) {
  auto& st = c.state->impl();
  std::lock_guard lock(st.mu);
  auto& mine = st.processes[Key(c)];
  if (mine.size() >= kMaxTrackedPerSandbox && !mine.contains(pid)) {
    return Error::ResourceExhausted("envd tracks at most " + std::to_string(kMaxTrackedPerSandbox) +
                                    " processes per sandbox: wait for some to end");
  }
  if (p.tag) {
    for (const auto& [other, q] : mine) {
      if (other != pid && q.tag == p.tag) {
        return Error::Conflict("tag \"" + *p.tag + "\" is taken by running process " +
                               std::to_string(other));
      }
    }
  }
  mine[pid] = std::move(p);
  return Ok();
}

// Whether the agent knows background process `pid` (running, or among its newest finished
// ones when `finished_too`): an attach to an unknown pid fails only at its first wait.
Result<void> CheckKnown(const Caller& c, std::uint32_t pid, bool finished_too) {
  auto procs = AGVISOR_TRY(c.handle->ListProcesses());
  for (const auto& p : procs) {
    if (p.pid == pid && (p.running || finished_too)) return Ok();
  }
  return Error::NotFound("process " + std::to_string(pid) + " is not running in this sandbox");
}

void Start(const Caller& c, const StartRequest& r, const StreamOptions& options,
           const StreamWriter& write) {
  auto fail = [&](const Error& e) { (void)write(connect::EndStream(connect::FromError(e))); };
  std::vector<std::string> argv{r.process.cmd};
  argv.insert(argv.end(), r.process.args.begin(), r.process.args.end());
  // envd's default working directory is the user's home.
  auto cwd = ResolvePath(r.process.cwd && !r.process.cwd->empty() ? *r.process.cwd : "~", c.user);
  if (!cwd.ok()) return fail(cwd.error());
  std::shared_ptr<client::Command> command;
  auto as_caller = [&](auto& o) {
    o.env = EnvList(c, r.process.envs);
    o.cwd = *cwd;
    o.user = c.user;
  };
  if (r.pty) {
    ProcessOptions o;
    o.pty = true;
    o.cols = static_cast<std::uint16_t>(r.pty->cols ? r.pty->cols : 80);
    o.rows = static_cast<std::uint16_t>(r.pty->rows ? r.pty->rows : 24);
    o.stdin = true;
    as_caller(o);
    auto started = c.handle->Start(argv, o);
    if (!started.ok()) return fail(started.error());
    command = std::move(*started);
  } else {
    BackgroundOptions o;
    o.stdin = r.stdin.value_or(true);
    o.keep_awake = true;
    as_caller(o);
    auto pid = c.handle->StartBackground(argv, o);
    if (!pid.ok()) return fail(pid.error());
    auto attached = c.handle->Attach(*pid);
    if (!attached.ok()) return fail(attached.error());
    command = std::move(*attached);
  }
  std::uint32_t pid = command->pid();
  auto tracked = Track(c, pid, {r.process, r.tag, r.pty.has_value(), command});
  if (!tracked.ok()) {
    (void)command->Signal(SIGKILL);
    command->Close();
    return fail(tracked.error());
  }
  StreamCommand(c, pid, std::move(command), r.pty.has_value(), options, write);
}

void ConnectTo(const Caller& c, const ProcessSelector& s, const StreamOptions& options,
               const StreamWriter& write) {
  auto fail = [&](const Error& e) { (void)write(connect::EndStream(connect::FromError(e))); };
  auto pid = PidOf(c, s);
  if (!pid.ok()) return fail(pid.error());
  bool pty = false;
  if (auto old = AttachedTo(c, *pid, &pty)) {
    if (pty) {
      return fail(Error::Conflict("process " + std::to_string(*pid) +
                                  " has a pty and streams to the client that started it"));
    }
    // The newest client takes the stream over (the older one has usually gone already: a
    // dropped HTTP stream is only noticed at its next write).
    old->Close();
  } else if (auto known = CheckKnown(c, *pid, true); !known.ok()) {
    return fail(known.error());
  }
  auto attached = c.handle->Attach(*pid);
  if (!attached.ok()) {
    auto e = attached.error();
    if (e.code() == ErrorCode::kNotFound) {
      e = Error::NotFound("process " + std::to_string(*pid) + " is not running in this sandbox");
    }
    return fail(e);
  }
  std::shared_ptr<client::Command> command = std::move(*attached);
  {
    auto& st = c.state->impl();
    std::lock_guard lock(st.mu);
    auto& p = st.processes[Key(c)][*pid];
    if (p.config.cmd.empty()) p.config.cmd = "(started outside envd)";
    p.attached = command;
  }
  StreamCommand(c, *pid, std::move(command), false, options, write);
}

// Runs `act` on the command attached to `pid`, or on an attachment of its own for the call.
Result<void> WithCommand(const Caller& c, std::uint32_t pid,
                         const std::function<Result<void>(client::Command&, bool pty)>& act) {
  bool pty = false;
  if (auto cmd = AttachedTo(c, pid, &pty)) return act(*cmd, pty);
  AGVISOR_RETURN_IF_ERROR(CheckKnown(c, pid, false));
  auto attached = c.handle->Attach(pid);
  if (!attached.ok()) {
    if (attached.error().code() == ErrorCode::kNotFound) {
      return Error::NotFound("process " + std::to_string(pid) + " is not running in this sandbox");
    }
    return attached.error();
  }
  auto result = act(**attached, false);
  (*attached)->Close();
  return result;
}

Result<std::string> List(const Caller& c) {
  auto running = AGVISOR_TRY(c.handle->ListProcesses());
  std::vector<ListedProcess> out;
  auto& st = c.state->impl();
  std::lock_guard lock(st.mu);
  auto& mine = st.processes[Key(c)];
  std::map<std::uint32_t, TrackedProcess> alive;
  for (const auto& p : running) {
    if (!p.running) continue;
    ListedProcess l;
    l.pid = p.pid;
    if (auto it = mine.find(p.pid); it != mine.end()) {
      l.config = it->second.config;
      l.tag = it->second.tag;
      alive.emplace(p.pid, std::move(it->second));
    } else {
      l.config.cmd = p.argv0;
    }
    out.push_back(std::move(l));
  }
  // Pty commands are the agent's started commands, which it does not list: keep those attached.
  for (auto& [pid, p] : mine) {
    if (p.pty && p.attached && !alive.contains(pid)) {
      out.push_back({p.config, pid, p.tag});
      alive.emplace(pid, std::move(p));
    }
  }
  // Whatever the agent no longer runs is forgotten here.
  mine = std::move(alive);
  if (mine.empty()) st.processes.erase(Key(c));
  return ListResponseJson(out);
}

// "{}" (an empty response message) for a call that succeeded.
Result<std::string> Empty(Result<void> r) {
  if (!r.ok()) return r.error();
  return std::string("{}");
}

Result<std::string> SendInput(const Caller& c, std::string_view json) {
  auto r = AGVISOR_TRY(DecodeSendInputRequest(json));
  auto pid = AGVISOR_TRY(PidOf(c, r.process));
  return Empty(WithCommand(c, pid, [&](client::Command& cmd, bool) { return cmd.Write(r.data); }));
}

Result<std::string> CloseStdin(const Caller& c, std::string_view json) {
  auto s = AGVISOR_TRY(DecodeSelectorRequest(json));
  auto pid = AGVISOR_TRY(PidOf(c, s));
  return Empty(WithCommand(c, pid, [&](client::Command& cmd, bool pty) -> Result<void> {
    if (pty) {
      return Error::InvalidArgument("process " + std::to_string(pid) +
                                    " has a pty: send Ctrl+D (0x04) as input instead");
    }
    return cmd.CloseStdin();
  }));
}

Result<std::string> SendSignal(const Caller& c, std::string_view json) {
  auto r = AGVISOR_TRY(DecodeSendSignalRequest(json));
  auto pid = AGVISOR_TRY(PidOf(c, r.process));
  bool pty = false;
  auto attached = AttachedTo(c, pid, &pty);
  if (attached && pty) return Empty(attached->Signal(r.signal));
  // A finished process is not found (the SDK's kill() then answers false).
  AGVISOR_RETURN_IF_ERROR(CheckKnown(c, pid, false));
  auto sent = c.handle->Signal(pid, r.signal);
  if (!sent.ok() && sent.error().code() == ErrorCode::kNotFound) {
    return Error::NotFound("process " + std::to_string(pid) + " is not running in this sandbox");
  }
  return Empty(std::move(sent));
}

Result<std::string> Update(const Caller& c, std::string_view json) {
  auto r = AGVISOR_TRY(DecodeUpdateRequest(json));
  auto pid = AGVISOR_TRY(PidOf(c, r.process));
  if (!r.pty) return std::string("{}");
  bool pty = false;
  auto attached = AttachedTo(c, pid, &pty);
  if (!attached || !pty) {
    return Error::InvalidArgument("process " + std::to_string(pid) +
                                  " has no pty open through envd: only a pty can be resized");
  }
  return Empty(attached->Resize(static_cast<std::uint16_t>(r.pty->rows),
                                static_cast<std::uint16_t>(r.pty->cols)));
}

UnaryAnswer Answer(Result<std::string> r) {
  if (!r.ok()) return {connect::FromError(r.error()), ""};
  return {std::nullopt, std::move(*r)};
}

}  // namespace

UnaryAnswer CallProcessUnary(const Caller& c, std::string_view method, std::string_view json) {
  if (method == "List") {
    if (auto empty = DecodeEmptyRequest(json); !empty.ok()) return Answer(empty.error());
    return Answer(List(c));
  }
  if (method == "SendInput") return Answer(SendInput(c, json));
  if (method == "CloseStdin") return Answer(CloseStdin(c, json));
  if (method == "SendSignal") return Answer(SendSignal(c, json));
  if (method == "Update") return Answer(Update(c, json));
  return Answer(Error::Unsupported("process.Process/" + std::string(method) +
                                   ": not a unary method envd serves"));
}

void CallProcessStream(const Caller& c, std::string_view method, std::string_view json,
                       const StreamOptions& options, const StreamWriter& write) {
  if (method == "Start") {
    auto r = DecodeStartRequest(json);
    if (!r.ok()) {
      (void)write(connect::EndStream(connect::FromError(r.error())));
      return;
    }
    return Start(c, *r, options, write);
  }
  auto s = DecodeSelectorRequest(json);
  if (!s.ok()) {
    (void)write(connect::EndStream(connect::FromError(s.error())));
    return;
  }
  ConnectTo(c, *s, options, write);
}

}  // namespace agvisor::e2b::envd
