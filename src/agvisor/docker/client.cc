#include "agvisor/docker/client.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "agvisor/docker/codec.h"

namespace agvisor::docker {
namespace {

// http::DeadlineAfter treats anything beyond a year as "no deadline".
constexpr std::chrono::milliseconds kNoTimeout = std::chrono::hours(24 * 400);
// Image import/pull move hundreds of MB and report progress: bounded, but generously.
constexpr std::chrono::milliseconds kLongOperationTimeout = std::chrono::hours(1);
constexpr std::size_t kReadChunk = 64 * 1024;
// How long an exec's output may stay quiet before StreamExec asks whether its container and the
// exec itself still run: one inspect per quiet interval.
constexpr std::chrono::seconds kExecQuietCheck{2};

std::string Describe(std::string_view operation, std::string_view object) {
  std::string s = "docker " + std::string(operation);
  if (!object.empty()) s += " " + std::string(object);
  return s;
}

// A transport failure (no daemon, reset, timeout) with the operation and object in front.
Error TransportError(const Error& e, std::string_view operation, std::string_view object) {
  return e.WithContext(Describe(operation, object));
}

Result<void> ValidateTag(std::string_view tag) {
  const bool ok =
      !tag.empty() && tag.size() <= 128 &&
      (std::isalnum(static_cast<unsigned char>(tag.front())) || tag.front() == '_') &&
      std::all_of(tag.begin(), tag.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
      });
  if (!ok) {
    return Error::InvalidArgument("image tag \"" + std::string(tag) +
                                  "\": expected [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}");
  }
  return Ok();
}

Result<void> ValidateContainerPath(std::string_view path) {
  if (path.empty() || path.front() != '/' || path.find('\0') != std::string_view::npos) {
    return Error::InvalidArgument("container path \"" + std::string(path) + "\": must be absolute");
  }
  return Ok();
}

std::string FormatProgress(const ProgressMessage& m) {
  std::string line;
  if (!m.id.empty()) line = m.id + ": ";
  line += m.status;
  if (!m.progress.empty()) line += " " + m.progress;
  return line;
}

// The query string of a list call: `params`, then the label filters when there are any.
std::string ListQuery(std::vector<std::pair<std::string, std::string>> params,
                      const std::vector<std::string>& label_filters) {
  if (!label_filters.empty()) params.emplace_back("filters", EncodeLabelFilters(label_filters));
  return BuildQuery(params);
}

}  // namespace

// ---- ExecStream ----

ExecStream::ExecStream(std::unique_ptr<http::RawStream> raw, bool tty, std::string exec_id,
                       std::string what)
    : raw_(std::move(raw)),
      tty_(tty),
      exec_id_(std::move(exec_id)),
      what_(what.empty() ? "exec " + exec_id_ : std::move(what)) {}

ExecStream::~ExecStream() { Close(); }

Result<void> ExecStream::Write(std::string_view data) {
  auto r = raw_->Write(data);
  if (!r.ok()) return r.error().WithContext("docker write stdin of " + what_);
  return Ok();
}

Result<void> ExecStream::CloseStdin() {
  auto r = raw_->CloseWrite();
  if (!r.ok()) return r.error().WithContext("docker close stdin of " + what_);
  return Ok();
}

Result<std::size_t> ExecStream::AfterRead(Result<std::size_t> n) {
  if (!n.ok()) return n.error().WithContext("docker read output of " + what_);
  if (*n == 0) {
    eof_ = true;
    if (!tty_) {
      auto f = demux_.Finish();
      if (!f.ok()) return f.error().WithContext("docker read output of " + what_);
    }
  }
  return n;
}

