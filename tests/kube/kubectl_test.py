#!/usr/bin/env python3
"""The real `kubectl` drives the Kubernetes test double (tests/kube/kube_double.py): apply, get -o
json, wait, exec -i with stdin, an exit code, an exec that cannot start, cp both ways, logs,
attach -i, label and field selectors, a PersistentVolumeClaim that outlives its pod,
RuntimeClasses (a missing one refused), refusals, delete. Every pod is a real gVisor container on
the local dockerd.

`kubectl apply` runs with --validate=false: the double serves no OpenAPI documents, which
kubectl's validation (client-side schema, or the check that the server does strict field
validation) needs (README.md beside this file).

    /usr/bin/python3 tests/kube/kubectl_test.py [-v]
"""

import hashlib
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from double_fixture import IMAGE, Double  # noqa: E402

NS = "kd-kubectl"

PODS = f"""
apiVersion: v1
kind: Pod
metadata:
  name: kd-main
  labels: {{app: kd, tier: a}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: Never
    command: [sh, -c, 'echo hello-from-main; exec sleep infinity']
    env:
    - {{name: GREETING, value: hi}}
    - name: POD_NAME
      valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
    resources:
      limits: {{cpu: "1", memory: 256Mi}}
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {{drop: [NET_RAW]}}
    volumeMounts:
    - {{name: scratch, mountPath: /scratch}}
    - {{name: shm, mountPath: /dev/shm}}
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  - {{name: shm, emptyDir: {{medium: Memory, sizeLimit: 32Mi}}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: kd-attach
  labels: {{app: kd, tier: b}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    command: [sh, -c, 'read line; echo "attached:$line"']
    stdin: true
    stdinOnce: true
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: kd-data
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: kd-writer
  labels: {{app: kd-pvc}}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: {IMAGE}
    command: [sh, -c, 'echo "persisted-$$" > /data/f; cat /data/f']
    volumeMounts: [{{name: data, mountPath: /data}}]
  volumes:
  - {{name: data, persistentVolumeClaim: {{claimName: kd-data}}}}
"""

RUNTIME_CLASS = """
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
"""

READER = f"""
apiVersion: v1
kind: Pod
metadata:
  name: kd-reader
  labels: {{app: kd-pvc}}
spec:
  restartPolicy: Never
  runtimeClassName: gvisor
  containers:
  - name: main
    image: {IMAGE}
    command: [cat, /data/f]
    volumeMounts: [{{name: data, mountPath: /data}}]
  volumes:
  - {{name: data, persistentVolumeClaim: {{claimName: kd-data}}}}
"""


