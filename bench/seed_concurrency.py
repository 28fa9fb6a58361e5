"""The seed's side of agvisor_bench's pool, concurrency and memory suites (bench/README.md).

Run by agvisor_bench with PYTHONPATH set to the seed and a `docker` wrapper first on PATH.
Prints one `name seconds` line per measurement.

  seed_concurrency.py serial IMAGE N [NET]  N creates one after another, each stopped at once
                                            (create and stop times; network NET, default the
                                            seed's bridge)
  seed_concurrency.py creates IMAGE N       N creates at once, one thread each
  seed_concurrency.py execs IMAGE S N       S sandboxes, then N execs of `true` at once over them
  seed_concurrency.py idle IMAGE            one sandbox; prints `container NAME`, stops on a stdin line
"""
import sys
import threading
import time

from agvisor import Limits, create_sandbox

mode, image = sys.argv[1], sys.argv[2]
limits = Limits(cpus=1, memory="512m")


def out(name, value):
    print(f"{name} {value:.6f}", flush=True)


def at_once(n, work):
    """Runs work(i) in n threads released together; returns (per-call seconds, wall seconds)."""
    times = [0.0] * n
    gate = threading.Barrier(n + 1)
    errors = []

    def run(i):
        gate.wait()
        t = time.perf_counter()
        try:
            work(i)
        except Exception as e:  # noqa: BLE001 - reported and counted below
            errors.append(repr(e))
        times[i] = time.perf_counter() - t

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        print(f"errors {len(errors)}: {errors[0]}", file=sys.stderr)
        sys.exit(1)
    return times, wall


if mode == "serial":
    network = sys.argv[4] if len(sys.argv) > 4 else "bridge"
    for i in range(int(sys.argv[3])):
        t = time.perf_counter()
        sb = create_sandbox(image, limits=limits, network=network)
        out(f"create_{i}", time.perf_counter() - t)
        t = time.perf_counter()
        sb.stop()
        out(f"stop_{i}", time.perf_counter() - t)
elif mode == "creates":
    n = int(sys.argv[3])
    boxes = [None] * n

    def create(i):
        boxes[i] = create_sandbox(image, limits=limits)

    try:
        times, wall = at_once(n, create)
        for i, s in enumerate(times):
            out(f"create_{i}", s)
        out("wall", wall)
    finally:
        at_once(n, lambda i: boxes[i] and boxes[i].stop())
elif mode == "execs":
    s, n = int(sys.argv[3]), int(sys.argv[4])
    boxes = [create_sandbox(image, limits=limits) for _ in range(s)]
    try:

        def run(i):
            r = boxes[i % s].exec("true")
            assert r.returncode == 0, r

        times, wall = at_once(n, run)
        for i, t in enumerate(times):
            out(f"exec_{i}", t)
        out("wall", wall)
    finally:
        for sb in boxes:
            sb.stop()
elif mode == "idle":
    sb = create_sandbox(image, limits=limits)
    try:
        print(f"container {sb.name}", flush=True)
        sys.stdin.readline()
    finally:
        sb.stop()
else:
    sys.exit(f"unknown mode {mode}")
