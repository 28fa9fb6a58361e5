// ChannelPeer: the host end of an agent channel session, for tests only (header-only). Speaks
// the protocol over any pair of fds (an agent's stdio pipes, a `connect` relay's pipes, `docker
// start -a -i`) with proto's encoder and decoder; never blocks the agent (non-blocking writes
// with a pending buffer, flushed while waiting for frames).
//
// Used by agent/channel_component_test.cc and tests/integration/agent_channel_runsc_test.cc.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <string>

#include "agvisor/proto/messages.h"

namespace agvisor::agent::testing {

struct ExecResult {
  std::uint32_t pid = 0;
  std::string out, err;
  std::optional<proto::Exit> exit;
  std::optional<proto::ErrorPayload> error;
  int windows_received = 0;
};

class ChannelPeer {
 public:
  using Ms = std::chrono::milliseconds;

  ChannelPeer(int write_fd, int read_fd) : wfd_(write_fd), rfd_(read_fd) {
    ::fcntl(wfd_, F_SETFL, ::fcntl(wfd_, F_GETFL) | O_NONBLOCK);
    ::fcntl(rfd_, F_SETFL, ::fcntl(rfd_, F_GETFL) | O_NONBLOCK);
  }

  void Send(proto::Type type, std::uint32_t stream, std::string_view payload) {
    proto::AppendFrame(out_, type, stream, payload);
    Pump(Ms(0));
  }
  void SendRaw(std::string_view bytes) {
    out_.append(bytes);
    Pump(Ms(0));
  }
  std::size_t pending_output() const { return out_.size(); }

  // HELLO -> WELCOME (or whatever came instead).
  std::optional<proto::Frame> Hello(std::uint32_t window = proto::kDefaultWindow,
                                    std::uint16_t version = proto::kProtocolVersion) {
    window_ = window;
    Send(proto::Type::kHello, 0, proto::Hello{version, window}.Encode());
    return Next();
  }

  // The next frame, or nothing at EOF / timeout (then eof() tells which).
  std::optional<proto::Frame> Next(Ms timeout = Ms(10000)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (frames_.empty() && !eof_) {
      auto left = std::chrono::duration_cast<Ms>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      Pump(left);
    }
    if (frames_.empty()) return std::nullopt;
    proto::Frame f = std::move(frames_.front());
    frames_.pop_front();
    return f;
  }
  bool eof() const { return eof_; }
  bool decode_failed() const { return decoder_.failed(); }

  // Waits for socket readiness (up to `timeout`), writes what it can, reads what there is.
  void Pump(Ms timeout) {
    pollfd fds[2] = {{rfd_, POLLIN, 0}, {wfd_, static_cast<short>(out_.empty() ? 0 : POLLOUT), 0}};
    int n = ::poll(fds, out_.empty() ? 1 : 2, static_cast<int>(timeout.count()));
    if (n <= 0) return;
    if (!out_.empty()) {
      ssize_t w = ::write(wfd_, out_.data(), out_.size());
      if (w > 0) out_.erase(0, static_cast<std::size_t>(w));
    }
    if (fds[0].revents != 0) {
      char buf[256 * 1024];
      ssize_t r = ::read(rfd_, buf, sizeof(buf));
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        eof_ = true;
        return;
      }
      if (r > 0) {
        (void)decoder_.Feed(std::string_view(buf, static_cast<std::size_t>(r)),
                            [this](proto::Frame&& f) { frames_.push_back(std::move(f)); });
      }
    }
  }

  // Runs an EXEC on `stream` to its EXIT: sends `input` as STDIN within the agent's credit, then
  // STDIN_EOF (when `input` is set), collects OUTPUT granting WINDOW as it goes. `on_frame` sees
  // every frame first (return false to skip the default handling).
  template <typename OnFrame>
  ExecResult RunExec(std::uint32_t stream, const proto::ExecRequest& req,
                     std::optional<std::string> input, OnFrame on_frame, Ms timeout = Ms(60000)) {
    ExecResult r;
    Send(proto::Type::kExec, stream, req.Encode());
    std::uint64_t credit = window_;
    std::size_t sent = 0;
    bool eof_sent = false;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (input) {
        while (sent < input->size() && credit > 0 && out_.size() < (1u << 20)) {
          std::size_t n = std::min<std::size_t>({input->size() - sent, credit, 256 * 1024});
          proto::AppendFrame(out_, proto::Type::kStdin, stream,
                             std::string_view(*input).substr(sent, n));
          sent += n;
          credit -= n;
        }
        if (sent == input->size() && !eof_sent) {
          proto::AppendFrame(out_, proto::Type::kStdinEof, stream, "");
          eof_sent = true;
        }
      }
      auto f = Next(Ms(200));
      if (!f) {
        if (eof_) break;
        continue;
      }
      if (f->stream != stream) continue;
      if (!on_frame(*f)) continue;
      switch (f->type) {
        case proto::Type::kStarted:
          r.pid = proto::Started::Decode(f->payload)->pid;
          break;
        case proto::Type::kWindow:
          credit += proto::Window::Decode(f->payload)->bytes;
          ++r.windows_received;
          break;
        case proto::Type::kOutput: {
          auto o = proto::Output::DecodeOutputView(f->payload);
          (o->first == 1 ? r.out : r.err).append(o->second);
          Send(proto::Type::kWindow, stream,
               proto::Window{static_cast<std::uint32_t>(o->second.size())}.Encode());
          break;
        }
        case proto::Type::kExit:
          r.exit = *proto::Exit::Decode(f->payload);
          return r;
        case proto::Type::kError:
          r.error = *proto::ErrorPayload::Decode(f->payload);
          return r;
        default:
          break;
      }
    }
    return r;
  }
  ExecResult RunExec(std::uint32_t stream, const proto::ExecRequest& req,
                     std::optional<std::string> input = std::nullopt) {
    return RunExec(stream, req, std::move(input), [](const proto::Frame&) { return true; });
  }

 private:
  int wfd_, rfd_;
  std::uint32_t window_ = proto::kDefaultWindow;
  std::string out_;
  proto::FrameDecoder decoder_;
  std::deque<proto::Frame> frames_;
  bool eof_ = false;
};

inline proto::ExecRequest Cmd(std::vector<std::string> argv, std::uint64_t timeout_ms = 0,
                              std::uint8_t flags = 0) {
  proto::ExecRequest r;
  r.argv = std::move(argv);
  r.timeout_ms = timeout_ms;
  r.flags = flags;
  return r;
}

}  // namespace agvisor::agent::testing
