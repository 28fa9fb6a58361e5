"""Resource limits of a sandbox: the seed's `Limits`, checked by agvisor's C++ core."""
import operator
from dataclasses import dataclass

from . import _core


class _DefaultDisk(str):
    """The type of `Limits.disk` when the caller did not pass it.

    It compares, hashes and prints as "5g", so `Limits().disk == "5g"` as in the seed. agvisor
    tells it apart from an explicit "5g": the default cap is enforced where the host can and
    skipped with a warning where it cannot; a cap the caller asked for is refused on such a host
    (RuntimeError) rather than dropped.
    """

    __slots__ = ()


_DEFAULT_DISK = _DefaultDisk(_core.DEFAULT_DISK)


def is_default_disk(disk) -> bool:
    """True when `disk` is the default cap, not one the caller asked for."""
    return type(disk) is _DefaultDisk


def disk_for_core(disk) -> str:
    """`Limits.disk` in the C++ core's terms: "" = the default, "none" = uncapped, else a cap."""
    if is_default_disk(disk):
        return ""
    if disk is None:
        return "none"
    return str(disk)


@dataclass(frozen=True)
class Limits:
    """What a sandbox may use; enforced by gVisor and the host's cgroups. Reusable.

    cpus    CPU cores, fractions allowed (0.5).
    memory  RAM cap in Docker's syntax ("512m", "4g"); there is no swap. Going over it ends the
            whole sandbox under gVisor (exec then raises RuntimeError saying so).
    pids    Processes inside (1 to 65536). The host's cap on gVisor's own tasks is scaled from it
            by the platform; past it the whole sandbox ends (docs/lifecycle.md, "pids").
    shm     Size of /dev/shm; None = Docker's 64m (1g for desktops).
    disk    Cap on the root file system (not /workspace): a whole number plus k/m/g/t ("5g").
            Left at its default, the cap applies where the host can enforce it, and elsewhere
            the sandbox runs uncapped with a warning. Passed explicitly, a host that cannot
            enforce it refuses to create the sandbox. None = no cap, on purpose.

    Zero, negative and malformed values raise ValueError here, before any sandbox exists.
    """

    cpus: float = 2.0
    memory: str = "2g"
    pids: int = 512
    shm: str | None = None
    disk: str = _DEFAULT_DISK

    def __post_init__(self):
        _core.validate_limits(self._to_core())

    def _to_core(self):
        c = _core.Limits()
        for field, value in (("cpus", self.cpus), ("memory", self.memory), ("pids", self.pids)):
            if isinstance(value, bool):  # True would pass as 1
                raise ValueError(f"limits.{field}: expected a number or size, got {value!r}")
        try:
            c.cpus = float(self.cpus)
            c.pids = operator.index(self.pids)  # 1.5 processes is a mistake, not 1
        except (TypeError, ValueError) as e:
            raise ValueError(f"invalid limits {self}: {e}") from None
        c.memory = str(self.memory)
        c.shm = None if self.shm is None else str(self.shm)
        c.disk = disk_for_core(self.disk)
        return c
