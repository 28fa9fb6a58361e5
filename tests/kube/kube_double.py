#!/usr/bin/env python3
"""A loopback Kubernetes API test double for agvisor's Kubernetes runtime tests (not the product).

It serves the subset of the Kubernetes API that agvisor's KubernetesRuntime, `kubectl` and Debian's
python3-kubernetes client use, with the real semantics (resourceVersion, Status objects, label and
field selectors, watch, pods/exec and pods/attach over WebSocket v5/v4), and runs every Pod as real
containers on the local dockerd under gVisor (runsc). README.md beside this file says what it
implements, what it does not, and why.

    python3 tests/kube/kube_double.py --kubeconfig OUT [--namespace default] [--pids-limit N]
                                      [--name-prefix kd-] [--rbac deploy/rbac.yaml]

It prints `READY https://127.0.0.1:PORT` once serving, and serves until SIGTERM/SIGINT, then removes
every container and volume it made. Needs Debian's python3-aiohttp, the `docker` CLI, `openssl`.

Concurrency: one asyncio loop owns all state; Docker is reached through its Engine API on the unix
socket (aiohttp client) and, for the exec/attach streams, through `docker exec`/`docker attach`
subprocesses.
"""

import argparse
import asyncio
import base64
import collections
import copy
import datetime
import fcntl
import ipaddress
import json
import os
import pty
import re
import secrets
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import termios
import time
import urllib.parse
import uuid

try:
    import aiohttp
    from aiohttp import web
except ImportError:  # e.g. a pyenv or virtualenv python3 first on PATH: use Debian's
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath(
            "/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    raise SystemExit("kube_double: needs Debian's python3-aiohttp (apt-get install "
                     "python3-aiohttp; scripts/setup-host --test-deps installs it)")

LABEL = "agvisor-kube-double"  # on every container and volume the double makes (value "1")
OWNER_LABEL = LABEL + ".owner"  # "<pid>-<process start time>": which run of the double made it
POD_LABEL = LABEL + ".pod"  # the Pod's metadata.uid
NODE_NAME = "agvisor-kube-double"
GVISOR_HANDLERS = ("runsc", "gvisor")
STREAM_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STREAM_CLOSE = 255  # v5.channel.k8s.io: [255, N] closes stream N (only stdin, 0, means anything)
# What dockerd writes into an exec's attached stdout, and nothing else, when the exec could not be
# started (its error text and CRLF; the docker CLI copies it to its stdout). kubelet never relays
# that as output: it answers with a Failure Status on the error stream (StreamSession.run).
EXEC_START_FAILED = b"OCI runtime exec failed"
EXEC_START_FAILURE = re.compile(rb"OCI runtime exec failed[^\n]*\r\n")
DOCKER_API = "http://docker/v1.41"  # Engine API 1.41 = Docker 20.10, the oldest daemon we meet
WATCH_LOG_SIZE = 10000  # events kept for watches that resume from a resourceVersion

# ---- resources served ----------------------------------------------------------------------------
# plural -> (group, version, kind, namespaced, short names, verbs)
RESOURCES = {
    "namespaces": ("", "v1", "Namespace", False, ["ns"], ["get", "list", "watch"]),
    "pods": ("", "v1", "Pod", True, ["po"],
             ["create", "delete", "deletecollection", "get", "list", "patch", "watch"]),
    "persistentvolumeclaims": ("", "v1", "PersistentVolumeClaim", True, ["pvc"],
                               ["create", "delete", "deletecollection", "get", "list", "watch"]),
    "networkpolicies": ("networking.k8s.io", "v1", "NetworkPolicy", True, ["netpol"],
                        ["create", "delete", "deletecollection", "get", "list", "watch"]),
    "runtimeclasses": ("node.k8s.io", "v1", "RuntimeClass", False, [],
                       ["create", "delete", "deletecollection", "get", "list", "watch"]),
    # Stored only (kubectl apply -f deploy/rbac.yaml); requests are not authorized by them.
    "roles": ("rbac.authorization.k8s.io", "v1", "Role", True, [],
              ["create", "delete", "get", "list", "watch"]),
    "clusterroles": ("rbac.authorization.k8s.io", "v1", "ClusterRole", False, [],
                     ["create", "delete", "get", "list", "watch"]),
    # Never stored: a POST is answered (SelfSubjectAccessReview below).
    "selfsubjectaccessreviews": ("authorization.k8s.io", "v1", "SelfSubjectAccessReview", False,
                                 [], ["create"]),
}
GROUPS = sorted({r[0] for r in RESOURCES.values() if r[0]})
POD_SUBRESOURCES = {"attach": "PodAttachOptions", "exec": "PodExecOptions", "log": "Pod"}
# Real deletes of these return the object; the others return a Status (as the real registries do).
RETURNS_DELETED_OBJECT = ("pods", "persistentvolumeclaims")


PROTOBUF = "application/vnd.kubernetes.protobuf"


def protobuf_fields(data):
    """The fields of one protobuf message: {number: [value, ...]}, length-delimited values as
    bytes, varints as ints (the wire format; no schema)."""
    def varint(i):
        n = shift = 0
        while True:
            if i >= len(data):
                raise bad_request("truncated protobuf body")
            b = data[i]
            n |= (b & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if not b & 0x80:
                return n, i
    fields, i = {}, 0
    while i < len(data):
        key, i = varint(i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(i)
        elif wire == 2:
            size, i = varint(i)
            value, i = data[i:i + size], i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = data[i:i + size], i + size
        else:
            raise bad_request(f"protobuf wire type {wire} is not served here")
        fields.setdefault(number, []).append(value)
    return fields


def self_subject_access_review_of_protobuf(body):
    """A SelfSubjectAccessReview sent as Kubernetes protobuf ("k8s\\0" + runtime.Unknown whose
    raw (2) is the object: spec (2) > resourceAttributes (1) > namespace 1, verb 2, group 3,
    version 4, resource 5, subresource 6, name 7; k8s.io/api/authorization/v1/generated.proto),
    as the JSON form."""
    if not body.startswith(b"k8s\x00"):
        raise ApiError(415, "UnsupportedMediaType", "a protobuf body must start with k8s\\0")
    raw = protobuf_fields(body[4:]).get(2, [b""])[0]
    spec = protobuf_fields(raw).get(2, [b""])[0]
    attrs = protobuf_fields(spec).get(1)
    out = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
           "metadata": {}, "spec": {}}
    if attrs:
        names = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource",
                 6: "subresource", 7: "name"}
        out["spec"]["resourceAttributes"] = {
            names[n]: v[0].decode() for n, v in protobuf_fields(attrs[0]).items() if n in names}
    return out


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(msg):
    print(f"kube-double: {msg}", file=sys.stderr, flush=True)


# ---- errors as Kubernetes Status objects ---------------------------------------------------------
class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            s["details"] = self.details
        return s


def qualified(plural):
    group = RESOURCES[plural][0] if plural in RESOURCES else ""
    return f"{plural}.{group}" if group else plural


def details(plural, name):
    d = {"name": name, "kind": plural}
    group = RESOURCES[plural][0] if plural in RESOURCES else ""
    if group:
        d["group"] = group
    return d


def not_found(plural, name):
    return ApiError(404, "NotFound", f'{qualified(plural)} "{name}" not found',
                    details(plural, name))


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def invalid(plural, name, causes):
    """causes: [(field, reason, message)], reason as in the real API (FieldValueInvalid, ...)."""
    kind = RESOURCES[plural][2]
    texts = [f"{f}: {m}" for f, _, m in causes]
    text = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    d = {"name": name, "kind": kind,
         "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]}
    group = RESOURCES[plural][0]
    if group:
        d["group"] = group
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}', d)


def networkpolicy_peer_errors(peer, field):
    """The real validation of a NetworkPolicyPeer (pkg/apis/networking/validation): one kind of
    peer; an ipBlock's cidr a CIDR, each except a CIDR strictly inside it."""
    if "ipBlock" in peer:
        if "podSelector" in peer or "namespaceSelector" in peer:
            return [(field, "FieldValueForbidden",
                     "may not specify both ipBlock and another peer")]
        block, errs = peer["ipBlock"], []
        try:
            cidr = ipaddress.ip_network(block.get("cidr", ""), strict=False)
        except ValueError:
            return [(f"{field}.ipBlock.cidr", "FieldValueInvalid",
                     f'Invalid value: "{block.get("cidr", "")}": must be a valid CIDR')]
        for k, text in enumerate(block.get("except") or []):
            try:
                ex = ipaddress.ip_network(text, strict=False)
            except ValueError:
                errs.append((f"{field}.ipBlock.except[{k}]", "FieldValueInvalid",
                             f'Invalid value: "{text}": must be a valid CIDR'))
                continue
            if (ex.version != cidr.version or ex.prefixlen <= cidr.prefixlen
                    or not ex.subnet_of(cidr)):
                errs.append((f"{field}.ipBlock.except[{k}]", "FieldValueInvalid",
                             f'Invalid value: "{text}": must be a strict subset of `cidr`'))
        return errs
    if "podSelector" not in peer and "namespaceSelector" not in peer:
        return [(field, "FieldValueRequired", "must specify a peer")]
    return []


def networkpolicy_port_errors(port, field):
    protocol, number = port.get("protocol", "TCP"), port.get("port")
    if protocol not in ("TCP", "UDP", "SCTP"):
        return [(f"{field}.protocol", "FieldValueNotSupported",
                 f'Unsupported value: "{protocol}": supported values: "SCTP", "TCP", "UDP"')]
    if isinstance(number, int) and not 1 <= number <= 65535:
        return [(f"{field}.port", "FieldValueInvalid",
                 f"Invalid value: {number}: must be between 1 and 65535, inclusive")]
    return []


def parse_bool(value, default=False):
    if value is None:
        return default
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False", ""):
        return False
    raise bad_request(f"invalid boolean value {value!r}")


# ---- names, labels, quantities -------------------------------------------------------------------
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def label_key_ok(key):
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(LABEL_NAME.match(name))


def label_value_ok(value):
    return isinstance(value, str) and len(value) <= 63 and bool(LABEL_VALUE.match(value))