Result<std::optional<StreamPiece>> ExecStream::ReadUntil(
    std::chrono::steady_clock::time_point deadline) {
  std::string buf;
  for (;;) {
    if (pending_pos_ < pending_.size()) {
      StreamPiece p = std::move(pending_[pending_pos_++]);
      if (pending_pos_ == pending_.size()) {
        pending_.clear();
        pending_pos_ = 0;
      }
      return std::optional<StreamPiece>(std::move(p));
    }
    if (eof_) return std::optional<StreamPiece>();
    buf.resize(kReadChunk);
    const std::size_t n =
        AGVISOR_TRY(AfterRead(raw_->ReadUntil(std::span<char>(buf.data(), buf.size()), deadline)));
    if (n == 0) continue;
    buf.resize(n);
    if (tty_) return std::optional<StreamPiece>(StreamPiece{StreamKind::kStdout, std::move(buf)});
    auto fed = demux_.Feed(buf, [this](StreamKind kind, std::string_view bytes) {
      // Adjacent pieces of one stream are merged: fewer, larger pieces for the caller.
      if (!pending_.empty() && pending_.back().stream == kind) {
        pending_.back().bytes.append(bytes);
      } else {
        pending_.push_back(StreamPiece{kind, std::string(bytes)});
      }
    });
    if (!fed.ok()) return fed.error().WithContext("docker read output of " + what_);
  }
}

Result<std::size_t> ExecStream::ReadStdout(std::span<char> buf,
                                           const std::function<void(std::string_view)>& on_stderr) {
  for (;;) {
    if (eof_) return std::size_t{0};
    const std::size_t n = AGVISOR_TRY(AfterRead(raw_->Read(buf)));
    if (n == 0 || tty_) return n;
    // Payload pieces are views into `buf` at or after the write position, so moving each stdout
    // piece down to the write position compacts the stream in place.
    std::size_t out = 0;
    auto fed =
        demux_.Feed(std::string_view(buf.data(), n), [&](StreamKind kind, std::string_view bytes) {
          if (kind == StreamKind::kStdout) {
            std::memmove(buf.data() + out, bytes.data(), bytes.size());
            out += bytes.size();
          } else if (kind == StreamKind::kStderr && on_stderr) {
            on_stderr(bytes);
          }
        });
    if (!fed.ok()) return fed.error().WithContext("docker read output of " + what_);
    if (out > 0) return out;
  }
}

void ExecStream::Close() {
  if (raw_) raw_->Close();
}

// ---- Client: connection ----

Client::Client(std::shared_ptr<http::Client> http, ApiVersion version, VersionInfo info)
    : http_(std::move(http)), api_version_(version), version_(std::move(info)) {}

Result<std::shared_ptr<Client>> Client::Connect(std::string_view host,
                                                http::ClientOptions options) {
  auto endpoint = http::ParseEndpoint(host);
  if (!endpoint.ok()) return endpoint.error().WithContext("docker connect");
  if (endpoint->kind == http::Endpoint::Kind::kHttps) {
    return Error::Unsupported("docker host " + endpoint->ToString() +
                              ": Docker over TLS is not supported; reach the host over "
                              "ssh://USER@HOST (for Kubernetes: kube://, docs/kubernetes.md)");
  }
  auto http = http::Client::Connect(*endpoint, std::move(options));
  if (!http.ok()) return http.error().WithContext("docker connect " + endpoint->ToString());
  return ConnectWith(std::move(*http));
}

Result<std::shared_ptr<Client>> Client::ConnectWith(std::shared_ptr<http::Client> http) {
  const std::string where = http->endpoint().ToString();
  http::Request req;
  req.target = "/version";  // unversioned: every daemon answers it
  auto resp = http->Send(req);
  if (!resp.ok()) {
    Error e = resp.error().WithContext("docker connect " + where);
    if (e.code() == ErrorCode::kUnavailable || e.code() == ErrorCode::kTimeout ||
        e.code() == ErrorCode::kNotFound) {
      // A missing socket file (ENOENT) means the same as a refused connection here.
      // The http layer may already say how to fix it; say it once.
      const bool hinted = e.message().find("dockerd") != std::string::npos;
      Error u(ErrorCode::kUnavailable,
              hinted ? e.message()
                     : e.message() +
                           " (is dockerd running there? start it (as root: `dockerd &`, or "
                           "`systemctl start docker`), or point DOCKER_HOST at a running daemon)");
      u.set_errno(e.sys_errno());
      return u;
    }
    if (e.code() == ErrorCode::kPermissionDenied) {
      Error p(ErrorCode::kPermissionDenied,
              e.message() + " (run as root or as a member of the socket's group, e.g. `docker`)");
      p.set_errno(e.sys_errno());
      return p;
    }
    return e;
  }
  if (resp->status != 200) return DecodeDaemonError(resp->status, resp->body, "connect", where);
  auto info = DecodeVersion(resp->body);
  if (!info.ok()) return info.error().WithContext("docker connect " + where);
  auto version = NegotiateApiVersion(info->api_version, info->min_api_version);
  if (!version.ok()) return version.error().WithContext("docker connect " + where);
  return std::make_shared<Client>(std::move(http), *version, std::move(*info));
}

