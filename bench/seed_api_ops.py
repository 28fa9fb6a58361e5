"""The operations bench/seed_bench.py (the seed) and bench/py_bench.py (agvisor's own Python
package) both time through the seed's API, so the two sides run the same code. Imports no
`agvisor`: each script brings its own on PYTHONPATH."""
import statistics
import time

SIZE = 50_000_000  # bytes of the output file (agvisor_bench's kOutputBytes)


def out(name, value):
    print(f"{name} {value:.6f}", flush=True)


def exec_true(sb, runs, pause=0.0):
    """`runs` round trips of sb.exec("true"), each after `pause` seconds: (median, p95)."""
    times = []
    for _ in range(runs):
        if pause:
            time.sleep(pause)
        t = time.perf_counter()
        r = sb.exec("true")
        times.append(time.perf_counter() - t)
        assert r.returncode == 0, r
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


def make_output_file(sb):
    r = sb.exec(f"head -c {SIZE} /dev/zero | tr '\\0' a > /tmp/f50")
    assert r.returncode == 0, r


def collected(sb):
    r = sb.exec("cat /tmp/f50")
    assert len(r.stdout) == SIZE, len(r.stdout)


def streamed(sb):
    seen = [0]

    def on(text):
        seen[0] += len(text)

    sb.exec("cat /tmp/f50", on_output=on)
    assert seen[0] == SIZE, seen[0]