QUANTITY = re.compile(
    r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$")
SUFFIX = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
          "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def parse_quantity(value):
    """A resource.Quantity ("500m", "1.5", "512Mi", "1e9") as a float, or None if malformed."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = QUANTITY.match(value) if isinstance(value, str) else None
    if not m:
        return None
    suffix = m.group(2)
    if suffix and suffix[0] in "eE":
        return float(m.group(1)) * 10 ** int(suffix[1:])
    return float(m.group(1)) * SUFFIX[suffix]


# ---- selectors -----------------------------------------------------------------------------------
SEL_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
SEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
SEL_SET = re.compile(rf"^({SEL_KEY})\s+(in|notin)\s*\((.*)\)$")
SEL_EQ = re.compile(rf"^({SEL_KEY})\s*(==|=|!=)\s*({SEL_VALUE})$")
SEL_EXISTS = re.compile(rf"^(!?)\s*({SEL_KEY})$")


def split_top_level(text):
    """Splits "a in (x,y),b=c" at the commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def parse_label_selector(text):
    """A labelSelector query string as a list of (key, op, values); op in exists, !exists, in,
    notin (= and == are in with one value, != is notin). Raises a 400 ApiError when malformed."""
    reqs = []
    if not text or not text.strip():
        return reqs
    for part in split_top_level(text):
        part = part.strip()
        if m := SEL_SET.match(part):
            values = [v.strip() for v in m.group(4).split(",")]
            if not all(re.match(rf"^{SEL_VALUE}$", v) for v in values):
                raise bad_request(f"unable to parse requirement: invalid value in {part!r}")
            reqs.append((m.group(1), m.group(3), set(values)))
        elif m := SEL_EQ.match(part):
            reqs.append((m.group(1), "notin" if m.group(3) == "!=" else "in", {m.group(4)}))
        elif m := SEL_EXISTS.match(part):
            reqs.append((m.group(2), "!exists" if m.group(1) else "exists", None))
        else:
            raise bad_request(f"unable to parse requirement: {part!r} is not a valid label "
                              "selector term (key, !key, key=value, key!=value, key in (a,b), "
                              "key notin (a,b))")
    return reqs


def labels_match(reqs, labels):
    labels = labels or {}
    for key, op, values in reqs:
        present = key in labels
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
        if op == "in" and (not present or labels[key] not in values):
            return False
        if op == "notin" and present and labels[key] in values:
            return False
    return True


def label_selector_object_match(selector, labels):
    """A metav1.LabelSelector object (NetworkPolicy podSelector): matchLabels + matchExpressions."""
    labels = labels or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), set(e.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


FIELDS = {
    "metadata.name": lambda o: o["metadata"].get("name", ""),
    "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
}
POD_FIELDS = {
    "status.phase": lambda o: o.get("status", {}).get("phase", ""),
    "spec.nodeName": lambda o: o.get("spec", {}).get("nodeName", ""),
    "spec.restartPolicy": lambda o: o.get("spec", {}).get("restartPolicy", ""),
}


def parse_field_selector(text, plural):
    reqs = []
    if not text:
        return reqs
    known = dict(FIELDS, **(POD_FIELDS if plural == "pods" else {}))
    for part in text.split(","):
        m = re.match(r"^\s*([a-zA-Z.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid field selector {part!r}")
        if m.group(1) not in known:
            raise bad_request(f'"{m.group(1)}" is not a known field selector: only '
                              + ", ".join(sorted(known)))
        reqs.append((known[m.group(1)], m.group(2) != "!=", m.group(3)))
    return reqs


def fields_match(reqs, obj):
    return all((get(obj) == value) == equal for get, equal, value in reqs)


# ---- Docker Engine API ---------------------------------------------------------------------------
class DockerError(Exception):
    def __init__(self, status, message):
        super().__init__(f"docker: {message} (HTTP {status})")
        self.status = status


class Docker:
    def __init__(self):
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        if not host.startswith("unix://"):
            raise SystemExit(f"kube_double: DOCKER_HOST={host}: only a unix socket is supported")
        self.socket = host[len("unix://"):]
        self.session = None

    async def open(self):
        self.session = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=self.socket, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))

    async def call(self, method, path, params=None, body=None, ok=(200, 201, 204, 304)):
        async with self.session.request(method, DOCKER_API + path, params=params, json=body) as r:
            data = await r.read()
            if r.status not in ok:
                try:
                    message = json.loads(data).get("message", "")
                except ValueError:
                    message = data.decode(errors="replace")
                raise DockerError(r.status, f"{method} {path}: {message}")
            if data and r.content_type == "application/json":
                return json.loads(data)
            return data

    async def containers(self, label):
        return await self.call("GET", "/containers/json",
                               {"all": "1", "filters": json.dumps({"label": [label]})})

    async def volumes(self, label):
        res = await self.call("GET", "/volumes", {"filters": json.dumps({"label": [label]})})
        return res.get("Volumes") or []

    async def remove_container(self, cid):
        await self.call("DELETE", f"/containers/{cid}", {"force": "1", "v": "1"}, ok=(204, 404))

    async def remove_volume(self, name):
        await self.call("DELETE", f"/volumes/{name}", {"force": "1"}, ok=(204, 404, 409))


def process_start_time(pid):
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_alive(owner):
    pid, _, start = owner.partition("-")
    return pid.isdigit() and process_start_time(int(pid)) == start


# ---- the API server ------------------------------------------------------------------------------
class PodRun:
    """What the double knows of a Pod beyond its object: its docker side."""

    def __init__(self, uid, network_none):
        self.uid = uid
        self.network_none = network_none
        self.containers = {}  # container name -> docker id (init and main)
        self.volumes = []  # emptyDir docker volumes
        self.task = None
        self.deadline = None  # asyncio.TimerHandle
        self.deadline_hit = False
        self.killer = None  # the task deleting it


class Watcher:
    def __init__(self, plural, ns, lsel, fsel):
        self.plural, self.ns, self.lsel, self.fsel = plural, ns, lsel, fsel
        self.queue = asyncio.Queue()

    def matches(self, obj):
        if obj is None:
            return False
        if self.ns and obj["metadata"].get("namespace") != self.ns:
            return False
        return (labels_match(self.lsel, obj["metadata"].get("labels"))
                and fields_match(self.fsel, obj))

    def translate(self, etype, obj, old):
        """The event this watcher sees: a MODIFIED that enters or leaves its selection is an
        ADDED or DELETED, as the real watch cache sends it."""
        if etype == "ADDED":
            return "ADDED" if self.matches(obj) else None
        if etype == "DELETED":
            return "DELETED" if self.matches(obj) else None
        was, now = self.matches(old), self.matches(obj)
        if was and now:
            return "MODIFIED"
        if now:
            return "ADDED"
        if was:
            return "DELETED"
        return None


