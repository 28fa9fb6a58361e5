#include "agvisor/egress/sniff.h"

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

// The head's lines, without their line ends; returns false while the blank line has not come.
bool SplitHead(std::string_view bytes, std::vector<std::string_view>* lines,
               std::size_t* head_bytes) {
  std::size_t pos = 0;
  while (true) {
    std::size_t nl = bytes.find('\n', pos);
    if (nl == std::string_view::npos) return false;
    std::string_view line = bytes.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = nl + 1;
    if (line.empty()) {
      if (lines->empty()) continue;  // RFC 9112 2.2: ignore empty lines before the request line
      *head_bytes = pos;
      return true;
    }
    lines->push_back(line);
  }
}

}  // namespace

ClientHelloSniff SniffClientHello(std::span<const std::uint8_t> bytes) {
  std::vector<std::uint8_t> handshake;
  std::size_t pos = 0;
  std::size_t wanted = 0;  // handshake bytes needed in total, once its header is known
  while (true) {
    if (bytes.size() - pos < 5) return {};
    if (bytes[pos] != kRecordHandshake) {
      return Refuse(pos == 0 ? "not a TLS handshake record"
                             : "ClientHello interrupted by a " + std::string("non-handshake "
                                                                             "record"));
    }
    if (bytes[pos + 1] != 3) return Refuse("TLS record version is not 3.x");
    std::size_t len = (std::size_t{bytes[pos + 3]} << 8) | bytes[pos + 4];
    if (len == 0) return Refuse("empty TLS handshake record");
    if (len > 16384) return Refuse("TLS record longer than 2^14 bytes");
    if (bytes.size() - pos - 5 < len) {
      // The record is incomplete; its part already here counts against the cap, so a client
      // announcing a long record cannot make us wait for more than the cap.
      if (handshake.size() + (bytes.size() - pos - 5) > kMaxClientHelloBytes + 4) {
        return Refuse("ClientHello larger than " + std::to_string(kMaxClientHelloBytes));
      }
      return {};
    }
    handshake.insert(handshake.end(), bytes.begin() + static_cast<std::ptrdiff_t>(pos + 5),
                     bytes.begin() + static_cast<std::ptrdiff_t>(pos + 5 + len));
    pos += 5 + len;
    if (wanted == 0 && handshake.size() >= 4) {
      if (handshake[0] != kHandshakeClientHello)
        return Refuse("first handshake is not a ClientHello");
      wanted =
          4 + ((std::size_t{handshake[1]} << 16) | (std::size_t{handshake[2]} << 8) | handshake[3]);
      if (wanted - 4 > kMaxClientHelloBytes) {
        return Refuse("ClientHello larger than " + std::to_string(kMaxClientHelloBytes));
      }
    }
    if (handshake.size() > kMaxClientHelloBytes + 4) {
      return Refuse("ClientHello larger than " + std::to_string(kMaxClientHelloBytes));
    }
    if (wanted != 0 && handshake.size() >= wanted) {
      // Bytes of a next handshake message in the same record (none in a real first flight) are
      // not ours to read.
      return ParseClientHelloBody(std::span(handshake).subspan(4, wanted - 4));
    }
  }
}

HttpRequestSniff SniffHttpRequest(std::string_view bytes) {
  std::vector<std::string_view> lines;
  std::size_t head_bytes = 0;
  std::string_view window = bytes.substr(0, kMaxHttpHeadBytes);
  // The request line's start is checked before the head is complete, so that a TLS record or
  // random bytes are refused at once, not after the cap.
  for (std::size_t i = 0; i < window.size() && window[i] != ' '; ++i) {
    if (!IsTokenChar(window[i]) && window[i] != '\r' && window[i] != '\n') {
      return RefuseHttp("not an HTTP request (bad method)");
    }
  }
  if (!SplitHead(window, &lines, &head_bytes)) {
    if (bytes.size() >= kMaxHttpHeadBytes) {
      return RefuseHttp("request head larger than " + std::to_string(kMaxHttpHeadBytes));
    }
    return {};
  }
  HttpRequestSniff out;
  out.head_bytes = head_bytes;
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
  out.method = std::string(method);

  std::optional<std::string_view> host_header;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::string_view h = lines[i];
    if (h[0] == ' ' || h[0] == '\t') return RefuseHttp("obsolete line folding in headers");
    std::size_t colon = h.find(':');
    if (colon == std::string_view::npos || !IsToken(h.substr(0, colon))) {
      return RefuseHttp("malformed header line");
    }
    if (EqualsIgnoreCase(h.substr(0, colon), "host")) {
      if (host_header) return RefuseHttp("more than one Host header");
      host_header = TrimOws(h.substr(colon + 1));
    }
  }

  if (method == "CONNECT") {
    out.form = HttpRequestSniff::Form::kConnect;
    auto t = ParseAuthority(target, 0);
    if (!t.ok()) return RefuseHttp("CONNECT target: " + t.error().message());
    out.target = *t;
  } else if (target[0] == '/' || target == "*") {
    out.form = HttpRequestSniff::Form::kOrigin;
    if (!host_header) return RefuseHttp("no Host header");
    auto t = ParseAuthority(*host_header, 80);
    if (!t.ok()) return RefuseHttp("Host header: " + t.error().message());
    out.target = *t;
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

}  // namespace agvisor::egress
