// Sandbox's files (sandbox.h): reads (large regular files by an exec of the agent's read-file),
// writes, stat, listing, mkdir, remove, and tar uploads and downloads with the host's rules.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "agvisor/base/subprocess.h"
#include "agvisor/base/tar_stream.h"
#include "agvisor/proto/exit_codes.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/sandbox.h"

namespace agvisor {

namespace {

Result<void> CheckAbsolute(std::string_view op, std::string_view path) {
  if (path.empty() || path.front() != '/') {
    return Error::InvalidArgument(std::string(op) + ": sandbox path '" + std::string(path) +
                                  "' must be absolute");
  }
  return Ok();
}

// Regular files at least this large are read (ReadFile) or downloaded (DownloadTar) by a
// `docker exec` of `agvisor-agent read-file`: Docker's exec stream, the transport ceiling,
// instead of the channel over PID 1's attached stdio, which moved bulk data at 0.55-0.85 of it
// (bench/). The exec costs ~100 ms to start and the STAT before it one channel round trip; at
// this size the faster stream has paid for both. (A directory's size is not known up front: its
// tar takes the channel.)
constexpr std::uint64_t kBulkReadBytes = 32u << 20;

bool IsBulk(const Result<FileEntry>& st) {
  return st.ok() && st->kind == proto::EntryKind::kFile && st->size >= kBulkReadBytes;
}

}  // namespace

Result<std::string> Sandbox::ReadFile(std::string_view path) {
  // Grown as bytes arrive, never sized from the STAT: that size is the sandbox's word.
  std::string data;
  AGVISOR_RETURN_IF_ERROR(ReadFileTo(path, channel::AppendingSink(data)));
  return data;
}

Result<void> Sandbox::ReadFileTo(std::string_view path, const channel::ByteSink& sink,
                                 std::uint64_t offset, std::optional<std::uint64_t> length) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("read file", path));
  if (length && *length == 0) {
    // Nothing to send, but the file must exist: a STAT answers that.
    auto st = Stat(path);
    if (!st.ok()) return st.error();
    return Ok();
  }
  // The range: skip `offset` bytes, pass `length`, then stop the read (a sink error of our own,
  // told apart by `done`).
  std::uint64_t skip = offset;
  std::optional<std::uint64_t> left = length;
  bool done = false;
  channel::ByteSink ranged = [&](std::string_view b) -> Result<void> {
    if (skip > 0) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(skip, b.size()));
      skip -= n;
      b.remove_prefix(n);
    }
    if (left) b = b.substr(0, static_cast<std::size_t>(std::min<std::uint64_t>(*left, b.size())));
    if (!b.empty()) AGVISOR_RETURN_IF_ERROR(sink(b));
    if (left) {
      *left -= b.size();
      if (*left == 0) {
        done = true;
        return Error::Internal("read file: range complete");
      }
    }
    return Ok();
  };
  auto ch = AGVISOR_TRY(Channel());
  // A STAT that fails (no such file, ...) leaves the answer to FILE_READ, with its own wording.
  // Its size only picks the transport; nothing is allocated from it.
  auto st = ch->Stat(path);
  if (IsBulk(st)) {
    auto bulk = ReadByExec(path, /*tar=*/false, ranged);
    if (done) return Ok();
    if (!bulk.ok()) return bulk.error();
    if (*bulk) return Ok();
    // An agent without read-file (a sandbox made by an older agvisor): the channel does it.
  }
  auto r = ch->ReadFileTo(path, ranged);
  if (done) return Ok();
  if (!r.ok()) return ch->broken() ? Diagnose(r.error()) : r.error();
  return Ok();
}

