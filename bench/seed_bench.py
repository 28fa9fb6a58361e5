"""The seed's side of bench/agvisor_bench: the same operations through the seed's Python API.

Run by agvisor_bench with PYTHONPATH set to the seed (AGVISOR_SEED_PATH) and a `docker` wrapper
first on PATH. Prints one `name seconds` line per measurement."""
import statistics
import sys
import time

from agvisor import Limits, create_sandbox

image, runs = sys.argv[1], int(sys.argv[2])
limits = Limits(cpus=1, memory="512m")


def out(name, value):
    print(f"{name} {value:.6f}", flush=True)


t = time.perf_counter()
sb = create_sandbox(image, limits=limits)
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
    r = sb.exec("head -c 50000000 /dev/zero | tr '\\0' a > /tmp/f50")
    assert r.returncode == 0, r
    t = time.perf_counter()
    r = sb.exec("cat /tmp/f50")
    out("output_collected", time.perf_counter() - t)
    assert len(r.stdout) == 50000000, len(r.stdout)
    seen = [0]

    def on(text):
        seen[0] += len(text)

    t = time.perf_counter()
    sb.exec("cat /tmp/f50", on_output=on)
    out("output_streamed", time.perf_counter() - t)
    assert seen[0] == 50000000, seen[0]
    data = "u" * 100000000
    t = time.perf_counter()
    r = sb.exec("cat > /tmp/up", input=data)
    out("upload", time.perf_counter() - t)
    assert r.returncode == 0, r
    t = time.perf_counter()
    r = sb.exec("cat /tmp/up")
    out("download", time.perf_counter() - t)
    assert len(r.stdout) == 100000000, len(r.stdout)
finally:
    t = time.perf_counter()
    sb.stop()
    out("stop", time.perf_counter() - t)
