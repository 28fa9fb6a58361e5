#include "agvisor/kube/client.h"

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <cstring>
#include <random>

#include "agvisor/base/subprocess.h"
#include "agvisor/http/client.h"
#include "agvisor/kube/websocket.h"

namespace agvisor::kube {
namespace {

namespace json = boost::json;

constexpr std::size_t kMaxJsonBytes = 8 << 20;
constexpr std::size_t kMaxMessageBytes = 1 << 20;
constexpr std::size_t kMaxStatusBytes = 64 << 10;
// stdin is sent in messages of at most this much (servers bound what they read at once).
constexpr std::size_t kMaxStdinMessage = 256 << 10;

// The token (or client certificate) an exec plugin prints: an ExecCredential's status.
Result<void> RunExecPlugin(Credentials& c) {
  std::vector<std::string> argv;
  // The plugin gets its environment through env(1): our Subprocess inherits ours.
  if (!c.exec_env.empty()) {
    argv.push_back("env");
    argv.insert(argv.end(), c.exec_env.begin(), c.exec_env.end());
  }
  argv.insert(argv.end(), c.exec_argv.begin(), c.exec_argv.end());
  auto out = RunCommand(argv);
  if (!out.ok()) return out.error().WithContext("kubeconfig exec plugin " + c.exec_argv.front());
  if (!out->status.success() || out->out.size() > kMaxJsonBytes) {
    return Error::Unavailable("kubeconfig exec plugin " + c.exec_argv.front() + " failed (" +
                              out->err.substr(0, 500) + ")");
  }
  boost::system::error_code ec;
  json::value v = json::parse(out->out, ec);
  const json::object* o = !ec && v.is_object() ? &v.as_object() : nullptr;
  const json::value* status = o ? o->if_contains("status") : nullptr;
  if (!status || !status->is_object()) {
    return Error::Unavailable("kubeconfig exec plugin " + c.exec_argv.front() +
                              ": its output is not an ExecCredential with a status");
  }
  auto field = [&](std::string_view k) -> std::string {
    const json::value* f = status->as_object().if_contains(k);
    return f && f->is_string() ? std::string(f->as_string()) : std::string();
  };
  c.token = field("token");
  if (c.token.empty()) {
    c.cert_pem = field("clientCertificateData");
    c.key_pem = field("clientKeyData");
  }
  if (c.token.empty() && c.cert_pem.empty()) {
    return Error::Unavailable("kubeconfig exec plugin " + c.exec_argv.front() +
                              ": its ExecCredential carries neither a token nor a certificate");
  }
  return Ok();
}

std::string PathEscape(std::string_view s) { return http::UrlEncode(s); }

}  // namespace

// ---- ExecStream ----

ExecStream::ExecStream(std::unique_ptr<http::RawStream> stream, std::string protocol)
    : stream_(std::move(stream)),
      protocol_(std::move(protocol)),
      decoder_(std::make_unique<WsDecoder>(kMaxMessageBytes)) {}

ExecStream::~ExecStream() { Close(); }

Result<void> ExecStream::SendFrame(int opcode, std::string_view payload) {
  thread_local std::mt19937 rng(std::random_device{}());
  std::array<std::uint8_t, 4> mask;
  const std::uint32_t r = rng();
  std::memcpy(mask.data(), &r, 4);
  std::string frame = EncodeClientFrame(static_cast<WsOpcode>(opcode), payload, mask);
  std::lock_guard lock(write_mu_);
  if (closed_) return Error::Unavailable("exec stream: closed");
  return stream_->Write(frame);
}

Result<std::size_t> ExecStream::ReadStdout(std::span<char> buf,
                                           const std::function<void(std::string_view)>& on_stderr) {
  for (;;) {
    if (!pending_.empty()) return pending_.Take(buf);
    if (ended_ || closed_) return std::size_t{0};
    auto next = decoder_->Next();
    if (!next.ok()) {
      ended_ = true;
      return next.error();
    }
    if (!next->has_value()) {
      char chunk[64 * 1024];
      auto n = stream_->Read(std::span<char>(chunk, sizeof chunk));
      if (!n.ok()) {
        if (closed_) return std::size_t{0};
        return Error::Unavailable("exec stream: " + n.error().message());
      }
      if (*n == 0) return End();
      decoder_->Feed(std::string_view(chunk, *n));
      continue;
    }
    WsMessage& m = **next;
    switch (m.opcode) {
      case WsOpcode::kClose:
        (void)SendFrame(static_cast<int>(WsOpcode::kClose),
                        std::string_view(m.payload).substr(0, 2));
        return End();
      case WsOpcode::kPing:
        (void)SendFrame(static_cast<int>(WsOpcode::kPong), m.payload);
        continue;
      case WsOpcode::kBinary:
        break;
      default:
        continue;  // pongs; text (the base64 protocols, never negotiated)
    }
    auto msg = DecodeChannelMessage(m.payload);
    if (!msg.ok()) {
      ended_ = true;
      return msg.error();
    }
    if (msg->data.empty()) continue;
    switch (msg->stream) {
      case KubeStream::kStdout:
        pending_.Assign(std::string(msg->data));
        continue;
      case KubeStream::kStderr:
        if (on_stderr) on_stderr(msg->data);
        continue;
      case KubeStream::kError:
        if (status_.size() + msg->data.size() > kMaxStatusBytes) {
          ended_ = true;
          return Error::Unavailable("exec stream: an exec status larger than 64 KiB");
        }
        status_.append(msg->data);
        continue;
      default:
        continue;
    }
  }
}

Result<std::size_t> ExecStream::End() {
  ended_ = true;
  if (status_.empty()) return std::size_t{0};
  // kubelet answers an exec the runtime could not start (or that failed other than by its exit
  // code) with a Failure Status that is not NonZeroExitCode, and no output: an end of file then
  // would hide why (a relay's handshake would read "the agent closed the stream").
  auto code = ExitCodeOfStatus(status_);
  if (!code.ok() && code.error().code() == ErrorCode::kUnavailable) return code.error();
  return std::size_t{0};
}

Result<void> ExecStream::Write(std::string_view data) {
  while (!data.empty()) {
    std::string_view part = data.substr(0, kMaxStdinMessage);
    data.remove_prefix(part.size());
    AGVISOR_RETURN_IF_ERROR(SendFrame(static_cast<int>(WsOpcode::kBinary),
                                      EncodeChannelMessage(KubeStream::kStdin, part)));
  }
  return Ok();
}

Result<void> ExecStream::CloseStdin() {
  if (protocol_ != kChannelV5) return Ok();
  return SendFrame(static_cast<int>(WsOpcode::kBinary), EncodeCloseStdin());
}

void ExecStream::Close() {
  {
    std::lock_guard lock(write_mu_);
    if (closed_.exchange(true)) return;
  }
  stream_->Close();
}

Result<int> ExecStream::ExitCode() const {
  if (status_.empty()) {
    return Error::Unavailable(
        "exec stream ended without an exit status (the pod or its "
        "container went away)");
  }
  return ExitCodeOfStatus(status_);
}

// ---- Client ----

Client::Client(Credentials credentials, std::shared_ptr<http::Client> http)
    : credentials_(std::move(credentials)),
      http_(std::move(http)),
      token_(credentials_.token),
      token_read_(std::chrono::steady_clock::now()) {}

Client::~Client() = default;

Result<std::shared_ptr<Client>> Client::Connect(Credentials credentials) {
  if (!credentials.exec_argv.empty() && credentials.token.empty() && credentials.cert_pem.empty()) {
    AGVISOR_RETURN_IF_ERROR(RunExecPlugin(credentials));
  }
  http::Endpoint ep;
  ep.kind = http::Endpoint::Kind::kHttps;
  ep.host = credentials.host;
  ep.port = credentials.port;
  http::ClientOptions options;
  options.tls.ca_pem = credentials.ca_pem;
  options.tls.cert_pem = credentials.cert_pem;
  options.tls.key_pem = credentials.key_pem;
  options.request_timeout = std::chrono::seconds(60);
  auto http = AGVISOR_TRY(http::Client::Connect(ep, options));
  return std::shared_ptr<Client>(new Client(std::move(credentials), std::move(http)));
}

std::string Client::Target(std::string_view path) const {
  return credentials_.path_prefix + std::string(path);
}

std::string Client::CollectionPath(Collection collection) const {
  const std::string ns = PathEscape(credentials_.namespace_);
  switch (collection) {
    case Collection::kPersistentVolumeClaims:
      return "/api/v1/namespaces/" + ns + "/persistentvolumeclaims";
    case Collection::kNetworkPolicies:
      return "/apis/networking.k8s.io/v1/namespaces/" + ns + "/networkpolicies";
  }
  return "";
}

std::string Client::BearerToken() {
  if (credentials_.token_file.empty()) return credentials_.token;
  std::lock_guard lock(token_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - token_read_ >= std::chrono::minutes(1)) {
    token_read_ = now;
    // A file that cannot be read now keeps the last token: the server says if it expired.
    if (auto t = ReadTokenFile(credentials_.token_file); t.ok() && !t->empty()) token_ = *t;
  }
  return token_;
}

Result<std::string> Client::Call(std::string_view method, const std::string& path, std::string body,
                                 std::string_view what) {
  http::Request r;
  r.method = std::string(method);
  r.target = Target(path);
  r.headers.push_back({"Accept", "application/json"});
  if (std::string token = BearerToken(); !token.empty()) {
    r.headers.push_back({"Authorization", "Bearer " + token});
  }
  if (!body.empty()) {
    r.body = std::move(body);
    r.content_type = "application/json";
  }
  r.max_body_bytes = kMaxJsonBytes;
  auto resp = http_->Send(r);
  if (!resp.ok()) return resp.error().WithContext(std::string(what));
  if (resp->status < 200 || resp->status > 299) return StatusError(resp->status, resp->body, what);
  return std::move(resp->body);
}

Result<Pod> Client::CreatePod(std::string_view manifest) {
  auto body =
      AGVISOR_TRY(Call("POST", "/api/v1/namespaces/" + PathEscape(namespace_name()) + "/pods",
                       std::string(manifest), "create pod in namespace " + namespace_name()));
  return DecodePod(body);
}

Result<Pod> Client::GetPod(std::string_view name) {
  auto body = AGVISOR_TRY(Call(
      "GET", "/api/v1/namespaces/" + PathEscape(namespace_name()) + "/pods/" + PathEscape(name), "",
      "get pod " + std::string(name)));
  return DecodePod(body);
}

Result<std::vector<Pod>> Client::ListPods(std::string_view label_selector) {
  std::string path = "/api/v1/namespaces/" + PathEscape(namespace_name()) + "/pods";
  if (!label_selector.empty()) path += "?labelSelector=" + PathEscape(label_selector);
  auto body = AGVISOR_TRY(Call("GET", path, "", "list pods in namespace " + namespace_name()));
  return DecodePodList(body);
}

Result<bool> Client::DeletePod(std::string_view name, int grace_seconds) {
  auto r = Call("DELETE",
                "/api/v1/namespaces/" + PathEscape(namespace_name()) + "/pods/" + PathEscape(name) +
                    "?gracePeriodSeconds=" + std::to_string(grace_seconds),
                "", "delete pod " + std::string(name));
  if (r.ok()) return true;
  if (r.error().code() == ErrorCode::kNotFound) return false;
  return r.error();
}

Result<std::optional<std::string>> Client::CreateObject(Collection collection,
                                                        std::string_view manifest) {
  auto r = Call(
      "POST", CollectionPath(collection), std::string(manifest),
      "create " + CollectionPath(collection).substr(CollectionPath(collection).rfind('/') + 1));
  if (r.ok()) return std::optional<std::string>(AGVISOR_TRY(DecodeObjectUid(*r)));
  if (r.error().code() == ErrorCode::kConflict) return std::optional<std::string>();
  return r.error();
}

Result<std::optional<Labels>> Client::ObjectLabels(Collection collection, std::string_view name) {
  auto r = Call("GET", CollectionPath(collection) + "/" + PathEscape(name), "",
                "get " + std::string(name));
  if (!r.ok()) {
    if (r.error().code() == ErrorCode::kNotFound) return std::optional<Labels>();
    return r.error();
  }
  return std::optional<Labels>(AGVISOR_TRY(DecodeObjectLabels(*r)));
}

Result<bool> Client::DeleteObject(Collection collection, std::string_view name,
                                  std::string_view uid) {
  // A precondition that fails is a 409 Conflict ("Precondition failed: UID in precondition").
  auto r =
      Call("DELETE", CollectionPath(collection) + "/" + PathEscape(name),
           uid.empty() ? std::string() : DeleteOptionsWithUid(uid), "delete " + std::string(name));
  if (r.ok()) return true;
  if (r.error().code() == ErrorCode::kNotFound) return false;
  if (!uid.empty() && r.error().code() == ErrorCode::kConflict) return false;
  return r.error();
}

Result<std::optional<std::string>> Client::RuntimeClassHandler(std::string_view name) {
  auto r = Call("GET", "/apis/node.k8s.io/v1/runtimeclasses/" + PathEscape(name), "",
                "get RuntimeClass " + std::string(name));
  if (!r.ok()) {
    if (r.error().code() == ErrorCode::kNotFound) return std::optional<std::string>();
    return r.error();
  }
  return std::optional<std::string>(AGVISOR_TRY(DecodeRuntimeClassHandler(*r)));
}

Result<std::string> Client::ServerVersion() {
  auto body = AGVISOR_TRY(Call("GET", "/version", "", "get the API server's version"));
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  const json::value* git = !ec && v.is_object() ? v.as_object().if_contains("gitVersion") : nullptr;
  if (!git || !git->is_string()) {
    return Error::Unavailable("the API server's /version has no gitVersion");
  }
  return std::string(git->as_string());
}

Result<AccessReview> Client::ReviewAccess(const Access& access) {
  json::object attrs;
  attrs["namespace"] = namespace_name();
  attrs["group"] = access.group;
  attrs["verb"] = access.verb;
  const auto slash = access.resource.find('/');
  attrs["resource"] = access.resource.substr(0, slash);
  if (slash != std::string::npos) attrs["subresource"] = access.resource.substr(slash + 1);
  json::object review;
  review["apiVersion"] = "authorization.k8s.io/v1";
  review["kind"] = "SelfSubjectAccessReview";
  json::object spec;
  spec["resourceAttributes"] = std::move(attrs);
  review["spec"] = std::move(spec);
  auto body = AGVISOR_TRY(Call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                               json::serialize(review),
                               "review access to " + access.verb + " " + access.resource));
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  const json::value* status = !ec && v.is_object() ? v.as_object().if_contains("status") : nullptr;
  if (!status || !status->is_object()) {
    return Error::Unavailable("the API server's SelfSubjectAccessReview has no status");
  }
  AccessReview out;
  const json::object& st = status->as_object();
  if (const json::value* a = st.if_contains("allowed"); a && a->is_bool())
    out.allowed = a->as_bool();
  for (std::string_view k : {"reason", "evaluationError"}) {
    if (const json::value* r = st.if_contains(k); r && r->is_string() && !r->as_string().empty()) {
      out.reason += (out.reason.empty() ? "" : "; ") + std::string(r->as_string()).substr(0, 500);
    }
  }
  return out;
}

