"""Background processes and warm pools against real runsc.

Background processes: they outlive the handle that started them (a fresh handle lists them,
attaches and gets the kept output replayed, then the live output), signals and kill (through the
agent, with this handle, another client or nobody attached, and while an attach is being refused),
stdin, timeouts, callback exceptions (propagated, detached, the process runs on), conflicts.
Pools: acquire hands out ready members as ordinary Sandbox objects, many threads acquire and exec
at once, stats count it, close removes the members not handed out; in process and through
agvisord (`av.Pool`: the daemon keeps the pool).

Processes wait on FIFOs inside the sandbox, never on sleeps: the test says when they go on.
The `kube` tests run on the Kubernetes runtime too (conftest.py), where each handle's channel is
an exec relay into the pod.
"""
import json
import signal
import threading
import urllib.parse

import pytest

import agvisor
from agvisor import BackgroundProcess, Limits, Pool, PoolStats
from conftest import engine

SMALL = Limits(cpus=1, memory="512m")


@pytest.fixture(scope="module")
def sb(av):
    with av.create_sandbox(limits=SMALL, network="none") as box:
        yield box


def fresh_handle(sb):
    """Another handle on the same sandbox, as list_sandboxes() makes it: its own channel."""
    listed = sb.connection.list_sandboxes() if sb.connection else agvisor.list_sandboxes(sb.host)
    [other] = [s for s in listed if s.name == sb.name]
    assert other is not sb
    return other


def gated(sb, name, script):
    """A shell script that waits on the FIFO /tmp/NAME where it says `wait_gate`."""
    sb.exec(f"rm -f /tmp/{name}; mkfifo /tmp/{name}")
    return f"wait_gate() {{ read line < /tmp/{name}; }}; {script}"


def open_gate(sb, name, text="go"):
    sb.exec(f"echo {text} > /tmp/{name}", timeout=30)


