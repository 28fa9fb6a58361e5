// kube::ExecStream over an in-memory connection: what a server sends (WebSocket frames carrying
// the channel protocol) read back in pieces of every size, so each frame is split at every point.
// Pins how the end of an exec is reported: an exit code (Success, NonZeroExitCode) is an end of
// file plus ExitCode(); any other Failure on the error stream (kubelet's InternalError for an exec
// the runtime could not start) is an error carrying the Status's message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "agvisor/http/client.h"
#include "agvisor/kube/client.h"
#include "agvisor/kube/websocket.h"

namespace agvisor::kube {
namespace {

using ::testing::HasSubstr;

// A connection whose reads give `bytes` at most `chunk` at a time, then end of file; writes are
// kept.
class ScriptedStream : public http::RawStream {
 public:
  ScriptedStream(std::string bytes, std::size_t chunk, std::string* written)
      : bytes_(std::move(bytes)), chunk_(chunk), written_(written) {}
  Result<std::size_t> ReadUntil(std::span<char> buf,
                                std::chrono::steady_clock::time_point) override {
    if (closed_) return std::size_t{0};
    const std::size_t n = std::min({buf.size(), chunk_, bytes_.size() - pos_});
    std::memcpy(buf.data(), bytes_.data() + pos_, n);
    pos_ += n;
    return n;
  }
  Result<void> Write(std::string_view data) override {
    if (closed_) return Error::Unavailable("closed");
    written_->append(data);
    return Ok();
  }
  Result<void> CloseWrite() override { return Ok(); }
  void Close() override { closed_ = true; }

 private:
  std::string bytes_;
  std::size_t chunk_;
  std::size_t pos_ = 0;
  std::string* written_;
  bool closed_ = false;
};

// A server frame: FIN, not masked, lengths up to 64 KiB.
std::string Frame(WsOpcode opcode, std::string_view payload) {
  EXPECT_LE(payload.size(), 0xffffu);
  std::string out;
  out.push_back(static_cast<char>(0x80 | static_cast<int>(opcode)));
  if (payload.size() < 126) {
    out.push_back(static_cast<char>(payload.size()));
  } else {
    out.push_back(static_cast<char>(126));
    out.push_back(static_cast<char>(payload.size() >> 8));
    out.push_back(static_cast<char>(payload.size() & 0xff));
  }
  out.append(payload);
  return out;
}

std::string Channel(KubeStream stream, std::string_view data) {
  return Frame(WsOpcode::kBinary, EncodeChannelMessage(stream, data));
}

const std::string kNormalClose = Frame(WsOpcode::kClose, std::string("\x03\xe8", 2));

// What kubelet sends for an exec the container runtime could not start (the double does the same:
// tests/kube/kube_double.py), as one message on the error stream.
std::string InternalErrorFrames() {
  const std::string status =
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)"
      R"("message":"Internal error occurred: error executing command in container: OCI runtime )"
      R"(exec failed: exec failed: cannot exec in a stopped state: unknown",)"
      R"("reason":"InternalError","details":{"causes":[{"message":"error executing command )"
      R"(in container: OCI runtime exec failed"}]},"code":500})";
  // Longer than a short frame: split over three messages, as a server may send it.
  std::string out;
  for (std::size_t i = 0; i < status.size(); i += 100) {
    out += Channel(KubeStream::kError, status.substr(i, 100));
  }
  return out;
}

struct Read {
  Result<std::size_t> end = std::size_t{0};  // the last ReadStdout's answer
  std::string out, err;
  std::unique_ptr<ExecStream> stream;
};

