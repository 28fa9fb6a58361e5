// Layered snapshots on Docker (DockerRuntime::SnapshotBaseOf / LoadLayeredImage; the promise is
// in docs/lifecycle.md, "Snapshots and forks"). A snapshot is the image the sandbox started from
// plus one layer of what changed, instead of the whole root file system imported again:
//
//   - The image's entries come from the container's root as the Docker host mounts it
//     (GraphDriver MergedDir, overlay2): under gVisor the sandbox's writes stay inside the
//     sandbox, so that directory is the image as the sandbox started with it. It is read on the
//     host (a local Docker only), never written; symlinks are not followed.
//   - The agent archives what changed since the container was made (read-file --layer-since,
//     TarStreamWriter's layer mode), with whiteouts for the image's names that are gone. The
//     core checks that stream (TarStreamChecker with whiteouts) on its way here.
//   - Docker's import cannot put a layer on an image; POST /images/load can: an archive whose
//     manifest lists the image's layers plus the new one. The daemon reuses the layers it has
//     (by their chain of diff ids) and reads only the new layer's file, so the archive holds
//     just that file, the configuration and the manifest (checked on Engine API 1.41, Docker
//     20.10). The new layer's diff id (its sha256) must be in the configuration, which comes
//     before nothing in the archive but must be known before the layer's header: the layer is
//     kept in an unnamed temporary file on this host while it is hashed, then sent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"
#include "agvisor/channel/channel.h"
#include "agvisor/sandbox/runtime.h"

namespace agvisor {
namespace docker {
class Client;
}  // namespace docker

// The most layers a snapshot's image may have: overlay2 mounts at most 128 lower directories
// (Docker refuses deeper images); past this a snapshot sends the whole file system (one layer).
inline constexpr std::size_t kMaxSnapshotLayers = 100;

// The entries below the host directory `root` (the container's merged root), as absolute paths
// inside it, each ending in a NUL byte, then one more NUL (SnapshotBase::tree). Of a directory
// at an absolute path of `excludes`, only its own names are listed (a layer whites them out:
// it is empty in the snapshot), nothing deeper. Symlinks are listed, never followed. Errors:
// kNotFound (no `root`), kPermissionDenied (this process may not read it), kResourceExhausted (more
// than `max_entries`), kUnavailable (other read errors).
Result<std::string> ListImageTree(const std::string& root, const std::vector<std::string>& excludes,
                                  std::uint64_t* entries, std::uint64_t max_entries = 4'000'000);

// Docker's RFC 3339 time ("2026-12-06T09:15:04.416530473Z") as "SECONDS.NANOS"; nullopt when it
// is not one (pure).
std::optional<std::string> SecondsDotNanos(std::string_view rfc3339);

// The layers a snapshot of a container running `image` goes on: the image's layers without
// the agent's (the derived image's top layer, agent_image.h). Errors: kUnsupported (not a
// derived image, or kMaxSnapshotLayers reached) (pure).
Result<std::vector<std::string>> SnapshotLayersOf(const std::vector<std::string>& image_layers,
                                                  bool has_agent_layer);

// Reads the layer tar from `layer` into an unnamed temporary file while hashing it, then loads
// the image archive (layer, configuration, manifest) into `docker` as `ref`. Returns the image's
// id. Errors: `layer`'s (nothing sent), kResourceExhausted (no room), the load's.
Result<std::string> LoadLayeredImage(docker::Client& docker, std::string_view ref,
                                     const ImageConfig& config,
                                     const std::vector<std::string>& base_layers,
                                     const channel::ByteSource& layer);

}  // namespace agvisor
