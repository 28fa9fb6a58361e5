"""File metadata, port connections, port forwards and pty shells: what Sandbox.stat(),
open_port(), forward_port() and open_shell() return. Every blocking call releases the GIL."""
import dataclasses
import socket
import threading

from ._context import ClosesOnExit

_BUFSIZE = 65536


@dataclasses.dataclass(frozen=True)
class FileInfo:
    """A file inside the sandbox, as stat() and listdir() report it.

    name         The last path component.
    kind         "file", "dir", "symlink" or "other".
    mode         st_mode as the sandbox sees it (stat.S_IMODE(mode) = the permission bits).
    size         Bytes.
    mtime        Modification time, seconds since the epoch.
    link_target  For a symlink: where it points; "" otherwise.
    """
    name: str
    kind: str
    mode: int
    size: int
    mtime: float
    link_target: str = ""

    def is_dir(self):
        return self.kind == "dir"

    def is_file(self):
        return self.kind == "file"


class PortConnection(ClosesOnExit):
    """A TCP connection to 127.0.0.1:port inside the sandbox (Sandbox.open_port), with the
    parts of the socket API that make sense for it. recv() and send() may run on two threads at
    once; close() from another thread while recv() waits takes effect when that recv() returns
    (the sandbox side is told at once). A context manager: closes on exit."""

    def __init__(self, core, port):
        self._core = core
        self.port = port

    def send(self, data) -> int:
        """Sends all of `data` (blocking while the sandbox side is slow) and returns len(data)."""
        data = bytes(data)
        self._core.sendall(data)
        return len(data)

    def sendall(self, data) -> None:
        self._core.sendall(bytes(data))

    def recv(self, bufsize=_BUFSIZE) -> bytes:
        """Up to bufsize bytes, waiting for at least one; b"" once the sandbox side closed."""
        return self._core.recv(bufsize)

    def shutdown_write(self) -> None:
        """The sandbox side reads end of file; recv() goes on."""
        self._core.shutdown_write()

    def close(self) -> None:
        self._core.close()

    @property
    def closed(self) -> bool:
        return self._core.closed

    def __repr__(self):
        return f"<agvisor.PortConnection port={self.port}{' closed' if self.closed else ''}>"


def _pump(read, write, end, abort):
    """Copies read(_BUFSIZE) to write() until read gives b"", then calls end(); abort() instead
    when either side fails (a socket's OSError, the sandbox's RuntimeError)."""
    try:
        while True:
            data = read(_BUFSIZE)
            if not data:
                break
            write(data)
        end()
    except (OSError, RuntimeError):
        abort()


def _pump_to_sandbox(conn, port):
    def abort():
        port.close()
        _shutdown(conn, socket.SHUT_RDWR)

    _pump(conn.recv, port.sendall, port.shutdown_write, abort)


def _pump_from_sandbox(conn, port):
    _pump(port.recv, conn.sendall, lambda: _shutdown(conn, socket.SHUT_WR),
          lambda: _shutdown(conn, socket.SHUT_RDWR))


def _shutdown(conn, how):
    try:
        conn.shutdown(how)
    except OSError:
        pass


class PortForward(ClosesOnExit):
    """Sandbox.forward_port(): a listener on 127.0.0.1:local_port; every connection to it is
    piped through open_port(remote_port) by background threads. A context manager: close() (or
    leaving the `with`) stops listening and closes the connections still open."""

    def __init__(self, sandbox, remote_port, local_port=0):
        self.remote_port = remote_port
        self._sandbox = sandbox
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind(("127.0.0.1", local_port))
            self._listener.listen(64)
        except OSError:
            self._listener.close()
            raise
        self.local_port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open = set()  # (conn, port) pairs still piping
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"agvisor-forward-{self.local_port}")
        self._thread.start()

    @property
    def address(self):
        return ("127.0.0.1", self.local_port)

    def _accept_loop(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            port = self._sandbox.open_port(self.remote_port)
        except (RuntimeError, ValueError):
            conn.close()  # nothing listens inside (or the sandbox is gone): refuse by closing
            return
        pair = (conn, port)
        with self._lock:
            if self._closed:
                conn.close()
                port.close()
                return
            self._open.add(pair)
        upstream = threading.Thread(target=_pump_to_sandbox, args=pair, daemon=True)
        upstream.start()
        _pump_from_sandbox(conn, port)
        upstream.join()
        with self._lock:
            self._open.discard(pair)
        port.close()
        conn.close()

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pairs = list(self._open)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        self._listener.close()
        self._thread.join(timeout=5)
        for conn, port in pairs:
            _shutdown(conn, socket.SHUT_RDWR)
            port.close()

    def __repr__(self):
        return (f"<agvisor.PortForward 127.0.0.1:{self.local_port} -> sandbox port "
                f"{self.remote_port}{' closed' if self._closed else ''}>")


class Shell(ClosesOnExit):
    """A command under a pseudo-terminal inside the sandbox (Sandbox.open_shell). Output
    (stdout and stderr merged, as a terminal shows them) is collected in the background; read()
    takes it. A context manager: close() kills the command if it still runs."""

    def __init__(self, core, argv):
        self._core = core
        self.argv = argv

    def write(self, data) -> None:
        """Sends keystrokes / input (text is UTF-8 encoded)."""
        self._core.write(data.encode() if isinstance(data, str) else bytes(data))

    def read(self, timeout=None, bufsize=_BUFSIZE) -> bytes:
        """Output available now, waiting up to `timeout` seconds (None = until some arrives).
        b"" on timeout, or once the command ended and everything was read."""
        return self._core.read(bufsize, -1.0 if timeout is None else max(0.0, float(timeout)))

    def read_until(self, marker, timeout=30) -> bytes:
        """Output up to and including `marker` (bytes or text); TimeoutError if it does not
        appear within `timeout` seconds or the command ends first."""
        import time
        marker = marker.encode() if isinstance(marker, str) else marker
        deadline = time.monotonic() + timeout
        got = b""
        while marker not in got:
            left = deadline - time.monotonic()
            chunk = self.read(timeout=max(0.0, left)) if left > 0 else b""
            if not chunk and (left <= 0 or self.poll() is not None):
                raise TimeoutError(f"{marker!r} not seen; output so far: {got[-500:]!r}")
            got += chunk
        return got

    def resize(self, rows, cols) -> None:
        self._core.resize(rows, cols)

    def signal(self, signal) -> None:
        """Sends `signal` to the command's process group."""
        self._core.signal(int(signal))

    def close_stdin(self) -> None:
        self._core.close_stdin()

    def wait(self, timeout=None) -> int:
        """The exit code (128+N = killed by signal N); TimeoutError if it runs longer than
        `timeout` seconds. Output not read yet stays readable."""
        code = self._core.wait(-1.0 if timeout is None else max(0.0, float(timeout)))
        if code is None:
            raise TimeoutError(f"{self.argv!r} still runs after {timeout} s")
        return code

    def poll(self):
        """The exit code, or None while the command runs."""
        return self._core.poll()

    @property
    def pid(self):
        return self._core.pid

    def close(self) -> None:
        self._core.close()

    def __repr__(self):
        return f"<agvisor.Shell {self.argv!r} returncode={self.poll()!r}>"
