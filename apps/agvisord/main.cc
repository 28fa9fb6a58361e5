// agvisord: the agvisor daemon (src/agvisor/server/daemon.h).
#include "agvisor/server/daemon.h"

int main(int argc, char** argv) { return agvisor::server::DaemonMain(argc, argv); }
