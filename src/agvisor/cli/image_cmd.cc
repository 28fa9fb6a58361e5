// image build: base and desktop (images/builder.h), kube-agent (images/kube_agent_image.h).
// Thin: one call of Place::BuildImage.
#include <iostream>

#include "agvisor/cli/common.h"

namespace agvisor::cli {

void AddImage(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* image = AddCommand(app, "image");
  image->require_subcommand(1);
  auto* build = image->add_subcommand(
      "build",
      "build an image and import it into Docker (streamed into the Engine API: no docker CLI, "
      "no registry). Kinds: base (" +
          client::DefaultImageName("base") +
          ": Debian minbase + python3, git, coreutils, procps, ca-certificates; the default "
          "image), desktop (" +
          client::DefaultImageName("desktop") +
          ": base + Xvnc, xfwm4, xfce4-panel, xfdesktop, xterm, Firefox, xdotool, xrdp; the "
          "image of --gui sandboxes): both offline from Debian packages (debootstrap), as root. "
          "kube-agent (" +
          client::DefaultImageName("kube-agent") +
          ": this build's agent and a static busybox, what a Kubernetes cluster's sandbox pods "
          "copy the agent from; push it where the nodes pull from: docs/kubernetes.md): "
          "seconds, no root");
  auto opts = std::make_shared<client::ImageBuildOptions>();
  build
      ->add_option(
          "kind", opts->kind,
          "what to build: base, desktop, e2b-base (E2B's base template, docs/e2b.md) or kube-agent")
      ->required()
      ->check(CLI::IsMember({"base", "desktop", "e2b-base", "kube-agent"}));
  build->add_option("--tag", opts->name,
                    "image name (default agvisor/KIND:latest; kube-agent: agvisor/agent:HASH, "
                    "the name the Kubernetes runtime uses unless $AGVISOR_KUBE_AGENT_IMAGE "
                    "names another)");
  build->add_option("--mirror", opts->mirror, "Debian mirror URL (default: debootstrap's)");
  build->add_option("--workdir", opts->workdir, "where to assemble the root file system")
      ->capture_default_str();
  build->add_option("--busybox", opts->busybox, "kube-agent: the static busybox to put in")
      ->capture_default_str();
  build->callback([&g, exit_code, opts] {
    auto place = g.GetPlace();
    if (!place.ok()) {
      *exit_code = ReportError(place.error());
      return;
    }
    opts->progress = [](std::string_view line) { std::cerr << EscapeForTerminal(line) << "\n"; };
    auto id = (*place)->BuildImage(*opts);
    if (!id.ok()) {
      *exit_code = ReportError(id.error());
      return;
    }
    std::cout << EscapeForTerminal(*id) << "\n";
  });
}

}  // namespace agvisor::cli
