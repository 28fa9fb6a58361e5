"""Sandboxes: create, resume, run commands in, stop, delete and list them.

The seed's API (`Sandbox`, `create_sandbox`, `list_sandboxes`), carried by agvisor's C++ core
(`agvisor._core`, over the Docker Engine API with an agent as PID 1 in every sandbox) instead of
the docker CLI. Every blocking call releases the GIL, so threads can drive many sandboxes at once;
one handle may also be shared by threads (exec calls run side by side).

Errors follow the seed: ValueError for a bad argument, RuntimeError for everything the host or the
sandbox did (unreachable Docker, missing image, a sandbox that died under a command: the message
says why). Each carries a `code` attribute ("invalid_argument", "sandbox_died", ...).
"""
import codecs
import dataclasses
import json
import math
import operator
import queue
import subprocess
import threading
import uuid
import warnings

from . import _core
from .limits import Limits, is_default_disk
from .desktop import RDP_PORT, Desktop
from .egress import Egress, Secret, as_egress, as_secrets
from .processes import BackgroundProcess, _not_found
from .streams import FileInfo, PortConnection, PortForward, Shell
from .watch import DirectoryWatch

# Text exec(on_output=...) keeps: the last this many characters (the rest went to on_output).
_KEEP_CHARS = _core.STREAM_TAIL_BYTES
_WORKSPACE = "/workspace"


_warned_hosts = set()
_warned_lock = threading.Lock()


def _warn_once(host, message):
    """The default disk cap could not be enforced on `host`: say so once per host and process."""
    with _warned_lock:
        if host in _warned_hosts:
            return
        _warned_hosts.add(host)
    warnings.warn(f"agvisor: {message}", RuntimeWarning, stacklevel=4)


def _whole_seconds(what, value):
    """lifetime / idle_ttl as the core takes them: whole seconds, fractions rounded up."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number of seconds, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number of seconds, got {value!r}")
    return math.ceil(value)


def _runtime_error(message, code):
    """A RuntimeError carrying `code`, as the core's errors do (docs/python.md, "Errors")."""
    e = RuntimeError(message)
    e.code = code
    return e


def _unsupported(message):
    """The RuntimeError (code "unsupported") of what does not work through agvisord."""
    return _runtime_error(message, "unsupported")


class _TextStream:
    """Turns exec's output chunks into text for on_output and keeps the last _KEEP_CHARS of it.

    A chunk may end in the middle of a UTF-8 sequence: the incremental decoder holds those bytes
    back until the rest arrives. Undecodable bytes become U+FFFD, as in the non-streaming case.
    """

    def __init__(self, on_output):
        self._on_output = on_output
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pieces = []
        self._chars = 0

    def feed(self, data: bytes):
        self._deliver(self._decoder.decode(data))

    def finish(self) -> str:
        self._deliver(self._decoder.decode(b"", final=True))
        return "".join(self._pieces)[-_KEEP_CHARS:]

    def _deliver(self, text):
        if not text:
            return
        self._pieces.append(text)
        self._chars += len(text)
        if self._chars > 2 * _KEEP_CHARS:  # trim rarely: a runaway `yes` costs O(output)
            kept = "".join(self._pieces)[-_KEEP_CHARS:]
            self._pieces, self._chars = [kept], len(kept)
        self._on_output(text)


