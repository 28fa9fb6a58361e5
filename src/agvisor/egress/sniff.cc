#include "agvisor/egress/sniff.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace agvisor::egress {
namespace {

// ---- TLS ----

ClientHelloSniff Refuse(std::string reason) {
  ClientHelloSniff out;
  out.status = SniffStatus::kRefused;
  out.reason = std::move(reason);
  return out;
}

// A bounds-checked reader over the reassembled handshake message.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> data) : data_(data) {}
  bool Read(std::size_t n, std::span<const std::uint8_t>* out) {
    if (data_.size() - pos_ < n) return false;
    *out = data_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool ReadInt(std::size_t width, std::uint32_t* out) {
    std::span<const std::uint8_t> b;
    if (!Read(width, &b)) return false;
    *out = 0;
    for (std::uint8_t x : b) *out = (*out << 8) | x;
    return true;
  }
  // A vector with a `width`-byte length prefix.
  bool ReadVector(std::size_t width, std::span<const std::uint8_t>* out) {
    std::uint32_t len = 0;
    return ReadInt(width, &len) && Read(len, out);
  }
  bool empty() const { return pos_ == data_.size(); }

 private:
  std::span<const std::uint8_t> data_;
  std::size_t pos_ = 0;
};

constexpr std::uint8_t kRecordHandshake = 22;
constexpr std::uint8_t kHandshakeClientHello = 1;
constexpr std::uint16_t kExtensionServerName = 0;
constexpr std::uint8_t kNameTypeHostName = 0;

ClientHelloSniff ParseClientHelloBody(std::span<const std::uint8_t> body) {
  Reader r(body);
  std::span<const std::uint8_t> skip;
  std::uint32_t version = 0;
  if (!r.ReadInt(2, &version) || !r.Read(32, &skip)) return Refuse("ClientHello too short");
  if ((version >> 8) != 3) return Refuse("ClientHello legacy_version is not 3.x");
  if (!r.ReadVector(1, &skip) || skip.size() > 32) return Refuse("bad legacy_session_id");
  if (!r.ReadVector(2, &skip) || skip.empty() || skip.size() % 2) {
    return Refuse("bad cipher_suites");
  }
  if (!r.ReadVector(1, &skip) || skip.empty()) return Refuse("bad legacy_compression_methods");
  ClientHelloSniff out;
  out.status = SniffStatus::kDone;
  if (r.empty()) return out;  // no extensions at all (SSLv3-era hello): no name
  std::span<const std::uint8_t> extensions;
  if (!r.ReadVector(2, &extensions) || !r.empty()) return Refuse("bad extensions length");
  Reader ext(extensions);
  while (!ext.empty()) {
    std::uint32_t type = 0;
    std::span<const std::uint8_t> data;
    if (!ext.ReadInt(2, &type) || !ext.ReadVector(2, &data)) return Refuse("truncated extension");
    if (type != kExtensionServerName) continue;
    if (out.has_server_name) return Refuse("two server_name extensions");
    Reader sni(data);
    std::span<const std::uint8_t> list;
    if (!sni.ReadVector(2, &list) || !sni.empty() || list.empty()) {
      return Refuse("bad server_name extension");
    }
    Reader names(list);
    while (!names.empty()) {
      std::uint32_t name_type = 0;
      std::span<const std::uint8_t> name;
      if (!names.ReadInt(1, &name_type) || !names.ReadVector(2, &name)) {
        return Refuse("bad server_name entry");
      }
      if (name_type != kNameTypeHostName) continue;
      if (out.has_server_name) return Refuse("two host_name entries in server_name");
      if (name.empty()) return Refuse("empty host_name in server_name");
      out.has_server_name = true;
      out.server_name.assign(name.begin(), name.end());
    }
  }
  return out;
}

// ---- HTTP ----

HttpRequestSniff RefuseHttp(std::string reason) {
  HttpRequestSniff out;
  out.status = SniffStatus::kRefused;
  out.reason = std::move(reason);
  return out;
}

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] + 32) : a[i];
    char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] + 32) : b[i];
    if (x != y) return false;
  }
  return true;
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether `c` may appear in a field value (RFC 9110 5.5: VCHAR, obs-text, SP and HTAB).
bool IsFieldValueChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u == '\t' || (u >= 0x20 && u != 0x7f);
}

