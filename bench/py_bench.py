"""agvisor's Python door in bench/agvisor_bench's basic suite: the seed's API calls (exec, exec
with on_output) through this build's package, in process, as bench/seed_bench.py times the seed.

Run by agvisor_bench with PYTHONPATH set to the build's staged package; arguments: IMAGE RUNS
ROUNDS [PLATFORM]. Prints `name seconds` lines. Before each round of output it prints
`container NAME` and waits for a line on stdin: agvisor_bench times the transport ceiling (a raw
Engine API exec of the same `cat`) on that container meanwhile, so each round is compared with a
ceiling of its own minute."""
import sys
import time

from agvisor import Limits, create_sandbox
from seed_api_ops import collected, exec_true, make_output_file, out, streamed

image, runs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
platform = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None

sb = create_sandbox(image, limits=Limits(cpus=1, memory="512m"), platform=platform)
try:
    median, p95 = exec_true(sb, runs)
    out("py_exec_median", median)
    out("py_exec_p95", p95)
    make_output_file(sb)
    for i in range(rounds):
        print("container", sb.name, flush=True)
        sys.stdin.readline()
        for name, fn in (("py_output_collected", collected), ("py_output_streamed", streamed)):
            t = time.perf_counter()
            fn(sb)
            out(f"{name}_{i}", time.perf_counter() - t)
finally:
    sb.stop()
