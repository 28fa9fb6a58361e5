// image build.
#include <iostream>

#include "agvisor/cli/common.h"
#include "agvisor/docker/client.h"
#include "agvisor/images/builder.h"
#include "agvisor/sandbox/docker_runtime/docker_runtime.h"
#include "agvisor/sandbox/sandbox.h"

namespace agvisor::cli {

void AddImage(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* image = app.add_subcommand("image", "build the images sandboxes run");
  image->require_subcommand(1);
  auto* build = image->add_subcommand(
      "build",
      "build an image offline from Debian packages (debootstrap, then a streamed import "
      "into Docker); needs root. Kinds: base (" +
          images::ImageNameFor("base") +
          ": minbase + python3, git, coreutils, procps, "
          "ca-certificates; the default image), desktop (" +
          images::ImageNameFor("desktop") +
          ": base + Xvnc, xfwm4, xfce4-panel, xfdesktop, xfce4-terminal, Firefox, xdotool; "
          "the image of --gui sandboxes)");
  auto kind = std::make_shared<std::string>();
  auto opts = std::make_shared<images::BuildOptions>();
  build->add_option("kind", *kind, "what to build: base or desktop")->required();
  build->add_option("--tag", opts->name, "image name (default agvisor/KIND:latest)");
  build->add_option("--mirror", opts->mirror, "Debian mirror URL (default: debootstrap's)");
  build->add_option("--workdir", opts->workdir, "where to assemble the root file system")
      ->capture_default_str();
  build->callback([&g, exit_code, kind, opts] {
    auto recipe = images::RecipeFor(*kind);
    if (!recipe.ok()) {
      *exit_code = ReportError(recipe.error());
      return;
    }
    auto docker = HostClient(g.host);
    if (!docker.ok()) {
      *exit_code = ReportError(docker.error());
      return;
    }
    opts->progress = [](std::string_view line) { std::cerr << line << "\n"; };
    auto id = images::BuildImage(**docker, *recipe, *opts);
    if (!id.ok()) {
      *exit_code = ReportError(id.error());
      return;
    }
    std::cout << *id << "\n";
  });
}

}  // namespace agvisor::cli
