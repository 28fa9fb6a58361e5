// A real WebSocket client (Boost.Beast, blocking) that speaks to the desktop gateway like a
// browser would, for the gateway's tests: Origin header, token as query or first message, RFB
// bytes reassembled across messages, and the close code + reason the gateway sent.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace agvisor::gateway::testing {

class ViewerClient {
 public:
  struct Options {
    std::string origin;       // "" = no Origin header
    std::string query_token;  // sent as ?token=
    std::string path = "/v1/desktop/ws";
  };

  // Connects and upgrades; returns an error text or "".
  std::string Connect(std::uint16_t port, const Options& o) {
    namespace net = boost::asio;
    namespace bws = boost::beast::websocket;
    boost::beast::error_code ec;
    net::ip::tcp::endpoint ep(net::ip::make_address("127.0.0.1"), port);
    ws_.next_layer().connect(ep, ec);
    if (ec) return "connect: " + ec.message();
    ws_.set_option(bws::stream_base::decorator([origin = o.origin](bws::request_type& req) {
      if (!origin.empty()) req.set(boost::beast::http::field::origin, origin);
    }));
    std::string target = o.path;
    if (!o.query_token.empty()) target += "?token=" + Escape(o.query_token);
    ws_.handshake("127.0.0.1:" + std::to_string(port), target, ec);
    if (ec) return "handshake: " + ec.message();
    ws_.binary(true);
    return "";
  }

  bool SendText(const std::string& s) {
    boost::beast::error_code ec;
    ws_.text(true);
    ws_.write(boost::asio::buffer(s), ec);
    ws_.binary(true);
    return !ec;
  }
  bool SendBinary(const std::string& s) {
    boost::beast::error_code ec;
    ws_.binary(true);
    ws_.write(boost::asio::buffer(s), ec);
    return !ec;
  }

  // Exactly n bytes of the RFB stream (reading messages as needed); nullopt when the gateway
  // closed first (then close_code()/close_reason() say why).
  std::optional<std::string> Read(std::size_t n) {
    while (pending_.size() < n) {
      boost::beast::flat_buffer b;
      boost::beast::error_code ec;
      ws_.read(b, ec);
      if (ec) {
        closed_ = true;
        return std::nullopt;
      }
      pending_ += boost::beast::buffers_to_string(b.data());
    }
    std::string out = pending_.substr(0, n);
    pending_.erase(0, n);
    return out;
  }

  // Reads until the gateway closes; returns whether it did.
  bool WaitClosed() {
    for (;;) {
      boost::beast::flat_buffer b;
      boost::beast::error_code ec;
      ws_.read(b, ec);
      if (ec) return true;
    }
  }

  void Close() {
    boost::beast::error_code ec;
    ws_.close(boost::beast::websocket::close_code::normal, ec);
  }

  int close_code() const { return ws_.reason().code; }
  std::string close_reason() const { return std::string(ws_.reason().reason.c_str()); }

  // The RFB viewer handshake through the gateway (None security), ClientInit shared, and the
  // ServerInit's width and height. Empty optional on failure.
  std::optional<std::pair<int, int>> RfbHandshake() {
    auto version = Read(12);
    if (!version || *version != "RFB 003.008\n") return std::nullopt;
    SendBinary("RFB 003.008\n");
    auto types = Read(2);
    if (!types || *types != std::string("\x01\x01", 2)) return std::nullopt;
    SendBinary(std::string("\x01", 1));
    auto result = Read(4);
    if (!result || *result != std::string(4, '\0')) return std::nullopt;
    SendBinary(std::string("\x01", 1));  // ClientInit: shared
    auto init = Read(24);
    if (!init) return std::nullopt;
    auto u16 = [&](std::size_t i) {
      return static_cast<unsigned char>((*init)[i]) << 8 |
             static_cast<unsigned char>((*init)[i + 1]);
    };
    std::uint32_t name_len = static_cast<std::uint32_t>(u16(20)) << 16 | u16(22);
    if (!Read(name_len)) return std::nullopt;
    return std::make_pair(u16(0), u16(2));
  }

  static std::string Escape(const std::string& s) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
        out += static_cast<char>(c);
      } else {
        out += '%';
        out += hex[c >> 4];
        out += hex[c & 15];
      }
    }
    return out;
  }

 private:
  boost::asio::io_context ioc_;
  boost::beast::websocket::stream<boost::asio::ip::tcp::socket> ws_{ioc_};
  std::string pending_;
  bool closed_ = false;
};

}  // namespace agvisor::gateway::testing
