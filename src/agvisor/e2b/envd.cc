// envd's HTTP side: the Connect framing of the Process and Filesystem services (connect.h,
// envd_service.h) and the /files routes, over the request mount.cc authenticated.
#include "agvisor/e2b/envd.h"

#include "agvisor/e2b/connect.h"
#include "agvisor/e2b/envd_messages.h"
#include "agvisor/e2b/envd_service.h"
#include "agvisor/e2b/errors.h"

namespace agvisor::e2b {
namespace {

using server::HttpResponse;

// Files one multipart upload may carry.
constexpr std::size_t kMaxUploadParts = 1000;

// What envd keeps between calls, for the daemon's one E2B mount.
envd::EnvdState& State() {
  static envd::EnvdState* state = new envd::EnvdState();
  return *state;
}

// The request body, at most `max` bytes. Errors: kResourceExhausted (longer), the stream's.
Result<std::string> ReadBody(const server::HttpRequest& req, server::HttpStream& stream,
                             std::size_t max) {
  std::string body = req.body;
  char buf[64 << 10];
  while (true) {
    auto n = AGVISOR_TRY(stream.ReadBody(buf));
    if (n == 0) break;
    if (body.size() + n > max) {
      return Error::ResourceExhausted("request body: longer than " + std::to_string(max) +
                                      " bytes");
    }
    body.append(buf, n);
  }
  return body;
}

HttpResponse ConnectError(const connect::RpcError& e) {
  return {connect::HttpStatusFor(e.code), "application/json", connect::ErrorBody(e), {}};
}

HttpResponse ServeUnary(const envd::Caller& c, const server::HttpRequest& req,
                        server::HttpStream& stream, std::string_view method) {
  auto checked = connect::CheckRequestHeaders(connect::CallKind::kUnary, req.header("content-type"),
                                              req.header("content-encoding"),
                                              req.header("connect-protocol-version"));
  if (!checked.ok()) return ConnectError(connect::FromError(checked.error()));
  auto body = ReadBody(req, stream, envd::kMaxMessageBytes);
  if (!body.ok()) return ConnectError(connect::FromError(body.error()));
  auto answer = envd::CallUnary(c, method, *body);
  if (answer.error) return ConnectError(*answer.error);
  return {200, "application/json", std::move(answer.json), {}};
}

HttpResponse ServeStream(const envd::Caller& c, const server::HttpRequest& req,
                         server::HttpStream& stream, std::string_view method) {
  auto checked = connect::CheckRequestHeaders(
      connect::CallKind::kServerStream, req.header("content-type"),
      req.header("connect-content-encoding"), req.header("connect-protocol-version"));
  if (!checked.ok()) {
    // Not a Connect stream client: a plain error it can read.
    return ConnectError(connect::FromError(checked.error()));
  }
  // From here every error is the stream's last envelope (the SDK reads a stream's error there).
  envd::StreamOptions options;
  auto failure = [&]() -> std::optional<Error> {
    auto timeout = connect::ParseTimeoutHeader(req.header("connect-timeout-ms"));
    if (!timeout.ok()) return timeout.error();
    options.deadline = *timeout;
    auto keepalive = connect::ParseKeepaliveHeader(req.header("keepalive-ping-interval"));
    if (!keepalive.ok()) return keepalive.error();
    if (*keepalive) options.keepalive = **keepalive;
    return std::nullopt;
  }();
  auto body = ReadBody(req, stream, envd::kMaxMessageBytes + connect::kEnvelopeHeaderBytes);
  if (!stream.BeginBody(200, connect::kStreamContentType).ok()) return {499, "", "", {}};
  auto write = [&stream](std::string_view bytes) { return stream.WriteBody(bytes); };
  if (!failure && !body.ok()) failure = body.error();
  std::string_view message;
  if (!failure) {
    auto one = connect::SingleEnvelope(*body, envd::kMaxMessageBytes);
    if (one.ok()) {
      message = *one;
    } else {
      failure = one.error();
    }
  }
  if (failure) {
    (void)write(connect::EndStream(connect::FromError(*failure)));
    return {200, "", "", {}};
  }
  envd::CallStream(c, method, message, options, write);
  return {200, "", "", {}};
}

std::string Query(const api::RouteMatch& m, const std::string& key) {
  auto it = m.query.find(key);
  return it == m.query.end() ? "" : it->second;
}

HttpResponse ServeFileRead(const envd::Caller& c, const api::RouteMatch& m,
                           server::HttpStream& stream) {
  auto path = Query(m, "path");
  if (path.empty()) return ErrorResponse(400, "path: the query parameter is required");
  bool begun = false;
  auto read = envd::ReadFileTo(
      c, path,
      [&](std::uint64_t) -> Result<void> {
        begun = true;
        return stream.BeginBody(200, "application/octet-stream");
      },
      [&stream](std::string_view bytes) { return stream.WriteBody(bytes); });
  if (read.ok()) return {200, "", "", {}};
  // After the first byte, a failure can only break the body off (server.h).
  if (begun) return {500, "", "", {}};
  return ErrorResponse(read.error());
}

HttpResponse ServeFileWrite(const envd::Caller& c, const server::HttpRequest& req,
                            const api::RouteMatch& m, server::HttpStream& stream) {
  // The body is read before any refusal: a client still sending gets the answer, not a reset.
  // The server bounds it (ServerOptions::max_body_bytes).
  auto body = ReadBody(req, stream, std::size_t{1} << 40);
  if (!body.ok()) return ErrorResponse(body.error());
  for (const auto& [name, value] : req.headers) {
    if (name.starts_with("x-metadata-")) {
      return ErrorResponse(501,
                           "file metadata (X-Metadata-* headers) is not supported by "
                           "agvisor's envd: write the file without metadata");
    }
  }
  auto encoding = req.header("content-encoding");
  if (!encoding.empty() && encoding != "identity") {
    return ErrorResponse(415, "Content-Encoding " + encoding.substr(0, 40) +
                                  " is not supported: upload without gzip");
  }
  auto type = req.header("content-type");
  std::string lower;
  for (char ch : type.substr(0, 40)) lower.push_back(static_cast<char>(std::tolower(ch)));
  auto path = Query(m, "path");
  std::vector<envd::UploadFile> files;
  if (lower.starts_with("multipart/form-data")) {
    auto parts = envd::ParseMultipart(type, *body, kMaxUploadParts);
    if (!parts.ok()) return ErrorResponse(parts.error());
    for (const auto& p : *parts) {
      files.push_back({parts->size() == 1 && !path.empty() ? path : p.filename, p.data});
    }
  } else if (lower.starts_with("application/octet-stream")) {
    if (path.empty()) return ErrorResponse(400, "path: required for an octet-stream upload");
    files.push_back({path, *body});
  } else {
    return ErrorResponse(415,
                         "Content-Type: upload multipart/form-data or "
                         "application/octet-stream");
  }
  if (files.empty()) return ErrorResponse(400, "the upload carries no file");
  auto written = envd::WriteFiles(c, files);
  if (!written.ok()) return ErrorResponse(written.error());
  return JsonResponse(envd::WriteInfoJson(*written));
}

}  // namespace

HttpResponse ServeEnvd(const EnvdCall& call, const server::HttpRequest& req,
                       const api::RouteMatch& match, server::HttpStream& stream) {
  std::string_view path(req.target);
  path = path.substr(0, path.find('?'));
  if (path == "/health") return {204, "", "", {}};
  auto handle = call.sandboxes.Get(call.sandbox);
  if (!handle.ok()) return ErrorResponse(handle.error());
  envd::Caller c{*handle, call.user.empty() ? std::string("user") : call.user, &State(), call.envs};
  if (path == "/files") {
    if (req.method == "GET") return ServeFileRead(c, match, stream);
    return ServeFileWrite(c, req, match, stream);
  }
  switch (envd::KindOf(path)) {
    case envd::MethodKind::kUnary:
      return ServeUnary(c, req, stream, path);
    case envd::MethodKind::kServerStream:
      return ServeStream(c, req, stream, path);
    case envd::MethodKind::kClientStream:
      return ConnectError({connect::Code::kUnimplemented,
                           std::string(path) + ": client streams are not served over HTTP/1.1 "
                                               "(the SDK sends input with SendInput)"});
    case envd::MethodKind::kUnknown:
      break;
  }
  return ConnectError({connect::Code::kUnimplemented, std::string(path) + ": no such envd method"});
}

}  // namespace agvisor::e2b
