"""create_sandbox(egress=...) against real runsc sandboxes and a real agvisord (docs/egress.md).

The module's fixture builds a fake internet in a network namespace of its own (the C++ egress
test's tests/integration/data/fake_internet.py: DNS and HTTP on one address of TEST-NET-3) and
starts the build's agvisord with that address as the enforcers' resolver. No traffic leaves
this machine: sandboxes reach the enforcer only, and the enforcer reaches the namespace only.
"""
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from agvisor import Egress, Limits, Sandbox, Secret, connect, create_sandbox
from agvisor import sandbox as sandbox_module

from conftest import build_binary, engine, unique

FAKE_INTERNET = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration", "data",
                             "fake_internet.py")
SMALL = Limits(cpus=1, memory="256m")

# Run inside the sandbox: fetch argv[1] with urllib (which honours HTTP_PROXY) and print the
# body, "http CODE" for an HTTP error, or "error: ..." when no answer came.
FETCH = """
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode(), end="")
except urllib.error.HTTPError as e:
    print("http", e.code)
except Exception as e:
    print("error:", type(e).__name__, e)
"""
# A tool that ignores proxy variables and connects to an address itself.
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 80), 5)
    print("connected")
except Exception as e:
    print("error:", type(e).__name__, e)
"""


def fetch(sb, url):
    return sb.run(["python3", "-c", FETCH, url], timeout=60).stdout.decode()


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(argv)}: {r.stderr.strip()}"


def wait_for(what, predicate, seconds):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {seconds} s"
        time.sleep(0.05)


def other_enforcers():
    """Pids of agvisord processes on this host: any of them serves every egress network."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() == "agvisord":
                    pids.append(int(entry))
        except (OSError, ValueError):
            continue
    return pids


def free_subnet():
    """A /30 of 203.0.113.0/24 that no interface of this host has an address in (the pid picks
    the first one tried, so runs side by side pick different ones)."""
    for i in range(64):
        base = 4 * ((os.getpid() + i) % 64)
        shown = subprocess.run(["ip", "-4", "-o", "addr", "show", "to", f"203.0.113.{base}/30"],
                               capture_output=True, text=True, check=True).stdout
        if not shown.strip():
            return base
    raise AssertionError("every /30 of 203.0.113.0/24 is in use on this host")


