// StepTrace: with AGVISOR_TRACE set, prints how long each step of creating a sandbox took, to
// stderr ("agvisor: trace: <step> <ms>"; bench/README.md reads these names). Used by Sandbox
// and the runtimes on the create path.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace agvisor {

class StepTrace {
 public:
  StepTrace() : on_(std::getenv("AGVISOR_TRACE") != nullptr) {}
  // Prints the time since the last mark (or since construction) under `step`.
  void Mark(const char* step) {
    if (!on_) return;
    auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "agvisor: trace: %-22s %6.1f ms\n", step,
                 std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace agvisor
