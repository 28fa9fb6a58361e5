"""sb.watch() against real runsc, in process and through agvisord (the `av` fixture runs each
test both ways, conftest.py): an exec's changes arrive as WatchEvents, close() from another
thread ends the iterator, a deleted directory ends it, a missing path and a file are clear
errors. The first runs on the Kubernetes runtime too (`kube`)."""
import threading
import time

import pytest

from agvisor import DirectoryWatch, Limits, WatchEvent

# Events of a finished exec arrive within milliseconds here; 5 s (as in
# tests/integration/sandbox_watch_test.cc) fails only on a lost or stuck event.
BOUND = 5.0


@pytest.fixture(scope="module")
def sb(av):
    with av.create_sandbox(limits=Limits(cpus=1, memory="512m")) as box:
        yield box


def collect(w, until_path):
    got = []
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        got.extend(w.next_events(timeout=0.2))
        if any(e.path == until_path for e in got) or w.closed:
            break
    return got


@pytest.mark.kube
def test_an_execs_changes_arrive_as_events(sb):
    sb.exec("rm -rf /tmp/w && mkdir /tmp/w")
    with sb.watch("/tmp/w") as w:
        assert isinstance(w, DirectoryWatch)
        # In two parts: the move starts once "create d" came, i.e. once d is watched too. Run as
        # one, `mv f d/g` can land before the agent has read the mkdir, and inotify then reports
        # f leaving the tree and g found in d: true, but not the move this test checks.
        sb.exec("cd /tmp/w && echo a > f && mkdir d")
        got = collect(w, "d")
        sb.exec("cd /tmp/w && mv f d/g && rm d/g && touch done")
        got += collect(w, "done")
    assert all(isinstance(e, WatchEvent) for e in got)
    seen = [(e.type, e.path, e.is_dir, e.old_path) for e in got]
    for want in [("create", "f", False, ""), ("create", "d", True, ""),
                 ("move", "d/g", False, "f"), ("delete", "d/g", False, ""),
                 ("create", "done", False, "")]:
        assert want in seen, seen
    assert seen.index(("move", "d/g", False, "f")) < seen.index(("delete", "d/g", False, ""))
    assert w.closed


def test_close_from_another_thread_ends_the_iterator_and_deleting_the_root_too(sb):
    sb.exec("rm -rf /tmp/w2 && mkdir /tmp/w2")
    w = sb.watch("/tmp/w2", recursive=False)
    threading.Timer(0.3, w.close).start()
    start = time.monotonic()
    assert list(w) == []
    assert time.monotonic() - start < BOUND
    w = sb.watch("/tmp/w2")
    sb.exec("rm -rf /tmp/w2")
    start = time.monotonic()
    events = list(w)  # ends by itself: the directory is gone
    assert time.monotonic() - start < BOUND
    assert w.closed, events


def test_a_missing_path_and_a_file_are_clear_errors(sb):
    with pytest.raises(FileNotFoundError):
        sb.watch("/tmp/no-such-dir")
    with pytest.raises(ValueError, match="not a directory"):
        sb.watch("/etc/hostname")
    with pytest.raises(ValueError):
        sb.watch("relative/path")