class EgressWorld:
    """The fake internet (namespace, veth pair, fake_internet.py) and an agvisord serving
    egress networks with it as the resolver. Each step made is undone by close()."""

    def __init__(self):
        tag = str(os.getpid() % 100000)
        self.dir = tempfile.mkdtemp(prefix="agvisor-py-egress-")
        self.ns, self.host_if, self.ns_if = f"agvp-inet-{tag}", f"agvp-h{tag}", f"agvp-n{tag}"
        self.agvisord = build_binary("agvisord")
        self.internet_proc = self.daemon = None
        self.undo = []
        base = free_subnet()
        self.host_side, self.internet = f"203.0.113.{base + 1}", f"203.0.113.{base + 2}"

    def open(self):
        run(["ip", "netns", "add", self.ns])
        self.undo.append(["ip", "netns", "del", self.ns])
        run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if])
        self.undo.append(["ip", "link", "del", self.host_if])
        run(["ip", "link", "set", self.ns_if, "netns", self.ns])
        run(["ip", "addr", "add", f"{self.host_side}/30", "dev", self.host_if])
        run(["ip", "link", "set", self.host_if, "up"])
        inside = ["ip", "netns", "exec", self.ns]
        run(inside + ["ip", "addr", "add", f"{self.internet}/30", "dev", self.ns_if])
        run(inside + ["ip", "link", "set", self.ns_if, "up"])
        run(inside + ["ip", "link", "set", "lo", "up"])
        out = open(self.path("internet.out"), "w")
        with out:
            self.internet_proc = subprocess.Popen(
                inside + [sys.executable, FAKE_INTERNET, self.internet, self.path("questions.log")],
                stdout=out, stderr=subprocess.STDOUT)
        wait_for("the fake internet is ready",
                 lambda: self.read("internet.out").startswith("ready")
                 or self.internet_proc.poll() is not None, 20)
        assert self.internet_proc.poll() is None, self.read("internet.out")
        self.start_enforcer()

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        try:
            with open(self.path(name), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def questions(self):
        """Every name the fake internet's DNS server was asked, one a line."""
        return self.read("questions.log")

    def start_enforcer(self):
        seen = len(self.read("agvisord.log"))
        with open(self.path("agvisord.log"), "a") as log:
            self.daemon = subprocess.Popen(
                [self.agvisord, "--socket", self.path("agvisord.sock"), "--token-file",
                 self.path("token"), "--egress-resolver", self.internet, "--egress-state-dir",
                 self.path("state")], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        wait_for("agvisord listening",
                 lambda: "agvisord listening" in self.read("agvisord.log")[seen:]
                 or self.daemon.poll() is not None, 20)
        assert self.daemon.poll() is None, self.read("agvisord.log")[seen:]

    def stop_enforcer(self):
        if self.daemon is None:
            return
        self.daemon.send_signal(signal.SIGTERM)
        try:
            self.daemon.wait(30)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait()
        self.daemon = None

    @contextlib.contextmanager
    def enforcer_stopped(self):
        self.stop_enforcer()
        try:
            yield
        finally:
            self.start_enforcer()

    def close(self):
        self.stop_enforcer()
        if self.internet_proc is not None:
            self.internet_proc.kill()
            self.internet_proc.wait()
        for argv in reversed(self.undo):
            subprocess.run(argv, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def world(recorder):
    w = EgressWorld()
    try:
        w.open()
        yield w
    finally:
        w.close()


def test_a_domain_list_reaches_its_names_and_nothing_else(world):
    with create_sandbox(limits=SMALL, egress=["allowed.test"]) as sb:
        assert sb.egress == Egress(allow_domains=("allowed.test",))
        assert fetch(sb, "http://allowed.test/") == "hello from allowed.test\n"
        assert fetch(sb, "http://denied.test/") == "http 403\n"
        # No way around the enforcer: the fake internet's address itself is unreachable.
        direct = sb.run(["python3", "-c", CONNECT, world.internet], timeout=60).stdout.decode()
        assert direct.startswith("error:"), direct
    asked = world.questions()
    assert "allowed.test" in asked
    assert "denied.test" not in asked, asked  # refused before any lookup


def test_an_egress_object_with_denied_domains(world):
    policy = Egress(allow_domains=["*.allowed.test"], deny_domains=["private.allowed.test"])
    assert policy.allow_domains == ("*.allowed.test",)  # kept as tuples: immutable, reusable
    with Sandbox(limits=SMALL, egress=policy) as sb:
        assert sb.egress is policy
        assert fetch(sb, "http://api.allowed.test/") == "hello from api.allowed.test\n"
        assert fetch(sb, "http://private.allowed.test/") == "http 403\n"  # deny wins
        assert fetch(sb, "http://allowed.test/") == "http 403\n"  # a wildcard skips the apex
    with pytest.raises(AttributeError):
        sb.egress = None  # read-only: a live change goes through agvisord


def test_network_none_with_a_policy_is_refused(recorder):
    before = recorder.names()
    with pytest.raises(ValueError, match="nothing to allow") as e:
        create_sandbox(network="none", egress=["allowed.test"])
    assert e.value.code == "invalid_argument"
    with pytest.raises(ValueError, match="network 'bridge'"):
        Sandbox(network="none", egress=Egress(allow_cidrs=["203.0.113.0/24"]))
    assert recorder.names() == before


def test_bad_rules_are_refused_naming_the_rule(recorder):
    before = recorder.names()
    with pytest.raises(ValueError, match=r"egress policy: domain rule '\*\.com'") as e:
        create_sandbox(egress=["pypi.org", "*.com"])
    assert e.value.code == "invalid_argument"
    with pytest.raises(ValueError, match=r"'a\*\.example\.com'"):
        Egress(deny_domains=["a*.example.com"])
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33'"):
        Egress(allow_cidrs=["10.0.0.0/33"])
    with pytest.raises(ValueError, match="70000 is not a port"):
        Egress(ports=[443, 70000])
    with pytest.raises(TypeError, match=r"egress=\['pypi.org'\]"):
        Sandbox(egress="pypi.org")  # a string, not a list: would be read letter by letter
    with pytest.raises(TypeError, match="allow_domains"):
        Egress(allow_domains=[b"pypi.org"])
    # Learn mode is one more value of the policy, checked by the core like the rules.
    assert Egress(mode="learn").mode == "learn" and Egress().mode == "enforce"
    with pytest.raises(ValueError, match=r"egress mode 'learning': expected enforce"):
        Egress(mode="learning")
    with pytest.raises(TypeError, match="egress mode"):
        Egress(mode=True)
    assert recorder.names() == before


def test_secrets_need_agvisord_and_never_show_their_value(recorder, tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-python-value\n")
    secret = Secret("API_KEY", ["allowed.test"], file=str(key))
    assert "sk-python" not in repr(secret) and "<hidden>" in repr(secret)
    assert not secret.by_name and Secret("T", ["allowed.test"]).by_name
    before = recorder.names()
    # In process: no enforcer to hold the value, refused before anything is made.
    with pytest.raises(RuntimeError, match="Start agvisord") as e:
        create_sandbox(limits=SMALL, egress=["allowed.test"], secrets=[secret])
    assert e.value.code == "unsupported"
    assert "sk-python" not in str(e.value)
    # Checked by the core when the Sandbox is made: a host the policy does not allow.
    with pytest.raises(ValueError, match="--allow-domain other.test"):
        Sandbox(egress=["allowed.test"], secrets=[Secret("K", ["other.test"], value="v")])
    with pytest.raises(TypeError, match="a list"):
        Sandbox(egress=["allowed.test"], secrets=secret)
    assert recorder.names() == before


def test_without_agvisord_create_is_refused_naming_it(world):
    name = unique("egress-noenf")
    container = sandbox_module._core.NAME_PREFIX + name
    try:
        with world.enforcer_stopped():
            with pytest.raises(RuntimeError, match="agvisord") as e:
                create_sandbox(name=name, limits=SMALL, egress=["allowed.test"])
                # Reached only when create worked: say so when another agvisord served it.
                others = other_enforcers()
                assert not others, f"another agvisord runs on this host (pids {others})"
        assert e.value.code == "unavailable"
        # Nothing is left behind: neither the sandbox nor its network.
        assert engine("GET", f"/containers/{container}/json")[0] == 404
        assert engine("GET", f"/networks/{container}-egress")[0] == 404
    finally:
        try:
            sandbox_module._core.Place.in_process("").remove(container, True)  # the volume, if any
        except RuntimeError as err:
            if getattr(err, "code", None) != "not_found":
                raise


def test_the_egress_log_is_read_and_followed_through_agvisord(world):
    """sb.egress_log() and sb.follow_egress_log(): agvisord's routes (docs/egress.md, "Log").
    A refusal reaches the follower; a spliced connection's close record has its bytes."""
    av = connect("unix:" + world.path("agvisord.sock"), token_file=world.path("token"))
    with av.create_sandbox(limits=SMALL, egress=["allowed.test"]) as sb:
        got = []

        def follow():
            for r in sb.follow_egress_log(last=10):
                got.append(r)
                if r["name"] == "denied.test":
                    break

        # The enforcer serves a new sandbox's network within moments of its start: the first
        # answer says it does.
        assert fetch(sb, "http://allowed.test/") == "hello from allowed.test\n"
        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        assert fetch(sb, "http://denied.test/") == "http 403\n"
        follower.join(30)
        assert not follower.is_alive(), got
        assert got[-1]["allowed"] is False and got[-1]["status"] == 403, got
        assert got[-1]["reason"] == "no rule allows denied.test", got
        records = sb.egress_log(last=100)
        assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)
        opened = next(r for r in records if r["name"] == "allowed.test" and r["allowed"]
                      and r["closes"] == 0)
        assert (opened["via"], opened["method"], opened["path"]) == ("http", "GET", "/"), opened
        closed = [r for r in records if r["closes"] == opened["seq"]]
        assert len(closed) == 1, records
        assert closed[0]["bytes_up"] > 0 and closed[0]["bytes_down"] > 0, closed
        with pytest.raises(ValueError, match="last"):
            sb.egress_log(last=0)