// A head whose line ends were checked (CRLF only) and which ends with the blank line.
HttpRequestSniff ParseRequestHead(std::string_view head) {
  std::vector<std::string_view> lines;
  for (std::size_t pos = 0;;) {
    const std::size_t end = head.find("\r\n", pos);
    if (end == std::string_view::npos || end == pos) break;
    lines.push_back(head.substr(pos, end - pos));
    pos = end + 2;
  }
  HttpRequestSniff out;
  if (lines.empty()) return RefuseHttp("empty request head");
  std::string_view line = lines[0];
  std::size_t sp1 = line.find(' ');
  std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return RefuseHttp("malformed request line");
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(method)) return RefuseHttp("bad method");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return RefuseHttp("not HTTP/1.0 or 1.1");
  if (target.empty()) return RefuseHttp("empty request target");
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return RefuseHttp("control character in the request target");
    }
  }
  out.method = std::string(method);

  std::optional<std::string_view> host_header;
  bool has_length = false, has_encoding = false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::string_view h = lines[i];
    if (h[0] == ' ' || h[0] == '\t') return RefuseHttp("obsolete line folding in headers");
    std::size_t colon = h.find(':');
    if (colon == std::string_view::npos || !IsToken(h.substr(0, colon))) {
      return RefuseHttp("malformed header line (or whitespace before its colon)");
    }
    const std::string_view name = h.substr(0, colon);
    const std::string_view value = TrimOws(h.substr(colon + 1));
    for (char c : value) {
      if (!IsFieldValueChar(c)) return RefuseHttp("control character in a header value");
    }
    if (EqualsIgnoreCase(name, "host")) {
      if (host_header) return RefuseHttp("more than one Host header");
      host_header = value;
    } else if (EqualsIgnoreCase(name, "content-length")) {
      if (has_length) return RefuseHttp("more than one Content-Length header");
      has_length = true;
      if (value.empty() || value.size() > 18 ||
          value.find_first_not_of("0123456789") != std::string_view::npos) {
        return RefuseHttp("Content-Length is not a decimal number");
      }
      out.content_length = 0;
      for (char c : value) out.content_length = out.content_length * 10 + (c - '0');
    } else if (EqualsIgnoreCase(name, "transfer-encoding")) {
      if (has_encoding) return RefuseHttp("more than one Transfer-Encoding header");
      has_encoding = true;
      if (!EqualsIgnoreCase(value, "chunked")) {
        return RefuseHttp("Transfer-Encoding other than chunked");
      }
      out.chunked = true;
    } else if (EqualsIgnoreCase(name, "upgrade")) {
      out.upgrade = true;
      // HTTP/2 after a 101 carries requests (with an :authority each) the enforcer would not
      // read: the upgrade to cleartext HTTP/2 is refused (prior knowledge fails at the version).
      std::string_view rest = value;
      while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        if (EqualsIgnoreCase(TrimOws(rest.substr(0, comma)), "h2c")) {
          return RefuseHttp("Upgrade to h2c (cleartext HTTP/2 is not checked: use HTTP/1.1)");
        }
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    }
  }
  if (has_length && has_encoding) {
    return RefuseHttp("both Transfer-Encoding and Content-Length (ambiguous framing)");
  }
  if (has_encoding && version == "HTTP/1.0") {
    return RefuseHttp("Transfer-Encoding in an HTTP/1.0 request");
  }

  if (method == "CONNECT") {
    out.form = HttpRequestSniff::Form::kConnect;
    auto t = ParseAuthority(target, 0);
    if (!t.ok()) return RefuseHttp("CONNECT target: " + t.error().message());
    out.target = *t;
    out.content_length = 0;
    out.chunked = false;
  } else if (target[0] == '/' || target == "*") {
    out.form = HttpRequestSniff::Form::kOrigin;
    if (!host_header) return RefuseHttp("no Host header");
    auto t = ParseAuthority(*host_header, 80);
    if (!t.ok()) return RefuseHttp("Host header: " + t.error().message());
    out.target = *t;
    out.path = std::string(target.substr(0, target.find('?')));
  } else {
    out.form = HttpRequestSniff::Form::kAbsolute;
    constexpr std::string_view kScheme = "http://";
    if (target.size() <= kScheme.size() ||
        !EqualsIgnoreCase(target.substr(0, kScheme.size()), kScheme)) {
      return RefuseHttp("absolute URI is not http:// (use CONNECT for https)");
    }
    std::string_view rest = target.substr(kScheme.size());
    std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
    if (authority.find('@') != std::string_view::npos) {
      return RefuseHttp("user information in the URI");
    }
    auto t = ParseAuthority(authority, 80);
    if (!t.ok()) return RefuseHttp("URI: " + t.error().message());
    out.target = *t;
    const std::string_view after = rest.substr(authority.size());
    out.path =
        after.empty() || after[0] != '/' ? "/" : std::string(after.substr(0, after.find('?')));
    if (host_header) {
      auto h = ParseAuthority(*host_header, 80);
      if (!h.ok() || !(*h == *t)) {
        return RefuseHttp("the Host header does not match the URI's host");
      }
    }
  }
  out.status = SniffStatus::kDone;
  return out;
}

