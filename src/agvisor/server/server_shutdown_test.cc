// The server's shutdown against real loopback WebSocket clients (no Docker): a WebSocket that
// ends on its own while Shutdown is closing it. Shutdown's close of a WebSocket waits for the
// send lock (a sender stuck on a peer that does not read holds it); the connection must not end
// and free that WebSocket under it.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "agvisor/server/server.h"

namespace agvisor::server {
namespace {

namespace net = boost::asio;
namespace bws = boost::beast::websocket;
using tcp = net::ip::tcp;

TEST(ServerShutdownTest, AWebSocketEndingWhileShutdownClosesItIsNotUsedAfterItEnds) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ServerOptions so;
    so.tcp_listen = "127.0.0.1:0";
    so.token = "t";
    so.shutdown_grace = std::chrono::seconds(20);
    auto srv = Server::Bind(so);
    ASSERT_TRUE(srv.ok()) << srv.error().ToString();
    std::atomic<std::size_t> sent{0};
    std::atomic<bool> send_failed{false};
    (*srv)->SetHandlers(
        [](const HttpRequest&, const api::RouteMatch&) {
          return HttpResponse{404, "application/json", "{}", {}};
        },
        [&](const HttpRequest&, const api::RouteMatch&, WebSocket& ws) {
          // Sends until the socket buffers are full: Send then blocks, holding
          // the send lock, since the client does not read.
          const std::string chunk(1 << 20, 'x');
          while (ws.Send(chunk, true).ok()) sent += chunk.size();
          send_failed = true;
        });
    std::size_t left = 99;
    std::thread run([&, s = srv->get()] { left = s->Run(); });

    net::io_context ioc;
    bws::stream<tcp::socket> ws(ioc);
    tcp::resolver resolver(ioc);
    net::connect(ws.next_layer(),
                 resolver.resolve("127.0.0.1", std::to_string((*srv)->tcp_port())));
    ws.set_option(bws::stream_base::decorator([](bws::request_type& req) {
      req.set(boost::beast::http::field::authorization, "Bearer t");
    }));
    // Any WebSocket route reaches the handler above; the sandbox id is not looked at.
    ws.handshake("127.0.0.1", "/v1/sandboxes/x/exec/ws");
    // Wait until the handler is stuck in Send: nothing more is sent for 300 ms.
    std::size_t before = 0;
    for (int i = 0; i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (sent > 0 && sent == before) break;
      before = sent;
    }
    ASSERT_GT(sent.load(), 0u);
    ASSERT_FALSE(send_failed.load());

    (*srv)->Shutdown();  // its close of the WebSocket now waits for the send lock
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    // The client goes away: Send fails, the handler returns and the connection ends, all while
    // Shutdown's close still waits.
    boost::system::error_code ec;
    ws.next_layer().close(ec);
    // The connection's thread is gone by now; a thread started and joined hands its stack back
    // (ctest runs this with glibc's thread stack cache off), so a use of the WebSocket after its
    // end touches unmapped memory and crashes instead of passing by luck.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    for (int i = 0; i < 2; ++i) std::thread([] {}).join();
    run.join();
    EXPECT_TRUE(send_failed.load());
    EXPECT_EQ(left, 0u) << "connections still open after the grace period";
  }
}

}  // namespace
}  // namespace agvisor::server