// Reads stdout until the end or an error, in reads of `chunk` bytes from the connection.
Read ReadAll(const std::string& bytes, std::size_t chunk) {
  static std::string written;
  Read r;
  r.stream = std::make_unique<ExecStream>(std::make_unique<ScriptedStream>(bytes, chunk, &written),
                                          std::string(kChannelV5));
  char buf[7];
  for (;;) {
    r.end = r.stream->ReadStdout(std::span<char>(buf, sizeof buf),
                                 [&](std::string_view b) { r.err.append(b); });
    if (!r.end.ok() || *r.end == 0) return r;
    r.out.append(buf, *r.end);
  }
}

TEST(ExecStreamTest, AFailureStatusAtStartIsAnErrorWithTheStatusMessage) {
  // With the close handshake, and with a connection that just ends.
  for (const std::string& bytes :
       {Channel(KubeStream::kStdout, "") + Channel(KubeStream::kStderr, "") +
            InternalErrorFrames() + kNormalClose,
        InternalErrorFrames()}) {
    for (std::size_t chunk = 1; chunk <= bytes.size(); ++chunk) {
      SCOPED_TRACE("reads of " + std::to_string(chunk) + " bytes");
      Read r = ReadAll(bytes, chunk);
      ASSERT_FALSE(r.end.ok());
      EXPECT_EQ(r.end.error().code(), ErrorCode::kUnavailable);
      EXPECT_THAT(r.end.error().message(),
                  HasSubstr("exec failed: Internal error occurred: error executing command in "
                            "container: OCI runtime exec failed"));
      EXPECT_EQ(r.out, "");
      // The end was reported once: later reads are ends of file; ExitCode says the same.
      char c;
      auto again = r.stream->ReadStdout(std::span<char>(&c, 1), nullptr);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(*again, 0u);
      ASSERT_FALSE(r.stream->ExitCode().ok());
      EXPECT_THAT(r.stream->ExitCode().error().message(), HasSubstr("Internal error occurred"));
    }
  }
}

TEST(ExecStreamTest, AnExitCodeIsAnEndOfFileAndTheCode) {
  const std::string nonzero =
      Channel(KubeStream::kStdout, "out\n") + Channel(KubeStream::kStderr, "err\n") +
      Channel(KubeStream::kError,
              R"({"status":"Failure","reason":"NonZeroExitCode","message":"exit code 3",)"
              R"("details":{"causes":[{"reason":"ExitCode","message":"3"}]}})") +
      kNormalClose;
  const std::string success = Channel(KubeStream::kStdout, "hello, world\n") +
                              Channel(KubeStream::kError, R"({"status":"Success"})") + kNormalClose;
  for (std::size_t chunk = 1; chunk <= nonzero.size(); ++chunk) {
    SCOPED_TRACE("reads of " + std::to_string(chunk) + " bytes");
    Read r = ReadAll(nonzero, chunk);
    ASSERT_TRUE(r.end.ok()) << r.end.error().ToString();
    EXPECT_EQ(r.out, "out\n");
    EXPECT_EQ(r.err, "err\n");
    ASSERT_TRUE(r.stream->ExitCode().ok());
    EXPECT_EQ(*r.stream->ExitCode(), 3);
    if (chunk > success.size()) continue;
    r = ReadAll(success, chunk);
    ASSERT_TRUE(r.end.ok()) << r.end.error().ToString();
    EXPECT_EQ(r.out, "hello, world\n");
    ASSERT_TRUE(r.stream->ExitCode().ok());
    EXPECT_EQ(*r.stream->ExitCode(), 0);
  }
}

TEST(ExecStreamTest, AStreamEndingWithoutAStatusIsAnEndOfFileWithoutACode) {
  // The pod went away: the output read so far, then no exit code.
  Read r = ReadAll(Channel(KubeStream::kStdout, "partial"), 3);
  ASSERT_TRUE(r.end.ok()) << r.end.error().ToString();
  EXPECT_EQ(r.out, "partial");
  ASSERT_FALSE(r.stream->ExitCode().ok());
  EXPECT_THAT(r.stream->ExitCode().error().message(), HasSubstr("without an exit status"));
}

}  // namespace
}  // namespace agvisor::kube
