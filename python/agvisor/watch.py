"""Directory watches: what Sandbox.watch() returns. Waiting releases the GIL."""
import dataclasses

from ._context import ClosesOnExit

# How long one wait inside the iterator lasts: Ctrl-C (KeyboardInterrupt) and close() from
# another thread are seen within this many seconds.
_POLL_SECONDS = 0.25


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    """One change under a watched directory.

    type      "create", "modify", "delete", "move", or "overflow" (events were lost because
              the reader was slow: rescan what you need; it has no path).
    path      Relative to the watched directory ("src/a.py"); for a move, the new path.
    is_dir    The entry is a directory.
    old_path  For a move: where it was. "" otherwise.
    """
    type: str
    path: str
    is_dir: bool = False
    old_path: str = ""


class DirectoryWatch(ClosesOnExit):
    """An iterator of WatchEvent for one watched directory (Sandbox.watch). It ends when the
    directory is deleted or moved away, or after close() (from any thread); RuntimeError with
    code "sandbox_died" when the sandbox ends. A context manager: closes on exit."""

    def __init__(self, core, path):
        self._core = core
        self.path = path
        self._pending = []
        self._closed = False

    def __iter__(self):
        return self

    def __next__(self) -> WatchEvent:
        while not self._pending:
            if self._closed:
                raise StopIteration
            batch = self._core.next(_POLL_SECONDS)
            if batch is None:
                self._closed = True
                raise StopIteration
            self._pending = [WatchEvent(*e) for e in batch]
            self._pending.reverse()
        return self._pending.pop()

    def next_events(self, timeout=None) -> list:
        """The events that arrived, waiting up to `timeout` seconds (None: until some arrive or
        the watch ends): a list; [] on timeout, or once the watch is over (`closed` is then
        true)."""
        out = []
        while self._pending:
            out.append(self._pending.pop())
        if out or self._closed:
            return out
        waited = 0.0
        while timeout is None or waited < timeout:
            step = _POLL_SECONDS if timeout is None else min(_POLL_SECONDS, timeout - waited)
            batch = self._core.next(step)
            if batch is None:
                self._closed = True
                return []
            if batch:
                return [WatchEvent(*e) for e in batch]
            waited += step
        return []

    def close(self) -> None:
        """Ends the watch; idempotent."""
        self._closed = True
        self._core.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self):
        return f"<agvisor.DirectoryWatch {self.path!r}{' closed' if self._closed else ''}>"