Result<bool> Sandbox::ReadByExec(std::string_view path, bool tar, const channel::ByteSink& sink) {
  // Docker keeps an exec running (and drains its output) after its client went away: the agent
  // watches its stdin, held open by the runtime and closed when the sink stops the read.
  std::vector<std::string> cmd = {std::string(kAgentPath), "read-file", "--watch-stdin"};
  if (tar) cmd.emplace_back("--tar");
  cmd.emplace_back(path);
  const std::string what = (tar ? "download " : "read file ") + std::string(path);
  AGVISOR_RETURN_IF_ERROR(WakeIfPausedHere());
  std::string err;
  std::optional<Error> sink_error;
  auto code = runtime_->RunExec(
      container_id_, cmd,
      [&](std::string_view bytes) -> Result<void> {
        auto r = sink(bytes);
        if (!r.ok()) sink_error = r.error();
        return r;
      },
      [&](std::string_view bytes) {
        if (err.size() < 64 * 1024) err.append(bytes);
      });
  if (sink_error) return *sink_error;
  if (!code.ok()) {
    Error died = DiagnoseExecFailure(code.error());
    if (died.code() == ErrorCode::kSandboxDied) return died;
    return Diagnose(code.error());  // a broken stream: gives Docker a moment to record a death
  }
  if (*code == 0) return true;
  // An older agent: no read-file, or no --tar (then nothing was written either).
  if (*code == agent::kExitUsage) return false;
  // The agent's message, without its "agvisor-agent: read-file: " prefix and final newline.
  constexpr std::string_view kPrefix = "agvisor-agent: read-file: ";
  std::string_view msg = err;
  if (msg.starts_with(kPrefix)) msg.remove_prefix(kPrefix.size());
  while (!msg.empty() && msg.back() == '\n') msg.remove_suffix(1);
  const int wire = *code - agent::kReadFileExitErrorBase;
  if (wire >= 1 && proto::IsKnownWireError(static_cast<std::uint16_t>(wire))) {
    return proto::ErrorPayload{static_cast<proto::WireError>(wire), std::string(msg)}
        .ToError()
        .WithContext(what);
  }
  // Killed (the sandbox ended under it?) or another failure of the exec.
  Error e =
      Error::Unavailable(what + ": agvisor-agent read-file exited with code " +
                         std::to_string(*code) + (msg.empty() ? "" : ": " + std::string(msg)));
  return Diagnose(e);
}

Result<void> Sandbox::WriteFile(std::string_view path, std::string_view data, std::uint32_t mode) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("write file", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->WriteFile(path, data, mode, /*make_parents=*/true);
  if (!r.ok()) return Diagnose(r.error());
  return Ok();
}

Result<FileEntry> Sandbox::Stat(std::string_view path) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("stat", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->Stat(path);
  if (!r.ok()) return Diagnose(r.error());
  return r;
}

Result<std::vector<FileEntry>> Sandbox::ListDir(std::string_view path) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("list", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->List(path);
  if (!r.ok()) return Diagnose(r.error());
  return r;
}

Result<void> Sandbox::Mkdir(std::string_view path, bool parents, std::uint32_t mode) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("mkdir", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->Mkdir(path, mode, parents);
  if (!r.ok()) return Diagnose(r.error());
  return Ok();
}

Result<void> Sandbox::Remove(std::string_view path, bool recursive) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("remove", path));
  auto ch = AGVISOR_TRY(Channel());
  auto r = ch->Remove(path, recursive);
  if (!r.ok()) return Diagnose(r.error());
  return Ok();
}

namespace {

// Reads all of fd (a tar process's stdout) as a ByteSource.
channel::ByteSource FdSource(int fd) {
  return [fd](std::span<char> buf) -> Result<std::size_t> {
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno != EINTR) return Error::FromErrno("read from tar", errno);
    }
  };
}

Result<void> TarFinished(Subprocess& tar, std::string_view what) {
  std::string err;
  if (tar.stderr_fd()) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(tar.stderr_fd().get(), buf, sizeof buf)) > 0) {
      if (err.size() < 4096) err.append(buf, static_cast<std::size_t>(n));
    }
  }
  auto st = AGVISOR_TRY(tar.Wait());
  if (!st.success()) {
    return Error::Internal(std::string(what) + ": tar " + st.ToString() +
                           (err.empty() ? "" : ": " + err));
  }
  return Ok();
}

}  // namespace

namespace {

// GNU tar's --transform expression naming the archive's top entry `name` (its first name
// component replaced; symlink targets left alone: flag S). In the replacement `\`, `&` and the
// delimiter are special: each is escaped with a backslash.
Result<std::string> RenameTopTransform(std::string_view name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find_first_of(std::string_view("/\n\0", 3)) != std::string_view::npos) {
    return Error::InvalidArgument("upload: the name to copy as, '" + std::string(name) +
                                  "', must be one path component without a newline");
  }
  std::string escaped;
  for (char c : name) {
    if (c == '\\' || c == '&' || c == '|') escaped += '\\';
    escaped += c;
  }
  return "s|^[^/]*|" + escaped + "|S";
}

}  // namespace

Result<void> PackLocalPath(std::string_view local_path,
                           const std::function<Result<void>(const channel::ByteSource&)>& send,
                           const UploadOptions& options) {
  std::error_code ec;
  std::filesystem::path local(local_path);
  if (!std::filesystem::exists(std::filesystem::symlink_status(local, ec))) {
    return Error::NotFound("upload: no such local file or directory: " + std::string(local_path));
  }
  local = std::filesystem::absolute(local, ec).lexically_normal();
  if (local.filename().empty()) local = local.parent_path();
  const std::string parent = local.has_parent_path() ? local.parent_path().string() : "/";
  // The system's tar packs (links, modes, long names); the agent extracts under sandbox_dir.
  std::vector<std::string> argv = {"tar", "-C", parent, "-cf", "-"};
  if (!options.name.empty()) {
    argv.push_back("--transform=" + AGVISOR_TRY(RenameTopTransform(options.name)));
  }
  argv.insert(argv.end(), {"--", local.filename().string()});
  auto tar = AGVISOR_TRY(
      Subprocess::Spawn({.argv = std::move(argv), .pipe_stdout = true, .pipe_stderr = true}));
  auto r = send(FdSource(tar.stdout_fd().get()));
  if (!r.ok()) {
    (void)tar.Kill(SIGKILL);
    return r.error();
  }
  return TarFinished(tar, "upload " + std::string(local_path));
}

