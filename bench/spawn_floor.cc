// spawn_floor: copied into a sandbox and run there by agvisor_bench. Prints the median time, in
// seconds, of `runs` (default 50) vfork + execve + waitpid of `program` (default /bin/true): the
// process start that every exec round trip contains, as the agent does it (agent/spawn.cc), with
// no channel around it. Static, so it runs in any image.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  char* program = const_cast<char*>(argc > 2 ? argv[2] : "/bin/true");
  char* child_argv[] = {program, nullptr};
  char* child_env[] = {nullptr};
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    pid_t pid = ::vfork();
    if (pid == 0) {
      ::execve(program, child_argv, child_env);
      ::_exit(127);
    }
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "spawn_floor: %s did not run and exit 0\n", program);
      return 1;
    }
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  std::printf("%.6f\n", times[times.size() / 2]);
  return 0;
}