const http::Endpoint& Client::endpoint() const { return http_->endpoint(); }

std::string Client::Path(std::string_view path) const { return VersionedPath(api_version_, path); }

Result<http::Response> Client::Call(http::Request request, std::string_view operation,
                                    std::string_view object, std::initializer_list<int> ok) {
  request.target = Path(request.target);
  auto resp = http_->Send(request);
  if (!resp.ok()) return TransportError(resp.error(), operation, object);
  const bool accepted = ok.size() == 0 ? resp->status < 400
                                       : std::find(ok.begin(), ok.end(), resp->status) != ok.end();
  if (!accepted) return DecodeDaemonError(resp->status, resp->body, operation, object);
  return std::move(*resp);
}

template <typename T>
Result<T> Client::Get(std::string target, std::string_view operation, std::string_view object,
                      Result<T> (*decode)(std::string_view body)) {
  auto resp = AGVISOR_TRY(Call({.method = "GET", .target = std::move(target)}, operation, object));
  return decode(resp.body);
}

template <typename T>
Result<T> Client::PostJson(std::string target, std::string body, std::string_view operation,
                           std::string_view object, Result<T> (*decode)(std::string_view body)) {
  http::Request req{.method = "POST",
                    .target = std::move(target),
                    .body = std::move(body),
                    .content_type = "application/json"};
  auto resp = AGVISOR_TRY(Call(std::move(req), operation, object));
  return decode(resp.body);
}

Result<void> Client::Send(std::string method, std::string target, std::string_view operation,
                          std::string_view object, std::initializer_list<int> ok) {
  AGVISOR_TRY(
      Call({.method = std::move(method), .target = std::move(target)}, operation, object, ok));
  return Ok();
}

Result<http::Response> Client::SendTar(std::string method, std::string target,
                                       const http::BodySource& source, std::string_view operation,
                                       std::string_view object) {
  http::Request req{.method = std::move(method),
                    .target = Path(target),
                    .content_type = "application/x-tar",
                    .timeout = kLongOperationTimeout};
  auto resp = http_->SendStreamingBody(req, source);
  if (!resp.ok()) return TransportError(resp.error(), operation, object);
  if (resp->status >= 400) return DecodeDaemonError(resp->status, resp->body, operation, object);
  return std::move(*resp);
}

// ---- System ----

Result<void> Client::Ping() { return Send("GET", "/_ping", "ping", endpoint().ToString()); }

Result<VersionInfo> Client::Version() { return Get("/version", "version", "", DecodeVersion); }

Result<SystemInfo> Client::Info() { return Get("/info", "info", "", DecodeInfo); }

// ---- Containers ----

Result<std::string> Client::CreateContainer(const ContainerConfig& config, std::string_view name) {
  const std::string object = name.empty() ? "from image " + config.image : std::string(name);
  if (!name.empty()) AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(name));
  auto body = EncodeContainerCreate(config, api_version_);
  if (!body.ok()) return body.error().WithContext("docker create container " + object);
  return PostJson(
      "/containers/create" + (name.empty() ? "" : BuildQuery({{"name", std::string(name)}})),
      std::move(*body), "create container", object, DecodeIdResponse);
}

Result<void> Client::StartContainer(std::string_view container) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  return Send("POST", "/containers/" + std::string(container) + "/start", "start container",
              container, {204, 304});
}

