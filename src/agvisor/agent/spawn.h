// Starting one channel command: fork + exec with pipes or a pty, in its own process group (or
// session, for a pty), as a child subreaper, with env, cwd and user applied.
//
// Used by process.cc (the running command of an EXEC). No close_range(2) (gVisor lacks it, see
// ENVIRONMENT.md): every fd of the agent is CLOEXEC, and the child only dup2()s its three.
//
// The command itself is made a child subreaper (PR_SET_CHILD_SUBREAPER is kept across execve):
// while it runs, every descendant that double-forks or setsid()s is re-parented to it, never to
// the agent, so its PPid chain still ends at the command and a timeout can find the whole tree in
// /proc. The price: a command that wait()s for "all children" also reaps such orphans.
//
// Failures after fork (cwd, user switch, execvp) are the command's outcome, not errors: the child
// writes "agvisor-agent: <what>: <strerror>" to its stderr (the pipe or pty the host reads) and
// exits 125 (cwd / user switch), 126 (not executable) or 127 (not found).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agvisor/agent/user.h"
#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor::agent {

struct SpawnRequest {
  std::vector<std::string> argv;  // non-empty; argv[0] is looked up in the PATH of `env`
  std::vector<std::string> env;   // the complete environment ("K=V")
  std::string cwd;                // "" = the agent's
  std::optional<UserIds> user;    // unset = the agent's
  bool pipe_stdin = false;        // else /dev/null (ignored with a pty)
  bool pty = false;
  std::uint16_t rows = 0, cols = 0;  // pty size; 0 = leave the default
};

// What the command's stdout pipe holds (F_SETPIPE_SZ; the default is 64 KiB): bulk output moves
// in fewer, larger reads (bench/README, "Output on ptrace").
inline constexpr int kOutputPipeBytes = 1024 * 1024;

struct SpawnedProcess {
  pid_t pid = -1;
  UniqueFd stdin_pipe;   // write end (pipe_stdin without pty)
  UniqueFd stdout_pipe;  // read end (no pty), holding kOutputPipeBytes where the kernel allows
  UniqueFd stderr_pipe;  // read end (no pty)
  UniqueFd pty_master;   // read: output, write: input, ioctl: resize
};

// The environment of an exec: the agent's own, then HOME/USER/LOGNAME of `user` (when it has a
// passwd entry), TERM=xterm for a pty unless set, then `added` (replacing same-named entries).
std::vector<std::string> BuildEnvironment(const std::vector<std::string>& added,
                                          const std::optional<UserIds>& user, bool pty);

// Forks and starts the command. Every returned fd is non-blocking and CLOEXEC. Errors (nothing
// was started): those of pipe2 / posix_openpt / open / fork.
Result<SpawnedProcess> SpawnCommand(const SpawnRequest& request);

// Where execvp would look for `program`, in order, using the PATH of the environment `env`
// (default PATH when it has none): the paths SpawnCommand tries.
std::vector<std::string> ExecCandidates(const std::string& program,
                                        const std::vector<std::string>& env);

// Between fork and exec (system calls only, no allocation): writes "<prefix><what> '<object>':
// <strerror(err)>" to stderr and _exits with `code`.
[[noreturn]] void ChildFail(const char* prefix, const char* what, const char* object, int err,
                            int code);

// Between fork and exec: execve of each of `candidates` (ExecCandidates) in turn, as execvp
// would; when none runs, ChildFail with 127 (not found) or 126 (found, not runnable).
[[noreturn]] void ExecFirstCandidate(const char* prefix, const std::vector<std::string>& candidates,
                                     char* const* argv, char* const* envp);

// Sets a pty's window size (TIOCSWINSZ). Errors: ioctl's.
Result<void> ResizePty(int master, std::uint16_t rows, std::uint16_t cols);

}  // namespace agvisor::agent