Result<void> Sandbox::Upload(std::string_view local_path, std::string_view sandbox_dir,
                             const UploadOptions& options) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("upload", sandbox_dir));
  return PackLocalPath(
      local_path, [&](const channel::ByteSource& source) { return UploadTar(sandbox_dir, source); },
      options);
}

Result<void> Sandbox::UploadTar(std::string_view sandbox_dir, const channel::ByteSource& source) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("upload", sandbox_dir));
  auto ch = AGVISOR_TRY(Channel());
  if (auto m = ch->Mkdir(sandbox_dir, 0755, true); !m.ok()) return Diagnose(m.error());
  auto r = ch->TarWrite(sandbox_dir, source);
  // An error of `source` leaves the channel intact: not a death to diagnose.
  if (!r.ok()) return ch->broken() ? Diagnose(r.error()) : r.error();
  return Ok();
}

Result<void> Sandbox::DownloadTar(std::string_view sandbox_path, const channel::ByteSink& sink) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("download", sandbox_path));
  auto ch = AGVISOR_TRY(Channel());
  // A STAT that fails leaves the answer to TAR_READ, with its own wording.
  if (IsBulk(ch->Stat(sandbox_path))) {
    auto bulk = ReadByExec(sandbox_path, /*tar=*/true, sink);
    if (!bulk.ok()) return bulk.error();
    if (*bulk) return Ok();
    // An agent without read-file --tar: the channel does it.
  }
  auto r = ch->TarRead(sandbox_path, sink);
  if (!r.ok()) return ch->broken() ? Diagnose(r.error()) : r.error();
  return Ok();
}

Result<void> UnpackIntoLocalDir(
    std::string_view local_dir,
    const std::function<Result<void>(const channel::ByteSink&)>& receive,
    const DownloadOptions& options) {
  namespace fs = std::filesystem;
  const std::string what = "download into " + std::string(local_dir);
  if (local_dir.empty()) return Error::InvalidArgument("download: empty local directory");
  // The directories this download makes for local_dir itself, deepest first: a failed download
  // removes them again (rmdir: only while empty).
  std::vector<fs::path> made;
  std::error_code ec;
  for (fs::path p = fs::absolute(fs::path(local_dir), ec).lexically_normal();
       !ec && !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
    made.push_back(p);
    if (p == p.parent_path()) break;
  }
  ec.clear();
  fs::create_directories(fs::path(local_dir), ec);
  if (ec) {
    return Error::FromErrno("download: create local directory " + std::string(local_dir),
                            ec.value());
  }
  auto remove_made = [&made] {
    for (const auto& p : made) {
      if (::rmdir(p.c_str()) != 0) break;
    }
  };
  TarReaderOptions ro;
  ro.host_rules = true;
  ro.max_bytes = options.max_bytes;
  ro.top_name = options.name;
  auto reader_r = TarStreamReader::Open(local_dir, ro);
  if (!reader_r.ok()) {
    remove_made();
    return reader_r.error().WithContext(what);
  }
  std::unique_ptr<TarStreamReader> reader = std::move(reader_r).value();
  bool refused = false;  // the error is the reader's (an entry), not the transport's
  auto r = receive([&](std::string_view b) -> Result<void> {
    auto p = reader->Push(b);
    if (!p.ok()) refused = true;
    return p;
  });
  if (r.ok()) {
    r = reader->Finish();
    if (!r.ok()) refused = true;
  }
  if (!r.ok()) {
    reader.reset();  // removes what the archive created (the reader's host rules)
    remove_made();
    return refused ? r.error().WithContext(what) : r.error();
  }
  return Ok();
}

Result<void> Sandbox::Download(std::string_view sandbox_path, std::string_view local_dir,
                               const DownloadOptions& options) {
  AGVISOR_RETURN_IF_ERROR(CheckAbsolute("download", sandbox_path));
  return UnpackIntoLocalDir(
      local_dir, [&](const channel::ByteSink& sink) { return DownloadTar(sandbox_path, sink); },
      options);
}

}  // namespace agvisor
