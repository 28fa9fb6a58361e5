// Blocking WebSocket calls for threads other than the one running the stream's io_context: each
// posts the operation to that io_context and waits for it to complete; and the framing both ends
// set on their streams (SendWholeFrames). Shared by the daemon's stream routes
// (server/server.cc) and agvisord's client (client/agvisord_api.cc), which map the errors each in
// their own terms; Beast stays in those .cc files. One write and one read may be in flight at a
// time (callers lock).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <future>
#include <string_view>

namespace agvisor::http {

// Each message goes out as one frame, written from the caller's buffer in one gathered write
// (a client masks it through a 64 KiB buffer). Beast's defaults cut every message into frames of
// 4 KiB, one write each: an exec's 50 MB of output was ~12,000 writes out of agvisord and as many
// frames for the client to parse (bench/README, "Output on ptrace"). The senders already bound
// their messages (an output chunk of the channel, a port read).
template <class WebSocket>
void SendWholeFrames(WebSocket& ws) {
  ws.auto_fragment(false);
  ws.write_buffer_bytes(64 * 1024);
}

// Sends one message (binary or text); the error of the write, if any.
template <class WebSocket>
boost::system::error_code WriteMessage(boost::asio::io_context& ioc, WebSocket& ws,
                                       std::string_view data, bool binary) {
  std::promise<boost::system::error_code> done;
  boost::asio::post(ioc, [&] {
    ws.binary(binary);
    ws.async_write(boost::asio::buffer(data.data(), data.size()),
                   [&](boost::system::error_code ec, std::size_t) { done.set_value(ec); });
  });
  return done.get_future().get();
}

// Reads one whole message into `buf`; `binary` says whether it was a binary one.
template <class WebSocket>
boost::system::error_code ReadMessage(boost::asio::io_context& ioc, WebSocket& ws,
                                      boost::beast::flat_buffer& buf, bool& binary) {
  std::promise<boost::system::error_code> done;
  boost::asio::post(ioc, [&] {
    ws.async_read(buf, [&](boost::system::error_code ec, std::size_t) {
      binary = ws.got_binary();
      done.set_value(ec);
    });
  });
  return done.get_future().get();
}

}  // namespace agvisor::http