@pytest.mark.kube
def test_survives_the_handle_and_replays_its_output(sb):
    p = sb.spawn(gated(sb, "g1", 'echo "before $1"; echo warn >&2; wait_gate; echo "got $line";'
                                 " exit 3"))
    pid = p.pid
    assert p.poll() is None and p.returncode is None
    del p  # the handle goes; the process stays

    other = fresh_handle(sb)
    [listed] = [q for q in other.processes() if q.pid == pid]
    assert isinstance(listed, BackgroundProcess)
    assert listed.argv == ["sh"] and listed.returncode is None
    seen, opened = [], []

    def on_output(text):
        seen.append(text)
        if "".join(seen).count("\n") >= 2 and not opened:  # replayed: now let it go on
            opened.append(True)
            open_gate(sb, "g1", "live")

    assert other.process(pid).attach(on_output) == 3
    lines = "".join(seen).splitlines()
    # stdout and stderr are separate streams: their relative order is not kept.
    assert sorted(lines[:2]) == ["before ", "warn"] and lines[2:] == ["got live"]
    # Finished: listed with its exit code; attaching again replays it all at once.
    assert other.process(pid).returncode == 3
    done = sb.process(pid).output(timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (3, "before \ngot live\n", "warn\n")
    assert sb.process(pid).wait(timeout=30) == 3


@pytest.mark.kube
def test_argv_env_cwd_user_and_line_iteration(sb):
    p = sb.spawn(["sh", "-c", 'echo "$A"; pwd; id -un; printf "no newline"'], env={"A": "x y"},
                 cwd="/tmp", user="nobody")
    assert p.argv == ["sh", "-c", 'echo "$A"; pwd; id -un; printf "no newline"']
    assert list(p) == ["x y\n", "/tmp\n", "nobody\n", "no newline"]
    assert p.wait(timeout=30) == 0 and p.returncode == 0


def test_keep_awake_is_passed_and_listed(sb):
    # Its effect on idle_ttl is PauseTest.KeepAwakeBackgroundProcessHoldsOffIdleTtlUntilItExits
    # (C++, real runsc); here: the flag reaches the agent and comes back in listings, in process
    # and through agvisord.
    awake = sb.spawn(gated(sb, "g9", "wait_gate"), keep_awake=True)
    plain = sb.spawn(["true"])
    assert awake.keep_awake is True and plain.keep_awake is False
    listed = {q.pid: q.keep_awake for q in fresh_handle(sb).processes()}
    assert listed[awake.pid] is True and listed[plain.pid] is False
    open_gate(sb, "g9")
    assert awake.wait(timeout=30) == 0 and plain.wait(timeout=30) == 0
    assert sb.process(awake.pid).keep_awake is True


def test_leaving_an_iteration_early_detaches(sb):
    p = sb.spawn(gated(sb, "g2", "echo one; echo two; wait_gate; echo three"))
    for line in p:
        assert line == "one\n"
        break
    assert p.poll() is None  # detached, still running
    lines = []
    for line in p:  # a new attach: replay from the start, then live
        lines.append(line)
        if line == "two\n":
            open_gate(sb, "g2")
    assert lines == ["one\n", "two\n", "three\n"]


def test_callback_exception_detaches_and_propagates(sb):
    p = sb.spawn(gated(sb, "g3", "echo ready; wait_gate; echo after"))

    class Boom(Exception):
        pass

    def on_output(text):
        raise Boom(text)

    with pytest.raises(Boom, match="ready"):
        p.attach(on_output)
    assert p.poll() is None  # the process runs on
    with p.attached() as att:  # and nobody holds the attach any more
        assert att.read(timeout=30) == ("stdout", b"ready\n")
        open_gate(sb, "g3")
        assert att.read(timeout=30) == ("stdout", b"after\n")
        assert att.read(timeout=30) == ("", b"")
        assert att.wait(timeout=30) == 0 and att.closed


def test_attach_timeout_detaches_and_wait_timeout(sb):
    p = sb.spawn(["sleep", "1000"])
    with pytest.raises(TimeoutError, match="keeps running"):
        p.attach(timeout=0.3)
    with pytest.raises(TimeoutError):
        p.wait(timeout=0.3)
    assert p.poll() is None
    p.kill()
    assert p.wait(timeout=30) == 128 + signal.SIGKILL


@pytest.mark.kube
def test_terminate_while_this_handle_is_attached(sb):
    p = sb.spawn("trap 'echo got TERM; exit 5' TERM; echo ready; while :; do sleep 0.05; done")
    lines = []
    for line in p:  # this handle holds the attach
        lines.append(line)
        if line == "ready\n":
            p.terminate()
    # (sh may also report its `sleep` child "Terminated": the group got the signal)
    assert lines[0] == "ready\n" and lines[-1] == "got TERM\n"
    assert p.returncode == 5 and p.wait(timeout=30) == 5  # the iteration saw the exit


@pytest.mark.kube
def test_kill_and_wait_while_another_client_is_attached(sb):
    p = sb.spawn(gated(sb, "g4", "echo ready; wait_gate; sleep 1000"))
    with p.attached() as att:
        assert att.read(timeout=30) == ("stdout", b"ready\n")
        q = fresh_handle(sb).process(p.pid)
        with pytest.raises(RuntimeError) as e:
            q.attach(timeout=30)  # one client at a time
        assert e.value.code == "conflict"
        results = []
        waiter = threading.Thread(target=lambda: results.append(q.wait(timeout=60)))
        waiter.start()  # waits by listing: the attach is taken
        open_gate(sb, "g4")
        q.kill()  # through the agent, though `att` holds the attach
        assert att.wait(timeout=30) == 128 + signal.SIGKILL
    waiter.join(timeout=60)
    assert results == [128 + signal.SIGKILL]


def test_kill_while_this_handle_is_still_attaching(sb):
    # q's own attach is refused (att holds it), but the refusal comes a round trip later: a
    # signal sent on that attachment must still reach the process.
    p = sb.spawn("echo ready; exec sleep 1000")
    with p.attached() as att:
        assert att.read(timeout=30) == ("stdout", b"ready\n")
        q = fresh_handle(sb).process(p.pid)
        with q.attached() as late:
            late.signal(signal.SIGKILL)
            assert att.wait(timeout=30) == 128 + signal.SIGKILL
            with pytest.raises(RuntimeError) as e:
                late.read(timeout=30)
            assert e.value.code == "conflict"


@pytest.mark.kube
def test_stdin(sb):
    p = sb.spawn(["sh", "-c", "cat; echo done >&2"], stdin=True)
    with p.attached() as att:
        att.write("hello\n")
        assert att.read(timeout=30) == ("stdout", b"hello\n")
        att.write(b"\x00\xff")
        assert att.read(timeout=30) == ("stdout", b"\x00\xff")
        att.close_stdin()
        assert att.read(timeout=30) == ("stderr", b"done\n")
        assert att.wait(timeout=30) == 0


@pytest.mark.kube
def test_spawn_timeout_and_errors(sb):
    assert sb.spawn("sleep 100", timeout=0.5).wait(timeout=30) == 124
    missing = sb.spawn(["/no/such/program"]).output(timeout=30)  # as in a shell: 127
    assert missing.returncode == 127 and "/no/such/program" in missing.stderr
    with pytest.raises(RuntimeError) as e:
        sb.process(999999)
    assert e.value.code == "not_found"
    with pytest.raises(RuntimeError) as e:
        BackgroundProcess(sb, 999999, ["x"]).attach(timeout=30)
    assert e.value.code == "not_found"
    with pytest.raises(ValueError):
        sb.spawn([])
    with pytest.raises(ValueError):
        sb.spawn("true", timeout=-1)
    with pytest.raises(TypeError):
        sb.spawn(b"bytes")
    with pytest.raises(RuntimeError, match="not started"):
        agvisor.Sandbox().spawn("true")


def test_many_threads_spawn_and_collect(sb):
    """The GIL is released while attached: eight threads wait on their processes at once."""
    outputs, errors = {}, []
    sb.exec("rm -f /tmp/g5")
    procs = [sb.spawn(f"echo start {i}; while [ ! -e /tmp/g5 ]; do sleep 0.05; done; echo end {i}")
             for i in range(8)]
    started = threading.Barrier(9)

    def collect(i, p):
        try:
            started.wait()
            outputs[i] = p.output(timeout=60).stdout
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=collect, args=(i, p)) for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    started.wait()
    assert all(p.poll() is None for p in procs)
    sb.exec("touch /tmp/g5", timeout=30)
    for t in threads:
        t.join(timeout=90)
    assert errors == []
    assert outputs == {i: f"start {i}\nend {i}\n" for i in range(8)}


