// agvisor._core: the pybind11 extension under the `agvisor` Python package.
//
// A thin layer over the client layer (src/agvisor/client/place.h): a Place (the library in
// process, or agvisord through connect()) and its SandboxHandles, so one binding serves both,
// warm pools (Place's) and the desktop verbs (client/desktop.h) included. The Python modules
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
//     File operations (read_file, stat, upload, ...) raise the OSError subclasses Python code
//     expects instead: FileNotFoundError for kNotFound, PermissionError for kPermissionDenied;
//   - ports (PortStream) and pty shells (Shell, over Process): Read and Write may run on
//     different threads at once; close() may be called while another thread reads (the read
//     returns, then the stream is closed). A Shell's output is collected by a C++ thread running
//     Process::Wait into a bounded buffer (the command is slowed, not the memory grown, when
//     nobody reads); read(timeout) waits on it without the GIL.
#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "agvisor/api/codec.h"
#include "agvisor/base/error.h"
#include "agvisor/client/agvisord.h"
#include "agvisor/client/desktop.h"
#include "agvisor/client/place.h"
#include "agvisor/desktop/token.h"
#include "agvisor/egress/policy.h"
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

// Raises the OSError-style exception a file operation on `path` should: FileNotFoundError,
// PermissionError, ValueError or RuntimeError. Needs the GIL.
[[noreturn]] void RaiseFile(const Error& e, const std::string& path) {
  PyObject* type = PyExc_RuntimeError;
  switch (e.code()) {
    case ErrorCode::kNotFound:
      type = PyExc_FileNotFoundError;
      break;
    case ErrorCode::kPermissionDenied:
      type = PyExc_PermissionError;
      break;
    case ErrorCode::kInvalidArgument:
      type = PyExc_ValueError;
      break;
    default:
      break;
  }
  py::object cls = py::reinterpret_borrow<py::object>(type);
  // OSError subclasses the usual way: (errno, message, filename) -> "[Errno 2] ...: 'path'".
  py::object exc = type == PyExc_FileNotFoundError ? cls(ENOENT, e.message(), path)
                   : type == PyExc_PermissionError ? cls(EACCES, e.message(), path)
                                                   : cls(e.message());
  exc.attr("code") = SnakeCode(e.code());
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

// Runs `fn` without the GIL and returns what it returns. Needs the GIL.
template <typename Fn>
auto Released(Fn&& fn) {
  py::gil_scoped_release release;
  return fn();
}

// Runs `fn` without the GIL whether or not this thread holds it (a destructor runs either way:
// from Python code, or from a C++ thread when pybind11 drops the last reference there).
template <typename Fn>
void WithoutGil(Fn&& fn) {
  if (PyGILState_Check() != 0) {
    Released(fn);
  } else {
    fn();
  }
}

// Waits on `cv` (`lock` held) until `pred()` holds, at most `timeout` seconds (< 0 = as long as
// it takes); whether it holds.
template <typename Pred>
bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, double timeout,
             Pred pred) {
  if (timeout < 0) {
    cv.wait(lock, pred);
    return true;
  }
  return cv.wait_for(lock, std::chrono::duration<double>(timeout), pred);
}

