#include "agvisor/agent/signals.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace agvisor::agent {
namespace {

void NoOpHandler(int /*sig*/) {}

// The signals given a handler by Create(), for ResetSignalsInChild (which runs after fork, where
// only async-signal-safe reads of plain data are allowed).
sigset_t g_handled_signals;
bool g_handled_signals_set = false;

}  // namespace

Result<SignalFd> SignalFd::Create(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : signals) {
    struct sigaction sa {};
    sa.sa_handler = NoOpHandler;
    sigemptyset(&sa.sa_mask);
    // SA_NOCLDSTOP: a stopped child is not an exit; only terminations wake us for SIGCHLD.
    sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    if (::sigaction(sig, &sa, nullptr) != 0) {
      return Error::FromErrno("sigaction(" + std::to_string(sig) + ")", errno);
    }
    sigaddset(&set, sig);
  }
  if (!g_handled_signals_set) {
    sigemptyset(&g_handled_signals);
    g_handled_signals_set = true;
  }
  for (int sig : signals) sigaddset(&g_handled_signals, sig);
  sigset_t old;
  if (::sigprocmask(SIG_BLOCK, &set, &old) != 0) {
    return Error::FromErrno("sigprocmask(SIG_BLOCK)", errno);
  }
  int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return Error::FromErrno("signalfd(SFD_CLOEXEC|SFD_NONBLOCK)", err);
  }
  return SignalFd(UniqueFd(fd), old);
}

SignalFd::~SignalFd() {
  if (fd_.valid()) ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
}

Result<std::vector<int>> SignalFd::ReadPending() {
  std::vector<int> out;
  for (;;) {
    signalfd_siginfo info[8];
    ssize_t n = ::read(fd_.get(), info, sizeof(info));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return out;
      return Error::FromErrno("read(signalfd " + std::to_string(fd_.get()) + ")", errno);
    }
    if (n == 0) return out;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n) / sizeof(info[0]); ++i) {
      out.push_back(static_cast<int>(info[i].ssi_signo));
    }
  }
}

void ResetSignalsInChild() {
  // Default actions first, then unblock: a signal arriving in between must not be swallowed by
  // the no-op handler. Ignored signals stay ignored (inherited across exec, as usual).
  if (g_handled_signals_set) {
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sigismember(&g_handled_signals, sig) == 1) ::sigaction(sig, &sa, nullptr);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace agvisor::agent
