#!/usr/bin/env python3
"""deploy/*.yaml hold together and say what the code does (issue 18):

- every document parses, with the apiVersion its kind has;
- deploy/rbac.yaml grants exactly the permissions the Kubernetes runtime's calls need (the table
  in src/agvisor/sandbox/kube_runtime/kube_doctor.cc, which `agvisor doctor` reviews on a cluster);
- deploy/runtimeclass.yaml makes the class sandboxes use by default, with a gVisor handler;
- deploy/agvisord.yaml's cross-references: the Deployment's service account exists, the bindings
  name the Role and ClusterRole of rbac.yaml and that service account, the Service and the
  NetworkPolicy select the Deployment's pods, the token file is on the Secret's volume, and the
  container's args are flags agvisord accepts (the built agvisord run with them and --check);
- the real kubectl applies rbac.yaml and runtimeclass.yaml to the Kubernetes test double, and
  `kubectl auth can-i` (a SelfSubjectAccessReview) answers by that Role. agvisord.yaml is not
  applied: the double serves no Deployments, Services or bindings (tests/kube/README.md);
- images are named with a registry (a placeholder to replace): the Deployment's, the agent
  image's (AGVISOR_KUBE_REGISTRY), the build script's default tag and docs/kubernetes.md agree;
- deploy/build-agvisord-image's image runs `agvisord --check` with the Deployment's args under
  runsc with a read-only root and no capabilities (every library it loads is in), and has no shell;
- `agvisor doctor` against a double whose Role lacks the pods/exec rule names the two permissions
  denied, and against one that answers no SelfSubjectAccessReview (403) warns that it could not
  check them, without failing (its other lines: kube_runtime_test's DoctorReportsTheCluster).

    /usr/bin/python3 tests/kube/deploy_test.py AGVISORD AGVISOR [-v]
"""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import yaml  # python3-yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEPLOY = os.path.join(ROOT, "deploy")
sys.path.insert(0, HERE)
from double_fixture import Double  # noqa: E402

AGVISORD = AGVISOR = None  # argv[1], argv[2]

API_VERSIONS = {
    "Role": "rbac.authorization.k8s.io/v1", "ClusterRole": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1", "RuntimeClass": "node.k8s.io/v1",
    "ServiceAccount": "v1", "Service": "v1", "Deployment": "apps/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
}