// Runs the file operation `fn` on `path` without the GIL; errors as RaiseFile.
template <typename Fn>
auto FileOp(const std::string& path, Fn&& fn) {
  auto result = Released(fn);
  if (!result.ok()) RaiseFile(result.error(), path);
  if constexpr (!std::is_same_v<decltype(result), Result<void>>) {
    return std::move(result).value();
  }
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
  return Unwrap(Released(fn));
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

// `data` as bytes, or (`text`) as str decoded as UTF-8 with undecodable bytes replaced by U+FFFD
// (what bytes.decode(errors="replace") gives, without the bytes object in between). Needs the
// GIL.
py::object ToPython(std::string_view data, bool text) {
  if (!text) return py::bytes(data.data(), data.size());
  PyObject* str =
      PyUnicode_DecodeUTF8(data.data(), static_cast<Py_ssize_t>(data.size()), "replace");
  if (str == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(str);
}

// Whether every byte of `b` is below 0x80.
bool IsAscii(std::string_view b) {
  std::uint64_t seen = 0;
  std::size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    std::uint64_t word;
    std::memcpy(&word, b.data() + i, 8);
    seen |= word;
  }
  for (; i < b.size(); ++i) seen |= static_cast<unsigned char>(b[i]);
  return (seen & 0x8080808080808080ULL) == 0;
}

// One stream's collected output on its way to Python: the bytes as they arrive, up to `cap`
// (0 = no cap; the rest is read and dropped, as ExecOptions::max_output_bytes does). Why not the
// std::string ExecResult collects into: 50 MB of output there is copied at every doubling into
// freshly mapped pages, then copied again into the Python object (and decoded into a third for
// exec's text). Here it is written into fresh memory once (plus once more for non-ASCII text):
//   - text (exec()) while every byte is ASCII, as most output is: straight into the str that
//     will be the result, grown in place (PyUnicode_Resize of an unshared str reallocates it,
//     and glibc moves a large block with mremap: no copy, the pages written stay);
//   - otherwise into a block grown the same way with realloc (at the first non-ASCII byte the
//     text so far moves there), made into bytes, or decoded as UTF-8 with errors replaced, at
//     the end.
// Append runs without the GIL (it takes it only to grow or drop the str); the rest needs it, the
// destructor included.
class OutputSink {
 public:
  OutputSink(std::size_t cap, bool text) : cap_(cap), ascii_(text) {}
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;
  ~OutputSink() {
    Py_XDECREF(str_);
    std::free(data_);
  }

  void Append(std::string_view b) {
    const std::size_t kept = ascii_ ? str_size_ : size_;
    const std::size_t n = std::min(b.size(), cap_ == 0 ? b.size() : cap_ - std::min(cap_, kept));
    dropped_ += b.size() - n;
    b = b.substr(0, n);
    if (b.empty()) return;
    if (ascii_) {
      if (IsAscii(b) && GrowStr(str_size_ + b.size())) {
        std::memcpy(PyUnicode_1BYTE_DATA(str_) + str_size_, b.data(), b.size());
        str_size_ += b.size();
        return;
      }
      LeaveStr();
    }
    if (!GrowBlock(size_ + b.size())) {  // kept as the cap would: read and dropped
      dropped_ += b.size();
      return;
    }
    std::memcpy(data_ + size_, b.data(), b.size());
    size_ += b.size();
  }

  std::uint64_t dropped() const { return dropped_; }

  // The output as exec() or run() return it: str for text, else bytes.
  py::object Finish(bool text) {
    if (ascii_ && str_ != nullptr) {
      PyObject* str = std::exchange(str_, nullptr);
      if (PyUnicode_Resize(&str, static_cast<Py_ssize_t>(str_size_)) != 0) {
        Py_DECREF(str);
        throw py::error_already_set();
      }
      return py::reinterpret_steal<py::object>(str);
    }
    return ToPython({data_ != nullptr ? data_ : "", size_}, text);
  }

 private:
  // The growth both buffers share: at least `need`, doubling, 64 KiB first, never past the cap.
  std::size_t NextCapacity(std::size_t need, std::size_t capacity) const {
    std::size_t want = std::max({need, 2 * capacity, std::size_t{64} << 10});
    return cap_ == 0 ? want : std::min(want, std::max(cap_, need));
  }

  bool GrowStr(std::size_t need) {
    if (need <= str_capacity_) return true;
    const std::size_t want = NextCapacity(need, str_capacity_);
    py::gil_scoped_acquire acquire;
    if (str_ == nullptr) {
      str_ = PyUnicode_New(static_cast<Py_ssize_t>(want), 127);
    } else if (PyUnicode_Resize(&str_, static_cast<Py_ssize_t>(want)) != 0) {
      PyErr_Clear();  // str_ is unchanged: the text moves to the block
      return false;
    }
    if (str_ == nullptr) {
      PyErr_Clear();
      return false;
    }
    str_capacity_ = want;
    return true;
  }

  // The text so far into the block; from now on every byte goes there.
  void LeaveStr() {
    ascii_ = false;
    if (str_ == nullptr) return;
    if (GrowBlock(str_size_)) {
      std::memcpy(data_, PyUnicode_1BYTE_DATA(str_), str_size_);
      size_ = str_size_;
    } else {
      dropped_ += str_size_;
    }
    py::gil_scoped_acquire acquire;
    Py_CLEAR(str_);
  }

  bool GrowBlock(std::size_t need) {
    if (need <= capacity_) return true;
    const std::size_t want = NextCapacity(need, capacity_);
    void* grown = std::realloc(data_, want);
    if (grown == nullptr) return false;
    data_ = static_cast<char*>(grown);
    capacity_ = want;
    return true;
  }

  const std::size_t cap_;
  std::uint64_t dropped_ = 0;
  bool ascii_;  // text, and no byte >= 0x80 so far: the bytes are in str_
  PyObject* str_ = nullptr;
  std::size_t str_size_ = 0, str_capacity_ = 0;
  char* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

// Sandbox::Exec with Python arguments; returns (exit_code, timed_out, stdout, stderr,
// truncated) with the outputs as bytes, or (`text`) str as exec() returns them. Without Python
// callbacks the output is collected by OutputSinks through the handle's streaming callbacks:
// the handle then keeps only a tail, which is not used.
py::tuple Exec(client::SandboxHandle& sandbox, std::vector<std::string> argv,
               std::optional<py::bytes> input, double timeout, std::vector<std::string> env,
               std::string cwd, std::string user, const py::object& on_output,
               const py::object& on_stdout, const py::object& on_stderr, bool text) {
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
  const bool collect = !options.on_output && !options.on_stdout && !options.on_stderr;
  OutputSink out(options.max_output_bytes, text), err(options.max_output_bytes, text);
  if (collect) {
    options.on_stdout = [&out](std::string_view b) { out.Append(b); };
    options.on_stderr = [&err](std::string_view b) { err.Append(b); };
  }
  Result<ExecResult> result = Released([&] { return sandbox.Exec(argv, options); });
  // The callback's own exception comes first: it is what the caller's code did.
  callbacks.RaiseIfFailed();
  ExecResult r = Unwrap(std::move(result));
  if (!collect) {
    return py::make_tuple(r.exit_code, r.timed_out, ToPython(r.out, text), ToPython(r.err, text),
                          r.truncated);
  }
  return py::make_tuple(r.exit_code, r.timed_out, out.Finish(text), err.Finish(text),
                        out.dropped() + err.dropped() > 0);
}

// A FileEntry as the tuple agvisor.FileInfo is built from: (name, kind, mode, size, mtime in
// seconds, link_target).
py::tuple EntryTuple(const FileEntry& e) {
  return py::make_tuple(e.name, std::string(proto::EntryKindName(e.kind)), e.mode, e.size,
                        static_cast<double>(e.mtime_unix_ms) / 1000.0, e.link_target);
}

// The bytes of a Python bytes object, readable without the GIL while `b` is referenced
// (bytes are immutable).
std::string_view BytesView(const py::bytes& b) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(b.ptr(), &data, &size) != 0) throw py::error_already_set();
  return {data, static_cast<std::size_t>(size)};
}

// A port stream (client::ByteStream: the library's PortStream or agvisord's port WebSocket) for
// Python: recv and send may run on two threads at once; close() from a third
// thread while recv waits closes the stream once that recv returns.
class Port {
 public:
  explicit Port(std::unique_ptr<client::ByteStream> stream) : stream_(std::move(stream)) {}
  ~Port() {
    std::scoped_lock lock(read_mu_, write_mu_);
    stream_.reset();
  }

  py::bytes Recv(std::size_t max) {
    std::string buf;
    const std::size_t n = Blocking([&]() -> Result<std::size_t> {
      std::lock_guard lock(read_mu_);
      Result<std::size_t> read = std::size_t{0};
      if (stream_ && !closed_) {
        buf.resize(std::max<std::size_t>(max, 1));
        read = stream_->Read(buf);
      }
      if (closed_) CloseLocked();
      return read;
    });
    return {buf.data(), n};
  }

  void SendAll(const py::bytes& data) {
    std::string_view view = BytesView(data);
    Blocking([&]() -> Result<void> {
      std::lock_guard lock(write_mu_);
      if (closed_) return Error::Conflict("port stream: send after close");
      return stream_->Write(view);
    });
  }

  void ShutdownWrite() {
    Blocking([&]() -> Result<void> {
      std::lock_guard lock(write_mu_);
      if (closed_) return Ok();
      return stream_->CloseWrite();
    });
  }

  void Close() {
    Released([&] {
      std::unique_lock write(write_mu_);
      if (closed_) return;
      closed_ = true;
      (void)stream_->CloseWrite();  // the sandbox side sees EOF, so a waiting recv can end
      write.unlock();
      std::unique_lock read(read_mu_, std::try_to_lock);
      if (read.owns_lock()) CloseLocked();  // else the recv in progress closes it when it returns
    });
  }

  bool closed() const { return closed_; }

 private:
  // With read_mu_ held.
  void CloseLocked() {
    std::lock_guard lock(write_mu_);
    if (stream_) stream_->Close();
  }

  std::mutex read_mu_;
  std::mutex write_mu_;
  std::unique_ptr<client::ByteStream> stream_;
  std::atomic<bool> closed_ = false;
};

// A directory watch (client::DirWatch: in process, or agvisord's watch WebSocket) for Python:
// next(timeout) waits without the GIL; close() from another thread wakes it.
class DirectoryWatch {
 public:
  explicit DirectoryWatch(std::unique_ptr<client::DirWatch> w) : w_(std::move(w)) {}
  ~DirectoryWatch() {
    WithoutGil([&] { w_.reset(); });
  }