def pod_manifest(name, spec_extra="", container_extra=""):
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: Never
{spec_extra}  containers:
  - name: main
    image: {IMAGE}
    command: [sleep, infinity]
{container_extra}"""


class KubectlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.double = Double(namespace=NS)
        cls.cache = os.path.join(cls.double.dir, "cache")

    @classmethod
    def tearDownClass(cls):
        paths = sorted({(m, p) for m, p, _ in cls.double.requests()})
        print("\nAPI paths kubectl used:", file=sys.stderr)
        for m, p in paths:
            print(f"  {m} {p}", file=sys.stderr)
        cls.double.stop()

    def kubectl(self, *args, input=None, check=True, timeout=90):
        p = subprocess.run(["kubectl", "--kubeconfig", self.double.kubeconfig, "--cache-dir",
                            self.cache, "--request-timeout=60s", *args], input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            self.fail(f"kubectl {' '.join(args)}: exit {p.returncode}\nstdout: {p.stdout}\n"
                      f"stderr: {p.stderr}\ndouble's log tail:\n{self.double.log()[-3000:]}")
        return p

    def apply(self, manifest, check=True):
        return self.kubectl("apply", "--validate=false", "-f", "-", input=manifest, check=check)

    def get_json(self, *what):
        return json.loads(self.kubectl("get", *what, "-o", "json").stdout)

    def wait_for(self, what, condition):
        self.kubectl("wait", f"--for={condition}", what, "--timeout=90s")

    def test_01_apply_get_wait(self):
        out = self.apply(PODS).stdout
        for line in ("pod/kd-main created", "pod/kd-attach created",
                     "persistentvolumeclaim/kd-data created", "pod/kd-writer created"):
            self.assertIn(line, out)
        self.wait_for("pod/kd-main", "condition=Ready")
        pod = self.get_json("pod", "kd-main")
        meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
        self.assertEqual((pod["kind"], pod["apiVersion"]), ("Pod", "v1"))
        self.assertEqual(meta["namespace"], NS)
        self.assertRegex(meta["uid"], r"^[0-9a-f-]{36}$")
        self.assertTrue(meta["resourceVersion"].isdigit())
        self.assertRegex(meta["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertIn("kubectl.kubernetes.io/last-applied-configuration", meta["annotations"])
        self.assertEqual(status["phase"], "Running")
        self.assertEqual(status["qosClass"], "Guaranteed")
        self.assertIn("running", status["containerStatuses"][0]["state"])
        self.assertTrue(status["containerStatuses"][0]["containerID"].startswith("docker://"))
        self.assertEqual(spec["containers"][0]["resources"]["requests"],
                         {"cpu": "1", "memory": "256Mi"})
        ready = [c for c in status["conditions"] if c["type"] == "Ready"]
        self.assertEqual(ready[0]["status"], "True")
        # What the double made of it on dockerd.
        [c] = self.double.containers(f"agvisor-kube-double.pod={meta['uid']}")
        host = c["HostConfig"]
        self.assertEqual(host["Runtime"], "runsc")
        self.assertEqual(host["NetworkMode"], "bridge")
        self.assertEqual((host["Memory"], host["MemorySwap"]), (256 * 2**20, 256 * 2**20))
        self.assertEqual(host["NanoCpus"], 10**9)
        self.assertEqual(host["CapDrop"], ["NET_RAW"])
        self.assertIn("no-new-privileges", host["SecurityOpt"])
        self.assertEqual(host["ShmSize"], 32 * 2**20)

    def test_02_exec_with_stdin(self):
        p = self.kubectl("exec", "-i", "kd-main", "--", "sh", "-c", "cat; echo done",
                         input="line one\nline two\n")
        self.assertEqual(p.stdout, "line one\nline two\ndone\n")
        p = self.kubectl("exec", "kd-main", "--", "sh", "-c", 'echo "$GREETING $POD_NAME"')
        self.assertEqual(p.stdout, "hi kd-main\n")

    def test_03_exec_exit_code(self):
        p = self.kubectl("exec", "kd-main", "--", "sh", "-c", "echo out; echo err >&2; exit 3",
                         check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(p.stdout, "out\n")
        self.assertIn("err", p.stderr)
        # An exec that cannot start: kubelet's Failure Status (InternalError) on the error
        # stream, which kubectl prints as an error; nothing of it on stdout.
        p = self.kubectl("exec", "kd-main", "--", "/no/such/program", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(p.stdout, "")
        self.assertIn("Internal error occurred: error executing command in container: OCI "
                      "runtime exec failed", p.stderr)

    def test_04_cp_both_ways(self):
        data = os.urandom(300_000)
        src = os.path.join(self.double.dir, "in.bin")
        with open(src, "wb") as f:
            f.write(data)
        self.kubectl("cp", src, "kd-main:/scratch/in.bin")
        p = self.kubectl("exec", "kd-main", "--", "sha256sum", "/scratch/in.bin")
        self.assertEqual(p.stdout.split()[0], hashlib.sha256(data).hexdigest())
        back = os.path.join(self.double.dir, "back.bin")
        self.kubectl("cp", "kd-main:/scratch/in.bin", back)
        with open(back, "rb") as f:
            self.assertEqual(f.read(), data)

    def test_05_logs(self):
        self.assertEqual(self.kubectl("logs", "kd-main").stdout, "hello-from-main\n")

    def test_06_attach(self):
        self.wait_for("pod/kd-attach", "condition=Ready")
        p = self.kubectl("attach", "-i", "kd-attach", input="ping\n")
        self.assertIn("attached:ping", p.stdout)
        self.wait_for("pod/kd-attach", "jsonpath={.status.phase}=Succeeded")
        st = self.get_json("pod", "kd-attach")["status"]["containerStatuses"][0]
        self.assertEqual(st["state"]["terminated"]["exitCode"], 0)
        self.assertEqual(st["state"]["terminated"]["reason"], "Completed")

    def test_07_selectors(self):
        def names(*args):
            return sorted(self.kubectl("get", "pods", *args, "-o", "name").stdout.split())
        self.assertEqual(names("-l", "app=kd,tier=a"), ["pod/kd-main"])
        self.assertEqual(names("-l", "tier in (a,b)"), ["pod/kd-attach", "pod/kd-main"])
        self.assertEqual(names("-l", "app=kd,tier!=a"), ["pod/kd-attach"])
        self.assertEqual(names("-l", "!tier"), ["pod/kd-writer"])
        self.assertEqual(names("-l", "app notin (kd)"), ["pod/kd-writer"])
        self.assertEqual(names("--field-selector", "metadata.name=kd-main"), ["pod/kd-main"])
        self.kubectl("label", "pod", "kd-main", "extra=yes")
        self.assertEqual(names("-l", "extra=yes"), ["pod/kd-main"])
        self.kubectl("label", "pod", "kd-main", "extra-")
        self.assertEqual(names("-l", "extra"), [])
        p = self.kubectl("get", "pods", "-l", "app in (", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("BadRequest", p.stderr)

    def test_08_claim_outlives_its_pod(self):
        self.assertEqual(self.kubectl("get", "pvc", "kd-data", "-o",
                                      "jsonpath={.status.phase}").stdout, "Bound")
        self.wait_for("pod/kd-writer", "jsonpath={.status.phase}=Succeeded")
        written = self.kubectl("logs", "kd-writer").stdout
        self.assertRegex(written, r"^persisted-[0-9]+\n$")
        self.kubectl("delete", "pod", "kd-writer", "--timeout=60s")
        self.apply(RUNTIME_CLASS)
        self.assertEqual(self.kubectl("get", "runtimeclass", "gvisor", "-o",
                                      "jsonpath={.handler}").stdout, "runsc")
        self.apply(READER)
        self.wait_for("pod/kd-reader", "jsonpath={.status.phase}=Succeeded")
        self.assertEqual(self.kubectl("logs", "kd-reader").stdout, written)
        self.kubectl("delete", "pod", "kd-reader", "--timeout=60s")
        self.kubectl("delete", "pvc", "kd-data", "--timeout=60s")

    def test_09_missing_runtime_class_is_refused(self):
        p = self.apply(pod_manifest("kd-norc", "  runtimeClassName: no-such-class\n"), check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('pods "kd-norc" is forbidden: pod rejected: RuntimeClass "no-such-class" '
                      "not found", p.stderr)
        self.assertEqual(self.kubectl("get", "pod", "kd-norc", check=False).returncode, 1)

    def test_10_refusals(self):
        p = self.apply(pod_manifest("kd-priv", container_extra="    securityContext: "
                                    "{privileged: true}\n"), check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('Pod "kd-priv" is invalid', p.stderr)
        self.assertIn("privileged", p.stderr)
        p = self.apply(pod_manifest("kd-always").replace("restartPolicy: Never",
                                                         "restartPolicy: Always"), check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("restartPolicy", p.stderr)

    def test_11_delete(self):
        uid = self.get_json("pod", "kd-main")["metadata"]["uid"]
        p = self.kubectl("delete", "pod", "kd-main", "--timeout=60s")
        self.assertIn('pod "kd-main" deleted', p.stdout)
        p = self.kubectl("get", "pod", "kd-main", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn('Error from server (NotFound): pods "kd-main" not found', p.stderr)
        self.assertEqual(self.double.containers(f"agvisor-kube-double.pod={uid}"), [])


if __name__ == "__main__":
    unittest.main()
