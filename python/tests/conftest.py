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
- `@pytest.mark.kube` on a test written against `av` adds a third place: `host="kube://..."`,
  the Kubernetes runtime against the loopback Kubernetes API test double (tests/kube/), whose
  pods are real runsc containers on this dockerd. The double is started once for the session
  (`kube_host`) with the agent image of this build and a `gvisor` RuntimeClass, as the C++
  suites' kube variants do (tests/kube/double_process.h); its sandboxes are removed before it
  stops, and it must stop having removed every container and volume it made. Those runs carry
  the marker `on_kube`: `python/test-wheel BUILD -m on_kube` runs only them,
  `-m "not on_kube"` everything else. A test that differs by runtime asks `on_kube(x)`.
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
import sys
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
# The Kubernetes API test double and its fixture (the repository's tests/kube).
KUBE_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                          "tests", "kube")
# The context and namespace of the double's kubeconfig (tests/kube/double_process.h: kKubeHost).
KUBE_HOST = "kube://agvisor-double/default"


def pytest_configure(config):
    config.addinivalue_line("markers", "kube: the test also runs with `av` on the Kubernetes "
                            "runtime (host=kube://... against tests/kube's API double)")
    config.addinivalue_line("markers", "on_kube: set on the runs of `kube` tests on the "
                            "Kubernetes runtime (-m on_kube selects them)")


def pytest_generate_tests(metafunc):
    """`av`'s places: in process and agvisord for every test using it, plus kube for `kube`
    tests (module scope: a module's sandboxes are made once per place)."""
    if "av" in metafunc.fixturenames:
        places = ["in_process", "agvisord"]
        if metafunc.definition.get_closest_marker("kube"):
            places.append("kube")
        metafunc.parametrize("av", places, indirect=True, scope="module")


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("av") == "kube":
            item.add_marker("on_kube")


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
    for cname, (host, persistent) in rec.started.items():
        if on_kube(host):
            continue  # removed by kube_host before the double stopped
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


class OnHost:
    """The package's module-level calls with `host` given: what `av` is on the Kubernetes
    runtime (host="kube://...")."""

    def __init__(self, host):
        self.host = host

    def create_sandbox(self, *args, **kwargs):
        return agvisor.create_sandbox(*args, host=self.host, **kwargs)

    def list_sandboxes(self):
        return agvisor.list_sandboxes(self.host)

    def __repr__(self):
        return f"<agvisor on {self.host}>"


def on_kube(x):
    """Whether `x` (an `av`, a Sandbox, or a host string) is on the Kubernetes runtime."""
    host = x if isinstance(x, str) or x is None else getattr(x, "host", None)
    return bool(host) and host.startswith("kube:")


def import_agent_image():
    """agvisor/agent:HASH of this build (the agent the wheel embeds too), as a user makes it:
    `agvisor image build kube-agent` (docs/kubernetes.md)."""
    made = subprocess.run([build_binary("agvisor"), "image", "build", "kube-agent"],
                          capture_output=True, text=True)
    assert made.returncode == 0, f"agvisor image build kube-agent: {made.stderr}"


@pytest.fixture(scope="session")
def kube_host(recorder):
    """KUBE_HOST, served by a fresh Kubernetes API test double for the session ($KUBECONFIG
    names its kubeconfig meanwhile)."""
    sys.path.insert(0, os.path.abspath(KUBE_TESTS))
    from double_fixture import Double  # noqa: E402 (tests/kube)
    double = Double(namespace="default")
    previous = os.environ.get("KUBECONFIG")
    try:
        import_agent_image()
        # --validate=false: the double serves no OpenAPI documents (tests/kube/README.md).
        made = subprocess.run(
            ["kubectl", "--kubeconfig", double.kubeconfig, "apply", "--validate=false", "-f", "-"],
            input="apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gvisor\n"
                  "handler: runsc\n", capture_output=True, text=True)
        assert made.returncode == 0, f"kubectl apply RuntimeClass gvisor: {made.stderr}"
        os.environ["KUBECONFIG"] = double.kubeconfig
        yield KUBE_HOST
        # What this session made there, removed through the runtime (pods, claims, policies)
        # while the double still serves.
        for cname, (host, persistent) in sorted(recorder.started.items()):
            if not on_kube(host):
                continue
            try:
                agvisor.sandbox._core.Place.in_process(host).remove(cname, persistent)
            except RuntimeError as e:
                if getattr(e, "code", None) != "not_found":
                    raise
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
        double.stop()  # fails the session if it left a container or volume, or logged a traceback


@pytest.fixture(scope="module")
def av(request):
    """`agvisor` (in process), a Connection to this module's agvisord, or (`kube` tests) the
    package on the Kubernetes runtime: the same API."""
    if request.param == "in_process":
        return agvisor
    if request.param == "kube":
        return OnHost(request.getfixturevalue("kube_host"))
    daemon = request.getfixturevalue("agvisord_daemon")
    return agvisor.connect("unix:" + daemon.socket, token=daemon.token)