  // A list of (kind, path, is_dir, old_path) tuples, [] when none came within `timeout`
  // seconds, None once the watch is over. Paths are decoded as os.fsdecode does (a name that
  // is not UTF-8 keeps its bytes as surrogates).
  py::object Next(double timeout) {
    const auto ms =
        std::chrono::milliseconds(static_cast<std::int64_t>(std::max(0.0, timeout) * 1000));
    auto events = Blocking([&] { return w_->Next(ms); });
    if (!events.has_value()) return py::none();
    py::list out;
    for (const WatchEvent& e : *events) {
      out.append(py::make_tuple(std::string(proto::WatchEventKindName(e.kind)), FsDecode(e.path),
                                e.is_dir, FsDecode(e.old_path)));
    }
    return out;
  }

  void Close() {
    Released([&] { w_->Close(); });
  }

 private:
  static py::object FsDecode(const std::string& s) {
    PyObject* o = PyUnicode_DecodeFSDefaultAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
    if (o == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(o);
  }

  std::unique_ptr<client::DirWatch> w_;
};

// What Shell and Attachment share: a Process whose output a thread collects by running
// Process::Wait into a buffer of at most kMaxBuffered bytes (it stops taking output, and so the
// command is slowed by flow control, while the buffer is full), stdin, and the one stop of that
// thread. A subclass starts the thread in its constructor and stops it in its destructor.
class WaitedProcess {
 public:
  static constexpr std::size_t kMaxBuffered = 1 << 20;

  WaitedProcess(const WaitedProcess&) = delete;
  WaitedProcess& operator=(const WaitedProcess&) = delete;

  void Write(const py::bytes& data) {
    std::string_view view = BytesView(data);
    Blocking([&] { return process_->Write(view); });
  }

  void CloseStdin() {
    Blocking([&] { return process_->CloseStdin(); });
  }

 protected:
  explicit WaitedProcess(std::unique_ptr<client::Command> process) : process_(std::move(process)) {}
  ~WaitedProcess() = default;

  // Runs Process::Wait on a thread; `keep(stream, bytes)` is called with mu_ held once the buffer
  // has room (`buffered()` < kMaxBuffered), never after Stop began. The result, passed through
  // `finish` (without mu_), becomes exit_.
  template <typename Buffered, typename Keep, typename Finish>
  void StartWaiter(Buffered buffered, Keep keep, Finish finish) {
    waiter_ = std::thread([this, buffered, keep, finish] {
      auto sink = [&](int stream, std::string_view bytes) {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return buffered() < kMaxBuffered || closing_; });
        if (closing_) return;
        keep(stream, bytes);
        cv_.notify_all();
      };
      channel::ExecCallbacks callbacks;
      callbacks.on_stdout = [&](std::string_view b) { sink(1, b); };
      callbacks.on_stderr = [&](std::string_view b) { sink(2, b); };
      Result<proto::Exit> exit = finish(process_->Wait(callbacks));
      std::lock_guard lock(mu_);
      exit_ = std::move(exit);
      cv_.notify_all();
    });
  }

  // Ends the thread; later calls return at once. Under mu_ closing_ is set and `closing()` runs;
  // then, if the process still runs, `end()` makes Wait return.
  template <typename Closing, typename End>
  void StopWaiter(Closing closing, End end) {
    std::lock_guard stop(stop_mu_);
    if (!waiter_.joinable()) return;
    bool running = false;
    {
      std::lock_guard lock(mu_);
      running = !exit_.has_value();
      closing_ = true;
      closing();
      cv_.notify_all();
    }
    if (running) end();
    waiter_.join();
  }

  std::unique_ptr<client::Command> process_;
  std::mutex mu_;  // guards the members below and the subclass's buffer
  std::condition_variable cv_;
  bool closing_ = false;
  std::optional<Result<proto::Exit>> exit_;

 private:
  std::thread waiter_;
  std::mutex stop_mu_;
};

// A command under a pty (Sandbox::StartProcess) for Python; stdout and stderr in one buffer.
class Shell : public WaitedProcess {
 public:
  explicit Shell(std::unique_ptr<client::Command> process) : WaitedProcess(std::move(process)) {
    StartWaiter([this] { return buffer_.size(); },
                [this](int, std::string_view bytes) { buffer_.append(bytes); },
                [](Result<proto::Exit> exit) { return exit; });
  }

  ~Shell() {
    WithoutGil([this] { Stop(); });
  }

  // Up to `max` bytes of output; b"" when nothing came within `timeout` seconds (< 0 = wait
  // as long as it takes) or the command ended and its output has all been read.
  py::bytes Read(std::size_t max, double timeout) {
    std::string out;
    {
      py::gil_scoped_release release;
      std::unique_lock lock(mu_);
      WaitFor(cv_, lock, timeout, [&] { return !buffer_.empty() || exit_.has_value(); });
      std::size_t n = std::min(buffer_.size(), std::max<std::size_t>(max, 1));
      out = buffer_.substr(0, n);
      buffer_.erase(0, n);
      cv_.notify_all();
    }
    return {out.data(), out.size()};
  }

  void Resize(std::uint16_t rows, std::uint16_t cols) {
    Blocking([&] { return process_->Resize(rows, cols); });
  }

  void Signal(int signal) {
    Blocking([&] { return process_->Signal(signal); });
  }

  // The exit code (128+N = killed by signal N, 124 = timed out), or None when the command has
  // not ended within `timeout` seconds (< 0 = wait as long as it takes).
  std::optional<int> Wait(double timeout) {
    std::optional<Result<proto::Exit>> exit;
    {
      py::gil_scoped_release release;
      std::unique_lock lock(mu_);
      if (!WaitFor(cv_, lock, timeout, [&] { return exit_.has_value(); })) return std::nullopt;
      exit = exit_;
    }
    return Unwrap(std::move(*exit)).exit_code;
  }

  // The exit code, or None while the command runs.
  std::optional<int> Poll() {
    std::lock_guard lock(mu_);
    if (!exit_ || !exit_->ok()) return std::nullopt;
    return (*exit_)->exit_code;
  }

  std::uint32_t pid() const { return process_->pid(); }

  // Kills the command if it still runs and ends the output thread. Idempotent.
  void Close() {
    Released([this] { Stop(); });
  }

 private:
  void Stop() {
    // Wait returns once the agent reports the exit, or at once when the channel is lost.
    StopWaiter([] {}, [this] { (void)process_->Signal(SIGKILL); });
  }

  std::string buffer_;  // guarded by mu_
};

