// HTTP/1.1 client for the Docker Engine API (and any HTTP server on a unix socket or loopback).
//
// Used by docker/ (the Engine API client) and by tests. Transports:
//   unix:///var/run/docker.sock   a unix socket (the default)
//   tcp://HOST:PORT               plain TCP
//   https://HOST[:PORT]          TLS over TCP (the Kubernetes API server, kube/): the peer is
//                                 verified against ClientOptions::tls (never skipped)
//   ssh://[USER@]HOST[:PORT][/SOCKET]
//       ONE `ssh` process per Client forwards the remote docker socket (default
//       /var/run/docker.sock) to a private local unix socket; every request and stream to that
//       host goes through it, and it dies with the Client (even when this process is SIGKILLed:
//       ssh's stdin is a pipe only we hold, and its remote command ends at EOF).
// Connections are kept alive in a per-Client pool and reused; every method is safe to call from
// many threads at once. A pooled connection the server closed meanwhile is replaced: an
// idempotent request (GET, HEAD, PUT, DELETE, OPTIONS) or one of which no byte was sent is
// replayed once on a fresh connection; other requests fail with kUnavailable.
// Boost.Beast stays inside client.cc: this header has no third-party includes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::http {

// Where an HTTP endpoint lives. Parsed from DOCKER_HOST-style strings.
struct Endpoint {
  enum class Kind { kUnix, kTcp, kSsh, kHttps };
  Kind kind = Kind::kUnix;
  std::string path = "/var/run/docker.sock";  // kUnix: local socket; kSsh: the REMOTE socket
  std::string host;                           // kTcp, kSsh, kHttps
  std::uint16_t port = 0;        // kTcp: required; kSsh: 0 = ssh's default; kHttps: 0 = 443
  std::string user;              // kSsh: optional
  std::string ToString() const;  // back to the URL form
};

// Parses "unix:///path", "tcp://host:port", "https://host[:port]",
// "ssh://[user@]host[:port][/remote/socket]". An empty
// spec means $DOCKER_HOST, or unix:///var/run/docker.sock when that is unset. Hosts and users are
// limited to letters, digits, '.', '-', '_' (IPv6 in brackets) and may not start with '-'; paths
// must be absolute without whitespace or ':' (nothing can reach ssh's command line as an option).
// Errors: kInvalidArgument, naming the spec and the accepted forms.
Result<Endpoint> ParseEndpoint(std::string_view spec);

struct Header {
  std::string name;
  std::string value;
};

struct Request {
  std::string method = "GET";
  std::string target;  // origin-form, already percent-encoded: "/v1.41/containers/json?all=1"
  std::vector<Header> headers;
  std::string body;          // sent with Content-Length when non-empty (or method is POST/PUT)
  std::string content_type;  // e.g. "application/json"; empty = none
  // Deadline for the whole exchange (connect, upload, response); 0 =
  // ClientOptions::request_timeout. SendStreamingResponse and Hijack streams are exempt once
  // their headers arrived; a SendStreamingBody upload is not (give a big upload a big timeout).
  std::chrono::milliseconds timeout{0};
  // The most response body bytes taken into memory by Send and SendStreamingBody (and the
  // answer of a refused Hijack); more fails the exchange with kInternal ("body limit exceeded").
  // 0 = no limit. SendStreamingResponse leaves bounding to its sink.
  std::size_t max_body_bytes = 0;
};

struct Response {
  int status = 0;
  std::vector<Header> headers;
  std::string body;
  // The first header of that name (case-insensitive), or "".
  std::string_view header(std::string_view name) const;
};

// Supplies an upload body piece by piece (sent chunked): fills `buf` (64 KiB, reused), returns
// the byte count; 0 ends the body; an error aborts the request and is returned by the call.
using BodySource = std::function<Result<std::size_t>(std::span<char> buf)>;
// Receives a response body piece by piece as it arrives; an error aborts the request.
using BodySink = std::function<Result<void>(std::string_view chunk)>;

// The raw bidirectional byte stream left after an HTTP upgrade (Docker's hijacked exec/attach).
// Read and Write may run on different threads at once.
class RawStream {
 public:
  virtual ~RawStream() = default;
  // Up to buf.size() bytes; 0 = the peer closed its side.
  Result<std::size_t> Read(std::span<char> buf) {
    return ReadUntil(buf, std::chrono::steady_clock::time_point::max());
  }
  // As Read, but gives up at `deadline` with kTimeout (nothing consumed; call again).
  virtual Result<std::size_t> ReadUntil(std::span<char> buf,
                                        std::chrono::steady_clock::time_point deadline) = 0;
  // All of `data`, or an error.
  virtual Result<void> Write(std::string_view data) = 0;
  // Half-close: the peer reads EOF (an exec's stdin ends); reading goes on.
  virtual Result<void> CloseWrite() = 0;
  // Closes both directions; a Read blocked in another thread returns 0, later Reads return 0 and
  // Writes fail. Waits for calls in flight to return before closing the fd. Idempotent; the
  // destructor calls it.
  virtual void Close() = 0;
};