constexpr std::size_t kMaxChunkLineBytes = 4096;

}  // namespace

const ClientHelloSniff& ClientHelloSniffer::Feed(std::span<const std::uint8_t> bytes) {
  if (result_.status != SniffStatus::kNeedMore) return result_;
  auto too_large = [this]() -> const ClientHelloSniff& {
    result_ = Refuse("ClientHello larger than " + std::to_string(kMaxClientHelloBytes));
    return result_;
  };
  while (true) {
    if (bytes.size() < pos_ + 5) return result_;
    if (bytes[pos_] != kRecordHandshake) {
      result_ = Refuse(pos_ == 0 ? "not a TLS handshake record"
                                 : "ClientHello interrupted by a non-handshake record");
      return result_;
    }
    if (bytes[pos_ + 1] != 3) {
      result_ = Refuse("TLS record version is not 3.x");
      return result_;
    }
    std::size_t len = (std::size_t{bytes[pos_ + 3]} << 8) | bytes[pos_ + 4];
    if (len == 0) {
      result_ = Refuse("empty TLS handshake record");
      return result_;
    }
    if (len > 16384) {
      result_ = Refuse("TLS record longer than 2^14 bytes");
      return result_;
    }
    if (bytes.size() - pos_ - 5 < len) {
      // The record is incomplete; its part already here counts against the cap, so a client
      // announcing a long record cannot make us wait for more than the cap.
      if (handshake_.size() + (bytes.size() - pos_ - 5) > kMaxClientHelloBytes + 4) {
        return too_large();
      }
      return result_;
    }
    handshake_.insert(handshake_.end(), bytes.begin() + static_cast<std::ptrdiff_t>(pos_ + 5),
                      bytes.begin() + static_cast<std::ptrdiff_t>(pos_ + 5 + len));
    pos_ += 5 + len;
    if (wanted_ == 0 && handshake_.size() >= 4) {
      if (handshake_[0] != kHandshakeClientHello) {
        result_ = Refuse("first handshake is not a ClientHello");
        return result_;
      }
      wanted_ = 4 + ((std::size_t{handshake_[1]} << 16) | (std::size_t{handshake_[2]} << 8) |
                     handshake_[3]);
      if (wanted_ - 4 > kMaxClientHelloBytes) return too_large();
    }
    if (handshake_.size() > kMaxClientHelloBytes + 4) return too_large();
    if (wanted_ != 0 && handshake_.size() >= wanted_) {
      // Bytes of a next handshake message in the same record (none in a real first flight) are
      // not ours to read.
      result_ = ParseClientHelloBody(std::span(handshake_).subspan(4, wanted_ - 4));
      handshake_ = {};
      return result_;
    }
  }
}