// An attachment to a background process (Sandbox::AttachProcess, a session of its own) for
// Python: the kept-then-live output as (stream, bytes) chunks, or none of it (keep_output =
// false: only the exit matters). Close() detaches by ending the session: the process runs on.
class Attachment : public WaitedProcess {
 public:
  Attachment(std::shared_ptr<client::SandboxHandle> sandbox,
             std::unique_ptr<client::Command> process, std::uint32_t pid, bool keep_output)
      : WaitedProcess(std::move(process)), sandbox_(std::move(sandbox)), pid_(pid) {
    StartWaiter([this] { return buffered_; },
                [this, keep_output](int stream, std::string_view bytes) {
                  if (!keep_output) return;
                  chunks_.emplace_back(stream, std::string(bytes));
                  buffered_ += bytes.size();
                },
                [this](Result<proto::Exit> exit) {
                  bool detached = false;
                  {
                    std::lock_guard lock(mu_);
                    detached = closing_;
                  }
                  if (!exit.ok() && !detached) {
                    // Wait only sees the session break; the sandbox's own channel says whether (and
                    // why) the sandbox died, as every other call reports it.
                    auto alive = sandbox_->ListProcesses();
                    exit = alive.ok() ? exit.error().WithContext("attach to process " +
                                                                 std::to_string(pid_) + " in " +
                                                                 sandbox_->container_name())
                                      : alive.error();
                  }
                  return exit;
                });
  }

  ~Attachment() {
    WithoutGil([this] { Stop(); });
  }

  // The next chunk as (stream, bytes), stream 1 = stdout, 2 = stderr; None when nothing came
  // within `timeout` seconds (< 0 = wait as long as it takes); (0, b"") once the process exited
  // (or this attachment was closed) and everything was read. A failed attach (no such background
  // process, another client attached, the sandbox died) raises once the chunks before it are read.
  py::object Read(double timeout) {
    std::optional<std::pair<int, std::string>> chunk;
    std::optional<Error> error;
    bool ended = false;
    {
      py::gil_scoped_release release;
      std::unique_lock lock(mu_);
      WaitFor(cv_, lock, timeout,
              [&] { return !chunks_.empty() || exit_.has_value() || closing_; });
      if (!chunks_.empty()) {
        chunk = std::move(chunks_.front());
        chunks_.pop_front();
        buffered_ -= chunk->second.size();
        cv_.notify_all();
      } else if (closing_) {
        ended = true;
      } else if (exit_) {
        ended = true;
        if (!exit_->ok()) error = exit_->error();
      }
    }
    if (error) Raise(*error);
    if (chunk) return py::make_tuple(chunk->first, ToBytes(chunk->second));
    if (ended) return py::make_tuple(0, py::bytes());
    return py::none();
  }

  // (exit_code, signal, timed_out) once the process exited, None when it still runs after
  // `timeout` seconds (< 0 = wait as long as it takes). Chunks not read yet stay readable; with
  // keep_output, a full buffer holds the process up until they are.
  py::object Wait(double timeout) {
    std::optional<Result<proto::Exit>> exit;
    bool detached = false;
    {
      py::gil_scoped_release release;
      std::unique_lock lock(mu_);
      WaitFor(cv_, lock, timeout, [&] { return exit_.has_value() || closing_; });
      exit = exit_;
      detached = closing_ && !exit_;
    }
    if (detached) Raise(Error::Conflict("process " + std::to_string(pid_) + ": detached"));
    if (!exit) return py::none();
    proto::Exit e = Unwrap(std::move(*exit));
    return py::make_tuple(e.exit_code, static_cast<int>(e.signal), e.timed_out);
  }

  // Detaches (the process runs on) and ends the output thread. Idempotent.
  void Close() {
    Released([this] { Stop(); });
  }

  bool closed() {
    std::lock_guard lock(mu_);
    return closing_ || exit_.has_value();
  }

  std::uint32_t pid() const { return pid_; }

 private:
  void Stop() {
    // Wait returns and the process keeps running.
    StopWaiter(
        [this] {
          chunks_.clear();
          buffered_ = 0;
        },
        [this] { process_->Close(); });
  }

  std::shared_ptr<client::SandboxHandle> sandbox_;
  const std::uint32_t pid_;
  std::deque<std::pair<int, std::string>> chunks_;  // guarded by mu_
  std::size_t buffered_ = 0;                        // guarded by mu_
};

// The in-process place of `host`, one for the whole Python process: the library keeps what it
// knows about a host in the place's runtime (the sandboxes paused here, the start gate, the pools'
// memory reservations, the Docker connection: one ssh process for an ssh:// host), so every
// Sandbox, pool and module-level call on that host shares it. Never destroyed (threads of the
// library may outlive module teardown).
std::shared_ptr<client::Place> InProcessPlace(const std::string& host) {
  static std::mutex mu;
  static auto* places = new std::map<std::string, std::shared_ptr<client::Place>>();
  std::lock_guard lock(mu);
  auto& place = (*places)[host];
  if (!place) place = std::shared_ptr<client::Place>(client::InProcess(host));
  return place;
}

// A sandbox for Python: the place's handle and what its creation reported.
struct Handle {
  std::shared_ptr<client::SandboxHandle> sandbox;
  bool resumed = false;
  std::string disk_warning;
  // The sandbox's idle_ttl (exec timeouts are checked against it before each exec): known at
  // create and acquire, else asked of the place once (Info). Guarded by mu.
  std::mutex mu;
  std::optional<std::optional<std::int64_t>> idle_ttl;

  std::optional<std::int64_t> IdleTtl() {
    {
      std::lock_guard lock(mu);
      if (idle_ttl) return *idle_ttl;
    }
    const auto known = Blocking([&] { return sandbox->Info(); }).idle_ttl;
    std::lock_guard lock(mu);
    idle_ttl = known;
    return known;
  }
};

// A warm pool for Python: one of its place's pools (Place::CreatePool; pool.py names it at
// random so that the pools of many Python objects never meet); it keeps the place alive. close()
// and the destructor close it, the destructor without the GIL (it waits for starts in flight).
class PoolHandle {
 public:
  PoolHandle(std::shared_ptr<client::Place> place, PoolInfo info)
      : place_(std::move(place)), info_(std::move(info)) {}
  ~PoolHandle() {
    WithoutGil([this] { (void)CloseOnce(); });
  }
  PoolHandle(const PoolHandle&) = delete;
  PoolHandle& operator=(const PoolHandle&) = delete;

  std::shared_ptr<Handle> Acquire(std::optional<std::int64_t> lifetime,
                                  std::optional<std::int64_t> idle_ttl, double wait,
                                  bool cold_create) {
    AcquireOptions o;
    o.lifetime = lifetime;
    o.idle_ttl = idle_ttl;
    o.wait = std::chrono::milliseconds(static_cast<std::int64_t>(std::max(0.0, wait) * 1000));
    o.cold_create = cold_create;
    client::Created c = Blocking([&]() -> Result<client::Created> {
      AGVISOR_RETURN_IF_ERROR(Open());
      return place_->Acquire(info_.name, o);
    });
    auto h = std::make_shared<Handle>();
    h->disk_warning = c.disk_warning;
    h->sandbox = std::move(c.handle);
    h->idle_ttl = idle_ttl;
    return h;
  }

  void WaitReady(double timeout) {
    auto ms = std::chrono::milliseconds(static_cast<std::int64_t>(std::max(0.0, timeout) * 1000));
    Blocking([&]() -> Result<void> {
      AGVISOR_RETURN_IF_ERROR(Open());
      return place_->WaitPoolReady(info_.name, ms);
    });
  }

