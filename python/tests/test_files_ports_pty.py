"""Files, ports and pty shells against real runsc: read/write/stat/listdir/mkdir/remove,
upload/download, open_port and forward_port to a server inside a network="none" sandbox, and
open_shell under a real pty. The `kube` tests run on the Kubernetes runtime too (conftest.py): the
same calls ride the agent channel there, through an exec relay into the pod."""
import os
import stat
import threading
import time
import urllib.request

import pytest

import agvisor
from agvisor import FileInfo, Limits

SMALL = Limits(cpus=1, memory="512m")


@pytest.fixture(scope="module")
def sb(av):
    with av.create_sandbox(limits=SMALL, network="none") as box:
        yield box


# ---- files --------------------------------------------------------------------------------------

@pytest.mark.kube
def test_binary_round_trip(sb):
    data = bytes(range(256)) * 64 + b"\x00\x00\xff\xfe\x80 not utf-8 \xc3"
    sb.write_file("/tmp/rt/deep/blob.bin", data)  # parents created
    assert sb.read_file("/tmp/rt/deep/blob.bin") == data
    # What the sandbox itself sees.
    assert sb.run(["sha256sum", "/tmp/rt/deep/blob.bin"]).stdout.split()[0].decode() == \
        __import__("hashlib").sha256(data).hexdigest()


def test_large_file_round_trip(sb):
    data = os.urandom(3 * 1024 * 1024 + 17)
    sb.write_file("/tmp/large.bin", data)
    assert sb.read_file("/tmp/large.bin") == data


@pytest.mark.kube
def test_text_and_mode(sb):
    sb.write_file("/tmp/t.sh", "#!/bin/sh\necho héllo\n", mode=0o755)
    assert sb.read_file("/tmp/t.sh") == "#!/bin/sh\necho héllo\n".encode()
    info = sb.stat("/tmp/t.sh")
    assert isinstance(info, FileInfo)
    assert (info.name, info.kind, stat.S_IMODE(info.mode), info.size) == (
        "t.sh", "file", 0o755, len("#!/bin/sh\necho héllo\n".encode()))
    assert abs(info.mtime - time.time()) < 300
    assert sb.exec("/tmp/t.sh").stdout == "héllo\n"


def test_stat_listdir_mkdir_remove(sb):
    sb.mkdir("/tmp/tree")
    with pytest.raises(FileExistsError):
        sb.mkdir("/tmp/tree")
    with pytest.raises(FileNotFoundError):
        sb.mkdir("/tmp/missing/child")
    sb.mkdir("/tmp/tree/a/b/c", parents=True)
    sb.mkdir("/tmp/tree/a/b/c", parents=True)  # exists: fine with parents
    sb.mkdir("/tmp/tree/m", mode=0o700)
    sb.write_file("/tmp/tree/f.txt", b"12345")
    sb.exec("ln -s f.txt /tmp/tree/link")
    d = sb.stat("/tmp/tree")
    assert d.kind == "dir" and d.is_dir() and stat.S_ISDIR(d.mode)
    assert stat.S_IMODE(sb.stat("/tmp/tree/m").mode) == 0o700
    entries = {e.name: e for e in sb.listdir("/tmp/tree")}
    assert set(entries) == {"a", "m", "f.txt", "link"}
    assert entries["f.txt"].kind == "file" and entries["f.txt"].size == 5
    assert entries["a"].kind == "dir"
    assert entries["link"].kind == "symlink" and entries["link"].link_target == "f.txt"
    sb.remove("/tmp/tree/f.txt")
    with pytest.raises(RuntimeError) as e:
        sb.remove("/tmp/tree/a")  # not empty
    assert e.value.code == "conflict"
    sb.remove("/tmp/tree", recursive=True)
    with pytest.raises(FileNotFoundError):
        sb.stat("/tmp/tree")


@pytest.mark.kube
def test_file_errors(sb):
    with pytest.raises(FileNotFoundError) as e:
        sb.read_file("/no/such/file")
    assert e.value.code == "not_found" and e.value.filename == "/no/such/file"
    with pytest.raises(FileNotFoundError):
        sb.listdir("/no/such/dir")
    with pytest.raises(FileNotFoundError):
        sb.remove("/no/such/file")
    with pytest.raises(ValueError):
        sb.read_file("relative/path")
    with pytest.raises(ValueError) as e:
        sb.read_file("/tmp")  # a directory: the agent calls it an invalid argument
    assert "directory" in str(e.value)
    sb.write_file("/tmp/rt-file", b"x")
    with pytest.raises(RuntimeError) as e:
        sb.write_file("/tmp/rt-file/below", b"y")  # a file where a directory must be
    assert e.value.code == "conflict"