Result<ContainerInfo> Client::InspectContainer(std::string_view container) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  return Get("/containers/" + std::string(container) + "/json", "inspect container", container,
             DecodeContainerInspect);
}

Result<ContainerStats> Client::GetContainerStats(std::string_view container) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  return Get("/containers/" + std::string(container) + "/stats?stream=false", "stats of container",
             container, DecodeContainerStats);
}

Result<int> Client::WaitContainer(std::string_view container, std::string_view condition,
                                  std::chrono::milliseconds timeout) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  if (condition != "not-running" && condition != "next-exit" && condition != "removed") {
    return Error::InvalidArgument("docker wait container " + std::string(container) +
                                  ": condition \"" + std::string(condition) +
                                  "\": expected not-running, next-exit or removed");
  }
  http::Request req{.method = "POST",
                    .target = "/containers/" + std::string(container) + "/wait" +
                              BuildQuery({{"condition", std::string(condition)}})};
  req.timeout = timeout.count() > 0 ? timeout : kNoTimeout;
  auto resp = AGVISOR_TRY(Call(std::move(req), "wait container", container));
  return DecodeWaitResponse(resp.body, container);
}

Result<void> Client::KillContainer(std::string_view container, std::string_view signal) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  AGVISOR_RETURN_IF_ERROR(ValidateSignal(signal));
  return Send("POST",
              "/containers/" + std::string(container) + "/kill" +
                  BuildQuery({{"signal", std::string(signal)}}),
              "kill container", container);
}

Result<void> Client::PauseContainer(std::string_view container) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  return Send("POST", "/containers/" + std::string(container) + "/pause", "pause container",
              container);
}

Result<void> Client::UnpauseContainer(std::string_view container) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  return Send("POST", "/containers/" + std::string(container) + "/unpause", "unpause container",
              container);
}

Result<void> Client::StopContainer(std::string_view container, int timeout_s) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  if (timeout_s < 0) {
    return Error::InvalidArgument("docker stop container " + std::string(container) +
                                  ": timeout must be >= 0");
  }
  http::Request req{.method = "POST",
                    .target = "/containers/" + std::string(container) + "/stop" +
                              BuildQuery({{"t", std::to_string(timeout_s)}})};
  // The daemon answers after the container stopped: allow for the grace period.
  req.timeout = std::chrono::seconds(timeout_s) + std::chrono::seconds(60);
  AGVISOR_TRY(Call(std::move(req), "stop container", container, {204, 304}));
  return Ok();
}

Result<void> Client::RemoveContainer(std::string_view container, bool force, bool remove_volumes) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  return Send("DELETE",
              "/containers/" + std::string(container) +
                  BuildQuery({{"force", force ? "1" : "0"}, {"v", remove_volumes ? "1" : "0"}}),
              "remove container", container);
}

Result<std::vector<ContainerSummary>> Client::ListContainers(
    bool all, const std::vector<std::string>& label_filters) {
  return Get("/containers/json" + ListQuery({{"all", all ? "1" : "0"}}, label_filters),
             "list containers", "", DecodeContainerList);
}

Result<void> Client::RenameContainer(std::string_view container, std::string_view new_name) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(new_name, "new container"));
  return Send("POST",
              "/containers/" + std::string(container) + "/rename" +
                  BuildQuery({{"name", std::string(new_name)}}),
              "rename container", container);
}

Result<void> Client::PutArchive(std::string_view container, std::string_view path,
                                std::string_view tar) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  AGVISOR_RETURN_IF_ERROR(ValidateContainerPath(path));
  http::Request req{.method = "PUT",
                    .target = "/containers/" + std::string(container) + "/archive" +
                              BuildQuery({{"path", std::string(path)}})};
  req.body = std::string(tar);
  req.content_type = "application/x-tar";
  AGVISOR_TRY(Call(std::move(req), "put archive into container",
                   std::string(container) + ":" + std::string(path)));
  return Ok();
}