class Sandbox:
    """One gVisor sandbox. Nothing happens on the host until start() (or create_sandbox()).

    image     Image to run. None -> agvisor's default image, agvisor/base:latest (Debian with
              python3 and git, built offline by `agvisor image build base`). The seed's default,
              ubuntu:24.04, needs a registry; pass it explicitly where one is reachable.
    gui       A desktop sandbox (default image agvisor/desktop:latest, memory at least 1g):
              sb.desktop (screenshots, mouse, keyboard), sb.password (its VNC and RDP
              password), sb.rdp_port (a 127.0.0.1 port forwarded to the desktop's RDP server
              through the agent channel, for native RDP clients), sb.desktop_token(key) for
              the browser gateway.
    limits    Limits(...): cpus, memory, pids, shm, disk. See agvisor.Limits.
    network   "bridge" (default), "none", or a network made with
              `agvisor network create NAME`.
    lifetime  Seconds until the sandbox ends itself, even if this process dies.
    idle_ttl  Seconds without activity (an exec) until the sandbox ends itself; exec(timeout=)
              must be shorter.
    name      Makes the sandbox resumable: /workspace lives in the volume agvisor-<name>; a
              running sandbox of that name is re-attached with its processes.
    host      None -> Docker on this machine ($DOCKER_HOST); "ssh://user@host" -> a remote one.
    runtime   A Docker runtime that is gVisor, default "runsc".
    egress    An egress policy (an extension of the seed's API): a list of domain patterns
              (["pypi.org", "*.pythonhosted.org"]) or an agvisor.Egress. See create_sandbox().
    warm_shells  Shells kept started for exec() (an extension); None = the default. See
              create_sandbox().
    platform  The gVisor platform (an extension): None, "systrap" or "ptrace". See
              create_sandbox().
    idle_action  What idle_ttl does (an extension): "destroy" (default), "stop" or "pause". See
              create_sandbox().

    Attributes: name ("agvisor-<name>"; for an anonymous sandbox the random suffix is the one the
    core picks at start()), persistent, data_dir ("/workspace" or None), resumed (start()
    re-attached to a running sandbox), disk_warning (why the default disk cap is not enforced),
    egress (the policy as an Egress, or None; read-only), and the constructor's other arguments.
    """

    def __init__(self, image=None, *, gui=False, limits=Limits(), network="bridge", lifetime=None,
                 idle_ttl=None, name=None, host=None, runtime="runsc", egress=None,
                 warm_shells=None, platform=None, idle_action="destroy", secrets=None):
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be an agvisor.Limits, got {type(limits).__name__}")
        if gui and (lifetime is not None or idle_ttl is not None):
            raise ValueError("lifetime and idle_ttl are only supported for headless sandboxes")
        self.gui = bool(gui)
        self.limits = limits
        self.network = network
        self.lifetime = lifetime
        self.idle_ttl = idle_ttl
        self.idle_action = idle_action
        self.host = host
        self.runtime = runtime
        self._egress = as_egress(egress)
        self._secrets = as_secrets(secrets)
        self.warm_shells = warm_shells
        self.platform = platform
        self.image = image or self._default_image()
        _core.validate_spec(self._spec(name))
        self.persistent = name is not None
        self.name = _core.NAME_PREFIX + (name if name is not None else uuid.uuid4().hex[:8])
        self.data_dir = _WORKSPACE if self.persistent else None  # kept across stop()
        self.rdp_port = None  # a desktop's RDP: a 127.0.0.1 port forwarded by this process
        self.password = None  # a desktop's VNC and RDP password, once started
        self._rdp_forward = None
        self.resumed = False
        self.disk_warning = None
        self._lock = threading.Lock()
        self._core = None  # the C++ handle, once started or opened
        self._running = False  # started by us, or listed as running
        self._listed = False  # made by list_sandboxes(): exec opens the existing container
        self._conn = None  # the agvisor.connect() connection it lives through; None = in process

    @property
    def connection(self):
        """The agvisor.connect() Connection the sandbox lives through; None in process."""
        return self._conn

    def _place(self):
        """Where the sandbox lives: the daemon of its connection, or the library here."""
        if self._conn is not None:
            return self._conn._place
        return _core.Place.in_process(self.host or "")

    def _spec(self, name):
        s = _core.SandboxSpec()
        s.image = "" if self.image == self._default_image() else self.image
        s.gui = self.gui
        s.limits = self.limits._to_core()
        s.network = self.network
        s.lifetime = _whole_seconds("lifetime", self.lifetime)
        s.idle_ttl = _whole_seconds("idle_ttl", self.idle_ttl)
        s.idle_action = self.idle_action
        s.name = name
        s.host = self.host or ""
        s.runtime = self.runtime
        s.egress = None if self._egress is None else self._egress._to_core()
        s.secrets = [secret._to_core() for secret in self._secrets]
        if self.warm_shells is not None:
            if isinstance(self.warm_shells, bool) or not isinstance(self.warm_shells, int):
                raise ValueError(f"warm_shells must be a whole number from 0 to 16, got "
                                 f"{self.warm_shells!r}")
            s.warm_shells = self.warm_shells
        if self.platform is not None:
            if not isinstance(self.platform, str):
                raise ValueError(f'platform must be "systrap" or "ptrace" (or None), got '
                                 f"{self.platform!r}")
            s.platform = self.platform  # the value itself is checked by the core
        return s

    @property
    def egress(self) -> Egress | None:
        """The egress policy the sandbox was created with (an Egress), None without one. The
        sandbox reaches only what it allows, through agvisord's enforcer on the Docker host.
        start() re-attaches to a running sandbox of the same name only when it was made with
        this same policy (otherwise RuntimeError, code "conflict"); handles from
        list_sandboxes() say None (they do not read the policy back)."""
        return self._egress

    def _default_image(self):
        return _core.DEFAULT_DESKTOP_IMAGE if self.gui else _core.DEFAULT_IMAGE

    def __repr__(self):
        state = "running" if self._running else "not running"
        return f"<agvisor.Sandbox {self.name} image={self.image!r} host={self.host!r} {state}>"

    def start(self):
        """Creates and starts the sandbox, or re-attaches to a running one of the same name
        (limits and image are then the ones it was created with). Does nothing when already
        started. Returns self, so `with Sandbox(...).start() as sb:` and chaining work."""
        with self._lock:
            if self._running:
                return self
            name = self.name[len(_core.NAME_PREFIX):] if self.persistent else None
            place = self._place()
            core = place.create(self._spec(name))  # a desktop: returns once it is drawn
            if self.gui:
                try:
                    self.password = core.desktop_password()
                except BaseException:
                    place.remove(core.container_name, False)
                    raise
            self._core, self._running = core, True
            self.name = core.container_name
            if self.gui:
                # RDP as the seed offered it (sb.rdp_port + sb.password), but on a loopback port
                # this process forwards through the agent channel: it works with network="none"
                # and publishes nothing.
                self._rdp_forward = PortForward(self, RDP_PORT)
                self.rdp_port = self._rdp_forward.local_port
            self.resumed = core.resumed
            self.disk_warning = core.disk_warning or None
        if self.disk_warning:
            _warn_once(self.host or "", self.disk_warning)
        return self

    def _handle(self):
        with self._lock:
            if self._core is not None:
                return self._core
            if not (self._running or self._listed):
                # Never started, or stopped by this handle: a state, as a paused one's is.
                raise _runtime_error(f"sandbox {self.name} is not started (or was stopped): "
                                     "call start() first, or use create_sandbox()", "conflict")
        core = self._place().open(self.name)
        if not getattr(self, "_auto_resume", True):
            core.auto_resume = False
        with self._lock:
            if self._core is None:
                self._core = core
            return self._core

    def _check_timeout(self, timeout, core=None):
        idle = core.idle_ttl if core is not None else None
        if idle is None:  # not started here, or through agvisord: the handle's own
            idle = _whole_seconds("idle_ttl", self.idle_ttl)
        try:
            seconds = float(timeout)
        except (TypeError, ValueError):
            raise ValueError(f"timeout must be a number of seconds, got {timeout!r}") from None
        _core.validate_exec_timeout(seconds, idle)
        return seconds

    def exec(self, cmd, *, input=None, timeout=120, on_output=None):
        """Runs `sh -c cmd` inside and returns a subprocess.CompletedProcess (args=cmd, text
        stdout and stderr). After `timeout` seconds the command and every process it started
        are killed and returncode is 124.

        input      Text (or bytes) for the command's stdin; None = empty stdin.
        on_output  Called with text as the command produces it, stdout and stderr merged;
                   result.stdout then holds only the last ~100 KB and stderr is "". Cannot be
                   combined with input. An exception it raises stops further calls and is
                   raised from exec() once the command has ended.

        Raises ValueError for bad arguments (timeout not below idle_ttl) and RuntimeError when
        the sandbox is not running or dies under the command (the message says why).
        """
        if on_output is not None and input is not None:
            raise ValueError("on_output and input cannot be used together")
        seconds = self._check_timeout(timeout)
        data = input.encode() if isinstance(input, str) else input
        core = self._handle()
        argv = ["sh", "-c", cmd]
        if on_output is None:
            # text: decoded by the core from the collected bytes (UTF-8, errors replaced).
            code, _, out, err, _ = core.exec(argv, data, seconds, text=True)
            return subprocess.CompletedProcess(cmd, code, out, err)
        stream = _TextStream(on_output)
        code, _, _, _, _ = core.exec(argv, None, seconds, on_output=stream.feed)
        return subprocess.CompletedProcess(cmd, code, stream.finish(), "")

    def run(self, argv, *, input=None, timeout=120, env=None, cwd=None, user=None,
            on_stdout=None, on_stderr=None):
        """Runs argv inside without a shell; an extension of the seed's API. Returns a
        subprocess.CompletedProcess with stdout and stderr as bytes, kept apart, plus
        `timed_out` and `truncated` attributes. returncode 124 = timed out.

        input      bytes (or text) for stdin; None = empty stdin.
        env        {"NAME": "value"} added to the command's environment.
        cwd        Working directory; default /workspace for named sandboxes, else the image's.
        user       "name", "uid", optionally ":group" / ":gid"; default the image's user.
        on_stdout, on_stderr  Called with bytes as each stream produces them; the result then
                   keeps only the last ~100 KB of each. Exceptions: as for exec(on_output=).
        """
        if isinstance(argv, (str, bytes)):
            raise TypeError("run() takes a list of arguments; use exec() for a shell command")
        argv = [str(a) for a in argv]
        seconds = self._check_timeout(timeout)
        data = input.encode() if isinstance(input, str) else input
        env_list = [f"{k}={v}" for k, v in (env or {}).items()]
        core = self._handle()
        code, timed_out, out, err, truncated = core.exec(
            argv, data, seconds, env_list, cwd or "", user or "",
            on_stdout=on_stdout, on_stderr=on_stderr)
        result = subprocess.CompletedProcess(argv, code, out, err)
        result.timed_out, result.truncated = timed_out, truncated
        return result

    # ---- pause and resume (docs/lifecycle.md, "Pause and resume") ------------------------------

    def pause(self) -> None:
        """Freezes the sandbox: its processes keep their memory and get no CPU until resume()
        or the next call on it, which resumes it first (unless auto_resume is False). Its
        lifetime runs on while paused, its idle time does not. Safe to call twice."""
        self._place().pause(self._handle().container_name)

    def resume(self) -> None:
        """Thaws a paused sandbox (a running one is left as it is). One whose lifetime passed
        while paused is ended instead: RuntimeError with code "sandbox_died"."""
        self._place().resume(self._handle().container_name)

    # ---- snapshots and forks (docs/lifecycle.md, "Snapshots and forks") ------------------------

    def snapshot(self, tag: str, *, workspace: bool = False, max_bytes: int | None = None) -> dict:
        """Makes snapshot `tag` (a tag: letters, digits, _ . -), the image
        agvisor/snapshot:TAG (agvisord: its --snapshot-repository), of the sandbox's root file
        system as the sandbox sees it: files written anywhere (/opt, /usr, ...) are in it;
        /proc, /sys, /dev, the agent's files and, unless workspace=True, /workspace are not.
        Running processes are not kept. The sandbox's tar stream is checked on the host before
        it reaches Docker; a refused or oversize stream (max_bytes, default 8 GiB) leaves no
        image (ValueError for a refused entry or bad argument, RuntimeError with code
        "resource_exhausted" past the cap). Another repository's name is refused (ValueError),
        and an existing image of that name is replaced only when it is a snapshot
        (RuntimeError, code "conflict"). Sandbox(image="snapshot:" + tag) starts from it.
        Returns {"image", "image_id", "bytes", "entries", "file_bytes", "seconds"}."""
        cap = _core.DEFAULT_SNAPSHOT_MAX_BYTES if max_bytes is None else int(max_bytes)
        return self._handle().snapshot(tag, workspace, cap)

    def fork(self, count: int = 1, *, prefix: str | None = None, tag: str | None = None,
             max_bytes: int | None = None) -> list["Sandbox"]:
        """A snapshot of this sandbox with its /workspace, then `count` (1-16) running
        sandboxes from it named PREFIX-1..PREFIX-N (default "<name>-fork"), each with its own
        copy of /workspace and this sandbox's limits, network and runtime. Processes are not
        kept. The snapshot is `tag` (as for snapshot(); default fork-<name>-<unix seconds>) and
        stays. Names already taken raise RuntimeError (code "conflict") before anything is
        made. Returns the forks, started."""
        cap = _core.DEFAULT_SNAPSHOT_MAX_BYTES if max_bytes is None else int(max_bytes)
        spec = self._spec(None)
        spec.image = ""
        out = self._place().fork(self._handle().container_name, int(count), prefix or "",
                                 tag or "", spec, cap)
        forks = []
        for core in out["sandboxes"]:
            sb = self.__class__.__new__(self.__class__)
            sb.__dict__.update({k: v for k, v in self.__dict__.items()
                                if k not in ("_lock", "_core", "_rdp_forward")})
            sb._lock = threading.Lock()
            sb._core, sb._running, sb._listed = core, True, False
            sb.image = out["snapshot"]["image"]
            sb.name = core.container_name
            sb.persistent, sb.data_dir = True, _WORKSPACE
            sb.resumed, sb.disk_warning = False, core.disk_warning or None
            sb.password = sb.rdp_port = sb._rdp_forward = None
            forks.append(sb)
        return forks

    @property
    def auto_resume(self) -> bool:
        """Whether calls resume a paused sandbox first (True, the default). False: they raise
        RuntimeError (code "conflict") naming the state and how to resume."""
        return getattr(self, "_auto_resume", True)

    @auto_resume.setter
    def auto_resume(self, yes: bool) -> None:
        self._auto_resume = bool(yes)
        with self._lock:
            core = self._core
        if core is not None:
            core.auto_resume = self._auto_resume

    # ---- live resize (docs/lifecycle.md, "Live resize") ----------------------------------------

    def update(self, limits=None, *, cpus=None, memory=None, pids=None) -> dict:
        """Resizes the running sandbox in place and returns the limits it runs under now:
        {"cpus", "memory_bytes", "pids", "source"} (0 = no cap). `limits`, a Limits, gives
        cpus, memory and pids at once; the keywords give single ones (and win over `limits`).
        self.limits is updated to match.

        Enforced as at create: past the new memory the whole sandbox ends, and exec raises
        RuntimeError saying it ran out of memory; cpus is a CPU quota. Inside, /proc/meminfo
        keeps the create-time MemTotal. shm and disk cannot change on a running sandbox.

        Raises ValueError for bad values (nothing is sent), RuntimeError with code "conflict"
        for memory below what the sandbox uses now (nothing changes), "unsupported" for a
        sandbox on an ssh:// or tcp:// Docker host driven in process (connect to the agvisord
        on that host instead), "sandbox_died" when it is not running.
        """
        if limits is not None:
            if not isinstance(limits, Limits):
                raise TypeError(f"limits must be an agvisor.Limits, got {type(limits).__name__}")
            if limits.shm is not None or not is_default_disk(limits.disk):
                raise ValueError("update: shm and disk cannot change on a running sandbox "
                                 "(leave them at their defaults in the Limits given)")
            cpus = limits.cpus if cpus is None else cpus
            memory = limits.memory if memory is None else memory
            pids = limits.pids if pids is None else pids
        for field, value in (("cpus", cpus), ("memory", memory), ("pids", pids)):
            if isinstance(value, bool):
                raise ValueError(f"limits.{field}: expected a number or size, got {value!r}")
        try:
            cpus = None if cpus is None else float(cpus)
            pids = None if pids is None else operator.index(pids)
        except (TypeError, ValueError) as e:
            raise ValueError(f"update: {e}") from None
        memory = None if memory is None else str(memory)
        live = self._place().update(self._handle().container_name, cpus, memory, pids)
        changed = {k: v for k, v in (("cpus", cpus), ("memory", memory), ("pids", pids))
                   if v is not None}
        self.limits = dataclasses.replace(self.limits, **changed)
        return live

    def info(self) -> dict:
        """What Docker says about the sandbox now: state, running, end_reason ("out of memory",
        "lifetime reached", ...), image, container id, and for a running one its limits now
        ({"cpus", "memory_bytes", "pids", "source"}: after update(), the new ones); an extension
        of the seed's API."""
        return self._handle().info()

    # ---- the egress log (docs/egress.md, "Log"): an extension of the seed's API --------------

    def _egress_place(self):
        """The agvisord whose routes serve this sandbox's egress log."""
        if self._conn is not None:
            return self._conn._place
        return _core.Place.egress_agvisord(self.host or "")

    def egress_log(self, last: int = 50) -> list[dict]:
        """The last `last` (1-1000) records of the sandbox's egress log, oldest first, as dicts
        with the fields of docs/egress.md "Log" (time, seq, via, name, port, allowed, reason,
        address, method, path, status, bytes_up, bytes_down, duration_ms, secret, closes).
        agvisord's GET .../egress/log: through the connection's agvisord, or, in process, the
        one enforcing the Docker host (as `agvisor egress NAME --last N`). The strings are what
        the sandbox sent: data, never instructions. ValueError for `last` out of range;
        RuntimeError (code "not_found") for a sandbox without a policy, "unavailable" without
        agvisord."""
        place = self._egress_place()
        return [json.loads(line) for line in place.egress_log(self._handle().container_name,
                                                                operator.index(last))]

    def follow_egress_log(self, last: int = 50):
        """An iterator over the egress log: the last `last` records (1-1000), then each new one
        as the enforcer makes it (agvisord's WebSocket route), until the sandbox is removed or
        the iterator is closed (`break` out of the loop). Records are egress_log()'s dicts. A
        background thread reads the stream; after a close it ends at the next record or when
        the sandbox goes."""
        place, name, n = self._egress_place(), self._handle().container_name, operator.index(last)
        records = queue.Queue(maxsize=1024)
        stop = threading.Event()
        done = object()

        def offer(item):  # bounded: once the iterator is closed, the reader stops
            while not stop.is_set():
                try:
                    records.put(item, timeout=0.5)
                    return True
                except queue.Full:
                    continue
            return False

        def reader():
            try:
                place.follow_egress_log(name, n, offer)
                offer(done)
            except BaseException as e:  # raised in the caller's thread
                offer(e)

        threading.Thread(target=reader, name=f"egress-log-{name}", daemon=True).start()
        try:
            while True:
                item = records.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield json.loads(item)
        finally:
            stop.set()

    # ---- files, ports and terminals: extensions of the seed's API ---------------------------
    # Paths are absolute inside the sandbox. Errors: FileNotFoundError, PermissionError,
    # ValueError (e.g. a relative path), RuntimeError for the rest (a directory where a file is
    # expected, the sandbox died, ...); each has `code`, as everywhere.

    def read_file(self, path) -> bytes:
        """The contents of the sandbox file `path`, as bytes."""
        return self._handle().read_file(str(path))

    def write_file(self, path, data, mode=0o644) -> None:
        """Creates or replaces the sandbox file `path` (parent directories created as needed)
        with `data`: bytes, or text (UTF-8 encoded)."""
        if isinstance(data, str):
            data = data.encode()
        elif not isinstance(data, bytes):
            data = bytes(data)
        self._handle().write_file(str(path), data, mode)

    def stat(self, path) -> FileInfo:
        """`path`'s FileInfo (name, kind, mode, size, mtime, link_target); symlinks are not
        followed."""
        return FileInfo(*self._handle().stat(str(path)))

    def listdir(self, path) -> list[FileInfo]:
        """A FileInfo for each entry of the directory `path` (no "." or "..")."""
        return [FileInfo(*e) for e in self._handle().listdir(str(path))]

    def mkdir(self, path, mode=0o755, parents=False) -> None:
        """Creates the directory `path`. parents=True: missing parents too, and an existing
        directory is fine (mkdir -p); otherwise FileExistsError when `path` exists."""
        path = str(path)
        core = self._handle()
        if not parents:
            try:
                core.stat(path)
            except FileNotFoundError:
                pass
            else:
                raise FileExistsError(f"mkdir {path}: already exists")
            parent = path.rstrip("/").rsplit("/", 1)[0] or "/"
            if core.stat(parent)[1] != "dir":  # FileNotFoundError when missing
                raise NotADirectoryError(f"mkdir {path}: {parent} is not a directory")
        core.mkdir(path, True, mode)

    def remove(self, path, recursive=False) -> None:
        """Removes the file or empty directory `path`; recursive=True removes a whole tree."""
        self._handle().remove_path(str(path), recursive)

    def upload(self, local_path, remote_dir) -> None:
        """Copies the local file or directory `local_path` into the sandbox directory
        `remote_dir` (created if missing), keeping its name: upload("src", "/workspace") makes
        /workspace/src."""
        self._handle().upload(str(local_path), str(remote_dir))

    def download(self, remote_path, local_dir, max_bytes=None) -> None:
        """Copies the sandbox file or directory `remote_path` into the local directory
        `local_dir`, keeping its name. The sandbox's archive is extracted by agvisor's own
        reader (docs/security.md, "Downloads"): regular files, directories and links that stay
        inside `local_dir` only, setuid/setgid/sticky bits dropped, all or nothing (a refused
        entry raises ValueError naming it, and what was extracted is removed). `max_bytes`
        (an int > 0) refuses a download whose files add up to more, before writing them."""
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                      or max_bytes <= 0):
            raise ValueError(f"max_bytes must be a whole number of bytes > 0, got {max_bytes!r}")
        self._handle().download(str(remote_path), str(local_dir), max_bytes or 0)

    def watch(self, path, recursive=True) -> DirectoryWatch:
        """Watches the directory `path` inside the sandbox (absolute; with `recursive`, every
        directory below it too, new ones included) and returns an iterator of WatchEvent
        (type "create", "modify", "delete", "move" or "overflow"; `path` relative to the
        watched directory; `old_path` for moves) that ends when the directory is deleted or
        moved away, or when close() is called (also from another thread); a context manager.
        Changes from the moment watch() returns are reported. FileNotFoundError when `path`
        does not exist, ValueError when it is relative or not a directory, RuntimeError (code
        "sandbox_died") from the iterator when the sandbox ends. See docs/lifecycle.md,
        "Watch"."""
        return DirectoryWatch(self._handle().watch(str(path), bool(recursive)), str(path))

    def open_port(self, port) -> PortConnection:
        """A connection to 127.0.0.1:port inside the sandbox, also with network="none" (it goes
        through the agent, not the network). RuntimeError (code "unavailable") when nothing
        listens there."""
        port = int(port)
        if not 1 <= port <= 65535:
            raise ValueError(f"port must be 1..65535, got {port}")
        return PortConnection(self._handle().open_port(port), port)

    def forward_port(self, remote_port, local_port=0) -> PortForward:
        """Listens on 127.0.0.1:local_port (0 = any free port; see `.local_port`) and pipes each
        connection to the sandbox's port `remote_port` through open_port(), in background
        threads. Use it in `with`, or call close()."""
        remote_port = int(remote_port)
        if not 1 <= remote_port <= 65535:
            raise ValueError(f"port must be 1..65535, got {remote_port}")
        self._handle()  # fail here, not in the first connection, when not started
        return PortForward(self, remote_port, int(local_port))

    def open_shell(self, argv=None, rows=24, cols=80, *, env=None, cwd=None, user=None) -> Shell:
        """Starts argv (default: an interactive bash, else sh) under a rows x cols pseudo-terminal
        and returns a Shell: write(), read(timeout), resize(), wait(), close(). TERM defaults to
        xterm-256color."""
        if argv is None:
            argv = ["sh", "-c", "command -v bash >/dev/null && exec bash -i || exec sh -i"]
        elif isinstance(argv, (str, bytes)):
            raise TypeError("open_shell() takes a list of arguments, e.g. ['bash', '-l']")
        argv = [str(a) for a in argv]
        env = dict(env or {})
        env.setdefault("TERM", "xterm-256color")
        core = self._handle().start_pty(argv, int(rows), int(cols),
                                        [f"{k}={v}" for k, v in env.items()], cwd or "",
                                        user or "")
        return Shell(core, argv)

    # ---- background processes: an extension of the seed's API (agvisor.processes) ----------

    def spawn(self, cmd, *, env=None, cwd=None, user=None, stdin=False,
              timeout=None, keep_awake=False) -> BackgroundProcess:
        """Starts a background process and returns its BackgroundProcess at once. It keeps
        running when this handle is dropped or this Python process exits; the agent keeps the
        last 1 MiB of its output for whoever attaches later (attach(), iteration, output()).

        cmd       A string runs under `sh -c` (as exec()); a list is the argv (as run()).
        env, cwd, user  As for run().
        stdin     True: a stdin pipe, written through BackgroundProcess.attached(); else
                  /dev/null.
        timeout   Seconds until the process tree is killed (exit code 124); None = never.
                  Must be below idle_ttl when the sandbox has one.
        keep_awake  True: while the process runs the sandbox is not idle, so idle_ttl does not
                  end, stop or pause it; its idle clock starts when the process exits. False
                  (the default): the process alone does not keep the sandbox awake.
                  RuntimeError ("unsupported") for a sandbox started by an older agvisor.
        Errors: ValueError, RuntimeError as for run(). A program that cannot be run exits
        with 127 and says why on stderr, as in a shell.
        """
        if isinstance(cmd, str):
            argv = ["sh", "-c", cmd]
        elif isinstance(cmd, bytes):
            raise TypeError("spawn() takes a str (shell command) or a list of arguments")
        else:
            argv = [str(a) for a in cmd]
            if not argv:
                raise ValueError("spawn() needs a command: the argument list is empty")
        seconds = 0.0 if timeout is None else self._check_timeout(timeout)
        if timeout is not None and seconds <= 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        env_list = [f"{k}={v}" for k, v in (env or {}).items()]
        pid = self._handle().start_background(argv, env_list, cwd or "", user or "",
                                              bool(stdin), seconds, bool(keep_awake))
        return BackgroundProcess(self, pid, argv, keep_awake=bool(keep_awake))

    def processes(self) -> list[BackgroundProcess]:
        """The sandbox's background processes, running and the newest 64 finished (whoever
        started them), oldest first; a finished one has its returncode set."""
        return [BackgroundProcess(self, pid, [argv0], None if running else code, awake)
                for pid, argv0, running, code, awake in self._handle().list_processes()]

    def process(self, pid) -> BackgroundProcess:
        """The background process `pid` (as processes() lists it). RuntimeError (code
        "not_found") when there is none."""
        pid = int(pid)
        for p in self.processes():
            if p.pid == pid:
                return p
        raise _not_found(self, pid)

    # ---- desktops (gui=True): an extension of the seed's API (agvisor.desktop) -------------

    @property
    def desktop(self) -> Desktop:
        """Screen, mouse and keyboard of a desktop sandbox: screenshot(), size(), move(),
        click(), double_click(), drag(), scroll(), type(), key(); see agvisor.Desktop."""
        return Desktop(self)

    def desktop_token(self, key: bytes, ttl=300):
        """A token for the desktop gateway (agvisor's, or the <agvisor-desktop> web element):
        it names this sandbox and carries its VNC password, encrypted and MACed with `key`,
        the gateway's 32-byte secret (raw bytes, or 64 hex digits as in its key file). Valid
        for `ttl` seconds to open a session, replayable until then: mint it server side.
        ValueError: not a desktop sandbox, a bad key or ttl."""
        if isinstance(key, str):
            try:
                key = bytes.fromhex(key.strip())
            except ValueError:
                raise ValueError("key must be 32 bytes, or 64 hex digits") from None
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise ValueError("key must be exactly 32 bytes (the gateway's secret, hex-decoded)")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= 86400:
            raise ValueError(f"ttl must be 1..86400 seconds, got {ttl!r}")
        password = self.password
        if password is None:
            if not (self._running or self._listed):
                raise ValueError("start() a gui=True sandbox first")
            try:
                password = self._handle().desktop_password()
            except RuntimeError as e:
                if getattr(e, "code", None) != "not_found":
                    raise
                raise ValueError(f"{self.name} is not a desktop sandbox: create it with "
                                 "gui=True") from None
        return _core.mint_desktop_token(bytes(key), self.name, self.host or "", password,
                                        math.ceil(ttl))

    def _remove(self, erase_data):
        with self._lock:
            self._core, self._running = None, False
            forward, self._rdp_forward, self.rdp_port = self._rdp_forward, None, None
        if forward is not None:
            forward.close()
        try:
            self._place().remove(self.name, erase_data)
        except RuntimeError as e:
            if getattr(e, "code", None) != "not_found":  # already gone: nothing to do
                raise

    def stop(self):
        """Removes the container and frees its CPU and memory; a named sandbox keeps its
        /workspace volume. Safe to call twice. RuntimeError only when the host fails."""
        self._remove(erase_data=False)

    def delete(self):
        """stop(), and erase a named sandbox's /workspace volume too."""
        self._remove(erase_data=self.persistent)

    def __enter__(self):
        return self.start()

    def __exit__(self, *_):
        self.stop()

    @classmethod
    def _from_core(cls, core, *, image, limits, network, lifetime, idle_ttl, host, runtime,
                   platform=None, conn=None):
        """A started handle on a sandbox the core made (a pool member): as create_sandbox()."""
        sb = cls.__new__(cls)
        sb.gui, sb.limits, sb.network = False, limits, network
        sb.lifetime, sb.idle_ttl = lifetime, idle_ttl
        sb.host, sb.runtime, sb.image = host, runtime, image
        sb.platform = platform
        sb._egress = None  # pools make sandboxes without a policy
        sb.persistent = False
        sb.name = core.container_name
        sb.data_dir = None
        sb.rdp_port = sb.password = sb._rdp_forward = None
        sb.resumed, sb.disk_warning = False, core.disk_warning or None
        sb._lock = threading.Lock()
        sb._core = core
        sb._running = True
        sb._listed = False
        sb._conn = conn
        return sb

    @classmethod
    def _listed_handle(cls, info, host, conn=None):
        """A handle on a sandbox list_sandboxes() found: no validation (someone else made it)."""
        sb = cls.__new__(cls)
        sb.gui, sb.limits, sb.network = False, Limits(), "bridge"
        sb.lifetime = sb.idle_ttl = None
        sb.host, sb.runtime = host, "runsc"
        sb.platform = info.get("platform")  # as recorded; None for sandboxes made before that
        sb._egress = None  # not read back (see the egress property)
        sb.image = info["image"] or _core.DEFAULT_IMAGE
        sb.persistent = info["name"] is not None
        sb.name = info["container_name"]
        sb.data_dir = _WORKSPACE if sb.persistent else None
        sb.rdp_port = sb.password = sb._rdp_forward = None
        sb.resumed, sb.disk_warning = False, None
        sb._lock = threading.Lock()
        sb._core = None
        sb._running = info["running"]
        sb._listed = True
        # As listed: "running", "paused", "exited", "removed" (a paused one past its lifetime,
        # ended by this listing), ...
        sb.state = info["state"]
        sb._conn = conn
        return sb