ClientHelloSniff SniffClientHello(std::span<const std::uint8_t> bytes) {
  ClientHelloSniffer sniffer;
  return sniffer.Feed(bytes);
}

HttpRequestSniff SniffHttpRequest(std::string_view bytes) {
  HttpRequestStream stream;
  HttpRequestStream::Step step = stream.Next(bytes);
  switch (step.kind) {
    case HttpRequestStream::Step::Kind::kHead:
      return std::move(step.request);
    case HttpRequestStream::Step::Kind::kRefused:
      return RefuseHttp(std::move(step.reason));
    default:
      return {};
  }
}

HttpRequestStream::Step HttpRequestStream::Refuse(std::string reason) {
  refused_ = true;
  Step s;
  s.kind = Step::Kind::kRefused;
  s.reason = std::move(reason);
  return s;
}

HttpRequestStream::Step HttpRequestStream::Covered(Step::Kind kind, std::size_t bytes) {
  scanned_ = 0;
  lead_ = 0;
  method_scanned_ = 0;
  method_done_ = false;
  Step s;
  s.kind = kind;
  s.bytes = bytes;
  return s;
}

std::size_t HttpRequestStream::LineEnd(std::string_view in, std::size_t cap, std::string* bad) {
  std::size_t i = scanned_;
  for (; i < in.size(); ++i) {
    if (in[i] == '\n') {
      if (i == 0 || in[i - 1] != '\r') {
        *bad = "a bare LF line end (lines end with CRLF)";
        return 0;
      }
      return i + 1;
    }
    if (in[i] == '\r') {
      if (i + 1 == in.size()) break;  // its LF may come with the next bytes
      if (in[i + 1] != '\n') {
        *bad = "a bare CR in a line";
        return 0;
      }
    }
    if (i + 1 >= cap) {
      *bad = "a line longer than " + std::to_string(cap) + " bytes";
      return 0;
    }
  }
  scanned_ = i;
  return 0;
}

