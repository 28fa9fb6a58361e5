// agvisor: the command line. Everything is in src/agvisor/cli.
#include "agvisor/cli/cli.h"

int main(int argc, char** argv) { return agvisor::cli::RunCli(argc, argv); }