@pytest.mark.kube
def test_upload_download_tree(sb, tmp_path):
    src = tmp_path / "proj"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "README").write_text("hello\n")
    (src / "pkg" / "data.bin").write_bytes(b"\x00\xff" * 1000)
    (src / "pkg" / "sub" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "pkg" / "sub" / "run.sh").chmod(0o755)
    sb.upload(src, "/tmp/up")
    assert sb.read_file("/tmp/up/proj/README") == b"hello\n"
    assert sb.read_file("/tmp/up/proj/pkg/data.bin") == b"\x00\xff" * 1000
    assert sb.exec("/tmp/up/proj/pkg/sub/run.sh").stdout == "ran\n"
    sb.write_file("/tmp/up/proj/pkg/new.txt", b"made inside")
    out = tmp_path / "back"
    out.mkdir()
    sb.download("/tmp/up/proj", out)
    assert (out / "proj" / "README").read_text() == "hello\n"
    assert (out / "proj" / "pkg" / "data.bin").read_bytes() == b"\x00\xff" * 1000
    assert (out / "proj" / "pkg" / "new.txt").read_bytes() == b"made inside"
    assert os.access(out / "proj" / "pkg" / "sub" / "run.sh", os.X_OK)
    sb.download("/tmp/up/proj/README", out)  # a single file
    assert (out / "README").read_text() == "hello\n"
    with pytest.raises(FileNotFoundError):
        sb.upload(tmp_path / "missing", "/tmp/up")
    with pytest.raises(FileNotFoundError):
        sb.download("/tmp/up/missing", out)


def test_download_is_safe_for_this_machine(sb, tmp_path):
    """What a sandbox makes with its own files cannot harm the host through download()
    (docs/security.md, "Downloads"): a setuid copy of a binary arrives without the bit, an
    absolute symlink is refused naming it and the download is undone, a budget is kept."""
    made = sb.run(["sh", "-c", "set -e; rm -rf /tmp/hx; mkdir -p /tmp/hx/g; "
                               "cp /bin/sh /tmp/hx/suid; chmod 4755 /tmp/hx/suid; "
                               "chmod 2775 /tmp/hx/g; ln -s /etc /tmp/hx/etc"])
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out"
    with pytest.raises(ValueError) as e:
        sb.download("/tmp/hx", out)
    assert "'hx/etc'" in str(e.value) and "absolute" in str(e.value)
    assert not out.exists()  # made by the download, removed with everything in it
    assert sb.run(["rm", "/tmp/hx/etc"]).returncode == 0
    sb.download("/tmp/hx", out)
    assert stat.S_IMODE(os.lstat(out / "hx" / "suid").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(out / "hx" / "g").st_mode) == 0o775
    with pytest.raises(RuntimeError) as e:
        sb.download("/tmp/hx", tmp_path / "small", max_bytes=1000)
    assert e.value.code == "resource_exhausted" and "budget of 1000 bytes" in str(e.value)
    assert not (tmp_path / "small").exists()
    for bad in (0, -1, 1.5, True, "1k"):
        with pytest.raises(ValueError):
            sb.download("/tmp/hx", tmp_path / "small", max_bytes=bad)


# ---- ports --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def http_port(sb):
    """python3 -m http.server inside the network="none" sandbox, serving /tmp/www."""
    sb.write_file("/tmp/www/hello.txt", b"hello from the sandbox\n")
    sb.exec("cd /tmp/www && nohup python3 -m http.server 8000 --bind 127.0.0.1 "
            ">/tmp/http.log 2>&1 &")
    deadline = time.monotonic() + 30
    while True:
        try:
            sb.open_port(8000).close()
            return 8000
        except RuntimeError as e:
            assert e.code == "unavailable"
            assert time.monotonic() < deadline, sb.exec("cat /tmp/http.log").stdout
            time.sleep(0.1)


def http_get(conn, path):
    conn.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
    out = b""
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            return out
        out += chunk