class KubeDouble:
    def __init__(self, args):
        self.args = args
        self.namespace = args.namespace
        self.prefix = args.name_prefix
        self.token = secrets.token_urlsafe(32)
        self.instance = secrets.token_hex(3)
        self.owner = f"{os.getpid()}-{process_start_time(os.getpid())}"
        self.rv = 100
        self.store = {plural: {} for plural in RESOURCES}
        self.events = collections.deque(maxlen=WATCH_LOG_SIZE)  # (rv, plural, type, obj, old)
        self.log_floor = 0  # resourceVersions at or below this are too old to resume from
        self.watchers = set()
        self.runs = {}  # pod uid -> PodRun
        self.docker = Docker()
        self.port = None
        self.stopping = False
        self.rbac_rules = None  # [(a Role's rule, the rule)] from --rbac, else everything allowed
        if args.rbac:
            import yaml  # python3-yaml, which python3-kubernetes depends on
            with open(args.rbac) as f:
                docs = [d for d in yaml.safe_load_all(f) if d]
            self.rbac_rules = [(d["kind"] == "Role", rule) for d in docs
                               if d.get("kind") in ("Role", "ClusterRole")
                               for rule in d.get("rules") or []]
        for ns in sorted({self.namespace, "default", "kube-system"}):
            self.store["namespaces"][("", ns)] = {
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "uid": str(uuid.uuid4()), "resourceVersion": self.bump(),
                             "creationTimestamp": now_rfc3339(),
                             "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}

    # -- storage and events --
    def bump(self):
        self.rv += 1
        return str(self.rv)

    def emit(self, plural, etype, obj, old=None):
        rv = int(obj["metadata"]["resourceVersion"])
        obj, old = copy.deepcopy(obj), copy.deepcopy(old)
        if len(self.events) == self.events.maxlen:
            self.log_floor = self.events[0][0]
        self.events.append((rv, plural, etype, obj, old))
        for w in list(self.watchers):
            if w.plural == plural:
                w.queue.put_nowait((rv, etype, obj, old))

    def mutate(self, plural, key, fn, uid=None):
        """Applies fn to the stored object (if it is still the one with this uid), bumps its
        resourceVersion and tells the watchers. Returns the object or None."""
        obj = self.store[plural].get(key)
        if obj is None or (uid is not None and obj["metadata"]["uid"] != uid):
            return None
        old = copy.deepcopy(obj)
        fn(obj)
        obj["metadata"]["resourceVersion"] = self.bump()
        self.emit(plural, "MODIFIED", obj, old)
        return obj

    def remove(self, plural, key):
        obj = self.store[plural].pop(key, None)
        if obj is not None:
            obj["metadata"]["resourceVersion"] = self.bump()
            self.emit(plural, "DELETED", obj)
        return obj

    # -- HTTP entry --
    async def handle(self, request):
        started = time.monotonic()
        status = 500
        try:
            if not secrets.compare_digest(request.headers.get("Authorization", ""),
                                          f"Bearer {self.token}"):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            resp = await self.route(request)
            status = resp.status
            return resp
        except ApiError as e:
            status = e.code
            return web.json_response(e.status(), status=e.code)
        except DockerError as e:
            status = 500
            return web.json_response(ApiError(500, "InternalError", str(e)).status(), status=500)
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug of the double: say so as a Status, and log where
            import traceback
            traceback.print_exc()
            status = 500
            return web.json_response(ApiError(500, "InternalError", f"kube_double: {e!r}").status(),
                                     status=500)
        finally:
            log(f"{request.method} {request.path_qs} -> {status} "
                f"({(time.monotonic() - started) * 1000:.0f} ms)")

    async def route(self, request):
        path = request.path.rstrip("/") or "/"
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if path == "/version":
            return web.json_response({
                "major": "1", "minor": "32", "gitVersion": "v1.32.0-agvisor-kube-double",
                "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2026-12-02T00:00:00Z",
                "goVersion": "go1.23", "compiler": "gc", "platform": "linux/amd64"})
        if path == "/api":
            return web.json_response({
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                "serverAddress": f"127.0.0.1:{self.port}"}]})
        if path == "/apis":
            groups = []
            for group in GROUPS:
                gv = {"groupVersion": f"{group}/v1", "version": "v1"}
                groups.append({"name": group, "versions": [gv], "preferredVersion": gv})
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1",
                                      "groups": groups})
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis" and parts[2] == "v1" and parts[1] in GROUPS:
            group, rest = parts[1], parts[3:]
        elif len(parts) == 2 and parts[0] == "apis" and parts[1] in GROUPS:
            gv = {"groupVersion": f"{parts[1]}/v1", "version": "v1"}
            return web.json_response({"kind": "APIGroup", "apiVersion": "v1", "name": parts[1],
                                      "versions": [gv], "preferredVersion": gv})
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           {"causes": [{"reason": "UnexpectedServerResponse",
                                        "message": f"{request.path} is not served by the "
                                                   "agvisor Kubernetes test double"}]})
        if not rest:
            return web.json_response(self.resource_list(group))
        # /namespaces/NS/PLURAL[/NAME[/SUB]], /namespaces[/NAME], /PLURAL[/NAME]
        ns = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if plural not in RESOURCES or RESOURCES[plural][0] != group or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespaced = RESOURCES[plural][3]
        if ns and not namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if namespaced and not ns and name is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if ns:
            self.require_namespace(ns)
        query = request.query
        method = request.method
        if plural == "namespaces" and method != "GET":
            raise method_not_allowed()
        if sub is not None:
            if plural != "pods" or sub not in POD_SUBRESOURCES:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            pod = self.get(plural, ns, name)
            if sub == "log":
                if method != "GET":
                    raise method_not_allowed()
                return await self.pod_log(request, pod)
            if method not in ("GET", "POST"):
                raise method_not_allowed()
            return await self.pod_stream(request, pod, sub)
        if plural == "selfsubjectaccessreviews":
            if name is not None or method != "POST":
                raise method_not_allowed()
            if self.args.deny_access_reviews:  # a cluster whose authorizer denies even these
                raise ApiError(403, "Forbidden",
                               'selfsubjectaccessreviews.authorization.k8s.io is forbidden: User '
                               '"agvisor-test" cannot create resource "selfsubjectaccessreviews" '
                               'in API group "authorization.k8s.io" at the cluster scope',
                               {"group": "authorization.k8s.io",
                                "kind": "selfsubjectaccessreviews"})
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype == PROTOBUF:  # kubectl's typed client (auth can-i) sends these as protobuf
                review = self_subject_access_review_of_protobuf(await request.read())
            else:
                review = await self.body(request)
            return web.json_response(self.review_access(review), status=201)
        if name is None:
            if method == "GET":
                lsel = parse_label_selector(query.get("labelSelector", ""))
                fsel = parse_field_selector(query.get("fieldSelector", ""), plural)
                if parse_bool(query.get("watch")):
                    return await self.watch(request, plural, ns, lsel, fsel)
                return web.json_response(self.list(plural, ns, lsel, fsel))
            if method == "POST":
                body = await self.body(request)
                obj = await self.create(plural, ns, body, query)
                return web.json_response(obj, status=201)
            if method == "DELETE":
                lsel = parse_label_selector(query.get("labelSelector", ""))
                fsel = parse_field_selector(query.get("fieldSelector", ""), plural)
                opts = await self.body(request, optional=True)
                deleted = []
                for obj in self.list(plural, ns, lsel, fsel)["items"]:
                    deleted.append(await self.delete(plural, ns, obj["metadata"]["name"], opts,
                                                     query))
                return web.json_response(self.list_object(plural, deleted))
            raise method_not_allowed()
        if method == "GET":
            if parse_bool(query.get("watch")):  # the old /watch-by-name form via ?watch
                fsel = parse_field_selector(f"metadata.name={name}", plural)
                return await self.watch(request, plural, ns, [], fsel)
            return web.json_response(self.get(plural, ns, name))
        if method == "DELETE":
            opts = await self.body(request, optional=True)
            result = await self.delete(plural, ns, name, opts, query)
            if plural in RETURNS_DELETED_OBJECT:
                return web.json_response(result)
            return web.json_response({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": dict(details(plural, name), uid=result["metadata"]["uid"])})
        if method == "PATCH" and plural == "pods":
            return web.json_response(await self.patch_pod(request, ns, name))
        raise method_not_allowed()

    def review_access(self, review):
        """A SelfSubjectAccessReview for the double's one token: allowed by the rules of the Roles
        and ClusterRoles of --rbac FILE as if both were bound to it (a Role's rules grant only
        namespaced resources), else allowed everything."""
        attrs = (review.get("spec") or {}).get("resourceAttributes")
        if not isinstance(attrs, dict) or not attrs.get("verb") or not attrs.get("resource"):
            raise invalid("selfsubjectaccessreviews", "", [(
                "spec.resourceAttributes", "FieldValueRequired",
                "Required value: verb and resource (non-resource URLs are not served here)")])
        resource = attrs["resource"] + (f"/{attrs['subresource']}" if attrs.get("subresource")
                                        else "")
        namespaced = RESOURCES.get(attrs["resource"], (None, None, None, True))[3]
        if self.rbac_rules is None:
            allowed, reason = True, "the agvisor Kubernetes test double allows its token everything"
        else:
            allowed = any(
                (namespaced or not role_scoped)
                and any(g in ("*", attrs.get("group", "")) for g in rule.get("apiGroups", []))
                and any(r in ("*", resource) for r in rule.get("resources", []))
                and any(v in ("*", attrs["verb"]) for v in rule.get("verbs", []))
                for role_scoped, rule in self.rbac_rules)
            reason = f"by the rules of {self.args.rbac}" if allowed else ""
        out = copy.deepcopy(review)
        out.update({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"})
        out.setdefault("metadata", {})["creationTimestamp"] = None
        out["status"] = {"allowed": allowed, "reason": reason}
        return out

    def resource_list(self, group):
        resources = []
        for plural, (g, _, kind, namespaced, short, verbs) in RESOURCES.items():
            if g != group:
                continue
            r = {"name": plural, "singularName": kind.lower(), "namespaced": namespaced,
                 "kind": kind, "verbs": verbs}
            if short:
                r["shortNames"] = short
            if plural == "pods":
                r["categories"] = ["all"]
            resources.append(r)
            if plural == "pods":
                for sub, subkind in POD_SUBRESOURCES.items():
                    resources.append({"name": f"pods/{sub}", "singularName": "",
                                      "namespaced": True, "kind": subkind,
                                      "verbs": ["get"] if sub == "log" else ["create", "get"]})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/v1" if group else "v1", "resources": resources}

    async def body(self, request, optional=False):
        raw = await request.read()
        if not raw:
            if optional:
                return {}
            raise bad_request("the request has no body: send the object as JSON")
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise bad_request(f"the request body is not JSON: {e}")
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        return body

    def require_namespace(self, ns):
        if ("", ns) not in self.store["namespaces"]:
            raise not_found("namespaces", ns)

    def get(self, plural, ns, name):
        obj = self.store[plural].get((ns, name))
        if obj is None:
            raise not_found(plural, name)
        return obj

    def list_object(self, plural, items):
        group, version, kind = RESOURCES[plural][:3]
        stripped = []
        for obj in items:
            obj = dict(obj)
            obj.pop("kind", None)
            obj.pop("apiVersion", None)
            stripped.append(obj)
        return {"kind": f"{kind}List", "apiVersion": f"{group}/{version}" if group else version,
                "metadata": {"resourceVersion": str(self.rv)}, "items": stripped}

    def list(self, plural, ns, lsel, fsel):
        items = [o for (ons, _), o in sorted(self.store[plural].items())
                 if (not ns or ons == ns) and labels_match(lsel, o["metadata"].get("labels"))
                 and fields_match(fsel, o)]
        return self.list_object(plural, items)

    # -- watch --
    async def watch(self, request, plural, ns, lsel, fsel):
        query = request.query
        rv = query.get("resourceVersion", "")
        if rv not in ("", "0") and not rv.isdigit():
            raise bad_request(f"invalid resourceVersion {rv!r}")
        timeout = query.get("timeoutSeconds")
        deadline = time.monotonic() + (int(timeout) if timeout and timeout.isdigit() else 1800)
        w = Watcher(plural, ns, lsel, fsel)
        # Registering and taking the snapshot happen with no await between: nothing is missed
        # and nothing is sent twice.
        self.watchers.add(w)
        initial, expired = [], False
        if rv in ("", "0"):
            current = sorted(self.store[plural].values(),
                             key=lambda o: int(o["metadata"]["resourceVersion"]))
            initial = [("ADDED", copy.deepcopy(o)) for o in current if w.matches(o)]
        elif int(rv) < self.log_floor:
            expired = True
        else:
            for erv, eplural, etype, obj, old in self.events:
                if eplural == plural and erv > int(rv):
                    t = w.translate(etype, obj, old)
                    if t:
                        initial.append((t, obj))
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            if expired:
                gone = ApiError(410, "Expired", f"too old resource version: {rv} "
                                f"({self.log_floor + 1})").status()
                await resp.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return resp
            for etype, obj in initial:
                await resp.write(json.dumps({"type": etype, "object": obj}).encode() + b"\n")
            while not self.stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(w.queue.get(), left)
                except asyncio.TimeoutError:
                    break
                if item is None:
                    break
                _, etype, obj, old = item
                t = w.translate(etype, obj, old)
                if t:
                    await resp.write(json.dumps({"type": t, "object": obj}).encode() + b"\n")
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self.watchers.discard(w)
        return resp

    # -- create --
    async def create(self, plural, ns, body, query):
        group, version, kind, namespaced = RESOURCES[plural][:4]
        api_version = f"{group}/{version}" if group else version
        if body.get("kind", kind) != kind or body.get("apiVersion", api_version) != api_version:
            raise bad_request(f"the object is {body.get('apiVersion')}/{body.get('kind')}, "
                              f"this path takes {api_version} {kind}")
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = body["metadata"] = {}
        body["kind"], body["apiVersion"] = kind, api_version
        if namespaced:
            if meta.get("namespace", ns) != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(
                secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        name = meta.get("name", "")
        if not name:
            raise invalid(plural, "", [("metadata.name", "FieldValueRequired",
                                        "Required value: name or generateName is required")])
        if len(name) > 253 or not DNS_SUBDOMAIN.match(name):
            raise invalid(plural, name, [(
                "metadata.name", "FieldValueInvalid",
                f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower "
                "case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character")])
        for k, v in (meta.get("labels") or {}).items():
            if not label_key_ok(k) or not label_value_ok(v):
                raise invalid(plural, name, [("metadata.labels", "FieldValueInvalid",
                                              f"Invalid value: {k}={v!r}: not a valid label")])
        key = (ns, name)
        if key in self.store[plural]:
            raise ApiError(409, "AlreadyExists", f'{qualified(plural)} "{name}" already exists',
                           details(plural, name))
        for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        run = None
        if plural == "pods":
            run = self.admit_pod(body)
        elif plural == "persistentvolumeclaims":
            self.admit_pvc(body)
        elif plural == "networkpolicies":
            self.admit_networkpolicy(body)
        elif plural == "runtimeclasses":
            self.admit_runtimeclass(body)
        if query.get("dryRun"):
            return body
        if plural == "persistentvolumeclaims":
            vol = self.pvc_volume(ns, name)
            await self.docker.call("POST", "/volumes/create", body={
                "Name": vol, "Driver": "local", "Labels": self.docker_labels()})
        if key in self.store[plural]:  # created by a concurrent request while we awaited docker
            raise ApiError(409, "AlreadyExists", f'{qualified(plural)} "{name}" already exists',
                           details(plural, name))
        meta["resourceVersion"] = self.bump()
        self.store[plural][key] = body
        self.emit(plural, "ADDED", body)
        if run is not None:
            self.runs[meta["uid"]] = run
            run.task = asyncio.ensure_future(self.run_pod(key, run))
        return body

    def docker_labels(self, pod_uid=None):
        labels = {LABEL: "1", OWNER_LABEL: self.owner}
        if pod_uid:
            labels[POD_LABEL] = pod_uid
        return labels

    def pvc_volume(self, ns, name):
        return f"{self.prefix}{self.instance}-pvc-{ns}-{name}"

    def admit_pvc(self, pvc):
        name = pvc["metadata"]["name"]
        spec = pvc.get("spec") or {}
        pvc["spec"] = spec
        if not spec.get("accessModes"):
            raise invalid("persistentvolumeclaims", name, [
                ("spec.accessModes", "FieldValueRequired", "Required value: at least 1 access "
                 "mode is required")])
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        if storage is None or parse_quantity(storage) is None:
            raise invalid("persistentvolumeclaims", name, [
                ("spec.resources[storage]", "FieldValueRequired",
                 "Required value: spec.resources.requests.storage is required")])
        spec.setdefault("volumeMode", "Filesystem")
        spec["volumeName"] = f"pvc-{pvc['metadata']['uid']}"
        pvc["status"] = {"phase": "Bound", "accessModes": spec["accessModes"],
                         "capacity": {"storage": storage}}
        pvc["metadata"].setdefault("finalizers", ["kubernetes.io/pvc-protection"])

    def admit_networkpolicy(self, np):
        name = np["metadata"]["name"]
        spec = np.get("spec")
        if not isinstance(spec, dict) or not isinstance(spec.get("podSelector"), dict):
            raise invalid("networkpolicies", name, [
                ("spec.podSelector", "FieldValueRequired", "Required value")])
        if not spec.get("policyTypes"):  # the real defaulting
            spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])
        for t in spec["policyTypes"]:
            if t not in ("Ingress", "Egress"):
                raise invalid("networkpolicies", name, [(
                    "spec.policyTypes", "FieldValueNotSupported",
                    f'Unsupported value: "{t}": supported values: "Egress", "Ingress"')])
        errs = []
        for direction, peers in (("ingress", "from"), ("egress", "to")):
            for i, rule in enumerate(spec.get(direction) or []):
                at = f"spec.{direction}[{i}]"
                for j, peer in enumerate(rule.get(peers) or []):
                    errs += networkpolicy_peer_errors(peer, f"{at}.{peers}[{j}]")
                for j, port in enumerate(rule.get("ports") or []):
                    errs += networkpolicy_port_errors(port, f"{at}.ports[{j}]")
        if errs:
            raise invalid("networkpolicies", name, errs)

    def admit_runtimeclass(self, rc):
        name = rc["metadata"]["name"]
        handler = rc.get("handler")
        if not handler:
            raise invalid("runtimeclasses", name, [("handler", "FieldValueRequired",
                                                    "Required value")])
        if not isinstance(handler, str) or not DNS_LABEL.match(handler):
            raise invalid("runtimeclasses", name, [(
                "handler", "FieldValueInvalid", f"Invalid value: {handler!r}: a lowercase RFC "
                "1123 label must consist of lower case alphanumeric characters or '-'")])

    def deny_all_applies(self, pod):
        """A NetworkPolicy in the pod's namespace selecting it, with policyTypes Ingress and
        Egress and no rules: the double gives such a pod no network at all."""
        ns, labels = pod["metadata"]["namespace"], pod["metadata"].get("labels")
        for (pns, _), np in self.store["networkpolicies"].items():
            spec = np["spec"]
            if (pns == ns and set(spec.get("policyTypes", [])) == {"Ingress", "Egress"}
                    and not spec.get("ingress") and not spec.get("egress")
                    and label_selector_object_match(spec["podSelector"], labels)):
                return True
        return False

    def admit_pod(self, pod):
        """Validation and defaulting of a new Pod, the RuntimeClass admission check, and what
        the double refuses. Returns its PodRun."""
        name = pod["metadata"]["name"]
        spec = pod.get("spec")
        errs = []

        def err(field, reason, message):
            errs.append((field, reason, message))

        if not isinstance(spec, dict):
            raise invalid("pods", name, [("spec", "FieldValueRequired", "Required value")])
        containers = spec.get("containers")
        if not containers:
            raise invalid("pods", name, [("spec.containers", "FieldValueRequired",
                                          "Required value")])
        # The RuntimeClass admission plugin runs before validation, and answers 403.
        rc_name = spec.get("runtimeClassName")
        if rc_name is not None and ("", rc_name) not in self.store["runtimeclasses"]:
            raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: pod rejected: '
                           f'RuntimeClass "{rc_name}" not found', details("pods", name))
        spec.setdefault("restartPolicy", "Always")
        if spec["restartPolicy"] != "Never":
            err("spec.restartPolicy", "FieldValueNotSupported",
                f'Unsupported value: "{spec["restartPolicy"]}": the agvisor test double runs '
                'restartPolicy "Never" only (set spec.restartPolicy: Never)')
        for f in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(f):
                err(f"spec.{f}", "FieldValueForbidden",
                    "Forbidden: the agvisor test double never shares host namespaces")
        ads = spec.get("activeDeadlineSeconds")
        if ads is not None and (not isinstance(ads, int) or ads <= 0):
            err("spec.activeDeadlineSeconds", "FieldValueInvalid",
                f"Invalid value: {ads}: must be between 1 and 2147483647, inclusive")
        volumes = {}
        for i, v in enumerate(spec.get("volumes") or []):
            vname = v.get("name", "")
            if not DNS_LABEL.match(vname) or vname in volumes:
                err(f"spec.volumes[{i}].name", "FieldValueInvalid",
                    f"Invalid value: {vname!r}: a unique RFC 1123 label is required")
            if "emptyDir" in v:
                ed = v["emptyDir"] or {}
                if ed.get("sizeLimit") is not None and parse_quantity(ed["sizeLimit"]) is None:
                    err(f"spec.volumes[{i}].emptyDir.sizeLimit", "FieldValueInvalid",
                        f"Invalid value: {ed['sizeLimit']!r}: not a quantity")
                if ed.get("medium", "") not in ("", "Memory"):
                    err(f"spec.volumes[{i}].emptyDir.medium", "FieldValueNotSupported",
                        f"Unsupported value: {ed.get('medium')!r}")
            elif "persistentVolumeClaim" in v:
                if not (v["persistentVolumeClaim"] or {}).get("claimName"):
                    err(f"spec.volumes[{i}].persistentVolumeClaim.claimName",
                        "FieldValueRequired", "Required value")
            else:
                err(f"spec.volumes[{i}]", "FieldValueNotSupported",
                    "Unsupported value: the agvisor test double supports emptyDir and "
                    "persistentVolumeClaim volumes only")
            volumes[vname] = v
        seen = set()
        pod_sc = spec.get("securityContext") or {}
        for field in ("initContainers", "containers"):
            for i, c in enumerate(spec.get(field) or []):
                at = f"spec.{field}[{i}]"
                cname = c.get("name", "")
                if not DNS_LABEL.match(cname) or cname in seen:
                    err(f"{at}.name", "FieldValueInvalid",
                        f"Invalid value: {cname!r}: a unique RFC 1123 label is required")
                seen.add(cname)
                if not c.get("image"):
                    err(f"{at}.image", "FieldValueRequired", "Required value")
                c.setdefault("imagePullPolicy", "Always" if ":" not in c.get("image", "")
                             or c.get("image", "").endswith(":latest") else "IfNotPresent")
                c.setdefault("terminationMessagePath", "/dev/termination-log")
                c.setdefault("terminationMessagePolicy", "File")
                sc = c.get("securityContext") or {}
                if sc.get("privileged"):
                    err(f"{at}.securityContext.privileged", "FieldValueForbidden",
                        "Forbidden: the agvisor test double never runs privileged containers")
                limits = (c.get("resources") or {}).get("limits") or {}
                requests = (c.get("resources") or {}).get("requests") or {}
                for rname, q in list(limits.items()) + list(requests.items()):
                    if parse_quantity(q) is None:
                        err(f"{at}.resources.limits[{rname}]", "FieldValueInvalid",
                            f"Invalid value: {q!r}: quantities must match the regular "
                            "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
                    elif rname in limits and rname in requests and parse_quantity(
                            requests[rname]) > parse_quantity(limits[rname]):
                        err(f"{at}.resources.requests", "FieldValueInvalid",
                            f"Invalid value: {requests[rname]!r}: must be less than or equal "
                            f"to {rname} limit of {limits[rname]}")
                if limits and not requests:
                    c.setdefault("resources", {})["requests"] = dict(limits)
                for j, m in enumerate(c.get("volumeMounts") or []):
                    if m.get("name") not in volumes:
                        err(f"{at}.volumeMounts[{j}].name", "FieldValueNotFound",
                            f'Not found: "{m.get("name")}"')
                    if not m.get("mountPath", "").startswith("/"):
                        err(f"{at}.volumeMounts[{j}].mountPath", "FieldValueInvalid",
                            "Invalid value: must be an absolute path")
                    if m.get("subPath"):
                        err(f"{at}.volumeMounts[{j}].subPath", "FieldValueNotSupported",
                            "Unsupported value: the agvisor test double has no subPath mounts")
                for j, e in enumerate(c.get("env") or []):
                    ref = (e.get("valueFrom") or {}).get("fieldRef")
                    if "valueFrom" in e and (not ref or ref.get("fieldPath") not in (
                            "metadata.name", "metadata.namespace", "metadata.uid",
                            "spec.nodeName", "spec.serviceAccountName")):
                        err(f"{at}.env[{j}].valueFrom", "FieldValueNotSupported",
                            "Unsupported value: the agvisor test double resolves fieldRef "
                            "metadata.name|namespace|uid and spec.nodeName only")
        if errs:
            raise invalid("pods", name, errs)
        # Defaults the real API server writes.
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("securityContext", pod_sc)
        spec.setdefault("enableServiceLinks", True)
        spec["nodeName"] = NODE_NAME  # "scheduled" at once: the double is a one-node cluster
        resources = [c.get("resources") or {} for c in containers]
        all_limited = all((r.get("limits") or {}).keys() >= {"cpu", "memory"} for r in resources)
        any_resources = any(r.get("limits") or r.get("requests") for r in resources)
        now = now_rfc3339()
        pod["status"] = {
            "phase": "Pending",
            "qosClass": "Guaranteed" if all_limited else ("Burstable" if any_resources
                                                          else "BestEffort"),
            "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": now}],
            "hostIP": "127.0.0.1",
            "initContainerStatuses": [self.waiting_status(c, "PodInitializing")
                                      for c in spec.get("initContainers") or []],
            "containerStatuses": [self.waiting_status(
                c, "PodInitializing" if spec.get("initContainers") else "ContainerCreating")
                for c in containers],
        }
        if not pod["status"]["initContainerStatuses"]:
            del pod["status"]["initContainerStatuses"]
        return PodRun(pod["metadata"]["uid"], self.deny_all_applies(pod))

    @staticmethod
    def waiting_status(c, reason, message=None):
        waiting = {"reason": reason}
        if message:
            waiting["message"] = message
        return {"name": c["name"], "state": {"waiting": waiting}, "lastState": {},
                "ready": False, "restartCount": 0, "image": c["image"], "imageID": "",
                "started": False}

    # -- pod lifecycle on docker --
    def set_condition(self, pod, ctype, status, reason=None, message=None):
        conds = pod["status"].setdefault("conditions", [])
        cond = next((c for c in conds if c["type"] == ctype), None)
        if cond is None:
            cond = {"type": ctype, "status": None, "lastProbeTime": None}
            conds.append(cond)
        if cond["status"] != status:
            cond["lastTransitionTime"] = now_rfc3339()
        cond["status"] = status
        for k, v in (("reason", reason), ("message", message)):
            if v:
                cond[k] = v
            else:
                cond.pop(k, None)

    @staticmethod
    def container_status(pod, field, name):
        return next(s for s in pod["status"][field] if s["name"] == name)

    def pod_failed_to_start(self, key, run, field, cname, reason, message):
        """The kubelet's view of a container that cannot be created: it stays waiting, the pod
        stays Pending (restartPolicy Never, so nothing retries), with the reason."""
        def fn(pod):
            st = self.container_status(pod, field, cname)
            st["state"] = {"waiting": {"reason": reason, "message": message}}
        self.mutate("pods", key, fn, run.uid)
        log(f"pod {key[0]}/{key[1]}: {reason}: {message}")

    async def run_pod(self, key, run):
        try:
            await self.run_pod_steps(key, run)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a docker failure: the pod fails, with the reason
            log(f"pod {key[0]}/{key[1]}: {e!r}")
            message = str(e)

            def fn(pod):
                if pod["status"]["phase"] not in ("Succeeded", "Failed"):
                    pod["status"]["phase"] = "Failed"
                    pod["status"]["reason"] = "DockerError"
                    pod["status"]["message"] = message
            self.mutate("pods", key, fn, run.uid)

    async def run_pod_steps(self, key, run):
        pod = copy.deepcopy(self.store["pods"][key])
        spec, ns = pod["spec"], key[0]
        handler = "runsc"
        if spec.get("runtimeClassName"):
            rc = self.store["runtimeclasses"].get(("", spec["runtimeClassName"]))
            handler = rc["handler"] if rc else None
        first = (spec.get("initContainers") or spec["containers"])[0]["name"]
        field0 = "initContainerStatuses" if spec.get("initContainers") else "containerStatuses"
        if handler not in GVISOR_HANDLERS:
            return self.pod_failed_to_start(
                key, run, field0, first, "CreateContainerError",
                f"RuntimeClass handler {handler!r}: the agvisor test double runs gVisor only "
                f"(handlers {', '.join(GVISOR_HANDLERS)}; docker runtime runsc)")
        runtime = "runsc-none" if run.network_none else "runsc"
        # Claims must exist (a real pod would stay unschedulable until they do).
        for v in spec.get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and (ns, claim) not in self.store["persistentvolumeclaims"]:
                msg = f'persistentvolumeclaim "{claim}" not found'

                def unschedulable(p, msg=msg):
                    self.set_condition(p, "PodScheduled", "False", "Unschedulable", msg)
                return self.mutate("pods", key, unschedulable, run.uid)
        # Images are never pulled (imagePullPolicy is treated as Never: no registry here).
        image_ids = {}
        for field in ("initContainers", "containers"):
            for c in spec.get(field) or []:
                try:
                    info = await self.docker.call("GET", f"/images/{c['image']}/json")
                    image_ids[c["name"]] = info["Id"]
                except DockerError as e:
                    if e.status != 404:
                        raise
                    return self.pod_failed_to_start(
                        key, run, field[:-1] + "Statuses", c["name"], "ErrImageNeverPull",
                        f'Container image "{c["image"]}" is not present with pull policy of '
                        "Never (the agvisor test double never pulls)")
        mounts = await self.make_volumes(pod, run)

        def started(p):
            p["status"]["startTime"] = now_rfc3339()
            self.set_condition(p, "Initialized", "False" if spec.get("initContainers") else "True",
                               "ContainersNotInitialized" if spec.get("initContainers") else None)
            self.set_condition(p, "Ready", "False", "ContainersNotReady")
            self.set_condition(p, "ContainersReady", "False", "ContainersNotReady")
        self.mutate("pods", key, started, run.uid)
        if spec.get("activeDeadlineSeconds"):
            loop = asyncio.get_running_loop()
            run.deadline = loop.call_later(
                spec["activeDeadlineSeconds"],
                lambda: asyncio.ensure_future(self.deadline_exceeded(key, run)))
        # Init containers: to completion, one after the other.
        for c in spec.get("initContainers") or []:
            cid = await self.create_container(pod, c, run, runtime, mounts, None, image_ids)
            await self.start_container(key, run, "initContainerStatuses", c, cid)
            state = await self.wait_container(key, run, "initContainerStatuses", c, cid)
            if run.deadline_hit:
                return
            if state["exitCode"] != 0:
                def init_failed(p):
                    p["status"]["phase"] = "Failed"
                    for st in p["status"]["containerStatuses"]:
                        st["state"] = {"waiting": {"reason": "PodInitializing"}}
                self.mutate("pods", key, init_failed, run.uid)
                return self.finish(key, run)
        if spec.get("initContainers"):
            self.mutate("pods", key, lambda p: self.set_condition(p, "Initialized", "True"),
                        run.uid)
        # Main containers: the first one owns the network, the others join it.
        ids, net_of = [], None
        for c in spec["containers"]:
            cid = await self.create_container(pod, c, run, runtime, mounts, net_of, image_ids)
            net_of = net_of or cid
            ids.append(cid)
        for c, cid in zip(spec["containers"], ids):
            if run.deadline_hit:
                return
            await self.start_container(key, run, "containerStatuses", c, cid)
        info = await self.docker.call("GET", f"/containers/{ids[0]}/json")
        ip = (info.get("NetworkSettings") or {}).get("IPAddress") or ""

        def running(p):
            if p["status"]["phase"] != "Pending":
                return
            p["status"]["phase"] = "Running"
            if ip:
                p["status"]["podIP"] = ip
                p["status"]["podIPs"] = [{"ip": ip}]
            if all("running" in s["state"] for s in p["status"]["containerStatuses"]):
                self.set_condition(p, "Ready", "True")
                self.set_condition(p, "ContainersReady", "True")
        self.mutate("pods", key, running, run.uid)
        await asyncio.gather(*(self.wait_container(key, run, "containerStatuses", c, cid)
                               for c, cid in zip(spec["containers"], ids)))
        self.finish(key, run)

    def finish(self, key, run):
        if run.deadline:
            run.deadline.cancel()

        def fn(p):
            if p["status"]["phase"] in ("Succeeded", "Failed"):
                return
            codes = [s["state"].get("terminated", {}).get("exitCode")
                     for s in p["status"]["containerStatuses"]]
            p["status"]["phase"] = "Succeeded" if all(c == 0 for c in codes) else "Failed"
            reason = "PodCompleted" if p["status"]["phase"] == "Succeeded" else "PodFailed"
            self.set_condition(p, "Ready", "False", reason)
            self.set_condition(p, "ContainersReady", "False", reason)
        self.mutate("pods", key, fn, run.uid)

    async def deadline_exceeded(self, key, run):
        """activeDeadlineSeconds passed: the kubelet fails the pod, then kills its containers."""
        def fn(p):
            if p["status"]["phase"] in ("Succeeded", "Failed"):
                return
            run.deadline_hit = True
            p["status"]["phase"] = "Failed"
            p["status"]["reason"] = "DeadlineExceeded"
            p["status"]["message"] = "Pod was active on the node longer than the specified deadline"
            self.set_condition(p, "Ready", "False", "PodFailed")
            self.set_condition(p, "ContainersReady", "False", "PodFailed")
        self.mutate("pods", key, fn, run.uid)
        if run.deadline_hit:
            for cid in list(run.containers.values()):
                try:
                    await self.docker.call("POST", f"/containers/{cid}/kill", ok=(204, 404, 409))
                except DockerError as e:
                    log(f"deadline kill {cid[:12]}: {e}")

    async def make_volumes(self, pod, run):
        """Volume name -> ("volume", docker volume) | ("tmpfs", bytes)."""
        mounts = {}
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], run.uid
        mem_limit = sum(parse_quantity((c.get("resources") or {}).get("limits", {}).get(
            "memory", 0)) or 0 for c in pod["spec"]["containers"])
        for v in pod["spec"].get("volumes") or []:
            if "persistentVolumeClaim" in v:
                mounts[v["name"]] = ("volume", self.pvc_volume(ns, v["persistentVolumeClaim"]
                                                               ["claimName"]))
            elif (v.get("emptyDir") or {}).get("medium") == "Memory":
                size = parse_quantity((v["emptyDir"] or {}).get("sizeLimit") or 0) or mem_limit
                mounts[v["name"]] = ("tmpfs", int(size or 64 * 2**20))
            else:
                vol = f"{self.prefix}{ns}-{name}-{uid[:8]}-{v['name']}"
                await self.docker.call("POST", "/volumes/create", body={
                    "Name": vol, "Driver": "local", "Labels": self.docker_labels(uid)})
                run.volumes.append(vol)
                mounts[v["name"]] = ("volume", vol)
        return mounts

    async def create_container(self, pod, c, run, runtime, mounts, net_of, image_ids):
        meta, spec = pod["metadata"], pod["spec"]
        env = []
        for e in c.get("env") or []:
            value = e.get("value", "")
            ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if ref:
                value = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"],
                         "metadata.uid": meta["uid"], "spec.nodeName": NODE_NAME,
                         "spec.serviceAccountName": spec["serviceAccountName"]}[ref]
            env.append(f"{e['name']}={value}")
        host = {"Runtime": runtime, "LogConfig": {"Type": "json-file", "Config": {}},
                "Mounts": [], "CapAdd": [], "CapDrop": [], "SecurityOpt": []}
        if net_of:
            host["NetworkMode"] = f"container:{net_of}"
        else:
            host["NetworkMode"] = "none" if run.network_none else "bridge"
        if self.args.pids_limit:
            host["PidsLimit"] = self.args.pids_limit
        limits = (c.get("resources") or {}).get("limits") or {}
        if "memory" in limits:
            host["Memory"] = host["MemorySwap"] = int(parse_quantity(limits["memory"]))
        if "cpu" in limits:
            host["NanoCpus"] = int(parse_quantity(limits["cpu"]) * 1e9)
        for m in c.get("volumeMounts") or []:
            kind, what = mounts[m["name"]]
            ro = bool(m.get("readOnly"))
            if kind == "volume":
                host["Mounts"].append({"Type": "volume", "Source": what,
                                       "Target": m["mountPath"], "ReadOnly": ro})
            elif m["mountPath"].rstrip("/") == "/dev/shm":
                host["ShmSize"] = what  # Docker's own /dev/shm, at the emptyDir's size
            else:
                host["Mounts"].append({"Type": "tmpfs", "Target": m["mountPath"],
                                       "ReadOnly": ro, "TmpfsOptions": {"SizeBytes": what}})
        sc = dict(spec.get("securityContext") or {}, **(c.get("securityContext") or {}))
        caps = sc.get("capabilities") or {}
        host["CapAdd"] = list(caps.get("add") or [])
        host["CapDrop"] = list(caps.get("drop") or [])
        if sc.get("allowPrivilegeEscalation") is False:
            host["SecurityOpt"].append("no-new-privileges")
        if sc.get("readOnlyRootFilesystem"):
            host["ReadonlyRootfs"] = True
        if spec.get("securityContext", {}).get("supplementalGroups"):
            host["GroupAdd"] = [str(g) for g in spec["securityContext"]["supplementalGroups"]]
        user = None
        if sc.get("runAsUser") is not None:
            user = str(sc["runAsUser"]) + (f":{sc['runAsGroup']}" if sc.get("runAsGroup")
                                           is not None else "")
        config = {
            "Image": image_ids[c["name"]], "Env": env, "Labels": dict(
                self.docker_labels(run.uid), **{LABEL + ".container": c["name"],
                                                LABEL + ".pod-name": meta["name"]}),
            "Tty": bool(c.get("tty")), "OpenStdin": bool(c.get("stdin")),
            "StdinOnce": bool(c.get("stdin")) and bool(c.get("stdinOnce")),
            "AttachStdin": False, "AttachStdout": False, "AttachStderr": False,
            "HostConfig": host,
        }
        if not net_of:
            config["Hostname"] = meta["name"][:63]
        if c.get("command"):  # Kubernetes command = Docker entrypoint, args = cmd
            config["Entrypoint"] = c["command"]
            config["Cmd"] = c.get("args") or []
        elif c.get("args"):
            config["Cmd"] = c["args"]
        if c.get("workingDir"):
            config["WorkingDir"] = c["workingDir"]
        if user:
            config["User"] = user
        cname = f"{self.prefix}{meta['namespace']}-{meta['name']}-{run.uid[:8]}-{c['name']}"
        res = await self.docker.call("POST", "/containers/create", {"name": cname}, body=config)
        run.containers[c["name"]] = res["Id"]
        return res["Id"]

    async def start_container(self, key, run, field, c, cid):
        await self.docker.call("POST", f"/containers/{cid}/start")
        info = await self.docker.call("GET", f"/containers/{cid}/json")

        def fn(p):
            st = self.container_status(p, field, c["name"])
            st["containerID"] = f"docker://{cid}"
            st["imageID"] = info.get("Image", "")
            if info["State"].get("Running"):
                st["state"] = {"running": {"startedAt": docker_time(info["State"]["StartedAt"])}}
                st["started"] = True
                st["ready"] = field == "containerStatuses"
        self.mutate("pods", key, fn, run.uid)

    async def wait_container(self, key, run, field, c, cid):
        await self.docker.call("POST", f"/containers/{cid}/wait", {"condition": "not-running"})
        info = await self.docker.call("GET", f"/containers/{cid}/json")
        # dockerd may record a container's OOM event after its exit (seconds later on a loaded
        # machine): a memory-limited container that was SIGKILLed is looked at again, for up to
        # 6 s, before it is called anything but OOMKilled.
        for delay in (0.3, 0.7, 1.0, 1.5, 2.5):
            s = info["State"]
            if s.get("OOMKilled") or s.get("ExitCode") != 137 or not (
                    info.get("HostConfig") or {}).get("Memory"):
                break
            await asyncio.sleep(delay)
            info = await self.docker.call("GET", f"/containers/{cid}/json")
        s = info["State"]
        code = s.get("ExitCode", 0)
        reason = "OOMKilled" if s.get("OOMKilled") else ("Completed" if code == 0 else "Error")
        term = {"exitCode": code, "reason": reason, "startedAt": docker_time(s.get("StartedAt")),
                "finishedAt": docker_time(s.get("FinishedAt")), "containerID": f"docker://{cid}"}
        if code > 128 and not s.get("OOMKilled"):
            term["signal"] = code - 128

        def fn(p):
            st = self.container_status(p, field, c["name"])
            st["state"] = {"terminated": term}
            st["ready"] = False
            st["started"] = False
            if field == "containerStatuses":
                self.set_condition(p, "Ready", "False", "ContainersNotReady")
                self.set_condition(p, "ContainersReady", "False", "ContainersNotReady")
        self.mutate("pods", key, fn, run.uid)
        return term

    # -- delete --
    async def delete(self, plural, ns, name, opts, query):
        obj = self.get(plural, ns, name)
        pre = (opts.get("preconditions") or {}).get("uid")
        if pre and pre != obj["metadata"]["uid"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(plural)}'
                           f' "{name}": Precondition failed: UID in precondition: {pre}, UID in '
                           f'object meta: {obj["metadata"]["uid"]}', details(plural, name))
        if query.get("dryRun") or opts.get("dryRun"):
            return obj
        key = (ns, name)
        if plural == "pods":
            grace = opts.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            grace = int(grace) if grace is not None else obj["spec"].get(
                "terminationGracePeriodSeconds", 30)
            return await self.delete_pod(key, obj, max(grace, 0))
        if plural == "persistentvolumeclaims":
            if self.claim_in_use(ns, name):  # kubernetes.io/pvc-protection holds it
                if not obj["metadata"].get("deletionTimestamp"):
                    def mark(o):
                        o["metadata"]["deletionTimestamp"] = now_rfc3339()
                        o["metadata"]["deletionGracePeriodSeconds"] = 0
                    self.mutate(plural, key, mark)
                return obj
            await self.docker.remove_volume(self.pvc_volume(ns, name))
        return self.remove(plural, key)

    def claim_in_use(self, ns, claim):
        for (pns, _), pod in self.store["pods"].items():
            if pns == ns and any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim
                                 for v in pod["spec"].get("volumes") or []):
                return True
        return False

    async def delete_pod(self, key, obj, grace):
        uid = obj["metadata"]["uid"]
        run = self.runs.get(uid)
        # Pods that finished (or never ran) go at once, as the real graceful-delete strategy says.
        if obj["status"]["phase"] in ("Succeeded", "Failed"):
            grace = 0
        if obj["metadata"].get("deletionTimestamp") is None:
            def mark(o):
                when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
                    seconds=grace)
                o["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
                o["metadata"]["deletionGracePeriodSeconds"] = grace
            obj = self.mutate("pods", key, mark, uid)
            task = asyncio.ensure_future(self.kill_pod(key, uid, run, grace))
            if grace == 0:
                obj = copy.deepcopy(obj)
                self.remove("pods", key)
                self.release_claims(key[0])
                await asyncio.sleep(0)
            elif run:
                run.killer = task
        return obj

    async def kill_pod(self, key, uid, run, grace):
        """SIGTERM, the grace period, SIGKILL (docker stop -t), then the containers and the
        pod's emptyDir volumes go; then the object, if it is still there."""
        if run:
            if run.task:
                run.task.cancel()
                try:
                    await run.task
                except BaseException:
                    pass
            if run.deadline:
                run.deadline.cancel()
        try:
            for attempt in range(2):  # twice: a create cancelled in flight may land late
                found = await self.docker.containers(f"{POD_LABEL}={uid}")
                await asyncio.gather(*(self.docker.call(
                    "POST", f"/containers/{c['Id']}/stop", {"t": str(grace)}, ok=(204, 304, 404))
                    for c in found if c.get("State") == "running"), return_exceptions=True)
                await asyncio.gather(*(self.docker.remove_container(c["Id"]) for c in found),
                                     return_exceptions=True)
                if attempt == 0:
                    await asyncio.sleep(0.5)
            for vol in await self.docker.volumes(f"{POD_LABEL}={uid}"):
                await self.docker.remove_volume(vol["Name"])
        except DockerError as e:
            log(f"pod {key[0]}/{key[1]} cleanup: {e}")
        self.runs.pop(uid, None)
        obj = self.store["pods"].get(key)
        if obj is not None and obj["metadata"]["uid"] == uid:
            self.remove("pods", key)
            self.release_claims(key[0])

    def release_claims(self, ns):
        """PVCs whose deletion waited for their pods (pvc-protection) go when unused."""
        for (pns, name), pvc in list(self.store["persistentvolumeclaims"].items()):
            if pns == ns and pvc["metadata"].get("deletionTimestamp") and not self.claim_in_use(
                    ns, name):
                async def drop(name=name):
                    await self.docker.remove_volume(self.pvc_volume(ns, name))
                    self.remove("persistentvolumeclaims", (ns, name))
                asyncio.ensure_future(drop())

    # -- patch (metadata.labels/annotations of pods) --
    async def patch_pod(self, request, ns, name):
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
        if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           "unknown format - accepted media types include: "
                           "application/merge-patch+json, application/strategic-merge-patch+json")
        patch = await self.body(request)
        obj = self.get("pods", ns, name)
        extra = set(patch) - {"metadata", "kind", "apiVersion"}
        meta_extra = set(patch.get("metadata") or {}) - {"labels", "annotations", "name",
                                                         "namespace", "uid", "resourceVersion"}
        if extra or meta_extra:
            raise invalid("pods", name, [("spec", "FieldValueForbidden",
                                          "Forbidden: the agvisor test double patches "
                                          "metadata.labels and metadata.annotations only")])
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        if rv and rv != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods "{name}": '
                           "the object has been modified; please apply your changes to the "
                           "latest version and try again", details("pods", name))

        def fn(o):
            for field in ("labels", "annotations"):
                if field in (patch.get("metadata") or {}):
                    merged = dict(o["metadata"].get(field) or {})
                    for k, v in (patch["metadata"][field] or {}).items():
                        if v is None:
                            merged.pop(k, None)
                        else:
                            merged[k] = v
                    o["metadata"][field] = merged
        for k, v in ((patch.get("metadata") or {}).get("labels") or {}).items():
            if not label_key_ok(k) or (v is not None and not label_value_ok(v)):
                raise invalid("pods", name, [("metadata.labels", "FieldValueInvalid",
                                              f"Invalid value: {k}={v!r}")])
        return self.mutate("pods", (ns, name), fn)

    # -- pods/log --
    def pick_container(self, pod, query):
        names = [c["name"] for c in pod["spec"]["containers"]]
        all_names = names + [c["name"] for c in pod["spec"].get("initContainers") or []]
        cname = query.get("container")
        if not cname:
            if len(names) != 1:
                raise bad_request(f'a container name must be specified for pod '
                                  f'{pod["metadata"]["name"]}, choose one of: [{" ".join(names)}]')
            cname = names[0]
        if cname not in all_names:
            raise bad_request(f'container {cname} is not valid for pod {pod["metadata"]["name"]}')
        run = self.runs.get(pod["metadata"]["uid"])
        cid = run.containers.get(cname) if run else None
        return cname, cid

    async def pod_log(self, request, pod):
        query = request.query
        cname, cid = self.pick_container(pod, query)
        if parse_bool(query.get("previous")):
            raise bad_request(f'previous terminated container "{cname}" in pod '
                              f'"{pod["metadata"]["name"]}" not found')
        if cid is None:
            raise bad_request(f'container "{cname}" in pod "{pod["metadata"]["name"]}" is '
                              "waiting to start: ContainerCreating")
        params = {"stdout": "1", "stderr": "1",
                  "follow": "1" if parse_bool(query.get("follow")) else "0",
                  "timestamps": "1" if parse_bool(query.get("timestamps")) else "0"}
        if query.get("tailLines"):
            params["tail"] = query["tailLines"]
        if query.get("sinceSeconds"):
            params["since"] = str(int(time.time()) - int(query["sinceSeconds"]))
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None
        tty = any(c.get("tty") for c in pod["spec"]["containers"] if c["name"] == cname)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        sent = 0
        try:
            async with self.docker.session.get(f"{DOCKER_API}/containers/{cid}/logs",
                                               params=params) as r:
                while limit is None or sent < limit:
                    if tty:
                        chunk = await r.content.read(65536)
                        if not chunk:
                            break
                    else:  # Docker's multiplexed stream: 8-byte headers
                        try:
                            header = await r.content.readexactly(8)
                            chunk = await r.content.readexactly(struct.unpack(">I", header[4:])[0])
                        except asyncio.IncompleteReadError:
                            break
                    if limit is not None:
                        chunk = chunk[:limit - sent]
                    sent += len(chunk)
                    await resp.write(chunk)
        except (ConnectionResetError, ConnectionError):
            pass
        return resp

    # -- pods/exec and pods/attach over WebSocket --
    async def pod_stream(self, request, pod, sub):
        query = request.query
        cname, cid = self.pick_container(pod, query)
        # PodExecOptions/PodAttachOptions: stdout and stderr default to true, stdin and tty false.
        want = {s: parse_bool(query.get(s), s in ("stdout", "stderr"))
                for s in ("stdin", "stdout", "stderr", "tty")}
        command = None
        if sub == "exec":
            command = query.getall("command", [])
            if not command:
                raise bad_request("you must specify at least 1 command")
        if not (want["stdin"] or want["stdout"] or want["stderr"]):
            raise bad_request("you must specify at least 1 of stdin, stdout, stderr")
        status = next((s for s in pod["status"].get("containerStatuses", [])
                       + pod["status"].get("initContainerStatuses", []) if s["name"] == cname),
                      None)
        if cid is None or status is None or "running" not in status["state"]:
            raise bad_request(f'container {cname} is not running in pod '
                              f'{pod["metadata"]["name"]}: cannot {sub}')
        ws = web.WebSocketResponse(protocols=STREAM_PROTOCOLS, max_msg_size=0, autoping=True,
                                   timeout=5.0)
        ready = ws.can_prepare(request)
        if not ready.ok:
            raise bad_request("Upgrade request required: pods/exec and pods/attach speak "
                              "WebSocket (v5.channel.k8s.io, v4.channel.k8s.io); SPDY is not "
                              "served by the agvisor test double")
        if ready.protocol is None:
            raise bad_request("none of the offered WebSocket subprotocols is served: use "
                              + " or ".join(STREAM_PROTOCOLS))
        tty = want["tty"]
        if sub == "exec":
            argv = ["docker", "exec"] + (["-i"] if want["stdin"] else []) + (
                ["-t"] if tty else []) + [cid] + command
        else:
            argv = ["docker", "attach", "--sig-proxy=false"] + (
                [] if want["stdin"] else ["--no-stdin"]) + [cid]
        await ws.prepare(request)
        await StreamSession(ws, argv, want, tty, command).run()
        return ws