  // The counters now; after close(), the last ones read.
  py::dict Stats() {
    Blocking([&]() -> Result<void> {
      if (closed_) return Ok();
      for (auto& p : AGVISOR_TRY(place_->ListPools())) {
        if (p.name == info_.name) info_.stats = p.stats;
      }
      return Ok();
    });
    py::dict d;
    api::ForEachPoolStat(info_.stats, [&d](const char* key, const auto& value) { d[key] = value; });
    return d;
  }

  void Close() {
    Blocking([this] { return CloseOnce(); });
  }

  const std::string& id() const { return info_.id; }

 private:
  Result<void> Open() const {
    if (!closed_) return Ok();
    return Error::Unavailable("pool " + info_.id + " is closed");
  }
  // Idempotent: the first call closes the place's pool (its last counters kept for Stats).
  Result<void> CloseOnce() {
    if (closed_.exchange(true)) return Ok();
    if (auto pools = place_->ListPools(); pools.ok()) {
      for (auto& p : *pools) {
        if (p.name == info_.name) info_.stats = p.stats;
      }
    }
    auto closed = place_->ClosePool(info_.name);
    if (!closed.ok() && closed.error().code() == ErrorCode::kNotFound) return Ok();
    return closed;
  }

  std::shared_ptr<client::Place> place_;
  PoolInfo info_;
  std::atomic<bool> closed_{false};
};

// A running sandbox's limits now (Sandbox::Update, Info): memory in bytes, 0 = no cap.
py::dict LimitsDict(const LiveLimits& l) {
  py::dict d;
  d["cpus"] = l.cpus;
  d["memory_bytes"] = l.memory_bytes;
  d["pids"] = l.pids;
  d["source"] = l.source;
  return d;
}

py::dict SnapshotDict(const SnapshotResult& r) {
  py::dict d;
  api::ForEachSnapshotField(r, [&](const char* name, const auto& value) { d[name] = value; });
  return d;
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
  d["platform"] = i.platform.empty() ? py::object(py::none()) : py::object(py::str(i.platform));
  d["host"] = i.host;
  d["limits"] = i.limits ? py::object(LimitsDict(*i.limits)) : py::object(py::none());
  return d;
}

// The place's agvisord, whose routes serve the egress log; kUnsupported in process.
client::AgvisordPlace& EgressPlace(client::Place& p) {
  auto* a = dynamic_cast<client::AgvisordPlace*>(&p);
  if (a == nullptr) {
    Raise(
        Error::Unsupported("the egress log is agvisord's (it runs the enforcers): reach it through "
                           "agvisor.connect(...), or start agvisord on the sandbox's Docker host"));
  }
  return *a;
}

}  // namespace
}  // namespace agvisor::python

