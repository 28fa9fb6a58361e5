// network create: a Docker network that sandboxes may share (docs/cli.md, docs/security.md
// "Shared networks"). Thin: one call of the host's Runtime::CreateSharedNetwork.
#include <iostream>

#include "agvisor/cli/common.h"
#include "agvisor/sandbox/runtimes.h"

namespace agvisor::cli {

void AddNetwork(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* network = app.add_subcommand("network", "Docker networks that sandboxes may share");
  network->require_subcommand(1);
  auto* create = network->add_subcommand(
      "create",
      "make a bridge network that sandboxes join with `create --network NAME`: its members "
      "reach each other, while the host, other networks and private addresses stay closed to "
      "them (the sandbox firewall covers it). Other Docker networks are refused unless they are "
      "bridges with Docker's own interface naming");
  auto name = std::make_shared<std::string>();
  create->add_option("name", *name, "the network's name")->required();
  create->callback([&g, exit_code, name] {
    auto runtime = MakeRuntime(g.host);
    if (!runtime.ok()) {
      *exit_code = ReportError(runtime.error());
      return;
    }
    auto id = (*runtime)->CreateSharedNetwork(*name);
    if (!id.ok()) {
      *exit_code = ReportError(id.error());
      return;
    }
    std::cout << *name << "\n";
  });
}

}  // namespace agvisor::cli
