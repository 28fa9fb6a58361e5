"""Background processes: what Sandbox.spawn(), processes() and process() return.

A background process keeps running when the handle that started it is dropped, when this Python
process exits, and while nobody is attached; the agent inside the sandbox keeps the last 1 MiB of
its output. Any handle on the sandbox (another process, list_sandboxes(), a later session of a
named sandbox) can list it, attach to it (the kept output is replayed, then the live output
follows), signal it and wait for it.

Attaching is one client at a time per process (the agent's rule): a second attach while one is
open raises RuntimeError with code "conflict". Every attach here is short-lived (it ends with the
call, the iteration or the `with` that opened it), so the agent never stalls a process for a
reader that went away. Every blocking call releases the GIL; callbacks run on the calling thread
and their exceptions propagate as they are (after detaching; the process runs on).
"""
import codecs
import signal as _signal
import subprocess
import time

from ._context import ClosesOnExit

# How long one blocking read waits before Python gets a chance to handle Ctrl-C.
_SLICE = 0.5


def _left(deadline):
    return None if deadline is None else deadline - time.monotonic()


def _slice(deadline):
    left = _left(deadline)
    return _SLICE if left is None else max(0.0, min(left, _SLICE))


def _seconds(what, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{what} must be a number of seconds >= 0 or None, got {value!r}")
    return float(value)


class Attachment(ClosesOnExit):
    """A live attachment to a background process (BackgroundProcess.attached()): its kept output
    first, then live output; its stdin (if it was spawned with stdin=True); signals. A context
    manager: leaving it (or detach()) detaches, and the process runs on."""

    def __init__(self, core, process):
        self._core = core
        self.process = process

    def read(self, timeout=None):
        """The next output chunk as (stream, bytes), stream "stdout" or "stderr"; None when
        nothing came within `timeout` seconds (None = wait for it); ("", b"") once the process
        exited and everything was read. RuntimeError when the attach failed (code "not_found":
        no such background process, "conflict": another client is attached, "sandbox_died")."""
        deadline = None if timeout is None else time.monotonic() + _seconds("timeout", timeout)
        while True:
            got = self._core.read(_slice(deadline))
            if got is not None:
                stream, data = got
                return ("", b"") if stream == 0 else ("stdout" if stream == 1 else "stderr", data)
            if deadline is not None and _left(deadline) <= 0:
                return None

    def write(self, data) -> None:
        """Sends bytes (text is UTF-8 encoded) to the process's stdin (spawn(stdin=True))."""
        self._core.write(data.encode() if isinstance(data, str) else bytes(data))

    def close_stdin(self) -> None:
        """The process reads end of file."""
        self._core.close_stdin()

    def signal(self, sig) -> None:
        """BackgroundProcess.signal: through the agent, like every signal."""
        self.process.signal(sig)

    def wait(self, timeout=None) -> int:
        """The exit code once the process exited (output not read stays readable; a full
        buffer of unread output holds the process up: read it). TimeoutError after
        `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + _seconds("timeout", timeout)
        while True:
            got = self._core.wait(_slice(deadline))
            if got is not None:
                self.process.returncode = got[0]
                return got[0]
            if deadline is not None and _left(deadline) <= 0:
                raise TimeoutError(f"background process {self.process.pid} still runs after "
                                   f"{timeout} s")

    def detach(self) -> None:
        """Ends the attachment; the process keeps running. Idempotent."""
        self._core.close()

    close = detach

    @property
    def closed(self) -> bool:
        """True once detached or once the process exited."""
        return self._core.closed

    def __iter__(self):
        """(stream, bytes) chunks until the process exits."""
        while True:
            stream, data = self.read()
            if not stream:
                return
            yield stream, data

    def __repr__(self):
        return f"<agvisor.Attachment pid={self.process.pid}{' closed' if self.closed else ''}>"


class BackgroundProcess:
    """A background process inside a sandbox (Sandbox.spawn, processes(), process()).

    pid         Its pid inside the sandbox.
    argv        What it runs: the whole argv when this handle started it, [argv0] when listed.
    returncode  The exit code once this handle saw the process end (poll, wait, attach,
                output), else None. 128+N = killed by signal N; 124 = its timeout expired.
    keep_awake  True when it was started with spawn(keep_awake=True): while it runs, the
                sandbox is not idle.

    Dropping the handle does nothing to the process: it runs on. Use kill() (or terminate()) to
    end it.
    """

    def __init__(self, sandbox, pid, argv, returncode=None, keep_awake=False):
        self.sandbox = sandbox
        self.pid = int(pid)
        self.argv = list(argv)
        self.returncode = returncode
        self.keep_awake = bool(keep_awake)

    def _attach(self, keep_output=True):
        return self.sandbox._handle().attach_process(self.pid, keep_output)

    def attached(self) -> Attachment:
        """Attaches and returns the live Attachment (read, iterate, write, signal, wait); use it
        in `with`, which detaches at the end."""
        return Attachment(self._attach(), self)

    def attach(self, on_output=None, *, on_stdout=None, on_stderr=None, timeout=None) -> int:
        """Delivers the kept output, then the live output, until the process exits, and returns
        its exit code (at once for a finished process).

        on_output   Called with text (UTF-8, stdout and stderr merged) as it arrives.
        on_stdout, on_stderr  Called with bytes of each stream.
        timeout     Seconds; when the process still runs then, detach and raise TimeoutError
                    (the process keeps running).
        An exception a callback raises detaches and propagates (the process keeps running).
        RuntimeError: no such background process ("not_found"), another client is attached
        ("conflict"), the sandbox died ("sandbox_died").
        """
        deadline = None if timeout is None else time.monotonic() + _seconds("timeout", timeout)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with self.attached() as att:
            while True:
                got = att.read(timeout=None if deadline is None else max(0.0, _left(deadline)))
                if got is None:
                    raise TimeoutError(f"background process {self.pid} still runs after "
                                       f"{timeout} s (detached; it keeps running)")
                stream, data = got
                if not stream:
                    break
                if on_output is not None:
                    text = decoder.decode(data)
                    if text:
                        on_output(text)
                callback = on_stdout if stream == "stdout" else on_stderr
                if callback is not None:
                    callback(data)
            if on_output is not None:
                tail = decoder.decode(b"", final=True)
                if tail:
                    on_output(tail)
            return att.wait()

    def __iter__(self):
        """Lines of text (stdout and stderr merged, line endings kept) from the kept output on,
        until the process exits. Leaving the loop early detaches."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        with self.attached() as att:
            for _, data in att:
                pending += decoder.decode(data)
                *lines, pending = pending.split("\n")
                for line in lines:
                    yield line + "\n"
            pending += decoder.decode(b"", final=True)
            if pending:
                yield pending
            att.wait()

    def output(self, timeout=None) -> subprocess.CompletedProcess:
        """Waits for the exit and returns a CompletedProcess(argv, returncode, stdout, stderr)
        with the kept output as text (the agent keeps the last 1 MiB). TimeoutError after
        `timeout` seconds (the process keeps running)."""
        out, err = [], []
        code = self.attach(on_stdout=out.append, on_stderr=err.append, timeout=timeout)
        return subprocess.CompletedProcess(self.argv, code,
                                           b"".join(out).decode("utf-8", errors="replace"),
                                           b"".join(err).decode("utf-8", errors="replace"))

    def wait(self, timeout=None) -> int:
        """Waits for the exit and returns the exit code; TimeoutError after `timeout` seconds
        (the process keeps running). Works while another client is attached (it then asks the
        agent's process list instead)."""
        deadline = None if timeout is None else time.monotonic() + _seconds("timeout", timeout)
        try:
            core = self._attach(keep_output=False)
        except RuntimeError as e:
            if getattr(e, "code", None) != "conflict":
                raise
            return self._wait_by_listing(deadline, timeout)
        with Attachment(core, self) as att:
            try:
                return att.wait(timeout=None if deadline is None else max(0.0, _left(deadline)))
            except TimeoutError:
                raise TimeoutError(f"background process {self.pid} still runs after {timeout} s"
                                   ) from None
            except RuntimeError as e:
                if getattr(e, "code", None) != "conflict":
                    raise
        return self._wait_by_listing(deadline, timeout)

    def _wait_by_listing(self, deadline, timeout):
        # Another client is attached: the process list is the only other way to learn the exit.
        delay = 0.05
        while True:
            code = self.poll()
            if code is not None:
                return code
            left = _left(deadline)
            if left is not None and left <= 0:
                raise TimeoutError(f"background process {self.pid} still runs after {timeout} s")
            time.sleep(delay if left is None else min(delay, left))
            delay = min(delay * 2, 1.0)

    def poll(self):
        """The exit code if the process has ended, else None (one question to the agent)."""
        for pid, _, running, code, _ in self.sandbox._handle().list_processes():
            if pid == self.pid:
                if not running:
                    self.returncode = code
                return None if running else code
        raise _not_found(self.sandbox, self.pid)

    def signal(self, sig) -> None:
        """Sends `sig` (a number or signal.Signals) to the process's process group; a finished
        process is left alone."""
        # Through the agent, whoever holds the attach; never through an attachment of this
        # handle: one still being set up may yet be refused (another client attached), and a
        # signal sent through it would be lost.
        self.sandbox._handle().signal_process(self.pid, int(sig))

    def terminate(self) -> None:
        """signal(SIGTERM)."""
        self.signal(_signal.SIGTERM)

    def kill(self) -> None:
        """signal(SIGKILL)."""
        self.signal(_signal.SIGKILL)

    def __repr__(self):
        state = "running" if self.returncode is None else f"returncode={self.returncode}"
        return f"<agvisor.BackgroundProcess pid={self.pid} {self.argv!r} {state}>"


def _not_found(sandbox, pid):
    e = RuntimeError(f"no background process {pid} in {sandbox.name} (the agent lists the "
                     "running ones and the newest 64 finished)")
    e.code = "not_found"
    return e