def docker_time(value):
    if not value or value.startswith("0001-"):
        return None
    return value[:19] + "Z"


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource")


def become_tty_session():
    """In the child of a PTY session: own the terminal, so that a resize (TIOCSWINSZ on the
    master) sends the docker CLI a SIGWINCH, which it forwards to the exec or attach."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class StreamSession:
    """One exec or attach: the WebSocket channels <-> a `docker exec`/`docker attach` process.

    Channels (the first byte of each binary message): 0 stdin, 1 stdout, 2 stderr, 3 error (a
    Status JSON, sent once at the end), 4 resize ({"Width","Height"}). v5.channel.k8s.io adds
    [255, N]: the client closed its stream N (for stdin: EOF to the process). v4 has no close:
    stdin ends with the connection."""

    def __init__(self, ws, argv, want, tty, command):
        """command: the exec'd argv (its exit code is reported), or None for an attach."""
        self.ws, self.argv, self.want, self.tty, self.command = ws, argv, want, tty, command
        self.v5 = ws.ws_protocol == STREAM_PROTOCOLS[0]
        self.send_lock = asyncio.Lock()
        self.proc = None
        self.master = None  # PTY master (tty sessions)
        # An exec's first stdout bytes, held while they may be dockerd's "could not start" text
        # (EXEC_START_FAILED): sent as output only once they are not (the end of run()).
        self.held = b"" if command is not None else None

    async def send(self, channel, data):
        async with self.send_lock:
            if not self.ws.closed:
                await self.ws.send_bytes(bytes([channel]) + data)

    async def pump(self, reader, channel):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                if channel == 1 and self.held is not None:
                    self.held += data
                    if self.held.startswith(EXEC_START_FAILED):
                        continue  # held until the end: maybe the exec never started
                    if EXEC_START_FAILED.startswith(self.held):
                        continue  # too short to tell yet
                    data, self.held = self.held, None
                if self.want["stdout"] if channel == 1 else self.want["stderr"]:
                    await self.send(channel, data)
        except (OSError, ConnectionError):  # EIO from a PTY master whose slave closed
            return

    async def write_stdin(self, data):
        try:
            if self.master is not None:
                while data:
                    try:
                        n = os.write(self.master_w, data)
                        data = data[n:]
                    except BlockingIOError:
                        await asyncio.sleep(0.005)
            elif self.proc.stdin is not None:
                self.proc.stdin.write(data)
                await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass

    async def close_stdin(self):
        if self.master is not None:
            await self.write_stdin(b"\x04")  # EOF at the start of a line, as a terminal does
        elif self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    def resize(self, payload):
        """Sets the PTY's size; the docker CLI forwards it to the exec on SIGWINCH. Its forward
        fails while runsc is still starting the exec (the CLI retries for ~0.5 s only), and a
        SIGWINCH before the CLI listens is lost: so the first size is set before the CLI starts
        (run()), and every size is signalled again later (resizing twice to a size is
        harmless)."""
        try:
            size = json.loads(payload)
            if self.master is not None:
                fcntl.ioctl(self.master_w, termios.TIOCSWINSZ,
                            struct.pack("HHHH", int(size["Height"]), int(size["Width"]), 0, 0))
        except (ValueError, KeyError, TypeError, OSError):
            return
        if self.proc is not None:
            self.resignal()

    def resignal(self):
        for delay in (0.5, 1.5, 3.0):
            asyncio.get_running_loop().call_later(delay, self.signal_winch)

    def signal_winch(self):
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGWINCH)
            except OSError:
                pass

    @staticmethod
    def message_bytes(msg):
        if msg.type == aiohttp.WSMsgType.BINARY:
            return msg.data
        if msg.type == aiohttp.WSMsgType.TEXT:
            return msg.data.encode()
        return None

    async def handle_message(self, data):
        if not data:
            return
        channel, payload = data[0], data[1:]
        if self.v5 and channel == STREAM_CLOSE:
            if payload[:1] == b"\x00" and self.want["stdin"]:
                await self.close_stdin()
        elif channel == 0 and self.want["stdin"]:
            await self.write_stdin(payload)
        elif channel == 4:
            self.resize(payload)

    async def from_client(self, first=None):
        if first:
            await self.handle_message(first)
        async for msg in self.ws:
            await self.handle_message(self.message_bytes(msg))

    async def run(self):
        loop = asyncio.get_running_loop()
        readers = []
        first = None
        try:
            if self.tty:
                self.master, slave = pty.openpty()
                self.master_w = os.dup(self.master)
                # Clients send the terminal size first: give it to the PTY before the CLI reads it.
                try:
                    msg = await self.ws.receive(timeout=1.0)
                    first = self.message_bytes(msg)
                    if first is None:  # the client closed already
                        os.close(slave)
                        os.close(self.master)
                        os.close(self.master_w)
                        return
                    if first[:1] == b"\x04":
                        self.resize(first[1:])
                        first = None
                except asyncio.TimeoutError:
                    pass
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv, stdin=slave, stdout=slave, stderr=slave,
                    preexec_fn=become_tty_session)
                os.close(slave)
                self.resignal()
                out = asyncio.StreamReader(limit=2**20)
                await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(out),
                                             os.fdopen(self.master, "rb", buffering=0))
                readers = [asyncio.ensure_future(self.pump(out, 1))]
            else:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv, stdin=subprocess.PIPE if self.want["stdin"] else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                readers = [asyncio.ensure_future(self.pump(self.proc.stdout, 1)),
                           asyncio.ensure_future(self.pump(self.proc.stderr, 2))]
        except OSError as e:
            await self.send(3, json.dumps(ApiError(500, "InternalError", str(e)).status()).encode())
            await self.ws.close()
            return
        client = asyncio.ensure_future(self.from_client(first))
        proc_done = asyncio.ensure_future(self.proc.wait())
        try:
            await asyncio.wait([client, proc_done], return_when=asyncio.FIRST_COMPLETED)
            if not proc_done.done():  # the client went away: end our side of the stream
                self.proc.terminate()
            code = await proc_done
            await asyncio.gather(*readers)
            if self.held and code != 0 and EXEC_START_FAILURE.fullmatch(self.held):
                # The process never ran. kubelet's answer (the CRI runtime's start error):
                # Failure with reason InternalError on the error stream, no exit code.
                cause = ("error executing command in container: "
                         + self.held.decode(errors="replace").strip())
                status = ApiError(500, "InternalError", "Internal error occurred: " + cause,
                                  {"causes": [{"message": cause}]}).status()
                await self.send(3, json.dumps(status).encode())
                await self.ws.close()
                return
            if self.held and self.want["stdout"]:  # output after all
                await self.send(1, self.held)
            if self.command is not None and code != 0:
                status = {
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": f"command terminated with non-zero exit code: error executing "
                               f"command {self.command}, exit code {code}",
                    "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
            else:
                status = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                          "status": "Success"}
            await self.send(3, json.dumps(status).encode())
            await self.ws.close()
        finally:  # also when aiohttp cancels the handler because the connection dropped
            client.cancel()
            for r in readers:
                r.cancel()
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            if self.master is not None:
                os.close(self.master_w)


