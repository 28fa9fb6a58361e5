// agvisor-agent: the in-sandbox agent (see src/agvisor/agent/agent_main.h and docs/agent.md).
#include "agvisor/agent/agent_main.h"

int main(int argc, char** argv) { return agvisor::agent::AgentMain(argc, argv); }
