// A standalone WebSocket listener for the desktop gateway: loopback TCP, one thread per viewer.
//
// Used by the gateway's tests and by programs that embed the gateway without agvisord (agvisord
// mounts Gateway::Serve on its own server instead). Serves `GET <any path>[?token=...]` with an
// HTTP Upgrade to WebSocket; anything else gets 426 (or 400 for malformed requests). The request
// must be complete within the gateway's handshake timeout, else the connection is closed. At most
// `max_connections` connections at once (upgrading or upgraded): one more is closed as it is
// accepted, before a thread starts for it. No TLS:
// put a reverse proxy in front for wss://, as for agvisord.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/gateway/gateway.h"

namespace agvisor::gateway {

class Listener {
 public:
  // Listens on `address` (an IPv4 literal; loopback unless `allow_remote`) and `port` (0 = any
  // free port) and serves viewers through `gateway`, which must outlive the Listener; at most
  // `max_connections` at once (see above). Errors: kInvalidArgument (address), kUnavailable /
  // kPermissionDenied (bind, with errno).
  static Result<std::unique_ptr<Listener>> Start(Gateway& gateway,
                                                 std::string address = "127.0.0.1",
                                                 std::uint16_t port = 0, bool allow_remote = false,
                                                 std::size_t max_connections = 64);
  // Stops accepting, closes every viewer's socket (1001) and joins their threads.
  ~Listener();

  std::uint16_t port() const { return port_; }

 private:
  struct Conn;
  Listener(Gateway& gateway, std::size_t max_connections)
      : gateway_(gateway), max_connections_(max_connections) {}
  void AcceptLoop();
  void ServeConn(const std::shared_ptr<Conn>& conn);

  Gateway& gateway_;
  std::size_t max_connections_;
  UniqueFd listen_fd_;
  UniqueFd wake_fd_;  // eventfd: wakes the accept loop on shutdown
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Conn>> conns_;
};

}  // namespace agvisor::gateway
