// agvisor._core: the pybind11 extension under the `agvisor` Python package.
//
// A thin layer over agvisor::Sandbox (src/agvisor/sandbox/sandbox.h). The Python modules
// (python/agvisor/*.py) give it the seed's API; this file only converts values, maps errors and
// handles the GIL:
//   - every call that may block (create, open, list, remove, exec, stop, delete, info) runs with
//     the GIL released, so many Python threads can drive many sandboxes at once;
//   - streaming callbacks run on the thread that called exec: they take the GIL back for the
//     Python call. An exception a callback raises is kept, later output is dropped without
//     calling Python again, and the exception is raised in the caller once Exec has returned.
//     It never unwinds through C++ (Sandbox::Exec has threads of its own to join);
//   - errors: kInvalidArgument becomes ValueError, every other code RuntimeError (the seed's
//     split), with the C++ message and a `code` attribute ("sandbox_died", "not_found", ...).
#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/spec.h"

namespace py = pybind11;

namespace agvisor::python {
namespace {

// "kSandboxDied" -> "sandbox_died".
std::string SnakeCode(ErrorCode code) {
  std::string_view name = ErrorCodeName(code);
  if (name.starts_with('k')) name.remove_prefix(1);
  std::string out;
  for (char c : name) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      if (!out.empty()) out.push_back('_');
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Raises the Python exception for `e`. Needs the GIL.
[[noreturn]] void Raise(const Error& e) {
  PyObject* type = e.code() == ErrorCode::kInvalidArgument ? PyExc_ValueError : PyExc_RuntimeError;
  py::object exc = py::reinterpret_borrow<py::object>(type)(e.message());
  exc.attr("code") = SnakeCode(e.code());
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) Raise(r.error());
  return std::move(r).value();
}

void Unwrap(Result<void> r) {
  if (!r.ok()) Raise(r.error());
}

// Runs `fn` without the GIL and returns its Result, unwrapped with the GIL held again.
template <typename Fn>
auto Blocking(Fn&& fn) {
  auto result = [&] {
    py::gil_scoped_release release;
    return fn();
  }();
  return Unwrap(std::move(result));
}

// The Python side of one exec's streaming callbacks. Lives on the caller's stack for the call.
class Callbacks {
 public:
  // Wraps a Python callable (or None) as a callback for ExecOptions. The returned function is
  // called without the GIL and must not outlive this object.
  std::function<void(std::string_view)> Wrap(const py::object& fn) {
    if (fn.is_none()) return nullptr;
    const py::object* target = &fn;  // borrowed: the caller's argument outlives the exec
    return [this, target](std::string_view bytes) {
      py::gil_scoped_acquire acquire;
      if (error_) return;  // an earlier call raised: the rest of the output is dropped
      try {
        (*target)(py::bytes(bytes.data(), bytes.size()));
        // Ctrl-C during a long streaming exec: Python only sees signals in its own code.
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      } catch (py::error_already_set& e) {
        error_ = std::move(e);
      }
    };
  }

  // Re-raises a kept callback exception in the calling thread. Needs the GIL.
  void RaiseIfFailed() {
    if (!error_) return;
    py::error_already_set e = std::move(*error_);
    error_.reset();
    throw e;
  }

 private:
  std::optional<py::error_already_set> error_;
};

py::bytes ToBytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

// Sandbox::Exec with Python arguments; returns (exit_code, timed_out, stdout, stderr,
// truncated) with the outputs as bytes.
py::tuple Exec(Sandbox& sandbox, std::vector<std::string> argv, std::optional<py::bytes> input,
               double timeout, std::vector<std::string> env, std::string cwd, std::string user,
               const py::object& on_output, const py::object& on_stdout,
               const py::object& on_stderr) {
  ExecOptions options;
  if (input) options.input = std::string(*input);
  options.timeout = timeout;
  options.env = std::move(env);
  options.cwd = std::move(cwd);
  options.user = std::move(user);
  Callbacks callbacks;
  options.on_output = callbacks.Wrap(on_output);
  options.on_stdout = callbacks.Wrap(on_stdout);
  options.on_stderr = callbacks.Wrap(on_stderr);
  Result<ExecResult> result = [&] {
    py::gil_scoped_release release;
    return sandbox.Exec(argv, options);
  }();
  // The callback's own exception comes first: it is what the caller's code did.
  callbacks.RaiseIfFailed();
  ExecResult r = Unwrap(std::move(result));
  return py::make_tuple(r.exit_code, r.timed_out, ToBytes(r.out), ToBytes(r.err), r.truncated);
}

py::dict InfoDict(const SandboxInfo& i) {
  py::dict d;
  d["container_name"] = i.container_name;
  d["name"] = i.name ? py::object(py::str(*i.name)) : py::object(py::none());
  d["container_id"] = i.container_id;
  d["image"] = i.image;
  d["state"] = i.state;
  d["running"] = i.running;
  d["end_reason"] = std::string(EndReasonName(i.end_reason));
  d["exit_code"] = i.exit_code;
  d["host"] = i.host;
  return d;
}

}  // namespace
}  // namespace agvisor::python

