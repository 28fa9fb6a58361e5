// Component tests of Client against a real HTTP server on a unix socket (test_server.h).
#include "agvisor/http/client.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>

#include "agvisor/http/test_server.h"

namespace agvisor::http {
namespace {

using testing::OkResponse;
using testing::SeenRequest;
using testing::TestServer;
using testing::WriteAllTo;
using namespace std::chrono_literals;

std::shared_ptr<Client> ConnectTo(const TestServer& server, ClientOptions options = {}) {
  auto ep = ParseEndpoint(server.url());
  EXPECT_TRUE(ep.ok()) << ep.error().ToString();
  auto c = Client::Connect(*ep, std::move(options));
  EXPECT_TRUE(c.ok()) << c.error().ToString();
  return *c;
}

Request Get(std::string target) {
  Request r;
  r.target = std::move(target);
  return r;
}

// Waits (with a deadline) until pred() holds; notified through `cv`.
template <class Pred>
bool WaitFor(std::mutex& mu, std::condition_variable& cv, Pred pred,
             std::chrono::milliseconds timeout = 10s) {
  std::unique_lock lock(mu);
  return cv.wait_for(lock, timeout, pred);
}

TEST(ClientTest, KeepAliveReusesOneConnection) {
  TestServer server([](TestServer::Conn& c, const SeenRequest& r) {
    return WriteAllTo(c.fd, OkResponse("hello " + r.target));
  });
  auto client = ConnectTo(server);
  for (int i = 0; i < 3; ++i) {
    auto res = client->Send(Get("/r" + std::to_string(i)));
    ASSERT_TRUE(res.ok()) << res.error().ToString();
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, "hello /r" + std::to_string(i));
    EXPECT_EQ(res->header("content-length"), std::to_string(res->body.size()));
  }
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(server.connections(), 1);
}

TEST(ClientTest, SendsBodyHeadersAndContentType) {
  std::mutex mu;
  SeenRequest seen;
  TestServer server([&](TestServer::Conn& c, const SeenRequest& r) {
    {
      std::lock_guard lock(mu);
      seen = r;
    }
    return WriteAllTo(c.fd, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\nX-Id: 7\r\n\r\n");
  });
  auto client = ConnectTo(server);
  Request req;
  req.method = "POST";
  req.target = "/v1.41/containers/create?name=" + UrlEncode("a b");
  req.body = R"({"Image":"x"})";
  req.content_type = "application/json";
  req.headers.push_back({"X-Registry-Auth", "e30="});
  auto res = client->Send(req);
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  EXPECT_EQ(res->status, 201);
  EXPECT_EQ(res->header("x-id"), "7");
  EXPECT_EQ(res->header("X-ID"), "7");
  EXPECT_EQ(res->header("missing"), "");
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(seen.method, "POST");
    EXPECT_EQ(seen.target, "/v1.41/containers/create?name=a%20b");
    EXPECT_EQ(seen.body, R"({"Image":"x"})");
    EXPECT_EQ(seen.header("content-type"), "application/json");
    EXPECT_EQ(seen.header("x-registry-auth"), "e30=");
    EXPECT_FALSE(seen.header("host").empty());
  }

  // An empty POST still says Content-Length: 0 (Docker's POST handlers want a length).
  Request empty_post;
  empty_post.method = "POST";
  empty_post.target = "/containers/x/start";
  ASSERT_TRUE(client->Send(empty_post).ok());
  std::lock_guard lock2(mu);
  EXPECT_EQ(seen.header("content-length"), "0");
}

TEST(ClientTest, RefusesHeaderInjection) {
  TestServer server(
      [](TestServer::Conn& c, const SeenRequest&) { return WriteAllTo(c.fd, OkResponse("")); });
  auto client = ConnectTo(server);
  Request bad = Get("/x");
  bad.headers.push_back({"X-A", "1\r\nX-B: 2"});
  EXPECT_EQ(client->Send(bad).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(client->Send(Get("/x y")).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(client->Send(Get("http://x/")).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(server.requests(), 0);
}

TEST(ClientTest, ConnectionCloseIsNotReused) {
  TestServer server([](TestServer::Conn& c, const SeenRequest&) {
    WriteAllTo(c.fd, OkResponse("x", "Connection: close\r\n"));
    return false;
  });
  auto client = ConnectTo(server);
  ASSERT_TRUE(client->Send(Get("/a")).ok());
  ASSERT_TRUE(client->Send(Get("/b")).ok());
  EXPECT_EQ(server.connections(), 2);
}

TEST(ClientTest, HeadResponseHasNoBody) {
  TestServer server([](TestServer::Conn& c, const SeenRequest&) {
    return WriteAllTo(c.fd, "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n");
  });
  auto client = ConnectTo(server);
  Request head = Get("/_ping");
  head.method = "HEAD";
  auto res = client->Send(head);
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  EXPECT_EQ(res->body, "");
  ASSERT_TRUE(client->Send(head).ok());
  EXPECT_EQ(server.connections(), 1);
}

TEST(ClientTest, ManyThreadsShareThePool) {
  TestServer server([](TestServer::Conn& c, const SeenRequest& r) {
    return WriteAllTo(c.fd, OkResponse(r.body + r.target));
  });
  auto client = ConnectTo(server);
  constexpr int kThreads = 8, kRequests = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRequests; ++i) {
        Request req;
        req.method = "POST";
        req.target = "/t" + std::to_string(t) + "/" + std::to_string(i);
        req.body = std::string(static_cast<std::size_t>(i * 97), 'a' + static_cast<char>(t));
        auto res = client->Send(req);
        if (!res.ok() || res->body != req.body + req.target) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(server.requests(), kThreads * kRequests);
  EXPECT_LE(server.connections(), kThreads);  // never more connections than requests in flight
}

// The server takes a second request on a connection and hangs up without answering, as a daemon
// does when its idle timer fires just as the request arrives: the pooled connection looks alive
// to the pre-use check, so this exercises the replay. An idempotent request is replayed once on a
// fresh connection; a POST that reached the server is not.
TEST(ClientTest, StaleConnectionIsReplayedForIdempotentRequests) {
  TestServer server([](TestServer::Conn& c, const SeenRequest&) {
    if (c.request_number > 0) return false;
    return WriteAllTo(c.fd, OkResponse("fresh"));
  });
  auto client = ConnectTo(server);
  for (int i = 0; i < 5; ++i) {
    auto res = client->Send(Get("/x"));
    ASSERT_TRUE(res.ok()) << i << ": " << res.error().ToString();
    EXPECT_EQ(res->body, "fresh");
  }
  EXPECT_EQ(server.connections(), 5);
  EXPECT_EQ(server.requests(), 9);  // 1 + 4 x (lost on the old connection + replayed)
}

TEST(ClientTest, NonIdempotentRequestIsNotReplayedOnceSent) {
  TestServer server([](TestServer::Conn& c, const SeenRequest&) {
    if (c.request_number > 0) return false;
    return WriteAllTo(c.fd, OkResponse("ok"));
  });
  auto client = ConnectTo(server);
  Request post;
  post.method = "POST";
  post.target = "/containers/create";
  post.body = "{}";
  ASSERT_TRUE(client->Send(post).ok());
  auto res = client->Send(post);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kUnavailable) << res.error().ToString();
  EXPECT_NE(res.error().message().find("before a response"), std::string::npos);
  EXPECT_EQ(server.requests(), 2);
}

TEST(ClientTest, ChunkedUploadStreamsWithBoundedMemory) {
  constexpr std::size_t kTotal = 20 << 20;
  constexpr std::size_t kWindow = 2 << 20;  // the source never runs further ahead than this
  std::mutex mu;
  std::condition_variable cv;
  std::size_t received = 0;
  std::uint64_t sum = 0;
  TestServer server([&](TestServer::Conn& c, const SeenRequest& r) {
    std::string body = std::to_string(r.body_bytes) + " " + (r.chunked ? "chunked" : "plain");
    return WriteAllTo(c.fd, OkResponse(body));
  });
  server.set_body_observer([&](std::string_view piece) {
    std::lock_guard lock(mu);
    for (char ch : piece) sum += static_cast<unsigned char>(ch);
    received += piece.size();
    cv.notify_all();
  });
  auto client = ConnectTo(server);
  std::size_t produced = 0;
  std::uint64_t expected_sum = 0;
  std::size_t biggest_ask = 0;
  BodySource source = [&](std::span<char> buf) -> Result<std::size_t> {
    biggest_ask = std::max(biggest_ask, buf.size());
    // Streaming means the server sees the start while the end is not produced yet: wait for
    // it to catch up. A client that buffered the whole body would never get past this.
    if (produced > kWindow && !WaitFor(mu, cv, [&] { return received + kWindow >= produced; })) {
      return Error::Timeout("server did not receive the body while it was produced");
    }
    std::size_t n = std::min(buf.size(), kTotal - produced);
    for (std::size_t i = 0; i < n; ++i) {
      buf[i] = static_cast<char>((produced + i) * 31 % 251);
      expected_sum += static_cast<unsigned char>(buf[i]);
    }
    produced += n;
    return n;
  };
  Request req;
  req.method = "POST";
  req.target = "/images/create?fromSrc=-";
  req.content_type = "application/x-tar";
  auto res = client->SendStreamingBody(req, source);
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  EXPECT_EQ(res->body, std::to_string(kTotal) + " chunked");
  std::lock_guard lock(mu);
  EXPECT_EQ(sum, expected_sum);
  EXPECT_LE(biggest_ask, 1u << 20);
}

TEST(ClientTest, UploadSourceErrorAbortsTheRequest) {
  TestServer server(
      [](TestServer::Conn& c, const SeenRequest&) { return WriteAllTo(c.fd, OkResponse("")); });
  auto client = ConnectTo(server);
  int calls = 0;
  auto res = client->SendStreamingBody(Get("/x"), [&](std::span<char>) -> Result<std::size_t> {
    if (++calls == 1) return std::size_t{0};
    return 0;
  });
  ASSERT_TRUE(res.ok());
  res = client->SendStreamingBody(Get("/x"), [&](std::span<char>) -> Result<std::size_t> {
    return Error::NotFound("tar source: no such dir");
  });
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kNotFound);
}

TEST(ClientTest, StreamedResponseArrivesPieceByPiece) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> got;
  TestServer server([&](TestServer::Conn& c, const SeenRequest&) {
    WriteAllTo(c.fd,
               "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n");
    const char* lines[] = {"{\"status\":\"a\"}\n", "{\"status\":\"bb\"}\n", "{\"status\":\"c\"}\n"};
    for (std::size_t i = 0; i < 3; ++i) {
      std::string line = lines[i];
      char head[16];
      std::snprintf(head, sizeof head, "%zx\r\n", line.size());
      WriteAllTo(c.fd, head + line + "\r\n");
      // The next piece is only sent once the client delivered this one: proof that the sink
      // sees data as it arrives, not at the end.
      if (!WaitFor(mu, cv, [&] { return got.size() == i + 1; })) return false;
    }
    return WriteAllTo(c.fd, "0\r\n\r\n");
  });
  auto client = ConnectTo(server);
  auto res = client->SendStreamingResponse(Get("/images/create"), [&](std::string_view piece) {
    std::lock_guard lock(mu);
    got.emplace_back(piece);
    cv.notify_all();
    return Ok();
  });
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1], "{\"status\":\"bb\"}\n");
}

