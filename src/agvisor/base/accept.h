// Accepting connections when the process is out of file descriptors (or kernel memory): one way
// for every acceptor of agvisord (the API server, the desktop gateway, the egress proxies).
//
// accept(2) failing with EMFILE leaves the connection queued, so the listening socket stays
// readable: a loop that polls again at once spins on it at a full core and starves the threads
// that would close descriptors. The acceptor pauses kAcceptBackoff instead; connections that
// close meanwhile give the descriptors back.
#pragma once

#include <cerrno>
#include <chrono>
#include <thread>

namespace agvisor {

inline constexpr std::chrono::milliseconds kAcceptBackoff{50};

// Whether accept(2) failed for want of a resource that closing connections give back.
inline bool IsAcceptShortage(int err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

// For blocking accept loops, after accept(2) returned -1 with `err`: on a shortage, sleeps
// kAcceptBackoff and returns true; other errors (a connection reset while queued, EINTR) return
// false at once.
inline bool BackOffAfterAcceptError(int err) {
  if (!IsAcceptShortage(err)) return false;
  std::this_thread::sleep_for(kAcceptBackoff);
  return true;
}

}  // namespace agvisor
