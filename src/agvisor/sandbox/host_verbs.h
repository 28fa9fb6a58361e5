// The values of the verbs of a host itself rather than of one sandbox (`agvisor doctor`, `image
// build`): runtime-neutral, so both runtimes fill them and client/place.h passes them on. The
// factory (runtimes.h) runs the verbs on the right runtime's side.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace agvisor {

// One check of the host where sandboxes run (`agvisor doctor`: DiagnoseHost, runtimes.h).
struct HostCheck {
  enum class Status { kOk, kWarn, kFail, kInfo };
  std::string name;  // "docker", "runtime", "sandbox", "kubernetes", "rbac", ...
  Status status = Status::kOk;
  std::string detail;  // what was found
  std::string fix;     // for kWarn/kFail: what to do
};

// What an image build makes (`agvisor image build`, docs/cli.md "Images").
struct ImageBuildOptions {
  std::string kind;                      // "base", "desktop" or "kube-agent"
  std::string name;                      // "repo:tag"; "" = the kind's own (DefaultImageName)
  std::string mirror;                    // base, desktop: Debian mirror ("" = debootstrap's)
  std::string workdir = "/var/tmp";      // base, desktop: where the root file system is made
  std::string busybox = "/bin/busybox";  // kube-agent: the static busybox to put in
  // true: an image of that name already on the host is kept (the result is then "") and
  // `on_build` is called before a build starts, so a caller can say why it waits.
  bool if_missing = false;
  std::function<void()> on_build;
  std::function<void(std::string_view line)> progress;
};

}  // namespace agvisor
