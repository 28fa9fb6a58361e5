// The JSON-RPC 2.0 side of the MCP server: framing of requests, notifications, responses and
// batches; initialize, ping, tools/list, tools/call. The tools are in tools.cc.
#include "agvisor/mcp/session.h"

#include <boost/json.hpp>
#include <optional>

#include "agvisor/api/codec.h"
#include "agvisor/mcp/tools.h"

namespace agvisor::mcp {
namespace json = boost::json;
namespace {

// JSON-RPC 2.0 error codes.
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;

struct RpcError {
  int code;
  std::string message;
};

json::object ErrorAnswer(const json::value& id, const RpcError& e) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", e.code}, {"message", e.message}}}};
}

json::object ResultAnswer(const json::value& id, json::object result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

std::optional<json::value> ParseJson(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return std::nullopt;
  return v;
}

bool IsRequest(const json::value& v) {
  const auto* o = v.if_object();
  return o && o->contains("method") && o->contains("id");
}

const json::value* ProgressToken(const json::object& msg) {
  const auto* params = msg.if_contains("params");
  if (!params || !params->is_object()) return nullptr;
  const auto* meta = params->as_object().if_contains("_meta");
  if (!meta || !meta->is_object()) return nullptr;
  const auto* token = meta->as_object().if_contains("progressToken");
  if (!token || !(token->is_string() || token->is_int64() || token->is_uint64())) return nullptr;
  return token;
}

// Protocol versions are dates: they compare as strings.
bool OlderThan(std::string_view version, std::string_view than) { return version < than; }

}  // namespace

Session::Session(client::Place& place, SessionOptions options, client::HandleCache* shared)
    : place_(place), options_(std::move(options)), shared_(shared) {}

Session::~Session() = default;

std::string Session::protocol_version() const {
  std::lock_guard lock(mu_);
  return protocol_version_;
}

Session::Peek Session::Inspect(std::string_view message) {
  Peek p;
  auto v = ParseJson(message);
  if (!v) return p;
  p.valid_json = true;
  auto look = [&p](const json::value& m) {
    if (!IsRequest(m)) return;
    p.has_request = true;
    const auto& o = m.as_object();
    if (o.at("method") == "initialize") p.initialize = true;
    if (ProgressToken(o)) p.wants_progress = true;
  };
  if (v->is_array()) {
    for (const auto& m : v->as_array()) look(m);
  } else {
    look(*v);
  }
  return p;
}

namespace {

// One request or notification; nullopt for a notification (no answer).
std::optional<json::object> HandleOne(Session& s, const json::value& msg, const Notify& notify,
                                      std::mutex& mu, std::string& version,
                                      std::string_view server_version) {
  const auto* o = msg.if_object();
  if (!o) return ErrorAnswer(nullptr, {kInvalidRequest, "a JSON-RPC message must be an object"});
  const json::value* id = o->if_contains("id");
  const json::value* method = o->if_contains("method");
  if (!method) {
    // A response (to nothing this server asks) or garbage: no answer to a response.
    if (id && (o->contains("result") || o->contains("error"))) return std::nullopt;
    return ErrorAnswer(id ? *id : nullptr,
                       {kInvalidRequest, "a JSON-RPC request needs \"method\" (a string)"});
  }
  const json::value the_id = id ? *id : json::value(nullptr);
  if (id && !(id->is_string() || id->is_int64() || id->is_uint64())) {
    return ErrorAnswer(nullptr,
                       {kInvalidRequest, "a request's \"id\" must be a string or an integer"});
  }
  if (!method->is_string() || !o->contains("jsonrpc") || o->at("jsonrpc") != "2.0") {
    return ErrorAnswer(the_id, {kInvalidRequest,
                                "not a JSON-RPC 2.0 request: needs \"jsonrpc\": \"2.0\" and a "
                                "string \"method\""});
  }
  const std::string m(method->as_string());
  if (!id) {
    // notifications: initialized, cancelled, ... need no answer. A cancel names a request in
    // flight (the spec: the server should stop it); one it does not know is ignored.
    if (m == "notifications/cancelled") {
      const auto* p = o->if_contains("params");
      const auto* req = p && p->is_object() ? p->as_object().if_contains("requestId") : nullptr;
      if (req) s.Cancel(json::serialize(*req));
    }
    return std::nullopt;
  }
  json::object params;
  if (const auto* p = o->if_contains("params")) {
    if (!p->is_object()) {
      return ErrorAnswer(the_id, {kInvalidParams, m + ": \"params\" must be an object"});
    }
    params = p->as_object();
  }

  if (m == "initialize") {
    std::string asked;
    if (const auto* v = params.if_contains("protocolVersion"); v && v->is_string()) {
      asked = std::string(v->as_string());
    }
    std::string agreed(kProtocolVersions[0]);
    for (auto known : kProtocolVersions) {
      if (asked == known) agreed = asked;
    }
    {
      std::lock_guard lock(mu);
      version = agreed;
    }
    return ResultAnswer(
        the_id,
        {{"protocolVersion", agreed},
         {"capabilities", {{"tools", {{"listChanged", false}}}}},
         {"serverInfo", {{"name", "agvisor"}, {"version", server_version}}},
         {"instructions",
          "agvisor runs gVisor (runsc) sandboxes: throwaway Linux machines with hard resource "
          "limits. Create one with create_sandbox, run commands in it with exec, move files with "
          "read_file / write_file, and delete it with delete_sandbox when done. Sandboxes made "
          "in this session are removed when the session ends and end themselves at their "
          "lifetime."}});
  }
  if (m == "ping") return ResultAnswer(the_id, {});
  if (m == "tools/list") {
    return ResultAnswer(the_id, json::parse(ToolListJson()).as_object());
  }
  if (m == "tools/call") {
    const auto* name = params.if_contains("name");
    if (!name || !name->is_string()) {
      return ErrorAnswer(the_id, {kInvalidParams, "tools/call: \"name\" (a string) is missing"});
    }
    const internal::Tool* tool = internal::FindTool(name->as_string());
    if (!tool) {
      return ErrorAnswer(the_id, {kInvalidParams, "tools/call: unknown tool '" +
                                                      api::SanitizeUtf8(name->as_string()) +
                                                      "' (tools/list names the tools)"});
    }
    json::object args;
    if (const auto* a = params.if_contains("arguments"); a && !a->is_null()) {
      if (!a->is_object()) {
        return ErrorAnswer(the_id, {kInvalidParams, "tools/call: \"arguments\" must be an object"});
      }
      args = a->as_object();
    }
    internal::CallContext ctx{s, nullptr};
    if (const json::value* token = ProgressToken(*o); token && notify) {
      json::value tok = *token;
      ctx.progress = [tok, &notify](double progress, std::string_view piece) {
        json::object n{{"jsonrpc", "2.0"},
                       {"method", "notifications/progress"},
                       {"params",
                        {{"progressToken", tok},
                         {"progress", progress},
                         {"message", api::SanitizeUtf8(piece)}}}};
        notify(json::serialize(n));
      };
    }
    auto valid = internal::ValidateArguments(tool->name, internal::SchemaOf(*tool), args);
    const std::string key = json::serialize(the_id);
    s.Begin(key, ctx.cancellation);
    Result<internal::ToolResult> r =
        valid.ok() ? tool->run(args, ctx) : Result<internal::ToolResult>(valid.error());
    s.End(key);
    json::object result;
    if (!r.ok()) {
      // As the CLI prints it (cli.cc ReportError), so an agent and a person read the same text.
      result["content"] =
          json::array{{{"type", "text"}, {"text", "agvisor: " + r.error().message()}}};
      result["isError"] = true;
      return ResultAnswer(the_id, std::move(result));
    }
    if (!r->png.empty()) {
      result["content"] = json::array{
          {{"type", "image"}, {"data", api::Base64Encode(r->png)}, {"mimeType", "image/png"}}};
    } else {
      result["content"] = json::array{{{"type", "text"}, {"text", json::serialize(r->structured)}}};
      std::string v;
      {
        std::lock_guard lock(mu);
        v = version;
      }
      // structuredContent came with 2025-06-18; older clients get the text only.
      if (v.empty() || !OlderThan(v, "2025-06-18")) {
        result["structuredContent"] = std::move(r->structured);
      }
    }
    return ResultAnswer(the_id, std::move(result));
  }
  return ErrorAnswer(the_id, {kMethodNotFound, "unknown method '" + api::SanitizeUtf8(m) +
                                                   "' (this server answers initialize, ping, "
                                                   "tools/list and tools/call)"});
}

}  // namespace

std::string Session::Handle(std::string_view message, const Notify& notify) {
  auto v = ParseJson(message);
  if (!v) {
    return json::serialize(
        ErrorAnswer(nullptr, {kParseError,
                              "malformed JSON: a message must be one JSON-RPC 2.0 "
                              "object (or an array of them)"}));
  }
  auto one = [&](const json::value& m) {
    return HandleOne(*this, m, notify, mu_, protocol_version_, options_.server_version);
  };
  if (v->is_array()) {
    const auto& batch = v->as_array();
    if (batch.empty()) {
      return json::serialize(ErrorAnswer(nullptr, {kInvalidRequest, "an empty batch"}));
    }
    json::array answers;
    for (const auto& m : batch) {
      if (auto a = one(m)) answers.push_back(std::move(*a));
    }
    return answers.empty() ? "" : json::serialize(answers);
  }
  auto a = one(*v);
  return a ? json::serialize(*a) : "";
}

Result<std::shared_ptr<client::SandboxHandle>> Session::HandleFor(
    const std::string& container_name) {
  {
    std::lock_guard lock(mu_);
    if (auto it = handles_.find(container_name); it != handles_.end()) return it->second;
  }
  if (shared_ != nullptr) return shared_->Get(container_name);
  std::shared_ptr<client::SandboxHandle> h = AGVISOR_TRY(place_.Open(container_name));
  std::lock_guard lock(mu_);
  return handles_.try_emplace(container_name, std::move(h)).first->second;
}

void Session::Begin(const std::string& id, std::shared_ptr<internal::Cancellation> c) {
  std::lock_guard lock(mu_);
  in_flight_[id] = std::move(c);
}

void Session::End(const std::string& id) {
  std::lock_guard lock(mu_);
  in_flight_.erase(id);
}

void Session::Cancel(const std::string& id) {
  std::shared_ptr<internal::Cancellation> c;
  {
    std::lock_guard lock(mu_);
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) return;
    c = it->second;
  }
  c->Cancel();
}

void Session::Track(const std::string& container_name,
                    std::shared_ptr<client::SandboxHandle> handle) {
  if (shared_ != nullptr) shared_->Put(handle);
  std::lock_guard lock(mu_);
  handles_[container_name] = std::move(handle);
  tracked_.insert(container_name);
}

void Session::Forget(const std::string& container_name) {
  if (shared_ != nullptr) shared_->Forget(container_name);
  std::lock_guard lock(mu_);
  handles_.erase(container_name);
  tracked_.erase(container_name);
}

std::vector<std::string> Session::Tracked() const {
  std::lock_guard lock(mu_);
  return {tracked_.begin(), tracked_.end()};
}

std::size_t Session::EndSandboxes() {
  std::size_t n = 0;
  for (const auto& name : Tracked()) {
    if (place_.Remove(name, /*erase_data=*/false).ok()) ++n;
    Forget(name);
  }
  return n;
}

std::string ToolListJson() {
  json::array tools;
  for (const auto& t : internal::Tools()) {
    tools.push_back(
        {{"name", t.name}, {"description", t.description}, {"inputSchema", internal::SchemaOf(t)}});
  }
  return json::serialize(json::object{{"tools", std::move(tools)}});
}

}  // namespace agvisor::mcp