Result<void> Client::PutArchiveStream(std::string_view container, std::string_view path,
                                      const http::BodySource& source) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  AGVISOR_RETURN_IF_ERROR(ValidateContainerPath(path));
  const std::string object = std::string(container) + ":" + std::string(path);
  AGVISOR_TRY(SendTar("PUT",
                      "/containers/" + std::string(container) + "/archive" +
                          BuildQuery({{"path", std::string(path)}}),
                      source, "put archive into container", object));
  return Ok();
}

Result<std::string> Client::ContainerLogs(std::string_view container, bool include_stdout,
                                          bool include_stderr) {
  // The log stream is framed unless the container has a TTY; only inspect can tell on 1.41.
  const ContainerInfo info = AGVISOR_TRY(InspectContainer(container));
  http::Request req{.method = "GET",
                    .target = "/containers/" + std::string(container) + "/logs" +
                              BuildQuery({{"stdout", include_stdout ? "1" : "0"},
                                          {"stderr", include_stderr ? "1" : "0"}})};
  auto resp = AGVISOR_TRY(Call(std::move(req), "logs of container", container));
  if (info.tty) return std::move(resp.body);
  std::string out;
  Demuxer demux;
  auto fed = demux.Feed(resp.body, [&out](StreamKind, std::string_view b) { out.append(b); });
  if (fed.ok()) fed = demux.Finish();
  if (!fed.ok())
    return fed.error().WithContext("docker logs of container " + std::string(container));
  return out;
}

// ---- Exec ----

Result<std::string> Client::CreateExec(std::string_view container, const ExecConfig& config) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  auto body = EncodeExecCreate(config);
  if (!body.ok())
    return body.error().WithContext("docker create exec in " + std::string(container));
  return PostJson("/containers/" + std::string(container) + "/exec", std::move(*body),
                  "create exec in container", container, DecodeIdResponse);
}

Result<std::unique_ptr<ExecStream>> Client::StartExec(std::string_view exec_id, bool tty) {
  AGVISOR_RETURN_IF_ERROR(ValidateExecId(exec_id));
  http::Request req{.method = "POST", .target = Path("/exec/" + std::string(exec_id) + "/start")};
  req.body = EncodeExecStart(tty);
  req.content_type = "application/json";
  auto hijacked = http_->Hijack(req);
  if (!hijacked.ok()) return TransportError(hijacked.error(), "start exec", exec_id);
  if (!hijacked->stream) {
    return DecodeDaemonError(hijacked->response.status, hijacked->response.body, "start exec",
                             exec_id);
  }
  return std::make_unique<ExecStream>(std::move(hijacked->stream), tty, std::string(exec_id));
}

Result<std::unique_ptr<ExecStream>> Client::AttachContainer(std::string_view container, bool stdin,
                                                            bool stdout, bool stderr, bool tty) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  auto flag = [](bool b) { return std::string(b ? "1" : "0"); };
  http::Request req{.method = "POST",
                    .target = Path("/containers/" + std::string(container) + "/attach" +
                                   BuildQuery({{"stream", "1"},
                                               {"stdin", flag(stdin)},
                                               {"stdout", flag(stdout)},
                                               {"stderr", flag(stderr)}}))};
  auto hijacked = http_->Hijack(req);
  if (!hijacked.ok()) return TransportError(hijacked.error(), "attach container", container);
  if (!hijacked->stream) {
    return DecodeDaemonError(hijacked->response.status, hijacked->response.body, "attach container",
                             container);
  }
  return std::make_unique<ExecStream>(std::move(hijacked->stream), tty, "",
                                      "attach of container " + std::string(container));
}

Result<ExecInfo> Client::InspectExec(std::string_view exec_id) {
  AGVISOR_RETURN_IF_ERROR(ValidateExecId(exec_id));
  return Get("/exec/" + std::string(exec_id) + "/json", "inspect exec", exec_id, DecodeExecInspect);
}

Result<void> Client::ResizeExec(std::string_view exec_id, int rows, int cols) {
  AGVISOR_RETURN_IF_ERROR(ValidateExecId(exec_id));
  if (rows <= 0 || cols <= 0) {
    return Error::InvalidArgument("docker resize exec " + std::string(exec_id) +
                                  ": rows and cols must be > 0");
  }
  return Send("POST",
              "/exec/" + std::string(exec_id) + "/resize" +
                  BuildQuery({{"h", std::to_string(rows)}, {"w", std::to_string(cols)}}),
              "resize exec", exec_id);
}

