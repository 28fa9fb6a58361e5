// A tiny HTTP/1.1 server on a unix socket in a fresh temp directory, for the client's component
// tests: raw sockets, a thread per connection, requests parsed just enough (Content-Length and
// chunked bodies). Each request goes to a handler that writes whatever bytes it likes on the
// connection, so tests control framing exactly (bytes after a 101 in the same write, a close
// without an answer, no answer at all).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace agvisor::http::testing {

struct SeenRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // not kept when a body observer is set
  bool chunked = false;
  std::size_t body_bytes = 0;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

// Buffered reads from a connection.
class ConnReader {
 public:
  explicit ConnReader(int fd) : fd_(fd) {}
  // Reads more into the buffer; false on EOF/error.
  bool Fill() {
    char tmp[65536];
    for (;;) {
      ssize_t n = ::read(fd_, tmp, sizeof tmp);
      if (n > 0) {
        buf_.append(tmp, static_cast<std::size_t>(n));
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
  }
  bool ReadLine(std::string& line) {
    for (;;) {
      auto pos = buf_.find("\r\n");
      if (pos != std::string::npos) {
        line = buf_.substr(0, pos);
        buf_.erase(0, pos + 2);
        return true;
      }
      if (!Fill()) return false;
    }
  }
  // Delivers exactly n bytes to `out`, in pieces.
  bool ReadExact(std::size_t n, const std::function<void(std::string_view)>& out) {
    while (n > 0) {
      if (buf_.empty() && !Fill()) return false;
      std::size_t take = std::min(n, buf_.size());
      out(std::string_view(buf_).substr(0, take));
      buf_.erase(0, take);
      n -= take;
    }
    return true;
  }
  // Whatever is available (waiting for at least one byte); "" on EOF.
  std::string ReadSome() {
    if (buf_.empty() && !Fill()) return "";
    return std::exchange(buf_, std::string());
  }

 private:
  int fd_;
  std::string buf_;
};

inline bool WriteAllTo(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

inline std::string OkResponse(std::string_view body, std::string_view extra_headers = "") {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         std::string(extra_headers) + "\r\n" + std::string(body);
}

class TestServer {
 public:
  struct Conn {
    int fd;
    int index;           // 0-based connection number
    int request_number;  // 0-based request number on this connection
    ConnReader* reader;  // for handlers that take over the connection (hijack)
  };
  // Writes the answer; returns false to close the connection afterwards.
  using Handler = std::function<bool(Conn& c, const SeenRequest& r)>;

  explicit TestServer(Handler handler) : handler_(std::move(handler)) {
    char templ[] = "/tmp/agvisor-http-test-XXXXXX";
    if (::mkdtemp(templ) == nullptr) std::abort();
    dir_ = templ;
    path_ = dir_ + "/server.sock";
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size());
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 128) != 0) {
      std::abort();
    }
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~TestServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    accept_thread_.join();
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes the connection threads
    }
    for (auto& t : conn_threads_) t.join();
    for (int fd : conn_fds_) ::close(fd);
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }

  const std::string& path() const { return path_; }
  std::string url() const { return "unix://" + path_; }
  int connections() const { return connections_.load(); }
  int requests() const { return requests_.load(); }
  // When set, request bodies go here piece by piece instead of into SeenRequest::body.
  void set_body_observer(std::function<void(std::string_view)> f) { body_observer_ = std::move(f); }

 private:
  void AcceptLoop() {
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      std::lock_guard lock(mu_);
      if (stopping_) {
        ::close(fd);
        return;
      }
      int index = connections_++;
      conn_fds_.push_back(fd);
      conn_threads_.emplace_back([this, fd, index] { Serve(fd, index); });
    }
  }

  void Serve(int fd, int index) {
    ConnReader reader(fd);
    for (int n = 0;; ++n) {
      SeenRequest r;
      if (!ReadRequest(reader, r)) break;
      ++requests_;
      Conn c{fd, index, n, &reader};
      if (!handler_(c, r)) break;
    }
    ::shutdown(fd, SHUT_RDWR);  // the fd itself is closed by the destructor (no reuse races)
  }

  bool ReadRequest(ConnReader& in, SeenRequest& r) {
    std::string line;
    if (!in.ReadLine(line)) return false;
    auto sp1 = line.find(' ');
    auto sp2 = line.find(' ', sp1 + 1);
    r.method = line.substr(0, sp1);
    r.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    for (;;) {
      if (!in.ReadLine(line)) return false;
      if (line.empty()) break;
      auto colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value[0] == ' ') value.erase(0, 1);
      r.headers[name] = value;
    }
    auto take = [&](std::string_view piece) {
      r.body_bytes += piece.size();
      if (body_observer_) {
        body_observer_(piece);
      } else {
        r.body.append(piece);
      }
    };
    if (r.header("transfer-encoding") == "chunked") {
      r.chunked = true;
      for (;;) {
        if (!in.ReadLine(line)) return false;
        std::size_t size = std::stoul(line, nullptr, 16);
        if (size == 0) {
          if (!in.ReadLine(line)) return false;  // no trailers: the final CRLF
          break;
        }
        if (!in.ReadExact(size, take) || !in.ReadLine(line)) return false;
      }
    } else if (auto cl = r.header("content-length"); !cl.empty()) {
      if (!in.ReadExact(std::stoul(cl), take)) return false;
    }
    return true;
  }

  Handler handler_;
  std::function<void(std::string_view)> body_observer_;
  std::string dir_, path_;
  int listen_fd_ = -1;
  std::thread accept_thread_;
  std::mutex mu_;
  bool stopping_ = false;
  std::vector<int> conn_fds_;
  std::vector<std::thread> conn_threads_;
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
};

}  // namespace agvisor::http::testing
