"""Fixtures of the Python package's tests, which run against the real dockerd + runsc.

- Every sandbox a test starts is recorded (Sandbox.start is wrapped for the session) and removed
  with its volume at the end, so a failing test leaks nothing. Names get this run's id: the
  machine's dockerd is shared with other test runs.
- `image_alias` tags the local agvisor/base:latest under a name an example uses (python:3.12)
  through the Engine API, and removes the tag afterwards (only if this run made it).
- `build_binary("agvisord")` is the path of a binary of the build the wheel came from
  ($AGVISOR_TEST_BUILD_DIR, set by python/test-wheel).
- `av` is where a test's sandboxes live, one parameter each: `agvisor` itself (in process) and
  `agvisor.connect(...)` to the build's agvisord, started for the module on a unix socket with a
  token in a temporary directory (--no-egress: it serves no egress networks, so test_egress's
  daemons stay the only ones). Tests written against `av` run both ways; a test that differs by
  path takes it (or a fixture built on it, such as `sb`).
- `sshd` starts a real sshd on 127.0.0.1 with keys generated here and points the C++ ssh
  transport at them through $AGVISOR_SSH_ARGS: ssh:// examples reach this machine's dockerd.
A missing daemon or sshd is a failure, not a skip.
"""
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid

import pytest

import agvisor
import agvisor.sandbox

RUN_ID = "py" + uuid.uuid4().hex[:6]
DOCKER_SOCKET = "/var/run/docker.sock"


def pytest_report_header(config):
    return [f"agvisor imported from {os.path.dirname(agvisor.__file__)}", f"test run id {RUN_ID}"]


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(self._path)


def engine(method, path):
    """One Engine API request to the local dockerd; returns (status, decoded JSON or None)."""
    conn = _UnixHTTPConnection(os.environ.get("AGVISOR_TEST_DOCKER_SOCKET", DOCKER_SOCKET))
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read()
        try:
            return resp.status, json.loads(body) if body else None
        except ValueError:
            return resp.status, body.decode(errors="replace")
    finally:
        conn.close()


def unique(name):
    """A sandbox name for this run: the host is shared."""
    return f"{name}-{RUN_ID}"


def build_binary(name):
    """The path of apps/NAME/NAME in the build the tested wheel came from (python/test-wheel
    says where): a missing one fails the test, it is not skipped."""
    build = os.environ.get("AGVISOR_TEST_BUILD_DIR")
    assert build, "AGVISOR_TEST_BUILD_DIR is unset: run the tests with python/test-wheel BUILD_DIR"
    path = os.path.join(build, "apps", name, name)
    assert os.access(path, os.X_OK), (f"{path} missing: cmake --build --preset ci --target {name}"
                                      " (python/test-wheel does not build it)")
    return path


