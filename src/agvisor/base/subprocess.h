// Subprocess: a child process owned by a handle. Used for ssh (the remote-host transport),
// debootstrap (image builds) and tests.
//
// Spawned with posix_spawnp; every fd of ours is CLOEXEC, so the child gets only the pipes asked
// for. Destroying a running, non-detached Subprocess kills it (SIGKILL) and reaps it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor {

struct SubprocessOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  // Extra environment entries ("K=V"), added to (or replacing those of) this process's.
  std::vector<std::string> env;
  bool pipe_stdin = false;   // else /dev/null
  bool pipe_stdout = false;  // else inherited
  bool pipe_stderr = false;  // else inherited
  bool stderr_to_stdout = false;
  bool new_process_group = false;
};

// How a process ended: a value, not an error.
struct ExitStatus {
  int exit_code = -1;  // valid when !signaled
  int signal = 0;      // the terminating signal, or 0
  bool signaled() const { return signal != 0; }
  bool success() const { return !signaled() && exit_code == 0; }
  std::string ToString() const;  // "exit 3" / "signal 9 (Killed)"
};

class Subprocess {
 public:
  // Errors: kNotFound (no such program), kResourceExhausted, kInternal.
  static Result<Subprocess> Spawn(SubprocessOptions options);

  Subprocess(Subprocess&& o) noexcept;
  Subprocess& operator=(Subprocess&& o) noexcept;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  UniqueFd& stdin_fd() { return stdin_; }
  UniqueFd& stdout_fd() { return stdout_; }
  UniqueFd& stderr_fd() { return stderr_; }

  // Blocks until the child exits.
  Result<ExitStatus> Wait();
  // Non-blocking: the status if it has exited.
  Result<std::optional<ExitStatus>> TryWait();
  // Waits up to `timeout`; kTimeout if still running.
  Result<ExitStatus> WaitFor(std::chrono::milliseconds timeout);
  // Sends a signal (to the group when new_process_group). No-op once reaped.
  Result<void> Kill(int sig);
  // Leaves the child running when the handle is destroyed.
  void Detach() { detached_ = true; }

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  bool group_ = false;
  bool detached_ = false;
  std::optional<ExitStatus> status_;
  UniqueFd stdin_, stdout_, stderr_;
};

// Runs argv to completion, capturing stdout and stderr (stdin from `input`).
struct CommandOutput {
  ExitStatus status;
  std::string out;
  std::string err;
};
Result<CommandOutput> RunCommand(std::vector<std::string> argv, std::string_view input = {});

}  // namespace agvisor
