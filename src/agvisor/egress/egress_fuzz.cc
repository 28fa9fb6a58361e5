// libFuzzer target for the egress enforcer's parsers (docs/egress.md): the bytes a hostile
// sandbox can send as a connection's first bytes or as a DNS message. Built with
// -DAGVISOR_FUZZ=ON and clang; `egress_fuzz -max_total_time=N`.
//
// Besides "no crash, no sanitizer report", it checks what the sniffers and the answerer promise:
//   - a sniffer's verdict does not change once given: every longer input gives the same one,
//     and the resumable sniffers (ClientHelloSniffer, HttpRequestStream) fed the same bytes in
//     pieces give what they give for the whole;
//   - HttpRequestStream's steps cover the input in order, never past its end;
//   - a name that comes out of a sniffer is normalised (normalising it again changes nothing);
//   - the DNS answerer never allows a name the policy refuses, and every answer it gives to a
//     readable question parses as the answer to that question.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

#include "agvisor/egress/dns.h"
#include "agvisor/egress/sniff.h"

namespace agvisor::egress {
namespace {

[[noreturn]] void Violated(const char* what) {
  std::fprintf(stderr, "egress_fuzz: property violated: %s\n", what);
  std::abort();
}

void CheckName(const Target& t) {
  if (t.literal) return;
  auto again = NormalizeHostName(t.host);
  if (!again.ok() || *again != t.host) Violated("a sniffed name is not normalised");
}

void FuzzTls(std::span<const std::uint8_t> in) {
  ClientHelloSniff whole = SniffClientHello(in);
  // The first prefix with a verdict, and every prefix after it, must agree with the whole.
  for (std::size_t n = 0; n <= in.size(); n += 1 + n / 8) {
    ClientHelloSniff part = SniffClientHello(in.first(n));
    if (part.status == SniffStatus::kNeedMore) continue;
    if (part.status != whole.status || part.server_name != whole.server_name) {
      Violated("a ClientHello verdict changed when more bytes came");
    }
  }
  ClientHelloSniffer pieces;
  for (std::size_t n = 0; n <= in.size(); n += 1 + n / 5) (void)pieces.Feed(in.first(n));
  const ClientHelloSniff& resumed = pieces.Feed(in);
  if (resumed.status != whole.status || resumed.server_name != whole.server_name) {
    Violated("ClientHelloSniffer fed in pieces disagrees with the whole");
  }
  if (whole.status == SniffStatus::kDone && whole.has_server_name) {
    if (auto t = TargetFromHost(whole.server_name, 443); t.ok()) CheckName(*t);
  }
}

// The steps of an HttpRequestStream over `in`, fed `piece` bytes at a time as the proxy feeds
// it (what no step covered is passed again with the next piece): "H<bytes>:<host>" per head,
// "B<bytes>" per body run, "R" at a refusal.
std::string StreamSteps(std::string_view in, std::size_t piece) {
  HttpRequestStream stream;
  std::string out, pending;
  std::size_t body = 0;
  for (std::size_t at = 0; at < in.size(); at += piece) {
    pending.append(in.substr(at, piece));
    while (true) {
      HttpRequestStream::Step step = stream.Next(pending);
      if (step.kind == HttpRequestStream::Step::Kind::kNeedMore) break;
      if (step.kind == HttpRequestStream::Step::Kind::kRefused) return out + "R";
      if (step.bytes == 0 || step.bytes > pending.size())
        Violated("a step covers no or too many bytes");
      if (step.kind == HttpRequestStream::Step::Kind::kBody) {
        body += step.bytes;
      } else {
        CheckName(step.request.target);
        if (step.request.head_bytes != step.bytes) Violated("head_bytes differs from the step");
        if (body) out += "B" + std::to_string(body);
        body = 0;
        out += "H" + std::to_string(step.bytes) + ":" + step.request.target.host;
      }
      pending.erase(0, step.bytes);
    }
  }
  if (body) out += "B" + std::to_string(body);
  return out;
}

void FuzzHttp(std::string_view in) {
  HttpRequestSniff whole = SniffHttpRequest(in);
  for (std::size_t n = 0; n <= in.size(); n += 1 + n / 8) {
    HttpRequestSniff part = SniffHttpRequest(in.substr(0, n));
    if (part.status == SniffStatus::kNeedMore) continue;
    if (part.status != whole.status || !(part.target == whole.target) ||
        part.head_bytes != whole.head_bytes) {
      Violated("an HTTP verdict changed when more bytes came");
    }
  }
  if (whole.status == SniffStatus::kDone) {
    CheckName(whole.target);
    if (whole.head_bytes == 0 || whole.head_bytes > in.size()) Violated("bad head_bytes");
  }
  if (in.empty()) return;
  const std::string all = StreamSteps(in, in.size());
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, 1 + in.size() / 3}) {
    if (StreamSteps(in, piece) != all) Violated("HttpRequestStream fed in pieces disagrees");
  }
}

void FuzzDns(std::span<const std::uint8_t> in) {
  static const EgressPolicy policy =
      *EgressPolicy::Create(std::vector<std::string>{"pypi.org", "*.pythonhosted.org"}, {}, {});
  DnsAnswer a = AnswerDnsQuery(in, policy, IpAddress::V4(10, 0, 0, 1), std::nullopt);
  auto q = ParseDnsQuery(in);
  if (a.allowed) {
    if (!q.ok() || !policy.DecideName(a.name).allowed) Violated("answered a refused name");
    auto qtype = static_cast<DnsType>(q->qtype);
    if (qtype == DnsType::kA || qtype == DnsType::kAaaa) {
      auto r = ParseDnsResponse(a.response, q->id, q->name, qtype);
      if (!r.ok()) Violated("an allowed answer does not parse");
    }
  }
  (void)ParseDnsResponse(in, 0, "pypi.org", DnsType::kA);
}

}  // namespace
}  // namespace agvisor::egress

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 8192) return 0;  // the prefix checks are quadratic-ish; the caps are 16 KiB anyway
  std::span<const std::uint8_t> in(data, size);
  agvisor::egress::FuzzTls(in);
  agvisor::egress::FuzzHttp(std::string_view(reinterpret_cast<const char*>(data), size));
  agvisor::egress::FuzzDns(in);
  return 0;
}
