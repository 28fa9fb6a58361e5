// collect_growth: what collecting 50 MB of exec output costs the host, by how the kept string
// grows (bench/README, "Output on ptrace"): appended in 512 KiB pieces (the agent's largest
// OUTPUT frame) into one std::string, doubling as it fills, or with room reserved once past
// 1 MiB as ExecOutputCollector does (sandbox/sandbox_process.cc). Prints, per round, wall time,
// minor page faults and CPU time. No sandbox, no Docker.
//   collect_growth [ROUNDS]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

double CpuMs(const rusage& r) {
  return (static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 +
          static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec)) /
         1000;
}

void Round(bool reserve) {
  constexpr std::size_t kTotal = 50'000'000;
  constexpr std::size_t kPiece = 512 * 1024;
  constexpr std::size_t kBulk = 1024 * 1024;
  constexpr std::size_t kReserve = 64 * 1024 * 1024;
  const std::string piece(kPiece, 'a');
  rusage r0{}, r1{};
  ::getrusage(RUSAGE_SELF, &r0);
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::string kept;
    for (std::size_t done = 0; done < kTotal; done += kPiece) {
      const std::size_t n = std::min(kPiece, kTotal - done);
      if (reserve && kept.size() + n > kept.capacity() && kept.size() >= kBulk) {
        kept.reserve(std::max({kept.size() + n, 2 * kept.capacity(), kReserve}));
      }
      kept.append(piece.data(), n);
    }
    // The bytes must be written for real, not optimised away.
    asm volatile("" : : "r"(kept.data()) : "memory");
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ::getrusage(RUSAGE_SELF, &r1);
  std::printf("%-8s %6.1f ms  %6ld minor faults  %5.1f ms CPU\n", reserve ? "reserved" : "doubling",
              ms, r1.ru_minflt - r0.ru_minflt, CpuMs(r1) - CpuMs(r0));
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  for (int i = 0; i < rounds; ++i) {
    Round(false);
    Round(true);
  }
  return 0;
}
