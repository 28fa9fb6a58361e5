// kube::Client: a small Kubernetes API client for the calls agvisor makes, over HTTPS
// (http::Client with TLS: the cluster's CA verified, bearer token or client certificate), in one
// namespace: pods (create, get, list by label selector, delete), persistent volume claims and
// network policies (create, labels, delete), RuntimeClasses (their handler), and pods/exec and
// pods/attach as a WebSocket stream (ExecStream: v5.channel.k8s.io, v4 as the fallback).
// Knows nothing of sandboxes: the Kubernetes runtime (sandbox/kube_runtime/) builds the objects.
//
// For `agvisor doctor`: the server's version and SelfSubjectAccessReviews (what the credentials
// may do).
//
// Everything the server sends is bounded: JSON answers (8 MiB), WebSocket messages (1 MiB), the
// exec's status. Every method is safe from many threads. Errors are StatusError's (codec.h) for
// the API's answers, and http::Client's for the connection.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/base/pending_bytes.h"
#include "agvisor/kube/codec.h"
#include "agvisor/kube/kubeconfig.h"

namespace agvisor::http {
class Client;
class RawStream;
}  // namespace agvisor::http

namespace agvisor::kube {

class WsDecoder;

// The namespaced collections agvisor makes objects in besides pods.
enum class Collection { kPersistentVolumeClaims, kNetworkPolicies };

// One permission, as RBAC names it: API group ("" = core), resource ("pods", "pods/exec"), verb.
struct Access {
  std::string group;
  std::string resource;
  std::string verb;
};

// What a SelfSubjectAccessReview answered.
struct AccessReview {
  bool allowed = false;
  std::string reason;  // the authorizer's reason or evaluation error ("" when none)
};

// A process in a pod over the WebSocket channel protocol (websocket.h): its stdin, its stdout,
// its stderr to a sink, and its exit status at the end. ReadStdout from one thread, Write and
// CloseStdin from others; Close from any.
class ExecStream {
 public:
  ExecStream(std::unique_ptr<http::RawStream> stream, std::string protocol);
  ~ExecStream();
  ExecStream(const ExecStream&) = delete;
  ExecStream& operator=(const ExecStream&) = delete;

  // "v5.channel.k8s.io" or "v4.channel.k8s.io": what the server agreed to.
  const std::string& protocol() const { return protocol_; }
  // Up to buf.size() bytes of stdout; stderr bytes go to `on_stderr` meanwhile. 0 at the end
  // (the process ended and the server closed, or Close). Errors: kUnavailable (the connection
  // broke, or the server broke the protocol; or, at the end, the error stream carried a Failure
  // other than an exit code: the exec failed or never started, "exec failed: " + its message).
  Result<std::size_t> ReadStdout(std::span<char> buf,
                                 const std::function<void(std::string_view)>& on_stderr);
  // All of `data` to stdin. Errors: kUnavailable.
  Result<void> Write(std::string_view data);
  // Ends stdin (v5's close message). Under v4 there is no such message: Ok, and stdin ends when
  // the stream is closed.
  Result<void> CloseStdin();
  // Closes the connection: a ReadStdout blocked in another thread returns 0. Idempotent.
  void Close();
  // After ReadStdout returned 0: the exit code the error stream carried. Errors: kUnavailable
  // (the exec failed, or the stream ended without a status: the pod went away).
  Result<int> ExitCode() const;

 private:
  Result<void> SendFrame(int opcode, std::string_view payload);
  // The server ended the stream: 0, or the error its status says.
  Result<std::size_t> End();

  std::unique_ptr<http::RawStream> stream_;
  std::string protocol_;
  std::unique_ptr<WsDecoder> decoder_;
  std::mutex write_mu_;
  PendingBytes pending_;  // stdout bytes decoded but not yet handed out
  std::string status_;    // the error stream's bytes (bounded)
  bool ended_ = false;
  std::atomic<bool> closed_{false};
};

class Client {
 public:
  // Runs an exec plugin when the credentials name one (once, for this client), and makes the
  // HTTPS client. Nothing is sent yet. Errors: kInvalidArgument (bad PEM data), kUnavailable
  // (the exec plugin failed: its stderr), those of http::Client::Connect.
  static Result<std::shared_ptr<Client>> Connect(Credentials credentials);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Credentials& credentials() const { return credentials_; }
  const std::string& namespace_name() const { return credentials_.namespace_; }