TEST(ClientTest, StreamedResponseErrorStatusKeepsBodyAndSkipsSink) {
  TestServer server([](TestServer::Conn& c, const SeenRequest&) {
    return WriteAllTo(c.fd,
                      "HTTP/1.1 404 Not Found\r\nContent-Length: 25\r\n\r\n"
                      "{\"message\":\"no such x\"}\n\n");
  });
  auto client = ConnectTo(server);
  bool called = false;
  auto res = client->SendStreamingResponse(Get("/x"), [&](std::string_view) {
    called = true;
    return Ok();
  });
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(res->body, "{\"message\":\"no such x\"}\n\n");
  EXPECT_FALSE(called);
}

TEST(ClientTest, SinkErrorAbortsTheStream) {
  TestServer server([](TestServer::Conn& c, const SeenRequest&) {
    return WriteAllTo(c.fd, OkResponse("0123456789"));
  });
  auto client = ConnectTo(server);
  auto res = client->SendStreamingResponse(
      Get("/x"), [](std::string_view) -> Result<void> { return Error::Conflict("stop"); });
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kConflict);
}

// Answers the hijack with 101 and the first stream bytes in ONE write, then echoes upper-cased
// until the client half-closes, then says BYE and closes.
bool UpgradeAndEcho(TestServer::Conn& c, const SeenRequest& r) {
  if (r.header("upgrade") != "tcp" || r.header("connection") != "Upgrade") {
    WriteAllTo(c.fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    return false;
  }
  WriteAllTo(c.fd,
             "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
             "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\nHELLO");
  for (;;) {
    std::string in = c.reader->ReadSome();
    if (in.empty()) break;
    for (auto& ch : in) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    WriteAllTo(c.fd, in);
  }
  WriteAllTo(c.fd, "BYE");
  return false;
}

// Reads from `s` until `want` bytes arrived or EOF.
std::string ReadN(RawStream& s, std::size_t want) {
  std::string out;
  char buf[4096];
  while (out.size() < want) {
    auto n = s.Read(std::span<char>(buf, std::min(sizeof buf, want - out.size())));
    if (!n.ok() || *n == 0) break;
    out.append(buf, *n);
  }
  return out;
}

TEST(ClientTest, HijackDeliversBufferedBytesFirstAndHalfCloses) {
  TestServer server(UpgradeAndEcho);
  auto client = ConnectTo(server);
  Request req;
  req.method = "POST";
  req.target = "/exec/abc/start";
  req.body = R"({"Detach":false,"Tty":false})";
  req.content_type = "application/json";
  auto h = client->Hijack(req);
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  EXPECT_EQ(h->response.status, 101);
  ASSERT_TRUE(h->stream);
  RawStream& s = *h->stream;
  EXPECT_EQ(ReadN(s, 5), "HELLO");
  ASSERT_TRUE(s.Write("ping").ok());
  EXPECT_EQ(ReadN(s, 4), "PING");
  ASSERT_TRUE(s.CloseWrite().ok());  // the server sees EOF, answers BYE, closes
  EXPECT_EQ(ReadN(s, 100), "BYE");
  char b[8];
  auto eof = s.Read(std::span<char>(b, sizeof b));
  ASSERT_TRUE(eof.ok());
  EXPECT_EQ(*eof, 0u);
  s.Close();
}

TEST(ClientTest, HijackReadAndWriteFromTwoThreads) {
  TestServer server(UpgradeAndEcho);
  auto client = ConnectTo(server);
  auto h = client->Hijack(Get("/attach"));
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  ASSERT_TRUE(h->stream);
  RawStream& s = *h->stream;
  constexpr std::size_t kBytes = 4 << 20;
  std::thread writer([&] {
    std::string block(64 * 1024, 'x');
    for (std::size_t sent = 0; sent < kBytes; sent += block.size()) {
      if (!s.Write(block).ok()) return;
    }
    (void)s.CloseWrite();
  });
  std::string all = ReadN(s, 5 + kBytes + 3 + 1);
  writer.join();
  ASSERT_EQ(all.size(), 5 + kBytes + 3);
  EXPECT_EQ(all.substr(0, 5), "HELLO");
  EXPECT_EQ(all.substr(all.size() - 3), "BYE");
  EXPECT_EQ(all.find_first_not_of('X', 5), all.size() - 3);
}

TEST(ClientTest, CloseUnblocksARead) {
  TestServer server([](TestServer::Conn& c, const SeenRequest&) {
    WriteAllTo(c.fd, "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n");
    c.reader->ReadSome();  // silent until the client goes away
    return false;
  });
  auto client = ConnectTo(server);
  auto h = client->Hijack(Get("/attach"));
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  RawStream& s = *h->stream;
  auto reader = std::async(std::launch::async, [&] {
    char b[16];
    auto n = s.Read(std::span<char>(b, sizeof b));
    return n.ok() ? static_cast<long>(*n) : -1L;
  });
  s.Close();
  ASSERT_EQ(reader.wait_for(5s), std::future_status::ready) << "Read stayed blocked";
  EXPECT_EQ(reader.get(), 0);
  EXPECT_FALSE(s.Write("x").ok());
}

// A read with a deadline on a quiet stream gives up with kTimeout and leaves the stream as it
// was: what comes later is read whole.
TEST(ClientTest, ReadUntilTimesOutOnAQuietStreamAndReadsOnAfterwards) {
  TestServer server([](TestServer::Conn& c, const SeenRequest&) {
    WriteAllTo(c.fd, "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n");
    c.reader->ReadSome();  // quiet until the client writes
    WriteAllTo(c.fd, "LATE");
    return false;
  });
  auto client = ConnectTo(server);
  auto h = client->Hijack(Get("/attach"));
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  RawStream& s = *h->stream;
  char b[16];
  auto quiet = s.ReadUntil(std::span<char>(b, sizeof b), std::chrono::steady_clock::now() + 100ms);
  ASSERT_FALSE(quiet.ok());
  EXPECT_EQ(quiet.error().code(), ErrorCode::kTimeout) << quiet.error().ToString();
  ASSERT_TRUE(s.Write("go").ok());
  EXPECT_EQ(ReadN(s, 4), "LATE");
}

TEST(ClientTest, HijackRefusedReturnsTheResponse) {
  TestServer server([](TestServer::Conn& c, const SeenRequest&) {
    return WriteAllTo(c.fd,
                      "HTTP/1.1 409 Conflict\r\nContent-Length: 30\r\n\r\n"
                      "{\"message\":\"container paused\"}");
  });
  auto client = ConnectTo(server);
  auto h = client->Hijack(Get("/exec/x/start"));
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  EXPECT_EQ(h->response.status, 409);
  EXPECT_EQ(h->response.body, "{\"message\":\"container paused\"}");
  EXPECT_FALSE(h->stream);
}

TEST(ClientTest, SilentServerTimesOut) {
  TestServer server([](TestServer::Conn&, const SeenRequest&) { return true; });  // no answer
  auto client = ConnectTo(server);
  Request req = Get("/_ping");
  req.timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  auto res = client->Send(req);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kTimeout) << res.error().ToString();
  EXPECT_GE(took, 250ms);
  // The 300 ms timeout fired: 0.32 s at most on a loaded 2-core host (load average 17-19), 16x.
  EXPECT_LT(took, 5s);
  EXPECT_NE(res.error().message().find("/_ping"), std::string::npos);

  // The client-wide default applies when the request sets none.
  ClientOptions o;
  o.request_timeout = 200ms;
  auto client2 = ConnectTo(server, o);
  EXPECT_EQ(client2->Send(Get("/x")).error().code(), ErrorCode::kTimeout);
}