Result<ExecOutput> Client::RunExec(std::string_view container, ExecConfig config,
                                   std::optional<std::string> input) {
  ExecOutput out;
  out.exit_code = AGVISOR_TRY(StreamExec(
      container, std::move(config), std::move(input), [&](StreamPiece& p) -> Result<void> {
        (p.stream == StreamKind::kStderr ? out.err : out.out).append(p.bytes);
        return Ok();
      }));
  return out;
}

Result<int> Client::StreamExec(std::string_view container, ExecConfig config,
                               std::optional<std::string> input, const PieceSink& on_output,
                               bool keep_stdin_open) {
  config.attach_stdout = true;
  config.attach_stderr = true;
  // A caller may attach stdin without input: it stays open (nothing written) until the stream
  // closes, so the process can tell that its reader went away.
  config.attach_stdin = config.attach_stdin || input.has_value();
  const std::string exec_id = AGVISOR_TRY(CreateExec(container, config));
  std::unique_ptr<ExecStream> stream = AGVISOR_TRY(StartExec(exec_id, config.tty));

  // stdin is written from its own thread: a process that writes before it has read all its
  // input would otherwise deadlock against us.
  std::thread writer;
  if (input) {
    writer = std::thread([&stream, &input, keep_stdin_open] {
      if (stream->Write(*input).ok() && !keep_stdin_open) (void)stream->CloseStdin();
      // A failed write means the process exited (or closed stdin) early: its exit code tells.
    });
  }
  Result<void> read_status = Ok();
  // dockerd does not always close an exec's streams when its container dies under it (seen with
  // runsc and stdin attached: a kill left the read blocked for good). So a quiet stream is
  // checked on: a container no longer running ends the read with kUnavailable; an exec the
  // daemon reports ended, and still quiet one interval later, ends it as finished.
  int quiet_after_exit = 0;
  for (;;) {
    auto piece = stream->ReadUntil(std::chrono::steady_clock::now() + kExecQuietCheck);
    if (!piece.ok() && piece.error().code() == ErrorCode::kTimeout) {
      auto c = InspectContainer(container);
      const bool gone = !c.ok() && c.error().code() == ErrorCode::kNotFound;
      if (gone || (c.ok() && !c->state.running)) {
        read_status = Error::Unavailable(
            "docker exec " + exec_id + " in container " + std::string(container) +
            ": the container stopped while the exec's output was open");
        break;
      }
      auto e = InspectExec(exec_id);
      if (e.ok() && !e->running && ++quiet_after_exit == 2) break;
      continue;
    }
    if (!piece.ok()) {
      read_status = std::move(piece).error();
      break;
    }
    if (!piece->has_value()) break;
    quiet_after_exit = 0;
    read_status = on_output(**piece);
    if (!read_status.ok()) break;
  }
  stream->Close();  // unblocks the writer if the process never read its stdin
  if (writer.joinable()) writer.join();
  if (!read_status.ok()) return read_status.error();

  // The daemon records the exit code before it closes the exec's streams, so one inspect
  // normally suffices; a short bounded retry covers daemons that order it the other way.
  auto delay = std::chrono::milliseconds(2);
  for (int attempt = 0;; ++attempt) {
    const ExecInfo info = AGVISOR_TRY(InspectExec(exec_id));
    if (!info.running && info.exit_code) return *info.exit_code;
    if (attempt == 12) {
      return Error::Internal("docker exec " + exec_id + " in container " + std::string(container) +
                             ": its output ended but the daemon reports no exit code");
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
}

// ---- Networks ----

Result<std::string> Client::CreateNetwork(const NetworkConfig& config) {
  AGVISOR_RETURN_IF_ERROR(ValidateVolumeName(config.name));
  if (config.bridge_name.size() > 15) {
    return Error::InvalidArgument("network " + config.name + ": bridge name '" +
                                  config.bridge_name + "' is longer than 15 characters");
  }
  return PostJson("/networks/create", EncodeNetworkCreate(config), "create network", config.name,
                  DecodeIdResponse);
}

Result<NetworkInfo> Client::InspectNetwork(std::string_view network) {
  AGVISOR_RETURN_IF_ERROR(ValidateVolumeName(network));
  return Get("/networks/" + std::string(network), "inspect network", network, DecodeNetwork);
}

Result<std::vector<NetworkInfo>> Client::ListNetworks(
    const std::vector<std::string>& label_filters) {
  return Get("/networks" + ListQuery({}, label_filters), "list networks", "", DecodeNetworkList);
}

Result<void> Client::RemoveNetwork(std::string_view network) {
  AGVISOR_RETURN_IF_ERROR(ValidateVolumeName(network));
  return Send("DELETE", "/networks/" + std::string(network), "remove network", network);
}

// ---- Volumes ----

Result<VolumeInfo> Client::CreateVolume(std::string_view name,
                                        const std::map<std::string, std::string>& labels) {
  AGVISOR_RETURN_IF_ERROR(ValidateVolumeName(name));
  return PostJson("/volumes/create", EncodeVolumeCreate(name, labels), "create volume", name,
                  DecodeVolume);
}

Result<VolumeInfo> Client::InspectVolume(std::string_view name) {
  AGVISOR_RETURN_IF_ERROR(ValidateVolumeName(name));
  return Get("/volumes/" + std::string(name), "inspect volume", name, DecodeVolume);
}

Result<void> Client::RemoveVolume(std::string_view name, bool force) {
  AGVISOR_RETURN_IF_ERROR(ValidateVolumeName(name));
  return Send("DELETE",
              "/volumes/" + std::string(name) + BuildQuery({{"force", force ? "1" : "0"}}),
              "remove volume", name);
}

Result<std::vector<VolumeInfo>> Client::VolumeSizes() {
  return Get("/system/df", "disk usage", "", DecodeDiskUsageVolumes);
}

Result<std::vector<VolumeInfo>> Client::ListVolumes(const std::vector<std::string>& label_filters) {
  return Get("/volumes" + ListQuery({}, label_filters), "list volumes", "", DecodeVolumeList);
}

Result<std::vector<std::string>> Client::ContainerEventActions(std::string_view container,
                                                               double since, double until) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  auto stamp = [](double t) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9f", t);
    return std::string(buf);
  };
  const std::string filters = "{\"container\":[\"" + std::string(container) + "\"]}";
  return Get(
      "/events" +
          BuildQuery({{"since", stamp(since)}, {"until", stamp(until)}, {"filters", filters}}),
      "list events of", container, DecodeEventActions);
}

