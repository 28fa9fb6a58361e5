"""The seed's side of bench/agvisor_bench: the same operations through the seed's Python API.

Run by agvisor_bench with PYTHONPATH set to the seed (AGVISOR_SEED_PATH) and a `docker` wrapper
first on PATH; arguments: IMAGE RUNS [RUNTIME] (the runtime of agvisor_bench's --platform). Prints one `name seconds` line per measurement."""
import statistics
import sys
import time

from agvisor import Limits, create_sandbox
from seed_api_ops import collected, exec_true, make_output_file, out, streamed

image, runs = sys.argv[1], int(sys.argv[2])
runtime = sys.argv[3] if len(sys.argv) > 3 else "runsc"  # agvisor_bench --platform: its runtime
limits = Limits(cpus=1, memory="512m")
ROUNDS = 5  # output and transfer timings: the median of this many (agvisor_bench's kTransferRounds)


t = time.perf_counter()
sb = create_sandbox(image, limits=limits, runtime=runtime)
out("create", time.perf_counter() - t)
try:
    median, p95 = exec_true(sb, runs)
    out("exec_median", median)
    out("exec_p95", p95)
    # The same, 200 ms apart (agvisor_bench's kExecSpacing): an agent thinking between calls.
    median, p95 = exec_true(sb, runs, pause=0.2)
    out("exec_spaced_median", median)
    out("exec_spaced_p95", p95)
    make_output_file(sb)

    data = "u" * 100000000

    def upload():
        r = sb.exec("cat > /tmp/up", input=data)
        assert r.returncode == 0, r

    def download():
        r = sb.exec("cat /tmp/up")
        assert len(r.stdout) == 100000000, len(r.stdout)

    # Rounds of every operation in turn, as agvisor_bench measures its side.
    ops = {"output_collected": lambda: collected(sb), "output_streamed": lambda: streamed(sb),
           "upload": upload, "download": download}
    times = {name: [] for name in ops}
    for _ in range(ROUNDS):
        for name, fn in ops.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    for name, ts in times.items():
        out(name, statistics.median(ts))
finally:
    t = time.perf_counter()
    sb.stop()
    out("stop", time.perf_counter() - t)