// At global scope: the macro defines the module's C entry point, PyInit__core.
PYBIND11_MODULE(_core, m) {
  using namespace agvisor;  // NOLINT(google-build-using-namespace): this block only
  using agvisor::python::Attachment;
  using agvisor::python::Blocking;
  using agvisor::python::BytesView;
  using agvisor::python::DirectoryWatch;
  using agvisor::python::EntryTuple;
  using agvisor::python::FileOp;
  using agvisor::python::Handle;
  using agvisor::python::InfoDict;
  using agvisor::python::LimitsDict;
  using agvisor::python::PoolHandle;
  using agvisor::python::Port;
  using agvisor::python::Raise;
  using agvisor::python::Shell;
  using agvisor::python::SnapshotDict;
  using agvisor::python::Unwrap;
  m.doc() = "agvisor's C++ core (agvisor::Sandbox); use the `agvisor` package, not this module.";
  m.attr("DEFAULT_IMAGE") = std::string(kDefaultImage);
  m.attr("DEFAULT_DESKTOP_IMAGE") = std::string(kDefaultDesktopImage);
  m.attr("DEFAULT_DISK") = std::string(kDefaultDisk);
  m.attr("DEFAULT_SNAPSHOT_MAX_BYTES") = kDefaultSnapshotMaxBytes;
  m.attr("NAME_PREFIX") = std::string(kNamePrefix);
  m.attr("STREAM_TAIL_BYTES") = kStreamTailBytes;

  py::class_<Limits>(m, "Limits", "agvisor::Limits; disk '' = the default, 'none' = uncapped.")
      .def(py::init<>())
      .def_readwrite("cpus", &Limits::cpus)
      .def_readwrite("memory", &Limits::memory)
      .def_readwrite("pids", &Limits::pids)
      .def_readwrite("shm", &Limits::shm)
      .def_readwrite("disk", &Limits::disk);

  py::class_<egress::EgressRules>(m, "EgressRules",
                                  "agvisor::egress::EgressRules; ports empty = 80 and 443.")
      .def(py::init<>())
      .def_readwrite("allow_domains", &egress::EgressRules::allow_domains)
      .def_readwrite("allow_cidrs", &egress::EgressRules::allow_cidrs)
      .def_readwrite("ports", &egress::EgressRules::ports)
      .def_readwrite("deny_domains", &egress::EgressRules::deny_domains)
      .def_readwrite("mode", &egress::EgressRules::mode);

  py::class_<SecretSpec>(m, "SecretSpec", "agvisor::SecretSpec; value None = the operator's.")
      .def(py::init<>())
      .def_readwrite("name", &SecretSpec::name)
      .def_readwrite("hosts", &SecretSpec::hosts)
      .def_readwrite("header", &SecretSpec::header)
      .def_readwrite("value", &SecretSpec::value);

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
      .def_readwrite("labels", &SandboxSpec::labels)
      .def_readwrite("egress", &SandboxSpec::egress)
      .def_readwrite("secrets", &SandboxSpec::secrets)
      .def_readwrite("warm_shells", &SandboxSpec::warm_shells)
      .def_readwrite("platform", &SandboxSpec::platform)
      .def_readwrite("idle_action", &SandboxSpec::idle_action);

  // Pure checks, no host involved: ValueError with the C++ message.
  m.def(
      "validate_limits", [](const Limits& l) { Unwrap(ValidateLimits(l)); }, py::arg("limits"));
  // The message as ValidateSpec words it ("egress policy: domain rule '*.com': ...").
  m.def(
      "validate_egress",
      [](const egress::EgressRules& r) {
        auto policy = egress::EgressPolicy::Create(r);
        if (!policy.ok()) Raise(policy.error().WithContext("egress policy"));
      },
      py::arg("rules"));
  m.def(
      "validate_spec", [](const SandboxSpec& s) { Unwrap(ValidateSpec(s)); }, py::arg("spec"));
  m.def(
      "validate_exec_timeout",
      [](double timeout, std::optional<std::int64_t> idle_ttl) {
        Unwrap(ValidateExecTimeout(timeout, idle_ttl));
      },
      py::arg("timeout"), py::arg("idle_ttl"));

  // Desktop tokens (desktop/token.h): `key` is the gateway's 32-byte secret, raw.
  m.def(
      "mint_desktop_token",
      [](const py::bytes& key, const std::string& container, const std::string& docker_host,
         const std::string& password, std::int64_t ttl) {
        desktop::TokenKey k{std::string(key)};
        desktop::VncTarget target{container, docker_host, desktop::kVncPort, password};
        return Unwrap(desktop::MintVncToken(k, target, std::chrono::seconds(ttl)));
      },
      py::arg("key"), py::arg("container"), py::arg("docker_host"), py::arg("password"),
      py::arg("ttl"));
  // Any type (the seed's make_token mints "rdp"), settings as a JSON object's text.
  m.def(
      "mint_token",
      [](const py::bytes& key, const std::string& type, const std::string& settings_json,
         std::int64_t ttl) {
        desktop::TokenPayload p;
        p.type = type;
        p.settings_json = settings_json;
        p.expiration_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(
                (std::chrono::system_clock::now() + std::chrono::seconds(ttl)).time_since_epoch())
                .count();
        return Unwrap(desktop::MintToken(desktop::TokenKey{std::string(key)}, p));
      },
      py::arg("key"), py::arg("type"), py::arg("settings_json"), py::arg("ttl"));
  // For the tests: a token's payload as the gateway reads it (PermissionError-like
  // RuntimeError "permission_denied" for every bad token).
  m.def(
      "verify_desktop_token",
      [](const py::bytes& key, const std::string& token) {
        desktop::TokenPayload p =
            Unwrap(desktop::VerifyToken(desktop::TokenKey{std::string(key)}, token));
        py::dict d;
        d["expiration_ms"] = p.expiration_ms;
        d["type"] = p.type;
        d["container"] = p.vnc.container;
        d["docker_host"] = p.vnc.docker_host;
        d["port"] = p.vnc.port;
        d["password"] = p.vnc.password;
        d["settings_json"] = p.settings_json;
        return d;
      },
      py::arg("key"), py::arg("token"));

  py::class_<Port, std::shared_ptr<Port>>(m, "PortStream", "agvisor::PortStream.")
      .def("recv", &Port::Recv, py::arg("bufsize") = 65536)
      .def("sendall", &Port::SendAll, py::arg("data"))
      .def("shutdown_write", &Port::ShutdownWrite)
      .def("close", &Port::Close)
      .def_property_readonly("closed", &Port::closed);

  py::class_<DirectoryWatch, std::shared_ptr<DirectoryWatch>>(m, "DirectoryWatch",
                                                              "client::DirWatch.")
      .def("next", &DirectoryWatch::Next, py::arg("timeout"))
      .def("close", &DirectoryWatch::Close);

  py::class_<Shell, std::shared_ptr<Shell>>(m, "Shell", "agvisor::Process under a pty.")
      .def("write", &Shell::Write, py::arg("data"))
      .def("read", &Shell::Read, py::arg("bufsize") = 65536, py::arg("timeout") = -1.0)
      .def("resize", &Shell::Resize, py::arg("rows"), py::arg("cols"))
      .def("signal", &Shell::Signal, py::arg("signal"))
      .def("close_stdin", &Shell::CloseStdin)
      .def("wait", &Shell::Wait, py::arg("timeout") = -1.0)
      .def("poll", &Shell::Poll)
      .def("close", &Shell::Close)
      .def_property_readonly("pid", &Shell::pid);

  py::class_<Attachment, std::shared_ptr<Attachment>>(
      m, "Attachment", "Sandbox::AttachProcess: a background process's output and stdin.")
      .def("read", &Attachment::Read, py::arg("timeout") = -1.0)
      .def("wait", &Attachment::Wait, py::arg("timeout") = -1.0)
      .def("write", &Attachment::Write, py::arg("data"))
      .def("close_stdin", &Attachment::CloseStdin)
      .def("close", &Attachment::Close)
      .def_property_readonly("closed", &Attachment::closed)
      .def_property_readonly("pid", &Attachment::pid);

  // Where sandboxes live: the library on a Docker host, or agvisord (client/place.h).
  py::class_<client::Place, std::shared_ptr<client::Place>>(m, "Place", "agvisor::client::Place.")
      .def_static("in_process", &python::InProcessPlace, py::arg("host") = "")
      .def_static(
          "agvisord",
          [](const std::string& address, const std::string& token_file, const std::string& token) {
            return std::shared_ptr<client::Place>(
                Blocking([&] { return client::Agvisord(address, token_file, token); }));
          },
          py::arg("address"), py::arg("token_file") = "", py::arg("token") = "")
      // The egress log (docs/egress.md, "Log"): agvisord's, through its routes. For a sandbox
      // made in process, the agvisord enforcing Docker host `host` (as `agvisor egress`).
      .def_static(
          "egress_agvisord",
          [](const std::string& host) {
            return std::shared_ptr<client::Place>(
                Blocking([&]() -> Result<std::unique_ptr<client::AgvisordPlace>> {
                  return client::Agvisord(AGVISOR_TRY(client::EgressAgvisordAddress(host)), "");
                }));
          },
          py::arg("host") = "")
      // The last `last` records, each as its line of JSON (api::DecisionJson).
      .def(
          "egress_log",
          [](client::Place& p, const std::string& container_name, std::size_t last) {
            client::AgvisordPlace& a = python::EgressPlace(p);
            std::vector<std::string> lines;
            for (const egress::Decision& d :
                 Blocking([&] { return a.EgressLog(container_name, last); })) {
              lines.push_back(api::DecisionJson(d));
            }
            return lines;
          },
          py::arg("container_name"), py::arg("last"))
      // Calls on_record(line) for the last `last` records, then each new one, until it returns
      // False or the sandbox's network is gone. on_record's exception ends it and is raised.
      .def(
          "follow_egress_log",
          [](client::Place& p, const std::string& container_name, std::size_t last,
             py::object on_record) {
            client::AgvisordPlace& a = python::EgressPlace(p);
            bool raised = false;
            Blocking([&] {
              return a.FollowEgressLog(container_name, last,
                                       [&](const egress::Decision&, const std::string& json) {
                                         py::gil_scoped_acquire gil;
                                         try {
                                           return py::cast<bool>(on_record(json));
                                         } catch (py::error_already_set& e) {
                                           e.restore();
                                           raised = true;
                                           return false;
                                         }
                                       });
            });
            if (raised) throw py::error_already_set();
          },
          py::arg("container_name"), py::arg("last"), py::arg("on_record"))
      .def(
          "create",
          [](client::Place& p, const SandboxSpec& spec) {
            client::Created c = Blocking([&] { return p.Create(spec); });
            auto h = std::make_shared<Handle>();
            h->sandbox = std::move(c.handle);
            h->resumed = c.resumed;
            h->disk_warning = c.disk_warning;
            if (!c.resumed) h->idle_ttl = spec.idle_ttl;
            return h;
          },
          py::arg("spec"))
      .def(
          "open",
          [](client::Place& p, const std::string& container_name) {
            auto h = std::make_shared<Handle>();
            h->sandbox = Blocking([&] { return p.Open(container_name); });
            return h;
          },
          py::arg("container_name"))
      .def("list",
           [](client::Place& p) {
             std::vector<SandboxInfo> infos = Blocking([&] { return p.List(); });
             py::list out;
             for (const auto& i : infos) out.append(InfoDict(i));
             return out;
           })
      .def(
          "remove",
          [](client::Place& p, const std::string& container_name, bool erase_data) {
            Blocking([&] { return p.Remove(container_name, erase_data); });
          },
          py::arg("container_name"), py::arg("erase_data"))
      .def(
          "pause",
          [](client::Place& p, const std::string& container_name) {
            Blocking([&] { return p.Pause(container_name); });
          },
          py::arg("container_name"))
      .def(
          "resume",
          [](client::Place& p, const std::string& container_name) {
            Blocking([&] { return p.Resume(container_name); });
          },
          py::arg("container_name"))
      .def(
          "update",
          [](client::Place& p, const std::string& container_name, std::optional<double> cpus,
             std::optional<std::string> memory, std::optional<std::int64_t> pids) {
            LimitsUpdate u{.cpus = cpus, .memory = std::move(memory), .pids = pids};
            return LimitsDict(Blocking([&] { return p.Update(container_name, u); }));
          },
          py::arg("container_name"), py::arg("cpus") = py::none(), py::arg("memory") = py::none(),
          py::arg("pids") = py::none())
      .def(
          "fork",
          [](client::Place& p, const std::string& container_name, int count,
             const std::string& prefix, const std::string& image, const SandboxSpec& spec,
             std::uint64_t max_bytes) {
            ForkOptions o;
            o.count = count;
            o.prefix = prefix;
            o.image = image;
            o.spec = spec;
            o.max_bytes = max_bytes;
            client::Forked f = Blocking([&] { return p.Fork(container_name, o); });
            py::list forks;
            for (auto& c : f.sandboxes) {
              auto h = std::make_shared<Handle>();
              h->sandbox = std::move(c.handle);
              h->disk_warning = c.disk_warning;
              forks.append(h);
            }
            py::dict d;
            d["snapshot"] = SnapshotDict(f.snapshot);
            d["sandboxes"] = forks;
            d["seconds"] = f.seconds;
            return d;
          },
          py::arg("container_name"), py::arg("count"), py::arg("prefix"), py::arg("image"),
          py::arg("spec"), py::arg("max_bytes"))
      .def("list_snapshots",
           [](client::Place& p) {
             std::vector<SnapshotInfo> list = Blocking([&] { return p.ListSnapshots(); });
             py::list out;
             for (const SnapshotInfo& s : list) {
               py::dict d;
               api::ForEachSnapshotInfoField(s,
                                             [&](const char* name, const auto& v) { d[name] = v; });
               out.append(d);
             }
             return out;
           })
      .def(
          "remove_snapshot",
          [](client::Place& p, const std::string& tag) {
            Blocking([&] { return p.RemoveSnapshot(tag); });
          },
          py::arg("tag"));

  py::class_<Handle, std::shared_ptr<Handle>>(m, "Sandbox", "A handle on one sandbox.")
      .def(
          "exec",
          [](Handle& h, std::vector<std::string> argv, std::optional<py::bytes> input,
             double timeout, std::vector<std::string> env, std::string cwd, std::string user,
             const py::object& on_output, const py::object& on_stdout, const py::object& on_stderr,
             bool text) {
            return agvisor::python::Exec(*h.sandbox, std::move(argv), std::move(input), timeout,
                                         std::move(env), std::move(cwd), std::move(user), on_output,
                                         on_stdout, on_stderr, text);
          },
          py::arg("argv"), py::arg("input") = py::none(), py::arg("timeout") = 120.0,
          py::arg("env") = std::vector<std::string>{}, py::arg("cwd") = "", py::arg("user") = "",
          py::arg("on_output") = py::none(), py::arg("on_stdout") = py::none(),
          py::arg("on_stderr") = py::none(), py::arg("text") = false)
      .def(
          "read_file",
          [](Handle& h, const std::string& path) {
            std::string data = FileOp(path, [&] { return h.sandbox->ReadFile(path); });
            return py::bytes(data.data(), data.size());
          },
          py::arg("path"))
      .def(
          "write_file",
          [](Handle& h, const std::string& path, const py::bytes& data, std::uint32_t mode) {
            std::string_view view = BytesView(data);
            FileOp(path, [&] { return h.sandbox->WriteFile(path, view, mode); });
          },
          py::arg("path"), py::arg("data"), py::arg("mode") = 0644)
      .def(
          "stat",
          [](Handle& h, const std::string& path) {
            return EntryTuple(FileOp(path, [&] { return h.sandbox->Stat(path); }));
          },
          py::arg("path"))
      .def(
          "listdir",
          [](Handle& h, const std::string& path) {
            std::vector<FileEntry> entries = FileOp(path, [&] { return h.sandbox->ListDir(path); });
            py::list out;
            for (const auto& e : entries) out.append(EntryTuple(e));
            return out;
          },
          py::arg("path"))
      .def(
          "mkdir",
          [](Handle& h, const std::string& path, bool parents, std::uint32_t mode) {
            FileOp(path, [&] { return h.sandbox->Mkdir(path, parents, mode); });
          },
          py::arg("path"), py::arg("parents"), py::arg("mode"))
      .def(
          "remove_path",
          [](Handle& h, const std::string& path, bool recursive) {
            FileOp(path, [&] { return h.sandbox->RemovePath(path, recursive); });
          },
          py::arg("path"), py::arg("recursive"))
      .def(
          "upload",
          [](Handle& h, const std::string& local_path, const std::string& sandbox_dir) {
            FileOp(local_path, [&] { return h.sandbox->Upload(local_path, sandbox_dir, {}); });
          },
          py::arg("local_path"), py::arg("sandbox_dir"))
      .def(
          "download",
          [](Handle& h, const std::string& sandbox_path, const std::string& local_dir,
             std::uint64_t max_bytes) {
            FileOp(sandbox_path, [&] {
              return h.sandbox->Download(sandbox_path, local_dir,
                                         DownloadOptions{.max_bytes = max_bytes});
            });
          },
          py::arg("sandbox_path"), py::arg("local_dir"), py::arg("max_bytes") = 0)
      .def(
          "watch",
          [](Handle& h, const std::string& path, bool recursive) {
            return std::make_shared<DirectoryWatch>(
                FileOp(path, [&] { return h.sandbox->Watch(path, recursive); }));
          },
          py::arg("path"), py::arg("recursive") = true)
      .def(
          "open_port",
          [](Handle& h, std::uint16_t port) {
            return std::make_shared<Port>(Blocking([&] { return h.sandbox->OpenPort(port); }));
          },
          py::arg("port"))
      .def(
          "start_pty",
          [](Handle& h, const std::vector<std::string>& argv, std::uint16_t rows,
             std::uint16_t cols, std::vector<std::string> env, std::string cwd, std::string user) {
            ProcessOptions o;
            o.pty = true;
            o.rows = rows;
            o.cols = cols;
            o.env = std::move(env);
            o.cwd = std::move(cwd);
            o.user = std::move(user);
            return std::make_shared<Shell>(Blocking([&] { return h.sandbox->Start(argv, o); }));
          },
          py::arg("argv"), py::arg("rows"), py::arg("cols"),
          py::arg("env") = std::vector<std::string>{}, py::arg("cwd") = "", py::arg("user") = "")
      .def(
          "start_background",
          [](Handle& h, const std::vector<std::string>& argv, std::vector<std::string> env,
             std::string cwd, std::string user, bool stdin, double timeout, bool keep_awake) {
            BackgroundOptions o;
            o.env = std::move(env);
            o.cwd = std::move(cwd);
            o.user = std::move(user);
            o.stdin = stdin;
            o.timeout = timeout;
            o.keep_awake = keep_awake;
            return Blocking([&] { return h.sandbox->StartBackground(argv, o); });
          },
          py::arg("argv"), py::arg("env") = std::vector<std::string>{}, py::arg("cwd") = "",
          py::arg("user") = "", py::arg("stdin") = false, py::arg("timeout") = 0.0,
          py::arg("keep_awake") = false)
      // [(pid, argv0, running, exit_code, keep_awake)], running and recently finished.
      .def("list_processes",
           [](Handle& h) {
             std::vector<ProcessInfo> procs = Blocking([&] { return h.sandbox->ListProcesses(); });
             py::list out;
             for (const auto& p : procs) {
               out.append(py::make_tuple(p.pid, p.argv0, p.running, p.exit_code, p.keep_awake));
             }
             return out;
           })
      .def(
          "attach_process",
          [](Handle& h, std::uint32_t pid, bool keep_output) {
            std::unique_ptr<client::Command> p = Blocking([&] { return h.sandbox->Attach(pid); });
            return std::make_shared<Attachment>(h.sandbox, std::move(p), pid, keep_output);
          },
          py::arg("pid"), py::arg("keep_output") = true)
      .def(
          "signal_process",
          [](Handle& h, std::uint32_t pid, int signal) {
            Blocking([&] { return h.sandbox->Signal(pid, signal); });
          },
          py::arg("pid"), py::arg("signal"))
      // ---- desktops (desktop.h): a gui sandbox's password, screen and input ----
      .def("desktop_password",
           [](Handle& h) { return Blocking([&] { return desktop::Password(*h.sandbox); }); })
      .def("screenshot",
           [](Handle& h) {
             std::string png = Blocking([&] { return desktop::Screenshot(*h.sandbox); });
             return py::bytes(png.data(), png.size());
           })
      .def("screen_size",
           [](Handle& h) {
             desktop::ScreenSize size =
                 Blocking([&] { return desktop::GetScreenSize(*h.sandbox); });
             return py::make_tuple(size.width, size.height);
           })
      .def(
          "mouse_move",
          [](Handle& h, int x, int y) {
            Blocking([&] { return desktop::MouseMove(*h.sandbox, x, y); });
          },
          py::arg("x"), py::arg("y"))
      .def(
          "click",
          [](Handle& h, int x, int y, const std::string& button, int count) {
            desktop::MouseButton b = Unwrap(desktop::ParseMouseButton(button));
            Blocking([&] { return desktop::Click(*h.sandbox, x, y, b, count); });
          },
          py::arg("x"), py::arg("y"), py::arg("button"), py::arg("count"))
      .def(
          "drag",
          [](Handle& h, int x1, int y1, int x2, int y2, const std::string& button) {
            desktop::MouseButton b = Unwrap(desktop::ParseMouseButton(button));
            Blocking([&] { return desktop::Drag(*h.sandbox, x1, y1, x2, y2, b); });
          },
          py::arg("x1"), py::arg("y1"), py::arg("x2"), py::arg("y2"), py::arg("button"))
      .def(
          "scroll",
          [](Handle& h, int x, int y, int dy, int dx) {
            Blocking([&] { return desktop::Scroll(*h.sandbox, x, y, dy, dx); });
          },
          py::arg("x"), py::arg("y"), py::arg("dy"), py::arg("dx"))
      .def(
          "type_text",
          [](Handle& h, const std::string& text) {
            Blocking([&] { return desktop::TypeText(*h.sandbox, text); });
          },
          py::arg("text"))
      .def(
          "key",
          [](Handle& h, const std::string& combo) {
            Blocking([&] { return desktop::Key(*h.sandbox, combo); });
          },
          py::arg("combo"))
      .def_property(
          "auto_resume", [](Handle& h) { return h.sandbox->auto_resume(); },
          [](Handle& h, bool yes) { h.sandbox->SetAutoResume(yes); })
      .def("info", [](Handle& h) { return InfoDict(Blocking([&] { return h.sandbox->Info(); })); })
      .def(
          "snapshot",
          [](Handle& h, const std::string& image, bool workspace, std::uint64_t max_bytes) {
            SnapshotOptions o;
            o.image = image;
            o.include_workspace = workspace;
            o.max_bytes = max_bytes;
            return SnapshotDict(Blocking([&] { return h.sandbox->Snapshot(o); }));
          },
          py::arg("image"), py::arg("workspace"), py::arg("max_bytes"))
      .def_property_readonly("container_name",
                             [](const Handle& h) { return h.sandbox->container_name(); })
      .def_property_readonly("resumed", [](const Handle& h) { return h.resumed; })
      .def_property_readonly("disk_warning", [](const Handle& h) { return h.disk_warning; })
      // The sandbox's idle_ttl as its place knows it (None: none).
      .def_property_readonly("idle_ttl", [](Handle& h) { return h.IdleTtl(); });

  py::class_<PoolHandle, std::shared_ptr<PoolHandle>>(m, "Pool",
                                                      "A warm pool of a Place (client::Place).")
      .def_static(
          "create",
          [](std::shared_ptr<client::Place> place, const std::string& name, const SandboxSpec& spec,
             int size, double max_age, int fill_parallelism) {
            PoolOptions o;
            o.spec = spec;
            o.size = size;
            o.max_age = std::chrono::seconds(static_cast<std::int64_t>(max_age));
            o.fill_parallelism = fill_parallelism;
            PoolInfo info = Blocking([&] { return place->CreatePool(name, o); });
            return std::make_shared<PoolHandle>(std::move(place), std::move(info));
          },
          py::arg("place"), py::arg("name"), py::arg("spec"), py::arg("size"), py::arg("max_age"),
          py::arg("fill_parallelism"))
      .def("acquire", &PoolHandle::Acquire, py::arg("lifetime") = py::none(),
           py::arg("idle_ttl") = py::none(), py::arg("wait") = 0.0, py::arg("cold_create") = true)
      .def("wait_ready", &PoolHandle::WaitReady, py::arg("timeout"))
      .def("stats", &PoolHandle::Stats)
      .def("close", &PoolHandle::Close)
      .def_property_readonly("id", &PoolHandle::id);
}