// The outcome of Client::Hijack: `stream` is set when the server switched protocols (101, or
// 200 as Docker answers some upgrades); otherwise `response` holds the server's error answer.
struct Hijacked {
  Response response;
  std::unique_ptr<RawStream> stream;
};

// https:// endpoints: what the server is verified against and who the client is. PEM text.
struct TlsConfig {
  std::string ca_pem;    // the CA bundle to trust; "" = the system's trust store
  std::string cert_pem;  // a client certificate (with its chain), or ""
  std::string key_pem;   // its unencrypted private key, or ""
};

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{120000};
  std::size_t max_idle_connections = 16;
  // ssh only: extra arguments for the ssh command line (e.g. {"-i", key, "-o", "..."}), put
  // before the destination. BatchMode=yes is always set: ssh never prompts.
  std::vector<std::string> ssh_args;
  // https only.
  TlsConfig tls;
  // unix only: run on each new connection before anything is sent on it; an error refuses the
  // connection (and is the request's error). agvisord's client checks who serves the socket
  // before it sends its token there (client/agvisord_api.h CheckAgvisordPeer).
  std::function<Result<void>(int fd)> check_unix_peer;
};

// The argv that runs `remote_command` (one shell command line, run by the remote user's shell)
// on an ssh:// endpoint's host, with the options the tunnel uses (BatchMode, the port,
// options.ssh_args, ConnectTimeout). For asking the Docker host itself, e.g. what a runtime's
// binary is (sandbox/docker_runtime/runtime_check.h).
std::vector<std::string> SshRemoteCommandLine(const Endpoint& endpoint,
                                              const ClientOptions& options,
                                              std::string remote_command);

// The argv that connects its stdin and stdout to `target_host`:`target_port` as dialled FROM an
// ssh:// endpoint's host (`ssh -W`, a direct-tcpip channel; same options as above). With stdin at
// EOF it is a reachability probe of a port on the remote host: exit 0 once something there
// accepted (and closed after the EOF), 255 with "open failed: connect failed" on stderr when the
// remote connect was refused (LogLevel=INFO is forced for that line), 255 with ssh's own message
// when ssh itself failed. Used to find
// out whether agvisord's egress enforcer answers on a remote Docker host
// (sandbox/egress_network.h).
std::vector<std::string> SshStdioForwardCommandLine(const Endpoint& endpoint,
                                                    const ClientOptions& options,
                                                    std::string_view target_host,
                                                    std::uint16_t target_port);

class Client {
 public:
  // Errors: kUnavailable (ssh failed, with ssh's own message), kNotFound (no `ssh` program),
  // kInvalidArgument (a hand-built Endpoint that ParseEndpoint would refuse; https: PEM data of
  // options.tls that does not parse).
  // For unix/tcp nothing is connected until the first request; for ssh the tunnel is up on return.
  static Result<std::shared_ptr<Client>> Connect(const Endpoint& endpoint,
                                                 ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Endpoint& endpoint() const;
  // ssh only: the private local unix socket the tunnel forwards to the remote socket (for a
  // caller that speaks another protocol over it, e.g. WebSockets to a remote agvisord); "" for
  // unix and tcp endpoints. Valid while this Client lives.
  const std::string& forwarded_socket() const;

  // One exchange; any status is a success at this layer (the caller reads response.status).
  // Errors: kUnavailable (socket missing, connection refused/reset, daemon gone, connect timeout:
  // names the endpoint and what to do), kPermissionDenied (socket not accessible: run as root or
  // join the docker group), kTimeout (no complete response before the deadline),
  // kInvalidArgument (a method, target or header that would break the framing), kInternal
  // (malformed response).
  Result<Response> Send(const Request& request);
  // As Send, with a body streamed from `source` using chunked transfer encoding.
  Result<Response> SendStreamingBody(const Request& request, const BodySource& source);
  // As Send, but the body goes to `sink` as it arrives (returned Response has an empty body).
  // `sink` is not called for error statuses (>= 400): their body is in the Response. Errors of
  // `sink` abort the exchange (the connection is dropped) and are returned.
  Result<Response> SendStreamingResponse(const Request& request, const BodySink& sink);
  // Sends `request` with "Connection: Upgrade" and "Upgrade: tcp" (or the request's own Upgrade
  // header, e.g. "websocket" with its Sec-WebSocket-* headers) and hands over the socket;
  // bytes the server sent right after its headers are the first ones Read returns. The stream
  // outlives neither the process nor, for ssh, the Client's tunnel. Errors: as Send.
  Result<Hijacked> Hijack(const Request& request);

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Percent-encodes a query parameter value (RFC 3986 unreserved characters kept).
std::string UrlEncode(std::string_view s);

}  // namespace agvisor::http