  // ---- Pods (in the client's namespace) ----
  // `manifest`: a Pod as JSON. Errors: kConflict (the name is taken), kInvalidArgument (the API
  // server refused the manifest: its message), kPermissionDenied, kUnavailable.
  Result<Pod> CreatePod(std::string_view manifest);
  // Errors: kNotFound.
  Result<Pod> GetPod(std::string_view name);
  Result<std::vector<Pod>> ListPods(std::string_view label_selector);
  // Deletes with `grace_seconds` (0: at once). Returns whether it was there.
  Result<bool> DeletePod(std::string_view name, int grace_seconds);

  // ---- Other namespaced objects ----
  // The new object's metadata.uid; nullopt when one of that name exists already (nothing is
  // changed then).
  Result<std::optional<std::string>> CreateObject(Collection collection, std::string_view manifest);
  // The labels (merged with agvisor's annotations, codec.h) of the object, nullopt when none.
  Result<std::optional<Labels>> ObjectLabels(Collection collection, std::string_view name);
  // Returns whether it was there. With `uid`, only the object of that metadata.uid is deleted
  // (DeleteOptions preconditions): false too when another object holds the name now.
  Result<bool> DeleteObject(Collection collection, std::string_view name,
                            std::string_view uid = {});

  // The handler of RuntimeClass `name`, nullopt when the cluster has none of that name.
  Result<std::optional<std::string>> RuntimeClassHandler(std::string_view name);

  // ---- Diagnosis (agvisor doctor) ----
  // GET /version: its gitVersion ("v1.32.0"). Errors: kPermissionDenied, kUnavailable.
  Result<std::string> ServerVersion();
  // Whether these credentials may do `access` in the client's namespace (cluster-scoped
  // resources: namespace ignored by the server), asked with a SelfSubjectAccessReview (every
  // authenticated user may create one). Errors: kNotFound (the server does not serve
  // authorization.k8s.io/v1), kPermissionDenied, kUnavailable.
  Result<AccessReview> ReviewAccess(const Access& access);

  // Starts `argv` in `container` of pod `pod` (pods/exec) with stdin, stdout and stderr, over
  // WebSocket (v5.channel.k8s.io, else v4). Errors: kNotFound (no such pod or container),
  // kConflict (the pod is not running), kPermissionDenied, kUnavailable.
  Result<std::unique_ptr<ExecStream>> Exec(std::string_view pod, std::string_view container,
                                           const std::vector<std::string>& argv);
  // pods/attach to PID 1 of `container` (stdin only when the container has stdin: true).
  Result<std::unique_ptr<ExecStream>> Attach(std::string_view pod, std::string_view container,
                                             bool stdin);

  // The request target of `path` under the server's prefix ("/api/v1/..."), for tests.
  std::string Target(std::string_view path) const;

 private:
  Client(Credentials credentials, std::shared_ptr<http::Client> http);
  std::string CollectionPath(Collection collection) const;
  // One request; the body of a 2xx answer, else StatusError(what).
  Result<std::string> Call(std::string_view method, const std::string& path, std::string body,
                           std::string_view what);
  Result<std::unique_ptr<ExecStream>> Upgrade(const std::string& path, std::string_view what);
  // The token to send: credentials_.token, or the token file's content read at most once a
  // minute (kubelet rotates a pod's service account token in place).
  std::string BearerToken();

  Credentials credentials_;
  std::shared_ptr<http::Client> http_;
  std::mutex token_mu_;
  std::string token_;                                 // guarded by token_mu_
  std::chrono::steady_clock::time_point token_read_;  // guarded by token_mu_
};

}  // namespace agvisor::kube
