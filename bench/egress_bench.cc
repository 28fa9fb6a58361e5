// egress_bench: what the egress proxy costs on loopback (bench/README.md, "Egress proxy").
// Connection setup (an HTTP request answered by a small response) directly and through the
// proxy, bulk download throughput directly and through a CONNECT tunnel, and the process's RSS
// growth with 50 tunnels open. Printed, not asserted. Everything runs in this process on
// 127.0.0.1 (the proxy on its own thread, servers on theirs), so the figures include no sandbox.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "agvisor/api/codec.h"
#include "agvisor/egress/proxy.h"
#include "agvisor/egress/testing/loopback.h"
#include "agvisor/server/egress_log_files.h"
#include "egress_interception.h"

namespace {

using namespace agvisor::egress;
using namespace agvisor::egress::testing;
using agvisor::UniqueFd;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kDownloadBytes = 100u << 20;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

long RssKb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> value;
      return value;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

void SmallHttp(int fd) {
  ReadHead(fd);
  SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
}

// Sends kDownloadBytes after the request head (and, for a tunnel, nothing is read before).
void Download(int fd) {
  ReadHead(fd);
  std::string chunk(1 << 20, 'x');
  for (std::size_t sent = 0; sent < kDownloadBytes; sent += chunk.size()) {
    if (!SendAll(fd, chunk)) return;
  }
}

// Request to first byte of the answer, then the rest, on a new connection each time.
double TimeRequest(std::uint16_t port, const std::string& request) {
  auto start = Clock::now();
  UniqueFd c = ConnectLoopback(port);
  SendAll(c.get(), request);
  std::string r = ReadAll(c.get());
  auto took = Clock::now() - start;
  if (r.find("200 OK") == std::string::npos) std::fprintf(stderr, "bad answer: %s\n", r.c_str());
  return Ms(took);
}

double TimeDownload(std::uint16_t port, const std::string& preamble, bool tunnel) {
  UniqueFd c = ConnectLoopback(port);
  auto start = Clock::now();
  SendAll(c.get(), preamble);
  if (tunnel) ReadHead(c.get());
  SendAll(c.get(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  std::size_t got = 0;
  char buf[1 << 16];
  ssize_t n;
  while ((n = recv(c.get(), buf, sizeof buf, 0)) > 0) got += static_cast<std::size_t>(n);
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (got != kDownloadBytes) std::fprintf(stderr, "short download: %zu bytes\n", got);
  return static_cast<double>(got) / (1 << 20) / secs;
}

// The egress log's cost per record (docs/egress.md, "Log"): DecisionLog::Record alone (the
// ring), and what agvisord does for each record on the proxy's thread: the ring, the record's
// line of JSON and its append to the sandbox's file (rotating at the default 1 MiB x 5).
// A connection's allowed decision and its close record, alternately, as a busy sandbox makes.
void DecisionLogRows(int runs) {
  const int records = std::max(1000, runs * 100);
  Decision opened{.via = "tls",
                  .name = "files.pythonhosted.org",
                  .port = 443,
                  .allowed = true,
                  .reason = "allowed by *.pythonhosted.org",
                  .address = "151.101.0.223"};
  Decision closed = opened;
  closed.reason.clear();
  closed.bytes_up = 1843;
  closed.bytes_down = 5123411;
  closed.duration = std::chrono::milliseconds(812);
  auto one = [&](DecisionLog& log, int i) {
    Decision d = (i % 2 == 0) ? opened : closed;
    d.time = std::chrono::system_clock::now();
    d.sandbox = "agvisor-bench";
    if (i % 2 == 1) d.closes = static_cast<std::uint64_t>(i);
    return log.Record(std::move(d));
  };
  DecisionLog ring;
  auto start = Clock::now();
  for (int i = 0; i < records; ++i) (void)one(ring, i);
  const double ring_us = Ms(Clock::now() - start) * 1000 / records;
  char dir_template[] = "/tmp/agvisor-egress-log-bench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return;
  auto files = agvisor::server::EgressLogFiles::Open(std::string(dir_template) + "/log");
  if (!files.ok()) {
    std::fprintf(stderr, "%s\n", files.error().ToString().c_str());
    return;
  }
  DecisionLog log;
  const std::string key(64, 'b');
  start = Clock::now();
  for (int i = 0; i < records; ++i) {
    if (auto w = (*files)->Append(key, agvisor::api::DecisionJson(one(log, i))); !w.ok()) {
      std::fprintf(stderr, "%s\n", w.error().ToString().c_str());
      break;
    }
  }
  const double file_us = Ms(Clock::now() - start) * 1000 / records;
  std::filesystem::remove_all(dir_template);
  double load = 0;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0;
    std::fclose(f);
  }
  std::printf(
      "egress log, %d records (a decision and a close record, alternately), 1-min load "
      "%.2f\n",
      records, load);
  std::printf("record: ring only                    %7.2f us\n", ring_us);
  std::printf("record: ring + JSON line + file      %7.2f us\n", file_us);
}

}  // namespace

int main(int argc, char** argv) {
  // egress_bench [RUNS [BUFFER_KIB]], or egress_bench --interception [RUNS]: the brokered
  // secrets' rows only (bench/README.md, "Brokered secrets").
  if (argc > 1 && std::string_view(argv[1]) == "--interception") {
    agvisor::InterceptionRows(argc > 2 ? std::max(1, std::atoi(argv[2])) : 200);
    return 0;
  }
  int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  std::size_t buffer_kib = argc > 2 ? static_cast<std::size_t>(std::atoi(argv[2])) : 0;
  TcpServer small(SmallHttp);
  TcpServer bulk(Download);
  FakeDns dns({{"bench.test", {IpAddress::V4(127, 0, 0, 1)}}});
  ProxyOptions o;
  o.sandbox = "bench";
  o.resolver_address = IpAddress::V4(127, 0, 0, 1);
  o.resolver_port = dns.port();
  o.test_only_dialable = {*ParseCidr("127.0.0.1/32")};  // the bench's servers
  if (buffer_kib > 0) o.buffer_bytes = buffer_kib * 1024;
  std::vector<std::uint16_t> ports = {small.port(), bulk.port()};
  auto policy = EgressPolicy::Create(std::vector<std::string>{"bench.test"},
                                     std::vector<std::string>{"127.0.0.1/32"}, ports);
  auto proxy = EgressProxy::Start(o, *policy, nullptr);
  if (!proxy.ok()) {
    std::fprintf(stderr, "%s\n", proxy.error().ToString().c_str());
    return 1;
  }
  std::string host = "bench.test:" + std::to_string(small.port());
  std::string request = "GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";

  std::vector<double> direct, via;
  for (int i = 0; i < runs; ++i) {  // interleaved, so drift hits both sides alike
    direct.push_back(TimeRequest(small.port(), request));
    via.push_back(TimeRequest((*proxy)->port(), request));
  }
  std::printf("egress proxy on loopback, %d requests per side (new connection each)\n", runs);
  std::printf("%-34s %10s %10s %10s\n", "", "direct", "proxy", "added");
  for (double p : {0.5, 0.95}) {
    double d = Percentile(direct, p), v = Percentile(via, p);
    std::printf("request p%-25.0f %8.3f ms %7.3f ms %7.3f ms\n", p * 100, d, v, v - d);
  }

  std::string connect = "CONNECT bench.test:" + std::to_string(bulk.port()) + " HTTP/1.1\r\n\r\n";
  std::vector<double> direct_mbs, via_mbs;
  for (int i = 0; i < 3; ++i) {
    direct_mbs.push_back(TimeDownload(bulk.port(), "", false));
    via_mbs.push_back(TimeDownload((*proxy)->port(), connect, true));
  }
  double d = Percentile(direct_mbs, 0.5), v = Percentile(via_mbs, 0.5);
  std::printf("100 MiB download, median of 3       %7.0f MB/s %6.0f MB/s  ratio %.2f\n", d, v,
              v / d);

  long before = RssKb();
  std::vector<UniqueFd> open;
  std::string hold = "CONNECT bench.test:" + std::to_string(small.port()) + " HTTP/1.1\r\n\r\n";
  for (int i = 0; i < 50; ++i) {
    open.push_back(ConnectLoopback((*proxy)->port()));
    SendAll(open.back().get(), hold);
    ReadHead(open.back().get());
  }
  long after = RssKb();
  std::printf(
      "RSS growth with 50 open tunnels      %ld KiB (process %ld KiB; includes the test "
      "servers' 50 threads)\n",
      after - before, after);
  std::printf("open connections in the proxy: %zu\n", (*proxy)->open_connections());
  for (UniqueFd& f : open) shutdown(f.get(), SHUT_WR);
  open.clear();
  agvisor::InterceptionRows(runs);
  DecisionLogRows(runs);
  return 0;
}