// ---- Images ----

Result<std::vector<ImageSummary>> Client::ListImages(
    const std::vector<std::string>& label_filters) {
  return Get("/images/json" + ListQuery({}, label_filters), "list images", "", DecodeImageList);
}

Result<std::string> Client::CommitContainer(std::string_view container, std::string_view repo,
                                            std::string_view tag,
                                            const std::vector<std::string>& changes) {
  AGVISOR_RETURN_IF_ERROR(ValidateContainerRef(container));
  AGVISOR_RETURN_IF_ERROR(ValidateImageRef(repo));
  AGVISOR_RETURN_IF_ERROR(ValidateTag(tag));
  std::vector<std::pair<std::string, std::string>> q = {{"container", std::string(container)},
                                                        {"repo", std::string(repo)},
                                                        {"tag", std::string(tag)},
                                                        {"pause", "false"}};
  for (const std::string& c : changes) q.emplace_back("changes", c);
  http::Request req{.method = "POST", .target = "/commit" + BuildQuery(q)};
  req.timeout = kLongOperationTimeout;
  auto resp = AGVISOR_TRY(
      Call(std::move(req), "commit container",
           std::string(container) + " as " + std::string(repo) + ":" + std::string(tag)));
  return DecodeIdResponse(resp.body);
}

Result<ImageInfo> Client::InspectImage(std::string_view image) {
  AGVISOR_RETURN_IF_ERROR(ValidateImageRef(image));
  return Get("/images/" + std::string(image) + "/json", "inspect image", image, DecodeImageInspect);
}

