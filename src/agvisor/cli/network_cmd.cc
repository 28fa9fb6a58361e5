// network create: a Docker network that sandboxes may share (docs/cli.md, docs/security.md
// "Shared networks"). Thin: one call of Place::CreateNetwork.
#include <iostream>

#include "agvisor/cli/common.h"

namespace agvisor::cli {

void AddNetwork(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* network = AddCommand(app, "network");
  network->require_subcommand(1);
  auto* create = AddCommand(*network, "network create");
  auto name = std::make_shared<std::string>();
  create->add_option("name", *name, "the network's name")->required();
  create->callback([&g, exit_code, name] {
    auto place = g.GetPlace();
    if (!place.ok()) {
      *exit_code = ReportError(place.error());
      return;
    }
    auto id = (*place)->CreateNetwork(*name);
    if (!id.ok()) {
      *exit_code = ReportError(id.error());
      return;
    }
    std::cout << *name << "\n";
  });
}

}  // namespace agvisor::cli