class Recorder:
    """The sandboxes this session started (container names and hosts), for cleanup and for
    narrowing list_sandboxes() to this run's sandboxes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.started = {}  # container name -> (host, persistent)

    def names(self):
        with self.lock:
            return set(self.started)


@pytest.fixture(scope="session", autouse=True)
def recorder():
    status, _ = engine("GET", "/_ping")
    assert status == 200, "dockerd does not answer on its socket: run scripts/setup-host"
    rec = Recorder()
    original = agvisor.sandbox.Sandbox.start

    def recording_start(self):
        result = original(self)
        with rec.lock:
            rec.started[self.name] = (self.host, self.persistent)
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agvisor.sandbox.Sandbox, "start", recording_start)
        yield rec
    leftovers = []
    for cname, (_, persistent) in rec.started.items():
        try:
            # Through the local socket: the test sshd forwards to this same dockerd, and it is
            # gone by now.
            agvisor.sandbox._core.Place.in_process("").remove(cname, persistent)
            leftovers.append(cname)
        except RuntimeError as e:
            if getattr(e, "code", None) != "not_found":
                raise
    # Not an assertion: tests that keep a sandbox until the end rely on this cleanup.
    if leftovers:
        print(f"\ncleanup removed: {', '.join(sorted(leftovers))}")


@pytest.fixture
def image_alias():
    """image_alias("python:3.12"): that name now refers to agvisor/base:latest."""
    made = []

    def alias(reference):
        repo, tag = reference.rsplit(":", 1)
        quoted = urllib.parse.quote(reference, safe="")
        status, _ = engine("GET", f"/images/{quoted}/json")
        if status == 200:
            return reference  # exists already (another run's alias, or a real image)
        q = urllib.parse.urlencode({"repo": repo, "tag": tag})
        status, body = engine("POST", f"/images/agvisor%2Fbase:latest/tag?{q}")
        assert status == 201, f"tagging agvisor/base:latest as {reference}: {status} {body}"
        made.append(quoted)
        return reference

    yield alias
    for quoted in made:
        engine("DELETE", f"/images/{quoted}?noprune=1")


@pytest.fixture(scope="session")
def sshd():
    """ssh://root@127.0.0.1:PORT of a real sshd that forwards to this machine's dockerd."""
    assert os.path.exists("/usr/sbin/sshd"), "sshd missing: apt-get install openssh-server"
    d = tempfile.mkdtemp(prefix="agvisor-py-sshd-")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "agvisor-test",
                        "-f", f"{d}/{key}"], check=True)
    shutil.copy(f"{d}/client_key.pub", f"{d}/authorized_keys")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(f"{d}/sshd_config", "w") as f:
        f.write(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n"
                f"PidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n"
                "StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "AllowStreamLocalForwarding yes\nMaxStartups 100\nMaxSessions 100\n"
                "LogLevel ERROR\n")
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", f"{d}/sshd_config"])
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, "sshd exited at start"
            assert time.monotonic() < deadline, "sshd did not listen within 10 s"
            time.sleep(0.02)
    previous = os.environ.get("AGVISOR_SSH_ARGS")
    os.environ["AGVISOR_SSH_ARGS"] = (f"-i {d}/client_key -o UserKnownHostsFile=/dev/null "
                                      "-o StrictHostKeyChecking=no -o LogLevel=ERROR")
    yield f"ssh://root@127.0.0.1:{port}"
    if previous is None:
        os.environ.pop("AGVISOR_SSH_ARGS", None)
    else:
        os.environ["AGVISOR_SSH_ARGS"] = previous
    proc.kill()
    proc.wait()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def only_this_run(recorder, monkeypatch):
    """list_sandboxes() narrowed to this run's sandboxes, for examples that stop everything
    they list: the host's other sandboxes belong to other runs."""
    real = agvisor.sandbox.list_sandboxes

    def narrowed(host=None):
        mine = recorder.names()
        return [sb for sb in real(host) if sb.name in mine]

    monkeypatch.setattr(agvisor, "list_sandboxes", narrowed)
    monkeypatch.setattr(agvisor.sandbox, "list_sandboxes", narrowed)
    return real


class Agvisord:
    """The build's agvisord on a unix socket in a temporary directory, with its token file."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="agvisor-py-agvisord-")
        self.socket = os.path.join(self.dir, "agvisord.sock")
        self.token_file = os.path.join(self.dir, "token")
        self.log = open(os.path.join(self.dir, "agvisord.log"), "w+")
        self.proc = subprocess.Popen(
            [build_binary("agvisord"), "--socket", self.socket, "--token-file", self.token_file,
             "--no-egress"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not (os.path.exists(self.socket) and os.path.exists(self.token_file)):
            assert self.proc.poll() is None, f"agvisord exited at start: {self.read_log()}"
            assert time.monotonic() < deadline, f"agvisord did not listen: {self.read_log()}"
            time.sleep(0.02)
        with open(self.token_file) as f:
            self.token = f.read().strip()

    def read_log(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def agvisord_daemon():
    daemon = Agvisord()
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module", params=["in_process", "agvisord"])
def av(request):
    """`agvisor` (in process) or a Connection to this module's agvisord: the same API."""
    if request.param == "in_process":
        return agvisor
    daemon = request.getfixturevalue("agvisord_daemon")
    return agvisor.connect("unix:" + daemon.socket, token=daemon.token)
