#include "bench_agvisord.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace agvisor {

Result<Subprocess> StartBenchAgvisord(const std::string& dir,
                                      const std::vector<std::string>& args) {
  const char* other = std::getenv("AGVISOR_BENCH_AGVISORD");
  const std::string binary = other != nullptr && *other != '\0' ? other : AGVISORD_BINARY;
  // sh only appends stderr to the log: "$0" is the binary, "$1" the directory, the rest args.
  std::vector<std::string> argv = {
      "sh", "-c",
      "d=$1; shift; exec \"$0\" --socket \"$d/agvisord.sock\" --token-file \"$d/token\" \"$@\" "
      "2>>\"$d/agvisord.log\"",
      binary, dir};
  argv.insert(argv.end(), args.begin(), args.end());
  auto daemon = AGVISOR_TRY(Subprocess::Spawn({.argv = argv}));
  auto log = [&] {
    std::ifstream f(dir + "/agvisord.log");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (log().find("agvisord listening") == std::string::npos) {
    auto exited = daemon.WaitFor(std::chrono::milliseconds(50));
    if (exited.ok() || std::chrono::steady_clock::now() > deadline) {
      StopBenchAgvisord(daemon);
      return Error::Unavailable("agvisord (" + binary + ") did not start: " + log());
    }
  }
  return daemon;
}

void StopBenchAgvisord(Subprocess& daemon) {
  (void)daemon.Kill(SIGTERM);
  if (!daemon.WaitFor(std::chrono::seconds(30)).ok()) (void)daemon.Kill(SIGKILL);
}

}  // namespace agvisor
