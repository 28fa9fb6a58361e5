// One-line logging of the agent to stderr ("agvisor-agent: <message>"). Used by init and exec.
//
// Each line is one write(2), so lines from several processes never interleave mid-line. Under
// Docker, PID 1's stderr is the container log (`docker logs`).
#pragma once

#include <string_view>

namespace agvisor::agent {

void LogLine(std::string_view message);

}  // namespace agvisor::agent
