// Structured logs of agvisord: one JSON object per line on stderr
// ({"time":"2024-05-01T12:00:00.123Z","level":"info","msg":"request","method":"GET",...}).
//
// Used by server.cc, service.cc and daemon.cc. Thread-safe; lines never interleave.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agvisor::server {

// `level`: "debug", "info", "warn", "error". Field values are strings; a value that is all
// digits (e.g. "status", "ms") is written as a JSON number.
void LogEvent(std::string_view level, std::string_view msg,
              const std::vector<std::pair<std::string, std::string>>& fields = {});

// Turns logging off (tests) or on.
void SetLogEnabled(bool enabled);

}  // namespace agvisor::server