@pytest.mark.kube
def test_open_port_http_get(sb, http_port):
    with sb.open_port(http_port) as conn:
        reply = http_get(conn, "/hello.txt")
    assert conn.closed
    assert reply.startswith(b"HTTP/1.0 200")
    assert reply.endswith(b"\r\n\r\nhello from the sandbox\n")


def test_open_port_nothing_listening(sb):
    with pytest.raises(RuntimeError) as e:
        sb.open_port(8999)
    assert e.value.code == "unavailable"
    with pytest.raises(ValueError):
        sb.open_port(0)


def test_open_port_echo_half_close_and_threads(sb):
    sb.write_file("/tmp/echo.py", b"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8001)); s.listen()
while True:
    c, _ = s.accept()
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
""")
    sb.exec("nohup python3 /tmp/echo.py >/dev/null 2>&1 &")
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = sb.open_port(8001)
            break
        except RuntimeError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    data = os.urandom(2 * 1024 * 1024)
    got = []

    def reader():
        while chunk := conn.recv():
            got.append(chunk)

    t = threading.Thread(target=reader)
    t.start()  # recv in one thread, send in this one: both release the GIL
    assert conn.send(data[:10]) == 10
    conn.sendall(data[10:])
    conn.shutdown_write()
    t.join(60)
    assert not t.is_alive()
    assert b"".join(got) == data
    conn.close()
    conn.close()  # idempotent
    with pytest.raises(RuntimeError):
        conn.sendall(b"x")


@pytest.mark.kube
def test_forward_port_with_urllib(sb, http_port):
    with sb.forward_port(http_port) as fwd:
        assert fwd.local_port > 0
        url = f"http://127.0.0.1:{fwd.local_port}/hello.txt"
        with urllib.request.urlopen(url, timeout=30) as r:
            assert r.status == 200 and r.read() == b"hello from the sandbox\n"
        # Several at once, each its own connection.
        results = []

        def fetch():
            with urllib.request.urlopen(url, timeout=30) as r:
                results.append(r.read())

        threads = [threading.Thread(target=fetch) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [b"hello from the sandbox\n"] * 8
    with pytest.raises(OSError):  # closed: nothing listens any more
        urllib.request.urlopen(url, timeout=5)


# ---- pty ----------------------------------------------------------------------------------------

@pytest.mark.kube
def test_shell_tty_and_size(sb):
    with sb.open_shell(["sh"], rows=33, cols=101) as sh:
        sh.write("tty; stty size; echo done-$((6*7))\n")
        out = sh.read_until("done-42", timeout=30)
        assert b"/dev/pts/" in out
        assert b"33 101" in out
        sh.resize(40, 120)
        sh.write("stty size; exit 5\n")
        assert sh.wait(30) == 5
        rest = b""
        while chunk := sh.read(timeout=1):
            rest += chunk
        assert b"40 120" in rest
        assert sh.poll() == 5


def test_shell_default_close_and_timeouts(sb):
    sh = sb.open_shell()
    try:
        assert sh.read(timeout=0.01) in (b"",) or True  # may already show a prompt
        with pytest.raises(TimeoutError):
            sh.wait(timeout=0.2)
        assert sh.poll() is None
        sh.write(b"echo $TERM\n")
        assert b"xterm-256color" in sh.read_until("xterm-256color", timeout=30)
        sh.write("sleep 1000\n")
    finally:
        start = time.monotonic()
        sh.close()  # kills it
        # close() kills `sleep 1000` instead of waiting for it; a kill and its exit took 1.4 s at
        # most on a loaded 2-core host (sandbox_lifecycle_test's timeout), so 10 s is 7x that.
        assert time.monotonic() - start < 10
    assert sh.poll() is not None
    sh.close()  # idempotent


def test_new_api_is_exported():
    # Importable from agvisor; __all__ stays the seed's (test_api_shape).
    for name in ("FileInfo", "PortConnection", "PortForward", "Shell"):
        assert getattr(agvisor, name) is getattr(agvisor.streams, name)


def test_blocking_reads_release_the_gil(sb):
    with sb.open_shell(["sleep", "100"]) as sh:
        done = []
        t = threading.Thread(target=lambda: done.append(sh.read(timeout=1.5)))
        t.start()
        time.sleep(0.1)
        count, end = 0, time.monotonic() + 0.5
        while time.monotonic() < end:  # would stall if read() held the GIL
            count += 1
        assert count > 10000 and t.is_alive()
        t.join(10)
        assert done == [b""]
