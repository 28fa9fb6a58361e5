"""agvisor.connect(): the package's API through agvisord instead of in process.

A Connection has the module's entry points (create_sandbox, list_sandboxes, Sandbox, Pool,
list_snapshots, remove_snapshot) and hands out the same Sandbox and Pool classes, so agent code
written against the module runs
unchanged against a daemon: `av = agvisor.connect(...)` (or `av = agvisor` in process), then
`av.create_sandbox(...)`, `av.Pool(...)`. The C++ core reaches the daemon through the client
layer the CLI uses (the same address forms, token files and error messages); desktops and pools
work as in process (docs/python.md, "Through agvisord").
"""
import os

from . import _core
from .limits import Limits
from .pool import Pool
from .sandbox import Sandbox


class Connection:
    """Sandboxes on the machine where agvisord runs, through its API. Thread-safe; one
    connection serves many threads and sandboxes. `address` is the daemon's address as given."""

    def __init__(self, place, address):
        self._place = place
        self.address = address

    def __repr__(self):
        return f"<agvisor.Connection {self.address}>"

    def Sandbox(self, image=None, *, gui=False, limits=Limits(), network="bridge", lifetime=None,
                idle_ttl=None, name=None, host=None, runtime="runsc", egress=None,
                warm_shells=None, platform=None, idle_action="destroy", secrets=None) -> Sandbox:
        """agvisor.Sandbox(...) living in the daemon: start() creates it there. `host` must be
        None (the daemon's Docker host is used)."""
        if host is not None:
            raise ValueError(f"host={host!r} with agvisor.connect(): sandboxes live on the "
                             "daemon's Docker host; leave host None (or use agvisor.Sandbox "
                             "in process for another host)")
        sb = Sandbox(image, gui=gui, limits=limits, network=network, lifetime=lifetime,
                     idle_ttl=idle_ttl, name=name, runtime=runtime, egress=egress,
                     warm_shells=warm_shells, platform=platform, idle_action=idle_action,
                     secrets=secrets)
        sb._conn = self
        return sb

    def create_sandbox(self, image=None, *, gui=False, limits=Limits(), network="bridge",
                       lifetime=None, idle_ttl=None, name=None, host=None, runtime="runsc",
                       egress=None, warm_shells=None, platform=None, idle_action="destroy",
                       secrets=None) -> Sandbox:
        """agvisor.create_sandbox(...) through the daemon: a started Sandbox."""
        return self.Sandbox(image, gui=gui, limits=limits, network=network, lifetime=lifetime,
                            idle_ttl=idle_ttl, name=name, host=host, runtime=runtime,
                            egress=egress, warm_shells=warm_shells,
                            platform=platform, idle_action=idle_action,
                            secrets=secrets).start()

    def list_sandboxes(self, host=None) -> list[Sandbox]:
        """Every agvisor sandbox on the daemon's Docker host (agvisor.list_sandboxes())."""
        if host is not None:
            raise ValueError(f"host={host!r} with agvisor.connect(): the daemon lists its own "
                             "Docker host; leave host None")
        return [Sandbox._listed_handle(info, None, self) for info in self._place.list()]

    def list_snapshots(self) -> list[dict]:
        """The snapshots on the daemon's Docker host (agvisor.list_snapshots())."""
        return self._place.list_snapshots()

    def remove_snapshot(self, tag: str) -> None:
        """Removes a snapshot on the daemon's Docker host (agvisor.remove_snapshot())."""
        self._place.remove_snapshot(tag)

    def Pool(self, image=None, *, limits=Limits(), network="bridge", size=2, max_age=300,
             host=None, runtime="runsc", fill_parallelism=None, platform=None) -> Pool:
        """agvisor.Pool(...) kept by the daemon (its POST /v1/pools, under a random name):
        acquire() hands out sandboxes of this connection; close() deletes the pool. `host` must
        be None (the daemon's Docker host is used)."""
        if host is not None:
            raise ValueError(f"host={host!r} with agvisor.connect(): pools live on the daemon's "
                             "Docker host; leave host None")
        pool = Pool.__new__(Pool)
        pool._conn = self
        pool.__init__(image, limits=limits, network=network, size=size, max_age=max_age,
                      runtime=runtime, fill_parallelism=fill_parallelism, platform=platform)
        return pool


def connect(address=None, *, token=None, token_file=None) -> Connection:
    """A Connection to agvisord at `address`: "unix:/run/agvisord.sock" (also
    "unix:///path"), "http://127.0.0.1:PORT", or "ssh://[USER@]HOST[:PORT][/socket]" (the
    daemon's socket on another machine, through ssh). None -> $AGVISOR_SERVER, as the CLI.

    token       The bearer token itself. Else token_file, else $AGVISOR_TOKEN_FILE, else
                $AGVISOR_TOKEN, else agvisord's default token file (as the CLI; over ssh, root's
                on that host, read with cat).
    Errors: ValueError (no or a malformed address), RuntimeError with code "unavailable"
    (nothing listens: the message says how to start agvisord), "not_found" (no token file),
    "permission_denied" (the socket's mode, or a token the daemon refuses, at the first call).
    """
    if address is None:
        address = os.environ.get("AGVISOR_SERVER") or None
    if address is None:
        raise ValueError("agvisor.connect(): no address and $AGVISOR_SERVER is unset: pass "
                         "\"unix:/path/agvisord.sock\" or \"http://127.0.0.1:PORT\"")
    if token is not None and not isinstance(token, str):
        raise TypeError(f"token must be a str, got {type(token).__name__}")
    place = _core.Place.agvisord(str(address), os.fspath(token_file) if token_file else "",
                                 token or "")
    return Connection(place, str(address))
