// File operations of the agent channel (docs/protocol.md, "Files"): FILE_READ, FILE_WRITE, STAT,
// LIST, MKDIR, REMOVE, TAR_READ, TAR_WRITE.
//
// Used by the agent's session loop, which owns all I/O with the host: this module never touches
// the channel. The loop creates one FileOp per operation stream with StartFileOp and then:
//   1. calls Immediate() once. A reply means the operation is over: send it (OK, STAT_RESULT,
//      LIST_RESULT or ERROR) and drop the op. One-shot ops (STAT, LIST, MKDIR, REMOVE) always
//      answer here; streaming ops answer here only when they could not start (missing file, ...).
//   2. is_streaming_out() (FILE_READ, TAR_READ): while the stream has credit, Pull(credit) and send
//      the bytes as DATA; when a chunk says `end`, send END and drop the op. A Pull error: send
//      ERROR (ErrorReply) instead and drop the op.
//   3. is_streaming_in() (FILE_WRITE, TAR_WRITE): Push() the payload of every DATA frame; on END
//      call Finish() and send its reply. A Push error: send ERROR (ErrorReply), drop the op and
//      ignore the stream's later DATA / END.
// Dropping an op at any point (CLOSE, session gone) releases everything it holds: a FILE_WRITE
// that did not Finish leaves no file behind, its temporary file is removed.
//
// Paths are absolute paths of the sandbox's own file system, resolved by this process: the agent
// runs inside the sandbox, so symlinks resolve inside it and nothing can reach the host. Empty
// paths, relative paths and paths containing a NUL byte are refused (kInvalidArgument). Which
// symlinks are followed:
//   - FILE_READ, FILE_WRITE, LIST, TAR_WRITE (the directory), MKDIR's parents: all of them, like a
//     shell's `cat`, `>`, `ls`, `cd`. FILE_WRITE to a symlink replaces the file it points to.
//   - STAT, REMOVE: not the last component (STAT reports the link itself with its target; REMOVE
//     removes the link, never what it points to; a recursive REMOVE never descends through one).
//   - TAR_READ: not the last component, nor any symlink inside the tree (stored as symlinks).
//   - TAR_WRITE's entries: none at all (see base/tar_stream.h for the extraction rules).
// TAR_WRITE creates its directory (mkdir -p, 0755) when missing; FILE_WRITE creates the parents
// only with the kFileWriteParents flag. Replaced files get the requested mode and keep their owner.
//
// Errors (ERROR frames; the message names the operation, the path and the failing call's errno):
// kInvalidArgument (bad path, not a directory / is a directory, a bad tar stream), kNotFound,
// kConflict (exists, directory not empty), kPermissionDenied, kResourceExhausted ("the sandbox's
// disk is full", a LIST too large for one frame), kInternal (anything else).
//
// Single-threaded: a FileOp is used by the loop's thread only. File system calls block (local,
// short), like every file read in the agent.
#pragma once

#include <cstddef>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/proto/messages.h"

namespace agvisor::agent {

// One frame to send on the operation's stream: its type and encoded payload.
struct Reply {
  proto::Type type = proto::Type::kOk;
  std::string payload;
};

// Bytes for DATA frames; `end`: this is the last chunk (send END after its data, which may be
// empty). Never empty with end == false.
struct Chunk {
  std::string data;
  bool end = false;
};

// ERROR reply for `error` (code mapped with proto::ToWireError, message cut to the frame limit).
Reply ErrorReply(const Error& error);

class FileOp {
 public:
  virtual ~FileOp() = default;

  // Called once, right after StartFileOp. A value: the op is finished, send this reply; nullopt
  // (the default): the op streams.
  virtual std::optional<Reply> Immediate() { return std::nullopt; }

  // FILE_READ, TAR_READ: the agent sends DATA (Pull) then END.
  virtual bool is_streaming_out() const { return false; }
  // FILE_WRITE, TAR_WRITE: the host sends DATA (Push) then END (Finish).
  virtual bool is_streaming_in() const { return false; }

  // Streaming out: the next bytes, at most `max_bytes` (> 0) of them. Errors: those of read(2)
  // and (TAR_READ) of walking the tree, naming the file; kInternal on a non-streaming-out op.
  virtual Result<Chunk> Pull(std::size_t max_bytes);

  // Streaming in: the payload of one DATA frame (any size, arbitrary split). Errors: those of
  // write(2) (ENOSPC: kResourceExhausted "the sandbox's disk is full"), and (TAR_WRITE) a refused
  // or malformed entry (kInvalidArgument naming it); kInternal on a non-streaming-in op.
  virtual Result<void> Push(std::string_view data);

  // Streaming in, after END: completes the op and returns OK or ERROR. FILE_WRITE: flushes,
  // applies the mode and renames the temporary file over the target; TAR_WRITE: checks that the
  // archive ended cleanly and applies directory modes and times.
  virtual Reply Finish();
};

// The op for a frame of `type` (kFileRead ... kTarWrite) with its `payload`. Never null. The
// loop checks payloads with proto::CheckPayload first (a malformed one ends the session with
// kProtocol); should one still not decode here, or `type` not be a file op, the op's Immediate()
// is an ERROR kInvalidArgument.
std::unique_ptr<FileOp> StartFileOp(proto::Type type, std::string_view payload);

// `agvisor-agent read-file`: FILE_READ of `path` (TAR_READ with `tar`), written to stdout
// (blocking writes), holding init's activity socket at `socket_path` while it runs. Returns the
// exit code (proto/exit_codes.h): 0, or kReadFileExitErrorBase + the wire code with the error on
// stderr.
// With `watch_stdin`, it ends (exit 0) once stdin reaches its end: the reader went away. With
// `tar`, what is below each absolute path of `exclude` is left out (TarStreamWriter's prune).
// With `layer_since` (TarStreamWriter's layer mode, --layer-since), the image's tree is read
// from stdin first (ParseLayerBaseline), and `layer_whole` is archived whole.
int RunReadFile(const std::string& path, bool tar, const std::string& socket_path,
                bool watch_stdin = false, const std::vector<std::string>& exclude = {},
                const std::optional<timespec>& layer_since = std::nullopt,
                const std::vector<std::string>& layer_whole = {});

// The image's tree for a layer, as the host sends it: every entry's absolute path ending in a
// NUL byte, then one more NUL. `bytes` is what came so far; returns the number of bytes used
// (the end marker's included) and fills `baseline` (archive names of directories -> sorted
// names), or 0 while the end marker has not come. Errors: kInvalidArgument (a path that is not
// absolute, or "/", or has an empty, "." or ".." component).
Result<std::size_t> ParseLayerBaseline(
    std::string_view bytes, std::map<std::string, std::vector<std::string>, std::less<>>* baseline);

}  // namespace agvisor::agent
