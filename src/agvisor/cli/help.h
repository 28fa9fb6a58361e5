// The names and help texts of agvisor's subcommands, in one table (internal to src/agvisor/cli):
// each Add* function takes its command's text from here, and docs/cli.md describes the same list.
#pragma once

#include <CLI/CLI.hpp>
#include <span>
#include <string_view>

namespace agvisor::cli {

struct CommandHelp {
  std::string_view path;  // "create", or "network create" for a subcommand of a subcommand
  std::string_view help;  // what `agvisor --help` (or `agvisor network --help`) shows for it
};

// Every subcommand with its help, top-level ones in the order `agvisor --help` lists them.
std::span<const CommandHelp> CommandHelps();

// Adds the subcommand named by the last word of `path` to `parent`, with the table's help text.
// `path` must be in the table (a missing one is a programming error: it aborts at start-up).
CLI::App* AddCommand(CLI::App& parent, std::string_view path);

}  // namespace agvisor::cli