Result<std::string> Client::ImportImage(std::string_view repo, std::string_view tag,
                                        const http::BodySource& tar,
                                        const ProgressCallback& progress,
                                        const std::vector<std::string>& changes) {
  AGVISOR_RETURN_IF_ERROR(ValidateImageRef(repo));
  AGVISOR_RETURN_IF_ERROR(ValidateTag(tag));
  const std::string object = std::string(repo) + ":" + std::string(tag);
  std::vector<std::pair<std::string, std::string>> q = {
      {"fromSrc", "-"}, {"repo", std::string(repo)}, {"tag", std::string(tag)}};
  for (const std::string& c : changes) q.emplace_back("changes", c);
  auto resp =
      AGVISOR_TRY(SendTar("POST", "/images/create" + BuildQuery(q), tar, "import image", object));
  ProgressDecoder decoder("import image", object);
  auto on = [&progress](const ProgressMessage& m) {
    if (progress) progress(FormatProgress(m));
  };
  AGVISOR_RETURN_IF_ERROR(decoder.Feed(resp.body, on));
  AGVISOR_RETURN_IF_ERROR(decoder.Finish(on));
  if (decoder.last_status().rfind("sha256:", 0) == 0) return decoder.last_status();
  // Older daemons may report something else last: ask for the id.
  const ImageInfo info = AGVISOR_TRY(InspectImage(object));
  return info.id;
}

Result<void> Client::LoadImage(const http::BodySource& archive, std::string_view object) {
  auto resp = AGVISOR_TRY(SendTar("POST", "/images/load?quiet=1", archive, "load image", object));
  // The daemon answers 200 and reports a refused archive in the stream ("errorDetail").
  ProgressDecoder decoder("load image", std::string(object));
  AGVISOR_RETURN_IF_ERROR(decoder.Feed(resp.body, nullptr));
  return decoder.Finish(nullptr);
}

Result<void> Client::PullImage(std::string_view ref, const ProgressCallback& progress) {
  AGVISOR_RETURN_IF_ERROR(ValidateImageRef(ref));
  // Without a tag the Engine API pulls EVERY tag of the repository: always name one.
  std::vector<std::pair<std::string, std::string>> q;
  if (ref.find('@') != std::string_view::npos) {
    q = {{"fromImage", std::string(ref)}};
  } else {
    const auto slash = ref.rfind('/');
    const auto colon = ref.rfind(':');
    if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
      AGVISOR_RETURN_IF_ERROR(ValidateTag(ref.substr(colon + 1)));
      q = {{"fromImage", std::string(ref.substr(0, colon))},
           {"tag", std::string(ref.substr(colon + 1))}};
    } else {
      q = {{"fromImage", std::string(ref)}, {"tag", "latest"}};
    }
  }
  http::Request req{.method = "POST", .target = Path("/images/create" + BuildQuery(q))};
  req.timeout = kLongOperationTimeout;
  ProgressDecoder decoder("pull image", std::string(ref));
  auto on = [&progress](const ProgressMessage& m) {
    if (progress) progress(FormatProgress(m));
  };
  auto resp = http_->SendStreamingResponse(
      req, [&](std::string_view chunk) -> Result<void> { return decoder.Feed(chunk, on); });
  if (!resp.ok()) {
    // A progress error line aborts the body; report it as itself, not as a transport failure.
    if (auto d = decoder.Finish(nullptr); !d.ok()) return d.error();
    return TransportError(resp.error(), "pull image", ref);
  }
  if (resp->status >= 400) return DecodeDaemonError(resp->status, resp->body, "pull image", ref);
  return decoder.Finish(on);
}

Result<void> Client::RemoveImage(std::string_view image, bool force) {
  AGVISOR_RETURN_IF_ERROR(ValidateImageRef(image));
  return Send("DELETE",
              "/images/" + std::string(image) + BuildQuery({{"force", force ? "1" : "0"}}),
              "remove image", image);
}

}  // namespace agvisor::docker
