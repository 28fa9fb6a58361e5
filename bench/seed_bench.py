"""The seed's side of bench/agvisor_bench: the same operations through the seed's Python API.

Run by agvisor_bench with PYTHONPATH set to the seed (AGVISOR_SEED_PATH) and a `docker` wrapper
first on PATH; arguments: IMAGE RUNS [RUNTIME] (the runtime of agvisor_bench's --platform). Prints one `name seconds` line per measurement."""
import statistics
import sys
import time

from agvisor import Limits, create_sandbox

image, runs = sys.argv[1], int(sys.argv[2])
runtime = sys.argv[3] if len(sys.argv) > 3 else "runsc"  # agvisor_bench --platform: its runtime
limits = Limits(cpus=1, memory="512m")
ROUNDS = 5  # output and transfer timings: the median of this many (agvisor_bench's kTransferRounds)


def out(name, value):
    print(f"{name} {value:.6f}", flush=True)


t = time.perf_counter()
sb = create_sandbox(image, limits=limits, runtime=runtime)
out("create", time.perf_counter() - t)
try:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        r = sb.exec("true")
        times.append(time.perf_counter() - t)
        assert r.returncode == 0, r
    times.sort()
    out("exec_median", statistics.median(times))
    out("exec_p95", times[int(len(times) * 0.95) - 1])
    # The same, 200 ms apart (agvisor_bench's kExecSpacing): an agent thinking between calls.
    times = []
    for _ in range(runs):
        time.sleep(0.2)
        t = time.perf_counter()
        r = sb.exec("true")
        times.append(time.perf_counter() - t)
        assert r.returncode == 0, r
    times.sort()
    out("exec_spaced_median", statistics.median(times))
    out("exec_spaced_p95", times[int(len(times) * 0.95) - 1])
    r = sb.exec("head -c 50000000 /dev/zero | tr '\\0' a > /tmp/f50")
    assert r.returncode == 0, r


    def collected():
        r = sb.exec("cat /tmp/f50")
        assert len(r.stdout) == 50000000, len(r.stdout)

    def streamed():
        seen = [0]

        def on(text):
            seen[0] += len(text)

        sb.exec("cat /tmp/f50", on_output=on)
        assert seen[0] == 50000000, seen[0]

    data = "u" * 100000000

    def upload():
        r = sb.exec("cat > /tmp/up", input=data)
        assert r.returncode == 0, r

    def download():
        r = sb.exec("cat /tmp/up")
        assert len(r.stdout) == 100000000, len(r.stdout)

    # Rounds of every operation in turn, as agvisor_bench measures its side.
    ops = {"output_collected": collected, "output_streamed": streamed, "upload": upload,
           "download": download}
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