// At global scope: the macro defines the module's C entry point, PyInit__core.
PYBIND11_MODULE(_core, m) {
  using namespace agvisor;  // NOLINT(google-build-using-namespace): this block only
  using agvisor::python::Blocking;
  using agvisor::python::InfoDict;
  using agvisor::python::Unwrap;
  m.doc() = "agvisor's C++ core (agvisor::Sandbox); use the `agvisor` package, not this module.";
  m.attr("DEFAULT_IMAGE") = std::string(kDefaultImage);
  m.attr("DEFAULT_DISK") = std::string(kDefaultDisk);
  m.attr("NAME_PREFIX") = std::string(kNamePrefix);
  m.attr("STREAM_TAIL_BYTES") = kStreamTailBytes;

  py::class_<Limits>(m, "Limits", "agvisor::Limits; disk '' = the default, 'none' = uncapped.")
      .def(py::init<>())
      .def_readwrite("cpus", &Limits::cpus)
      .def_readwrite("memory", &Limits::memory)
      .def_readwrite("pids", &Limits::pids)
      .def_readwrite("shm", &Limits::shm)
      .def_readwrite("disk", &Limits::disk);

  py::class_<SandboxSpec>(m, "SandboxSpec", "agvisor::SandboxSpec.")
      .def(py::init<>())
      .def_readwrite("image", &SandboxSpec::image)
      .def_readwrite("gui", &SandboxSpec::gui)
      .def_readwrite("limits", &SandboxSpec::limits)
      .def_readwrite("network", &SandboxSpec::network)
      .def_readwrite("lifetime", &SandboxSpec::lifetime)
      .def_readwrite("idle_ttl", &SandboxSpec::idle_ttl)
      .def_readwrite("name", &SandboxSpec::name)
      .def_readwrite("host", &SandboxSpec::host)
      .def_readwrite("runtime", &SandboxSpec::runtime)
      .def_readwrite("labels", &SandboxSpec::labels);

  // Pure checks, no host involved: ValueError with the C++ message.
  m.def(
      "validate_limits", [](const Limits& l) { Unwrap(ValidateLimits(l)); }, py::arg("limits"));
  m.def(
      "validate_spec", [](const SandboxSpec& s) { Unwrap(ValidateSpec(s)); }, py::arg("spec"));
  m.def(
      "validate_exec_timeout",
      [](double timeout, std::optional<std::int64_t> idle_ttl) {
        Unwrap(ValidateExecTimeout(timeout, idle_ttl));
      },
      py::arg("timeout"), py::arg("idle_ttl"));

  py::class_<Sandbox, std::shared_ptr<Sandbox>>(m, "Sandbox", "A handle on one sandbox.")
      .def_static(
          "create",
          [](const SandboxSpec& spec) {
            return std::shared_ptr<Sandbox>(Blocking([&] { return Sandbox::Create(spec); }));
          },
          py::arg("spec"))
      .def_static(
          "open",
          [](const std::string& container_name, const std::string& host) {
            return std::shared_ptr<Sandbox>(
                Blocking([&] { return Sandbox::Open(container_name, host); }));
          },
          py::arg("container_name"), py::arg("host") = "")
      .def_static(
          "list",
          [](const std::string& host) {
            std::vector<SandboxInfo> infos = Blocking([&] { return Sandbox::List(host); });
            py::list out;
            for (const auto& i : infos) out.append(InfoDict(i));
            return out;
          },
          py::arg("host") = "")
      .def_static(
          "remove",
          [](const std::string& container_name, const std::string& host, bool erase_data) {
            Blocking([&] { return Sandbox::Remove(container_name, host, erase_data); });
          },
          py::arg("container_name"), py::arg("host"), py::arg("erase_data"))
      .def("exec", &agvisor::python::Exec, py::arg("argv"), py::arg("input") = py::none(),
           py::arg("timeout") = 120.0, py::arg("env") = std::vector<std::string>{},
           py::arg("cwd") = "", py::arg("user") = "", py::arg("on_output") = py::none(),
           py::arg("on_stdout") = py::none(), py::arg("on_stderr") = py::none())
      .def("stop", [](Sandbox& s) { Blocking([&] { return s.Stop(); }); })
      .def("delete", [](Sandbox& s) { Blocking([&] { return s.Delete(); }); })
      .def("info", [](Sandbox& s) { return InfoDict(Blocking([&] { return s.Info(); })); })
      .def_property_readonly("container_name", &Sandbox::container_name)
      .def_property_readonly("name", &Sandbox::name)
      .def_property_readonly("persistent", &Sandbox::persistent)
      .def_property_readonly("data_dir", &Sandbox::data_dir)
      .def_property_readonly("resumed", &Sandbox::resumed)
      .def_property_readonly("disk_warning", &Sandbox::disk_warning)
      .def_property_readonly("host", &Sandbox::host)
      .def_property_readonly("idle_ttl", &Sandbox::idle_ttl);
}