TEST(ClientTest, MissingSocketIsUnavailableAtOnce) {
  auto ep = ParseEndpoint("unix:///tmp/agvisor-no-such-dir/docker.sock");
  ASSERT_TRUE(ep.ok());
  auto client = Client::Connect(*ep);
  ASSERT_TRUE(client.ok());  // nothing is connected before the first request
  auto start = std::chrono::steady_clock::now();
  auto res = (*client)->Send(Get("/_ping"));
  // No retry loop: under 1 ms on a loaded host (1 s only says "not waiting for anything").
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kUnavailable);
  const std::string& m = res.error().message();
  EXPECT_NE(m.find("unix:///tmp/agvisor-no-such-dir/docker.sock"), std::string::npos) << m;
  EXPECT_NE(m.find("is dockerd running?"), std::string::npos) << m;
}

TEST(ClientTest, NobodyListeningIsConnectionRefused) {
  char templ[] = "/tmp/agvisor-http-test-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  std::string path = std::string(templ) + "/dead.sock";
  {
    // A socket file whose server is gone, as a stopped dockerd leaves behind.
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
  }
  auto client = Client::Connect(*ParseEndpoint("unix://" + path));
  ASSERT_TRUE(client.ok());
  auto res = (*client)->Send(Get("/_ping"));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(res.error().message().find("connection refused"), std::string::npos)
      << res.error().message();
  EXPECT_EQ(res.error().sys_errno(), ECONNREFUSED);
  ::unlink(path.c_str());
  ::rmdir(templ);
}

