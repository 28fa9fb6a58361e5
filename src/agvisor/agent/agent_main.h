// AgentMain: the whole of agvisor-agent behind its trivial main(). Parses argv (cli.h) and
// dispatches to the subcommand; prints usage errors and help.
//
// Used by apps/agvisor-agent/main.cc.
#pragma once

namespace agvisor::agent {

// Returns the process exit code (exit_codes.h).
int AgentMain(int argc, char** argv);

}  // namespace agvisor::agent