HttpRequestStream::Step HttpRequestStream::Next(std::string_view in) {
  if (refused_) return Refuse("the request stream was refused before");
  switch (state_) {
    case State::kHead: {
      // RFC 9112 2.2: empty lines before the request line are ignored (they count as head).
      while (in.size() >= lead_ + 2 && in[lead_] == '\r' && in[lead_ + 1] == '\n') {
        lead_ += 2;
        if (lead_ >= kMaxHttpHeadBytes) {
          return Refuse("request head larger than " + std::to_string(kMaxHttpHeadBytes));
        }
      }
      // The method is checked before the head is complete, so that a TLS record or random
      // bytes are refused at once, not after the cap.
      // (A CR where the request line would start is the start of an empty line, or a bare CR
      // that the line scan refuses: not a method's end.)
      const bool line_started = in.size() > lead_ && in[lead_] != '\r';
      for (; line_started && !method_done_ && lead_ + method_scanned_ < in.size();
           ++method_scanned_) {
        const char c = in[lead_ + method_scanned_];
        if (c == ' ' || c == '\r' || c == '\n') {
          method_done_ = true;
        } else if (!IsTokenChar(c)) {
          return Refuse("not an HTTP request (bad method)");
        }
      }
      std::string bad;
      scanned_ = std::max(scanned_, lead_);
      for (std::size_t i = scanned_; i < in.size(); ++i) {
        const char c = in[i];
        if (c == '\n') {
          if (i == lead_ || in[i - 1] != '\r') {
            return Refuse("a bare LF line end (lines end with CRLF)");
          }
          if (i >= lead_ + 3 && in[i - 2] == '\n' && in[i - 3] == '\r') {
            HttpRequestSniff r = ParseRequestHead(in.substr(lead_, i + 1 - lead_));
            if (r.status == SniffStatus::kRefused) return Refuse(std::move(r.reason));
            r.head_bytes = i + 1;
            state_ = r.form == HttpRequestSniff::Form::kConnect ? State::kHead
                     : r.chunked                                ? State::kChunkSize
                     : r.content_length > 0                     ? State::kFixedBody
                                                                : State::kHead;
            remaining_ = r.content_length;
            Step s = Covered(Step::Kind::kHead, i + 1);
            s.request = std::move(r);
            return s;
          }
        } else if (c == '\r' && i + 1 < in.size() && in[i + 1] != '\n') {
          return Refuse("a bare CR in the request head");
        }
        if (i + 1 >= kMaxHttpHeadBytes) {
          return Refuse("request head larger than " + std::to_string(kMaxHttpHeadBytes));
        }
        // A CR at the very end is scanned again once its LF may have come.
        if (!(c == '\r' && i + 1 == in.size())) scanned_ = i + 1;
      }
      return {};
    }
    case State::kFixedBody:
    case State::kChunkData: {
      if (in.empty()) return {};
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, in.size()));
      remaining_ -= n;
      if (remaining_ == 0) state_ = state_ == State::kFixedBody ? State::kHead : State::kChunkEnd;
      return Covered(Step::Kind::kBody, n);
    }
    case State::kChunkEnd: {
      if (in.size() >= 1 && in[0] != '\r') return Refuse("chunk data not followed by CRLF");
      if (in.size() < 2) return {};
      if (in[1] != '\n') return Refuse("chunk data not followed by CRLF");
      state_ = State::kChunkSize;
      return Covered(Step::Kind::kBody, 2);
    }
    case State::kChunkSize: {
      std::string bad;
      const std::size_t end = LineEnd(in, kMaxChunkLineBytes, &bad);
      if (!bad.empty()) return Refuse("chunk size line: " + bad);
      if (end == 0) return {};
      const std::string_view line = in.substr(0, end - 2);
      const std::size_t digits = line.find_first_not_of("0123456789abcdefABCDEF");
      const std::size_t n = digits == std::string_view::npos ? line.size() : digits;
      if (n == 0) return Refuse("chunk size is not hexadecimal");
      if (n > 15) return Refuse("chunk size too large");
      std::uint64_t size = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const char c = line[i];
        const int v = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        size = size * 16 + static_cast<std::uint64_t>(v);
      }
      // chunk-ext (RFC 9112 7.1.1): BWS ";" name [= value] ...; only its characters are checked.
      const std::string_view ext = TrimOws(line.substr(n));
      if (!ext.empty() && ext[0] != ';') return Refuse("malformed chunk size line");
      for (char c : ext) {
        if (!IsFieldValueChar(c)) return Refuse("control character in a chunk extension");
      }
      if (size == 0) {
        state_ = State::kTrailer;
        trailer_bytes_ = 0;
      } else {
        state_ = State::kChunkData;
        remaining_ = size;
      }
      return Covered(Step::Kind::kBody, end);
    }
    case State::kTrailer: {
      std::string bad;
      const std::size_t end = LineEnd(in, kMaxHttpHeadBytes, &bad);
      if (!bad.empty()) return Refuse("trailer: " + bad);
      if (end == 0) return {};
      trailer_bytes_ += end;
      if (trailer_bytes_ > kMaxHttpHeadBytes) {
        return Refuse("trailers larger than " + std::to_string(kMaxHttpHeadBytes));
      }
      if (end == 2) {
        state_ = State::kHead;
        return Covered(Step::Kind::kBody, end);
      }
      const std::string_view line = in.substr(0, end - 2);
      if (line[0] == ' ' || line[0] == '\t') return Refuse("obsolete line folding in trailers");
      const std::size_t colon = line.find(':');
      if (colon == std::string_view::npos || !IsToken(line.substr(0, colon))) {
        return Refuse("malformed trailer line");
      }
      for (char c : line.substr(colon + 1)) {
        if (!IsFieldValueChar(c)) return Refuse("control character in a trailer");
      }
      return Covered(Step::Kind::kBody, end);
    }
  }
  return Refuse("internal: unknown state");
}

}  // namespace agvisor::egress