Result<std::unique_ptr<ExecStream>> Client::Upgrade(const std::string& path,
                                                    std::string_view what) {
  const std::string key = NewWebSocketKey();
  http::Request r;
  r.method = "GET";
  r.target = Target(path);
  r.headers.push_back({"Upgrade", "websocket"});
  r.headers.push_back({"Sec-WebSocket-Version", "13"});
  r.headers.push_back({"Sec-WebSocket-Key", key});
  r.headers.push_back(
      {"Sec-WebSocket-Protocol", std::string(kChannelV5) + ", " + std::string(kChannelV4)});
  if (std::string token = BearerToken(); !token.empty()) {
    r.headers.push_back({"Authorization", "Bearer " + token});
  }
  r.max_body_bytes = kMaxJsonBytes;
  auto h = http_->Hijack(r);
  if (!h.ok()) return h.error().WithContext(std::string(what));
  if (!h->stream) {
    Error e = StatusError(h->response.status, h->response.body, what);
    // The API server answers an exec into a pod that does not run with 400 Bad Request.
    if (h->response.status == 400) return Error::Conflict(e.message());
    return e;
  }
  if (h->response.status != 101) {
    return Error::Unavailable(std::string(what) + ": the API server answered " +
                              std::to_string(h->response.status) + ", not a WebSocket upgrade");
  }
  if (h->response.header("Sec-WebSocket-Accept") != WebSocketAccept(key)) {
    return Error::Unavailable(std::string(what) +
                              ": the API server's Sec-WebSocket-Accept does not match the key");
  }
  std::string protocol(h->response.header("Sec-WebSocket-Protocol"));
  if (protocol != kChannelV5 && protocol != kChannelV4) {
    return Error::Unsupported(std::string(what) + ": the API server agreed to protocol '" +
                              protocol + "', not " + std::string(kChannelV5) + " or " +
                              std::string(kChannelV4));
  }
  return std::make_unique<ExecStream>(std::move(h->stream), std::move(protocol));
}

Result<std::unique_ptr<ExecStream>> Client::Exec(std::string_view pod, std::string_view container,
                                                 const std::vector<std::string>& argv) {
  std::string path = "/api/v1/namespaces/" + PathEscape(namespace_name()) + "/pods/" +
                     PathEscape(pod) + "/exec?container=" + PathEscape(container) +
                     "&stdin=true&stdout=true&stderr=true";
  for (const auto& a : argv) path += "&command=" + PathEscape(a);
  return Upgrade(path, "exec in pod " + std::string(pod));
}

Result<std::unique_ptr<ExecStream>> Client::Attach(std::string_view pod, std::string_view container,
                                                   bool stdin) {
  std::string path = "/api/v1/namespaces/" + PathEscape(namespace_name()) + "/pods/" +
                     PathEscape(pod) + "/attach?container=" + PathEscape(container) +
                     "&stdout=true&stderr=true" + (stdin ? "&stdin=true" : "");
  return Upgrade(path, "attach to pod " + std::string(pod));
}

}  // namespace agvisor::kube
