// Snapshots and forks of a sandbox's file system (docs/lifecycle.md, "Snapshots and forks").
//
// A snapshot is an image of the sandbox's root file system as the sandbox sees it. Docker's
// commit cannot make it: under gVisor the sandbox's writes stay inside the sandbox's own overlay,
// and Docker's view of the container's layer does not have them. So the agent archives "/" from
// inside (an exec of `agvisor-agent read-file --tar --exclude ... /`, Docker's exec stream),
// and the host streams that tar into the runtime's image import. The stream is the sandbox's
// word: it passes the project's own checker (base/tar_check.h) chunk by chunk on the host before
// any byte reaches the import, and a refused, truncated or oversize stream aborts the upload
// (the runtime never sees a complete body) and leaves no image.
//
// Left out of every snapshot: /proc, /sys, /dev (kept as empty directories), the agent's own
// files (kAgentDir, its socket directory), the files the runtime mounts per container
// (/etc/hosts, /etc/hostname, /etc/resolv.conf), and /workspace unless asked for. Device nodes,
// FIFOs and sockets are not archived. Hard links come out as separate copies. Processes and
// memory are not kept: runsc's checkpoint/restore does not work on the hosts agvisor targets
// (docs/lifecycle.md has the measured failure).
//
// A fork is a snapshot with /workspace in it, then N named sandboxes from it: each new sandbox's
// /workspace volume is empty when its container is made, so the runtime copies the image's
// /workspace into it (Docker copies an image's content into an empty volume mounted over it,
// with owners and modes): each fork starts with its own copy of the source's /workspace.
//
// Where snapshots go: a snapshot is named by a tag and made only in agvisor's snapshot repository
// (kDefaultSnapshotRepository unless agvisord's --snapshot-repository says otherwise), as
// "REPOSITORY:TAG"; `create --image snapshot:TAG` starts from it (ResolveSnapshotImage, in
// Sandbox::Create, so every door resolves it alike). A snapshot replaces an existing tag only
// when that image is itself a snapshot: it carries kLabelSnapshotId, which only the host's import
// sets (the labels of the source image that start with "agvisor" are dropped, and a tar stream
// sets no labels). So a hostile sandbox (or a caller talked into it) can never replace the
// default image, a host container's image or one a user tagged by hand.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor {

class Runtime;
class Sandbox;

// The repository snapshots are made in by default ("agvisor/snapshot:TAG").
inline constexpr std::string_view kDefaultSnapshotRepository = "agvisor/snapshot";
// How a create's image names a snapshot: "snapshot:TAG" (ResolveSnapshotImage). It shadows a
// Docker image of that name, still reachable with its registry spelled out in front.
inline constexpr std::string_view kSnapshotImagePrefix = "snapshot:";
// The label only the host's import sets on a snapshot (a random id per import): an image without
// it was not made as a snapshot and is never replaced by one.
inline constexpr std::string_view kLabelSnapshotId = "agvisor.snapshot.id";

// The default cap on a snapshot's tar stream.
inline constexpr std::uint64_t kDefaultSnapshotMaxBytes = std::uint64_t{8} << 30;
// The most sandboxes one fork makes.
inline constexpr int kMaxForkCount = 16;

struct SnapshotOptions {
  // The snapshot's name: a tag, e.g. "app-v1", made as "REPOSITORY:TAG" in the snapshot
  // repository (SnapshotRepository()); "snapshot:TAG" and "REPOSITORY:TAG" name it too.
  // Anything else (another repository, a digest, a bad tag) is refused: NormalizeSnapshotImage.
  std::string image;
  // Include /workspace (the named sandbox's volume, as the sandbox sees it).
  bool include_workspace = false;
  // The most bytes the tar stream may have (headers and padding included); past it the
  // snapshot fails with kResourceExhausted and no image is left. > 0.
  std::uint64_t max_bytes = kDefaultSnapshotMaxBytes;
  // Make a layer of what changed over the sandbox's image where the runtime can (a local
  // Docker with overlay2; docs/lifecycle.md); false: always the whole file system.
  bool layered = true;
  // Called from the calling thread as checked bytes go to the import (about every 4 MiB and at
  // the end) with the bytes so far.
  std::function<void(std::uint64_t bytes)> progress;
};

struct SnapshotResult {
  std::string image;        // "REPOSITORY:TAG"
  std::string image_id;     // "sha256:..."
  std::uint64_t bytes = 0;  // of the tar stream
  std::uint64_t entries = 0;
  std::uint64_t file_bytes = 0;  // of regular files' data
  double seconds = 0;
  // A layer over the sandbox's image (only what changed) rather than the whole file system.
  bool layered = false;
  std::uint64_t whiteouts = 0;     // of the layer: the image's entries it deletes
  std::uint64_t image_layers = 0;  // the snapshot image's layers, its own included
  // Why the whole file system went instead of a layer ("" when layered).
  std::string whole_because;
};

