#include "agvisor/kube/websocket.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstring>

namespace agvisor::kube {
namespace {

constexpr std::string_view kAcceptGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

Error Broken(std::string_view why) {
  return Error::Unavailable("WebSocket from the API server: " + std::string(why));
}

bool IsControl(std::uint8_t op) { return op >= 8; }

}  // namespace

std::string EncodeClientFrame(WsOpcode opcode, std::string_view payload,
                              std::array<std::uint8_t, 4> mask) {
  std::string out;
  out.reserve(payload.size() + 14);
  out.push_back(static_cast<char>(0x80 | static_cast<std::uint8_t>(opcode)));
  const std::uint64_t n = payload.size();
  if (n < 126) {
    out.push_back(static_cast<char>(0x80 | n));
  } else if (n <= 0xffff) {
    out.push_back(static_cast<char>(0x80 | 126));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(n & 0xff));
  } else {
    out.push_back(static_cast<char>(0x80 | 127));
    for (int shift = 56; shift >= 0; shift -= 8)
      out.push_back(static_cast<char>((n >> shift) & 0xff));
  }
  for (auto m : mask) out.push_back(static_cast<char>(m));
  const std::size_t start = out.size();
  out.append(payload);
  for (std::size_t i = 0; i < payload.size(); ++i) {
    out[start + i] = static_cast<char>(static_cast<std::uint8_t>(out[start + i]) ^ mask[i & 3]);
  }
  return out;
}

Result<std::optional<WsMessage>> WsDecoder::Next() {
  for (;;) {
    const std::size_t avail = buf_.size() - pos_;
    if (avail < 2) return std::optional<WsMessage>();
    const auto* p = reinterpret_cast<const std::uint8_t*>(buf_.data() + pos_);
    const bool fin = (p[0] & 0x80) != 0;
    if ((p[0] & 0x70) != 0) return Broken("reserved bits set (no extension was negotiated)");
    const std::uint8_t op = p[0] & 0x0f;
    if (op != 0 && op != 1 && op != 2 && op != 8 && op != 9 && op != 10) {
      return Broken("unknown opcode " + std::to_string(op));
    }
    if ((p[1] & 0x80) != 0) return Broken("a masked frame (servers must not mask)");
    std::uint64_t len = p[1] & 0x7f;
    std::size_t header = 2;
    if (len == 126) {
      if (avail < 4) return std::optional<WsMessage>();
      len = (std::uint64_t{p[2]} << 8) | p[3];
      header = 4;
    } else if (len == 127) {
      if (avail < 10) return std::optional<WsMessage>();
      len = 0;
      for (int i = 0; i < 8; ++i) len = (len << 8) | p[2 + i];
      header = 10;
    }
    if (IsControl(op) && (!fin || len > 125)) {
      return Broken("a fragmented or over-long control frame");
    }
    const std::size_t so_far = IsControl(op) ? 0 : message_.size();
    if (len > max_message_ || so_far + len > max_message_) {
      return Broken("a message longer than " + std::to_string(max_message_) + " bytes");
    }
    if (op == 0 && !in_message_) return Broken("a continuation frame without a message");
    if ((op == 1 || op == 2) && in_message_) return Broken("a new message inside a fragmented one");
    if (avail < header + len) return std::optional<WsMessage>();
    std::string_view payload(buf_.data() + pos_ + header, static_cast<std::size_t>(len));
    pos_ += header + static_cast<std::size_t>(len);
    // Keep the buffer from growing: drop what was consumed once it is most of it.
    if (pos_ > 64 * 1024 && pos_ * 2 > buf_.size()) {
      // `payload` points into buf_: copy it out first.
      std::string copy(payload);
      buf_.erase(0, pos_);
      pos_ = 0;
      if (IsControl(op))
        return std::optional<WsMessage>(WsMessage{static_cast<WsOpcode>(op), copy});
      message_.append(copy);
    } else {
      if (IsControl(op)) {
        return std::optional<WsMessage>(WsMessage{static_cast<WsOpcode>(op), std::string(payload)});
      }
      message_.append(payload);
    }
    if (op != 0) message_opcode_ = static_cast<WsOpcode>(op);
    if (!fin) {
      in_message_ = true;
      continue;
    }
    in_message_ = false;
    WsMessage m{message_opcode_, std::move(message_)};
    message_.clear();
    if (pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
    return std::optional<WsMessage>(std::move(m));
  }
}

std::string EncodeBase64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string NewWebSocketKey() {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof raw) != 1) {
    // The key only has to differ between connections; it guards nothing.
    for (std::size_t i = 0; i < sizeof raw; ++i) raw[i] = static_cast<unsigned char>(i * 37 + 11);
  }
  return EncodeBase64(std::string_view(reinterpret_cast<const char*>(raw), sizeof raw));
}

std::string WebSocketAccept(std::string_view key) {
  std::string text(key);
  text += kAcceptGuid;
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return EncodeBase64(std::string_view(reinterpret_cast<const char*>(digest), sizeof digest));
}

std::string EncodeChannelMessage(KubeStream stream, std::string_view data) {
  std::string out;
  out.reserve(data.size() + 1);
  out.push_back(static_cast<char>(stream));
  out.append(data);
  return out;
}

std::string EncodeCloseStdin() {
  return std::string{static_cast<char>(KubeStream::kClose), static_cast<char>(KubeStream::kStdin)};
}

Result<ChannelMessage> DecodeChannelMessage(std::string_view payload) {
  if (payload.empty()) return Broken("an empty channel message");
  const auto stream = static_cast<std::uint8_t>(payload[0]);
  // Servers may open each stream with an empty message: harmless on any stream.
  if (payload.size() == 1) return ChannelMessage{static_cast<KubeStream>(stream), {}};
  if (stream != 1 && stream != 2 && stream != 3) {
    return Broken("a message on stream " + std::to_string(stream) +
                  " (a server sends only on 1 stdout, 2 stderr and 3 error)");
  }
  return ChannelMessage{static_cast<KubeStream>(stream), payload.substr(1)};
}

}  // namespace agvisor::kube
