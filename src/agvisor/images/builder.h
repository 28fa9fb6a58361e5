// Offline image builds: a Debian root file system made by debootstrap, streamed as a tar into
// the Engine API's image import (no docker CLI, no registry).
//
// Used by `agvisor image build` and scripts/setup-host. Needs root and debootstrap on the machine
// running agvisor (the image is imported into the Docker host the client points at, which may be
// remote). Progress goes to a callback, one line at a time.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor {
namespace docker {
class Client;
}
namespace images {

struct ImageRecipe {
  std::string kind;                   // "base" or "desktop"
  std::string suite = "bookworm";     // Debian release
  std::vector<std::string> packages;  // added to debootstrap's minbase (no Recommends)
  // Files written into the new root (as root, mode 0644, their directories made) after
  // debootstrap, before `setup` runs: configuration kept as files in the source tree.
  struct File {
    std::string path;  // absolute, inside the new root
    std::string content;
  };
  std::vector<File> files;
  // A shell script run in the new root (chroot, as root) after debootstrap: users, default
  // configuration. "" = none.
  std::string setup;
};

// The recipes `agvisor image build KIND` knows. Errors: kInvalidArgument naming the known kinds.
Result<ImageRecipe> RecipeFor(std::string_view kind);
// The image name a kind is imported as ("agvisor/base:latest").
std::string ImageNameFor(std::string_view kind);

struct BuildOptions {
  std::string name;                  // "repo:tag"; "" = ImageNameFor(recipe.kind)
  std::string mirror;                // Debian mirror for debootstrap; "" = debootstrap's default
  std::string workdir = "/var/tmp";  // where the root file system is assembled (~250 MB)
  std::function<void(std::string_view line)> progress;
};

// Builds the image and returns its id. Errors: kNotFound (debootstrap missing: names the apt
// package), kPermissionDenied (not root), kInternal (debootstrap failed: its last lines), and
// the import's errors.
Result<std::string> BuildImage(docker::Client& client, const ImageRecipe& recipe,
                               const BuildOptions& options);

}  // namespace images
}  // namespace agvisor