# ---- pools --------------------------------------------------------------------------------------

def pool_containers(pool_id):
    filters = urllib.parse.quote(json.dumps({"label": [f"agvisor.pool={pool_id}"]}))
    status, body = engine("GET", f"/containers/json?all=1&filters={filters}")
    assert status == 200, body
    return {c["Names"][0].lstrip("/") for c in body}


def test_pool_acquire_threads_stats_close(av):
    with av.Pool(limits=Limits(cpus=1, memory="256m"), network="none", size=2) as pool:
        assert isinstance(pool, Pool)
        pool.wait_ready(timeout=120)
        s = pool.stats()
        assert isinstance(s, PoolStats)
        assert (s.ready, s.acquired, s.cold, s.start_failures) == (2, 0, 0, 0)
        members = pool_containers(pool.id)
        assert len(members) == 2

        with pool.acquire(lifetime=600, idle_ttl=300) as sb:
            assert isinstance(sb, agvisor.Sandbox) and sb.name in members
            assert (sb.persistent, sb.data_dir, sb.idle_ttl, sb.lifetime) == (False, None, 300, 600)
            r = sb.exec("echo pooled; echo e >&2", timeout=30)
            assert (r.returncode, r.stdout, r.stderr) == (0, "pooled\n", "e\n")
            with pytest.raises(ValueError):
                sb.exec("true", timeout=300)  # not below the acquired idle_ttl
            assert sb.spawn("exit 4").wait(timeout=30) == 4
        assert pool.stats().acquired == 1

        names, errors = [], []

        def work(i):
            try:
                with pool.acquire(lifetime=300, wait=120) as box:
                    r = box.exec(f"echo {i}", timeout=30)
                    names.append((box.name, r.stdout))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
        assert errors == []
        assert sorted(out for _, out in names) == [f"{i}\n" for i in range(4)]
        assert len({name for name, _ in names}) == 4  # each got its own sandbox
        s = pool.stats()
        assert s.acquired + s.cold == 5 and s.start_failures == 0
        kept = pool.id
    # close(): the members not handed out are removed; the handed-out ones were stopped above.
    assert pool_containers(kept) == set()
    with pytest.raises(RuntimeError) as e:
        pool.acquire()
    assert e.value.code == "unavailable"
    pool.close()  # idempotent


def test_pool_refuses_bad_arguments(av):
    with pytest.raises(ValueError):
        av.Pool(size=0)
    with pytest.raises(ValueError):
        av.Pool(max_age=1)
    with pytest.raises(TypeError):
        av.Pool(limits={"cpus": 1})
    with av.Pool(limits=Limits(cpus=1, memory="256m"), size=1) as pool:
        with pytest.raises(ValueError):
            pool.acquire(lifetime=0)
        with pytest.raises(ValueError):
            pool.acquire(wait=-1)
        with pytest.raises(RuntimeError) as e:
            pool.acquire(cold_create=False)  # nothing is ready yet: no cold create
        assert e.value.code == "resource_exhausted"
