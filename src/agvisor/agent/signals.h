// SignalFd: signals delivered as readable events on an fd (signalfd), for the agent's event loop.
//
// Used by init and exec. Create() blocks the given signals for this (single-threaded) process and
// also gives each a no-op handler: a PID 1 never receives a signal whose action is SIG_DFL from
// inside its PID namespace (the kernel drops it as "unkillable init"), so relying on the blocked
// mask alone would depend on a kernel subtlety (blocked signals are queued first); with a handler
// installed the signal is always queued, on Linux and under gVisor. The handler never runs while
// the signal is blocked. Children must call ResetSignalsInChild() between fork and exec, because
// the blocked mask survives execve.
#pragma once

#include <signal.h>

#include <initializer_list>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"

namespace agvisor::agent {

class SignalFd {
 public:
  // Errors: those of sigaction / sigprocmask / signalfd (kUnsupported if the kernel lacks it).
  static Result<SignalFd> Create(std::initializer_list<int> signals);

  SignalFd(SignalFd&&) = default;
  SignalFd& operator=(SignalFd&&) = default;
  // Restores the signal mask that was in effect before Create().
  ~SignalFd();

  int fd() const { return fd_.get(); }
  // Drains the queued signals (non-blocking), in arrival order; standard signals coalesce (one
  // SIGCHLD may stand for several exited children). Errors: read(2)'s, other than EAGAIN.
  Result<std::vector<int>> ReadPending();

 private:
  SignalFd(UniqueFd fd, sigset_t old_mask) : fd_(std::move(fd)), old_mask_(old_mask) {}
  UniqueFd fd_;
  sigset_t old_mask_;
};

// Between fork and exec (async-signal-safe): default action for the signals SignalFd handles,
// nothing blocked.
void ResetSignalsInChild();

}  // namespace agvisor::agent