// The image of snapshot `name` in `repository`: "TAG", "snapshot:TAG" or "REPOSITORY:TAG" ->
// "REPOSITORY:TAG". A tag is Docker's: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}. Pure. Errors:
// kInvalidArgument naming the rule and the accepted spellings.
Result<std::string> NormalizeSnapshotImage(std::string_view name, std::string_view repository);
// As above in this process's snapshot repository.
Result<std::string> NormalizeSnapshotImage(std::string_view name);
// A create's image: "snapshot:TAG" -> "REPOSITORY:TAG" (this process's repository); any other
// image as it is. Errors: kInvalidArgument (a bad TAG).
Result<std::string> ResolveSnapshotImage(std::string_view image);
// Whether `tag` is a Docker tag (pure). Errors: kInvalidArgument naming the rule.
Result<void> ValidateSnapshotTag(std::string_view tag);

// A repository snapshots may go to: a Docker repository name ([HOST[:PORT]/]path, lower-case
// path components), neither a digest nor a tag, and under agvisor/ only agvisor/snapshot[/...]
// (agvisor/ holds agvisor's own images: base, desktop, with-agent, ...). Pure. Errors:
// kInvalidArgument.
Result<void> ValidateSnapshotRepository(std::string_view repository);
// This process's snapshot repository: kDefaultSnapshotRepository unless set (agvisord's
// --snapshot-repository sets it once at start). Thread-safe.
std::string SnapshotRepository();
// Errors: ValidateSnapshotRepository's (then nothing changed).
Result<void> SetSnapshotRepository(std::string_view repository);

// One snapshot on a host (ListSnapshots): an image in the snapshot repository that carries
// kLabelSnapshotId. What a snapshot's labels say of it is the host's own word (only its import
// sets them).
struct SnapshotInfo {
  std::string tag;         // "app-v1"
  std::string image;       // "REPOSITORY:TAG", what `create --image snapshot:TAG` starts from
  std::string image_id;    // "sha256:..."
  std::string of;          // the sandbox it was made of
  bool workspace = false;  // it holds /workspace (a fork's)
  std::int64_t created_unix = 0;  // when it was made (the host's clock)
  std::int64_t size_bytes = 0;    // the image's, the layers it shares with others included
};

// The snapshots of `runtime`'s host in this process's snapshot repository, by tag. Images there
// without kLabelSnapshotId (tagged by hand) are not snapshots and are left out. Errors:
// kUnavailable; kUnsupported (a runtime that makes no images lists none: an empty list).
Result<std::vector<SnapshotInfo>> ListSnapshots(Runtime& runtime);

// Removes snapshot `name` ("TAG", "snapshot:TAG" or "REPOSITORY:TAG", as NormalizeSnapshotImage)
// and the images the runtime derived from it (the image with the agent), so that the layers no
// other image holds go with them; layers another snapshot stacks on stay. Only a snapshot is
// removed: any other image is refused before anything is asked of the runtime, and so is an
// image of the snapshot repository that was not made as a snapshot. Errors: kInvalidArgument
// (a name outside the repository, a bad tag), kNotFound (no such snapshot), kPermissionDenied
// (an image of that name that is no snapshot), kConflict (a sandbox, running or stopped, runs
// from it: names it and how to remove it; nothing of the snapshot is removed then),
// kUnsupported (the runtime makes no images), kUnavailable.
Result<void> RemoveSnapshot(Runtime& runtime, std::string_view name);

// The absolute paths a snapshot leaves out (pure): see the file comment.
std::vector<std::string> SnapshotExcludes(bool include_workspace);

struct ForkOptions {
  int count = 1;  // 1..kMaxForkCount
  // The forks are named PREFIX-1 .. PREFIX-N; "" = "<source name>-fork". Each must be a valid
  // sandbox name (ValidateName) and no sandbox or volume of that name may exist.
  std::string prefix;
  // The snapshot's name (SnapshotOptions::image); "" = "fork-<source name>-<unix seconds>".
  std::string image;
  // The forks' spec: limits, network, lifetime, ... Its name, image and host are Fork's.
  SandboxSpec spec;
  std::uint64_t max_bytes = kDefaultSnapshotMaxBytes;
  bool layered = true;                                // the snapshot's (SnapshotOptions)
  std::function<void(std::uint64_t bytes)> progress;  // the snapshot's (SnapshotOptions)
};

struct ForkResult {
  SnapshotResult snapshot;
  std::vector<std::unique_ptr<Sandbox>> sandboxes;  // PREFIX-1 .. PREFIX-N, running
  double seconds = 0;                               // the whole fork
};

// The fork names for `options` of the sandbox named `source_name` (pure). Errors:
// kInvalidArgument (count, a name ValidateName refuses).
Result<std::vector<std::string>> ForkNames(std::string_view source_name,
                                           const ForkOptions& options);

// Snapshot of `source` with /workspace, then options.count named sandboxes from it (an anonymous
// source's forks are named after its container name, the prefix left out),
// each with its own copy of /workspace (the first created alone, the others concurrently: each
// is a container start, bounded by the runtime's start gate). On a failure the forks made are
// removed with their volumes; the image stays when it was made (the message names it). Errors:
// kInvalidArgument (options), kConflict (a fork's name is taken: nothing was made), Snapshot's
// and Create's.
Result<ForkResult> Fork(Sandbox& source, const ForkOptions& options);

}  // namespace agvisor