def load(name):
    with open(os.path.join(DEPLOY, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def permissions(rules):
    return {f"{g or 'core'}/{r} {v}" for rule in rules for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


def runtime_permissions():
    """The table of kube_doctor.cc: {"GROUP", "RESOURCE", "VERB"} rows."""
    with open(os.path.join(ROOT, "src/agvisor/sandbox/kube_runtime/kube_doctor.cc")) as f:
        text = f.read()
    table = text[text.index("RuntimeAccess() {"):text.index("return access;")]
    rows = re.findall(r'^\s*\{"([a-z0-9.]*)", "([a-z/]+)", "([a-z]+)"\},', table, re.M)
    assert rows and len(rows) == table.count('{"'), "a row of kube_doctor.cc's table was not read"
    return {f"{g or 'core'}/{r} {v}" for g, r, v in rows}


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


class DeployTest(unittest.TestCase):
    def test_every_document_parses_with_its_api_version(self):
        files = sorted(glob.glob(os.path.join(DEPLOY, "*.yaml")))
        self.assertEqual([os.path.basename(f) for f in files],
                         ["agvisord.yaml", "rbac.yaml", "runtimeclass.yaml"])
        for f in files:
            for d in load(os.path.basename(f)):
                self.assertIn(d["kind"], API_VERSIONS, f)
                self.assertEqual(d["apiVersion"], API_VERSIONS[d["kind"]], f)
                self.assertNotIn("namespace", d["metadata"], f"{f}: applied with -n NAMESPACE")

    def test_rbac_grants_exactly_what_the_runtime_calls(self):
        docs = load("rbac.yaml")
        role, cluster = one(docs, "Role", "agvisor"), one(docs, "ClusterRole",
                                                          "agvisor-runtimeclasses")
        granted = permissions(role["rules"]) | permissions(cluster["rules"])
        self.assertEqual(granted, runtime_permissions())
        # The cluster-scoped resource is granted by the ClusterRole only (a Role cannot).
        self.assertEqual(permissions(cluster["rules"]), {"node.k8s.io/runtimeclasses get"})

    def test_runtimeclass_is_the_default_class_with_a_gvisor_handler(self):
        rc = one(load("runtimeclass.yaml"), "RuntimeClass")
        self.assertEqual(rc["metadata"]["name"], "gvisor")  # KubernetesRuntime::Options
        self.assertIn(rc["handler"], ("runsc", "gvisor"))

    def test_agvisord_manifest_references_hold(self):
        docs, rbac = load("agvisord.yaml"), load("rbac.yaml")
        sa = one(docs, "ServiceAccount")["metadata"]["name"]
        deployment = one(docs, "Deployment")
        pod = deployment["spec"]["template"]
        self.assertEqual(pod["spec"]["serviceAccountName"], sa)
        self.assertTrue(pod["spec"]["automountServiceAccountToken"])
        self.assertTrue(matches(deployment["spec"]["selector"]["matchLabels"],
                                pod["metadata"]["labels"]))

        binding = one(docs, "RoleBinding")
        self.assertEqual(binding["roleRef"]["kind"], "Role")
        one(rbac, "Role", binding["roleRef"]["name"])
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": sa}])
        cluster_binding = one(docs, "ClusterRoleBinding")
        self.assertEqual(cluster_binding["roleRef"]["kind"], "ClusterRole")
        one(rbac, "ClusterRole", cluster_binding["roleRef"]["name"])
        # A ClusterRoleBinding must name the service account's namespace: the documented one.
        self.assertEqual(cluster_binding["subjects"],
                         [{"kind": "ServiceAccount", "name": sa, "namespace": "agvisor"}])
        with open(os.path.join(ROOT, "docs/kubernetes.md")) as f:
            self.assertIn("kubectl -n agvisor apply -f deploy/agvisord.yaml", f.read())

        (container,) = pod["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        service = one(docs, "Service")
        self.assertTrue(matches(service["spec"]["selector"], pod["metadata"]["labels"]))
        for p in service["spec"]["ports"]:
            self.assertIn(p["targetPort"], ports)
        policy = one(docs, "NetworkPolicy")
        self.assertTrue(matches(policy["spec"]["podSelector"]["matchLabels"],
                                pod["metadata"]["labels"]))
        self.assertEqual([p["port"] for p in policy["spec"]["ingress"][0]["ports"]],
                         list(ports.values()))
        # Sandboxes (label agvisor) are kept out.
        self.assertEqual(policy["spec"]["ingress"][0]["from"][0]["podSelector"],
                         {"matchExpressions": [{"key": "agvisor", "operator": "DoesNotExist"}]})

        args = container["args"]
        self.assertIn("--host=kube:", args)
        self.assertIn(f"--listen=0.0.0.0:{ports['http']}", args)
        token = next(a.split("=", 1)[1] for a in args if a.startswith("--token-file="))
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mount = next(m for m in container["volumeMounts"]
                     if token.startswith(m["mountPath"] + "/"))
        secret = volumes[mount["name"]]["secret"]
        self.assertEqual(secret["defaultMode"], 0o400)  # agvisord refuses group/other bits
        self.assertEqual([i["path"] for i in secret["items"]], [os.path.basename(token)])
        self.assertEqual(container["securityContext"]["runAsUser"], 0)  # a Secret's files: root's
        self.assertEqual(container["readinessProbe"]["httpGet"]["path"], "/v1/health")

    def test_images_name_a_placeholder_registry_the_build_script_agrees_with(self):
        """Issue 32, point 6: an image name without a registry ("agvisor/agvisord:latest") is
        looked up by a real cluster's nodes in a public registry, where anyone may publish under
        it. deploy/ names a registry, a placeholder that cannot resolve (.invalid, RFC 2606) for
        the operator to replace, and the build script's default tag is the Deployment's image."""
        (container,) = one(load("agvisord.yaml"), "Deployment")["spec"]["template"]["spec"][
            "containers"]
        image = container["image"]
        registry = image.split("/", 1)[0]
        self.assertEqual(registry, "registry.example.invalid", image)
        # The agent image of the sandboxes it makes comes from the same registry.
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        self.assertEqual(env.get("AGVISOR_KUBE_REGISTRY"), registry)
        with open(os.path.join(DEPLOY, "build-agvisord-image")) as f:
            tags = re.findall(r"^tag=(\S+)$", f.read(), re.M)
        self.assertEqual(tags, [image])
        with open(os.path.join(ROOT, "docs/kubernetes.md")) as f:
            self.assertIn(image, f.read())

    def test_agvisord_accepts_the_manifest_args(self):
        args = one(load("agvisord.yaml"), "Deployment")["spec"]["template"]["spec"][
            "containers"][0]["args"]
        run = subprocess.run([AGVISORD, "--check", *args], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("agvisord options checked", run.stderr)
        # --check does check: without --allow-remote the address is refused, a flag it does not
        # know fails, and so does a host that is no address.
        no_remote = [a for a in args if a != "--allow-remote"]
        bad_host = ["--host=kube:///Not_A_Namespace" if a == "--host=kube:" else a for a in args]
        for bad in (no_remote, [*args, "--no-such-flag"], bad_host):
            run = subprocess.run([AGVISORD, "--check", *bad], capture_output=True, text=True)
            self.assertNotEqual(run.returncode, 0, bad)

    def test_the_agvisord_image_runs_the_manifest_args(self):
        """deploy/build-agvisord-image's image, run as the Deployment runs it (read-only root, no
        capabilities, no privilege escalation, under runsc), has what agvisord loads: --check
        passes with the manifest's args, and it holds no shell."""
        tag = f"agvisor/agvisord:deploy-test-{os.getpid()}"
        built = subprocess.run([os.path.join(DEPLOY, "build-agvisord-image"), AGVISORD,
                                "--tag", tag], capture_output=True, text=True)
        self.assertEqual(built.returncode, 0, built.stderr)
        try:
            args = one(load("agvisord.yaml"), "Deployment")["spec"]["template"]["spec"][
                "containers"][0]["args"]
            run = subprocess.run(["docker", "run", "--rm", "--runtime=runsc", "--read-only",
                                  "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                                  "--network", "none", tag, "--check", *args],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn("agvisord options checked", run.stderr)
            # Nothing but agvisord and its libraries: no shell to run.
            shell = subprocess.run(["docker", "run", "--rm", "--runtime=runsc",
                                    "--entrypoint", "/bin/sh", tag, "-c", "true"],
                                   capture_output=True, text=True, timeout=60)
            self.assertNotEqual(shell.returncode, 0, shell.stdout)
        finally:
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)

    def test_kubectl_applies_rbac_and_runtimeclass_to_the_double(self):
        double = Double(extra_args=("--rbac", os.path.join(DEPLOY, "rbac.yaml")))
        try:
            def kubectl(*args, check=True):
                return subprocess.run(["kubectl", "--kubeconfig", double.kubeconfig, *args],
                                      capture_output=True, text=True, check=check)
            # --validate=false: the double serves no OpenAPI documents (README.md).
            for f in ("rbac.yaml", "runtimeclass.yaml"):
                out = kubectl("apply", "--validate=false", "-f", os.path.join(DEPLOY, f)).stdout
                self.assertIn("created", out)
            role = json.loads(kubectl("get", "role", "agvisor", "-o", "json").stdout)
            self.assertEqual(permissions(role["rules"]),
                             permissions(one(load("rbac.yaml"), "Role")["rules"]))
            rc = json.loads(kubectl("get", "runtimeclass", "gvisor", "-o", "json").stdout)
            self.assertEqual(rc["handler"], "runsc")
            # kubectl auth can-i sends a SelfSubjectAccessReview: answered by the Role's rules.
            for verb, resource, allowed in (("create", "pods --subresource=exec", True),
                                            ("get", "pods --subresource=exec", True),
                                            ("list", "pods", True),
                                            ("create", "pods --subresource=attach", False),
                                            ("get", "networkpolicies.networking.k8s.io", False),
                                            ("get", "runtimeclasses.node.k8s.io", True),
                                            ("delete", "runtimeclasses.node.k8s.io", False)):
                r = kubectl("auth", "can-i", verb, *resource.split(), check=False)
                self.assertEqual(r.stdout.strip(), "yes" if allowed else "no",
                                 f"{verb} {resource}: {r.stdout} {r.stderr}")
        finally:
            double.stop()


    def test_doctor_names_the_permissions_a_role_lacks(self):
        docs = load("rbac.yaml")
        role = one(docs, "Role")
        role["rules"] = [r for r in role["rules"] if r["resources"] != ["pods/exec"]]
        double = None
        try:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                yaml.safe_dump_all(docs, f)
                f.flush()
                double = Double(extra_args=("--rbac", f.name))
            run = subprocess.run([AGVISOR, "--host", "kube:", "doctor"], capture_output=True,
                                 text=True, env=dict(os.environ, KUBECONFIG=double.kubeconfig))
            self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
            self.assertRegex(run.stdout, r"(?m)^FAIL +rbac +namespace default: denied 2 of 12 "
                                         r"permissions the runtime uses: core/pods/exec create, "
                                         r"core/pods/exec get\n +fix: kubectl apply -n default "
                                         r"-f deploy/rbac\.yaml")
        finally:
            if double:
                double.stop()

    def test_doctor_warns_when_the_server_answers_no_access_review(self):
        double = Double(extra_args=("--deny-access-reviews",))
        try:
            run = subprocess.run([AGVISOR, "--host", "kube:", "doctor"], capture_output=True,
                                 text=True, env=dict(os.environ, KUBECONFIG=double.kubeconfig))
            # A warning, not a failure: the permissions may well be there. (This double has no
            # RuntimeClass: that line fails, and so does the exit code.)
            self.assertRegex(run.stdout, r"(?m)^warn +rbac +could not check the 12 permissions "
                                         r"the runtime uses \(SelfSubjectAccessReview: .*forbidden"
                                         r".*\)\n +fix: compare your role with deploy/rbac\.yaml")
            self.assertNotRegex(run.stdout, r"(?m)^FAIL +rbac")
        finally:
            double.stop()


if __name__ == "__main__":
    AGVISORD, AGVISOR = sys.argv.pop(1), sys.argv.pop(1)
    unittest.main()