def list_sandboxes(host: str | None = None) -> list[Sandbox]:
    """Every agvisor sandbox on the Docker host, running or stopped, including anonymous ones
    a crashed process left behind. exec(), stop() and delete() work on the handles; start() on
    a stopped one makes a fresh sandbox with the default image, so don't."""
    return [Sandbox._listed_handle(info, host)
            for info in _core.Place.in_process(host or "").list()]


def list_snapshots(host: str | None = None) -> list[dict]:
    """The snapshots on the Docker host (Sandbox.snapshot() and fork() make them), by tag: dicts
    {tag, image, image_id, of (the sandbox it was made of), workspace, created (unix seconds),
    size_bytes}. Images of the snapshot repository not made as snapshots are not listed."""
    return _core.Place.in_process(host or "").list_snapshots()


def remove_snapshot(tag: str, host: str | None = None) -> None:
    """Removes snapshot `tag` ("TAG", "snapshot:TAG" or "agvisor/snapshot:TAG") with the images
    agvisor derived from it; the layers no other image holds go too. Any other image is refused
    (ValueError); one a sandbox runs from is refused naming it (RuntimeError, code "conflict");
    an unknown tag raises RuntimeError with code "not_found"."""
    _core.Place.in_process(host or "").remove_snapshot(tag)