# ---- TLS, kubeconfig, startup and shutdown -------------------------------------------------------
def make_certificates(workdir):
    """A throwaway CA and a server certificate for IP 127.0.0.1 (openssl CLI, EC P-256)."""
    def run(*argv):
        subprocess.run(["openssl", *argv], cwd=workdir, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj",
        "/CN=agvisor-kube-double-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(workdir, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                "authorityKeyIdentifier=keyid\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext")
    return [os.path.join(workdir, n) for n in ("ca.crt", "server.crt", "server.key")]


def write_kubeconfig(path, server, ca_pem, token, namespace):
    ca = base64.b64encode(ca_pem).decode()
    text = f"""apiVersion: v1
kind: Config
clusters:
- name: agvisor-double
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: agvisor-double
  user:
    token: {token}
contexts:
- name: agvisor-double
  context:
    cluster: agvisor-double
    user: agvisor-double
    namespace: {namespace}
current-context: agvisor-double
preferences: {{}}
"""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


async def remove_docker_objects(docker, owner_filter):
    """Removes the containers, then the volumes, whose owner label passes owner_filter."""
    containers = [c for c in await docker.containers(LABEL)
                  if owner_filter(c.get("Labels", {}).get(OWNER_LABEL, ""))]
    await asyncio.gather(*(docker.remove_container(c["Id"]) for c in containers),
                         return_exceptions=True)
    volumes = [v for v in await docker.volumes(LABEL)
               if owner_filter((v.get("Labels") or {}).get(OWNER_LABEL, ""))]
    await asyncio.gather(*(docker.remove_volume(v["Name"]) for v in volumes),
                         return_exceptions=True)
    return len(containers), len(volumes)


async def main_async(args):
    double = KubeDouble(args)
    await double.docker.open()
    try:
        await double.docker.call("GET", "/_ping")
    except (aiohttp.ClientError, OSError) as e:
        raise SystemExit(f"kube_double: cannot reach dockerd at {double.docker.socket}: {e}")
    swept = await remove_docker_objects(double.docker, lambda owner: not owner_alive(owner))
    if swept != (0, 0):
        log(f"removed {swept[0]} containers and {swept[1]} volumes left by earlier runs")
    workdir = tempfile.mkdtemp(prefix="kube-double-")
    try:
        ca, cert, key = make_certificates(workdir)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        double.port = sock.getsockname()[1]
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", double.handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.SockSite(runner, sock, ssl_context=ctx, shutdown_timeout=2.0)
        await site.start()
        server = f"https://127.0.0.1:{double.port}"
        with open(ca, "rb") as f:
            write_kubeconfig(args.kubeconfig, server, f.read(), double.token, args.namespace)
    finally:
        for name in os.listdir(workdir):
            os.unlink(os.path.join(workdir, name))
        os.rmdir(workdir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {server}", flush=True)
    await stop.wait()
    log("stopping: removing every container and volume this run made")
    double.stopping = True
    for w in list(double.watchers):
        w.queue.put_nowait(None)
    for run in list(double.runs.values()):
        if run.task:
            run.task.cancel()
        if run.deadline:
            run.deadline.cancel()
    await runner.cleanup()
    removed = await remove_docker_objects(double.docker, lambda owner: owner == double.owner)
    await asyncio.sleep(0.5)  # a create that was in flight when its task was cancelled
    late = await remove_docker_objects(double.docker, lambda owner: owner == double.owner)
    removed = (removed[0] + late[0], removed[1] + late[1])
    log(f"removed {removed[0]} containers and {removed[1]} volumes")
    await double.docker.session.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig")
    parser.add_argument("--namespace", default="default", help="the namespace that exists")
    parser.add_argument("--pids-limit", type=int, default=0,
                        help="the node's pod pids limit (docker --pids-limit); 0: none")
    parser.add_argument("--rbac", default="",
                        help="answer SelfSubjectAccessReviews by the Roles and ClusterRoles of "
                             "this YAML file (as if bound to the token); default: all allowed")
    parser.add_argument("--deny-access-reviews", action="store_true",
                        help="answer every SelfSubjectAccessReview 403 Forbidden")
    parser.add_argument("--name-prefix", default="kd-",
                        help="prefix of the docker containers and volumes made")
    args = parser.parse_args()
    if not DNS_LABEL.match(args.namespace):
        parser.error(f"--namespace {args.namespace!r} is not an RFC 1123 label")
    if not re.match(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$", args.name_prefix):
        parser.error("--name-prefix must be a valid docker name start ([a-zA-Z0-9][a-zA-Z0-9_.-]*)")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