TEST(ClientTest, TcpRefusedNamesTheEndpoint) {
  // Bind a loopback port, then close it: nothing listens there.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  std::string url = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto client = Client::Connect(*ParseEndpoint(url));
  ASSERT_TRUE(client.ok());
  auto res = (*client)->Send(Get("/_ping"));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(res.error().message().find(url), std::string::npos) << res.error().message();
}

TEST(ClientTest, ConnectRefusesHandBuiltBadEndpoints) {
  Endpoint ep;
  ep.kind = Endpoint::Kind::kSsh;
  ep.host = "-oProxyCommand=touch /tmp/pwned";
  EXPECT_EQ(Client::Connect(ep).error().code(), ErrorCode::kInvalidArgument);
  ep.kind = Endpoint::Kind::kUnix;
  ep.path = "relative.sock";
  EXPECT_EQ(Client::Connect(ep).error().code(), ErrorCode::kInvalidArgument);
}

int OpenFdCount() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

TEST(ClientTest, NoFdLeaks) {
  int before = OpenFdCount();
  {
    TestServer server(UpgradeAndEcho);
    auto client = ConnectTo(server);
    for (int i = 0; i < 3; ++i) {
      auto h = client->Hijack(Get("/attach"));
      ASSERT_TRUE(h.ok() && h->stream);
      EXPECT_EQ(ReadN(*h->stream, 5), "HELLO");
      if (i == 1) h->stream->Close();
    }
    TestServer plain(
        [](TestServer::Conn& c, const SeenRequest&) { return WriteAllTo(c.fd, OkResponse("x")); });
    auto client2 = ConnectTo(plain);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(client2->Send(Get("/x")).ok());
  }
  EXPECT_EQ(OpenFdCount(), before);
}

}  // namespace
}  // namespace agvisor::http
