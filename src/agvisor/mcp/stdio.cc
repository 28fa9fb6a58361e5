#include "agvisor/mcp/stdio.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <iostream>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace agvisor::mcp {
namespace {

void WriteLine(int fd, std::string_view text) {
  std::string line(text);
  line.push_back('\n');
  std::string_view rest = line;
  while (!rest.empty()) {
    ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the client is gone; stdin's end follows
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

Result<std::size_t> ServeStdio(client::Place& place, const SessionOptions& options, int in_fd,
                               int out_fd, int stop_fd) {
  Session session(place, options);
  std::mutex write_mu;
  auto send = [&](std::string_view text) {
    if (text.empty()) return;
    std::lock_guard lock(write_mu);
    WriteLine(out_fd, text);
  };
  // Calls in flight; finished ones are joined as new ones come (a thread not joined keeps its
  // stack).
  struct Call {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
  };
  std::list<Call> calls;
  std::string buf;
  bool skipping = false;  // inside a line longer than kMaxLineBytes
  Result<void> status;
  char chunk[64 * 1024];
  for (;;) {
    pollfd fds[2] = {{in_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, stop_fd >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      status = Error::FromErrno("mcp: poll stdin", errno);
      break;
    }
    if (stop_fd >= 0 && fds[1].revents != 0) break;
    ssize_t n = ::read(in_fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = Error::FromErrno("mcp: read stdin", errno);
      break;
    }
    if (n == 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (skipping) {
        skipping = false;
        continue;
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      const auto peek = Session::Inspect(line);
      if (!peek.has_request) {
        send(session.Handle(line, send));  // notifications, responses, malformed: at once
        continue;
      }
      calls.remove_if([](Call& c) {
        if (!c.done->load()) return false;
        c.thread.join();
        return true;
      });
      Call& call = calls.emplace_back();
      call.thread = std::thread([&session, &send, done = call.done, line = std::move(line)] {
        send(session.Handle(line, send));
        done->store(true);
      });
    }
    if (buf.size() > kMaxLineBytes) {
      send(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"message longer )"
           R"(than agvisor mcp takes (64 MiB): send smaller pieces"}})");
      buf.clear();
      skipping = true;
    }
  }
  // The client is gone: its sandboxes go, which also ends the calls still running in them.
  const std::size_t removed = session.EndSandboxes();
  if (removed > 0) {
    std::cerr << "agvisor mcp: the client went away; removed " << removed << " sandbox"
              << (removed == 1 ? "" : "es") << " of this session\n";
  }
  for (auto& c : calls) c.thread.join();
  // A call that created a sandbox after the sweep above: remove it too.
  const std::size_t late = session.EndSandboxes();
  if (!status.ok()) return status.error();
  return removed + late;
}

}  // namespace agvisor::mcp
