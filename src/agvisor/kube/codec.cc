#include "agvisor/kube/codec.h"

#include <boost/json.hpp>
#include <ctime>

namespace agvisor::kube {
namespace {

namespace json = boost::json;

const json::object* Obj(const json::value* v) {
  return v && v->is_object() ? &v->as_object() : nullptr;
}
const json::object* Obj(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : Obj(&it->value());
}
const json::array* Arr(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  return it == o.end() || !it->value().is_array() ? nullptr : &it->value().as_array();
}
std::string Str(const json::object* o, std::string_view key) {
  if (!o) return "";
  auto it = o->find(key);
  if (it == o->end() || !it->value().is_string()) return "";
  return std::string(it->value().as_string());
}
std::int64_t Int(const json::object* o, std::string_view key) {
  if (!o) return 0;
  auto it = o->find(key);
  if (it == o->end()) return 0;
  if (it->value().is_int64()) return it->value().as_int64();
  if (it->value().is_uint64()) return static_cast<std::int64_t>(it->value().as_uint64());
  return 0;
}

Result<json::value> Parse(std::string_view text, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec)
    return Error::Internal(std::string(what) + ": the API server's answer is not JSON (" +
                           ec.message() + ")");
  return v;
}

void ReadStringMap(const json::object* o, Labels& out) {
  if (!o) return;
  for (const auto& [k, v] : *o) {
    if (v.is_string()) out[std::string(k)] = std::string(v.as_string());
  }
}

std::vector<ContainerState> ReadStatuses(const json::array* a) {
  std::vector<ContainerState> out;
  if (!a) return out;
  for (const auto& v : *a) {
    const json::object* s = Obj(&v);
    if (!s) continue;
    ContainerState c;
    c.name = Str(s, "name");
    if (const json::object* st = Obj(*s, "state")) {
      for (const char* kind : {"terminated", "running", "waiting"}) {
        if (const json::object* k = Obj(*st, kind)) {
          c.state = kind;
          c.reason = Str(k, "reason");
          c.message = Str(k, "message");
          c.exit_code = static_cast<int>(Int(k, "exitCode"));
          break;
        }
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

Result<Pod> PodOf(const json::value& v) {
  const json::object* o = Obj(&v);
  if (!o || (Str(o, "kind") != "Pod" && !Str(o, "kind").empty())) {
    return Error::Internal("the API server's answer is not a Pod");
  }
  Pod p;
  const json::object* meta = Obj(*o, "metadata");
  if (!meta) return Error::Internal("the API server's Pod has no metadata");
  p.name = Str(meta, "name");
  p.uid = Str(meta, "uid");
  ReadStringMap(Obj(*meta, "labels"), p.labels);
  ReadStringMap(Obj(*meta, "annotations"), p.annotations);
  p.created_unix = UnixSecondsOfRfc3339(Str(meta, "creationTimestamp"));
  p.deleting = meta->contains("deletionTimestamp") && !meta->at("deletionTimestamp").is_null();
  if (const json::object* spec = Obj(*o, "spec")) {
    if (const json::array* cs = Arr(*spec, "containers"); cs && !cs->empty()) {
      p.image = Str(Obj(&cs->front()), "image");
    }
  }
  if (const json::object* status = Obj(*o, "status")) {
    p.phase = Str(status, "phase");
    p.reason = Str(status, "reason");
    p.message = Str(status, "message");
    p.init_containers = ReadStatuses(Arr(*status, "initContainerStatuses"));
    p.containers = ReadStatuses(Arr(*status, "containerStatuses"));
  }
  if (p.name.empty()) return Error::Internal("the API server's Pod has no name");
  return p;
}

std::string Clip(std::string_view s, std::size_t n) {
  std::string out(s.substr(0, n));
  for (auto& c : out) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return out;
}

bool IsKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_' || c == '/';
}

}  // namespace

const ContainerState* Pod::Container(std::string_view container) const {
  for (const auto& c : containers) {
    if (c.name == container) return &c;
  }
  return nullptr;
}

Result<Pod> DecodePod(std::string_view text) {
  auto v = AGVISOR_TRY(Parse(text, "pod"));
  return PodOf(v);
}

Result<std::vector<Pod>> DecodePodList(std::string_view text) {
  auto v = AGVISOR_TRY(Parse(text, "pod list"));
  const json::object* o = Obj(&v);
  const json::array* items = o ? Arr(*o, "items") : nullptr;
  if (!items) {
    if (o && o->contains("items") && o->at("items").is_null()) return std::vector<Pod>();
    return Error::Internal("the API server's answer is not a PodList");
  }
  std::vector<Pod> out;
  out.reserve(items->size());
  for (const auto& item : *items) out.push_back(AGVISOR_TRY(PodOf(item)));
  return out;
}

Result<Labels> DecodeObjectLabels(std::string_view text) {
  auto v = AGVISOR_TRY(Parse(text, "object"));
  const json::object* o = Obj(&v);
  const json::object* meta = o ? Obj(*o, "metadata") : nullptr;
  if (!meta) return Error::Internal("the API server's object has no metadata");
  Labels out;
  ReadStringMap(Obj(*meta, "labels"), out);
  Labels annotations;
  ReadStringMap(Obj(*meta, "annotations"), annotations);
  for (auto& [k, val] : annotations) {
    // Only agvisor's own annotations are labels that did not fit a label value.
    if (k == "agvisor" || k.rfind("agvisor.", 0) == 0 || out.count(k) == 0) out[k] = val;
  }
  return out;
}

Result<std::string> DecodeObjectUid(std::string_view text) {
  auto v = AGVISOR_TRY(Parse(text, "object"));
  const json::object* o = Obj(&v);
  const json::object* meta = o ? Obj(*o, "metadata") : nullptr;
  std::string uid = meta ? Str(meta, "uid") : "";
  if (uid.empty()) return Error::Internal("the API server's object has no metadata.uid");
  return uid;
}

std::string DeleteOptionsWithUid(std::string_view uid) {
  return json::serialize(json::object{{"apiVersion", "v1"},
                                      {"kind", "DeleteOptions"},
                                      {"preconditions", json::object{{"uid", uid}}}});
}

Result<std::string> DecodeRuntimeClassHandler(std::string_view text) {
  auto v = AGVISOR_TRY(Parse(text, "runtime class"));
  const json::object* o = Obj(&v);
  std::string handler = Str(o, "handler");
  if (handler.empty()) return Error::Internal("the API server's RuntimeClass has no handler");
  return handler;
}

Error StatusError(int http_status, std::string_view body, std::string_view what) {
  std::string message;
  std::string reason;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec) {
    const json::object* o = Obj(&v);
    if (o && Str(o, "kind") == "Status") {
      message = Str(o, "message");
      reason = Str(o, "reason");
    }
  }
  if (message.empty())
    message = body.empty() ? "HTTP " + std::to_string(http_status) : Clip(body, 300);
  message = Clip(message, 1000);
  std::string text = std::string(what) + ": " + message;
  const ErrorCode code =
      ErrorCodeForHttpStatus(http_status)
          .value_or(http_status >= 500 ? ErrorCode::kUnavailable : ErrorCode::kInternal);
  if (http_status == 401) {
    text += " (the API server did not accept the credentials of the kubeconfig)";
  } else if (http_status == 403) {
    text += " (RBAC: deploy/rbac.yaml lists the verbs agvisor needs)";
  }
  Error e(code, std::move(text));
  e.set_http_status(http_status);
  return e;
}

Result<int> ExitCodeOfStatus(std::string_view text) {
  auto v = AGVISOR_TRY(Parse(text, "exec status"));
  const json::object* o = Obj(&v);
  if (!o) return Error::Internal("exec status: not a Status object");
  const std::string status = Str(o, "status");
  if (status == "Success") return 0;
  if (status != "Failure") return Error::Internal("exec status: neither Success nor Failure");
  if (Str(o, "reason") == "NonZeroExitCode") {
    const json::object* details = Obj(*o, "details");
    const json::array* causes = details ? Arr(*details, "causes") : nullptr;
    if (causes) {
      for (const auto& c : *causes) {
        const json::object* co = Obj(&c);
        if (Str(co, "reason") != "ExitCode") continue;
        const std::string digits = Str(co, "message");
        if (digits.empty() || digits.size() > 3 ||
            digits.find_first_not_of("0123456789") != std::string::npos) {
          break;
        }
        return std::stoi(digits);
      }
    }
    return Error::Internal("exec status: NonZeroExitCode without an exit code");
  }
  return Error::Unavailable("exec failed: " + Clip(Str(o, "message"), 1000));
}

Result<std::string> LabelSelector(const std::vector<std::string>& filters) {
  std::string out;
  for (const auto& f : filters) {
    for (char c : f) {
      if (!IsKeyChar(c) && c != '=') {
        return Error::InvalidArgument("label filter '" + f +
                                      "': a Kubernetes selector takes only letters, digits, "
                                      "'.', '-', '_', '/' and one '='");
      }
    }
    if (!out.empty()) out += ',';
    out += f;
  }
  return out;
}

bool IsLabelValue(std::string_view value) {
  if (value.empty()) return true;
  if (value.size() > 63) return false;
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  for (char c : value) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return alnum(value.front()) && alnum(value.back());
}

std::int64_t UnixSecondsOfRfc3339(std::string_view text) {
  std::tm tm{};
  const std::string s(text);
  const char* end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return 0;
  return static_cast<std::int64_t>(::timegm(&tm));
}

}  // namespace agvisor::kube
