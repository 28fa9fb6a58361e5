"""Warm pools: sandboxes of one kind started ahead of time, handed out in milliseconds.

    with agvisor.Pool(limits=Limits(cpus=1, memory="512m"), size=2) as pool:
        with pool.acquire(lifetime=3600, idle_ttl=300) as sb:   # an ordinary Sandbox
            sb.exec("echo hi")

A pool of the place the sandboxes live in (client::Place's pools, docs/pools.md): in process its
members start in background threads of the C++ core (through the host's start gate); through
agvisor.connect() (`av.Pool(...)`) the daemon keeps the pool. Members carry the label
agvisor.pool=<pool id> and a safety lifetime of max_age + 60 s, so members of a process that died
end on their own. acquire() pops a ready member
and gives it the caller's lifetime / idle_ttl (one message to its agent); when none is ready it
waits up to `wait` seconds for one being started, then creates one the normal way (stats().cold
counts those). Thread-safe: many threads may acquire at once.
"""
import dataclasses
import uuid

from . import _core
from ._context import ClosesOnExit
from .limits import Limits
from .sandbox import Sandbox, _whole_seconds


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """Pool.stats(): a snapshot.

    ready, starting   Members ready to be handed out / being started now.
    acquired          acquire() calls served from the pool.
    cold              acquire() calls served by a cold create (no member was ready).
    started, start_failures  Members started / failed starts (last_error says why).
    recycled          Members replaced for age (max_age).
    discarded         Members found dead (their channel closed) and never handed out.
    """
    ready: int
    starting: int
    acquired: int
    cold: int
    started: int
    start_failures: int
    recycled: int
    discarded: int
    last_error: str


class Pool(ClosesOnExit):
    """`size` sandboxes of one kind kept started; acquire() hands one out.

    image, limits, network, host, runtime, platform   As for create_sandbox(); every member has
                      them (one gVisor platform per pool).
    size              Members kept ready, 1..64. The memory limits of all pools of this process
                      on one host must fit the host's memory: else RuntimeError (code
                      "resource_exhausted") saying how many members would.
    max_age           Seconds; members older than this are replaced (10 .. 86400).
    fill_parallelism  Members started at once, 1..size.

    Creating the pool returns at once; members start in the background (wait_ready() waits for
    all of them). A context manager: close() (or leaving the `with`) removes the members not
    handed out; handed-out sandboxes are the caller's (stop them, or let their lifetime end).
    """

    def __init__(self, image=None, *, limits=Limits(), network="bridge", size=2, max_age=300,
                 host=None, runtime="runsc", fill_parallelism=None, platform=None):
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be an agvisor.Limits, got {type(limits).__name__}")
        for what, value in (("size", size), ("fill_parallelism", fill_parallelism)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{what} must be an int, got {value!r}")
        self.image = image or _core.DEFAULT_IMAGE
        self.limits = limits
        self.network = network
        self.size = size
        self.max_age = _whole_seconds("max_age", max_age)
        self.host = host
        self.runtime = runtime
        self.platform = platform
        spec = _core.SandboxSpec()
        spec.image = "" if self.image == _core.DEFAULT_IMAGE else self.image
        spec.limits = limits._to_core()
        spec.network = network
        spec.host = host or ""
        spec.runtime = runtime
        if platform is not None:
            if not isinstance(platform, str):
                raise ValueError(f'platform must be "systrap" or "ptrace" (or None), got '
                                 f"{platform!r}")
            spec.platform = platform
        if fill_parallelism is None:
            fill_parallelism = min(2, size) if size >= 1 else 1
        conn = getattr(self, "_conn", None)
        place = conn._place if conn is not None else _core.Place.in_process(spec.host)
        # A name of its own in the place: pools of other Pool objects (or the daemon's own) never
        # meet it.
        self._core = _core.Pool.create(place, "py-" + uuid.uuid4().hex[:12], spec, size,
                                       self.max_age, fill_parallelism)
        self.id = self._core.id

    def acquire(self, lifetime=None, idle_ttl=None, *, wait=0, cold_create=True) -> Sandbox:
        """A started Sandbox (exec, files, spawn, ... as for create_sandbox()) with this
        `lifetime` and `idle_ttl` (seconds, counted from now; None = none).

        wait         Seconds to wait for a member being started when none is ready.
        cold_create  True: then create one the normal way. False: RuntimeError (code
                     "resource_exhausted") instead.
        RuntimeError (code "unavailable") after close().
        """
        lifetime_s = _whole_seconds("lifetime", lifetime)
        idle_s = _whole_seconds("idle_ttl", idle_ttl)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:
            raise ValueError(f"wait must be a number of seconds >= 0, got {wait!r}")
        core = self._core.acquire(lifetime_s, idle_s, float(wait), bool(cold_create))
        return Sandbox._from_core(core, image=self.image, limits=self.limits,
                                  network=self.network, lifetime=lifetime, idle_ttl=idle_ttl,
                                  host=self.host, runtime=self.runtime,
                                  platform=self.platform, conn=getattr(self, "_conn", None))

    def wait_ready(self, timeout=120) -> None:
        """Blocks until `size` members are ready; RuntimeError (code "timeout", with the last
        start error) when they are not within `timeout` seconds."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        self._core.wait_ready(float(timeout))

    def stats(self) -> PoolStats:
        return PoolStats(**self._core.stats())

    def close(self) -> None:
        """Stops refilling, waits for starts in flight and removes every member not handed out.
        Idempotent."""
        self._core.close()

    def __repr__(self):
        s = self.stats()
        return (f"<agvisor.Pool {self.id} image={self.image!r} size={self.size} "
                f"ready={s.ready} starting={s.starting}>")
