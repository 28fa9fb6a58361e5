"""Starts and stops tests/kube/kube_double.py for a test: a fresh double, its kubeconfig in a
temporary directory, its request log, and a check at the end that it exited cleanly (no Python
traceback logged) having removed every container and volume it made."""

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DOUBLE = os.path.join(HERE, "kube_double.py")
IMAGE = os.environ.get("AGVISOR_KUBE_TEST_IMAGE", "agvisor/base:latest")


def docker(*args):
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout


class Double:
    def __init__(self, namespace="default", extra_args=()):
        self.dir = tempfile.mkdtemp(prefix="kube-double-test-")
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.log_path = os.path.join(self.dir, "double.log")
        self.namespace = namespace
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, DOUBLE, "--kubeconfig", self.kubeconfig, "--namespace", namespace,
                 *extra_args], stdout=subprocess.PIPE, stderr=log, text=True)
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and self.proc.poll() is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                break
        if not re.match(r"^READY https://127\.0\.0\.1:[0-9]+\n$", line):
            self.proc.kill()
            raise AssertionError(f"kube_double did not print READY (got {line!r}); its log:\n"
                                 + self.log())
        self.server = line.split()[1]
        with open(f"/proc/{self.proc.pid}/stat") as f:
            self.owner = f"{self.proc.pid}-{f.read().rsplit(')', 1)[1].split()[19]}"

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def requests(self):
        """The (method, path) pairs the double served, in order, without the query strings."""
        out = []
        for m in re.finditer(r"^kube-double: ([A-Z]+) (\S+) -> ([0-9]+)", self.log(), re.M):
            out.append((m.group(1), m.group(2).split("?")[0], int(m.group(3))))
        return out

    def containers(self, label=None):
        label = label or f"agvisor-kube-double.owner={self.owner}"
        ids = docker("ps", "-aq", "--filter", f"label={label}").split()
        return [json.loads(docker("inspect", i))[0] for i in ids]

    def stop(self):
        """SIGTERM; the double must exit 0 having removed its containers and volumes."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("kube_double did not exit within 60 s of SIGTERM")
        label = f"label=agvisor-kube-double.owner={self.owner}"
        left = docker("ps", "-aq", "--filter", label).split()
        vols = docker("volume", "ls", "-q", "--filter", label).split()
        log = self.log()
        shutil.rmtree(self.dir, ignore_errors=True)
        if code != 0 or left or vols or "Traceback" in log:
            raise AssertionError(f"kube_double exit {code}, containers left {left}, volumes left "
                                 f"{vols} (or a Python traceback in its log); its log:\n{log}")