def create_sandbox(
    image: str | None = None,
    *,
    gui: bool = False,
    limits: Limits = Limits(),
    network: str = "bridge",
    lifetime: int | None = None,
    idle_ttl: int | None = None,
    name: str | None = None,
    host: str | None = None,
    runtime: str = "runsc",
    egress: list[str] | Egress | None = None,
    warm_shells: int | None = None,
    platform: str | None = None,
    idle_action: str = "destroy",
    secrets: list[Secret] | None = None,
) -> Sandbox:
    """Sandbox(...).start(): a running sandbox. Use it in `with` or call stop() yourself.

    image     None -> agvisor/base:latest, agvisor's default image (the seed's ubuntu:24.04 needs
              a registry this project does not assume).
    gui       True -> a desktop (agvisor/desktop:latest by default; Xvnc + xfce, reached through
              the agent channel): returns once it is drawn (~10 s). sb.desktop controls it,
              sb.password is its VNC password, also the RDP password for a native RDP client on
              127.0.0.1:sb.rdp_port (forwarded by this process), sb.desktop_token(key) lets a
              browser in through the gateway. Headless only: lifetime, idle_ttl.
    limits    Limits(cpus=2.0, memory="2g", pids=512, shm=None, disk="5g") by default; zero,
              negative or malformed values raise ValueError. The default disk cap is skipped,
              with a warning, on hosts that cannot enforce it; an explicit one is refused there.
    network   "bridge" (default), "none" or a network made with
              `agvisor network create NAME`.
    lifetime  Seconds until the sandbox removes itself, enforced inside it: it holds when this
              process dies.
    idle_ttl  Seconds without an exec() until the sandbox removes itself; exec(timeout=) must
              be shorter. Fixed at creation.
    name      Resumable: files in sb.data_dir (/workspace) live in the volume agvisor-<name> and
              survive stop(), `with`, lifetime and idle expiry. The same name later re-attaches
              to a running sandbox (processes intact) or starts a fresh one on that volume;
              delete() erases it. Names are not owned: namespace them per tenant yourself.
    host      None -> Docker here ($DOCKER_HOST); "ssh://user@host" -> Docker on that machine,
              through one ssh connection (extra ssh options: $AGVISOR_SSH_ARGS).
    runtime   The gVisor Docker runtime, default "runsc".
    egress    An extension of the seed's API: None (default) = no policy, the network as
              `network` says. A list of domain patterns (["pypi.org", "*.pythonhosted.org"]) or
              an agvisor.Egress (domains, CIDRs, ports, denied domains) = deny by default: the
              sandbox reaches only what the policy allows, through agvisord's enforcer on the
              Docker host (HTTP_PROXY/HTTPS_PROXY are set inside, DNS answers allowed names
              only), and nothing at all while agvisord is down. Needs network "bridge": with
              "none" it is a ValueError, as is a malformed rule (the message names it).
              RuntimeError (code "unavailable", naming agvisord) when no agvisord serves the
              Docker host (for an ssh:// host, the agvisord on that host, checked over ssh).
              Read it back with sb.egress.
    warm_shells  An extension of the seed's API: how many shells the sandbox's agent keeps
              started, so that exec(cmd) (which runs `sh -c cmd`) skips starting its shell:
              ~3x faster for short commands. None = the default (2); 0 = off; at most 16. A ready
              shell costs ~4 MB of the memory limit and shows in `ps` inside as
              `sh -s agvisor-agent ready shell ...` (docs/agent.md "Ready shells").
    platform  An extension of the seed's API: the gVisor platform. None = the default: ptrace
              where the host has it (else systrap, with a RuntimeWarning on the first create
              there), or for a named sandbox the platform it was first made on (asking a
              named sandbox for another one is a RuntimeError, code "conflict"). "ptrace": an
              idle sandbox costs almost no CPU and processes start faster, bulk I/O is slower;
              "systrap": faster bulk output, ~4% of a CPU per idle sandbox
              (bench/README.md, "gVisor platform"); needs the runtime runsc-ptrace, which
              scripts/setup-host registers (else ValueError naming it). Another value:
              ValueError. list_sandboxes() handles say theirs in sb.platform.
    secrets   An extension of the seed's API: brokered secrets, a list of agvisor.Secret
              (docs/egress.md, "Secrets"). The sandbox sees NAME=agvsec_<random>; agvisord's
              enforcer puts each value into requests to its hosts. Needs egress allowing those
              hosts and agvisord (agvisor.connect()); in process a RuntimeError (code
              "unsupported") says how to start it.
    idle_action  An extension of the seed's API: what idle_ttl does. "destroy" (default, the
              seed's): the sandbox removes itself. "stop": it ends and its container stays
              (listed as exited); needs a name, whose next create starts afresh on the same
              /workspace. "pause": it is frozen (memory and processes kept) by agvisord's sweep,
              or without a daemon by the next list_sandboxes() or `agvisor ls`, and the next
              call on it resumes it (docs/lifecycle.md "Idle policy").
    """
    return Sandbox(image, gui=gui, limits=limits, network=network, lifetime=lifetime,
                   idle_ttl=idle_ttl, name=name, host=host, runtime=runtime,
                   egress=egress, warm_shells=warm_shells, platform=platform,
                   idle_action=idle_action, secrets=secrets).start()
