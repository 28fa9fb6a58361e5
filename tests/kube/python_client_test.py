#!/usr/bin/env python3
"""Debian's python3-kubernetes client drives the Kubernetes test double (tests/kube/kube_double.py):
401 and 404/409/422/400 as ApiException, create/list with label selectors/watch (also resumed from a
resourceVersion)/delete/deletecollection, init containers and emptyDir, pods/log, exec over
WebSocket v4.channel.k8s.io (this client's protocol) with stdin, stderr, the exit code from the
error channel and a TTY resize, activeDeadlineSeconds, OOMKilled, a deny-all NetworkPolicy as
network none, a graceful delete (SIGTERM first). Every pod is a real gVisor container on the
local dockerd.

    /usr/bin/python3 tests/kube/python_client_test.py [-v]
"""

import json
import os
import sys
import time
import unittest
import warnings

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from double_fixture import IMAGE, Double  # noqa: E402

NS = "kd-python"


def pod(name, labels, command, **spec):
    containers = spec.pop("containers", None) or [{
        "name": "main", "image": IMAGE, "command": command,
        **spec.pop("container", {})}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": containers, **spec}}


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # python3-kubernetes 22.6 leaves its watch and WebSocket sockets to the garbage collector.
        warnings.filterwarnings("ignore", category=ResourceWarning)
        cls.double = Double(namespace=NS)
        cfg = client.Configuration()
        config.load_kube_config(config_file=cls.double.kubeconfig, client_configuration=cfg)
        cls.cfg = cfg
        cls.api = client.CoreV1Api(client.ApiClient(cfg))
        cls.net = client.NetworkingV1Api(client.ApiClient(cfg))
        # The pods the tests use, created at once so that they start side by side.
        cls.life_rv = cls.api.create_namespaced_pod(NS, pod(
            "life", {"app": "kd-py", "case": "life"},
            ["sh", "-c", "cat /work/msg; exec sleep infinity"],
            initContainers=[{"name": "init", "image": IMAGE,
                             "command": ["sh", "-c", "echo from-init > /work/msg"],
                             "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
            volumes=[{"name": "work", "emptyDir": {}}],
            container={"volumeMounts": [{"name": "work", "mountPath": "/work"}]})
        ).metadata.resource_version
        cls.api.create_namespaced_pod(NS, pod(
            "deadline", {"app": "kd-py", "case": "deadline"}, ["sleep", "infinity"],
            activeDeadlineSeconds=3))
        cls.api.create_namespaced_pod(NS, pod(
            "oom", {"app": "kd-py", "case": "oom"},
            ["sh", "-c", "head -c 400m /dev/zero | tail > /dev/null"],
            container={"resources": {"limits": {"memory": "64Mi"}}}))
        graceful = pod("graceful", {"app": "kd-py"}, [
            "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"])
        graceful["spec"]["terminationGracePeriodSeconds"] = 30
        cls.api.create_namespaced_pod(NS, graceful)
        cls.net.create_namespaced_network_policy(NS, {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny-all"},
            "spec": {"podSelector": {"matchLabels": {"isolated": "yes"}},
                     "policyTypes": ["Ingress", "Egress"]}})
        cls.api.create_namespaced_pod(NS, pod(
            "isolated", {"app": "kd-py", "isolated": "yes"}, ["sleep", "infinity"]))

    @classmethod
    def tearDownClass(cls):
        cls.double.stop()

    def wait_pod(self, name, done, timeout=90, **kwargs):
        """Watches the pod until done(pod) is true; returns (pod, event types seen)."""
        seen = []
        w = watch.Watch()
        for ev in w.stream(self.api.list_namespaced_pod, NS, field_selector=f"metadata.name={name}",
                           timeout_seconds=timeout, **kwargs):
            seen.append(ev["type"])
            if done(ev["object"]):
                w.stop()
                return ev["object"], seen
        self.fail(f"pod {name}: condition not reached in {timeout} s; events {seen}; pod "
                  f"{self.api.read_namespaced_pod(name, NS).status}")

    def test_unauthorized(self):
        cfg = client.Configuration()
        config.load_kube_config(config_file=self.double.kubeconfig, client_configuration=cfg)
        cfg.api_key = {"authorization": "Bearer wrong"}
        with self.assertRaises(ApiException) as e:
            client.CoreV1Api(client.ApiClient(cfg)).list_namespaced_pod(NS)
        self.assertEqual(e.exception.status, 401)

    def test_status_errors(self):
        with self.assertRaises(ApiException) as e:
            self.api.read_namespaced_pod("absent", NS)
        self.assertEqual(e.exception.status, 404)
        body = json.loads(e.exception.body)
        self.assertEqual((body["kind"], body["reason"], body["code"]), ("Status", "NotFound", 404))
        self.assertEqual(body["details"], {"name": "absent", "kind": "pods"})
        with self.assertRaises(ApiException) as e:
            self.api.read_namespace("no-such-namespace")
        self.assertEqual(e.exception.status, 404)
        self.assertEqual(self.api.read_namespace(NS).metadata.name, NS)
        with self.assertRaises(ApiException) as e:
            self.api.create_namespaced_pod(NS, pod("priv", {}, ["true"], container={
                "securityContext": {"privileged": True}}))
        self.assertEqual(e.exception.status, 422)
        body = json.loads(e.exception.body)
        self.assertEqual(body["reason"], "Invalid")
        self.assertEqual(body["details"]["causes"][0]["field"],
                         "spec.containers[0].securityContext.privileged")
        with self.assertRaises(ApiException) as e:
            self.api.create_namespaced_pod(NS, pod("life", {}, ["true"]))
        self.assertEqual(e.exception.status, 409)
        self.assertEqual(json.loads(e.exception.body)["reason"], "AlreadyExists")
        with self.assertRaises(ApiException) as e:
            self.api.list_namespaced_pod(NS, label_selector="a in (b")
        self.assertEqual(e.exception.status, 400)

    def test_label_selectors_and_watch_resume(self):
        rv = self.net.list_namespaced_network_policy(NS).metadata.resource_version
        for name, labels in (("np-x", {"a": "x", "k": "1"}), ("np-y", {"a": "y"}),
                             ("np-none", {"b": "z"})):
            self.net.create_namespaced_network_policy(NS, {
                "metadata": {"name": name, "labels": labels},
                "spec": {"podSelector": {"matchLabels": {"never": "selected"}}}})

        def names(selector):
            items = self.net.list_namespaced_network_policy(NS, label_selector=selector).items
            return sorted(i.metadata.name for i in items if i.metadata.name != "deny-all")
        self.assertEqual(names("a=x"), ["np-x"])
        self.assertEqual(names("a==y"), ["np-y"])
        self.assertEqual(names("a!=x"), ["np-none", "np-y"])
        self.assertEqual(names("a"), ["np-x", "np-y"])
        self.assertEqual(names("!a"), ["np-none"])
        self.assertEqual(names("a in (x, y),k"), ["np-x"])
        self.assertEqual(names("a notin (x)"), ["np-none", "np-y"])
        self.net.delete_namespaced_network_policy("np-y", NS)
        # A watch from the resourceVersion of the first list replays what happened since.
        events = []
        for ev in watch.Watch().stream(self.net.list_namespaced_network_policy, NS,
                                       resource_version=rv, label_selector="a",
                                       timeout_seconds=1):
            events.append((ev["type"], ev["object"].metadata.name))
        self.assertEqual(events, [("ADDED", "np-x"), ("ADDED", "np-y"), ("DELETED", "np-y")])

    def test_init_container_logs_exec(self):
        # Without a resourceVersion a watch starts with the pod as it is now (ADDED); from the
        # one create returned, it replays the changes since (MODIFIED) up to Running.
        _, seen = self.wait_pod("life", lambda p: True)
        self.assertEqual(seen, ["ADDED"])
        p, seen = self.wait_pod("life", lambda p: p.status.phase == "Running",
                                resource_version=self.life_rv)
        self.assertGreaterEqual(len(seen), 2)
        self.assertEqual(set(seen), {"MODIFIED"})
        init = p.status.init_container_statuses[0].state.terminated
        self.assertEqual((init.exit_code, init.reason), (0, "Completed"))
        # Running means started, not that it wrote yet (as on a real node): wait for the line.
        deadline = time.monotonic() + 30
        while self.api.read_namespaced_pod_log("life", NS) != "from-init\n":
            self.assertLess(time.monotonic(), deadline, "no log line from the main container")
            time.sleep(0.2)
        # Exec over v4.channel.k8s.io: stdin, stdout, stderr, exit code from the error channel.
        resp = stream(self.api.connect_get_namespaced_pod_exec, "life", NS,
                      command=["sh", "-c", "read x; echo got:$x; echo oops >&2; exit 7"],
                      stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False)
        resp.write_stdin("hello\n")
        resp.run_forever(timeout=60)
        self.assertEqual(resp.read_stdout(), "got:hello\n")
        self.assertEqual(resp.read_stderr(), "oops\n")
        self.assertEqual(resp.returncode, 7)
        out = stream(self.api.connect_get_namespaced_pod_exec, "life", NS,
                     command=["cat", "/work/msg"], stdin=False, stdout=True, stderr=True,
                     tty=False)
        self.assertEqual(out, "from-init\n")
        # A TTY, resized through channel 4 (which reaches the process asynchronously, as on a
        # real cluster: ask for the size until it shows).
        resp = stream(self.api.connect_get_namespaced_pod_exec, "life", NS,
                      command=["sh", "-c", 'while read x; do [ "$x" = q ] && exit 0; stty size; '
                               "done"], stdin=True, stdout=True, stderr=True, tty=True,
                      _preload_content=False)
        resp.write_channel(4, json.dumps({"Width": 101, "Height": 31}))
        out = ""
        deadline = time.monotonic() + 30
        while "31 101" not in out and time.monotonic() < deadline:
            resp.write_stdin("\n")
            pause = time.monotonic() + 0.5
            while time.monotonic() < pause:  # update() reads at most one frame
                resp.update(timeout=0.1)
                time.sleep(0.02)
            out += resp.read_stdout(timeout=0) or ""
        self.assertIn("31 101", out)
        resp.write_stdin("q\n")
        resp.run_forever(timeout=60)
        self.assertEqual(resp.returncode, 0)

    def test_active_deadline(self):
        p, _ = self.wait_pod("deadline", lambda p: p.status.phase == "Failed")
        self.assertEqual(p.status.reason, "DeadlineExceeded")

    def test_oom_killed(self):
        p, _ = self.wait_pod("oom", lambda p: p.status.phase in ("Succeeded", "Failed"))
        term = p.status.container_statuses[0].state.terminated
        self.assertEqual((p.status.phase, term.reason), ("Failed", "OOMKilled"),
                         f"exit code {term.exit_code}, signal {term.signal}")

    def test_deny_all_policy_means_no_network(self):
        p, _ = self.wait_pod("isolated", lambda p: p.status.phase == "Running")
        [c] = self.double.containers(f"agvisor-kube-double.pod={p.metadata.uid}")
        self.assertEqual(c["HostConfig"]["NetworkMode"], "none")
        self.assertEqual(c["HostConfig"]["Runtime"], "runsc-none")
        out = stream(self.api.connect_get_namespaced_pod_exec, "isolated", NS,
                     command=["cat", "/proc/net/dev"], stdin=False, stdout=True, stderr=True,
                     tty=False)
        interfaces = [line.split(":")[0].strip() for line in out.splitlines() if ":" in line]
        self.assertEqual(interfaces, ["lo"])

    def test_graceful_delete_sends_sigterm_first(self):
        self.wait_pod("graceful", lambda p: p.status.phase == "Running")
        started = time.monotonic()
        deleted = self.api.delete_namespaced_pod("graceful", NS)
        self.assertEqual(deleted.metadata.deletion_grace_period_seconds, 30)
        for ev in watch.Watch().stream(self.api.list_namespaced_pod, NS,
                                       resource_version=deleted.metadata.resource_version,
                                       field_selector="metadata.name=graceful",
                                       timeout_seconds=60):
            if ev["type"] == "DELETED":
                break
        # The pod's TERM trap ends it: far sooner than the 30 s SIGKILL would.
        self.assertLess(time.monotonic() - started, 20)

    def test_z_delete_and_deletecollection(self):
        self.wait_pod("life", lambda p: p.status.phase == "Running")
        uid = self.api.read_namespaced_pod("life", NS).metadata.uid
        deleted = self.api.delete_namespaced_pod("life", NS, grace_period_seconds=1)
        self.assertIsNotNone(deleted.metadata.deletion_timestamp)
        gone = False
        for ev in watch.Watch().stream(self.api.list_namespaced_pod, NS,
                                       resource_version=deleted.metadata.resource_version,
                                       field_selector="metadata.name=life", timeout_seconds=60):
            if ev["type"] == "DELETED":
                self.assertEqual(ev["object"].metadata.uid, uid)
                gone = True
                break
        self.assertTrue(gone, "no DELETED event for pod life")
        self.assertEqual(self.double.containers(f"agvisor-kube-double.pod={uid}"), [])
        self.api.delete_collection_namespaced_pod(NS, label_selector="app=kd-py",
                                                  grace_period_seconds=0)
        deadline = time.monotonic() + 60
        while self.api.list_namespaced_pod(NS, label_selector="app=kd-py").items:
            self.assertLess(time.monotonic(), deadline, "pods left after deletecollection")
            time.sleep(0.2)


if __name__ == "__main__":
    unittest.main()
